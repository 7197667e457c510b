"""Diagonal network: beta, prod_excl, the hand-written gradient, init_weights."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import samflow as sf

from helpers import grad_by_ad, random_data


def _weights_with_zeros(rng, L, d):
    W = rng.normal(size=(L, d))
    # one exact zero in column 0, two in column 1 (when they exist)
    W[rng.integers(L), 0] = 0.0
    if d >= 2 and L >= 2:
        rows = rng.choice(L, size=2, replace=False)
        W[rows, 1] = 0.0
    return W


@jax.jit
def _three_gradients(W, data, loss):
    return (sf.grad_loss(W, data, loss), grad_by_ad(W, data, loss),
            jax.grad(sf.loss_value)(W, data, loss))


@pytest.mark.parametrize("depth", [1, 2, 3, 4])
def test_grad_loss_equals_autodiff(depth, loss, rng):
    # one random (n, d) per case (each new shape costs a compilation)
    d = int(rng.integers(2, 7))
    n = int(rng.integers(2, 7))
    data = random_data(rng, n, d)
    for W in (rng.normal(size=(depth, d)), _weights_with_zeros(rng, depth, d)):
        got, ref_chain, ref_lib = map(np.asarray, _three_gradients(jnp.asarray(W), data, loss))
        assert got.shape == (depth, d)
        assert np.all(np.isfinite(got))
        np.testing.assert_allclose(got, ref_chain, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(got, ref_lib, rtol=1e-12, atol=1e-14)


def test_loss_value_closed_form(rng):
    data = random_data(rng, 4, 3)
    W = rng.normal(size=(3, 3))
    b = W[0] * W[1] * W[2]
    z = np.asarray(data.y) * (np.asarray(data.X) @ b)
    np.testing.assert_allclose(sf.beta(jnp.asarray(W)), b, rtol=1e-15)
    np.testing.assert_allclose(sf.loss_value(jnp.asarray(W), data, sf.Logistic()),
                               np.mean(np.log1p(np.exp(-z))), rtol=1e-13)
    np.testing.assert_allclose(sf.loss_value(jnp.asarray(W), data, sf.Exponential()),
                               np.mean(np.exp(-z)), rtol=1e-13)


@pytest.mark.parametrize("depth", [1, 2, 3, 4, 5])
def test_prod_excl_exact_with_zeros(depth, rng):
    # Small integers and halves: every product is exact, so equality is exact.
    vals = np.array([0.0, 1.0, -1.0, 2.0, -3.0, 0.5])
    cols = np.array(list(itertools.product(range(len(vals)), repeat=depth)))
    W = vals[cols].T  # (depth, 6**depth): every combination, zeros in every place
    got = np.asarray(sf.prod_excl(jnp.asarray(W)))
    ref = np.empty_like(W)
    for l in range(depth):
        ref[l] = np.prod(np.delete(W, l, axis=0), axis=0)
    np.testing.assert_array_equal(got, ref)
    assert not np.any(np.isnan(got))


def test_init_weights_shapes_and_errors():
    W = np.asarray(sf.init_weights(0.3, 3, 4))
    assert W.shape == (3, 4) and W.dtype == np.float64
    np.testing.assert_array_equal(W, np.full((3, 4), 0.3))
    a = np.array([0.1, 0.2, 0.3, 0.4])
    W = np.asarray(sf.init_weights(a, 2, 4))
    assert W.shape == (2, 4)
    np.testing.assert_array_equal(W, np.stack([a, a]))
    full = np.arange(12.0).reshape(3, 4)
    np.testing.assert_array_equal(sf.init_weights(full, 3, 4), full)
    with pytest.raises(ValueError, match="alpha"):
        sf.init_weights(np.ones(5), 3, 4)
    with pytest.raises(ValueError, match="alpha"):
        sf.init_weights(np.ones((2, 4)), 3, 4)
    with pytest.raises(ValueError, match="alpha"):
        sf.init_weights(np.ones((3, 4, 1)), 3, 4)


@pytest.mark.parametrize("depth, d, name", [(0, 4, "depth"), (True, 4, "depth"), (-1, 4, "depth"), (2.5, 4, "depth"),
                                            (2, 0, "d"), (2, 4.0, "d")])
def test_init_weights_refuses_a_bad_depth_or_d(depth, d, name):
    # depth 0 gave an empty (0, 4) init and True one layer, silently; -1 and 2.5
    # died inside jnp.broadcast_to with a JAX TypeError.
    with pytest.raises(ValueError, match=f"^{name} must be an integer >= 1"):
        sf.init_weights(0.3, depth, d)
