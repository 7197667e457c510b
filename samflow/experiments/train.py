"""Discrete GD / SGD and SAM on a CNN, through optax.

The algorithms of docs/theory.md section 2, with step size eta (`learning_rate`):

    GD:        theta <- theta - eta grad L(theta)
    l2-SAM:    theta <- theta - eta grad L(theta + rho grad L(theta) / ||grad L(theta)||_2)
    linf-SAM:  theta <- theta - eta grad L(theta + rho sign(grad L(theta)))

SAM is `optax.contrib.sam` (Foret et al., ICLR 2021) in opaque mode with
`sync_period=2`: one adversarial ascent step, then the outer SGD step with the
gradient at the perturbed point. The ascent step is `normalize_safe` then
`sgd(rho)` for l2 (the standard SAM) and `scale_by_sign` then `sgd(rho)` for
linf. The norm is over all parameters together, as in docs/theory.md. At a zero
gradient both ascent directions are exactly 0 (G/||G|| := 0 at G = 0, as
samflow's flows define it; sign(0) = 0), so that step is a GD step; optax's own
`optax.contrib.normalize` divides 0 by 0 there and turns every parameter NaN.

Every step checks that its loss and the parameters it returns are finite; the
first that is not stops training with `NonFiniteError`, naming the step.

With `batch_size = 0` every step uses the whole training set (GD, one step per
epoch); otherwise an epoch is one pass over a fresh permutation in mini-batches
(SGD; an incomplete last batch is dropped). The permutation of epoch e depends
only on the seed and e, so every method and alpha sees the same batches.

Losses: the logistic loss `softplus(-y f)` for a binary task (the theory's loss),
softmax cross-entropy for a multi-class one. Float32 throughout.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import optax
from jax.flatten_util import ravel_pytree

from ..flows import unit_l2
from .convnet import ConvNet, NonFiniteError

__all__ = [
    "METHODS",
    "NonFiniteError",
    "normalize_safe",
    "make_optimizer",
    "loss_value",
    "accuracy",
    "make_epoch",
    "evaluate",
    "nonfinite_params",
]

METHODS = ("gd", "sam_l2", "sam_linf")


def normalize_safe() -> optax.GradientTransformation:
    """The l2 ascent direction of SAM: `g / ||g||_2` over all leaves together,
    and exactly 0 where g = 0 (docs/theory.md section 2; `samflow.flows.unit_l2`).

    A drop-in for `optax.contrib.normalize`, which computes 0/0 = NaN at a zero
    gradient (reached in float32 once every margin of a batch is above about
    86) and, squaring without scaling, overflows to a zero direction for
    |g| above about 1e19. Here g is scaled by max|g| first, so the direction has
    norm 1 to rounding for any nonzero finite g. Leaves keep their dtypes
    (float32 in the CNN). Stateless.
    """

    def init_fn(params):
        del params
        return optax.EmptyState()

    def update_fn(updates, state, params=None):
        del params
        flat, unravel = ravel_pytree(updates)
        return unravel(unit_l2(flat)), state

    return optax.GradientTransformation(init_fn, update_fn)


def make_optimizer(
    method: str, learning_rate: float, rho: float = 0.0, momentum: float = 0.0
) -> optax.GradientTransformationExtraArgs:
    """The optimizer of `method`: "gd", "sam_l2" or "sam_linf".

    **Arguments:** `learning_rate` the step size eta (the outer step for SAM);
    `rho` the SAM radius (ignored by "gd"); `momentum` heavy-ball momentum of the
    (outer) SGD step, 0 for plain GD/SGD.

    **Raises:** `ValueError` for an unknown method, eta <= 0 or rho < 0.
    """
    if method not in METHODS:
        raise ValueError(f"`method` must be one of {', '.join(METHODS)}, got {method!r}")
    if not learning_rate > 0:
        raise ValueError(f"`learning_rate` must be > 0, got {learning_rate}")
    if not rho >= 0:
        raise ValueError(f"`rho` must be >= 0, got {rho}")
    outer = optax.sgd(learning_rate, momentum=momentum or None)
    if method == "gd":
        return outer
    ascent = normalize_safe() if method == "sam_l2" else optax.scale_by_sign()
    adversary = optax.chain(ascent, optax.sgd(rho))
    return optax.contrib.sam(outer, adversary, sync_period=2, opaque_mode=True)


def _loss(model: ConvNet, x, y, binary: bool):
    logits = jax.vmap(model)(x)
    if binary:
        return jnp.mean(jax.nn.softplus(-y * logits))
    return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, y))


def _correct(model: ConvNet, x, y, binary: bool):
    logits = jax.vmap(model)(x)
    if binary:
        return jnp.sum(jnp.where(logits >= 0, 1.0, -1.0) == y)
    return jnp.sum(jnp.argmax(logits, axis=-1) == y)


@eqx.filter_jit
def loss_value(model: ConvNet, x, y, binary: bool) -> jax.Array:
    """Mean loss of `model` on (x, y)."""
    return _loss(model, x, y, binary)


@eqx.filter_jit
def accuracy(model: ConvNet, x, y, binary: bool) -> jax.Array:
    """Fraction of (x, y) classified correctly (sign of f for a binary task)."""
    return _correct(model, x, y, binary) / x.shape[0]


def nonfinite_params(params) -> "str | None":
    """None when every parameter (a pytree of arrays, or a model) is finite,
    else a phrase saying how many are not, for `NonFiniteError`."""
    leaves = jax.tree_util.tree_leaves(eqx.filter(params, eqx.is_inexact_array))
    bad = sum(int(np.sum(~np.isfinite(np.asarray(p)))) for p in leaves)  # numpy: no compilation per leaf
    if bad == 0:
        return None
    total = sum(p.size for p in leaves)
    return f"{bad} of {total} parameters are not finite"


def evaluate(model: ConvNet, x, y, binary: bool, chunk: int = 1000) -> tuple[float, float]:
    """(mean loss, accuracy) on (x, y), in chunks to bound memory.

    **Raises:** `NonFiniteError` (without step or epoch: the caller adds them)
    when a parameter of `model` or the loss is not finite: no metric is
    computed from a non-finite model.
    """
    bad = nonfinite_params(model)
    if bad is not None:
        raise NonFiniteError(bad)
    n, loss, correct, bad = x.shape[0], 0.0, 0, 0
    for i in range(0, n, chunk):
        xb, yb = x[i : i + chunk], y[i : i + chunk]
        m = _metrics(model, xb, yb, binary)
        loss += float(m[0]) * xb.shape[0]
        correct += int(m[1])
        bad += int(m[2])
    if bad:
        raise NonFiniteError(f"{bad} of {n} images have a non-finite logit (float32 overflow)")
    if not math.isfinite(loss):
        raise NonFiniteError(f"the loss over {n} images is {loss / n}")
    return loss / n, correct / n


@eqx.filter_jit
def _metrics(model: ConvNet, x, y, binary: bool):
    """(mean loss, number correct, number of images with a non-finite logit) in one pass."""
    logits = jax.vmap(model)(x)
    if binary:
        loss = jnp.mean(jax.nn.softplus(-y * logits))
        correct = jnp.sum(jnp.where(logits >= 0, 1.0, -1.0) == y)
        bad = jnp.sum(~jnp.isfinite(logits))
    else:
        loss = jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, y))
        correct = jnp.sum(jnp.argmax(logits, axis=-1) == y)
        bad = jnp.sum(~jnp.all(jnp.isfinite(logits), axis=-1))
    return loss, correct, bad


def make_epoch(
    model: ConvNet,
    optimizer: optax.GradientTransformationExtraArgs,
    *,
    binary: bool,
    n_train: int,
    batch_size: int = 0,
) -> Callable:
    """A function running one epoch: compiled steps driven by a Python loop.

    **Returns:** `epoch(params, opt_state, x, y, key) -> (params, opt_state,
    mean_batch_loss)` (the last a Python float, averaged in float64), where `params` are the inexact arrays of a model shaped
    like `model` (`eqx.partition(model, eqx.is_inexact_array)[0]`) and `key`
    draws the epoch's permutation. The same function serves every alpha (one
    compilation per method and task).

    The loop over batches is in Python, not `lax.scan`: on XLA's CPU backend a
    convolution inside a loop body runs an order of magnitude slower than the
    same convolution at the top level.

    **Raises:** `NonFiniteError` naming the first step (1-based) whose loss or
    updated parameters are not finite. The check is computed inside each
    compiled step and read once at the end of the epoch (no sync per step).
    """
    _, static = eqx.partition(model, eqx.is_inexact_array)
    bs = n_train if batch_size in (0, None) or batch_size >= n_train else int(batch_size)
    n_batches = n_train // bs

    def batch_loss(params, xb, yb):
        return _loss(eqx.combine(params, static), xb, yb, binary)

    @jax.jit
    def step(params, opt_state, xb, yb):
        loss, g = jax.value_and_grad(batch_loss)(params, xb, yb)
        grad_fn = lambda p, _: jax.grad(batch_loss)(p, xb, yb)  # noqa: E731  (SAM's ascent point)
        updates, opt_state = optimizer.update(g, opt_state, params, grad_fn=grad_fn)
        params = optax.apply_updates(params, updates)
        finite_params = jnp.all(jnp.stack([jnp.all(jnp.isfinite(p)) for p in jax.tree_util.tree_leaves(params)]))
        return params, opt_state, loss, jnp.stack([jnp.isfinite(loss), finite_params])

    @jax.jit
    def shuffle(x, y, key):
        perm = jr.permutation(key, n_train)[: n_batches * bs]
        return x[perm], y[perm]

    def epoch(params, opt_state, x, y, key):
        if n_batches > 1:
            x, y = shuffle(x, y, key)
        losses, oks = [], []
        for i in range(n_batches):
            params, opt_state, loss, ok = step(params, opt_state, x[i * bs : (i + 1) * bs], y[i * bs : (i + 1) * bs])
            losses.append(loss)
            oks.append(ok)
        ok = np.asarray(jnp.stack(oks))
        if not ok.all():
            i = int(np.flatnonzero(~ok.all(axis=1))[0])
            what = (
                f"the mini-batch loss is {float(losses[i])}" if not ok[i, 0]
                else "the update made a parameter non-finite"
            )
            raise NonFiniteError(what, step=i + 1, n_steps=n_batches)
        return params, opt_state, float(np.mean(np.asarray(jnp.stack(losses)), dtype=np.float64))  # no float32 overflow

    return epoch
