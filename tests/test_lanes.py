"""The lane engine (samflow._engine.lanes): a cell's results depend on the cell alone.

Every cell is integrated in its own lane with its own step size, so the bits of a
cell must not depend on the number of lanes (1 to 1024 here), on the order of the
cells or on the other cells of a call (with the command lines' CPU arithmetic, which
tests/conftest.py sets: `samflow._util.x64.exact_cpu_arithmetic`). And the switches of
the leader are recorded in the same pass, also between two save times.
"""

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lane_programs
import samflow as sf
from samflow._engine.integrate import batch_cells
from samflow._engine.lanes import solve_lanes
from samflow._util.x64 import EXACT_CPU_FLAG, EXACT_REDUCE_FLAG
from samflow.flows import Clock, Method

MU = [0.2, 0.4, 0.6, 0.8, 1.0]
TS = np.geomspace(1e-2, 1e4, 24)
FIELDS = ("W", "beta", "t", "loss", "status", "event_time", "event_t", "collapse_direction", "slide_time",
          "num_steps", "num_runs")


def _cells(n=8):
    a = np.geomspace(1e-2, 1e2, n)
    r = np.geomspace(1e-2, 1e1, n)
    return np.repeat(a, n), np.tile(r, n)


def _run(method, alpha, rho, width, depth=2, clock="t", ts=TS, switches=0, data=None, p=None, reduce="off", pad=True):
    """The lane engine on these cells (`(trajectory, iterations, switches)`, numpy); `reduce="off"` by
    default: these tests are of the lane engine, and depth-2 l2 cells from equal layers take the
    reduction otherwise (`samflow._engine.reduced`, tests/test_reduced.py). By the shared program of
    its static arguments, at canonical shapes (tests/lane_programs.py; `pad=False`: the call's own)."""
    data = sf.single_sample(MU) if data is None else data
    W0, rho_b, _ = batch_cells(alpha, rho, depth, data.d, alpha_batched=True)
    m, c = Method.parse(method), Clock.parse(clock)
    settings = sf.SolverSettings(reduce=reduce).resolved(m, np.asarray(W0), data, c, p)
    return lane_programs.run(W0, rho_b, data, ts, method=m, clock=c, settings=settings, width=width,
                             switches=switches, p=p, pad=pad)


def _same(a, b):
    return {f: bool(np.array_equal(np.asarray(getattr(a, f)), np.asarray(getattr(b, f)), equal_nan=True))
            for f in FIELDS}


def test_the_test_process_has_the_exact_cpu_arithmetic():
    import os

    assert {EXACT_CPU_FLAG, EXACT_REDUCE_FLAG} <= set(os.environ.get("XLA_FLAGS", "").split())


@pytest.mark.parametrize("method", ["l2", "linf"])
def test_bits_do_not_depend_on_the_lane_width(method):
    alpha, rho = _cells()
    ref, _, _ = _run(method, alpha, rho, width=1)
    for width in (7, 64):
        out, iters, _ = _run(method, alpha, rho, width=width)
        assert all(_same(ref, out).values()), (width, _same(ref, out))
        # Every iteration steps at most `width` cells.
        assert int(np.sum(out.num_steps)) <= int(iters) * width


def _assert_bits(ref, out, what):
    """Every leaf of two results (Trajectory, switch record) equal to the last bit."""
    for x, y in zip(jax.tree_util.tree_leaves(ref), jax.tree_util.tree_leaves(out), strict=True):
        np.testing.assert_array_equal(np.asarray(y), np.asarray(x), err_msg=what)


def _lane_step(eng, W, rho, t0):
    """What a lane computes in one step of its cell (samflow._engine.lanes): the Runge-Kutta
    stages, the controller's error norm and decision, the event condition at the
    step's end and the dense interpolant inside it."""
    from samflow._engine.field import RunArgs
    from samflow._engine.lanes import _Dense, _erk_step

    field = eng.field(None)
    w_scale = jnp.max(jnp.abs(W))
    args = RunArgs(rho, eng.data, jnp.sign(W), jnp.zeros(W.shape, bool), jnp.asarray(False))
    y0, t1 = (W, jnp.zeros(())), 1.01 * t0
    y1, err, dense, f1 = _erk_step(type(eng.solver).tableau, field, t0, t1, y0, args, field(t0, y0, args))
    pid = (jnp.ones(()), jnp.ones(()), jnp.asarray(False))
    ctrl = eng.controller(field, w_scale).adapt_step_size(t0, t1, y0, y1, args, err, 5, pid)
    ev = eng.events(field, w_scale).values(t1, y1, args)
    return y1, f1, ctrl[:2], ev, _Dense(eng.solver.interpolation_cls, t0, t1, dense).evaluate(t0 + 0.0037 * t0)


@pytest.mark.parametrize("d, widths", [(5, (1024,)), (200, (1, 256))])
def test_a_lane_step_has_the_bits_of_64_lanes_at_any_width(d, widths):
    """The step of `_lane_step` on the same 1024 (d = 5) or 256 (d = 200) random cells,
    in calls of `widths` lanes and of 64: bit for bit. Without `EXACT_REDUCE_FLAG`
    (XLA_FLAGS="--xla_cpu_max_isa=AVX --xla_cpu_experimental_ynn_fusion_type=dot,reduce")
    hundreds of rows differ at 1024 lanes (d = 5) and some at 1 lane against 64 (d = 200):
    XLA sums the rows of large arrays with YNNPACK, in another order."""
    from samflow._engine.lanes import _Engine

    n = max(widths + (64,))
    rng = np.random.default_rng(26)
    data = sf.single_sample(np.linspace(0.2, 1.0, d))
    W = jnp.asarray(rng.choice([-1.0, 1.0], (n, 2, d)) * 10 ** rng.uniform(-3, 1, (n, 2, d)))
    rho, t0 = (jnp.asarray(10 ** rng.uniform(a, b, n)) for a, b in ((-2, 1), (-2, 3)))
    m = Method.L2
    settings = sf.SolverSettings().resolved(m, np.asarray(W[0]), data, Clock.T, None)
    eng = _Engine(m, Clock.T, settings, False, False, 2, 10, 0, data, jnp.asarray(TS), None, None)
    step = jax.jit(jax.vmap(lambda W, r, t: _lane_step(eng, W, r, t)))
    blocks = [step(W[i:i + 64], rho[i:i + 64], t0[i:i + 64]) for i in range(0, n, 64)]
    ref = jax.tree_util.tree_map(lambda *xs: np.concatenate(xs), *blocks)
    for w in widths:
        for i in range(0, min(n, 2 * w), w):  # the first two calls of w lanes
            out = step(W[i:i + w], rho[i:i + w], t0[i:i + w])
            _assert_bits(jax.tree_util.tree_map(lambda x: x[i:i + w], ref), out, f"{w} lanes, d = {d}")


def test_bits_do_not_depend_on_the_order_or_the_other_cells():
    alpha, rho = _cells()
    ref, _, _ = _run("l2", alpha, rho, width=7)
    perm = np.random.default_rng(3).permutation(alpha.size)
    out, _, _ = _run("l2", alpha[perm], rho[perm], width=7)
    back = jax.tree_util.tree_map(lambda x: np.asarray(x)[np.argsort(perm)], out)
    assert all(_same(ref, back).values())
    # A cell alone (one lane, one cell) has the bits it has among 64 others.
    one, _, _ = _run("l2", alpha[10:11], rho[10:11], width=1, pad=False)
    assert all(_same(jax.tree_util.tree_map(lambda x: np.asarray(x)[10:11], ref), one).values())


@pytest.mark.slow  # 1024- and 1-lane programs over 1024 cells; `pytest -m slow` (run by hand; CI runs only the pin and engine-reference slow checks)
def test_1024_lanes_give_the_bits_of_64_and_of_one():
    """Issue 26: at 1024 lanes (arrays of 1024 x L x d) XLA handed the lanes' sums over
    d to its YNNPACK library, which adds in another order: 588 of these 1024 cells
    differed in their last bits (6.7e-12 relative) from 64 lanes. With
    `EXACT_REDUCE_FLAG` (tests/conftest.py) every field and the switch record are
    those of 64 lanes and of one lane, bit for bit."""
    alpha, rho = _cells(32)
    ref = _run("l2", alpha, rho, width=64, switches=6)
    one = _run("l2", alpha, rho, width=1, switches=6)
    _assert_bits((ref[0], ref[2]), (one[0], one[2]), "1 lane")
    out = _run("l2", alpha, rho, width=1024, switches=6)
    _assert_bits((ref[0], ref[2]), (out[0], out[2]), "1024 lanes")
    assert int(np.max(np.asarray(ref[2][4]))) >= 1  # some cell switches leader


def test_switches_in_the_same_pass_match_the_trajectory():
    """The record's leader at each untied save time is the argmax of the solve's
    own |beta| (the switches are located inside the steps, not at the saves)."""
    alpha, rho = _cells(4)
    tr, _, raw = _run("l2", alpha, rho, width=4, switches=12)
    time, _, frm, to, count, first, ok, time_err, rate = (np.asarray(x) for x in raw)
    found = ~np.isnan(time)
    # every switch carries the bound of its time's error and its gap's rate (docs/theory.md s.5)
    assert np.all(time_err[found] > 0) and np.all(np.isfinite(time_err[found])) and np.all(rate[found] > 0)
    assert np.all(np.isnan(time_err[~found])) and np.all(np.isnan(rate[~found]))
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


def test_program_family():
    """The methods one program serves: all five on one sample in linear coordinates;
    linf on several samples alone (its state carries the r_j surfaces); no linf in log
    coordinates."""
    from samflow._engine.lanes import program_family
    from samflow.flows import LOG_NOT_LINF

    rest = (Method.GD, Method.L2, Method.USAM, Method.LP)
    assert program_family("l2", 1) == tuple(Method) and len(tuple(Method)) == 5
    assert program_family("linf", 1) == tuple(Method)
    assert program_family("linf", 3) == (Method.LINF,)
    assert program_family("gd", 3) == rest
    assert program_family("usam", 1, "log") == rest and program_family("lp", 4, "log") == rest
    # A sweep names its methods: its program holds those of the family only.
    assert program_family("l2", 1, among=["gd", "linf"]) == (Method.GD, Method.L2, Method.LINF)
    assert program_family("gd", 3, among=["gd", "l2", "linf"]) == (Method.GD, Method.L2)
    assert program_family("linf", 3, among=["gd", "l2", "linf"]) == (Method.LINF,)
    with pytest.raises(ValueError, match=f"^{re.escape(LOG_NOT_LINF)}$"):
        program_family("linf", 1, "log")


def test_a_family_without_one_state_structure_is_refused_in_one_line():
    data = sf.Dataset.from_arrays([[1.0, 0.5], [0.3, 1.0]], [1.0, 1.0])
    W0, rho = jnp.full((2, 2, 2), 0.1), jnp.full((2,), 0.1)
    kw = dict(clock=Clock.T, settings=sf.SolverSettings())
    with pytest.raises(ValueError, match=r"^family \('gd', 'linf'\): linf on multi-sample data has a program"):
        solve_lanes(W0, rho, data, jnp.asarray(TS), method=0, family=(Method.GD, Method.LINF), **kw)
    with pytest.raises(ValueError, match=r"^method 'linf' is not in the program's family \('gd', 'l2'\)"):
        solve_lanes(W0, rho, data, jnp.asarray(TS), method=Method.LINF, family=(Method.GD, Method.L2), **kw)


def _eqns(jaxpr):
    """Every equation of a jaxpr, those of its sub-jaxprs (loop bodies, branches) included."""
    for e in jaxpr.eqns:
        yield e
        for v in e.params.values():
            for sub in v if isinstance(v, (tuple, list)) else (v,):
                sub = getattr(sub, "jaxpr", sub)
                if hasattr(sub, "eqns"):
                    yield from _eqns(sub)


def _same_family_bits(family, switches, p=None, reduce="off"):
    """Each member of `family` by the family's one program (the method an int32 index, traced)
    and by its own: bit for bit. Returns the family's program and its arguments."""
    alpha, rho = _cells(3)
    data = sf.single_sample(MU)
    W0, rho_b, _ = batch_cells(alpha, rho, 2, data.d, alpha_batched=True)
    settings = sf.SolverSettings(reduce=reduce).with_tolerances(2)
    for m in family:
        pm = p if m is Method.LP else None
        ref = _run(m, alpha, rho, width=4, switches=switches, p=pm, reduce=reduce)
        out = lane_programs.run(W0, rho_b, data, TS, method=family.index(m), clock=Clock.T, settings=settings,
                                width=4, switches=switches, family=family, p=np.nan if p is None else p)
        la, lb = jax.tree_util.tree_leaves(ref), jax.tree_util.tree_leaves(out)
        assert len(la) == len(lb)
        for x, y in zip(la, lb):
            assert np.array_equal(np.asarray(x), np.asarray(y), equal_nan=True), m
    fn = functools.partial(lane_programs._program, method=None, clock=Clock.T, settings=settings.program_key(),
                           width=4, switches=switches, family=family)
    pp = np.float64(np.nan if p is None else p)
    return fn, (W0, rho_b, data, jnp.asarray(TS), pp, settings.tolerances())


def test_one_program_gives_every_method_its_own_bits():
    """The method as data of one program (the default sweep's family gd, l2, linf, with
    switches recorded): each method's results, iteration count and switch record are bit
    for bit those of its program alone; and in the program the method is a real
    conditional (a `cond` over the three methods on an unbatched int32 scalar, not a
    select over all three), at the start, the step, the end of a run and the outputs.
    With `reduce="all"` (the default "auto" does the same for l2 from d = 8 on): l2's cells
    (equal layers) take the two-scalar reduction inside the program too (`samflow._engine.reduced`),
    as in l2's own, and gd's the equal-layer reduction: a fifth conditional over the three
    methods picks the member's equal-layer branch."""
    family = (Method.GD, Method.L2, Method.LINF)
    fn, args = _same_family_bits(family, switches=4, reduce="all")
    jaxpr = jax.make_jaxpr(fn)(*args, jnp.asarray(0, jnp.int32)).jaxpr
    conds = [e for e in _eqns(jaxpr) if e.primitive.name == "cond" and len(e.params["branches"]) == 3]
    assert len(conds) == 5
    for e in conds:
        assert e.invars[0].aval.shape == () and e.invars[0].aval.dtype == jnp.int32


@pytest.mark.slow  # six programs, the union of all five methods among them; `pytest -m slow`
def test_the_program_of_all_five_methods_gives_each_its_own_bits():
    """As above for the family of one sample (gd, l2, linf, usam, lp at p = 3), the
    program of `samflow.solve` and the sweep."""
    from samflow._engine.lanes import program_family

    _same_family_bits(program_family("gd", 1), switches=4, p=3.0)
