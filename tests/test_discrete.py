"""`samflow.discrete`: the discrete algorithms against a hand computation with
`jax.grad`, rho = 0 against GD, first-order convergence to the flows, save-time
rounding, batching and per-cell failures.

Runs share shapes (N_SAVE save times, batches of 2 cells) so that each method
compiles few times.
"""

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import samflow as sf
from samflow import Status
from samflow.discrete import flow_gap, run_discrete, save_iterations

from helpers import METHODS, N_SAVE, chain_loss, eps_reference

ETA = 0.1
RHO = 0.3


@pytest.fixture(scope="module")
def general_init():
    """A depth-3 per-layer init with mixed signs, for n = 5, d = 3 data."""
    r = np.random.default_rng(11)
    return r.uniform(0.2, 1.0, size=(3, 3)) * r.choice([-1.0, 1.0], size=(3, 3))


@pytest.fixture(scope="module")
def runs(multi_data, general_init):
    """Each method at rho = RHO and rho = 0 (a batch of 2 cells), N_SAVE steps."""
    ts = ETA * np.arange(N_SAVE)
    return {  # one (L, d) init shared by both cells
        m: run_discrete(m, multi_data, general_init, np.array([RHO, 0.0]), ETA, ts, depth=3)
        for m in METHODS
    }


def hand_step(W, data, loss, rho, eta, method):
    """theta - eta grad L(theta + eps(grad L(theta))), gradients by jax.grad."""
    grad = jax.grad(chain_loss)
    G = np.asarray(grad(jnp.asarray(W), data, loss))
    W_hat = W + eps_reference(G, rho, method)
    return W - eta * np.asarray(grad(jnp.asarray(W_hat), data, loss))


@pytest.mark.parametrize("method", METHODS)
def test_one_step_equals_hand_computation(runs, multi_data, general_init, method):
    tr = runs[method]
    np.testing.assert_array_equal(tr.W[0, 0], general_init)
    expected = hand_step(general_init, multi_data, sf.get_loss("logistic"), RHO, ETA, method)
    np.testing.assert_allclose(tr.W[0, 1], expected, rtol=1e-12, atol=1e-14)
    # ... and the steps after it, from the saved iterate.
    for k in (2, N_SAVE - 1):
        expected = hand_step(np.asarray(tr.W[0, k - 1]), multi_data, sf.get_loss("logistic"), RHO, ETA, method)
        np.testing.assert_allclose(tr.W[0, k], expected, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("method", ["l2", "linf", "usam"])
def test_rho_zero_is_gd_exactly(runs, method):
    np.testing.assert_array_equal(runs[method].W[1], runs["gd"].W[1])
    # and rho > 0 really perturbs
    assert np.max(np.abs(np.asarray(runs[method].W[0, -1] - runs["gd"].W[0, -1]))) > 1e-3


def test_runs_report_times_and_status(runs):
    tr = runs["l2"]
    assert tr.W.shape == (2, N_SAVE, 3, 3)
    assert tr.beta.shape == (2, N_SAVE, 3) and tr.loss.shape == (2, N_SAVE)
    np.testing.assert_array_equal(tr.steps[0], np.arange(N_SAVE))
    np.testing.assert_allclose(tr.t[0], ETA * np.arange(N_SAVE), rtol=1e-15)
    np.testing.assert_array_equal(tr.status, Status.FINISHED)
    assert np.all(tr.finite) and np.all(np.isnan(tr.event_t))
    for m in runs:  # no weight of these runs lands on 0 (linf's watch raises no false flag)
        assert np.all(np.isnan(np.asarray(runs[m].absorbed_t))), m
    np.testing.assert_allclose(tr.beta, np.prod(np.asarray(tr.W), axis=-2), rtol=1e-15)


# --------------------------------------------------------------------------- the flow limit

MU = [1.0, 2.0]
ETAS = (0.04, 0.02, 0.01)
# horizon t = 5, N_SAVE save times, all multiples of every eta in ETAS
TS_GAP = 0.04 * np.rint(np.linspace(0.0, 125.0, N_SAVE))


@pytest.mark.parametrize("method", [m if m == "l2" else pytest.param(m, marks=pytest.mark.slow) for m in METHODS])  # l2 by default
def test_gap_to_flow_is_first_order_in_eta(mu12, method):
    gaps = np.array([float(flow_gap(method, mu12, 0.3, 0.1, eta, TS_GAP)) for eta in ETAS])
    assert np.all(np.isfinite(gaps)) and np.all(gaps > 0)
    assert gaps[0] < 0.05
    ratios = gaps[:-1] / gaps[1:]
    np.testing.assert_allclose(ratios, 2.0, rtol=0.15)


# --------------------------------------------------------------------------- save times, batching


def test_save_times_round_to_nearest_iterate(mu12):
    ts = np.array([0.0, 0.26, 0.33, 0.34, 1.0])
    k, t = save_iterations(ts, 0.1)
    np.testing.assert_array_equal(k, [0, 3, 3, 3, 10])
    np.testing.assert_allclose(t, 0.1 * k)
    tr = run_discrete("gd", mu12, 0.5, 0.0, 0.1, ts)
    np.testing.assert_array_equal(tr.steps, k)
    np.testing.assert_allclose(tr.t, t)
    np.testing.assert_allclose(tr.ts, ts)
    np.testing.assert_array_equal(tr.W[1], tr.W[2])


def test_many_iterations_few_saves(mu12):
    # 2e5 iterations with N_SAVE saves: memory and output follow the saves only.
    ts = np.linspace(0.0, 2000.0, N_SAVE)
    tr = run_discrete("l2", mu12, np.array([0.3, 0.5]), np.array([0.1, 0.1]), 0.01, ts, alpha_batched=True)
    assert tr.W.shape == (2, N_SAVE, 2, 2)
    assert tr.steps[0, -1] == 200_000
    np.testing.assert_array_equal(tr.status, Status.FINISHED)
    # the loss has fallen from log 2 and beta has turned to the major feature
    assert np.all(np.asarray(tr.loss[:, -1]) < 1e-2)
    assert np.all(np.argmax(np.abs(np.asarray(tr.beta[:, -1])), axis=-1) == 1)


def test_batch_equals_solo_cells(mu12):
    ts = ETA * np.arange(N_SAVE)
    alphas, rhos = np.array([0.3, 0.7]), np.array([0.1, 0.5])
    batch = run_discrete("l2", mu12, alphas, rhos, ETA, ts, alpha_batched=True)
    assert batch.W.shape == (2, N_SAVE, 2, 2) and batch.status.shape == (2,)
    for i in range(2):
        solo = run_discrete("l2", mu12, alphas[i], rhos[i], ETA, ts)
        assert solo.W.shape == (N_SAVE, 2, 2) and solo.status.shape == ()
        np.testing.assert_allclose(solo.W, batch.W[i], rtol=1e-14, atol=0)


def test_bad_cells_do_not_stop_the_batch(mu12):
    # exponential loss from a badly misclassified init overflows at once; a NaN
    # init is a bad input. Neither raises, and the healthy cell is unaffected.
    ts = np.linspace(0.0, 1.0, N_SAVE)
    good = np.full((2, 2), 0.5)
    blow = np.array([[-6.0, -6.0], [6.0, 6.0]])
    alpha = np.stack([good, blow, np.full((2, 2), np.nan)])
    tr = run_discrete("l2", mu12, alpha, np.full(3, 0.1), 0.5, ts, loss="exponential", alpha_batched=True)
    np.testing.assert_array_equal(tr.status, [Status.FINISHED, Status.FAILED, Status.NONFINITE_INPUT])
    np.testing.assert_array_equal(tr.finite, [True, False, False])
    assert np.all(np.isfinite(tr.W[0]))
    assert np.isfinite(tr.event_t[1]) and 0 < tr.event_t[1] <= 1.0
    bad_from = int(np.argmax(~np.isfinite(np.asarray(tr.W[1])).all(axis=(1, 2))))
    assert np.all(np.isnan(tr.W[1, bad_from:])) and np.all(np.isfinite(tr.W[1, :bad_from]))
    assert np.all(np.isnan(tr.W[2])) and np.isnan(tr.event_t[2])


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(eta=0.0), "eta"),
        (dict(eta=-0.1), "eta"),
        (dict(eta=float("nan")), "eta"),
        (dict(rho=-1.0), "rho"),
        (dict(rho=np.array([0.1, -0.1])), "rho"),
        (dict(ts=np.array([1.0, 0.5])), "increasing"),
        (dict(depth=0), "depth"),
        (dict(method="adam"), "unknown method"),
        (dict(loss="hinge"), "unknown loss"),
    ],
)
def test_input_errors(mu12, kwargs, match):
    args = dict(method="l2", data=mu12, alpha=0.5, rho=0.1, eta=0.1, ts=np.array([0.5, 1.0]))
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        run_discrete(**args)


def test_flow_gap_rejects_horizon_below_one_step(mu12):
    with pytest.raises(ValueError, match="iteration 0"):
        flow_gap("gd", mu12, 0.5, 0.0, 1.0, np.array([0.1, 0.2]))


def test_relative_gap_without_overflow_or_underflow():
    """flow_gap's norms: a plain sum of squares overflows above 1e154 (inf / inf = NaN)
    and underflows below 1e-154 (0 / 0); the gap of (3, 4) s against (0, 5) s is
    ||(3, -1)|| / 5 = sqrt(10) / 5 at every scale s."""
    from samflow.discrete import relative_gap

    for s in (1e-200, 1.0, 1e200):
        b = np.array([3.0, 4.0]) * s
        ref = np.array([0.0, 5.0]) * s
        assert relative_gap(b, ref) == pytest.approx(np.sqrt(10.0) / 5.0, rel=1e-15)
    assert relative_gap(np.ones(2), np.ones(2)) == 0.0
    assert relative_gap(np.zeros(2), np.zeros(2)) == 0.0
    assert relative_gap(np.ones(2), np.zeros(2)) == np.inf
    assert np.isnan(relative_gap(np.array([np.nan, 1.0]), np.ones(2)))
    rows = relative_gap(np.array([[3.0, 4.0], [1.0, 1.0]]) * 1e180, np.array([[0.0, 5.0], [1.0, 1.0]]) * 1e180)
    np.testing.assert_allclose(rows, [np.sqrt(10.0) / 5.0, 0.0], rtol=1e-15)


# --------------------------------------------------------------------------- linf's absorbing w = 0

# Figure 7's linf cell (configs/figures/discrete_gap.toml): coordinates 2 and 4 start
# below rho and chatter around 0 with kicks of O(eta rho).
GAP_DATA = sf.single_sample([0.2, 0.4, 0.6, 0.8, 1.0])
GAP_RHO = 0.5
GAP_ALPHA = np.array([1.5, 0.5, 1.2, 0.7, 1.1]) * GAP_RHO
ETA_LAND = 0.00625
K_LAND = 5207  # eta = 0.00625: coordinate 4 cancels to 0.0 in both layers (t = 32.54375)


def test_linf_landing_on_absorbing_zero_is_flagged():
    """With the arithmetic every entry point sets (`samflow._util.x64.process_flags`: no fused
    multiply-adds, XLA's classic emitters) the chatter of coordinate 4 at eta = 0.00625
    cancels to exactly 0 in both layers at iterate 5207; with sign(0) = 0 it never moves
    again (before it was flagged: nothing said so, and flow_gap measured the drift that
    follows as a gap of 7.7e-3 against 1.4e-3 without the landing, figure 7's check
    failing). Which iterate lands is a matter of last bits: under the default emitters it
    was iterate 3169 at eta = 0.0125, which now chatters on to t = 80 and beyond."""
    from samflow._util.x64 import process_flags

    # The landing is a matter of last bits: it needs every flag the entry points set (tests/conftest.py).
    assert set(process_flags()) <= set(os.environ.get("XLA_FLAGS", "").split())
    eta = ETA_LAND
    k = np.arange(K_LAND - 40, K_LAND + 40)
    tr = run_discrete("linf", GAP_DATA, GAP_ALPHA, GAP_RHO, eta, eta * k)
    assert float(tr.absorbed_t) == K_LAND * eta
    W = np.asarray(tr.W)
    # independently, from the saved iterates: the first one with both layers of a column 0
    both = np.all(W == 0.0, axis=1)  # (n_save, d)
    assert k[np.argmax(np.any(both, axis=1))] == K_LAND and both[k == K_LAND, 3]
    chatter = W[k < K_LAND, :, 3]
    assert np.all(chatter != 0.0) and np.any(chatter > 0) and np.any(chatter < 0)  # it did chatter
    assert np.all(both[k >= K_LAND, 3])  # absorbing: stays 0 in both layers
    assert np.all(np.diff(W[k >= K_LAND, 0, 0]) != 0)  # while the others move on
    assert int(tr.status) == int(Status.FINISHED)  # the iterates are the algorithm's; only flagged
    # flow_gap refuses a horizon through the landing, and up to it the gap is O(eta)
    before = np.arange(1.0, 33.0)  # save times 1..32 < 32.54375, one shape for every call
    assert np.isnan(flow_gap("linf", GAP_DATA, GAP_ALPHA, GAP_RHO, eta, before + 1.0))
    gaps = np.array([float(flow_gap("linf", GAP_DATA, GAP_ALPHA, GAP_RHO, e, before)) for e in (2 * eta, eta)])
    np.testing.assert_allclose(gaps[0] / gaps[1], 2.0, rtol=0.1)
    assert gaps[1] < 4e-3


def test_zero_init_and_other_methods_are_no_landing():
    """A coordinate that starts on w = 0 (alpha_j = 0) stays there and is not a landing;
    l2-SAM and depth 1 watch nothing (their sets w = 0 are no rounding artifact)."""
    alpha = np.array([0.5, 0.0, 0.6, 0.0, 0.4])
    ts = np.arange(1.0, 40.0)
    tr = run_discrete("linf", GAP_DATA, alpha, GAP_RHO, 0.1, ts)
    assert np.isnan(float(tr.absorbed_t))
    np.testing.assert_array_equal(np.asarray(tr.W)[:, :, [1, 3]], 0.0)
    assert np.all(np.asarray(tr.beta)[-1, [0, 2, 4]] != 0.0)
    for method, depth in (("l2", 2), ("linf", 1)):
        assert np.isnan(float(run_discrete(method, GAP_DATA, alpha, GAP_RHO, 0.1, ts, depth=depth).absorbed_t))
