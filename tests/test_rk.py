"""The hand-written parts of a step (`samflow._engine.rk`, `samflow.diagonal_net.prod_excl`)
against what they stand for: diffrax's own Tsit5 interpolation, and the product of
the other layers."""

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from samflow._engine.rk import _Dense, _tsit5_weights
from samflow.diagonal_net import prod_excl


def _probe(t0, t, t1):
    """diffrax's Tsit5 interpolant on a unit basis: (1, 0, b_1..b_7)."""
    eye = jnp.eye(9)
    return diffrax.Tsit5.interpolation_cls(t0=t0, t1=t1, y0=eye[0], y1=eye[1], k=eye[2:]).evaluate(t)


def test_tsit5_weights_are_diffrax_bit_for_bit():
    r = np.random.default_rng(3)
    n = 20000
    t0 = r.uniform(-5, 10, n)
    h = 10.0 ** r.uniform(-9, 3, n)
    t1 = t0 + h
    t = t0 + r.uniform(0, 1, n) * h
    t[:10], t[10:20] = t0[:10], t1[10:20]  # the ends of the step
    t1[20:30] = t0[20:30]  # an empty step: diffrax's weights at theta = 0
    t[20:30] = t0[20:30]
    want = jax.jit(jax.vmap(_probe))(t0, t, t1)[:, 2:]
    got = jnp.stack(jax.jit(jax.vmap(_tsit5_weights))(t0, t, t1), axis=1)
    assert np.array_equal(np.asarray(got), np.asarray(want))


def test_dense_output_is_diffrax_interpolation():
    """`_Dense` on random stages equals diffrax's own evaluation to rounding."""
    r = np.random.default_rng(4)
    k = jnp.asarray(r.normal(size=(7, 3)))
    y0, y1 = jnp.asarray(r.normal(size=3)), jnp.asarray(r.normal(size=3))
    for t in (0.3, 0.31, 0.5, 0.9):
        ours = _Dense(diffrax.Tsit5.interpolation_cls, 0.3, 0.9, dict(y0=y0, y1=y1, k=tuple(k))).evaluate(t)
        ref = diffrax.Tsit5.interpolation_cls(t0=0.3, t1=0.9, y0=y0, y1=y1, k=k).evaluate(t)
        np.testing.assert_allclose(np.asarray(ours), np.asarray(ref), rtol=1e-14, atol=1e-15)


@pytest.mark.parametrize("L", [1, 2, 3, 4, 6])
def test_prod_excl_is_the_product_of_the_other_layers(L):
    r = np.random.default_rng(L)
    W = r.normal(size=(L, 7))
    W[r.integers(0, L), 2] = 0.0  # exact at zeros
    got = np.asarray(prod_excl(jnp.asarray(W)))
    want = np.stack([np.prod(np.delete(W, l, axis=0), axis=0) for l in range(L)])
    np.testing.assert_allclose(got, want, rtol=1e-14, atol=0)
    assert np.all((got == 0) == (want == 0))
    # the rounding order of running products from each end (cumprod's), bit for bit
    ones = jnp.ones_like(W[:1])
    before = jnp.cumprod(jnp.concatenate([ones, W[:-1]]), axis=0)
    after = jnp.cumprod(jnp.concatenate([ones, W[::-1][:-1]]), axis=0)[::-1]
    assert np.array_equal(got, np.asarray(before * after))
    # and the gradient the flows differentiate through
    V = jnp.asarray(r.uniform(0.5, 2.0, size=(L, 7)) * r.choice([-1.0, 1.0], size=(L, 7)))
    g = jax.grad(lambda w: jnp.sum(prod_excl(w) ** 2))(V)
    g_ref = jax.grad(lambda w: jnp.sum((jnp.prod(w, axis=0)[None] / w) ** 2))(V)
    np.testing.assert_allclose(np.asarray(g), np.asarray(g_ref), rtol=1e-12, atol=1e-12)
