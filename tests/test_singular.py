"""Singular points (docs/theory.md section 4): zero gradient, collapse, the linf sign
switch (Filippov sliding), finite-time blow-up, long horizons."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.integrate import solve_ivp

import samflow as sf
from samflow import theory
from samflow.status import Status

METHODS = ["gd", "l2", "linf", "usam"]
MU3 = np.array([0.5, 1.0, 1.5])
N = 12


@pytest.fixture(scope="module")
def multi():
    X = np.array([[0.3, 1.0, 2.0], [0.5, 0.8, 1.5], [-0.4, -1.2, -1.8]])
    return sf.Dataset.from_arrays(X, np.array([1.0, 1.0, -1.0]))


@pytest.mark.slow
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("depth", [2, 3, 4])
def test_zero_init_stays_zero(method, depth, multi):
    """The engine keeps W = 0 (a fixed point of every flow at depth >= 2); `solve`
    refuses this init in one line (tests/test_batching.py), so the engine is
    called directly."""
    ts = jnp.asarray(np.geomspace(1e-2, 1e3, N))
    for data in (sf.single_sample(MU3), multi):
        with pytest.raises(ValueError, match="cannot move"):
            sf.solve(method, data, 0.0, np.array([0.1, 1.0]), ts, depth=depth)
        cell = lambda r: sf.solve_cell(jnp.zeros((depth, data.d)), r, data, ts, method=method, clock="t",
                                       settings=sf.SolverSettings())
        tr = jax.vmap(cell)(jnp.asarray([0.1, 1.0]))
        W = np.asarray(tr.W)
        assert np.all(W == 0.0), f"{method} depth {depth}: W moved from 0"
        assert np.all(np.isfinite(np.asarray(tr.loss)))
        np.testing.assert_allclose(np.asarray(tr.loss), np.log(2.0), rtol=1e-15)
        assert np.all(np.asarray(tr.status) <= int(Status.SLID))


def test_depth1_zero_init_moves_along_mu():
    # Depth 1 has no singular point at 0: the gradient there is -mu/2.
    ts = np.array([0.5, 1.0])
    tr = sf.solve("l2", sf.single_sample(MU3), 0.0, 0.1, ts, depth=1)
    assert int(tr.status) == Status.FINISHED
    b = np.asarray(tr.beta[-1])
    np.testing.assert_allclose(b / np.linalg.norm(b), MU3 / np.linalg.norm(MU3), atol=1e-12)


def _l2_symmetric_depth_L(tau, w, mu, rho, L):
    g = mu * w ** (L - 1)
    n = np.sqrt(L) * np.linalg.norm(g)
    w_hat = w - rho * g / n
    return mu * w_hat ** (L - 1)


def _collapse_reference(alpha, rho, mu, L):
    ev = lambda tau, w, *a: np.linalg.norm(w) - 1e-10 * rho
    ev.terminal, ev.direction = True, -1
    sol = solve_ivp(_l2_symmetric_depth_L, (0, 1e3), np.full(mu.size, alpha), method="DOP853",
                    rtol=1e-13, atol=1e-16, events=ev, args=(mu, rho, L))
    w = sol.y_events[0][0]
    v = _l2_symmetric_depth_L(0, w, mu, rho, L)
    return sol.t_events[0][0] + np.dot(w, w) / -np.dot(w, v)


@pytest.mark.parametrize("L, alpha", [(2, 0.1), (4, 0.1)])
def test_collapse_time_and_direction_and_no_further_cost(L, alpha):
    rho = 1.0
    ts = np.linspace(0.0, 60.0, N)
    data = sf.single_sample(MU3)
    tr = sf.solve("l2", data, alpha, np.array([rho, rho]), np.stack([ts, ts])[0], depth=L, clock="tau")
    assert np.all(np.asarray(tr.status) == Status.COLLAPSED)
    ref = _collapse_reference(alpha, rho, MU3, L)
    assert abs(float(tr.event_time[0]) - ref) <= 1e-6 * ref
    direction = np.asarray(tr.collapse_direction[0])
    np.testing.assert_allclose(np.linalg.norm(direction), 1.0, rtol=1e-12)
    if L == 2:
        # Depth 2: just before the collapse beta aligns with e_1, the most minor feature.
        np.testing.assert_allclose(direction, [1.0, 0.0, 0.0], atol=1e-6)
    after = ts > float(tr.event_time[0])
    assert after.any() and np.all(np.asarray(tr.W[0])[after] == 0.0)
    # A ten times longer horizon costs no extra step after the collapse.
    longer = sf.solve("l2", data, alpha, rho, ts * 10, depth=L, clock="tau")
    assert int(longer.num_steps) == int(tr.num_steps[0])


def test_l2_in_dimension_one_is_a_sign_and_stops_at_zero():
    # d = 1, depth 2: w_hat = w - rho/sqrt(2) sign(w), i.e. linf with rho' = rho/sqrt(2).
    rho, alpha, mu = 1.0, 0.4, 2.0
    ts = np.linspace(0.0, 2.0, N)
    tr = sf.solve("l2", sf.single_sample([mu]), alpha, rho, ts, depth=2, clock="tau")
    rho_p = rho / np.sqrt(2.0)
    tau_star = np.log(rho_p / (rho_p - alpha)) / mu
    assert int(tr.status) == Status.COLLAPSED
    assert abs(float(tr.event_time) - tau_star) <= 1e-8
    W = np.asarray(tr.W)[:, 0, 0]
    before = ts < tau_star
    np.testing.assert_allclose(W[before], rho_p + (alpha - rho_p) * np.exp(mu * ts[before]), rtol=1e-7)
    assert np.all(W[~before] == 0.0)


def test_linf_slides_at_zero_without_chattering():
    rho = 0.1
    alpha = np.array([0.05, 0.3, 0.07])  # coordinates 1 and 3 start below rho
    ts = np.linspace(0.0, 3.0, N)
    data = sf.single_sample(MU3)
    tr = sf.solve("linf", data, np.stack([alpha, np.full(3, 0.3)]), np.array([rho, rho]), ts, depth=2, clock="tau",
                  alpha_batched=True)
    assert int(tr.status[0]) == Status.SLID and int(tr.status[1]) == Status.FINISHED
    tau_star = theory.linf_zero_time(MU3, alpha=alpha, rho=rho, depth=2)
    slide = np.asarray(tr.slide_time[0])
    for j in (0, 2):
        np.testing.assert_allclose(slide[:, j], tau_star[j], atol=1e-8, rtol=0)
        W = np.asarray(tr.W[0])[:, :, j]
        assert np.all(W[ts > tau_star[j] + 1e-12] == 0.0)
    assert np.all(np.isnan(slide[:, 1]))
    # No chattering: the sliding cell costs at most 3x the smooth cell.
    assert int(tr.num_steps[0]) <= 3 * int(tr.num_steps[1])


def test_linf_depth4_reaches_zero_at_the_closed_form_time():
    # L even: below rho, dw/dtau = mu (w - rho)^3 < 0 takes w to 0 at a finite
    # tau (samflow.theory.linf_zero_time), where it then stays.
    rho, alpha = 1.0, np.array([0.5, 0.7, 0.6])
    ts = np.linspace(0.0, 6.0, N)
    tr = sf.solve("linf", sf.single_sample(MU3), alpha, rho, ts, depth=4, clock="tau")
    assert int(tr.status) == Status.SLID
    tau_star = theory.linf_zero_time(MU3, alpha=alpha, rho=rho, depth=4)
    assert np.all(tau_star < ts[-1])
    np.testing.assert_allclose(np.asarray(tr.slide_time), np.broadcast_to(tau_star, (4, 3)), rtol=1e-10)
    assert np.all(np.asarray(tr.W)[-1] == 0.0)
    # No chattering at the zero: the sliding cell costs fewer steps than gradient flow
    # (rho = 0) from the same alpha at the same (depth-4 default) tolerances; 353 vs
    # 1,931 steps. A bound in steps alone would move with the default tolerances
    # (76 steps at rtol 1e-8, 353 at depth 4's default 1e-12).
    gf = sf.solve("linf", sf.single_sample(MU3), alpha, 0.0, ts, depth=4, clock="tau")
    assert int(tr.num_steps) < int(gf.num_steps)


@pytest.mark.slow  # 36 s (its compile); the default suite keeps the one-sample slide tests
def test_linf_multi_sample_slides(multi):
    # Real time, several samples: coordinates below rho reach 0 and stay there.
    rho = 0.2
    ts = np.geomspace(1e-2, 1e3, N)
    alphas = np.stack([np.array([0.05, 0.5, 0.5]), np.full(3, 0.5)])
    tr = sf.solve("linf", multi, alphas, np.full(2, rho), ts, depth=2, alpha_batched=True)
    assert int(tr.status[0]) == Status.SLID and int(tr.status[1]) == Status.FINISHED
    slide = np.asarray(tr.slide_time[0])
    assert np.all(np.isfinite(slide[:, 0])) and np.all(np.isnan(slide[:, 1:]))
    W = np.asarray(tr.W[0])
    assert np.all(W[ts > slide[0, 0], :, 0] == 0.0)
    assert int(tr.num_steps[0]) <= 3 * int(tr.num_steps[1])
    # Reference: until the slide both coordinates of the slid feature follow a
    # fine-tolerance solve of the same field.
    fine = sf.solve("linf", multi, alphas[0], rho, ts, depth=2,
                    settings=sf.SolverSettings(rtol=1e-12, atol=1e-15, solver="dopri8"))
    np.testing.assert_allclose(slide, np.asarray(fine.slide_time), rtol=1e-7)


@pytest.mark.parametrize("method, L, alpha", [("linf", 3, 0.3), ("l2", 3, 0.5), ("gd", 4, 0.5)])
def test_finite_time_blowup_in_tau_is_an_event(method, L, alpha):
    rho = 0.1
    ts = np.linspace(0.0, 40.0, N)
    data = sf.single_sample(MU3)
    tr = sf.solve(method, data, alpha, rho, ts, depth=L, clock="tau")
    assert int(tr.status) == Status.BLEW_UP
    t_b = float(tr.event_time)
    if method == "linf":
        expected = np.min(theory.linf_blowup_time(MU3, alpha=np.full(3, alpha), rho=rho, depth=L))
        assert abs(t_b - expected) <= 1e-7 * expected
    if method == "gd":
        # GD, depth L, symmetric: dw_j/dtau = mu_j w_j^(L-1) blows up at
        # alpha^-(L-2) / ((L-2) mu_max).
        expected = alpha ** -(L - 2) / ((L - 2) * MU3.max())
        assert abs(t_b - expected) <= 1e-7 * expected
    W = np.asarray(tr.W)
    assert np.all(np.isfinite(W[ts < t_b])) and np.all(np.isnan(W[ts > t_b]))
    # The same cell in real time integrates normally.
    real = sf.solve(method, data, alpha, rho, np.geomspace(1e-2, 1e4, N), depth=L, clock="t")
    assert int(real.status) in (Status.FINISHED, Status.SLID)
    assert np.all(np.isfinite(np.asarray(real.W)))


@pytest.mark.parametrize("method", METHODS)
def test_long_horizon_real_time(method):
    ts = np.geomspace(1e-2, 1e8, N)
    tr = sf.solve(method, sf.single_sample(MU3), np.array([0.02, 0.2, 2.0]), np.full(3, 0.1), ts, depth=2,
                  alpha_batched=True)
    status = np.asarray(tr.status)
    assert np.all(status <= int(Status.SLID)), status
    assert np.all(np.asarray(tr.num_steps) < 2000)
    t = np.asarray(tr.t)
    assert np.all(np.diff(t, axis=-1) > 0)
    assert np.all(np.isfinite(np.asarray(tr.beta)))
    # Growth is logarithmic in t: at t = 1e8 the margin is about log t.
    z = np.asarray(tr.beta)[2, -1] @ MU3
    assert 10.0 < z < 30.0


def test_no_nan_between_capture_and_collapse_time():
    # Regression: saves between the capture (||W|| = 1e-6 rho) and the
    # extrapolated collapse time were NaN. The state goes linearly to 0 there.
    data = sf.single_sample(MU3)
    coarse = sf.solve("l2", data, 0.05, 1.0, np.geomspace(1e-2, 1e2, N))
    T = float(coarse.event_time)
    ts = np.sort(np.concatenate([np.geomspace(1e-2, 1e2, N - 4), T * (1 + np.array([-3e-7, -1e-9, 1e-9, 1e-7]))]))
    tr = sf.solve("l2", data, 0.05, 1.0, ts)
    assert int(tr.status) == Status.COLLAPSED and abs(float(tr.event_time) - T) <= 1e-12 * T
    W = np.asarray(tr.W)
    assert np.all(np.isfinite(W))
    norms = np.linalg.norm(W.reshape(len(ts), -1), axis=1)
    near = (ts > T * (1 - 1e-6)) & (ts <= T)
    assert near.sum() == 2 and np.all(norms[near] <= 1e-6 * 1.0) and np.all(np.diff(norms[near]) < 0)
    assert np.all(norms[ts > T] == 0.0)
