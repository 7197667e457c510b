"""JAX's persistent compilation cache for samflow's command lines and scripts, and
the one reason samflow's solver program could not be kept in it.

A solve compiles one XLA program per (method, or the family of methods of a
sweep, `samflow._engine.lanes.program_family`; clock, settings, batch shape, save count); on 2 CPU
cores that takes 4-40 s. With the persistent cache a second
process (the same sweep run again, the figure script after a sweep, a test run)
loads the program from disk instead. `enable_compilation_cache` turns it on for
the process; `prepare_process` (`samflow._util.x64`) calls it, so every entry point
(`python -m samflow.sweep`, `samflow.atlas`, the experiments, `scripts/*.py`)
uses it. Library imports (`import samflow`) leave JAX's settings alone.

**Where.** `$SAMFLOW_COMPILATION_CACHE` if set (a folder, or `off` to disable),
else `$JAX_COMPILATION_CACHE_DIR` if set, else `$XDG_CACHE_HOME/samflow/jax`
(default `~/.cache/samflow/jax`). JAX keys each entry by the program text, the
jax/jaxlib version, the backend and the compile options, so one folder serves
any number of versions and machines sharing it (only process 0 of a
`jax.distributed` run writes).

**Why `solve` was not kept.** JAX does not write a program that holds host
callbacks. diffrax's `diffeqsolve` checks its save times (`SaveAt(ts=...)`
increasing and inside [t0, t1]) with `equinox.error_if`, which under equinox's
default `EQX_ON_ERROR=raise` puts two `pure_callback`s into the program. samflow
hands each run `clip(ts, t0, t1)` of save times already checked sorted
(`check_save_times`), so the check can never fire; `no_runtime_checks` traces
the solve without it (equinox's own "off" mode, for this trace only).

**Stored programs: no tracing on a second run.** JAX's cache is keyed by the
lowered program, so a second process still *traces* every solver (builds its
jaxpr, vmaps diffrax's nested while loops, lowers it) before it can look the
program up: most of a warm sweep's solve time. `StoredProgram` wraps a jitted
function so that, with the cache on, its compiled executable is written to
`<cache>/samflow-programs/` keyed by what determines the program without
tracing it (`program_key`: samflow's source hash, the versions of jax, jaxlib,
diffrax, equinox, optimistix, lineax and numpy, the backend and its devices,
the CPU, JAX's settings and `XLA_FLAGS`, the caller's static arguments and the
arguments' shapes, dtypes and shardings), and a later process loads it and
calls it without tracing. It is the same binary the first run compiled and ran
(`jit(f).lower(...).compile()`, which is what `jit(f)(...)` compiles), so the
results are bit for bit those of the traced path. Anything that goes wrong (a
missing, stale, truncated or corrupt file, a load error, a call the loaded
program refuses) falls back to tracing and compiling as before, and the file is
rewritten. `SAMFLOW_STORED_PROGRAMS=off` turns only this part off. The files
are Python pickles of XLA executables, trusted as JAX's own cache is: load
them only from a folder you own.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.metadata
import logging
import os
import pickle
import platform
from pathlib import Path

import jax
import numpy as np

from .startup import paused_gc

__all__ = ["CACHE_ENV", "PROGRAMS_ENV", "StoredProgram", "cache_dir", "enable_compilation_cache",
           "no_runtime_checks", "program_key", "programs_dir"]

#: Environment variable naming the cache folder, or "off".
CACHE_ENV = "SAMFLOW_COMPILATION_CACHE"
#: Environment variable that turns the stored programs off ("off"), leaving JAX's cache on.
PROGRAMS_ENV = "SAMFLOW_STORED_PROGRAMS"
#: Subfolder of the cache folder holding the stored programs.
PROGRAMS_SUBDIR = "samflow-programs"
#: The packages whose code is traced into a solver program: those that set a solve's numbers
#: (also the packages of `samflow.store.code_stamp`, which guards `--resume` and the merge).
PROGRAM_PACKAGES = ("jax", "jaxlib", "diffrax", "equinox", "optimistix", "lineax", "numpy")
#: Format of a stored program file (a change makes every older file a miss).
_FORMAT = "samflow-program-2"
_OFF = ("", "off", "0", "false", "no")
#: A compile option at its default value (see `_compile_fresh`).
_FRESH_OPTIONS = {"xla_llvm_disable_expensive_passes": False}

logger = logging.getLogger(__name__)

# Set by `enable_compilation_cache`: the folder of the stored programs, or None (off).
_programs: "Path | None" = None
_programs_decided = False  # enable_compilation_cache has set `_programs` for this process
#: Programs that compile faster than this are not written (tiny element-wise jits).
MIN_COMPILE_TIME_S = 0.1


def cache_dir() -> "Path | None":
    """The cache folder this process would use (see the module docstring), or None when
    `$SAMFLOW_COMPILATION_CACHE` is `off`, `0`, `false`, `no` or empty."""
    value = os.environ.get(CACHE_ENV)
    if value is not None:
        return None if value.strip().lower() in ("", "off", "0", "false", "no") else Path(value).expanduser()
    if os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        return Path(os.environ["JAX_COMPILATION_CACHE_DIR"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "samflow" / "jax"


def enable_compilation_cache(path: "str | os.PathLike | None" = None, *, programs: bool = True) -> "Path | None":
    """Turn JAX's persistent compilation cache on for this process.

    **Arguments:** `path` the folder (default: `cache_dir()`). Programs taking
    >= 0.1 s to compile are kept, of any size (JAX's defaults, 1 s, skip most of
    samflow's smaller programs). `programs`: also store and load the sweep's
    compiled solvers (`StoredProgram`; unless `SAMFLOW_STORED_PROGRAMS=off`);
    False keeps only JAX's cache, so every solver is still traced (the test
    suite's choice: its in-process tests take the library's traced path).

    **Returns:** the folder, or None when the cache is off (`SAMFLOW_COMPILATION_CACHE=off`)
    or the folder cannot be made (the run goes on, compiling as before).
    """
    folder = Path(path).expanduser() if path is not None else cache_dir()
    global _programs, _programs_decided
    _programs, _programs_decided = None, True
    if folder is None:
        return None
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    jax.config.update("jax_compilation_cache_dir", str(folder))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_TIME_S)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    off = not programs or os.environ.get(PROGRAMS_ENV, "on").strip().lower() in _OFF
    _programs = None if off else folder / PROGRAMS_SUBDIR
    return folder


def programs_dir() -> "Path | None":
    """The folder of the stored programs (`StoredProgram`), or None when they are off.

    After `enable_compilation_cache` (every entry point), its choice. In a library
    process (`import samflow` and calls from Python, which change no JAX setting):
    on by default, in `cache_dir()` (`~/.cache/samflow/jax/samflow-programs`, or
    the folder `$SAMFLOW_COMPILATION_CACHE` names): the first `samflow.solve` of a
    later session loads its program from there instead of tracing and compiling
    it. Off with `SAMFLOW_COMPILATION_CACHE=off` or `SAMFLOW_STORED_PROGRAMS=off`.
    Several processes may share the folder: a program is written to a temporary
    file and renamed, and its checksum is verified before it is loaded."""
    if _programs_decided:
        return _programs
    if os.environ.get(PROGRAMS_ENV, "on").strip().lower() in _OFF:
        return None
    folder = cache_dir()
    return None if folder is None else folder / PROGRAMS_SUBDIR


@contextlib.contextmanager
def no_runtime_checks():
    """Trace the enclosed code with equinox's runtime checks off (`EQX_ON_ERROR=off`
    for this block only), so that no host callback enters the program and the
    persistent cache can keep it. Only for code whose checks cannot fire (see
    the module docstring); a no-op when equinox's internals have moved.

    equinox traces its checks through one jitted function cached by argument
    shape, not by the mode: an "off" trace made here would be reused by a later
    check of the same shape outside this block (a user's diffrax solve would
    silently check nothing). So the block also routes the checks through a
    jitted copy of its own, and the two modes never share a trace."""
    try:
        from equinox import _errors
    except ImportError:  # pragma: no cover - equinox moved its module
        yield
        return
    if not all(hasattr(_errors, n) for n in ("EQX_ON_ERROR", "branched_error_if_impl", "branched_error_if_impl_jit")):
        yield  # pragma: no cover - equinox's internals moved: checks stay on
        return
    previous = _errors.EQX_ON_ERROR, _errors.branched_error_if_impl_jit
    _errors.EQX_ON_ERROR = "off"
    _errors.branched_error_if_impl_jit = _off_checks_jit()
    try:
        yield
    finally:
        _errors.EQX_ON_ERROR, _errors.branched_error_if_impl_jit = previous


@functools.lru_cache(maxsize=1)
def _off_checks_jit():
    """equinox's check, jitted apart from equinox's own copy (see `no_runtime_checks`):
    a function object of its own, since `equinox.filter_jit` shares one trace cache
    among the wrappers of the same function."""
    import equinox as eqx
    from equinox import _errors

    def checks_off(*args, **kwargs):
        return _errors.branched_error_if_impl(*args, **kwargs)

    return eqx.filter_jit(checks_off)


@functools.lru_cache(maxsize=1)
def _environment() -> str:
    """What every stored program of this process shares (see `program_key`)."""
    root = Path(__file__).resolve().parents[1]  # the package, samflow/
    h = hashlib.sha256()
    for p in sorted(root.rglob("*.py")):  # samflow's sources, as `samflow.store.source_hash`
        h.update(p.relative_to(root).as_posix().encode() + b"\0" + p.read_bytes() + b"\0")
    parts = [_FORMAT, "samflow " + h.hexdigest(), "python " + platform.python_version()]
    for name in PROGRAM_PACKAGES:
        try:
            parts.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            parts.append(f"{name} none")
    devices = jax.devices()
    parts.append(f"backend {devices[0].platform} {devices[0].client.platform_version}")
    parts.append("devices " + " ".join(f"{d.id}:{d.device_kind}:{d.process_index}" for d in devices))
    parts.append(f"process {jax.process_index()} of {jax.process_count()}")
    parts.append("cpu " + _cpu())
    parts.append("XLA_FLAGS " + os.environ.get("XLA_FLAGS", ""))
    parts.append("EQX_ON_ERROR " + os.environ.get("EQX_ON_ERROR", ""))
    values = jax.config.values
    parts += [f"{k}={values[k]!r}" for k in sorted(values)
              if isinstance(values[k], (bool, int, float, str, type(None))) and "cache" not in k]
    return "\n".join(parts)


def _cpu() -> str:
    """The CPU model and its feature flags (XLA compiles for the CPU it runs on)."""
    try:
        with open("/proc/cpuinfo") as fh:
            lines = [ln for ln in fh if ln.startswith(("model name", "flags", "Features"))]
        return hashlib.sha256("".join(sorted(set(lines))).encode()).hexdigest()[:16]
    except OSError:
        return f"{platform.machine()} {platform.processor()}"


def _leaf_text(x) -> str:
    """Shape, dtype and placement of one argument leaf."""
    if isinstance(x, jax.Array):
        committed = getattr(x, "_committed", True)
        return f"{x.shape} {x.dtype} weak={x.weak_type} " + (repr(x.sharding) if committed else "uncommitted")
    if isinstance(x, (np.ndarray, np.generic)):
        return f"{np.shape(x)} {x.dtype} numpy"
    return f"{type(x).__name__} {x!r}"  # a Python scalar: its value is traced as a weak-typed constant


def program_key(what, args: tuple) -> str:
    """The file name (sha256, hex) of the stored program of `what` (the caller's
    static arguments: any value whose `repr` names it fully, e.g. a tuple of
    method, clock, settings) called with `args`: `what`, the arguments' pytree
    structure, shapes, dtypes and shardings, and this process's environment
    (samflow's source hash, package versions, backend, devices, CPU, JAX's
    settings, `XLA_FLAGS`). Equal keys mean equal programs."""
    leaves, tree = jax.tree_util.tree_flatten(args)
    x64 = f"x64 {jax.config.jax_enable_x64}"  # the effective value (also inside samflow._util.x64.float64())
    text = "\n".join([_environment(), x64, repr(what), str(tree)] + [_leaf_text(x) for x in leaves])
    return hashlib.sha256(text.encode()).hexdigest()


class StoredProgram:
    """A jitted function whose compiled programs are stored in and loaded from
    `programs_dir()` (see the module docstring), so that a second process neither
    traces nor compiles it. Call it as the jitted function; with the stored
    programs off (a library process, `SAMFLOW_STORED_PROGRAMS=off`, or a
    `jax.distributed` run of several processes) it is the jitted function. Every
    call runs with Python's garbage collector paused (`samflow._util.startup.paused_gc`:
    a trace allocates millions of objects that live until it is compiled).

    **Arguments:** `jitted` a `jax.jit`-ed function of positional arguments;
    `what` its static arguments (see `program_key`), which with the arguments'
    shapes and samflow's source fix the program.
    """

    def __init__(self, jitted, what):
        self.jitted = jitted
        self.what = what
        self._compiled: dict = {}  # program key -> a Compiled (or `jitted`, after a fallback)
        self.loaded = 0  # programs loaded from a file (for tests)

    def __getattr__(self, name):  # `lower`, `trace`, ...: those of the jitted function
        if name == "jitted":
            raise AttributeError(name)
        return getattr(self.jitted, name)

    def __call__(self, *args):
        # Tracing and lowering a program allocate millions of objects that live until
        # it is compiled: the garbage collector waits (`paused_gc`; a warm call is a run).
        with paused_gc():
            return self._call(*args)

    def _call(self, *args):
        folder = programs_dir()
        if folder is None or jax.process_count() > 1:
            return self.jitted(*args)
        key = program_key(self.what, args)
        fn = self._compiled.get(key)
        if fn is None:
            path = folder / f"{key}.jaxexe"
            fn = _load(path, key, args)
            if fn is None:
                fn = self._compiled[key] = self._compile_and_store(path, key, args)
                return fn(*args)
            try:  # the first call of a loaded program runs to its end here: a failure falls back
                out = jax.block_until_ready(fn(*args))
            except Exception as err:
                logger.warning("stored program %s failed (%s: %s); compiling it again", path.name,
                               type(err).__name__, str(err).splitlines()[0] if str(err) else "")
                path.unlink(missing_ok=True)
                fn = self._compiled[key] = self._compile_and_store(path, key, args)
                return fn(*args)
            self._compiled[key] = fn
            self.loaded += 1
            logger.debug("stored program %s loaded", path.name)
            return out
        return fn(*args)

    def _compile_and_store(self, path: Path, key: str, args: tuple):
        """Trace and compile for `args`, store the program at `path`; the compiled program
        (or the jitted function, when it cannot be compiled ahead of time)."""
        try:
            compiled = _compile_fresh(self.jitted, args)
        except Exception as err:  # let the jitted call raise its own error
            logger.debug("no stored program for %s: %s: %s", self.what, type(err).__name__, err)
            return self.jitted
        _save(compiled, path, key)
        logger.debug("stored program %s written", path.name)
        return compiled


def _compile_fresh(jitted, args: tuple):
    """`jitted.lower(*args).compile()`, never taken from JAX's own cache: an
    executable that JAX loaded from its cache serializes without its machine code
    on CPU (the stored copy then fails with "Function ... not found"). A compile
    option left at its default (`_FRESH_OPTIONS`: LLVM's expensive passes stay on)
    gives the program another key in JAX's cache, and JAX writes nothing under it
    (minimum compile time infinite for this compile), so XLA compiles it: the same
    code as `jitted(*args)` compiles."""
    name = "jax_persistent_cache_min_compile_time_secs"
    previous = getattr(jax.config, name)
    jax.config.update(name, float("inf"))
    try:
        return jitted.lower(*args).compile(compiler_options=_FRESH_OPTIONS)
    finally:
        jax.config.update(name, previous)


def _load(path: Path, key: str, args: tuple):
    """The Compiled stored at `path` under `key`, for a call with `args`, or None
    (missing, stale, truncated, corrupt or unloadable). The input structure is
    that of `args` (equal to the stored one's: it is part of the key); the
    output structure is rebuilt from a stored template (a pickled PyTreeDef loses
    the static fields of equinox modules)."""
    try:
        blob = path.read_bytes()
    except OSError:
        return None
    try:
        head, digest, body = blob.split(b"\n", 2)
        if head != f"{_FORMAT} {key}".encode() or hashlib.sha256(body).hexdigest().encode() != digest:
            logger.warning("stored program %s is stale or corrupt: ignored", path.name)
            return None  # another format or key, or a truncated / corrupt file: never deserialized
        payload, out_template, device_ids = pickle.loads(body)
        from jax.experimental.serialize_executable import deserialize_and_load

        by_id = {d.id: d for d in jax.devices()}
        in_tree = jax.tree_util.tree_structure((tuple(args), {}))
        return deserialize_and_load(payload, in_tree, jax.tree_util.tree_structure(out_template),
                                    execution_devices=[by_id[i] for i in device_ids])
    except Exception as err:
        logger.warning("stored program %s not loaded (%s: %s)", path.name, type(err).__name__, err)
        return None


def _save(compiled, path: Path, key: str) -> None:
    """Write `compiled` to `path` (atomically); nothing when it cannot be serialized or written."""
    try:
        from jax.experimental.serialize_executable import serialize

        from .io import atomic_write_bytes

        payload, _, out_tree = serialize(compiled)
        out_template = jax.tree_util.tree_unflatten(out_tree, [0] * out_tree.num_leaves)
        device_ids = [d.id for d in compiled.runtime_executable().local_devices()]  # where it runs, in order
        body = pickle.dumps((payload, out_template, device_ids), protocol=pickle.HIGHEST_PROTOCOL)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(f"{_FORMAT} {key}\n".encode() + hashlib.sha256(body).hexdigest().encode() + b"\n" + body,
                           path)
    except Exception as err:
        logger.debug("stored program %s not written: %s: %s", path.name, type(err).__name__, err)
