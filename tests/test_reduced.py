"""The exact reductions of samflow._engine.reduced (docs/theory.md s.3.5), checked against the
general (L, d) state: depth-2 l2-SAM on one sample from equal layers as two scalars per
cell (`reduce="all"`, and "auto" from d = 8 on), and any gd, l2, usam or lp cell whose layers start equal as one
row (`reduce="all"`).

Every comparison is with `reduce="off"`, the general field of the lane engine, on the
same cells at the default settings (rtol 1e-8): beta to 1e-6 relative to max_j |beta_j|
at each save, the collapse times to 1e-8 relative, the statuses and NaN positions equal.
A cell the reduction does not cover, or whose reduced run meets anything but the horizon
or a collapse, must come out of the general engine bit for bit.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lane_programs
import samflow as sf
from samflow._engine.integrate import batch_cells
from samflow._engine.reduced import cell_reducible
from samflow.flows import Clock, Method

from test_lanes import FIELDS, MU, TS
from test_lanes import _cells as _grid  # the chart's (alpha, rho) cells, alpha-major


# One lane width for the file's programs (tests/lane_programs.py shares a program among the
# calls of the same static arguments, at canonical cell and save counts, and a result among
# the calls of the same cells): the bits tests compare it with 64 lanes and with one.
WIDTH = 7


def _run(W0, rho, reduce, clock="t", ts=TS, data=None, width=WIDTH, switches=0, pad=True, **kw):
    return _run_m("l2", W0, rho, reduce, clock=clock, ts=ts, data=data, width=width, switches=switches, pad=pad, **kw)


def _cells(alpha, rho, d=5):
    W0, rho_b, _ = batch_cells(alpha, rho, 2, d, alpha_batched=True)
    return np.array(W0), np.array(rho_b)


def _agree(red, gen, beta_tol=1e-6, time_tol=1e-8, mu=MU, loss="logistic"):
    """The reduced run `red` stands for the general run `gen` to the settings' accuracy."""
    np.testing.assert_array_equal(red.status, gen.status)
    np.testing.assert_array_equal(np.isnan(red.beta), np.isnan(gen.beta))
    a, b = red.beta, gen.beta
    # After a collapse both are 0; between the capture and the collapse both are the same
    # straight line to 0, from their own capture points.
    scale = np.nanmax(np.abs(b), axis=-1, keepdims=True)
    with np.errstate(invalid="ignore"):
        rel = np.abs(a - b) / np.where(scale > 0, scale, 1.0)
    assert np.nanmax(rel) <= beta_tol, np.nanmax(rel)
    np.testing.assert_allclose(red.event_time, gen.event_time, rtol=time_tol, equal_nan=True)
    # Real time: in the tau clock it is a state, s = log(1 + t), error-controlled as s to rtol
    # by each engine (the largest difference measured: 1.7e-8 relative, at a collapse).
    np.testing.assert_allclose(np.log1p(red.event_t), np.log1p(gen.event_t), rtol=5 * time_tol, equal_nan=True)
    np.testing.assert_allclose(np.log1p(red.t), np.log1p(gen.t), rtol=5 * time_tol, equal_nan=True)
    coll = red.status == int(sf.Status.COLLAPSED)
    np.testing.assert_allclose(red.collapse_direction[coll], gen.collapse_direction[coll], atol=beta_tol)
    # The loss follows from beta: |d loss| <= slope(z) |dz| with |dz| <= sum|mu| beta_tol max|beta|.
    z = np.minimum(red.beta @ np.asarray(mu), gen.beta @ np.asarray(mu))
    bound = 1.01 * np.asarray(sf.get_loss(loss).slope(z)) * np.sum(np.abs(mu)) * beta_tol * scale[..., 0]
    np.testing.assert_array_equal(np.isnan(red.loss), np.isnan(gen.loss))
    assert np.all(np.nan_to_num(np.abs(red.loss - gen.loss)) <= np.nan_to_num(bound) + 1e-300)


def _same(a, b):
    return {f: bool(np.array_equal(getattr(a, f), getattr(b, f), equal_nan=True)) for f in FIELDS}


def test_reduced_matches_the_general_field_on_the_chart_grid():
    """All three regimes: collapse (small alpha/rho), minor first, major first."""
    W0, rho = _cells(*_grid())
    red, gen = _run(W0, rho, "all"), _run(W0, rho, "off")
    _agree(red, gen)
    st = red.status
    assert np.sum(st == int(sf.Status.COLLAPSED)) >= 5 and np.sum(st == int(sf.Status.FINISHED)) >= 5
    # The reduction took these cells: it needs fewer steps in all (two scalars, no stiffness).
    assert np.sum(red.num_steps) < np.sum(gen.num_steps)


def test_reduced_matches_on_the_readme_cells_and_per_coordinate_inits():
    """The README's cells (alpha = 0.0042: 2 -> 3 -> 4 -> 5; 0.003: collapse at t = 14.17),
    a (d,) alpha with a negative coordinate (equal layers: w_j -> -w_j is a symmetry)."""
    ts = np.linspace(0.1, 60.0, 600)
    alpha = np.array([[0.0042] * 5, [0.003] * 5, [0.004, -0.003, 0.005, 0.002, 0.0045], [0.02, 0.01, 0.005, 0.004, 0.03]])
    W0, rho = _cells(alpha, np.full(4, 0.01))
    red, gen = _run(W0, rho, "all", ts=ts), _run(W0, rho, "off", ts=ts)
    _agree(red, gen)
    assert red.status[1] == int(sf.Status.COLLAPSED) and abs(red.event_time[1] - 14.1737) < 1e-4
    lead = np.argmax(red.beta[0], axis=-1) + 1
    assert list(dict.fromkeys(lead.tolist())) == [2, 3, 4, 5]
    assert np.all(red.W[2, :, :, 1] < 0)  # the sign is kept


def test_reduced_matches_in_the_tau_clock_and_in_log_coordinates():
    W0, rho = _cells(*_grid(6))
    ts = np.linspace(0.05, 40.0, 30)
    _agree(_run(W0, rho, "all", clock="tau", ts=ts), _run(W0, rho, "off", clock="tau", ts=ts))
    # The general engine in log coordinates needs rtol 1e-10 for 1e-6 on beta just before a
    # collapse (docs/benchmarks.md, "Large d"; 2.9e-6 at 1e-8 here); the reduction does not.
    red, gen = _run(W0, rho, "all", coords="log"), _run(W0, rho, "off", coords="log", rtol=1e-10)
    _agree(red, gen)


def test_reduced_matches_with_the_exponential_loss_and_at_d50():
    W0, rho = _cells(np.array([0.004, 0.02, 0.3]), np.array([0.01, 0.01, 0.1]), d=50)
    mu = list(np.arange(1, 51) / 50.0)
    data = sf.single_sample(mu)
    _agree(_run(W0, rho, "all", data=data), _run(W0, rho, "off", data=data), mu=mu)
    W0, rho = _cells(*_grid(4))
    _agree(_run(W0, rho, "all", loss="exponential"), _run(W0, rho, "off", loss="exponential"), loss="exponential")


def test_reduced_bits_do_not_depend_on_the_order_the_width_or_the_other_cells():
    W0, rho = _cells(*_grid())
    ref = _run(W0, rho, "all", width=7)
    perm = np.random.default_rng(3).permutation(len(rho))
    back = jax.tree_util.tree_map(lambda x: x[np.argsort(perm)], _run(W0[perm], rho[perm], "all", width=64))
    assert all(_same(ref, back).values()), _same(ref, back)
    one = _run(W0[10:11], rho[10:11], "all", width=1, pad=False)  # a cell alone
    assert all(_same(jax.tree_util.tree_map(lambda x: x[10:11], ref), one).values())


def test_cells_the_reduction_does_not_cover_come_from_the_general_engine_bit_for_bit():
    """Unequal layers, a weight at 0 and mu_j = 0 are not reduced; a blow-up (tau clock) and
    a run out of steps end a reduced run, which hands the cell back: all equal to reduce="off"."""
    W0, rho = _cells(np.array([0.01, 0.5, 0.02]), np.array([0.01, 0.1, 0.01]))
    W0[0, 1] *= 1.5  # unequal layers
    W0[2, :, 3] = 0.0  # a weight at 0 in both layers
    red, gen = _run(W0, rho, "all"), _run(W0, rho, "off")
    pick = lambda out: jax.tree_util.tree_map(lambda x: x[[0, 2]], out)
    assert all(_same(pick(red), pick(gen)).values())
    _agree(red, gen)
    data = sf.single_sample([0.0, 0.5, 1.0])
    Wz, rz = _cells(np.array([0.3]), np.array([0.1]), d=3)
    assert not bool(cell_reducible(jnp.asarray(Wz[0]), data))
    assert all(_same(_run(Wz, rz, "all", data=data), _run(Wz, rz, "off", data=data)).values())
    # Blow-up in the tau clock: |beta| passes 10^blowup_log10.
    ts = np.linspace(1.0, 400.0, 8)
    Wb, rb = _cells(np.array([1.0, 0.5]), np.array([0.1, 0.01]))
    red, gen = _run(Wb, rb, "all", clock="tau", ts=ts), _run(Wb, rb, "off", clock="tau", ts=ts)
    assert np.all(gen.status == int(sf.Status.BLEW_UP))
    assert all(_same(red, gen).values())
    # Out of steps.
    red, gen = _run(W0, rho, "all", max_steps=12), _run(W0, rho, "off", max_steps=12)
    assert np.all(gen.status == int(sf.Status.MAX_STEPS))
    assert all(_same(red, gen).values())


def test_reduce_setting_is_checked_in_one_line():
    with pytest.raises(ValueError, match=r"^solver.reduce must be 'auto', 'all' or 'off', got 'yes'$"):
        sf.SolverSettings(reduce="yes")


@pytest.mark.parametrize("clock", ["t", "tau"])
def test_reduced_switch_times_match_the_general_engine(clock):
    """The switch record (leader, challenger, time) in the same pass: the README cell
    (2 -> 3 -> 4 -> 5 at t = 6.18, 12.24, 16.39) among the chart's cells."""
    alpha, rho = _grid(6)
    W0, rho = _cells(np.append(alpha, 0.0042), np.append(rho, 0.01))
    ts = np.linspace(0.1, 60.0, 120) if clock == "t" else np.linspace(0.05, 40.0, 60)
    (red, _, sr), (gen, _, sg) = (_run(W0, rho, r, clock=clock, ts=ts, switches=8) for r in ("all", "off"))
    _agree(red, gen)
    r_time, r_t, r_from, r_to, r_count, r_first, r_ok, r_err, r_rate = (np.asarray(x) for x in sr)
    g_time, g_t, g_from, g_to, g_count, g_first, g_ok, g_err, g_rate = (np.asarray(x) for x in sg)
    for a, b in ((r_from, g_from), (r_to, g_to), (r_count, g_count), (r_first, g_first), (r_ok, g_ok)):
        np.testing.assert_array_equal(a, b)
    assert np.sum(g_count) >= 5  # 7 in the t clock
    # At rtol 1e-8 the general engine's switch times are good to ~1e-6 relative (which is why
    # `samflow.switches` refines at 1e-10); the two engines differ by 3.9e-7 at most here.
    np.testing.assert_allclose(r_time, g_time, rtol=1e-6, equal_nan=True)
    np.testing.assert_allclose(np.log1p(r_t), np.log1p(g_t), rtol=1e-6, equal_nan=True)
    # Each time carries a bound (docs/theory.md s.5) and its gap's rate, in both engines;
    # the two times agree within their bounds.
    found = ~np.isnan(g_time)
    for err, rate in ((r_err, r_rate), (g_err, g_rate)):
        assert np.all(err[found] > 0) and np.all(np.isfinite(err[found])) and np.all(np.isnan(err[~found]))
        assert np.all(rate[found] > 0) and np.all(np.isnan(rate[~found]))
    assert np.all(np.abs(r_time - g_time)[found] <= (r_err + g_err)[found])
    if clock == "t":
        assert list(r_from[-1, :3]) == [2, 3, 4] and list(r_to[-1, :3]) == [3, 4, 5]
        np.testing.assert_allclose(r_time[-1, :3], [6.184938, 12.236628, 16.385923], atol=2e-6)
    # The reduction took these cells (no hand-over): far fewer steps.
    assert np.sum(red.num_steps) < np.sum(gen.num_steps)


def test_reduced_saves_the_init_itself_and_a_frozen_cell_exactly():
    """The reduction saves w = alpha exp(dx) (dx = log|w| - log|alpha|): the init itself at
    t = 0, and a cell whose loss slope underflows (alpha = 1e150: margin 1e300) stays at
    its init to the bit, as in the general state. Rebuilding w as exp(log|alpha| + dx) was
    off by 1.2e-14 relative at 1e150 (|log alpha| ULPs) already at t = 0
    (tests/test_inputs.py::test_tiny_and_huge_inits caught it)."""
    data = sf.single_sample(MU)
    alphas = np.array([0.003, 0.7, 1e150, -2.5e-7])
    ts = np.array([0.0, 0.5, 20.0])
    out = {r: sf.solve("l2", data, alphas, np.full(4, 0.1), ts, alpha_batched=True,
                       settings=sf.SolverSettings(reduce=r)) for r in ("all", "off")}
    for r, tr in out.items():
        W = np.asarray(tr.W)
        np.testing.assert_array_equal(W[:, 0], np.broadcast_to(alphas[:, None, None], W[:, 0].shape), err_msg=r)
        np.testing.assert_array_equal(W[2], 1e150, err_msg=r)
    np.testing.assert_allclose(np.asarray(out["all"].W), np.asarray(out["off"].W), rtol=1e-6, atol=1e-12)


# -- the equal-layer reduction (reduce="all") ----------------------------------------------


def _run_m(method, W0, rho, reduce, clock="t", ts=TS, data=None, width=WIDTH, switches=0, p=None, pad=True, **kw):
    """The lane engine on these cells at `reduce` (numpy results; with `switches` the
    triple `(trajectory, iterations, record)`), by the shared program of its static arguments."""
    data = sf.single_sample(MU) if data is None else data
    m, c = Method.parse(method), Clock.parse(clock)
    settings = sf.SolverSettings(reduce=reduce, **kw).resolved(m, np.asarray(W0), data, c, p)
    out = lane_programs.run(W0, rho, data, ts, method=m, clock=c, settings=settings, width=width,
                            switches=switches, p=p, pad=pad)
    return out if switches else out[0]


def _cells_at(alpha, rho, depth, d=5):
    W0, rho_b, _ = batch_cells(alpha, rho, depth, d, alpha_batched=True)
    return np.array(W0), np.array(rho_b)


# Two approximations at rtol 1e-8, each about 1e-6 from the exact beta, differ by up to twice
# that: measured against rtol 1e-12 on a depth-3 l2 chart, the general engine's worst error is
# 4.2e-6 and the one-row state's 4.1e-6 (same cell, same save); between them 1.4e-6 at most
# here at depth 3, 6.5e-6 at depth 4. The times: s = log(1 + t) is error-controlled within
# each state's norm (d + 1 numbers here, L d + 1 there): 6e-8 apart at most.
EQUAL_BETA_TOL = {2: 2e-6, 3: 2e-6, 4: 1e-5}
EQUAL_TIME_TOL = 2e-8


def _differs(red, gen):
    """The reduction ran: the rows it stands for are not the general engine's bits."""
    return not np.array_equal(red.W, gen.W, equal_nan=True)


SLOW = pytest.mark.slow  # each case compiles two programs (about 20 s on 2 cores)


@pytest.mark.parametrize("method,depth,p", [("l2", 4, None), pytest.param("gd", 3, None, marks=SLOW),
                                            pytest.param("l2", 3, None, marks=SLOW),
                                            pytest.param("usam", 2, None, marks=SLOW),
                                            pytest.param("lp", 3, 3.0, marks=SLOW)])
def test_equal_layers_match_the_general_field(method, depth, p):
    """Every regime of the chart (collapse, minor first, major first) at depths 2-4: the
    one-row state stands for the (L, d) state to the settings' accuracy."""
    W0, rho = _cells_at(*_grid(6), depth)
    red, gen = _run_m(method, W0, rho, "all", p=p), _run_m(method, W0, rho, "off", p=p)
    _agree(red, gen, beta_tol=EQUAL_BETA_TOL[depth], time_tol=EQUAL_TIME_TOL)
    assert _differs(red, gen)
    # Layers that start equal stay equal, to the bit, in what the reduction returns.
    fin = np.isfinite(red.W)
    assert np.array_equal(np.where(fin, red.W, 0.0), np.where(fin, red.W[..., :1, :], 0.0))
    if depth == 4:  # the collapse, located and extrapolated on the weights the row stands for
        assert np.sum(red.status == int(sf.Status.COLLAPSED)) >= 1


@SLOW
def test_equal_layers_in_the_tau_clock_log_coordinates_and_on_several_samples():
    W0, rho = _cells_at(*_grid(5), 3)
    ts = np.linspace(0.05, 40.0, 30)
    red, gen = _run_m("l2", W0, rho, "all", clock="tau", ts=ts), _run_m("l2", W0, rho, "off", clock="tau", ts=ts)
    _agree(red, gen, beta_tol=EQUAL_BETA_TOL[3], time_tol=EQUAL_TIME_TOL)
    # Log coordinates: both engines at rtol 1e-10 (the general one needs it near a collapse).
    red, gen = (_run_m("l2", W0, rho, r, coords="log", rtol=1e-10) for r in ("all", "off"))
    _agree(red, gen)
    assert _differs(red, gen)
    # Several samples (the two-scalar reduction does not apply): depth 2, the t clock.
    data = sf.Dataset.from_arrays([[0.2, 0.4, 0.6, 0.8, 1.0], [0.1, 0.5, 0.5, 0.9, 1.1]], [1.0, 1.0])
    W0, rho = _cells_at(*_grid(5), 2)
    red, gen = _run_m("l2", W0, rho, "all", data=data), _run_m("l2", W0, rho, "off", data=data)
    np.testing.assert_array_equal(red.status, gen.status)
    scale = np.nanmax(np.abs(gen.beta), axis=-1, keepdims=True)
    with np.errstate(invalid="ignore"):
        assert np.nanmax(np.abs(red.beta - gen.beta) / np.where(scale > 0, scale, 1.0)) <= EQUAL_BETA_TOL[2]
    np.testing.assert_allclose(red.event_time, gen.event_time, rtol=EQUAL_TIME_TOL, equal_nan=True)
    assert _differs(red, gen)


def test_equal_layers_bits_do_not_depend_on_the_order_the_width_or_the_other_cells():
    W0, rho = _cells_at(*_grid(), 3)
    ref = _run_m("gd", W0, rho, "all", width=7)
    perm = np.random.default_rng(4).permutation(len(rho))
    back = jax.tree_util.tree_map(lambda x: x[np.argsort(perm)], _run_m("gd", W0[perm], rho[perm], "all", width=64))
    assert all(_same(ref, back).values()), _same(ref, back)
    one = _run_m("gd", W0[10:11], rho[10:11], "all", width=1, pad=False)  # a cell alone
    assert all(_same(jax.tree_util.tree_map(lambda x: x[10:11], ref), one).values())


def test_equal_layers_hand_back_what_they_do_not_cover_bit_for_bit():
    """Unequal layers and a blow-up at depth 3 (tau clock): reduce="off"'s bits."""
    W0, rho = _cells_at(np.array([0.01, 0.5, 0.02]), np.array([0.01, 0.1, 0.01]), 3)
    W0[0, 1] *= 1.5  # unequal layers
    ts = np.linspace(1.0, 400.0, 8)
    Wb, rb = _cells_at(np.array([1.0, 0.5]), np.array([0.1, 0.01]), 3)
    W0, rho = np.concatenate([W0[:1], Wb]), np.concatenate([rho[:1], rb])
    red, gen = _run_m("l2", W0, rho, "all", clock="tau", ts=ts), _run_m("l2", W0, rho, "off", clock="tau", ts=ts)
    assert np.all(gen.status[1:] == int(sf.Status.BLEW_UP))
    assert all(_same(red, gen).values()), _same(red, gen)


@SLOW
def test_equal_layers_hand_back_linf_a_run_out_of_steps_and_leave_auto_alone():
    """linf (its weights slide one by one), a run out of steps, and reduce="auto" (no
    equal-layer reduction): all reduce="off"'s bits."""
    W0, rho = _cells_at(np.array([0.01, 0.5, 0.02]), np.array([0.01, 0.1, 0.01]), 3)
    gen = _run_m("gd", W0, rho, "off")
    assert all(_same(_run_m("linf", W0, rho, "all"), _run_m("linf", W0, rho, "off")).values())
    assert all(_same(_run_m("gd", W0, rho, "auto"), gen).values())
    red, gen = _run_m("gd", W0, rho, "all", max_steps=12), _run_m("gd", W0, rho, "off", max_steps=12)
    assert np.all(gen.status == int(sf.Status.MAX_STEPS))
    assert all(_same(red, gen).values())


@SLOW
def test_equal_layers_switch_record_matches_the_general_engine():
    alpha, rho = _grid(5)
    W0, rho = _cells_at(np.append(alpha, 0.0042), np.append(rho, 0.01), 3)
    ts = np.linspace(0.1, 60.0, 120)
    (red, _, sr), (gen, _, sg) = (_run_m("l2", W0, rho, r, ts=ts, switches=8) for r in ("all", "off"))
    _agree(red, gen, beta_tol=EQUAL_BETA_TOL[3], time_tol=EQUAL_TIME_TOL)
    for a, b in zip(sr[2:7], sg[2:7]):  # from, to, count, first, ok
        np.testing.assert_array_equal(a, b)
    assert np.sum(sg[4]) >= 3
    np.testing.assert_allclose(sr[0], sg[0], rtol=1e-6, equal_nan=True)


def test_auto_reduces_from_d8_on_only():
    """`reduce="auto"` is the general state below d = `AUTO_MIN_D` (bits of "off", one loop
    to compile) and the two-scalar reduction from it on (bits of "all")."""
    from samflow._engine.reduced import AUTO_MIN_D, reducible

    assert AUTO_MIN_D == 8
    rule = lambda r, d, L=2, n=1, m=Method.L2: reducible(m, L, n, sf.SolverSettings(reduce=r), d)
    assert [rule("auto", d) for d in (2, 5, 7, 8, 50)] == [False, False, False, True, True]
    assert [rule("all", d) for d in (2, 5, 8)] == [True, True, True] and not rule("off", 50)
    assert not (rule("auto", 50, L=3) or rule("auto", 50, n=2) or rule("auto", 50, m=Method.GD))
    for d, like in ((AUTO_MIN_D - 1, "off"), (AUTO_MIN_D, "all")):
        data = sf.single_sample(np.arange(1, d + 1) / d)
        W0, rho = _cells(np.array([0.05, 0.5]), np.array([0.1, 0.1]), d=d)
        assert all(_same(_run(W0, rho, "auto", data=data, width=2), _run(W0, rho, like, data=data, width=2)).values()), d
