"""Margin losses: closed forms, stability in float64, slope = -ell'."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import samflow as sf


def test_logistic_extremes_exact():
    lg = sf.Logistic()
    assert float(lg.value(-1000.0)) == 1000.0
    assert float(lg.value(1000.0)) == 0.0
    assert float(lg.value(0.0)) == pytest.approx(np.log(2.0), rel=1e-15)
    assert float(lg.slope(0.0)) == 0.5
    assert float(lg.slope(-1000.0)) == 1.0
    assert float(lg.log_inv_slope(1000.0)) == 1000.0
    assert 0.0 <= float(lg.log_inv_slope(-1000.0)) < 1e-300


def test_logistic_finite_on_margin_grid():
    lg = sf.Logistic()
    z = jnp.linspace(-1e3, 1e3, 20001)
    for f in (lg.value, lg.slope, lg.log_inv_slope):
        out = np.asarray(f(z))
        assert out.dtype == np.float64
        assert np.all(np.isfinite(out)), f
    assert np.all(np.asarray(lg.value(z)) >= 0)
    assert np.all(np.asarray(lg.slope(z)) >= 0) and np.all(np.asarray(lg.slope(z)) <= 1)


def test_logistic_matches_closed_form_moderate():
    lg = sf.Logistic()
    z = np.linspace(-30.0, 30.0, 601)
    np.testing.assert_allclose(lg.value(z), np.log1p(np.exp(-z)), rtol=1e-13)
    np.testing.assert_allclose(lg.slope(z), 1.0 / (1.0 + np.exp(z)), rtol=1e-13)
    np.testing.assert_allclose(lg.log_inv_slope(z), np.log1p(np.exp(z)), rtol=1e-13)
    # log_inv_slope stays exact where the slope itself underflows
    np.testing.assert_allclose(lg.log_inv_slope(np.array([800.0, 1e3])), [800.0, 1e3], rtol=1e-15)


def test_exponential_closed_form_and_finite():
    ex = sf.Exponential()
    z = np.linspace(-700.0, 1e3, 17001)
    for f in (ex.value, ex.slope, ex.log_inv_slope):
        assert np.all(np.isfinite(np.asarray(f(z)))), f
    zm = np.linspace(-50.0, 50.0, 101)
    np.testing.assert_allclose(ex.value(zm), np.exp(-zm), rtol=1e-14)
    np.testing.assert_allclose(ex.slope(zm), np.exp(-zm), rtol=1e-14)
    np.testing.assert_array_equal(ex.log_inv_slope(z), z)


@pytest.mark.parametrize("name,lo,hi", [("logistic", -1e3, 1e3), ("exponential", -700.0, 1e3)])
def test_slope_is_minus_grad_of_value(name, lo, hi):
    loss = sf.get_loss(name)
    z = jnp.linspace(lo, hi, 4001)
    g = jax.vmap(jax.grad(loss.value))(z)
    assert np.all(np.isfinite(np.asarray(g)))
    np.testing.assert_allclose(loss.slope(z), -g, rtol=1e-12, atol=1e-300)
    # and log_inv_slope = -log(slope) where the slope is a normal number
    zs = jnp.linspace(-600.0, 600.0, 1201)
    np.testing.assert_allclose(loss.log_inv_slope(zs), -np.log(np.asarray(loss.slope(zs))),
                               rtol=1e-12, atol=1e-15)


def test_get_loss_names():
    assert isinstance(sf.get_loss("logistic"), sf.Logistic)
    assert isinstance(sf.get_loss("exponential"), sf.Exponential)
    with pytest.raises(ValueError, match="logistic"):
        sf.get_loss("hinge")
