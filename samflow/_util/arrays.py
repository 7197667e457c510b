"""Host data onto the device without compiling anything."""

from __future__ import annotations

import jax
import numpy as np

__all__ = ["device_array"]


def device_array(x, dtype=None) -> jax.Array:
    """`jnp.asarray(x, dtype)` for host data (a numpy array, a Python number or
    sequence), by `jax.device_put`: the same values, dtype (float64 only where
    `jax_enable_x64` is on, as `jnp.asarray`) and device, without the one-op XLA
    program (`stage`, `convert_element_type`) that `jnp.asarray` compiles at every
    new shape and dtype in JAX 0.10: about 10-40 ms each in a fresh process, and a
    first `samflow.solve` made a dozen of them."""
    return jax.device_put(np.asarray(x, dtype))
