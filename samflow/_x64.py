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

__all__ = ["EXACT_CPU_FLAG", "exact_cpu_arithmetic", "float64", "in_float64", "prepare_process", "require_float64", "use_float64"]

HOW = 'call jax.config.update("jax_enable_x64", True) at the start of your program'


def use_float64() -> None:
    """Turn float64 on for this process (the entry points call it first)."""
    jax.config.update("jax_enable_x64", True)


def prepare_process() -> None:
    """What every command line and script does first, for its own process only:
    exact CPU arithmetic (`exact_cpu_arithmetic`: no fused multiply-add, so that
    a cell's bits do not depend on the lane width), float64 in JAX (`use_float64`), JAX's persistent compilation cache
    (`samflow._cache.enable_compilation_cache`: a second run loads its compiled
    programs; `SAMFLOW_COMPILATION_CACHE=off` disables it) and matplotlib's Agg
    backend (files, no display). Library modules set none of these on import."""
    from ._cache import enable_compilation_cache

    exact_cpu_arithmetic()
    use_float64()
    enable_compilation_cache()
    import matplotlib

    matplotlib.use("Agg")


#: The XLA flag that keeps XLA's CPU code from fusing a multiply and an add into one
#: rounding (FMA instructions come with AVX2). XLA fuses or not depending on how it
#: vectorizes a batch shape, so without it a cell's last bits depended on the lane
#: width; with it every lane computes with the same roundings (samflow._lanes).
EXACT_CPU_FLAG = "--xla_cpu_max_isa=AVX"


def exact_cpu_arithmetic() -> bool:
    """Add `EXACT_CPU_FLAG` to XLA_FLAGS for this process, before JAX's backend
    starts (then a cell's results do not depend on the lane width, the batch or
    the order of the cells, docs/running.md). Returns whether the flag is in
    effect: False when the backend has already started without it, or when
    XLA_FLAGS sets another `xla_cpu_max_isa` (the user's choice wins)."""
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_cpu_max_isa" in flags:
        return EXACT_CPU_FLAG in flags.split()
    from jax._src import xla_bridge

    if xla_bridge.backends_are_initialized():
        return False
    os.environ["XLA_FLAGS"] = (flags + " " + EXACT_CPU_FLAG).strip()
    return True


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
