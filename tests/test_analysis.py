"""samflow.analysis on synthetic arrays with known answers (docs/theory.md s.5)."""

import itertools

import jax.numpy as jnp
import numpy as np
import pytest
from scipy.integrate import solve_ivp

from samflow import Status, analysis, theory

NAN = np.nan


# --- dominant index -------------------------------------------------------------


def test_dominant_index_values():
    beta = np.array(
        [
            [0.1, -0.3, 0.2],  # 2 (absolute value)
            [0.0, 0.0, 0.0],  # collapsed
            [1.0, NAN, 0.0],  # non-finite
            [5.0, 1.0, np.inf],  # non-finite
            [0.0, 0.0, 1e-300],  # tiny but not zero
            [2.0, 2.0, 1.0],  # exact tie -> lowest index
        ]
    )
    np.testing.assert_array_equal(analysis.dominant_index(beta), [2, 0, -1, -1, 3, 1])
    # Batched (2 cells, 6 times, 3 features) and JAX input.
    batch = np.stack([beta, -beta[::-1]])
    out = analysis.dominant_index(jnp.asarray(batch))
    assert isinstance(out, np.ndarray) and out.shape == (2, 6)
    np.testing.assert_array_equal(out[1], [1, 3, -1, -1, 0, 2])
    # rel_tol: near-ties go to the lowest index.
    b = np.array([[1.0, 0.0, 0.999, 1.0005]])
    assert analysis.dominant_index(b)[0] == 4
    assert analysis.dominant_index(b, rel_tol=1e-3)[0] == 1
    with pytest.raises(ValueError, match="rel_tol"):
        analysis.dominant_index(b, rel_tol=1.0)
    with pytest.raises(ValueError, match="beta must have shape"):
        analysis.dominant_index(np.ones(3))



def test_band_dominance():
    band = np.array([0, 0, 1, 1, 2, 2])
    b = np.array([
        [3.0, 0.0, 1.0, 1.0, 0.5, 0.5],  # band means 1.5, 1, 0.5 -> 1
        [0, 0, 0, 0, 0, 0],  # collapsed
        [1, NAN, 0, 0, 0, 0],  # not finite
        [0, 0, 1, 1, 1, 1.1],  # 3
        [0, 0, -2, 2, 1, -1],  # absolute values -> 2
        [1, 1, 1, 1, 1, 1],  # tie -> lowest band
    ])
    np.testing.assert_array_equal(analysis.band_dominance(b, band), [1, 0, -1, 3, 2, 1])
    out = analysis.band_dominance(jnp.asarray(np.stack([b, b[::-1]])), band)
    assert out.shape == (2, 6) and out.dtype == np.int64
    np.testing.assert_array_equal(out[1], [1, 2, 3, -1, 0, 1])
    with pytest.raises(ValueError, match="band"):
        analysis.band_dominance(b, band[:-1])

def test_tied():
    beta = np.array([[1.0, 1.0], [1.0, 0.5], [0.0, 0.0], [NAN, 1.0], [1.0, 1.0 + 1e-12]])
    np.testing.assert_array_equal(analysis.tied(beta), [True, False, False, False, False])
    np.testing.assert_array_equal(analysis.tied(beta, 1e-9), [True, False, False, False, True])
    assert not analysis.tied(np.ones((2, 1))).any()  # d = 1: never tied


def test_switching_times_and_visited_sequence():
    dom = np.array([1, 1, 2, 0, 2, 1, -1, 1, 3, 3])
    t = np.arange(10.0) * 0.5
    assert analysis.switching_times(dom, t) == [(1.0, 1, 2), (2.5, 2, 1), (4.0, 1, 3)]
    assert analysis.visited_sequence(dom) == [1, 2, 1, 3]
    assert analysis.visited_sequence([0, -1, 0]) == []
    assert analysis.switching_times([3, 3, 3], [0.0, 1.0, 2.0]) == []
    with pytest.raises(ValueError, match="times must have the shape"):
        analysis.switching_times(dom, t[:-1])
    with pytest.raises(ValueError, match="dom must be 1-D"):
        analysis.visited_sequence(dom.reshape(2, 5))


# --- regime label ---------------------------------------------------------------


def traj(*rows):
    return np.array(rows, dtype=float)


def test_regime_label_rules():
    T3 = [1.0, 1.0, 1.0]  # symmetric init: tied at time 0
    cells = {
        # (beta (time, 3), status, expected)
        "collapsed status": (traj(T3, [2, 1, 1], [0, 0, 0], [0, 0, 0]), Status.COLLAPSED, 1),
        "ends at zero (linf slide)": (traj(T3, [1, 0.5, 0.2], [0.1, 0, 0], [0, 0, 0]), Status.SLID, 1),
        "sequential 1->2->3": (traj(T3, [2, 1, 1], [3, 4, 2], [5, 6, 9]), Status.FINISHED, 2),
        "sequential, step down first": (traj(T3, [1, 2, 1], [3, 2, 1], [1, 2, 5]), Status.FINISHED, 2),
        "major first": (traj(T3, [1, 1, 2], [1, 2, 4], [1, 3, 9]), Status.FINISHED, 3),
        "never reaches d": (traj(T3, [2, 1, 1], [4, 3, 1], [9, 8, 1]), Status.FINISHED, 0),
        # issue 25 item 8: the detour d -> k -> d of odd depth (was 0, undetermined)
        "detour 3->1->3": (traj(T3, [1, 1, 3], [5, 1, 2], [1, 1, 9]), Status.FINISHED, 2),
        "detour cut by the horizon": (traj(T3, [1, 1, 3], [1, 1, 5], [9, 1, 2]), Status.FINISHED, 0),
        "collapse under way, no event": (traj(T3, [.9, .5, .2], [.5, .1, .01], [.1, 0, 0]), Status.FINISHED, 0),
        "blew up, prefix shows 2": (traj(T3, [2, 1, 1], [1, 2, 3], [NAN] * 3), Status.BLEW_UP, 2),
        "blew up, prefix shows 3": (traj(T3, [1, 1, 3], [1, 1, 9], [NAN] * 3), Status.BLEW_UP, 3),
        "max steps, 1 point": (traj(T3, [1, 1, 3], [NAN] * 3, [NAN] * 3), Status.MAX_STEPS, 0),
        "failed, all NaN": (traj(*[[NAN] * 3] * 4), Status.FAILED, 0),
        "non-finite input": (traj(*[[NAN] * 3] * 4), Status.NONFINITE_INPUT, 0),
    }
    beta = np.stack([c[0] for c in cells.values()])
    status = np.array([int(c[1]) for c in cells.values()])
    expected = [c[2] for c in cells.values()]
    got = analysis.regime_label(beta, status)
    assert got.dtype == np.int8 and got.shape == (len(cells),)
    assert dict(zip(cells, got.tolist())) == dict(zip(cells, expected))
    # Leading batch axes are kept: (3, 4) cells.
    grid = np.broadcast_to(beta[:3, None], (3, 4) + beta.shape[1:])
    st = np.broadcast_to(status[:3, None], (3, 4))
    np.testing.assert_array_equal(analysis.regime_label(grid, st), np.repeat([[1], [1], [2]], 4, 1))
    # Another major index: in "sequential 1->2->3" feature 1 is never dominant at the end.
    assert analysis.regime_label(beta[2], status[2], d=1) == 0


def test_regime_label_tie_tolerance():
    # Rounding makes the tie at time 0 one ulp off; the default tie_tol ignores it.
    beta = traj([1.0 + 2e-16, 1.0], [3, 5], [4, 9])
    assert analysis.regime_label(beta, np.int8(0)) == 3
    assert analysis.regime_label(beta, np.int8(0), tie_tol=0.0) == 2  # feature 1 "leads" at time 0


def test_regime_label_errors():
    beta = np.ones((2, 5, 3))
    with pytest.raises(ValueError, match="status must have shape"):
        analysis.regime_label(beta, np.zeros(3, int))
    with pytest.raises(ValueError, match="d must be a feature index"):
        analysis.regime_label(beta, np.zeros(2, int), d=4)


def test_regime_label_on_integrated_l2_flow():
    """docs/theory.md s.3 example mu = (1, 2), rho = 1: collapse, minor first, major first."""
    mu = np.array([1.0, 2.0])
    f = lambda t, w: mu * w * (1 - mu / (np.sqrt(2) * np.linalg.norm(mu * w)))
    hit = lambda t, w: np.linalg.norm(w) - 1e-6
    hit.terminal = True
    ts = np.linspace(0.0, 20.0, 201)
    betas, status = [], []
    for alpha in (0.3, 0.7, 1.0):
        sol = solve_ivp(f, (0, ts[-1]), alpha * np.ones(2), t_eval=ts, events=hit,
                        rtol=1e-10, atol=1e-14)
        W = np.zeros((ts.size, 2))  # the state is 0 after a collapse
        W[: sol.y.shape[1]] = sol.y.T
        betas.append(W**2)
        status.append(Status.COLLAPSED if sol.status == 1 else Status.FINISHED)
    betas = np.stack(betas)
    np.testing.assert_array_equal(analysis.regime_label(betas, np.array(status)), [1, 2, 3])
    dom = analysis.dominant_index(betas[1])
    assert analysis.visited_sequence(dom) == [1, 2]
    (t_switch, i, j), = analysis.switching_times(dom, ts)
    assert (i, j) == (1, 2) and 0 < t_switch < ts[-1]
    np.testing.assert_allclose(analysis.limit_direction(betas[1:]), [[0, 1], [0, 1]], atol=1e-6)


# --- plateau --------------------------------------------------------------------


def test_plateau_step_curve():
    t = np.arange(0.0, 40.0, 0.5)
    loss = np.where(t <= 20, 0.7, 0.7 * np.exp(-(t - 20)))
    p = analysis.plateau(loss, t)
    assert (p.start, p.end, p.level) == (0.0, 20.0, 0.7)
    assert p.duration == 20.0


def test_plateau_after_a_transient_and_a_bump():
    t = np.arange(0.0, 40.0, 0.25)
    loss = np.where(t <= 30, 0.5 + 0.5 * np.exp(-3 * t), 0.5 * np.exp(-(t - 30)))
    loss = loss + 0.02 * np.exp(-((t - 15) ** 2))  # rises a little, inside the band
    p = analysis.plateau(loss, t, rel_band=0.1, rel_drop=0.5)
    # Band: loss <= 1.1 * 0.5 from t >= ln(10) / 3 = 0.77, first grid point 1.0.
    assert p.start == 1.0 and p.end == 30.0
    assert p.level == pytest.approx(0.5, abs=1e-6)


def test_plateau_none_without_a_fall_and_batched():
    t = np.linspace(0.0, 10.0, 101)
    flat = np.full_like(t, np.log(2.0))  # regime 1: stays at ell(0)
    rising = np.log(2.0) + 0.1 * t
    step = np.where(t <= 4, 0.6, 0.01)
    nan_tail = np.where(t <= 8, step, NAN)
    p = analysis.plateau(np.stack([flat, rising, step, nan_tail]), t)
    assert p.start.shape == (4,)
    assert np.all(np.isnan([p.start[0], p.end[0], p.level[0], p.start[1]]))
    np.testing.assert_allclose([p.start[2], p.end[2], p.level[2]], [0.0, 4.0, 0.6])
    np.testing.assert_allclose([p.start[3], p.end[3]], [0.0, 4.0])
    # min_duration filters out the plateau.
    assert np.isnan(analysis.plateau(step, t, min_duration=5.0).start)


def test_plateau_log_time():
    u = np.linspace(-6.0, 1.6, 153)  # log10 t
    t = 10.0**u
    loss = np.interp(u, [-6, -4, -3.9, 0, 1.2, 1.3, 1.6], [2.0, 2.0, 1.0, 0.5, 0.5, 1e-3, 1e-4])
    # In log time the first stretch (2 decades) is the longest ...
    p = analysis.plateau(loss, t, log_time=True)
    np.testing.assert_allclose([p.start, p.end, p.level], [1e-6, 1e-4, 2.0], rtol=1e-12)
    # ... in linear time the second (about 16 time units, under 2 decades).
    p = analysis.plateau(loss, t)
    assert p.level == pytest.approx(0.5) and p.end == pytest.approx(10**1.2)
    assert 1e-1 < p.start < 1.0


def test_plateau_errors():
    t = np.arange(5.0)
    with pytest.raises(ValueError, match="rel_drop"):
        analysis.plateau(np.ones(5), t, rel_drop=1.0)
    with pytest.raises(ValueError, match="rel_band"):
        analysis.plateau(np.ones(5), t, rel_band=0.0)
    with pytest.raises(ValueError, match="does not broadcast"):
        analysis.plateau(np.ones(5), np.arange(4.0))


# --- directions -----------------------------------------------------------------


def test_limit_direction():
    beta = np.array(
        [
            [[1.0, 1.0], [3.0, 4.0], [NAN, NAN]],  # last valid row (3, 4)
            [[1.0, 0.0], [3e200, 4e200], [3e300, 4e300]],  # no overflow
            [[1.0, 1.0], [0.0, 0.0], [0.0, 0.0]],  # collapsed: 0
            [[NAN, NAN]] * 3,  # nothing valid
        ]
    )
    out = analysis.limit_direction(beta)
    np.testing.assert_allclose(out[:3], [[0.6, 0.8], [0.6, 0.8], [0.0, 0.0]], rtol=1e-15)
    assert np.all(np.isnan(out[3]))


def test_direction_distance():
    e1, e2 = np.eye(2)
    assert analysis.direction_distance(e1, e2) == pytest.approx(np.sqrt(2))
    assert analysis.direction_distance(5 * e1, e1) == 0.0
    assert analysis.direction_distance(-e1, 3 * e1) == pytest.approx(2.0)
    d = analysis.direction_distance(np.array([[1.0, 1.0], [0.0, 0.0], [1e300, 1e300]]), [2.0, 2.0])
    np.testing.assert_allclose(d, [0.0, NAN, 0.0], atol=1e-15)
    with pytest.raises(ValueError, match="does not broadcast"):
        analysis.direction_distance(np.ones(3), np.ones(2))


def brute_l2(A):
    """Min-norm point over all active sets S: A_S b = 1 (feasible candidates only)."""
    best = None
    for k in range(1, A.shape[0] + 1):
        for S in itertools.combinations(range(A.shape[0]), k):
            AS = A[list(S)]
            b = AS.T @ np.linalg.lstsq(AS @ AS.T, np.ones(k), rcond=None)[0]
            if np.allclose(AS @ b, 1) and np.all(A @ b >= 1 - 1e-12):
                if best is None or b @ b < best @ best:
                    best = b
    return best


def brute_l1_2d(A):
    """d = 2: the l1 optimum is a vertex of the lines {a_i.b = 1}, {b_1 = 0}, {b_2 = 0}."""
    lines = [(a, 1.0) for a in A] + [(np.array([1.0, 0.0]), 0.0), (np.array([0.0, 1.0]), 0.0)]
    best = None
    for (a1, c1), (a2, c2) in itertools.combinations(lines, 2):
        M = np.array([a1, a2])
        if abs(np.linalg.det(M)) < 1e-12:
            continue
        b = np.linalg.solve(M, [c1, c2])
        if np.all(A @ b >= 1 - 1e-12) and (best is None or np.abs(b).sum() < np.abs(best).sum()):
            best = b
    return best


def test_max_margin_single_sample():
    mu = np.array([0.5, 1.0, 2.0, 3.0])
    X, y = mu[None], np.array([1.0])
    np.testing.assert_allclose(analysis.max_margin_direction(X, y, 1), [0, 0, 0, 1], atol=1e-9)
    np.testing.assert_allclose(
        analysis.max_margin_direction(X, y, 2), mu / np.linalg.norm(mu), rtol=1e-12
    )
    # A label -1 with -x is the same constraint.
    np.testing.assert_allclose(
        analysis.max_margin_direction(-X, -y, 2, normalize=False),
        theory.l2_max_margin_single(mu), rtol=1e-12,
    )


def test_max_margin_two_samples_against_brute_force():
    X = np.array([[1.0, 3.0], [2.0, 0.5]])
    y = np.array([1.0, 1.0])
    A = y[:, None] * X
    b2 = analysis.max_margin_direction(X, y, 2, normalize=False)
    np.testing.assert_allclose(b2, brute_l2(A), rtol=1e-10)
    np.testing.assert_allclose(A @ b2, [1.0, 1.0], rtol=1e-10)  # both support vectors
    b1 = analysis.max_margin_direction(X, y, 1, normalize=False)
    np.testing.assert_allclose(b1, brute_l1_2d(A), rtol=1e-8, atol=1e-10)
    rng = np.random.default_rng(1)
    for _ in range(5):
        X = rng.normal(size=(4, 2)) + np.array([2.0, 1.0])
        y = rng.choice([-1.0, 1.0], size=4)
        X = y[:, None] * X  # so y_i x_i = positive-mean points: separable
        A = y[:, None] * X
        np.testing.assert_allclose(
            analysis.max_margin_direction(X, y, 2, normalize=False), brute_l2(A), rtol=1e-9
        )
        np.testing.assert_allclose(
            analysis.max_margin_direction(X, y, 1, normalize=False), brute_l1_2d(A),
            rtol=1e-7, atol=1e-9,
        )
        u = analysis.max_margin_direction(X, y, 1)
        assert np.linalg.norm(u) == pytest.approx(1.0)


def test_max_margin_errors():
    X = np.array([[1.0, 0.0], [1.0, 0.0]])
    with pytest.raises(ValueError, match="not linearly separable"):
        analysis.max_margin_direction(X, np.array([1.0, -1.0]), 1)
    with pytest.raises(ValueError, match="not linearly separable"):
        analysis.max_margin_direction(X, np.array([1.0, -1.0]), 2)
    with pytest.raises(ValueError, match="p must be 1 or 2"):
        analysis.max_margin_direction(X, np.ones(2), 3)
    with pytest.raises(ValueError, match="p must be 1 or 2, got True"):  # ran as p = 1
        analysis.max_margin_direction(X, np.ones(2), True)
    for tol in (None, True, "0.1", 1.0, -0.1):  # None and "0.1" raised a TypeError from the comparison
        with pytest.raises(ValueError, match=r"rel_tol must be a number in \[0, 1\), got "):
            analysis.dominant_index(np.ones((2, 3)), rel_tol=tol)
    with pytest.raises(ValueError, match="y must have shape"):
        analysis.max_margin_direction(X, np.ones(3), 1)
    with pytest.raises(ValueError, match="labels"):
        analysis.max_margin_direction(X, np.array([1.0, 0.0]), 1)
    with pytest.raises(ValueError, match="X contains a non-finite value"):
        analysis.max_margin_direction(np.array([[1.0, np.nan], [1.0, 0.0]]), np.ones(2), 1)
    with pytest.raises(ValueError, match="X must have shape"):
        analysis.max_margin_direction(np.ones(3), np.ones(3), 1)


# --- malformed inputs: refused in one line, never a plausible wrong answer ---------


@pytest.mark.parametrize("band", [[1, 1, 2, 2, 3, 3], [-1, 0, 1, 1, 2, 2], [0, 0, 0.5, 1, 2, 2], [0, 0, 2, 2, 2, 2]])
def test_band_dominance_refuses_a_malformed_band(band):
    # Before: a 1-based band left band 0 empty (NaN mean) and every row came back
    # 0, "collapsed"; a -1 or 0.5 entry was silently dropped from every band.
    b = np.array([[3.0, 0.0, 1.0, 1.0, 0.5, 0.5]])
    with pytest.raises(ValueError, match="band"):
        analysis.band_dominance(b, np.asarray(band))


@pytest.mark.parametrize("kw", [{"d": 2.5}, {"d": True}, {"min_valid": float("nan")}, {"min_valid": 1.5}])
def test_regime_label_refuses_a_non_integer_d_or_min_valid(kw):
    # Before: d = 2.5 was read as d = 2 (the wrong major feature), min_valid = NaN
    # labelled every cell 0.
    beta = traj([0.5, 0.1, 0.1], [0.1, 0.2, 0.9], [0.1, 0.2, 0.95])
    assert analysis.regime_label(beta, np.int8(0)) == 2
    name = next(iter(kw))
    with pytest.raises(ValueError, match=name):
        analysis.regime_label(beta, np.int8(0), **kw)
    dom, is_tied = analysis.dominant_index(beta), analysis.tied(beta, 1e-9)
    assert analysis.regime_label_from_dominant(dom, is_tied, np.int8(0), 3) == 2
    with pytest.raises(ValueError, match=name):
        analysis.regime_label_from_dominant(dom, is_tied, np.int8(0), **{"d": 3, **kw})


def test_measures_of_no_saved_time_are_refused_by_name():
    beta = np.zeros((2, 0, 3))
    with pytest.raises(ValueError, match="beta has no saved time"):
        analysis.regime_label(beta, np.zeros(2, int))
    with pytest.raises(ValueError, match="beta has no saved time"):
        analysis.limit_direction(beta)


def test_plateau_refuses_a_negative_loss_and_decreasing_times():
    t = np.arange(5.0)
    # Before: an IndexError from inside the window deques.
    with pytest.raises(ValueError, match="loss must be >= 0"):
        analysis.plateau(np.array([-1.0, -1.0, -2.0, -3.0, -3.0]), t)
    # Before: times in reverse order gave "no plateau" (negative durations).
    loss = np.array([1.0, 1.0, 1.0, 1.0, 0.1])
    assert analysis.plateau(loss, t) == (0.0, 3.0, 1.0)
    with pytest.raises(ValueError, match="times must be increasing"):
        analysis.plateau(loss[::-1], t[::-1])
    # Equal neighbouring times and NaN (invalid) entries are fine.
    p = analysis.plateau(np.array([1.0, np.nan, 1.0, 1.0, 0.1]), np.array([0.0, np.nan, 1.0, 1.0, 2.0]))
    assert (p.start, p.end, p.level) == (0.0, 1.0, 1.0)


def test_regime_label_detour_on_integrated_depth3_l2_flow():
    """Issue 25 item 8: depth-3 l2-SAM, mu = (0.1, ..., 0.9), rho = 0.1, alpha/rho
    = 0.2537 (one sample, real time, integrated here by scipy): the major feature
    leads first, feature 2 overtakes it at t ~ 360 and the major leads again from
    t ~ 600 on. A minor feature leads before the major takes over for good:
    regime 2 (before: 0, "undetermined", although the cell ends normally at d)."""
    from scipy.special import expit

    mu, rho, L = np.array([0.1, 0.3, 0.5, 0.7, 0.9]), 0.1, 3

    def f(t, w):
        w_hat = w - rho * mu * w ** (L - 1) / (np.sqrt(L) * np.linalg.norm(mu * w ** (L - 1)))
        return expit(-np.dot(mu, w_hat**L)) * mu * w_hat ** (L - 1)

    ts = np.concatenate([[0.0], np.logspace(-2, 5, 64)])
    sol = solve_ivp(f, (0, ts[-1]), 0.2537 * rho * np.ones(5), t_eval=ts, rtol=1e-11, atol=1e-16, method="DOP853")
    assert sol.status == 0
    beta = sol.y.T**L
    dom = np.where(analysis.tied(beta), 0, analysis.dominant_index(beta))
    assert analysis.visited_sequence(dom) == [5, 2, 5]
    assert analysis.regime_label(beta, np.int8(Status.FINISHED)) == 2
    # Cut at t = 400, inside the detour: the story is not told yet.
    assert analysis.regime_label(beta[ts <= 400], np.int8(Status.FINISHED)) == 0
