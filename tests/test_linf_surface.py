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
from samflow.diagonal_net import residual
from samflow.plots import status_text

# Case 10: mixed labels; r_1 = 0 at beta = 0.
X = np.array([[0.2, 0.4, 0.6, 0.8, 1.0], [0.1, 0.5, 0.5, 0.9, 1.1], [0.3, 0.3, 0.7, 0.7, 0.9]])
Y = np.array([1.0, 1.0, -1.0])
MIXED = sf.Dataset.from_arrays(X, Y)
RHO = 0.01
ALPHA_OVER_RHO = np.logspace(-2, 2, 8)  # issue 12 case 10: 8 log-spaced alpha/rho in [1e-2, 1e2]
A_SLIDE = ALPHA_OVER_RHO[4]  # 1.93: crosses r_3 = 0, slides on r_5 = 0 (t in [32, 50]), later on r_2 = 0
# One save grid and batch size for every solve here: one compilation (data is traced).
TS = np.array([1.0, 10.0, 30.0, 100.0, 300.0, 1000.0, 3000.0, 5000.0, 1e4])


def _solve(data):
    return sf.solve("linf", data, alpha=ALPHA_OVER_RHO * RHO, rho=np.full(8, RHO), ts=TS, alpha_batched=True)


@pytest.fixture(scope="module")
def grid():
    tr = _solve(MIXED)
    return {f: np.asarray(getattr(tr, f)) for f in ("beta", "W", "status", "event_time", "num_steps", "slide_time")}


def _beta2_star():
    """The end point beta = b e_2 with r_2 = mean_i y_i x_i2 slope(y_i x_i2 b) = 0 (logistic)."""
    slope = lambda z: 0.5 * (1.0 - np.tanh(z / 2.0))  # noqa: E731
    return brentq(lambda b: np.mean(Y * X[:, 1] * slope(Y * X[:, 1] * b)), 0.1, 10.0, xtol=1e-15, rtol=1e-15)


def test_case10_grid_no_max_steps(grid):
    """Issue 12 case 10, linf (before: 77 of 96 cells MAX_STEPS): every cell ends SLID."""
    assert np.all(grid["status"] == int(sf.Status.SLID)), grid["status"]
    assert np.all(np.isfinite(grid["beta"]))
    assert np.all(grid["num_steps"] < 500)
    b = grid["beta"][:, -1]
    # alpha/rho >= 1.9: every weight but feature 2's slid to 0; beta_2 sits where
    # r_2 = 0 (the loss's minimiser along e_2), on the surface it slides along.
    star = _beta2_star()
    assert star == pytest.approx(2.663666874, rel=1e-9)
    for k in range(4, 8):
        np.testing.assert_allclose(b[k], [0.0, star, 0.0, 0.0, 0.0], rtol=1e-9, atol=0)
    # small alpha/rho: everything slides to 0 before t = 1e4
    np.testing.assert_array_equal(b[:3], 0.0)


def test_sliding_agrees_with_discrete_sam(grid):
    """alpha/rho = 1.93 against discrete linf-SAM, Richardson-extrapolated in eta
    (2e-4, 1e-4), through the r_3 crossing, the r_5 slide and the weight zeros."""
    ts = TS[1:4]
    flow = grid["beta"][4, 1:4]
    b1 = np.asarray(run_discrete("linf", MIXED, alpha=A_SLIDE * RHO, rho=RHO, eta=2e-4, ts=ts).beta)
    b2 = np.asarray(run_discrete("linf", MIXED, alpha=A_SLIDE * RHO, rho=RHO, eta=1e-4, ts=ts).beta)
    ref = 2.0 * b2 - b1
    err = np.max(np.abs(flow - ref), axis=1) / np.max(np.abs(ref), axis=1)
    assert np.all(err < 2e-6), err
    # the discrete iterates themselves converge to it at O(eta)
    err2 = np.max(np.abs(flow - b2), axis=1) / np.max(np.abs(b2), axis=1)
    assert np.all(err2 < 5e-5), err2
    # The flow at t = 100 from a solve at rtol 1e-11 (the segment engine's 9 digits were
    # 2e-8 off it); the default rtol 1e-8 is within 2e-8 of it.
    np.testing.assert_allclose(flow[2], [0.0, 0.1429228441, 0.0, 0.3413869474, 0.5251902767], rtol=3e-8, atol=1e-12)


def test_small_alpha_agrees_with_discrete_sam(grid):
    """alpha/rho = 0.518: only feature 1 (r_1 ~ 0 near beta = 0) is left; before, the
    solver chattered on sign(r_1) at the rounding level (MAX_STEPS)."""
    flow = grid["beta"][3, [1, 5]]
    # Against discrete SAM at t = 10 only: at t = 33.5 the chatter of features 2-5 around
    # w = 0 cancels to exactly 0 in both layers (without fused multiply-adds, as every
    # entry point runs), the absorbing state of sign(0) = 0 that the flow's sliding is not
    # the limit of, and beta_1 ends 8% off the flow at t = 1000 (with FMA it does not land
    # and is within 2e-5 of the flow's 2.43489432e-05). `absorbed_t` flags it
    # (samflow.discrete's module docstring), so these iterates are no reference past it.
    ts = TS[[1, 5]]  # t = 10, 1000
    tr = run_discrete("linf", MIXED, alpha=ALPHA_OVER_RHO[3] * RHO, rho=RHO, eta=1e-3, ts=ts)
    assert 10.0 < float(tr.absorbed_t) < 100.0
    disc = np.asarray(tr.beta)[:1]
    err = np.max(np.abs(flow[:1] - disc), axis=1) / np.max(np.abs(disc), axis=1)
    assert np.all(err < 5e-5), err  # O(eta): 1e-5 at eta = 1e-3
    np.testing.assert_allclose(flow[:, 0], [2.68073654e-05, 2.43489432e-05], rtol=1e-7)
    np.testing.assert_array_equal(flow[1, 1:], 0.0)


def test_stays_on_surface_while_sliding(grid):
    """While it slides (t >= 243) r_2(W) stays 0 to far below 1e-8 of max|X| (no drift)."""
    lg = sf.get_loss("logistic")
    r = np.array([np.asarray(residual(jnp.asarray(W), MIXED, lg)) for W in grid["W"][4, 4:]])
    assert np.all(np.abs(r[:, 1]) / X.max() < 1e-10), r[:, 1]
    assert np.all(np.abs(r[:, [0, 2, 3, 4]]) > 1e-3)  # the others are off their surfaces


def test_proportional_columns_are_one_surface():
    """Feature 5 duplicated as feature 4: r_4 = r_5 identically, so r_4 = 0 and
    r_5 = 0 are ONE surface (`surface_groups`), slid on with one multiplier.
    Before issue 36 samflow took it for two surfaces at once and stopped the
    cells (status SURFACE, NaN after t = 10-100). Now every cell ends SLID, the
    two copies stay equal bit for bit, and alpha/rho = 1.93 agrees with discrete
    linf-SAM (Richardson-extrapolated in eta) through the slide, as the
    original data do (`test_sliding_agrees_with_discrete_sam`)."""
    dup = sf.Dataset.from_arrays(X[:, [0, 1, 2, 4, 4]], Y)
    tr = _solve(dup)
    st = np.asarray(tr.status)
    assert np.all(st == int(sf.Status.SLID)), st
    b = np.asarray(tr.beta)
    assert np.all(np.isfinite(b))
    np.testing.assert_array_equal(b[..., 3], b[..., 4])
    # r_4 = r_5 at every save; at t = 100 cell 4 slides on that one surface
    lg = sf.get_loss("logistic")
    r = np.array([np.asarray(residual(jnp.asarray(w), dup, lg)) for w in np.asarray(tr.W)[4]])
    np.testing.assert_array_equal(r[:, 3], r[:, 4])
    assert np.all(np.abs(r[TS == 100.0, 3:]) < 1e-9), r[:, 3]
    assert np.all(np.abs(r[TS == 30.0, 3:]) > 1e-4), r[:, 3]  # not before
    ts = TS[1:4]
    b1 = np.asarray(run_discrete("linf", dup, alpha=A_SLIDE * RHO, rho=RHO, eta=2e-4, ts=ts).beta)
    b2 = np.asarray(run_discrete("linf", dup, alpha=A_SLIDE * RHO, rho=RHO, eta=1e-4, ts=ts).beta)
    ref = 2.0 * b2 - b1
    err = np.max(np.abs(b[4, 1:4] - ref), axis=1) / np.max(np.abs(ref), axis=1)
    assert np.all(err < 2e-6), err


def test_surface_groups():
    """Which columns share an r = 0 surface: proportional ones, with the sign of
    the factor; a zero column is alone; the first column of a group leads it."""
    from samflow._engine.field import surface_groups

    # issue 36's two samples: x_3 = 3 x_1 and x_4 = 2 x_2 (to rounding); x_5 alone
    X2 = np.array([[0.2, 0.4, 0.6, 0.8, 1.0], [0.1, -0.2, 0.3, -0.4, -0.05]])
    same, sign, lead = map(np.asarray, surface_groups(sf.Dataset.from_arrays(X2, [1.0, -1.0])))
    want = np.eye(5, dtype=bool)
    want[0, 2] = want[2, 0] = want[1, 3] = want[3, 1] = True
    np.testing.assert_array_equal(same, want)
    np.testing.assert_array_equal(lead, [True, True, False, False, True])
    assert np.all(sign[same] == 1.0)
    X3 = np.array([[0.2, 0.0, -0.4, 0.5], [0.1, 0.0, -0.2, 0.5]])  # x_3 = -2 x_1; x_2 = 0
    same, sign, lead = map(np.asarray, surface_groups(sf.Dataset.from_arrays(X3, [1.0, -1.0])))
    assert same[0, 2] and same[2, 0] and sign[0, 2] == sign[2, 0] == -1.0
    assert not same[1].sum() - 1 and not same[:, 1].sum() - 1  # the zero column: alone
    assert not same[0, 3] and not same[3, 0]
    np.testing.assert_array_equal(lead, [True, True, False, True])


def test_issue36_two_sample_depth3_no_surface():
    """Issue 36's case: two samples, depth 3, rho = 1, alpha/rho from 0.01 to 0.5
    (before: every such cell stopped with SURFACE between t = 9 and 14 and lost
    most of its saves): the proportional columns are one surface, so no cell
    stops, beta is finite, and r stays on the surfaces it slides on."""
    X2 = np.array([[0.2, 0.4, 0.6, 0.8, 1.0], [0.1, -0.2, 0.3, -0.4, -0.05]])
    data = sf.Dataset.from_arrays(X2, [1.0, -1.0])
    a = np.geomspace(0.01, 0.52, 6)
    tr = sf.solve("linf", data, alpha=a, rho=np.ones(6), ts=np.geomspace(1.0, 1e5, 11), depth=3, alpha_batched=True)
    st = np.asarray(tr.status)
    assert not np.any(st == int(sf.Status.SURFACE)), st
    assert np.all(np.isin(st, [int(sf.Status.FINISHED), int(sf.Status.SLID)])), st
    assert np.all(np.isfinite(np.asarray(tr.beta)))


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


# Issue 25 items 1-2: at depth 1 the weight's own sign does not enter its field
# (no other layer), so a coordinate switches only where r_j = 0. With one +1 and
# one -1 sample per coordinate, r_j = -tanh(beta_j / 2) / (2 n_j / n) vanishes at
# beta_j = 0: linf-SAM slides there, d beta_j / dt = -tanh((beta_j + rho sign
# beta_j) / 2) / 4 on each side. Before, the first coordinate slid on its r_j = 0
# surface 8e-12 past 0 (status `finished`, no slide time) and the second one met
# a second surface: it was let through and drifted to beta_2 = -0.478.
PAIRS = sf.Dataset.from_arrays(
    np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0]]), np.array([1.0, -1.0, 1.0, -1.0])
)
PAIR_TS = np.array([5.0, 9.0, 10.0, 14.0, 15.0, 20.0, 40.0])


def _arrival(alpha, rho, depth, rate):
    """Quadrature: the time a balanced column w = u (beta = u^depth) takes from
    alpha to 0 under du/dt = -rate tanh((u + rho)^depth / 2) (u + rho)^(depth - 1)."""
    from scipy.integrate import quad

    f = lambda u: 1.0 / (rate * np.tanh((u + rho) ** depth / 2) * (u + rho) ** (depth - 1))  # noqa: E731
    return quad(f, 0.0, alpha, epsabs=1e-13, epsrel=1e-13, limit=200)[0]


def test_depth1_two_coordinates_slide_one_after_the_other():
    """Issue 25 item 1: both coordinates slide to exactly 0 at their quadrature times and stay."""
    t_slide = [_arrival(a, 0.5, 1, 0.25) for a in (1.0, 2.0)]
    assert t_slide == pytest.approx([9.4421573651, 14.7768131666], abs=1e-9)
    tr = sf.solve("linf", PAIRS, alpha=np.array([1.0, 2.0]), rho=0.5, ts=PAIR_TS, depth=1)
    assert int(tr.status) == int(sf.Status.SLID)
    np.testing.assert_allclose(np.asarray(tr.slide_time)[0], t_slide, rtol=5e-9)  # solver rtol 1e-8
    b = np.asarray(tr.beta)
    after = PAIR_TS[:, None] > np.array(t_slide)[None]
    assert np.all(b[after] == 0.0) and np.all(b[~after] > 0.0), b
    np.testing.assert_array_equal(np.asarray(tr.loss)[PAIR_TS > t_slide[1]], np.log(2.0))


def test_depth1_three_coordinates_slide():
    """Item 1 with d = 3 (before: two coordinates ended near -0.5)."""
    X3 = np.kron(np.eye(3), np.ones((2, 1)))
    data = sf.Dataset.from_arrays(X3, np.tile([1.0, -1.0], 3))
    tr = sf.solve("linf", data, alpha=np.array([1.0, 2.0, 3.0]), rho=0.5, ts=np.array([10.0, 40.0]), depth=1)
    t_slide = [_arrival(a, 0.5, 1, 1.0 / 6.0) for a in (1.0, 2.0, 3.0)]  # r_j = -tanh(beta_j / 2) / 3
    assert int(tr.status) == int(sf.Status.SLID)
    np.testing.assert_allclose(np.asarray(tr.slide_time)[0], t_slide, rtol=5e-9)  # solver rtol 1e-8
    assert t_slide[2] < 40.0
    np.testing.assert_array_equal(np.asarray(tr.beta)[-1], 0.0)


def test_depth1_one_coordinate_slides_exactly_to_zero():
    """Issue 25 item 2 (a regression: it ended `finished`, beta = -4.0e-12, no slide time)."""
    data = sf.Dataset.from_arrays(np.array([[1.0], [1.0]]), np.array([1.0, -1.0]))
    t_slide = _arrival(1.0, 0.5, 1, 0.5)
    assert t_slide == pytest.approx(4.7210786826, abs=1e-9)
    tr = sf.solve("linf", data, alpha=1.0, rho=0.5, ts=np.array([4.0, 5.0, 10.0]), depth=1)
    assert int(tr.status) == int(sf.Status.SLID)
    assert float(tr.slide_time[0, 0]) == pytest.approx(t_slide, rel=5e-9)
    np.testing.assert_array_equal(np.asarray(tr.beta)[1:], 0.0)
    assert float(tr.beta[0, 0]) > 0.0


def test_depth2_two_columns_slide_at_their_quadrature_times():
    """Sibling of item 1 at depth 2 (a whole column at 0, decided jointly): each
    column reaches 0 at its quadrature time, both layers, and stays."""
    t_slide = [_arrival(a, 0.5, 2, 0.25) for a in (1.0, 2.0)]
    tr = sf.solve("linf", PAIRS, alpha=np.array([1.0, 2.0]), rho=0.5, ts=PAIR_TS, depth=2)
    assert int(tr.status) == int(sf.Status.SLID)
    np.testing.assert_allclose(np.asarray(tr.slide_time), [t_slide, t_slide], rtol=5e-8)  # solver rtol 1e-8
    np.testing.assert_array_equal(np.asarray(tr.beta)[PAIR_TS > t_slide[1]], 0.0)


def test_depth1_slides_through_the_sweep(tmp_path):
    """Item 1 through a sweep config (samflow.sweep.run_sweep): the same slide
    times and zeros as `sf.solve`; discrete linf-SAM (eta 1e-3) chatters within
    eta of 0 by t = 40."""
    from samflow.config import parse_config
    from samflow.sweep import run_sweep

    cfg = parse_config(
        {
            "name": "pairs",
            "methods": ["linf", "discrete_linf"],
            "depth": 1,
            "data": {"X": PAIRS.X.tolist(), "y": PAIRS.y.tolist()},
            "init": {"alpha_j": [1.0, 2.0]},
            "grid": {"alpha": [1.0], "rho": [0.5]},
            "discrete": {"eta": [1e-3]},
            "time": {"ts": PAIR_TS.tolist()},
            "output": {"dir": str(tmp_path), "figures": False},
        }
    )
    ds = run_sweep(cfg, progress=False)
    t_slide = [_arrival(a, 0.5, 1, 0.25) for a in (1.0, 2.0)]
    flow = ds.sel(flow="linf").squeeze()
    assert int(flow["status"]) == int(sf.Status.SLID)
    np.testing.assert_allclose(np.asarray(flow["slide_time"]).reshape(-1), t_slide, rtol=5e-9)  # solver rtol 1e-8
    b = np.asarray(flow["beta"])
    assert np.all(b[-1] == 0.0)
    disc = np.asarray(ds.sel(flow="discrete_linf").squeeze()["beta"])[-1]
    assert np.all(np.abs(disc) < 1e-3), disc


def test_depth1_starts_on_its_surface_and_stays():
    """Sibling of item 1: a coordinate that starts at 0 on its r_j = 0 surface is
    held from t = 0 (before: sliding on that surface plus a weight held at 0 at
    the start stopped the cell with status SURFACE at t = 0); the other one
    slides at its quadrature time."""
    tr = sf.solve("linf", PAIRS, alpha=np.array([0.0, 2.0]), rho=0.5, ts=PAIR_TS, depth=1)
    assert int(tr.status) == int(sf.Status.SLID)
    t_slide = [0.0, _arrival(2.0, 0.5, 1, 0.25)]
    np.testing.assert_allclose(np.asarray(tr.slide_time)[0], t_slide, rtol=5e-9)  # solver rtol 1e-8
    b = np.asarray(tr.beta)
    assert np.all(b[:, 0] == 0.0) and np.all(b[PAIR_TS > 14.8, 1] == 0.0)


def test_depth1_two_coordinates_held_off_zero():
    """Sibling of item 1 with the surface off 0: each coordinate has samples
    (e_j, +1), (e_j, +1), (e_j, -1), so r_j = (2 s(beta_j) - s(-beta_j)) / 6
    (s the logistic slope) vanishes at beta_j = log 2, which attracts linf-SAM
    from both sides. Both weights are held there (to the 1e-12 max|X| event
    offset), at their quadrature times (before: SURFACE at the second arrival,
    t = 21.68, NaN after, no slide time)."""
    from scipy.integrate import quad

    data = sf.Dataset.from_arrays(np.kron(np.eye(2), np.ones((3, 1))), np.tile([1.0, 1.0, -1.0], 2))
    s = lambda z: 0.5 * (1.0 - np.tanh(z / 2.0))  # noqa: E731
    r = lambda b: (2.0 * s(b) - s(-b)) / 6.0  # noqa: E731
    t_slide = [quad(lambda b: -1.0 / r(b + 0.5), np.log(2.0), a, epsabs=1e-13, epsrel=1e-13)[0] for a in (2.0, 3.0)]
    tr = sf.solve("linf", data, alpha=np.array([2.0, 3.0]), rho=0.5, ts=np.array([10.0, 20.0, 40.0]), depth=1)
    assert int(tr.status) == int(sf.Status.SLID)
    np.testing.assert_allclose(np.asarray(tr.slide_time)[0], t_slide, rtol=5e-9)  # solver rtol 1e-8
    np.testing.assert_allclose(np.asarray(tr.beta)[-1], np.log(2.0), rtol=0, atol=1e-10)


def test_surfaces_at_a_small_loss_are_not_all_at_zero():
    """r shrinks with the loss, so an absolute threshold read every live r_j as 0 once
    the loss was small: this two-sample cell (no proportional columns) stopped with
    SURFACE at t = 19.9 ("another r_k at 0": r_4 = -6e-10 of max|X|, the loss 1e-7).
    The surface events now read r on its own scale (`r_unit`, in [-1, 1] at any
    loss): no surface is met twice, the cell finishes."""
    from samflow._engine.field import r_unit

    X2 = np.array([[-0.16, 0.54, 0.21, 0.36], [-0.65, -0.13, 0.78, 1.49]])
    data = sf.Dataset.from_arrays(X2, [1.0, -1.0])
    tr = sf.solve("linf", data, alpha=np.array([5.539]), rho=np.array([0.5539]), ts=np.geomspace(1.0, 1e4, 9),
                  alpha_batched=True)
    assert int(np.asarray(tr.status)[0]) == int(sf.Status.FINISHED)
    assert np.all(np.isfinite(np.asarray(tr.beta)))
    # r_unit: the direction of r, the same at any size of the loss
    lg = sf.get_loss("logistic")
    W = jnp.asarray(np.asarray(tr.W)[0, -1])
    u = np.asarray(r_unit(W, data, lg))
    r = np.asarray(residual(W, data, lg))
    assert float(sf.loss_value(W, data, lg)) < 1e-6 and np.max(np.abs(r)) < 1e-6
    np.testing.assert_allclose(u / np.max(np.abs(u)), r / np.max(np.abs(r)), rtol=0, atol=1e-12)
    assert 1e-3 < np.max(np.abs(u)) <= 1.0
