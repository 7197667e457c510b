"""l2-SAM at a critical point of the loss (issue 12, cases 7 and 10) and where a
MAX_STEPS cell stalled.

The l2 direction G/||G|| is undefined where G = grad L = 0 and, near a critical
point the flow reaches, points into it from every side: the Filippov solution
stays there. Before, the solver chattered at it until max_steps (status
MAX_STEPS, NaN after); now it ends CRITICAL with the arrival time.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import samflow as sf
from samflow.flows import real_time_velocity
from samflow.models import diagonal_network, solve_model
from samflow.solver import SolverSettings, summarize

# Case 7: depth 1, not separable, minimiser beta = 0.
SYMMETRIC = sf.Dataset(X=jnp.array([[1.0], [1.0]]), y=jnp.array([1.0, -1.0]))
T_STAR = 4.721078682566938  # quadrature (issue 12)

# Case 10: mixed labels; r_1 = mean y_i x_i1 = 0 at the start.
MIXED = sf.Dataset(
    X=jnp.array([[0.2, 0.4, 0.6, 0.8, 1.0], [0.1, 0.5, 0.5, 0.9, 1.1], [0.3, 0.3, 0.7, 0.7, 0.9]]),
    y=jnp.array([1.0, 1.0, -1.0]),
)


@pytest.mark.slow  # a long solve; test_depth1_field_points_into_the_critical_point is the fast check
def test_depth1_l2_reaches_minimiser_and_stays():
    ts = np.linspace(0.0, 10.0, 11)
    tr = sf.solve("l2", SYMMETRIC, alpha=1.0, rho=0.5, ts=ts, depth=1)
    assert sf.Status(int(tr.status)) is sf.Status.CRITICAL
    assert abs(float(tr.event_time) - T_STAR) < 1e-6 * T_STAR
    assert int(tr.num_steps) < 500  # was 16384 (MAX_STEPS)
    beta = np.asarray(tr.beta)[:, 0]
    assert np.all(np.isfinite(beta))
    assert np.all(np.abs(beta[ts > T_STAR]) < 1e-12)  # held at the minimiser
    assert np.all(beta[ts < T_STAR] > 0.0)
    np.testing.assert_array_equal(np.asarray(tr.t), ts)
    # In one dimension l2-SAM is linf-SAM, which slides at 0 from the same time.
    tl = sf.solve("linf", SYMMETRIC, alpha=1.0, rho=0.5, ts=ts, depth=1)
    np.testing.assert_allclose(np.asarray(tl.beta), np.asarray(tr.beta), atol=1e-7)
    # And the generic-model solver's critical-point event agrees.
    m = diagonal_network(1)
    tm = solve_model("l2", m, m.init(1.0, 1), 0.5, SYMMETRIC, ts)
    assert abs(float(tm.event_time) - T_STAR) < 1e-6 * T_STAR


def test_depth1_field_points_into_the_critical_point():
    """Filippov check: on both sides of beta = 0 the l2 field points towards it (at a
    distance where |dbeta/dt| stays about L'(rho) = 0.5 tanh(0.25)), so staying is
    the solution."""
    loss = sf.get_loss("logistic")
    for b in (1e-3, 1e-9, -1e-9, -1e-3):
        v = float(real_time_velocity(jnp.full((1, 1), b), 0.5, sf.Method.L2, SYMMETRIC, loss)[0, 0])
        assert np.sign(v) == -np.sign(b)
        assert abs(abs(v) - 0.5 * np.tanh(0.25)) < 1e-3


@pytest.mark.parametrize("alpha", [pytest.param(1e-4, marks=pytest.mark.slow), 1e-2, 1.0])
def test_mixed_labels_l2_stops_at_nonzero_critical_point(alpha):
    """Case 10 (alpha/rho = 1e-2, 1, 1e2): every cell was MAX_STEPS (stalled at a
    nonzero point, |W| about alpha); now CRITICAL at the time solve_model gives."""
    ts = np.array([0.0, 1.0, 10.0, 100.0, 1e3, 1e4])
    tr = sf.solve("l2", MIXED, alpha=alpha, rho=0.01, ts=ts, depth=2)
    assert sf.Status(int(tr.status)) is sf.Status.CRITICAL
    assert int(tr.num_steps) < 2000
    m = diagonal_network(2)
    tm = solve_model("l2", m, m.init(alpha, 5), 0.01, MIXED, ts)
    assert sf.Status(int(tm.status)) is sf.Status.COLLAPSED  # its name for any critical point
    assert abs(float(tr.event_time) - float(tm.event_time)) < 1e-6 * float(tm.event_time)
    W = np.asarray(tr.W)
    assert np.all(np.isfinite(W))
    # The heat map's "no value (blow-up / failed)" colour is for dominant index -1.
    assert np.all(np.asarray(summarize(tr).dominant) >= 1)
    assert int(np.isin(int(tr.status), sf.status.FAILED_STATUSES)) == 0
    after = ts > float(tr.event_time)
    assert after[-1]
    # Held at a nonzero point, where grad L is ~0 (relative to the gradient at W(0)).
    np.testing.assert_array_equal(W[after], np.broadcast_to(W[-1], W[after].shape))
    assert np.linalg.norm(W[-1]) > alpha
    grad = lambda W: sf.grad_loss(jnp.asarray(W), MIXED, sf.get_loss("logistic"))
    assert np.linalg.norm(grad(W[-1])) < 1e-6 * max(np.linalg.norm(grad(W[0])), 1e-3)


@pytest.mark.slow
def test_mixed_labels_event_time_converges():
    """At tight tolerances the engine and solve_model agree to 1e-11 (alpha = 1):
    196.39682210..., and the default tolerances are within 1e-7 of it."""
    m = diagonal_network(2)
    tight = SolverSettings(rtol=1e-11, atol=1e-15)
    t_ref = float(solve_model("l2", m, m.init(1.0, 5), 0.01, MIXED, [0.0, 300.0], settings=tight).event_time)
    t_tight = float(sf.solve("l2", MIXED, alpha=1.0, rho=0.01, ts=[0.0, 300.0], settings=tight).event_time)
    t_default = float(sf.solve("l2", MIXED, alpha=1.0, rho=0.01, ts=[0.0, 300.0]).event_time)
    assert abs(t_tight - t_ref) < 1e-10 * t_ref
    assert abs(t_default - t_ref) < 1e-7 * t_ref


@pytest.mark.slow  # multi-sample; the mixed-label cases check the CRITICAL event by default
def test_separable_gaussian_critical_point():
    """A separable 4 x 5 Gaussian data set: small inits collapse to 0 (COLLAPSED), a
    larger one reaches a nonzero critical point (W on a non-separable subset of
    coordinates): CRITICAL, at solve_model's time; none MAX_STEPS."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((4, 5))
    y = np.sign(X @ rng.standard_normal(5))
    data = sf.Dataset(X=jnp.asarray(X), y=jnp.asarray(y))
    a = np.array([0.005, 0.1])
    ts = [0.0, 1.0, 10.0, 100.0, 1e3]
    tr = sf.solve("l2", data, alpha=a, rho=np.full(2, 0.1), ts=ts, depth=2, alpha_batched=True)
    np.testing.assert_array_equal(np.asarray(tr.status), [sf.Status.COLLAPSED, sf.Status.CRITICAL])
    m = diagonal_network(2)
    tm = solve_model("l2", m, jax.vmap(lambda x: m.init(x, 5))(jnp.asarray(a)), np.full(2, 0.1), data, ts,
                     theta0_batched=True)
    np.testing.assert_allclose(np.asarray(tr.event_time), np.asarray(tm.event_time), rtol=1e-6)


@pytest.mark.slow  # a bit-for-bit pin, like tests/test_pin.py
def test_collapse_times_unchanged_bitwise():
    """The critical-point event must leave the collapse to W = 0 exactly as it was
    (event times recorded with the lane engine; the segment engine's were 2.4e-15,
    5e-13 and 1e-11 relative away from them)."""
    ts = np.geomspace(1e-2, 50, 12)
    tr = sf.solve("l2", sf.single_sample([0.2, 0.4, 0.6, 0.8, 1.0]), alpha=np.array([0.05, 0.1]),
                  rho=np.full(2, 0.5), ts=ts, depth=2, alpha_batched=True)
    assert [float(x) for x in tr.event_time] == [2.4449139637872146, 6.106405448572034]
    X = jnp.array([[0.2, 0.4, 0.6, 0.8, 1.0], [0.1, 0.5, 0.5, 0.9, 1.1], [-0.3, -0.3, -0.7, -0.7, -0.9]])
    data = sf.Dataset(X=X, y=jnp.array([1.0, 1.0, -1.0]))
    tr = sf.solve("l2", data, alpha=np.array([0.005, 0.01, 0.02, 0.03]), rho=np.full(4, 0.1), ts=ts, depth=2,
                  alpha_batched=True)
    np.testing.assert_array_equal(np.asarray(tr.status), sf.Status.COLLAPSED)
    assert [float(x) for x in tr.event_time] == [
        1.1041486534869742, 2.4030955961004303, 6.033305955323701, 14.17806069000975
    ]


def test_max_steps_event_time_is_where_the_solver_stalled():
    """A MAX_STEPS cell reports the time of its last accepted step, not a save time
    (case 7 reported 4.6535, the save time before the stall)."""
    ts = np.linspace(0.0, 10.0, 5)
    tr = sf.solve("gd", SYMMETRIC, alpha=1.0, rho=0.5, ts=ts, depth=1, settings=SolverSettings(max_steps=3))
    assert sf.Status(int(tr.status)) is sf.Status.MAX_STEPS
    t_stall = float(tr.event_time)
    assert t_stall not in ts and 0.0 < t_stall < 10.0
    beta = np.asarray(tr.beta)[:, 0]
    np.testing.assert_array_equal(np.isfinite(beta), ts <= t_stall)
    # Three more steps go further: the stall time is the solver's, not a save time.
    tr6 = sf.solve("gd", SYMMETRIC, alpha=1.0, rho=0.5, ts=ts, depth=1, settings=SolverSettings(max_steps=6))
    assert float(tr6.event_time) > t_stall
