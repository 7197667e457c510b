"""Exact switch times of the dominant feature (samflow.switches, analysis.switch_times).

References are independent of the engine: scipy's DOP853 at rtol 1e-13 with a
root-found event per pair of features on the symmetric-init ODE of docs/theory.md
s.3.2 (l2-SAM, depths 2 to 4), and closed forms (GD and linf-SAM, s.3.1).
"""

import types

import numpy as np
import pytest
import scipy.integrate
import scipy.optimize

import samflow as sf
from samflow import analysis
from samflow.switches import locate_switches, switches_of

MU = np.array([0.2, 0.4, 0.6, 0.8, 1.0])


def _scipy_switches(L, a, rho, t_end):
    """Leader changes of the symmetric-init l2 flow in tau: all pairwise
    crossings of log w_i = log w_j (DOP853, rtol 1e-13), walked in time order."""

    def f(t, w):
        M = np.linalg.norm(MU * w ** (L - 1))
        return MU * (w - rho * MU * w ** (L - 1) / (np.sqrt(L) * M)) ** (L - 1)

    pairs = [(i, j) for i in range(MU.size) for j in range(i + 1, MU.size)]
    events = [lambda t, w, i=i, j=j: np.log(w[i]) - np.log(w[j]) for i, j in pairs]
    sol = scipy.integrate.solve_ivp(
        f, (0.0, t_end), np.full(MU.size, a), method="DOP853", rtol=1e-13, atol=1e-300, events=events
    )
    assert sol.status == 0, sol.message
    crossings = sorted((t, i, j) for (i, j), te in zip(pairs, sol.t_events) for t in te if t > 1e-9)
    # The leader right after 0 (all tied there): the largest w a moment later.
    w_eps = scipy.integrate.solve_ivp(f, (0.0, 1e-6), np.full(MU.size, a), method="DOP853", rtol=1e-13).y[:, -1]
    lead = int(np.argmax(w_eps))
    out = []
    for t, i, j in crossings:
        if lead in (i, j):
            new = j if lead == i else i
            out.append((t, lead + 1, new + 1))
            lead = new
    return out


# (depth, alpha/rho, tau horizon): regime-2 cells of mu = (0.2, ..., 1.0), rho = 1.
REGIME2 = [(2, 0.4, 15.0), (3, 0.47, 7.85), (4, 0.65, 4.44)]


@pytest.mark.slow
@pytest.mark.parametrize("L, a, t_end", REGIME2)
def test_l2_switch_times_match_an_independent_solution(L, a, t_end):
    ts = np.linspace(0.0, t_end, 16)
    sw = switches_of("l2", sf.single_sample(MU), a, 1.0, ts, depth=L, clock="tau")
    ref = _scipy_switches(L, a, 1.0, t_end)
    n = int(sw.count)
    assert bool(sw.ok) and n == len(ref) >= 2
    assert [(int(f), int(t)) for f, t in zip(sw.from_[:n], sw.to[:n])] == [(f, t) for _, f, t in ref]
    t_ref = np.array([t for t, _, _ in ref])
    rel = np.abs(sw.time[:n] - t_ref) / t_ref
    assert rel.max() < 1e-6, rel
    assert np.all(np.isnan(sw.time[n:])) and np.all(sw.to[n:] == -1)


def _gd_envelope(alpha, mu):
    """GD, depth 2, tau: log beta_j = 2 log alpha_j + 2 mu_j tau, lines; the leader
    switches at the kinks of their upper envelope."""
    lead, t, out = int(np.argmax(alpha)), 0.0, []
    while True:
        cand = [((np.log(alpha[lead]) - np.log(alpha[j])) / (mu[j] - mu[lead]), j)
                for j in range(mu.size) if mu[j] > mu[lead]]
        cand = [(tj, j) for tj, j in cand if tj > t]
        if not cand:
            return out
        t, j = min(cand)
        out.append((t, lead + 1, j + 1))
        lead = j


@pytest.mark.slow
def test_gd_several_switches_between_two_saves_match_the_closed_form():
    alpha = np.array([1.0, 0.6, 0.3, 0.1, 0.02])
    ref = _gd_envelope(alpha, MU)
    ts = np.array([0.0, 30.0])  # every switch falls between these two saves
    sw = switches_of("gd", sf.single_sample(MU), alpha, 0.0, ts, clock="tau")
    n = int(sw.count)
    assert bool(sw.ok) and n == len(ref) >= 3 and int(sw.first) == 1
    assert [(int(f), int(t)) for f, t in zip(sw.from_[:n], sw.to[:n])] == [(f, t) for _, f, t in ref]
    np.testing.assert_allclose(sw.time[:n], [t for t, _, _ in ref], rtol=1e-8)
    # Real time: t = int_0^tau (1 + e^{z}) dtau' (logistic, z = sum_j mu_j
    # alpha_j^2 e^{2 mu_j tau'}), +inf once past e^69 (the tracked range).
    z = lambda u: np.sum(MU * alpha**2 * np.exp(2 * MU * u))
    for (tau, _, _), t in zip(ref, sw.t[:n]):
        t_ref = scipy.integrate.quad(lambda u: 1.0 + np.exp(z(u)), 0.0, tau, epsabs=0, epsrel=1e-12, limit=200)[0]
        if t_ref < np.exp(69.0):
            np.testing.assert_allclose(t, t_ref, rtol=1e-7)
        else:
            assert t == np.inf


@pytest.mark.slow
# The second: w_2 = w_3 = w_4 = 9 at tau = ln 2 / 0.2, exactly when w_1 slides:
# a three-way tie on another event; the lead passes from 2 straight to 4.
@pytest.mark.parametrize("alpha", [[0.5, 3.0, 2.2, 1.5, 1.1], [0.5, 3.0, 2.0, 1.5, 1.2]])
def test_linf_switches_with_a_slide_in_between_match_the_closed_form(alpha):
    # linf, depth 2, tau: w_j = rho + (alpha_j - rho) e^{mu_j tau} while w_j > 0;
    # alpha_1 < rho slides to 0 at tau = ln 2 / 0.2 (another event inside the run).
    alpha, rho = np.array(alpha), 1.0
    w = lambda t: rho + (alpha - rho) * np.exp(MU * t)
    grid = np.linspace(0.0, 12.0, 24001)
    lead = np.argmax(np.stack([w(t) for t in grid]), axis=1)
    ref = []
    for k in np.nonzero(np.diff(lead))[0]:
        a, b = lead[k], lead[k + 1]
        ref.append((scipy.optimize.brentq(lambda t: w(t)[a] - w(t)[b], grid[k], grid[k + 1], xtol=1e-14), a + 1, b + 1))
    ts = np.linspace(0.0, 12.0, 4)
    sw = switches_of("linf", sf.single_sample(MU), alpha, rho, ts, clock="tau")
    n = int(sw.count)
    assert bool(sw.ok) and n == len(ref) >= 2
    assert [(int(f), int(t)) for f, t in zip(sw.from_[:n], sw.to[:n])] == [(f, t) for _, f, t in ref]
    np.testing.assert_allclose(sw.time[:n], [t for t, _, _ in ref], rtol=1e-8)


@pytest.mark.slow
def test_too_many_switches_are_refused_not_truncated():
    alpha = np.array([1.0, 0.6, 0.3, 0.1, 0.02])
    sw = switches_of("gd", sf.single_sample(MU), alpha, 0.0, [0.0, 30.0], clock="tau", max_switches=2)
    assert int(sw.count) > 2 and not bool(sw.ok)
    assert np.all(np.isnan(sw.time)) and np.all(np.isnan(sw.t)) and np.all(sw.to == -1)


@pytest.mark.slow
def test_analysis_switch_times_from_a_trajectory_in_real_time():
    # Real time, rho small (the default configuration): the exact times sit in
    # the save intervals that the grid-dated switches name, and a re-solve
    # started from a later saved state gives the same times.
    data = sf.single_sample(MU)
    rho = np.array([0.01, 0.02])
    ts = np.linspace(0.0, 40.0, 41)
    traj = sf.solve("l2", data, 0.4 * rho, rho, ts, alpha_batched=True)
    sw = analysis.switch_times(traj, "l2", data, rho)
    assert sw.time.shape == (2, 12) and np.all(sw.ok)
    for i in range(2):
        dom = analysis.dominant_index(np.asarray(traj.beta[i]))
        grid = analysis.switching_times(dom[1:], ts[1:])  # drop the tie at t = 0
        n = int(sw.count[i])
        assert [(f, t) for _, f, t in grid] == list(zip(sw.from_[i, :n], sw.to[i, :n]))
        for (t_grid, _, _), t_exact in zip(grid, sw.time[i, :n]):
            assert t_grid - 1.0 < t_exact <= t_grid
        np.testing.assert_array_equal(sw.t[i], sw.time[i])  # clock t: t is the clock
    later = sf.solve("l2", data, 0.4 * 0.01, 0.01, ts)
    per_time = ("ts", "t", "W", "beta", "loss")
    sub = type(later)(**{k: (getattr(later, k)[2:] if k in per_time else getattr(later, k))
                         for k in type(later).__dataclass_fields__})
    sw2 = analysis.switch_times(sub, "l2", data, 0.01)
    n = int(sw.count[0])
    np.testing.assert_allclose(sw2.time[:n], sw.time[0, :n], rtol=1e-7)


def test_bad_inputs_are_one_line_errors():
    data = sf.single_sample(MU)
    with pytest.raises(ValueError, match="W0 must have shape"):
        locate_switches("l2", data, np.ones((2, 5)), np.ones(2), [0.0, 1.0])
    with pytest.raises(ValueError, match="rho must have shape"):
        locate_switches("l2", data, np.ones((2, 2, 5)), np.ones(3), [0.0, 1.0])
    with pytest.raises(ValueError, match="max_switches"):
        locate_switches("l2", data, np.ones((2, 2, 5)), np.ones(2), [0.0, 1.0], max_switches=0)
    for k in (2.5, True, "3"):  # 2.5 ran as 2 slots, True as 1
        with pytest.raises(ValueError, match=r"max_switches must be an integer >= 1 \(or None: 2 d \+ 2\), got "):
            locate_switches("l2", data, np.ones((2, 2, 5)), np.ones(2), [0.0, 1.0], max_switches=k)
    # A negative or non-finite radius and an init no flow can leave are refused as
    # samflow.solve refuses them (a negative rho once ran and returned "no switch").
    with pytest.raises(ValueError, match=r"^rho must be >= 0"):
        locate_switches("l2", data, np.ones((2, 2, 5)), np.array([0.1, -0.1]), [0.0, 1.0])
    with pytest.raises(ValueError, match=r"^rho must be finite"):
        locate_switches("l2", data, np.ones((2, 2, 5)), np.array([0.1, np.inf]), [0.0, 1.0])
    with pytest.raises(ValueError, match=r"^the init cannot move at depth 2"):
        locate_switches("l2", data, np.zeros((1, 2, 5)), np.array([0.1]), [0.0, 1.0])
    summary = types.SimpleNamespace(dominant=np.ones((2,), int), ts=np.array([0.0, 1.0]))  # no W, as a Summary
    with pytest.raises(ValueError, match="Summary has none"):
        analysis.switch_times(summary, "gd", data, 0.0)


def test_the_sweep_trajectory_figure_marks_the_exact_switch_times(tmp_path, monkeypatch):
    """plots.plot_trajectories draws each switch at `switch_time` when the file has it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from samflow import plots
    from test_plots import _staircase, make_ds

    kept, close = [], plt.close
    monkeypatch.setattr(plt, "close", lambda fig=None: kept.append(fig))
    times = np.linspace(0.5, 4.0, 8)
    ds = make_ds(_staircase()[None, None, None], np.zeros((1, 1, 1)), alpha=[0.5], rho=[1.0], times=times, flows=("l2",))
    exact = [1.93, 2.71]  # inside (times[2], times[3]] and (times[4], times[5]]
    ds["switch_time"] = (("flow", "alpha", "rho", "switch"), np.array([[[exact + [np.nan]]]]))
    ds["switch_from"] = (("flow", "alpha", "rho", "switch"), np.array([[[[1, 2, -1]]]], np.int8))
    ds["switch_to"] = (("flow", "alpha", "rho", "switch"), np.array([[[[2, 3, -1]]]], np.int8))
    ds["switch_ok"] = (("flow", "alpha", "rho"), np.array([[[True]]]))
    plots.plot_trajectories(ds, tmp_path / "traj.png", alphas=[0.5])
    ax = [a for a in kept[-1].axes if a.get_title()][0]
    dotted = [line.get_xdata()[0] for line in ax.get_lines() if line.get_linestyle() == ":"]
    np.testing.assert_allclose(dotted, exact)
    ds["switch_ok"][:] = False  # a refused record: back to the save grid
    plots.plot_trajectories(ds, tmp_path / "traj.png", alphas=[0.5])
    ax = [a for a in kept[-1].axes if a.get_title()][0]
    dotted = [line.get_xdata()[0] for line in ax.get_lines() if line.get_linestyle() == ":"]
    np.testing.assert_allclose(dotted, times[[3, 5]])
    for fig in kept:
        close(fig)


@pytest.mark.parametrize("d, dtype", [(5, np.int8), (200, np.int16), (40_000, np.int32)])
def test_stored_leaders_keep_their_value_for_any_d(d, dtype):
    """switch_from / switch_to / switch_first hold feature indices up to d: stored
    as int8 they wrapped for d > 127 (leader 200 was written as -56)."""
    import xarray as xr

    from samflow import store
    from samflow.switches import SwitchTimes

    lead = [d - 50 if d > 50 else 2, d - 1, d]
    sw = SwitchTimes(
        time=np.array([[1.0, 2.0, np.nan]]), t=np.array([[1.0, 2.0, np.nan]]),
        from_=np.array([[lead[0], lead[1], -1]], np.int32), to=np.array([[lead[1], lead[2], -1]], np.int32),
        count=np.array([2], np.int32), first=np.array([lead[0]], np.int32), ok=np.array([True]),
        time_err=np.array([[1e-9, 2e-9, np.nan]]), rate=np.array([[0.1, 0.2, np.nan]]),
    )
    ds = xr.Dataset(coords={"flow": ["l2", "gd"], "alpha": [1.0], "rho": [0.1], "coord": np.arange(1, d + 1)})
    out = store.add_switch_times(ds, {"l2": sw})
    assert out["switch_from"].dtype == dtype and out["switch_first"].dtype == dtype
    np.testing.assert_array_equal(out["switch_from"].sel(flow="l2").values.ravel(), [lead[0], lead[1], -1])
    np.testing.assert_array_equal(out["switch_to"].sel(flow="l2").values.ravel(), [lead[1], lead[2], -1])
    np.testing.assert_array_equal(out["switch_first"].values.ravel(), [lead[0], -1])  # gd: no record, -1  # no record: -1 padded
