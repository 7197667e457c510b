"""The lane engine (samflow._lanes): a cell's results depend on the cell alone.

Every cell is integrated in its own lane with its own step size, so the bits of a
cell must not depend on the number of lanes, on the order of the cells or on the
other cells of a call (with the command lines' CPU arithmetic, which
tests/conftest.py sets: `samflow._x64.exact_cpu_arithmetic`). And the switches
of the leader are recorded in the same pass, also between two save times.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import samflow as sf
from samflow._integrate import batch_cells
from samflow._lanes import solve_lanes
from samflow._x64 import EXACT_CPU_FLAG
from samflow.flows import Clock, Method

MU = [0.2, 0.4, 0.6, 0.8, 1.0]
TS = np.geomspace(1e-2, 1e4, 24)
FIELDS = ("W", "beta", "t", "loss", "status", "event_time", "event_t", "collapse_direction", "slide_time",
          "num_steps", "num_segments")


def _cells(n=8):
    a = np.geomspace(1e-2, 1e2, n)
    r = np.geomspace(1e-2, 1e1, n)
    return np.repeat(a, n), np.tile(r, n)


def _run(method, alpha, rho, width, depth=2, clock="t", ts=TS, switches=0, data=None, reduce="off"):
    """The lane engine on these cells; `reduce="off"` by default: these tests are of the
    lane engine, and depth-2 l2 cells from equal layers take the reduction otherwise
    (`samflow._reduced`, tests/test_reduced.py)."""
    data = sf.single_sample(MU) if data is None else data
    W0, rho_b, _ = batch_cells(alpha, rho, depth, data.d, alpha_batched=True)
    m, c = Method.parse(method), Clock.parse(clock)
    settings = sf.SolverSettings(reduce=reduce).resolved(m, np.asarray(W0), data, c, None)
    fn = jax.jit(lambda W, r: solve_lanes(W, r, data, jnp.asarray(ts), method=m, clock=c, settings=settings,
                                          width=width, switches=switches))
    return fn(W0, rho_b)


def _same(a, b):
    return {f: bool(np.array_equal(np.asarray(getattr(a, f)), np.asarray(getattr(b, f)), equal_nan=True))
            for f in FIELDS}


def test_the_test_process_has_the_exact_cpu_arithmetic():
    import os

    assert EXACT_CPU_FLAG in os.environ.get("XLA_FLAGS", "").split()


@pytest.mark.parametrize("method", ["l2", "linf"])
def test_bits_do_not_depend_on_the_lane_width(method):
    alpha, rho = _cells()
    ref, _, _ = _run(method, alpha, rho, width=1)
    for width in (7, 64):
        out, iters, _ = _run(method, alpha, rho, width=width)
        assert all(_same(ref, out).values()), (width, _same(ref, out))
        # Every iteration steps at most `width` cells.
        assert int(np.sum(out.num_steps)) <= int(iters) * width


def test_bits_do_not_depend_on_the_order_or_the_other_cells():
    alpha, rho = _cells()
    ref, _, _ = _run("l2", alpha, rho, width=7)
    perm = np.random.default_rng(3).permutation(alpha.size)
    out, _, _ = _run("l2", alpha[perm], rho[perm], width=7)
    back = jax.tree_util.tree_map(lambda x: np.asarray(x)[np.argsort(perm)], out)
    assert all(_same(ref, back).values())
    # A cell alone (one lane, one cell) has the bits it has among 64 others.
    one, _, _ = _run("l2", alpha[10:11], rho[10:11], width=1)
    assert all(_same(jax.tree_util.tree_map(lambda x: np.asarray(x)[10:11], ref), one).values())


@pytest.mark.slow  # a 1024-lane program; `pytest -m slow`, which CI runs
def test_1024_lanes_take_the_same_steps_to_the_last_bits():
    """Not bit for bit: at 1024 lanes XLA reduces the wider arrays (the field's sums
    over d, the controller's error norm) in another order than at 64, and 588 of
    these 1024 cells differ in their last bits (6.7e-12 relative at most, measured
    2026-12-01): the same steps, statuses and segments, the numbers to 1e-10.
    (Bit for bit up to 64 lanes: the tests above.)"""
    alpha, rho = _cells(32)
    ref, _, _ = _run("l2", alpha, rho, width=64)
    out, _, _ = _run("l2", alpha, rho, width=1024)
    same = _same(ref, out)
    assert same["num_steps"] and same["num_segments"] and same["status"]
    a, b = np.asarray(ref.beta), np.asarray(out.beta)
    np.testing.assert_array_equal(np.isnan(a), np.isnan(b))
    scale = np.nanmax(np.abs(a), axis=-1, keepdims=True)  # relative to the largest |beta_j| then
    with np.errstate(invalid="ignore"):
        assert np.nanmax(np.abs(b - a) / np.where(scale > 0, scale, 1.0)) < 1e-10
    for f in ("event_time", "slide_time"):
        np.testing.assert_allclose(np.asarray(getattr(out, f)), np.asarray(getattr(ref, f)), rtol=1e-10,
                                   equal_nan=True)


def test_switches_in_the_same_pass_match_the_trajectory():
    """The record's leader at each untied save time is the argmax of the solve's
    own |beta| (the switches are located inside the steps, not at the saves)."""
    alpha, rho = _cells(4)
    tr, _, raw = _run("l2", alpha, rho, width=4, switches=12)
    time, _, frm, to, count, first, ok = (np.asarray(x) for x in raw)
    beta = np.abs(np.asarray(tr.beta))
    for i in range(alpha.size):
        assert ok[i] and count[i] <= 12
        top = np.sort(beta[i], axis=-1)
        clear = (top[:, -2] < (1 - 1e-6) * top[:, -1]) & np.isfinite(top[:, -1]) & (top[:, -1] > 0)
        for k in np.flatnonzero(clear):
            n_before = int(np.sum(time[i, : count[i]] <= TS[k]))
            leader = first[i] if n_before == 0 else to[i, n_before - 1]
            assert leader == np.argmax(beta[i, k]) + 1, (i, k)
        # each switch hands the lead from the leader before it
        for j in range(1, count[i]):
            assert frm[i, j] == to[i, j - 1]


def test_depth3_detour_between_two_save_times_is_recorded():
    """Issue 26's case: depth 3, one sample mu = (0.1, ..., 0.9), l2, rho = 0.1,
    160 log-spaced save times in [1e-2, 1e5]: the lead goes 5 -> 4 -> 5 between two
    save times. Located in one pass to the horizon (the former re-solve stopped
    at the first save of the last saved leader and missed it)."""
    from samflow.switches import switch_times

    data = sf.single_sample([0.1, 0.3, 0.5, 0.7, 0.9])
    ts = np.geomspace(1e-2, 1e5, 160)
    grid = np.geomspace(1e-2, 1e1, 48)
    ratios = grid[[np.argmin(np.abs(grid - 0.0180019)), np.argmin(np.abs(grid - 0.0134171))]]
    tr = sf.solve("l2", data, ratios * 0.1, np.full(2, 0.1), ts, depth=3, alpha_batched=True)
    sw = switch_times(tr, "l2", data, np.full(2, 0.1))
    assert list(np.asarray(sw.ok)) == [True, True]
    expected = [[1765.6052, 1888.6298], [2216.7868, 2334.2699]]
    for i in range(2):
        assert int(sw.count[i]) == 2
        assert list(sw.from_[i, :2]) == [5, 4] and list(sw.to[i, :2]) == [4, 5]
        np.testing.assert_allclose(sw.time[i, :2], expected[i], rtol=1e-6)


@pytest.mark.parametrize("bad", [-1, 2.5, True, "3"])
def test_solve_grid_refuses_a_bad_switch_count_in_one_line(bad):
    from samflow.sweep import solve_grid

    with pytest.raises(ValueError, match=r"^switches must be an integer >= 0 \(0: no switch times\), got "):
        solve_grid("l2", sf.single_sample(MU), np.full((2, 2, 5), 0.1), np.full(2, 0.1), TS, switches=bad)
