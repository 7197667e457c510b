"""linf-SAM on multi-sample data at the switching surfaces r_j(W) = 0 (issue 12 case 10, linf half).

eps_lj = rho sign(G_lj), G_lj = -r_j(W) prod_excl_lj(W), r = mean_i y_i slope(z_i) x_i:
besides a weight reaching 0, the direction flips where r_j(W) = 0 (on one sample
r_j = slope mu_j never changes sign). Before, the solver chattered across that
surface until max_steps: 77 of the 96 cells of the case-10 grid ended MAX_STEPS
(NaN from the chatter on), in 106 s. Now `solve_cell` keeps a sign memory of r
per coordinate, stops at each crossing and, where both one-sided fields point
into the surface, follows the Filippov sliding mode a f+ + (1 - a) f- along it:
all 96 cells end SLID (15 s).

Reference: discrete linf-SAM (`run_discrete`), whose eta -> 0 limit is the flow;
its chattering across a surface averages to the Filippov convex combination.
(A tanh(r_j / eps) regularization is NOT a reference here: its eps -> 0 limit is
the "equivalent control" solution, which differs from the Filippov one by 2e-4
relative at t = 100 for alpha/rho = 1.93 because the field is not affine in the
sign of r_j; discrete SAM converges to the Filippov flow at O(eta) and stays
2e-4 away from the tanh limit.)
"""

import jax.numpy as jnp
import numpy as np
import pytest
from scipy.optimize import brentq

import samflow as sf
from samflow.discrete import run_discrete
from samflow.model import residual
from samflow.plots import status_text

# Case 10: mixed labels; r_1 = 0 at beta = 0.
X = np.array([[0.2, 0.4, 0.6, 0.8, 1.0], [0.1, 0.5, 0.5, 0.9, 1.1], [0.3, 0.3, 0.7, 0.7, 0.9]])
Y = np.array([1.0, 1.0, -1.0])
MIXED = sf.Dataset.from_arrays(X, Y)
RHO = 0.01
A_SLIDE = 1.9306977288832494  # alpha/rho of a cell that slides on r_5 = 0, then on r_2 = 0


def _beta2_star():
    """The end point beta = b e_2 with r_2 = mean_i y_i x_i2 slope(y_i x_i2 b) = 0 (logistic)."""
    slope = lambda z: 0.5 * (1.0 - np.tanh(z / 2.0))  # noqa: E731
    return brentq(lambda b: np.mean(Y * X[:, 1] * slope(Y * X[:, 1] * b)), 0.1, 10.0, xtol=1e-15, rtol=1e-15)


def test_case10_grid_no_max_steps():
    """Issue 12 case 10, linf: 8 log-spaced alpha/rho in [1e-2, 1e2], t to 1e4."""
    a = np.logspace(-2, 2, 8)
    tr = sf.solve("linf", MIXED, alpha=a * RHO, rho=np.full(8, RHO), ts=[1.0, 100.0, 1e4], alpha_batched=True)
    st = np.asarray(tr.status)
    assert np.all(st == int(sf.Status.SLID)), st
    assert np.all(np.isfinite(np.asarray(tr.beta)))
    assert np.all(np.asarray(tr.num_steps) < 500)
    b = np.asarray(tr.beta[:, -1])
    # alpha/rho >= 1.9: every weight but feature 2's slid to 0; beta_2 sits where
    # r_2 = 0 (the loss's minimiser along e_2), on the surface it slides along.
    star = _beta2_star()
    assert star == pytest.approx(2.663666874, rel=1e-9)
    for k in range(4, 8):
        np.testing.assert_allclose(b[k], [0.0, star, 0.0, 0.0, 0.0], rtol=1e-9, atol=0)
    # small alpha/rho: everything slides to 0 before t = 1e4
    np.testing.assert_array_equal(b[:3], 0.0)


def test_sliding_agrees_with_discrete_sam():
    """Discrete linf-SAM, Richardson-extrapolated in eta (2e-4, 1e-4): the flow
    crosses r_3 = 0, slides on r_5 = 0 (t in [32, 50]), later on r_2 = 0."""
    ts = np.array([10.0, 30.0, 100.0, 300.0])
    flow = np.asarray(sf.solve("linf", MIXED, alpha=A_SLIDE * RHO, rho=RHO, ts=ts).beta)
    b1 = np.asarray(run_discrete("linf", MIXED, alpha=A_SLIDE * RHO, rho=RHO, eta=2e-4, ts=ts).beta)
    b2 = np.asarray(run_discrete("linf", MIXED, alpha=A_SLIDE * RHO, rho=RHO, eta=1e-4, ts=ts).beta)
    ref = 2.0 * b2 - b1
    err = np.max(np.abs(flow - ref), axis=1) / np.max(np.abs(ref), axis=1)
    assert np.all(err < 2e-6), err
    # the discrete iterates themselves converge to it at O(eta)
    err2 = np.max(np.abs(flow - b2), axis=1) / np.max(np.abs(b2), axis=1)
    assert np.all(err2 < 5e-5), err2
    # known values (flow, rtol 1e-8)
    np.testing.assert_allclose(flow[2], [0.0, 0.142922843, 0.0, 0.341386941, 0.525190275], rtol=1e-8, atol=1e-12)


def test_small_alpha_agrees_with_discrete_sam():
    """alpha/rho = 0.1: only feature 1 (r_1 ~ 0 near beta = 0) stays, then slides to 0 at t ~ 6375
    (before: MAX_STEPS, chattering on sign(r_1) at the rounding level)."""
    ts = np.array([10.0, 1000.0, 5000.0])
    tr = sf.solve("linf", MIXED, alpha=0.1 * RHO, rho=RHO, ts=np.append(ts, 1e4))
    assert int(tr.status) == int(sf.Status.SLID)
    assert np.asarray(tr.slide_time)[:, 0] == pytest.approx(6374.654, rel=1e-5)
    flow = np.asarray(tr.beta[:3])
    disc = np.asarray(run_discrete("linf", MIXED, alpha=0.1 * RHO, rho=RHO, eta=1e-3, ts=ts).beta)
    np.testing.assert_allclose(flow[:, 0], disc[:, 0], rtol=2e-3)
    np.testing.assert_allclose(flow[:, 0], [9.96711535e-07, 6.98266327e-07, 4.25757440e-08], rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(tr.beta[-1]), 0.0)


def test_stays_on_surface_while_sliding():
    """On the sliding segment r_2(W) stays 0 to far below 1e-8 of max|X| (no drift)."""
    ts = np.array([300.0, 1000.0, 3000.0, 1e4])
    tr = sf.solve("linf", MIXED, alpha=A_SLIDE * RHO, rho=RHO, ts=ts)
    r = np.array([np.asarray(residual(jnp.asarray(W), MIXED, sf.get_loss("logistic"))) for W in np.asarray(tr.W)])
    assert np.all(np.abs(r[:, 1]) / X.max() < 1e-10), r[:, 1]
    assert np.all(np.abs(r[:, [0, 2, 3, 4]]) > 1e-3)  # the others are off their surfaces


def test_two_surfaces_at_once_stop_with_surface_status():
    """Feature 5 duplicated: r_5 = r_6 identically, so sliding on r_5 = 0 is sliding
    on two surfaces at once; samflow does not follow that mode: status SURFACE at
    the arrival, finite values before, NaN after (never MAX_STEPS, never held)."""
    data = sf.Dataset.from_arrays(X[:, [0, 1, 2, 3, 4, 4]], Y)
    ts = np.array([1.0, 10.0, 30.0, 31.0, 100.0])
    tr = sf.solve("linf", data, alpha=A_SLIDE * RHO, rho=RHO, ts=ts)
    assert int(tr.status) == int(sf.Status.SURFACE)
    assert float(tr.event_time) == pytest.approx(30.0636108, rel=1e-6)
    assert float(tr.event_t) == float(tr.event_time)
    b = np.asarray(tr.beta)
    assert np.all(np.isfinite(b[:3])) and np.all(np.isnan(b[3:]))
    assert np.all(np.isnan(np.asarray(tr.t)[3:]))


def test_surface_status_reads_right():
    st = sf.Status.SURFACE
    assert int(st) == 8
    assert "r_j(W) = 0" in st.message and "NaN" in st.message
    assert st in sf.status.FAILED_STATUSES
    assert status_text(8).startswith("SURFACE: ")
    from samflow.analysis import regime_label

    beta = np.tile(np.array([1.0, 2.0])[None, None], (1, 3, 1))
    beta[0, 2] = np.nan  # NaN after the event
    assert regime_label(beta, np.array([8])).shape == (1,)

