"""`samflow.solve`: closed forms, an independent scipy solve, invariances, batching,
per-cell failures and input errors.

Every solve saves at `N_SAVE` times and most batches have 3 cells, so the
compilations (one per method, clock, depth, settings, batch size) are shared.
"""

import numpy as np
import pytest
from scipy.optimize import brentq

import samflow as sf
from samflow import Status

from helpers import (
    N_SAVE,
    compilations,
    rel_err,
    sym_depth2_l2_collapse_time,
    sym_depth2_l2_real_time,
)

MU = np.array([1.0, 2.0])
TS_TAU = np.linspace(0.0, 6.0, N_SAVE)
L2_ALPHAS = np.array([0.3, 0.7, 1.2])  # regimes 1, 2, 3 at rho = 1 (docs/theory.md s.3)


def solve_l2_tau(alpha, rho, ts=TS_TAU, **kw):
    return sf.solve("l2", sf.single_sample(MU), alpha, rho, ts, depth=2, clock="tau", **kw)


def dominant(beta):
    return np.argmax(np.abs(np.asarray(beta)), axis=-1)


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def l2_regimes():
    """Depth-2 l2-SAM, mu = (1, 2), rho = 1, alpha = 0.3 / 0.7 / 1.2, clock tau."""
    return solve_l2_tau(L2_ALPHAS, np.ones(3), alpha_batched=True)


@pytest.fixture(scope="module")
def l2_solo():
    """The same three cells, each solved alone (scalar rho)."""
    return [solve_l2_tau(a, 1.0) for a in L2_ALPHAS]


# --------------------------------------------------------------------------- closed forms


def test_gd_depth2_tau_closed_form(mu12):
    alphas = np.array([0.1, 0.5, 1.0])
    ts = np.linspace(0.0, 5.0, N_SAVE)
    tr = sf.solve("gd", mu12, alphas, np.zeros(3), ts, depth=2, clock="tau", alpha_batched=True)
    np.testing.assert_array_equal(tr.status, Status.FINISHED)
    expected = alphas[:, None, None] * np.exp(MU[None, None, :] * ts[None, :, None])
    W = np.asarray(tr.W)
    assert W.shape == (3, N_SAVE, 2, 2)
    for layer in range(2):
        assert rel_err(W[:, :, layer, :], expected) <= 1e-6
    np.testing.assert_allclose(tr.beta, expected**2, rtol=2e-6)


LINF_RHO = 0.1
# per-coordinate inits alpha_j: both above rho / minor below rho / major below rho
LINF_ALPHAS = np.array([[0.3, 0.5], [0.05, 0.3], [0.2, 0.02]])


@pytest.fixture(scope="module")
def linf_cells(mu12):
    ts = np.linspace(0.0, 3.0, N_SAVE)
    tr = sf.solve("linf", mu12, LINF_ALPHAS, np.full(3, LINF_RHO), ts, depth=2, clock="tau", alpha_batched=True)
    return ts, tr


@pytest.mark.parametrize("cell", [0, 1, 2], ids=["above", "minor-below", "major-below"])
def test_linf_depth2_tau_closed_form(linf_cells, cell):
    ts, tr = linf_cells
    rho, alpha = LINF_RHO, LINF_ALPHAS[cell]
    W = np.asarray(tr.W[cell])
    assert np.all(np.isfinite(W)), f"non-finite W; status {int(tr.status[cell])}"
    below = alpha < rho
    assert int(tr.status[cell]) == (Status.SLID if below.any() else Status.FINISHED)
    slide = np.asarray(tr.slide_time[cell])
    for j in range(2):
        closed = rho + (alpha[j] - rho) * np.exp(MU[j] * ts)
        if alpha[j] > rho:
            for layer in range(2):
                assert rel_err(W[:, layer, j], closed) <= 1e-6
            assert np.all(np.isnan(slide[:, j]))
        else:
            tau_star = np.log(rho / (rho - alpha[j])) / MU[j]
            np.testing.assert_allclose(slide[:, j], tau_star, rtol=0, atol=1e-8)
            before, after = ts < tau_star, ts > tau_star
            for layer in range(2):
                assert rel_err(W[before, layer, j], closed[before]) <= 1e-6
                np.testing.assert_array_equal(W[after, layer, j], 0.0)


def _depth1_expected(method, alpha, rho, mu, ts):
    """Depth 1, one sample, logistic: beta = alpha + c(t) mu, and z = <beta, mu>
    solves (1 + exp(z - k)) dz = ||mu||^2 dt, k the margin the perturbation removes."""
    m = float(mu @ mu)
    k = {"gd": 0.0, "l2": rho * np.sqrt(m), "linf": rho * np.sum(np.abs(mu))}[method]
    z0 = float(alpha @ mu)
    F = lambda z: z + np.exp(z - k)
    out = []
    for t in ts:
        rhs = m * t + F(z0)
        z = brentq(lambda z: F(z) - rhs, z0 - 1.0, z0 + 60.0, xtol=1e-15, rtol=1e-15)
        out.append(alpha + (z - z0) / m * mu)
    return np.array(out)


@pytest.mark.parametrize("method", ["gd", "l2", "linf"])
def test_depth1_tends_to_l2_max_margin_direction(method):
    mu = np.array([0.5, 1.0])
    rho = 0.05
    data = sf.single_sample(mu)
    ts = np.concatenate([[0.0], np.geomspace(1.0, 1e6, N_SAVE - 1)])
    alphas = np.array([[0.0, 0.0], [0.004, -0.004], [-0.003, 0.002]])
    tr = sf.solve(method, data, alphas, np.full(3, rho), ts, depth=1, clock="t", alpha_batched=True)
    np.testing.assert_array_equal(tr.status, Status.FINISHED)
    b = np.asarray(tr.beta)
    u = mu / np.linalg.norm(mu)
    for i, a in enumerate(alphas):
        np.testing.assert_allclose(b[i], _depth1_expected(method, a, rho, mu, ts), rtol=1e-6, atol=1e-12)
        direction = b[i, -1] / np.linalg.norm(b[i, -1])
        assert np.linalg.norm(direction - u) <= 1e-3
        # the component of beta across mu never moves (the field is parallel to mu)
        cross = b[i, :, 0] * mu[1] - b[i, :, 1] * mu[0]
        np.testing.assert_allclose(cross, a[0] * mu[1] - a[1] * mu[0], atol=1e-12)


# --------------------------------------------------------------------------- clocks


def test_tau_and_t_solves_trace_the_same_curve(mu12):
    alpha, rho = 0.7, 1.0
    tr_tau = solve_l2_tau(alpha, rho, ts=np.linspace(0.0, 1.0, N_SAVE))
    t = np.asarray(tr_tau.t)
    assert np.all(np.isfinite(t)) and t[0] == 0.0 and np.all(np.diff(t) > 0)
    z = np.asarray(tr_tau.beta) @ MU
    assert z.max() < 5.0  # moderate loss along the whole comparison
    tr_t = sf.solve("l2", mu12, alpha, rho, t, depth=2, clock="t")
    assert int(tr_t.status) == Status.FINISHED
    assert rel_err(tr_t.beta, tr_tau.beta) <= 1e-6
    # and the real time itself against an independent quadrature
    assert rel_err(t[1:], sym_depth2_l2_real_time(MU, alpha, rho, tr_tau.ts)[1:]) <= 1e-6


@pytest.mark.parametrize("cell", [1, 2], ids=["regime2", "regime3"])
def test_real_time_along_tau_is_increasing_and_correct(l2_regimes, cell):
    t = np.asarray(l2_regimes.t[cell])
    known = np.isfinite(t)  # t is +inf past the rate cap, by design
    assert known.sum() >= 3
    assert np.all(t[known] >= 0.0)
    assert np.all(np.diff(t[known]) > 0.0)
    ref = sym_depth2_l2_real_time(MU, L2_ALPHAS[cell], 1.0, TS_TAU[known])
    assert rel_err(t[known][1:], ref[1:]) <= 1e-6


# --------------------------------------------------------------------------- l2 regimes


def test_l2_collapse_regime1(l2_regimes):
    i = 0
    assert int(l2_regimes.status[i]) == Status.COLLAPSED
    T = float(l2_regimes.event_time[i])
    assert np.isfinite(T) and 0.0 < T < TS_TAU[-1]
    W = np.asarray(l2_regimes.W[i])
    assert not np.any(np.isnan(W))
    np.testing.assert_array_equal(W[TS_TAU > T], 0.0)
    np.testing.assert_allclose(l2_regimes.collapse_direction[i], [1.0, 0.0], atol=1e-6)
    T_ref = sym_depth2_l2_collapse_time(MU, L2_ALPHAS[i], 1.0)
    assert abs(T - T_ref) / T_ref <= 1e-6
    assert np.isfinite(float(l2_regimes.event_t[i])) and float(l2_regimes.event_t[i]) > T


def test_l2_regime2_minor_first_then_major(l2_regimes):
    i = 1
    assert int(l2_regimes.status[i]) == Status.FINISHED
    dom = dominant(l2_regimes.beta[i])[1:]
    assert dom[0] == 0 and dom[-1] == 1
    assert np.all(np.diff(dom) >= 0)


def test_l2_regime3_major_first(l2_regimes):
    i = 2
    assert int(l2_regimes.status[i]) == Status.FINISHED
    np.testing.assert_array_equal(dominant(l2_regimes.beta[i])[1:], 1)


def test_l2_symmetric_layers_stay_equal(l2_regimes):
    W = np.asarray(l2_regimes.W)
    np.testing.assert_array_equal(W[:, :, 0, :], W[:, :, 1, :])


@pytest.mark.parametrize("c", [0.1, 10.0])
def test_l2_depth2_tau_scale_invariance(l2_regimes, c):
    tr = solve_l2_tau(c * L2_ALPHAS, c * np.ones(3), alpha_batched=True)
    np.testing.assert_array_equal(tr.status, l2_regimes.status)
    W, W1 = np.asarray(tr.W), np.asarray(l2_regimes.W)
    nz = W1 != 0
    np.testing.assert_array_equal(W[~nz], 0.0)
    assert rel_err(W[nz], c * W1[nz]) <= 1e-7
    assert abs(float(tr.event_time[0]) / float(l2_regimes.event_time[0]) - 1) <= 1e-7


# --------------------------------------------------------------------------- batching


def test_vmap_matches_solo_solves(l2_regimes, l2_solo):
    steps = np.asarray(l2_regimes.num_steps)
    assert len(set(steps.tolist())) > 1  # the cells really do cost different amounts
    for i, solo in enumerate(l2_solo):
        assert int(steps[i]) == int(solo.num_steps)
        assert int(l2_regimes.num_runs[i]) == int(solo.num_runs)
        assert int(l2_regimes.status[i]) == int(solo.status)
        np.testing.assert_allclose(l2_regimes.W[i], solo.W, rtol=1e-12, atol=0)
        np.testing.assert_allclose(l2_regimes.t[i], solo.t, rtol=1e-12, atol=0)


def test_nonfinite_input_cell_is_isolated(l2_solo):
    alphas = np.array([L2_ALPHAS[0], np.nan, L2_ALPHAS[2]])
    tr = solve_l2_tau(alphas, np.ones(3), alpha_batched=True)
    assert int(tr.status[1]) == Status.NONFINITE_INPUT
    assert int(tr.num_steps[1]) == 0
    assert np.all(np.isnan(np.asarray(tr.W[1])))
    for i in (0, 2):
        assert int(tr.status[i]) == int(l2_solo[i].status)
        assert np.all(np.isfinite(np.asarray(tr.W[i])))
        np.testing.assert_allclose(tr.W[i], l2_solo[i].W, rtol=1e-12, atol=0)
        assert int(tr.num_steps[i]) == int(l2_solo[i].num_steps)


def test_max_steps_cell_is_isolated(mu12):
    """max_steps is a per-run budget; clock t l2 cells have one run each. The
    general engine (`reduce="off"`): a reduced cell out of steps is handed to it."""
    ts = np.geomspace(1e-2, 1e3, N_SAVE)
    alphas, rhos = np.array([0.2, 0.5, 3.0]), np.full(3, 0.05)
    full = sf.solve("l2", mu12, alphas, rhos, ts, depth=2, clock="t", alpha_batched=True,
                    settings=sf.SolverSettings(reduce="off"))
    steps = np.asarray(full.num_steps)
    assert np.all(np.asarray(full.num_runs) == 1) and steps.min() < steps.max()
    budget = (int(steps.min()) + int(steps.max())) // 2
    tr = sf.solve("l2", mu12, alphas, rhos, ts, depth=2, clock="t", settings=sf.SolverSettings(max_steps=budget, reduce="off"),
                  alpha_batched=True)
    for i in range(3):
        if steps[i] > budget:
            assert int(tr.status[i]) == Status.MAX_STEPS
            assert np.isnan(np.asarray(tr.W[i, -1])).all()
            np.testing.assert_array_equal(tr.W[i, 0], full.W[i, 0])
        else:
            assert int(tr.status[i]) == int(full.status[i])
            np.testing.assert_allclose(tr.W[i], full.W[i], rtol=1e-12, atol=0)


# --------------------------------------------------------------------------- errors


def test_input_errors(mu12, multi_data):
    ts = np.linspace(0.0, 1.0, N_SAVE)
    with pytest.raises(ValueError, match="rho"):
        sf.solve("l2", mu12, 0.5, -1.0, ts)
    with pytest.raises(ValueError, match="rho"):
        sf.solve("l2", mu12, 0.5, np.array([1.0, -0.1]), ts)
    with pytest.raises(ValueError, match="depth"):
        sf.solve("l2", mu12, 0.5, 1.0, ts, depth=0)
    two = sf.Dataset.from_arrays([[1.0, 2.0], [2.0, 1.0]], [1.0, -1.0])
    with pytest.raises(ValueError, match="clock"):
        sf.solve("l2", two, 0.5, 1.0, ts, clock="tau")
    with pytest.raises(ValueError, match="ts"):
        sf.solve("l2", mu12, 0.5, 1.0, ts[::-1])
    with pytest.raises(ValueError, match="ts"):
        sf.solve("l2", mu12, 0.5, 1.0, np.array([0.0, 1.0, 1.0]))
    with pytest.raises(ValueError, match="method"):
        sf.solve("adam", mu12, 0.5, 1.0, ts)
    with pytest.raises(ValueError, match="clock"):
        sf.solve("l2", mu12, 0.5, 1.0, ts, clock="s")
    with pytest.raises(ValueError, match="max_steps"):
        sf.SolverSettings(max_steps=0)


def test_canonical_shapes_share_one_program_and_keep_the_bits(mu12):
    """`samflow.solve` solves at power-of-two cell and save counts (`canonical_shapes`):
    calls of 5 and 7 cells with 9 and 13 save times compile one program, return
    unpadded shapes, and every cell has the bits of the same cell in a call of 8
    cells at 16 save times (the padding is NaN cells and repeats of the horizon)."""
    import jax

    from samflow._engine import integrate as _integrate

    rho = np.linspace(0.05, 0.4, 7)
    ts16 = np.linspace(0.5, 8.0, 16)
    # a program no other test compiles (rtol, atol and max_steps are data: they would not
    # make one; a max_runs above the default changes no result)
    settings = sf.SolverSettings(rtol=1.2345e-7, atol=1e-10, max_runs=41)
    solve = lambda r, ts: sf.solve("l2", mu12, alpha=0.3, rho=r, ts=ts, depth=2, settings=settings)
    assert [_integrate.bucket(n) for n in (1, 2, 3, 5, 8, 9, 64, 65)] == [1, 2, 4, 8, 8, 16, 64, 128]
    with compilations("_solve_batch") as seen:
        full = solve(np.concatenate([rho, [0.5]]), ts16)
        a = solve(rho[:5], ts16[:9])  # 9 saves: the horizon is ts16[8]
        b = solve(rho, ts16[:13])
    assert len(seen) == 1, seen  # one program for the three calls
    assert a.W.shape == (5, 9, 2, 2) and a.status.shape == (5,) and b.beta.shape == (7, 13, 2)
    ref = solve(rho, ts16[:13])
    for x, y in zip(jax.tree.leaves(b), jax.tree.leaves(ref)):
        assert np.array_equal(np.asarray(x), np.asarray(y), equal_nan=True)
    # The horizon differs from `full`'s, but the cells' paths up to it are the same solve:
    # equal to the solver's accuracy at the shared save times.
    np.testing.assert_allclose(np.asarray(b.beta), np.asarray(full.beta)[:7, :13], rtol=1e-5, atol=1e-9)


def test_max_steps_is_data_one_program_and_the_bits_of_a_static_budget(mu12):
    """A run's step budget reaches the lane engine traced, as the tolerances do
    (`SolverSettings.program_key`): a solve again with another `max_steps` (after cells
    ended as MAX_STEPS) compiles nothing, stops the cells over the budget, and gives the
    bits of the program made for that budget as a constant (`solve_lanes` without `tol`)."""
    import jax
    import jax.numpy as jnp

    from samflow._engine.lanes import solve_lanes
    from samflow.flows import Clock

    ts = np.geomspace(1e-2, 1e3, 16)
    alphas, rhos = np.array([0.2, 0.5, 3.0]), np.full(3, 0.05)
    base = dict(max_runs=47, reduce="off")  # a program no other test compiles (max_runs above the default)
    solve = lambda **kw: sf.solve("l2", mu12, alphas, rhos, ts, depth=2, clock="t", alpha_batched=True,
                                  settings=sf.SolverSettings(**base, **kw))
    with compilations("_solve_batch") as seen:
        full = solve()
        steps = np.asarray(full.num_steps)
        assert np.all(np.asarray(full.num_runs) == 1) and steps.min() < steps.max()
        budget = (int(steps.min()) + int(steps.max())) // 2
        cut = solve(max_steps=budget)
    assert len(seen) == 1, seen
    over = steps > budget
    assert over.any() and (~over).any()
    np.testing.assert_array_equal(np.asarray(cut.status)[over], int(Status.MAX_STEPS))
    np.testing.assert_array_equal(np.asarray(cut.status)[~over], np.asarray(full.status)[~over])
    W0 = np.broadcast_to(alphas[:, None, None], (3, 2, 2)).copy()
    st = sf.SolverSettings(**base, max_steps=budget).resolved("l2", W0, mu12)
    static, _, _ = jax.jit(lambda W, r: solve_lanes(W, r, mu12, jnp.asarray(ts), method="l2", clock=Clock.T,
                                                    settings=st, width=3))(jnp.asarray(W0), jnp.asarray(rhos))
    for x, y in zip(jax.tree.leaves(cut), jax.tree.leaves(static)):
        assert np.array_equal(np.asarray(x), np.asarray(y), equal_nan=True)


def test_a_solve_compiles_no_program_but_its_own():
    """A call's data and cells reach the device, and a single cell's outputs leave the
    batch axis, through the host (`samflow._util.arrays.device_array`): `jnp.asarray`
    of host data and `x[0]` of a device array each compile a one-op program at every
    new shape (`stage`, `convert_element_type`, `squeeze`, ...: 10-40 ms each in a fresh
    process, a dozen of them in a first `samflow.solve`). On shapes no other test uses
    (d = 11, three save times), the solver's program is the only one compiled, with one
    constant of its trace (`convert_element_type`)."""
    import re

    with compilations("") as seen:
        data = sf.Dataset.from_arrays(np.linspace(0.1, 1.1, 11)[None], np.array([1.0]))
        tr = sf.solve("gd", data, alpha=0.2, rho=0.0, ts=np.array([0.5, 1.0, 2.0]), depth=1)
    names = {re.search(r"jit\((\w+)\)", m).group(1) for m in seen}
    assert "_solve_batch_program" in names and names <= {"_solve_batch_program", "convert_element_type"}, names
    assert tr.beta.shape == (3, 11) and tr.W.shape == (3, 1, 11)
    np.testing.assert_array_equal(np.asarray(tr.beta[0]), np.asarray(tr.W[0, 0]))  # depth 1: beta = w


def test_tolerances_are_data_one_program_and_the_bits_of_a_static_tolerance(mu12):
    """rtol and atol reach the lane engine traced (`SolverSettings.program_key`): solves at
    three tolerances compile one program, and each has the bits of the program made for its
    tolerance as a constant (`solve_lanes` without `tol`; in linear coordinates: in log
    coordinates, where atol is rtol, XLA folded the constant into other last bits, 1e-16
    on the pinned grid)."""
    import jax
    import jax.numpy as jnp

    from samflow._engine.lanes import solve_lanes
    from samflow.flows import Clock

    rho = np.linspace(0.05, 0.4, 8)
    ts = np.linspace(0.5, 8.0, 16)
    base = dict(max_runs=43)  # a program no other test compiles (above the default: no result changes)
    outs = {}
    with compilations("_solve_batch") as seen:
        for rtol in (1e-6, 1e-9, 1e-12):
            st = sf.SolverSettings(rtol=rtol, atol=rtol * 1e-3, **base)
            outs[rtol] = sf.solve("usam", mu12, alpha=0.3, rho=rho, ts=ts, depth=2, settings=st)
    assert len(seen) == 1, seen
    steps = [int(np.sum(outs[r].num_steps)) for r in (1e-6, 1e-9, 1e-12)]
    assert steps[0] < steps[1] < steps[2]  # the tolerance is used, not the key's default
    W0 = np.full((8, 2, 2), 0.3)
    for rtol in (1e-6, 1e-12):
        st = sf.SolverSettings(rtol=rtol, atol=rtol * 1e-3, **base).resolved("usam", W0, mu12)
        static, _, _ = jax.jit(lambda W, r: solve_lanes(W, r, mu12, jnp.asarray(ts), method="usam", clock=Clock.T,
                                                        settings=st, width=8))(jnp.asarray(W0), jnp.asarray(rho))
        for x, y in zip(jax.tree.leaves(outs[rtol]), jax.tree.leaves(static)):
            assert np.array_equal(np.asarray(x), np.asarray(y), equal_nan=True)


def test_lane_engine_refuses_tolerances_of_another_shape(mu12):
    """`tol` is `[rtol, atol, max_steps]`: a `(2,)` `[rtol, atol]` (its shape before
    max_steps was data) would have its budget read from `tol[2]`, which JAX clamps to
    atol, so every run would end at its first step. It is refused in one line."""
    import jax.numpy as jnp

    from samflow._engine.lanes import solve_lanes
    from samflow.flows import Clock

    st = sf.SolverSettings().resolved("l2", np.full((1, 2, 2), 0.3), mu12)
    with pytest.raises(ValueError, match=r"tol must be settings.tolerances\(\).*got shape \(2,\)"):
        solve_lanes(jnp.full((1, 2, 2), 0.3), jnp.asarray([0.1]), mu12, jnp.asarray([1.0]), method="l2",
                    clock=Clock.T, settings=st.program_key(), tol=st.tolerances()[:2])
