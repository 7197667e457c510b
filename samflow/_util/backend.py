"""JAX's platform, started once and refused in one line when it cannot start.

`JAX_PLATFORMS=cuda` on a machine without CUDA makes JAX 0.10 raise a bare
`AssertionError` at its first computation (other platforms: a `RuntimeError`
of many lines). The command lines ask first (`backend_problem`, exit 2); the
Python API raises `BackendError`, a `RuntimeError`: pydantic turns an
`AssertionError` raised inside a config validator (the inline data set is a JAX
array) into the config error "(top level): Assertion failed", which blamed the
config.
"""

from __future__ import annotations

import os
import re

__all__ = ["BackendError", "backend_error", "backend_problem", "require_backend"]


class BackendError(RuntimeError):
    """JAX cannot start the platform it was told to use (`JAX_PLATFORMS`); the
    message is one line naming it and how to choose another."""


def backend_problem() -> "str | None":
    """Start JAX's backend (`jax.devices()`), once the process is set up (float64,
    CPU device count, `jax.distributed`): None, or the one-line problem when the
    platform JAX was told to use (`JAX_PLATFORMS`, e.g. "cuda" on a machine
    without CUDA) cannot start, naming it and how to choose another."""
    import jax

    try:
        jax.devices()
    except (RuntimeError, AssertionError) as err:  # JAX 0.10 raises a bare AssertionError for "cuda"
        asked = jax.config.jax_platforms or os.environ.get("JAX_PLATFORMS") or ""
        why = re.sub(r"\.?\s*\(set JAX_PLATFORMS=.*?\)", "", str(err).strip().splitlines()[0]) if str(err).strip() else (
            "no JAX plugin for it is installed, or no device of it is visible")
        return (f"JAX could not start the platform JAX_PLATFORMS={asked!r} ({why}); set JAX_PLATFORMS=cpu to "
                "run on the CPU, or unset JAX_PLATFORMS to let JAX choose")
    return None


def require_backend() -> None:
    """**Raises:** `BackendError` (one line, `backend_problem`) when JAX's platform cannot start."""
    if (problem := backend_problem()) is not None:
        raise BackendError(problem)


def backend_error(err: BaseException) -> RuntimeError:
    """What to raise for `err`, an `AssertionError` or `RuntimeError` that came out of
    JAX inside a config validator: the `BackendError` when JAX's platform cannot
    start, else a `RuntimeError` naming `err` (raised `from err`), which pydantic
    passes on instead of reporting "Assertion failed" as a config error."""
    problem = backend_problem()
    if problem is not None:
        return BackendError(problem)
    return RuntimeError(f"{type(err).__name__} inside JAX: {str(err).strip() or 'no message'}")
