"""How the API turns (alpha, rho) into cells (issue 12, case 1).

The rule, the same in `solve`, `run_discrete`, `flow_gap`, `solve_model` and
`run_model_discrete`: the cells are the entries of rho; alpha (theta0) is ONE
init shared by every cell, read from its number of axes alone (scalar, (d,),
(L, d)); per-cell inits only with `alpha_batched=True` (`theta0_batched=True`)
and an explicit leading axis of length len(rho). Before the fix a (d,) or
(L, d) alpha whose first axis happened to have len(rho) entries was split
over the cells.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import samflow as sf
from samflow.discrete import flow_gap, run_discrete
from samflow.models import diagonal_network, run_model_discrete, solve_model, two_layer_linear
from samflow.solver import batch_cells
from samflow.status import Status

MU5 = np.array([0.2, 0.4, 0.6, 0.8, 1.0])
W0 = np.array([[0.45, 0.3, 0.52, 0.38, 0.33], [0.31, 0.47, 0.36, 0.5, 0.42]])  # (L, d) = (2, 5)
A5 = np.array([0.9, 0.6, 0.3, 0.55, 0.2])  # (d,)


# ------------------------------------------------------------------ the two cases of the issue


@pytest.mark.slow  # the (d,) form and run_discrete's (L, d) form stay in the default run
def test_shared_LxD_init_with_two_radii_starts_every_cell_at_W0():
    """Case 1a: an (L, d) alpha with len(rho) = L. Before: cell 0 started with
    both layers = W0[0] (0.45, 0.3, 0.52, 0.38, 0.33), cell 1 at W0[1]."""
    data = sf.single_sample(MU5)
    tr = sf.solve("l2", data, alpha=W0, rho=np.array([1.0, 0.5]), ts=[0.0, 1.0], depth=2, clock="tau")
    W = np.asarray(tr.W)
    assert W.shape == (2, 2, 2, 5)
    np.testing.assert_array_equal(W[0, 0], W0)
    np.testing.assert_array_equal(W[1, 0], W0)
    solo = sf.solve("l2", data, alpha=W0, rho=1.0, ts=[0.0, 1.0], depth=2, clock="tau")
    np.testing.assert_array_equal(np.asarray(solo.W)[0], W0)
    assert int(tr.status[0]) == int(solo.status) == Status.FINISHED
    assert int(tr.num_steps[0]) == int(solo.num_steps)
    # vmap reorders a few float operations: the batch and the solo solve agree to
    # an ulp, not bitwise (the start is bitwise, above).
    np.testing.assert_allclose(W[0], np.asarray(solo.W), rtol=1e-14, atol=0)
    # the layers stay different (a split init would have kept them equal)
    assert np.all(np.abs(W[0, -1, 0] - W[0, -1, 1]) > 1e-3)


def test_shared_d_init_with_d_radii_is_per_coordinate():
    """Case 1b: a (d,) alpha with len(rho) = d. Before: cell i started with every
    coordinate at alpha_i (cell 0 at 0.9 everywhere). Right: every cell starts at
    (0.9, 0.6, 0.3, 0.55, 0.2), as with 4 radii, and follows the linf closed form
    (docs/theory.md s.3: w_j = rho + (alpha_j - rho) e^{mu_j tau} until it reaches 0,
    then slides at 0)."""
    data = sf.single_sample(MU5)
    W4, _, _ = batch_cells(A5, np.full(4, 0.5), 2, 5)
    W5, _, _ = batch_cells(A5, np.full(5, 0.5), 2, 5)
    np.testing.assert_array_equal(np.asarray(W4), np.broadcast_to(A5, (4, 2, 5)))
    np.testing.assert_array_equal(np.asarray(W5), np.broadcast_to(A5, (5, 2, 5)))
    tr = sf.solve("linf", data, alpha=A5.tolist(), rho=np.full(5, 0.5), ts=[0.0, 1.0], clock="tau")
    W = np.asarray(tr.W)
    np.testing.assert_array_equal(W[:, 0], np.broadcast_to(A5, (5, 2, 5)))
    for i in range(1, 5):
        np.testing.assert_array_equal(W[i], W[0])
    rho, tau = 0.5, 1.0
    free = rho + (A5 - rho) * np.exp(MU5 * tau)
    expected = np.where(free > 0, free, 0.0)  # coordinate 5 reached 0 at tau = ln(5/3) and slid
    assert expected[4] == 0.0 and np.all(expected[:4] > 0)
    np.testing.assert_allclose(W[:, -1], np.broadcast_to(expected, (5, 2, 5)), rtol=1e-6, atol=1e-12)
    np.testing.assert_array_equal(tr.status, Status.SLID)


# ------------------------------------------------------------------ the rule itself (no compile)


def test_batch_cells_reads_shape_not_length():
    # depth = d = 2: a (2,) alpha is per coordinate (d,), never per layer or per cell
    W, r, batched = batch_cells([0.3, 0.5], np.array([1.0, 2.0]), 2, 2)
    np.testing.assert_array_equal(np.asarray(W), [[[0.3, 0.5], [0.3, 0.5]]] * 2)
    np.testing.assert_array_equal(np.asarray(r), [1.0, 2.0])
    assert batched
    np.testing.assert_array_equal(np.asarray(sf.init_weights([0.3, 0.5], 2, 2)), [[0.3, 0.5], [0.3, 0.5]])
    # (L, d) with L = len(rho): shared
    W, _, _ = batch_cells(W0, np.array([1.0, 0.5]), 2, 5)
    np.testing.assert_array_equal(np.asarray(W), [W0, W0])
    # scalar rho: one cell, not batched
    W, r, batched = batch_cells(0.7, 0.1, 3, 2)
    assert W.shape == (1, 3, 2) and r.shape == (1,) and not batched
    np.testing.assert_array_equal(np.asarray(W), 0.7)


@pytest.mark.parametrize(
    "alpha, expected",
    [
        (np.array([0.1, 0.2, 0.3]), [np.full((2, 2), a) for a in (0.1, 0.2, 0.3)]),  # (B,)
        (np.array([[0.1, 0.2], [0.3, 0.4], [0.5, 0.6]]), [np.tile(r, (2, 1)) for r in ([0.1, 0.2], [0.3, 0.4], [0.5, 0.6])]),  # (B, d)
        (np.arange(12.0).reshape(3, 2, 2), list(np.arange(12.0).reshape(3, 2, 2))),  # (B, L, d)
    ],
)
def test_alpha_batched_forms(alpha, expected):
    W, _, batched = batch_cells(alpha, np.ones(3), 2, 2, alpha_batched=True)
    assert batched
    np.testing.assert_array_equal(np.asarray(W), np.stack(expected))


def test_alpha_batched_keeps_a_nonfinite_cell_as_a_status_input():
    W, _, _ = batch_cells(np.array([0.5, np.nan]), np.ones(2), 2, 2, alpha_batched=True)
    assert np.all(np.isnan(np.asarray(W)[1])) and np.all(np.asarray(W)[0] == 0.5)


# ------------------------------------------------------------------ refusals (one line, before JAX)

D2 = sf.single_sample([1.0, 2.0])
TS = [0.0, 0.5, 1.0]
NAN_DATA = sf.Dataset(X=jnp.array([[np.nan, 1.0]]), y=jnp.ones(1))

SOLVE_BAD = [
    (dict(alpha=np.ones((2, 2, 2)), rho=np.ones(2)), "alpha_batched=True"),  # 3-D without the keyword
    (dict(alpha=np.ones(3), rho=np.ones(3)), r"shape \(2,\)"),  # old per-cell rule, d = 2
    (dict(alpha=np.ones((3, 2)), rho=1.0), r"\(2, 2\)"),  # wrong L
    (dict(alpha=np.ones((2, 3)), rho=1.0), r"\(2, 2\)"),  # wrong d
    (dict(alpha=np.nan, rho=1.0), "alpha must be finite"),
    (dict(alpha=[0.5, np.inf], rho=1.0), "alpha must be finite"),
    (dict(alpha=[[1, 2], [3]], rho=1.0), "alpha must be a real number"),
    (dict(alpha=1j, rho=1.0), "alpha must be a real number"),
    (dict(alpha=np.ones(2), rho=1.0, alpha_batched=True), "needs rho as a 1-D vector"),
    (dict(alpha=np.ones(3), rho=np.ones(2), alpha_batched=True), "leading axis of length len"),
    (dict(alpha=np.ones((2, 3)), rho=np.ones(2), alpha_batched=True), "each cell's alpha"),
    (dict(alpha=np.ones((2, 1, 2, 2)), rho=np.ones(2), alpha_batched=True), "each cell's alpha"),
    (dict(alpha_batched="yes", rho=np.ones(2)), "alpha_batched must be True or False"),
    (dict(rho=[]), "rho is an empty vector"),
    (dict(rho=np.zeros(0)), "rho is an empty vector"),
    (dict(rho=np.ones((2, 2))), "rho must be a scalar or a 1-D"),
    (dict(rho=np.nan), "rho must be finite"),
    (dict(rho=np.array([0.1, np.inf])), "rho must be finite"),
    (dict(rho=-0.1), "rho must be >= 0"),
    (dict(rho="0.1x"), "rho must be a real number"),
    (dict(depth=0), "depth"),
    (dict(depth=True), "depth"),
    (dict(depth=2.0), "depth"),
    (dict(data=NAN_DATA), "data: X contains a non-finite"),
    (dict(data=sf.Dataset(X=jnp.ones((1, 2)), y=jnp.zeros(1))), "data: y must contain only"),
    (dict(data=(np.ones((1, 2)), np.ones(1))), "data must be a samflow.Dataset"),
    (dict(ts=[]), "ts"),
    (dict(ts=[0.0, np.nan]), "ts"),
    (dict(ts=[1.0, 0.5]), "ts"),
    (dict(settings={"rtol": 1e-6}), "settings must be a samflow.SolverSettings"),
]


@pytest.mark.parametrize("bad, match", SOLVE_BAD)
def test_solve_refuses_in_one_line(bad, match):
    args = dict(data=D2, alpha=0.5, rho=0.1, ts=TS) | bad
    with pytest.raises(ValueError, match=match) as e:
        sf.solve("l2", **args)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("bad, match", SOLVE_BAD[:-1] + [(dict(eta=0.0), "eta"), (dict(eta=np.nan), "eta")])
def test_run_discrete_refuses_in_one_line(bad, match):
    args = dict(data=D2, alpha=0.5, rho=0.1, eta=0.1, ts=TS) | bad
    with pytest.raises(ValueError, match=match) as e:
        run_discrete("linf", **args)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("bad, match", SOLVE_BAD[:3] + [(dict(settings=3), "settings")])
def test_flow_gap_refuses_in_one_line(bad, match):
    args = dict(data=D2, alpha=0.5, rho=0.1, eta=0.1, ts=TS) | bad
    with pytest.raises(ValueError, match=match):
        flow_gap("l2", **args)


MODEL = two_layer_linear(2, 3)  # theta = (U (3, 2), v (3,))
TH0 = MODEL.init(0.5)
MODEL_BAD = [
    (dict(theta0=TH0, rho=0.1, theta0_batched=True), "needs rho as a 1-D vector"),
    (dict(theta0=TH0, rho=np.ones(2), theta0_batched=True), "leading axis of length len"),
    (dict(theta0=jax.tree_util.tree_map(lambda x: jnp.stack([x, x]), TH0), rho=np.ones(2)),
     "per-cell inits needs theta0_batched=True"),  # a stacked theta0 without the keyword
    (dict(theta0=(TH0[0], TH0[1].at[0].set(np.nan))), "theta0 must be finite"),
    (dict(theta0=()), "theta0 has no arrays"),
    (dict(theta0=TH0, data=sf.single_sample([1.0, 2.0, 3.0])), "dimension d = 3"),
    (dict(theta0=TH0, data=NAN_DATA), "data: X contains a non-finite"),
    (dict(theta0=TH0, rho=[]), "rho is an empty vector"),
    (dict(theta0=TH0, rho=np.nan), "rho must be finite"),
    (dict(theta0=TH0, rho=np.ones((1, 1))), "rho must be a scalar or a 1-D"),
    (dict(theta0=TH0, ts=[0.0, 0.0]), "ts"),
    (dict(theta0=TH0, f=lambda th, x: th[0] @ x), "must return a scalar"),
    (dict(theta0=TH0, f="model"), "f must be a function"),
]


@pytest.mark.parametrize("bad, match", MODEL_BAD)
@pytest.mark.parametrize("entry", ["solve_model", "run_model_discrete"])
def test_model_entries_refuse_in_one_line(entry, bad, match):
    args = dict(f=MODEL, theta0=TH0, rho=0.1, data=D2, ts=TS) | bad
    with pytest.raises(ValueError, match=match) as e:
        if entry == "solve_model":
            solve_model("l2", args["f"], args["theta0"], args["rho"], args["data"], args["ts"],
                        theta0_batched=args.get("theta0_batched", False))
        else:
            run_model_discrete("l2", args["f"], args["theta0"], args["rho"], 0.1, args["ts"], args["data"],
                               theta0_batched=args.get("theta0_batched", False))
    assert "\n" not in str(e.value)


def test_model_predictor_of_the_wrong_dimension_is_refused():
    model = diagonal_network(2, 3)
    with pytest.raises(ValueError, match="d = 2"):
        solve_model("gd", model, model.init(0.5), 0.1, D2, TS)


@pytest.mark.parametrize(
    "W0_, rho, got",
    [
        (np.full((3, 2, 2), 0.5), np.full(4, 0.1), r"rho \(4,\)"),  # before: rho[perm] took 3 of the 4 radii
        (np.full((3, 2, 2), 0.5), np.full(2, 0.1), r"rho \(2,\)"),  # before: IndexError from a NumPy gather
        (np.full((3, 2), 0.5), np.full(3, 0.1), r"W0 \(3, 2\)"),
        (np.full((3, 2, 5), 0.5), np.full(3, 0.1), r"W0 \(3, 2, 5\)"),
    ],
)
def test_solve_grid_refuses_mismatched_cells(W0_, rho, got):
    from samflow.sweep import solve_grid

    with pytest.raises(ValueError, match=got) as e:
        solve_grid("l2", D2, W0_, rho, TS)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    "kw, got",
    [
        # before: solved without a word (status FINISHED), a SAM "radius" of -0.1
        (dict(rho=np.array([0.1, -0.1, 0.2])), "rho must be >= 0"),
        (dict(rho=np.array([0.1, np.inf, 0.2])), "rho must be finite"),
        # before: cell 1 (W0 = 0, depth 2) came back COLLAPSED, though nothing moved
        (dict(W0=np.concatenate([np.full((1, 2, 2), 0.5), np.zeros((1, 2, 2)), np.full((1, 2, 2), 0.5)])),
         "cannot move at depth 2"),
        # before: a short sort_key dropped a cell (2 rows back for 3), a long one an IndexError
        (dict(sort_key=np.array([1.0, 0.0])), r"sort_key must have shape \(3,\)"),
        (dict(sort_key=np.arange(5.0)), r"sort_key must have shape \(3,\)"),
        (dict(data=sf.Dataset(X=jnp.asarray([[np.nan, 1.0]]), y=jnp.ones(1))), "data: X contains a non-finite"),
    ],
)
def test_solve_grid_refuses_what_solve_refuses(kw, got):
    from samflow.sweep import solve_grid

    args = dict(data=D2, W0=np.full((3, 2, 2), 0.5), rho=np.array([0.1, 0.1, 0.2]))
    args.update(kw)
    sort_key = args.pop("sort_key", None)
    with pytest.raises(ValueError, match=got) as e:
        solve_grid("l2", args["data"], args["W0"], args["rho"], TS, sort_key=sort_key)
    assert "\n" not in str(e.value)


# ------------------------------------------------------------------ siblings, computed


def test_run_discrete_shared_LxD_init_with_two_radii():
    data = sf.single_sample(MU5)
    ts = [0.0, 0.5, 1.0]
    tr = run_discrete("l2", data, W0, np.array([1.0, 0.5]), 0.05, ts, depth=2)
    W = np.asarray(tr.W)
    np.testing.assert_array_equal(W[0, 0], W0)
    np.testing.assert_array_equal(W[1, 0], W0)
    solo = run_discrete("l2", data, W0, 1.0, 0.05, ts, depth=2)
    np.testing.assert_allclose(W[0], np.asarray(solo.W), rtol=1e-14, atol=0)
    # explicit per-cell inits: the same numbers through alpha_batched
    tb = run_discrete("l2", data, np.stack([W0, W0]), np.array([1.0, 0.5]), 0.05, ts, depth=2, alpha_batched=True)
    np.testing.assert_array_equal(np.asarray(tb.W), W)
    np.testing.assert_array_equal(np.asarray(tb.status), Status.FINISHED)


def test_run_discrete_shared_d_init_with_d_radii():
    data = sf.single_sample(MU5)
    tr = run_discrete("linf", data, A5, np.full(5, 0.5), 0.1, [0.0, 1.0])
    np.testing.assert_array_equal(np.asarray(tr.W)[:, 0], np.broadcast_to(A5, (5, 2, 5)))
    for i in range(1, 5):
        np.testing.assert_array_equal(np.asarray(tr.W[i]), np.asarray(tr.W[0]))


def test_flow_gap_shared_and_explicit_batch_agree():
    data = sf.single_sample([1.0, 2.0])
    Wi = np.array([[0.3, 0.4], [0.5, 0.2]])
    ts = [0.5, 1.0]
    shared = flow_gap("l2", data, Wi, np.array([0.1, 0.1]), 0.05, ts)
    assert shared.shape == (2,) and np.all(np.isfinite(shared)) and np.all(shared > 0)
    assert shared[0] == shared[1]
    per_cell = flow_gap("l2", data, np.stack([Wi, 2 * Wi]), np.array([0.1, 0.1]), 0.05, ts, alpha_batched=True)
    assert per_cell[0] == shared[0] and per_cell[1] != shared[1]


def test_solve_model_stacked_looking_theta0_is_shared():
    """theta0 = (U (2, 2), v (2,)) with two radii: leaf length 2 = len(rho) does not
    make it per-cell; every cell starts at (U, v)."""
    data = sf.single_sample([1.0, 2.0])
    model = two_layer_linear(2, 2)
    th0 = (jnp.array([[0.3, 0.1], [0.2, 0.4]]), jnp.array([0.5, 0.6]))
    rho = np.array([0.05, 0.1])
    tr = run_model_discrete("l2", model, th0, rho, 0.1, [0.0, 0.5], data)
    for i in range(2):
        np.testing.assert_array_equal(np.asarray(tr.theta[0][i, 0]), th0[0])
        np.testing.assert_array_equal(np.asarray(tr.theta[1][i, 0]), th0[1])
    tb = run_model_discrete("l2", model, jax.tree_util.tree_map(lambda x: jnp.stack([x, x]), th0), rho, 0.1,
                            [0.0, 0.5], data, theta0_batched=True)
    for a, b in zip(jax.tree_util.tree_leaves(tb.theta), jax.tree_util.tree_leaves(tr.theta)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    np.testing.assert_array_equal(np.asarray(tr.status), Status.FINISHED)


def test_zero_init_is_refused_by_solve_in_one_line_as_by_the_config():
    """Issue 17 item 6: `solve(alpha=0)` at depth >= 2 returned "collapsed at 0"
    (l2), "slid" (linf) or "finished" (gd) although nothing can move; the config
    refused it. Now both refuse; a zero coordinate beside nonzero ones is fine."""
    data = sf.single_sample([1.0, 2.0])
    for method in ("gd", "l2", "linf", "usam"):
        with pytest.raises(ValueError, match=r"^alpha: the init cannot move at depth 2: .* or depth 1$"):
            sf.solve(method, data, 0.0, 0.5, TS)
    with pytest.raises(ValueError, match=r"^alpha: the init cannot move at depth 3"):
        sf.solve("l2", data, 1e-200, 0.5, TS, depth=3)  # alpha^2 underflows
    with pytest.raises(ValueError, match=r"^alpha\[1\] \(cell 1\): the init cannot move"):
        sf.solve("l2", data, np.array([0.1, 0.0]), np.array([0.5, 0.5]), TS, alpha_batched=True)
    with pytest.raises(ValueError, match=r"^alpha: the init cannot move"):
        run_discrete("gd", data, 0.0, 0.5, 0.1, TS)
    tr = sf.solve("gd", data, np.array([0.0, 0.3]), 0.5, TS)  # coordinate 1 at 0, coordinate 2 moves
    assert int(tr.status) == Status.FINISHED and float(tr.beta[-1, 0]) == 0.0 and float(tr.beta[-1, 1]) > 0.09
    assert int(sf.solve("gd", data, 0.0, 0.5, TS, depth=1).status) == Status.FINISHED  # depth 1 leaves 0


def test_l2_zero_init_saves_zero_at_t0():
    """Found by tests/test_api_property.py: l2, W(0) = 0, ts[0] = 0 gives status
    COLLAPSED, event_time 0, and W(0) saved as NaN (0 at the later save times).
    `solve` refuses this init now; the engine (`solve_cell`) still handles it."""
    cell = sf.solve_cell(jnp.zeros((2, 2)), jnp.asarray(0.5), sf.single_sample([1.0, 2.0]), jnp.asarray(TS),
                         method="l2", clock="t", settings=sf.SolverSettings())
    tr = cell
    assert int(tr.status) == Status.COLLAPSED and float(tr.event_time) == 0.0
    np.testing.assert_array_equal(np.asarray(tr.W), 0.0)
