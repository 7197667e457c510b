"""Property-based tests (hypothesis) of the API entry points `solve`,
`run_discrete`, `solve_model` and `run_model_discrete` (issue 12, "Beyond the
cases").

Two properties per entry:

- **one bad field => one line.** Random valid arguments with exactly one field
  made bad (a wrong shape, a non-finite or negative value, an empty rho, a
  per-cell init without the batch keyword, ...) raise a `ValueError` of one
  line naming that field, before anything is compiled (a miss would compile and
  show up as a slow example or a traceback from JAX).
- **valid => computed, and NaN only with a status saying why.** Random valid
  arguments give a result whose status is a `samflow.Status`; the saved state
  at t = 0 is exactly the init the batching rule builds (a shared init in every
  cell, or row i of an `alpha_batched` / `theta0_batched` stack); values are
  finite unless the cell's status is one that says why they are not
  (NONFINITE_INPUT, FAILED, MAX_STEPS, BLEW_UP).

Bounds: the valid examples keep one compiled shape per entry (depth 2, d 2,
two cells, three save times, one method for the flows), so a handful of
compilations serve every example; the bad-field examples never compile.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import samflow as sf
from samflow._engine.settings import stuck_inits
from samflow.discrete import run_discrete
from samflow.models import run_model_discrete, solve_model, two_layer_linear
from samflow.status import Status

BAD_SETTINGS = settings(max_examples=40, deadline=None, database=None, derandomize=True,
                        suppress_health_check=[HealthCheck.too_slow])
GOOD_SETTINGS = settings(max_examples=8, deadline=None, database=None, derandomize=True,
                         suppress_health_check=[HealthCheck.too_slow])

TS = [0.0, 0.5, 1.0]
# One settings object for every flow example (static: one compilation); a small
# step budget keeps a cell that stalls (status MAX_STEPS) cheap.
FLOW = sf.SolverSettings(max_steps=1000)
METHODS = ["gd", "l2", "linf", "usam"]
# A finite value is trusted only with these statuses.
CLEAN = {Status.FINISHED, Status.COLLAPSED, Status.SLID, Status.CRITICAL}  # the normal ends (samflow.status)
EXPLAINED = {Status.NONFINITE_INPUT, Status.FAILED, Status.MAX_STEPS, Status.BLEW_UP}

# ------------------------------------------------------------------ strategies

weights = st.one_of(
    st.just(0.0),
    st.floats(0.05, 2.0).flatmap(lambda v: st.sampled_from([v, -v])),
)
radii = st.one_of(st.just(0.0), st.floats(0.01, 2.0))


def arrays(shape, elements=weights):
    n = int(np.prod(shape)) if shape else 1
    return st.lists(elements, min_size=n, max_size=n).map(lambda v: np.asarray(v, np.float64).reshape(shape))


@st.composite
def cells(draw, depth, d, B):
    """A valid (alpha, alpha_batched) for B cells (B = None: a scalar rho), and
    the (B or 1, L, d) inits the rule must build from it."""
    forms = ["scalar", "d", "Ld"] + (["B", "Bd", "BLd"] if B else [])
    form = draw(st.sampled_from(forms))
    n = B or 1
    if form in ("scalar", "d", "Ld"):
        shape = {"scalar": (), "d": (d,), "Ld": (depth, d)}[form]
        a = draw(arrays(shape))
        return a, False, np.broadcast_to(a.reshape((1,) * (2 - a.ndim) + a.shape), (n, depth, d))
    cell = {"B": (), "Bd": (d,), "BLd": (depth, d)}[form]
    a = draw(arrays((B,) + cell, st.one_of(weights, st.sampled_from([np.nan, np.inf])) if draw(st.booleans()) else weights))
    return a, True, np.broadcast_to(a.reshape((B,) + (1,) * (2 - len(cell)) + cell), (B, depth, d))


@st.composite
def base_solve_args(draw):
    d = draw(st.integers(1, 3))
    depth = draw(st.integers(1, 3))
    B = draw(st.sampled_from([None, 1, 2, 3]))
    alpha, batched, _ = draw(cells(depth, d, B))
    rho = draw(radii) if B is None else draw(arrays((B,), radii))
    mu = draw(arrays((d,), st.floats(-2.0, 2.0)))
    return dict(method=draw(st.sampled_from(METHODS)), data=sf.single_sample(mu), alpha=alpha, rho=rho,
                ts=TS, depth=depth, clock=draw(st.sampled_from(["t", "tau"])), alpha_batched=batched), B


ALPHA_KINDS = ["alpha_3d", "alpha_wrong_d", "alpha_wrong_L", "alpha_nonfinite", "batched_scalar_rho",
               "batched_wrong_B", "depth"]
COMMON_KINDS = ["rho_negative", "rho_nonfinite", "rho_empty", "rho_2d", "data_nan", "data_label", "ts", "method"]


def _corrupt(draw, args, B, kinds):
    """Make exactly one field of `args` bad (a kind drawn from `kinds`); return
    (args, words the one-line message must hold)."""
    kind = draw(st.sampled_from(kinds))
    d = args["data"].d
    depth = args.get("depth", 2)
    a = dict(args)
    if kind == "alpha_3d":
        a.update(alpha=np.full((B or 2, depth, d), 0.5), alpha_batched=False)
        return a, "alpha"
    if kind == "alpha_wrong_d":
        a.update(alpha=np.full(d + draw(st.integers(1, 2)), 0.5), alpha_batched=False)
        return a, "alpha"
    if kind == "alpha_wrong_L":
        a.update(alpha=np.full((depth + draw(st.integers(1, 2)), d), 0.5), alpha_batched=False)
        return a, "alpha"
    if kind == "alpha_nonfinite":
        bad = np.full((depth, d), 0.5)
        bad.flat[draw(st.integers(0, bad.size - 1))] = draw(st.sampled_from([np.nan, np.inf, -np.inf]))
        a.update(alpha=bad, alpha_batched=False)
        return a, "alpha must be finite"
    if kind == "batched_scalar_rho":
        a.update(alpha=np.full(2, 0.5), rho=0.1, alpha_batched=True)
        return a, "alpha_batched"
    if kind == "batched_wrong_B":
        n = (B or 1) + draw(st.integers(1, 2))
        a.update(alpha=np.full(n, 0.5), rho=np.full(B or 1, 0.1), alpha_batched=True)
        return a, "len(rho)"
    if kind == "rho_negative":
        a.update(rho=-draw(st.floats(1e-9, 5.0)) if B is None else np.r_[np.full(B - 1, 0.1), -0.5])
        return a, "rho"
    if kind == "rho_nonfinite":
        v = draw(st.sampled_from([np.nan, np.inf, -np.inf]))
        a.update(rho=v if B is None else np.r_[np.full(B - 1, 0.1), v])
        return a, "rho"
    if kind == "rho_empty":
        a.update(rho=draw(st.sampled_from([[], np.zeros(0)])))
        return a, "rho"
    if kind == "rho_2d":
        a.update(rho=np.full((2, 2), 0.1))
        return a, "rho"
    if kind == "depth":
        a.update(depth=draw(st.sampled_from([0, -1, 1.5, True, None])))
        return a, "depth"
    if kind == "data_nan":
        X = np.ones((1, d))
        X[0, draw(st.integers(0, d - 1))] = draw(st.sampled_from([np.nan, np.inf]))
        a.update(data=sf.Dataset(X=jnp.asarray(X), y=jnp.ones(1)))
        return a, "data"
    if kind == "data_label":
        a.update(data=sf.Dataset(X=jnp.ones((1, d)), y=jnp.asarray([draw(st.sampled_from([0.0, 2.0, np.nan]))])))
        return a, "data"
    if kind == "ts":
        a.update(ts=draw(st.sampled_from([[], [0.0], [1.0, 0.5], [0.0, np.nan], [-1.0, 1.0], [0.0, 1.0, 1.0]])))
        return a, "ts"
    if kind == "method":
        a.update(method=draw(st.sampled_from(["sgd", "L2", ""])))
        return a, "method"
    if kind == "eta":
        a.update(eta=draw(st.sampled_from([0.0, -0.1, np.nan, np.inf])))
        return a, "eta"
    raise AssertionError(kind)


def _one_line(e: BaseException, words: str):
    msg = str(e)
    assert "\n" not in msg, msg
    assert words in msg, (words, msg)


# ------------------------------------------------------------------ solve


@BAD_SETTINGS
@given(st.data())
def test_solve_one_bad_field_is_one_line_valueerror(data):
    args, B = data.draw(base_solve_args())
    args, words = _corrupt(data.draw, args, B, ALPHA_KINDS + COMMON_KINDS)
    method = args.pop("method")
    with pytest.raises(ValueError) as e:
        sf.solve(method, **args)
    _one_line(e.value, words)


def _check_cells(status, W, W0_expected, finite_in, extra=()):
    """status (B,), W (B, n_save, ...) saved states, W0_expected (B, ...)."""
    status = np.asarray(status)
    for i, s in enumerate(status):
        s = Status(int(s))  # a known status
        if not finite_in[i]:
            assert s == Status.NONFINITE_INPUT
            continue
        assert s != Status.NONFINITE_INPUT
        if s in CLEAN:
            np.testing.assert_array_equal(W[i][0], W0_expected[i])  # the rule's init, exactly
            for x in (W[i],) + tuple(e[i] for e in extra):
                assert np.all(np.isfinite(x)), s
        else:
            # NaN allowed, with a status that says why; what is saved is still the rule's init
            assert s in EXPLAINED
            ok = np.isfinite(W[i][0])
            np.testing.assert_array_equal(W[i][0][ok], np.asarray(W0_expected[i])[ok])


@GOOD_SETTINGS
@given(st.data())
def test_solve_valid_args_give_the_rule_init_and_finite_or_a_status(data):
    # one compiled shape: l2, clock t, depth 2, d 2, two cells, three save times
    depth, d, B = 2, 2, 2
    alpha, batched, W0 = data.draw(cells(depth, d, B))
    rho = data.draw(arrays((B,), radii))
    mu = data.draw(arrays((d,), st.floats(-2.0, 2.0)))
    # An all-zero l2 cell collapses at t = 0 and saves NaN at t = 0 (a defect of
    # solve_cell, pinned by tests/test_batching.py::test_l2_zero_init_saves_zero_at_t0):
    # the init is then kept off exact zero here.
    W0 = np.where(W0 == 0.0, 0.05, W0)
    alpha = np.where(alpha == 0.0, 0.05, alpha)
    tr = sf.solve("l2", sf.single_sample(mu), alpha, rho, TS, depth=depth, clock="t", settings=FLOW,
                  alpha_batched=batched)
    assert tr.W.shape == (B, len(TS), depth, d)
    finite_in = np.all(np.isfinite(W0.reshape(B, -1)), axis=1)
    _check_cells(tr.status, np.asarray(tr.W), W0, finite_in, (np.asarray(tr.beta), np.asarray(tr.loss), np.asarray(tr.t)))


# ------------------------------------------------------------------ run_discrete


@BAD_SETTINGS
@given(st.data())
def test_run_discrete_one_bad_field_is_one_line_valueerror(data):
    args, B = data.draw(base_solve_args())
    args.pop("clock")
    args["eta"] = 0.1
    args, words = _corrupt(data.draw, args, B, ALPHA_KINDS + COMMON_KINDS + ["eta"])
    method = args.pop("method")
    with pytest.raises(ValueError) as e:
        run_discrete(method, **args)
    _one_line(e.value, words)


@GOOD_SETTINGS
@given(st.data())
def test_run_discrete_valid_args_give_the_rule_init_and_finite_or_a_status(data):
    depth, d, B = 2, 2, 2
    method = data.draw(st.sampled_from(METHODS))
    alpha, batched, W0 = data.draw(cells(depth, d, B))
    rho = data.draw(arrays((B,), radii))
    mu = data.draw(arrays((d,), st.floats(-2.0, 2.0)))
    eta = data.draw(st.sampled_from([0.05, 0.25, 0.5]))
    if np.any(stuck_inits(np.where(np.isfinite(W0), W0, 1.0))):  # no flow leaves it: refused in one line
        with pytest.raises(ValueError, match=r"^alpha(\[\d+\] \(cell \d+\))?: the init cannot move"):
            run_discrete(method, sf.single_sample(mu), alpha, rho, eta, TS, depth=depth, alpha_batched=batched)
        return
    tr = run_discrete(method, sf.single_sample(mu), alpha, rho, eta, TS, depth=depth, alpha_batched=batched)
    finite_in = np.all(np.isfinite(W0.reshape(B, -1)), axis=1)
    _check_cells(tr.status, np.asarray(tr.W), W0, finite_in, (np.asarray(tr.beta), np.asarray(tr.loss)))
    assert np.all(np.asarray(tr.finite) == (np.asarray(tr.status) == Status.FINISHED))


# ------------------------------------------------------------------ solve_model / run_model_discrete

MODEL = two_layer_linear(2, 2)  # theta = (U (2, 2), v (2,)): leaf lengths equal the batch size below


@st.composite
def thetas(draw, B):
    """(theta0, theta0_batched, per-cell inits as a list of (U, v))."""
    if draw(st.booleans()):
        th = (draw(arrays((2, 2))), draw(arrays((2,))))
        return th, False, [th] * B
    bad = st.one_of(weights, st.sampled_from([np.nan, np.inf])) if draw(st.booleans()) else weights
    U, v = draw(arrays((B, 2, 2), bad)), draw(arrays((B, 2), bad))
    return (U, v), True, [(U[i], v[i]) for i in range(B)]


@st.composite
def base_model_args(draw):
    B = draw(st.sampled_from([None, 2, 3]))
    if B is None:
        th, batched, rho = (draw(arrays((2, 2))), draw(arrays((2,)))), False, draw(radii)
    else:
        (th, batched, _), rho = draw(thetas(B)), draw(arrays((B,), radii))
    return dict(method=draw(st.sampled_from(METHODS)), theta0=th, rho=rho, eta=0.1,
                data=sf.single_sample(draw(arrays((2,), st.floats(-2.0, 2.0)))), ts=TS, theta0_batched=batched), B


MODEL_KINDS = ["stacked_no_keyword", "theta_nonfinite", "batched_scalar_rho", "batched_wrong_B", "theta_wrong_d",
               "empty"]


def _corrupt_model(draw, args, B, kinds):
    kind = draw(st.sampled_from(kinds))
    if kind not in MODEL_KINDS:
        return _corrupt(draw, args, B, [kind])
    a = dict(args)
    U, v = MODEL.init(0.5)
    if kind == "stacked_no_keyword":
        a.update(theta0=(jnp.stack([U] * 3), jnp.stack([v] * 3)), rho=np.full(3, 0.1), theta0_batched=False)
        return a, "theta0_batched"
    if kind == "theta_nonfinite":
        a.update(theta0=(U.at[draw(st.integers(0, 1)), 0].set(draw(st.sampled_from([np.nan, np.inf]))), v),
                 theta0_batched=False)
        return a, "theta0 must be finite"
    if kind == "batched_scalar_rho":
        a.update(theta0=(jnp.stack([U] * 2), jnp.stack([v] * 2)), rho=0.1, theta0_batched=True)
        return a, "theta0_batched"
    if kind == "batched_wrong_B":
        a.update(theta0=(jnp.stack([U] * 3), jnp.stack([v] * 3)), rho=np.full(draw(st.sampled_from([1, 4])), 0.1),
                 theta0_batched=True)
        return a, "len(rho)"
    if kind == "theta_wrong_d":
        a.update(theta0=(jnp.ones((2, 3)), v), theta0_batched=False)
        return a, "theta0"
    if kind == "empty":
        a.update(theta0=draw(st.sampled_from([(), [], {}])), theta0_batched=False)
        return a, "theta0"
    raise AssertionError(kind)


@pytest.mark.parametrize("entry", ["solve_model", "run_model_discrete"])
@BAD_SETTINGS
@given(data=st.data())
def test_model_entries_one_bad_field_is_one_line_valueerror(entry, data):
    args, B = data.draw(base_model_args())
    kinds = MODEL_KINDS + COMMON_KINDS + (["eta"] if entry == "run_model_discrete" else [])
    args, words = _corrupt_model(data.draw, args, B, kinds)
    with pytest.raises(ValueError) as e:
        if entry == "solve_model":
            solve_model(args["method"], MODEL, args["theta0"], args["rho"], args["data"], args["ts"],
                        theta0_batched=args["theta0_batched"])
        else:
            run_model_discrete(args["method"], MODEL, args["theta0"], args["rho"], args["eta"], args["ts"],
                               args["data"], theta0_batched=args["theta0_batched"])
    _one_line(e.value, words)


def _model_cells(tr, inits, B):
    U, v = (np.asarray(x) for x in tr.theta)
    finite_in = np.array([np.all(np.isfinite(a)) and np.all(np.isfinite(b)) for a, b in inits])
    flat = np.concatenate([U.reshape(B, len(TS), -1), v.reshape(B, len(TS), -1)], axis=2)
    W0 = np.stack([np.concatenate([np.ravel(a), np.ravel(b)]) for a, b in inits])
    _check_cells(tr.status, flat, W0, finite_in, (np.asarray(tr.outputs), np.asarray(tr.loss), np.asarray(tr.beta)))


@GOOD_SETTINGS
@given(st.data())
def test_solve_model_valid_args_give_the_rule_init_and_finite_or_a_status(data):
    # the shared init only (theta0_batched is static: one more compilation of
    # the flow); its leaves have the batch length 2 and must still be shared.
    B = 2
    th = (data.draw(arrays((2, 2))), data.draw(arrays((2,))))
    inits = [th] * B
    rho = data.draw(arrays((B,), radii))
    mu = data.draw(arrays((2,), st.floats(-2.0, 2.0)))
    tr = solve_model("l2", MODEL, th, rho, sf.single_sample(mu), TS, FLOW)
    _model_cells(tr, inits, B)


@GOOD_SETTINGS
@given(st.data())
def test_run_model_discrete_valid_args_give_the_rule_init_and_finite_or_a_status(data):
    B = 2
    method = data.draw(st.sampled_from(["l2", "linf"]))  # 2 methods x 2 batch modes: 4 compilations
    th, batched, inits = data.draw(thetas(B))
    rho = data.draw(arrays((B,), radii))
    mu = data.draw(arrays((2,), st.floats(-2.0, 2.0)))
    tr = run_model_discrete(method, MODEL, th, rho, 0.25, TS, sf.single_sample(mu), theta0_batched=batched)
    _model_cells(tr, inits, B)
