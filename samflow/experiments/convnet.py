"""A small CNN with a global-average-pooling head, and its init-scale knob alpha.

    x (C, H, W) -> [conv -> ReLU] x k -> A (K, h, w) -> mean over (h, w) -> linear -> logits

The head is global average pooling then one linear layer (as in CAM / Grad-CAM):
the Grad-CAM weight of channel k is then the head weight of k divided by h*w, so
the maps are well defined at every location. `A`, the ReLU output of the last
convolution, is what Grad-CAM reads (`ConvNet.features`).

By default the convolutions and the head have no bias, which makes the network
positively homogeneous in its parameters (f(alpha theta) = alpha^(k+1) f(theta)),
as the diagonal networks of docs/theory.md are: alpha multiplying the default
initialization is then an init scale in the theory's sense.

Float32 throughout: every parameter is created as float32 (`import samflow`
turns on float64 for the flows; a CNN on images needs no more than float32).
"""

from __future__ import annotations

from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Float, PRNGKeyArray

__all__ = ["ConvNet", "NonFiniteError", "make_convnet", "scale_init", "count_params", "param_norm"]


class NonFiniteError(ArithmeticError):
    """Training produced a non-finite loss or parameter; raised instead of
    computing any metric from such a model.

    **Attributes:** `step` (1-based step of the epoch, or None when the
    non-finite number is a metric measured after the epoch), `n_steps`, `what`
    (which number, e.g. "the loss is nan"), and the context filled in by the
    caller through `at`: `method`, `epoch`, `alpha`, `task`. `str()` is one line.
    """

    def __init__(self, what: str, *, step: "int | None" = None, n_steps: "int | None" = None,
                 method: "str | None" = None, epoch: "int | None" = None, alpha: "float | None" = None,
                 task: "str | None" = None):
        self.what, self.step, self.n_steps = what, step, n_steps
        self.method, self.epoch, self.alpha, self.task = method, epoch, alpha, task
        where = []
        if task is not None:
            where.append(f"task {task}")
        if method is not None:
            where.append(f"method {method}")
        if alpha is not None:
            where.append(f"alpha {alpha:g}")
        if epoch is not None:
            where.append(f"epoch {epoch}")
        if step is not None:
            where.append(f"step {step}" + (f" of {n_steps}" if n_steps is not None else ""))
        super().__init__(
            f"training became non-finite at {', '.join(where) or 'an unknown step'}: {what}; "
            "no result is written (lower train.learning_rate, rho or the init scale alpha)"
        )

    def at(self, **context) -> "NonFiniteError":
        """A copy with the caller's context (`method`, `epoch`, `alpha`, `task`) added."""
        fields = dict(step=self.step, n_steps=self.n_steps, method=self.method, epoch=self.epoch,
                      alpha=self.alpha, task=self.task)
        fields.update(context)
        return NonFiniteError(self.what, **fields)


class ConvNet(eqx.Module):
    """Convolutions with ReLU, then global average pooling and a linear head.

    **Fields:** `convs` the convolutions (the last one is Grad-CAM's layer);
    `head` an `eqx.nn.Linear` from the last convolution's channels to the
    outputs ("scalar" for a binary task: one logit f, y in {-1, +1}).
    """

    convs: tuple[eqx.nn.Conv2d, ...]
    head: eqx.nn.Linear

    def features(self, x: Float[Array, "C H W"]) -> Float[Array, "K h w"]:
        """The ReLU output of the last convolution (Grad-CAM's feature maps)."""
        for conv in self.convs:
            x = jax.nn.relu(conv(x))
        return x

    def logits_from_features(self, a: Float[Array, "K h w"]) -> Float[Array, "..."]:
        """The head: global average pooling, then the linear layer."""
        return self.head(jnp.mean(a, axis=(1, 2)))

    def __call__(self, x: Float[Array, "C H W"]) -> Float[Array, "..."]:
        """Logits of one image: a scalar (binary) or a vector (multi-class)."""
        return self.logits_from_features(self.features(x))


def scale_init(model: eqx.Module, alpha: float) -> eqx.Module:
    """Multiply every floating-point parameter of `model` by `alpha`."""
    params, static = eqx.partition(model, eqx.is_inexact_array)
    params = jax.tree_util.tree_map(lambda p: (jnp.float32(alpha) * p).astype(p.dtype), params)
    return eqx.combine(params, static)


def make_convnet(
    in_channels: int,
    num_outputs: int,
    *,
    channels: Sequence[int] = (16, 32, 32),
    strides: Sequence[int] = (1, 2, 2),
    kernel_size: int = 3,
    bias: bool = False,
    padding_mode: str = "replicate",
    alpha: float = 1.0,
    key: PRNGKeyArray,
) -> ConvNet:
    """Build a `ConvNet` at init scale `alpha` (alpha times equinox's default
    initialization, which is uniform in +-1/sqrt(fan_in)).

    **Arguments:** `num_outputs` 1 for a binary task (scalar logit) or the number
    of classes; `channels`, `strides` one entry per convolution (padding "SAME");
    `bias` whether the layers have biases (default False: homogeneous network);
    `padding_mode` how the SAME padding fills the border: "replicate" (default)
    repeats the edge pixels, so the border of a normalized image (background
    below zero) is not an artificial edge that filters can latch onto; "zeros"
    is the usual zero padding; `key` the PRNG key (same key, same directions for
    every alpha).

    **Raises:** `ValueError` for mismatched `channels` / `strides` or alpha <= 0.
    """
    if len(channels) == 0 or len(channels) != len(strides):
        raise ValueError(f"channels and strides need the same non-zero length, got {list(channels)}, {list(strides)}")
    if padding_mode not in ("replicate", "zeros", "reflect", "circular"):
        raise ValueError(f"`padding_mode` must be replicate, zeros, reflect or circular, got {padding_mode!r}")
    if not alpha > 0:
        raise ValueError(f"`alpha` must be > 0, got {alpha}")
    keys = jr.split(key, len(channels) + 1)
    convs, c_in = [], in_channels
    for c, s, k in zip(channels, strides, keys[:-1]):
        convs.append(
            eqx.nn.Conv2d(
                c_in, c, kernel_size, stride=s, padding="SAME", padding_mode=padding_mode.upper(),
                use_bias=bias, dtype=jnp.float32, key=k,
            )
        )
        c_in = c
    out = "scalar" if num_outputs == 1 else num_outputs
    head = eqx.nn.Linear(c_in, out, use_bias=bias, dtype=jnp.float32, key=keys[-1])
    return scale_init(ConvNet(tuple(convs), head), alpha)


def count_params(model: eqx.Module) -> int:
    """Number of scalar parameters."""
    return sum(p.size for p in jax.tree_util.tree_leaves(eqx.filter(model, eqx.is_inexact_array)))


def param_norm(model: eqx.Module) -> float:
    """The l2 norm of all parameters together (the norm l2-SAM normalizes by), a
    Python float. Summed in float64: squaring a float32 parameter above about
    1.8e19 in float32 overflows, which reported inf for a finite model."""
    leaves = jax.tree_util.tree_leaves(eqx.filter(model, eqx.is_inexact_array))
    return float(np.linalg.norm(np.concatenate([np.asarray(p, np.float64).ravel() for p in leaves])))
