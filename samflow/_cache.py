"""JAX's persistent compilation cache for samflow's command lines and scripts, and
the one reason samflow's solver program could not be kept in it.

A solve compiles one XLA program per (method, clock, settings, batch shape, save
count); on 2 CPU cores that takes 4-25 s. With the persistent cache a second
process (the same sweep run again, the figure script after a sweep, a test run)
loads the program from disk instead. `enable_compilation_cache` turns it on for
the process; `prepare_process` (`samflow._x64`) calls it, so every entry point
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
hands each segment `clip(ts, t0, t1)` of save times already checked sorted
(`check_save_times`), so the check can never fire; `no_runtime_checks` traces
the solve without it (equinox's own "off" mode, for this trace only).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import jax

__all__ = ["CACHE_ENV", "cache_dir", "enable_compilation_cache", "no_runtime_checks"]

#: Environment variable naming the cache folder, or "off".
CACHE_ENV = "SAMFLOW_COMPILATION_CACHE"
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


def enable_compilation_cache(path: "str | os.PathLike | None" = None) -> "Path | None":
    """Turn JAX's persistent compilation cache on for this process.

    **Arguments:** `path` the folder (default: `cache_dir()`). Programs taking
    >= 0.1 s to compile are kept, of any size (JAX's defaults, 1 s, skip most of
    samflow's smaller programs).

    **Returns:** the folder, or None when the cache is off (`SAMFLOW_COMPILATION_CACHE=off`)
    or the folder cannot be made (the run goes on, compiling as before).
    """
    folder = Path(path).expanduser() if path is not None else cache_dir()
    if folder is None:
        return None
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    jax.config.update("jax_compilation_cache_dir", str(folder))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_TIME_S)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    return folder


@contextlib.contextmanager
def no_runtime_checks():
    """Trace the enclosed code with equinox's runtime checks off (`EQX_ON_ERROR=off`
    for this block only), so that no host callback enters the program and the
    persistent cache can keep it. Only for code whose checks cannot fire (see
    the module docstring); a no-op when equinox's internals have moved."""
    try:
        from equinox import _errors
    except ImportError:  # pragma: no cover - equinox moved its module
        yield
        return
    if not hasattr(_errors, "EQX_ON_ERROR"):  # pragma: no cover
        yield
        return
    previous = _errors.EQX_ON_ERROR
    _errors.EQX_ON_ERROR = "off"
    try:
        yield
    finally:
        _errors.EQX_ON_ERROR = previous
