"""The four flows against an independent evaluation of docs/theory.md section 2 and 3."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import samflow as sf
from samflow.flows import Method

from helpers import METHODS, eps_reference, grad_by_ad

RHO = 0.37


def _reference_velocity(W, rho, method, data, loss):
    """-grad L(W + eps(grad L(W))) with eps by numpy from an autodiff gradient."""
    G = np.asarray(grad_by_ad(W, data, loss))
    eps = eps_reference(G, rho, method)
    return -np.asarray(grad_by_ad(jnp.asarray(W) + eps, data, loss)), eps


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("depth", [1, 2, 3, 4])
def test_real_time_velocity_matches_perturbed_gradient(method, depth, loss, multi_data, rng):
    d = multi_data.d
    for W in (rng.normal(size=(depth, d)), 0.05 * rng.normal(size=(depth, d))):
        got = np.asarray(sf.real_time_velocity(jnp.asarray(W), RHO, Method(method), multi_data, loss))
        ref, _ = _reference_velocity(W, RHO, method, multi_data, loss)
        assert np.all(np.isfinite(got))
        np.testing.assert_allclose(got, ref, rtol=1e-11, atol=1e-14)


@pytest.mark.parametrize("method", METHODS)
def test_perturbation_matches_reference(method, loss, multi_data, rng):
    W = jnp.asarray(rng.normal(size=(3, multi_data.d)))
    r = sf.residual(W, multi_data, loss)
    got = np.asarray(sf.perturbation(W, r, RHO, Method(method)))
    ref = eps_reference(np.asarray(grad_by_ad(W, multi_data, loss)), RHO, method)
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("depth,scale", [(1, 1e-300), (2, 1e-150), (3, 1e-150), (3, 1e-102)])
def test_l2_perturbation_has_norm_rho_for_tiny_gradients(depth, scale, multi_data, rng):
    loss = sf.Logistic()
    W = scale * rng.uniform(0.5, 1.5, size=(depth, multi_data.d))
    W = jnp.asarray(W)
    r = sf.residual(W, multi_data, loss)
    G = -np.asarray(r)[None, :] * np.asarray(sf.prod_excl(W))
    assert np.any(G != 0)  # the case is a tiny gradient, not a zero one
    eps = np.asarray(sf.perturbation(W, r, RHO, Method.L2))
    assert np.all(np.isfinite(eps))
    assert abs(np.linalg.norm(eps) / RHO - 1.0) <= 1e-9
    # direction of G, computed after an exact rescaling by a power of two
    Gs = G * 2.0 ** -np.floor(np.log2(np.max(np.abs(G))))
    np.testing.assert_allclose(eps, RHO * Gs / np.linalg.norm(Gs), rtol=1e-12, atol=1e-15)
    # unit_l2 directly
    u = np.asarray(sf.unit_l2(jnp.asarray(G)))
    assert abs(np.linalg.norm(u) - 1.0) <= 1e-12


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("depth", [2, 3])
def test_perturbation_zero_at_zero_weights(method, depth, multi_data, loss):
    W = jnp.zeros((depth, multi_data.d))
    r = sf.residual(W, multi_data, loss)
    eps = np.asarray(sf.perturbation(W, r, RHO, Method(method)))
    np.testing.assert_array_equal(eps, 0.0)
    v = np.asarray(sf.real_time_velocity(W, RHO, Method(method), multi_data, loss))
    np.testing.assert_array_equal(v, 0.0)
    np.testing.assert_array_equal(sf.unit_l2(jnp.zeros((depth, 3))), 0.0)


# gd (the slowest to differentiate, and no singular point) is marked slow; the SAM flows run by default.
@pytest.mark.parametrize("method", [m if m != "gd" else pytest.param(m, marks=pytest.mark.slow) for m in METHODS])
@pytest.mark.parametrize("depth", [1, 2, 3])
def test_jacobians_finite_at_and_near_zero(method, depth, mu12, multi_data):
    m = Method(method)
    loss = sf.Logistic()
    d = 2
    data2 = sf.Dataset.from_arrays(np.asarray(multi_data.X)[:, :d], multi_data.y)
    names = ["zero", "1e-100", "1e-160", "1e-9 ramp", "half zeros"]
    points = np.stack([
        np.zeros((depth, d)),
        # the true Jacobian is about 1/scale here: large, but a finite double
        np.full((depth, d), 1e-100),
        np.full((depth, d), 1e-160),
        1e-9 * np.arange(1.0, depth * d + 1).reshape(depth, d),
        np.where(np.arange(depth * d).reshape(depth, d) % 2 == 0, 0.0, 0.3),
    ])

    @jax.vmap
    def jacobians(W):
        rt = lambda data: jax.jacfwd(lambda W: sf.real_time_velocity(W, RHO, m, data, loss))(W)
        Jw, Jlog = jax.jacfwd(lambda W: sf.rescaled_velocity(W, RHO, m, mu12, loss))(W)
        return rt(data2), rt(mu12), Jw, Jlog

    for J, what in zip(jacobians(jnp.asarray(points)), ["real time, n=5", "real time, n=1",
                                                         "rescaled dW", "rescaled log rate"]):
        finite = np.isfinite(np.asarray(J)).reshape(len(names), -1).all(axis=1)
        bad = [n for n, ok in zip(names, finite) if not ok]
        assert not bad, f"{what}: non-finite Jacobian at W = {bad}"


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("depth", [2, 3])
def test_rescaled_times_slope_is_real_time(method, depth, loss, rng):
    data = sf.single_sample([0.4, 1.0, 1.7])
    mu = np.asarray(data.mu)
    W = rng.uniform(-1.0, 1.0, size=(depth, 3))
    dW, log_rate = sf.rescaled_velocity(jnp.asarray(W), RHO, Method(method), data, loss)
    ref, eps = _reference_velocity(W, RHO, method, data, loss)
    z_hat = float(np.dot(np.prod(W + eps, axis=0), mu))
    slope = float(loss.slope(z_hat))
    np.testing.assert_allclose(np.asarray(dW) * slope, ref, rtol=1e-11, atol=1e-15)
    np.testing.assert_allclose(np.asarray(dW) * slope,
                               sf.real_time_velocity(jnp.asarray(W), RHO, Method(method), data, loss),
                               rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(float(log_rate), -np.log(slope), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("method", METHODS)
def test_velocity_one_definition_for_both_clocks(method, loss, rng):
    """`velocity(clock=)` against the reference field (t) and the time change (tau):
    dW/dt = (dW/dtau) exp(-log(dt/dtau)); log(dt/dt) is 0; the two named
    clocks are the same numbers, and an unknown clock is refused."""
    data = sf.single_sample([0.4, 1.0, 1.7])
    W = jnp.asarray(rng.uniform(-1.0, 1.0, size=(3, 3)))
    v_t, log_t = sf.velocity(W, RHO, method, data, loss, clock="t")
    v_tau, log_tau = sf.velocity(W, RHO, method, data, loss, clock=sf.Clock.TAU)
    ref, _ = _reference_velocity(np.asarray(W), RHO, method, data, loss)
    np.testing.assert_allclose(np.asarray(v_t), ref, rtol=1e-11, atol=1e-15)
    assert float(log_t) == 0.0
    np.testing.assert_allclose(np.asarray(v_tau) * np.exp(-float(log_tau)), ref, rtol=1e-11, atol=1e-15)
    np.testing.assert_array_equal(sf.real_time_velocity(W, RHO, Method(method), data, loss), v_t)
    np.testing.assert_array_equal(sf.rescaled_velocity(W, RHO, Method(method), data, loss)[0], v_tau)
    with pytest.raises(ValueError, match="unknown clock 'T'"):
        sf.velocity(W, RHO, method, data, loss, clock="T")
    by_name = sf.velocity(W, RHO, method, data, type(loss).__name__.lower(), clock="tau")
    np.testing.assert_array_equal(by_name[0], v_tau)
    np.testing.assert_array_equal(by_name[1], log_tau)
    with pytest.raises(ValueError, match="unknown loss 'hinge': allowed values are logistic, exponential"):
        sf.velocity(W, RHO, method, data, "hinge")


def test_rescaled_depth2_l2_closed_form(rng):
    # symmetric depth 2: dw_j/dtau = mu_j w_j (1 - rho mu_j / (sqrt(2) ||mu w||))
    mu = np.array([1.0, 2.0, 3.5])
    data = sf.single_sample(mu)
    w = rng.uniform(0.1, 1.0, size=3)
    dW, _ = sf.rescaled_velocity(jnp.asarray(np.stack([w, w])), RHO, Method.L2, data, sf.Logistic())
    ref = mu * w * (1.0 - RHO * mu / (np.sqrt(2.0) * np.linalg.norm(mu * w)))
    np.testing.assert_allclose(np.asarray(dW), np.stack([ref, ref]), rtol=1e-13)


@pytest.mark.parametrize("c", [1e-3, 7.5, 1e4])
def test_depth2_l2_rescaled_field_scales_with_c(c, rng):
    data = sf.single_sample([0.3, 1.0, 2.0])
    W = rng.normal(size=(2, 3))
    f1, _ = sf.rescaled_velocity(jnp.asarray(W), RHO, Method.L2, data, sf.Logistic())
    fc, _ = sf.rescaled_velocity(jnp.asarray(c * W), c * RHO, Method.L2, data, sf.Logistic())
    np.testing.assert_allclose(np.asarray(fc), c * np.asarray(f1), rtol=1e-12, atol=1e-15 * c)


def test_one_sample_fields_refuse_several_samples(multi_data):
    # The rescaled field and the log-coordinate field are defined for one sample
    # {(mu, +1)}; on several they silently used sample 1's y_1 x_1 as mu.
    from samflow.flows import log_velocity

    W = jnp.full((2, 3), 0.4)
    v_t, _ = sf.velocity(W, RHO, Method.L2, multi_data, "logistic")  # the t clock takes any data
    assert np.all(np.isfinite(np.asarray(v_t)))
    with pytest.raises(ValueError, match="clock = 'tau'.*single sample"):
        sf.velocity(W, RHO, Method.L2, multi_data, "logistic", clock="tau")
    with pytest.raises(ValueError, match="clock = 'tau'.*single sample"):
        sf.rescaled_velocity(W, RHO, Method.L2, multi_data, sf.Logistic())
    for rescaled in (False, True):
        with pytest.raises(ValueError, match="one sample"):
            log_velocity(jnp.log(W), jnp.ones((2, 3)), RHO, Method.L2, multi_data, sf.Logistic(), rescaled)


@pytest.mark.parametrize("depth", [2, 3, 4])
@pytest.mark.parametrize("n", [1, 3])
def test_one_row_with_layers_is_the_field_of_equal_layers(depth, n):
    """`layers=L` (docs/theory.md s.3.5, "Equal layers stay equal"): the field of one
    row standing for L equal layers is every row of the general (L, d) field at the
    broadcast weights, for every method and clock, and in log coordinates; the
    norms of l2 and lp over the L rows come from `equal_layers_rho` (rho / sqrt L,
    rho / L^(1/p)), so a wrong factor moves the result by far more than 1e-14."""
    from samflow.flows import log_velocity, velocity

    rng = np.random.default_rng(10 * depth + n)
    X = rng.normal(size=(n, 6))
    data = sf.Dataset.from_arrays(X, np.where(rng.normal(size=n) > 0, 1.0, -1.0))
    loss = sf.get_loss("logistic")
    w = 0.7 * rng.normal(size=(1, 6))
    W = jnp.broadcast_to(w, (depth, 6))
    memory = jnp.sign(W)
    for method in ("gd", "l2", "linf", "usam", "lp"):
        p = jnp.asarray(3.0) if method == "lp" else None
        for clock in ("t", "tau") if n == 1 else ("t",):
            full, log_full = velocity(W, 0.3, method, data, loss, memory, clock=clock, p=p)
            row, log_row = velocity(w, 0.3, method, data, loss, memory[:1], clock=clock, p=p, layers=depth)
            assert row.shape == (1, 6)
            np.testing.assert_allclose(np.broadcast_to(row, full.shape), full, rtol=1e-14, atol=1e-15 * np.abs(full).max())
            np.testing.assert_allclose(log_row, log_full, rtol=1e-14, atol=1e-15)
            if n == 1 and method != "linf":
                p_log = jnp.asarray(1.5) if method == "lp" else None
                x, sign = jnp.log(jnp.abs(W)), jnp.sign(W)
                full, log_full = log_velocity(x, sign, 0.3, method, data, loss, clock == "tau", p_log)
                row, log_row = log_velocity(x[:1], sign[:1], 0.3, method, data, loss, clock == "tau", p_log,
                                            layers=depth)
                np.testing.assert_allclose(np.broadcast_to(row, full.shape), full, rtol=1e-14,
                                           atol=1e-15 * np.abs(full).max())
                np.testing.assert_allclose(log_row, log_full, rtol=1e-14, atol=1e-15)
