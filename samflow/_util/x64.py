"""float64 for the flows, without changing the JAX program that imports samflow.

`import samflow` leaves JAX's settings alone. The flows need float64
(docs/theory.md s.4: collapse radii of 1e-6 rho, inits down to 1e-300): the
command lines and scripts turn it on for their process (`use_float64`), and
the public solvers (`samflow.solve`, `samflow.sweep.solve_grid`,
`samflow.discrete.run_discrete`, `samflow.models.solve_model`, ...) run in a
local float64 context (`in_float64`) when the caller has not turned it on, so
that a float32 program gets float64 results and keeps its own setting.
`solve_cell`, which runs inside the caller's own `jit`/`vmap`, cannot switch:
it refuses float32 in one sentence (`require_float64`).
"""

from __future__ import annotations

import contextlib
import functools
import os

import jax

__all__ = [
    "EXACT_CPU_FLAG", "EXACT_REDUCE_FLAG", "FAST_COMPILE_FLAG", "compile_options", "exact_cpu_arithmetic",
    "exact_flags", "float64", "in_float64", "process_flags",
    "prepare_process", "require_float64", "use_float64",
]

HOW = 'call jax.config.update("jax_enable_x64", True) at the start of your program'


def use_float64() -> None:
    """Turn float64 on for this process (the entry points call it first)."""
    jax.config.update("jax_enable_x64", True)


def prepare_process() -> None:
    """What every command line and script does first, for its own process only:
    exact CPU arithmetic (`exact_cpu_arithmetic`: no fused multiply-add and
    XLA's own reductions, so that a cell's bits do not depend on the lane
    width), float64 in JAX (`use_float64`), JAX's persistent compilation cache
    (`samflow._util.cache.enable_compilation_cache`: a second run loads its compiled
    programs; `SAMFLOW_COMPILATION_CACHE=off` disables it) and matplotlib's Agg
    backend (files, no display). Library modules set none of these on import."""
    from .cache import enable_compilation_cache

    exact_cpu_arithmetic()
    use_float64()
    enable_compilation_cache()
    import matplotlib

    matplotlib.use("Agg")


#: The XLA flag that keeps XLA's CPU code from fusing a multiply and an add into one
#: rounding (FMA instructions come with AVX2). XLA fuses or not depending on how it
#: vectorizes a batch shape, so without it a cell's last bits depended on the lane
#: width; with it every lane computes with the same roundings (samflow._engine.lanes).
EXACT_CPU_FLAG = "--xla_cpu_max_isa=AVX"

#: The XLA flag that keeps XLA's CPU code from handing reductions to its YNNPACK
#: library. XLA does so for arrays of about 4,096 elements and more, and YNNPACK adds
#: the entries of a row in another order than XLA's own loop: a lane's sums over its d
#: weights (the margins, the l2 norm of G, the controller's error norm, ...) got
#: other last bits at 1,024 lanes than at 64 (at d = 50 already at 256 lanes, at
#: d = 200 already at 64 lanes than at 1). Its matrix products (`dot`) stay with
#: YNNPACK: the lane engine forms none (`samflow.diagonal_net.margins`). An
#: experimental flag: it is added only where the installed jaxlib has it
#: (`_jaxlib_has`), since XLA ends the process on a flag it does not know.
EXACT_REDUCE_FLAG = "--xla_cpu_experimental_ynn_fusion_type=-reduce"


#: The XLA flag that has XLA's CPU compiler emit its fusions with its classic LLVM IR
#: emitters instead of its MLIR fusion emitters. The lane engine's programs are
#: hundreds of small fusions, each compiled on its own; the MLIR pipeline per fusion
#: costs more than the fusion's code: measured on the 2-core machine (docs/benchmarks.md,
#: "Issue 34, third round"), the XLA compilation of `samflow.solve`'s programs took
#: 30-46% less time (l2 at depth 3: 3.2 -> 2.2 s; lp: 4.3 -> 3.0 s; gd in tau: 2.7 ->
#: 1.4 s), tests/test_lp.py, test_lanes.py and test_linf_surface.py together 193 ->
#: 140 s, and warm steps as fast. It changes last bits (other code for the same
#: operations, rounded the same way in every lane: the bits stay independent of the
#: width, tests/test_lanes.py); the pinned grid is made with it. Added only where the
#: installed jaxlib has it (`_jaxlib_has`).
FAST_COMPILE_FLAG = "--xla_cpu_use_fusion_emitters=false"


def _flag_name(flag: str) -> str:
    return flag.split("=", 1)[0].lstrip("-")


@functools.cache
def _jaxlib_has(*needles: bytes) -> bool:
    """Whether the installed jaxlib's shared libraries contain every byte string
    of `needles` (how a flag of its XLA is told apart from one it lacks, without
    starting JAX's backend: XLA ends the process on an unknown flag or value)."""
    import importlib.util
    import mmap
    from pathlib import Path

    spec = importlib.util.find_spec("jaxlib")
    if spec is None or spec.origin is None:
        return False
    libs = [f for f in Path(spec.origin).parent.iterdir() if f.suffix in (".so", ".dylib", ".pyd") and f.is_file()]
    for lib in sorted(libs, key=lambda f: f.stat().st_size, reverse=True):  # the big one (XLA) first
        try:
            with open(lib, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as m:
                if all(m.find(n) >= 0 for n in needles):
                    return True
        except (OSError, ValueError):  # unreadable, or empty (mmap refuses 0 bytes)
            continue
    return False


def exact_flags() -> tuple[str, ...]:
    """The XLA flags of `exact_cpu_arithmetic` that this jaxlib has: `EXACT_CPU_FLAG`,
    and `EXACT_REDUCE_FLAG` where its XLA has that flag with the sign-prefix form of
    its value (jaxlib 0.10.2 has)."""
    reduce_known = _jaxlib_has(_flag_name(EXACT_REDUCE_FLAG).encode(), b"LIBRARY_FUSION_TYPE_REDUCE", b"'-' prefix")
    return (EXACT_CPU_FLAG, EXACT_REDUCE_FLAG) if reduce_known else (EXACT_CPU_FLAG,)


def process_flags() -> tuple[str, ...]:
    """Every XLA flag samflow's processes start with: `exact_flags`, then
    `FAST_COMPILE_FLAG` where this jaxlib has it."""
    fast = (FAST_COMPILE_FLAG,) if _jaxlib_has(_flag_name(FAST_COMPILE_FLAG).encode()) else ()
    return exact_flags() + fast


def compile_options() -> "dict[str, bool] | None":
    """The XLA compile options of samflow's lane programs (`jax.jit(...,
    compiler_options=...)`): XLA's classic fusion emitters (`FAST_COMPILE_FLAG`
    as the per-program option `xla_cpu_use_fusion_emitters=False`) where this
    jaxlib has the flag and `XLA_FLAGS` does not name it, else None.

    So a program of your own that calls `samflow.solve` without samflow's XLA
    flags (`exact_cpu_arithmetic`) compiles its solver in about 40% less time,
    and the rest of your process keeps XLA's defaults: the option applies to
    samflow's programs alone, and gives them the bits of the process flag
    (tests/test_x64.py). The command lines set the flag itself (`prepare_process`):
    None there, and their programs are unchanged. The exact-arithmetic flags
    have no such per-program form (XLA reads the ISA when its CPU client
    starts), so a process without them still gets last bits that can depend on
    the lane width (docs/running.md)."""
    flag = _flag_name(FAST_COMPILE_FLAG)
    if flag in os.environ.get("XLA_FLAGS", "") or not _jaxlib_has(flag.encode()):
        return None
    return {flag: False}


def exact_cpu_arithmetic() -> bool:
    """Add the flags of `process_flags` to XLA_FLAGS for this process, before JAX's
    backend starts: no fused multiply-add (`EXACT_CPU_FLAG`) and XLA's own
    reductions (`EXACT_REDUCE_FLAG`), so that a cell's results do not depend on
    the lane width, the batch or the order of the cells (docs/running.md), and
    XLA's classic fusion emitters (`FAST_COMPILE_FLAG`: faster compilation; the
    bits samflow pins are made with it). A flag whose name XLA_FLAGS already sets
    is left as the user set it. Returns whether every flag of `exact_flags` is in
    effect: False when the backend has already started without them, or when
    XLA_FLAGS sets one of them otherwise (the user's choice wins)."""
    flags = os.environ.get("XLA_FLAGS", "")
    wanted = exact_flags()
    missing = [f for f in process_flags() if _flag_name(f) not in flags]
    if missing:
        from jax._src import xla_bridge

        if xla_bridge.backends_are_initialized():
            return all(f in flags.split() for f in wanted)
        flags = " ".join([flags] + missing).strip()
        os.environ["XLA_FLAGS"] = flags
    return all(f in flags.split() for f in wanted)


@contextlib.contextmanager
def float64():
    """A block in which JAX computes in float64; the process setting is restored after."""
    if jax.config.jax_enable_x64:
        yield
        return
    enable = getattr(jax, "enable_x64", None)
    if enable is None:  # jax < 0.8
        from jax.experimental import enable_x64 as enable
    with enable(True):
        yield


def in_float64(fn):
    """Decorator: run `fn` inside `float64()` (a no-op when float64 is already on)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with float64():
            return fn(*args, **kwargs)

    return wrapper


def require_float64(name: str) -> None:
    """Raise a one-line `RuntimeError` when float64 is off (for `name`, traced code)."""
    if not jax.config.jax_enable_x64:
        raise RuntimeError(f"{name} needs float64 in JAX: {HOW} (samflow.solve does this for you)")
