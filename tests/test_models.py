"""Generic differentiable models (samflow.models): autodiff gradients, SAM perturbation
over pytrees, flows against samflow.solve, discrete vs flow, and the banded heat map."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import samflow as sf
from samflow.flows import Method
from samflow.models import (
    band_dominance,
    banded_heatmap,
    diagonal_network,
    linear_conv,
    model_grad,
    model_perturbation,
    model_velocity,
    run_model_discrete,
    solve_model,
    two_layer_linear,
)
from samflow.status import Status


@pytest.fixture(scope="module")
def data4():
    r = np.random.default_rng(3)
    X = r.normal(size=(4, 3))
    y = np.array([1.0, -1.0, 1.0, -1.0])
    return sf.Dataset.from_arrays(X, y)


def test_two_layer_grad_matches_hand(data4):
    model = two_layer_linear(3, 2)
    U, v = model.init(1.0, seed=1)
    gU, gv = model_grad(model.f, (U, v), data4)
    z = data4.y * (data4.X @ (U.T @ v))
    c = jax.nn.sigmoid(-z) * data4.y / data4.X.shape[0]  # slope(z) y / n
    gU_hand = -jnp.outer(v, data4.X.T @ c)
    gv_hand = -U @ (data4.X.T @ c)
    np.testing.assert_allclose(gU, gU_hand, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(gv, gv_hand, rtol=1e-12, atol=1e-15)
    # Same for the diagonal network against samflow.grad_loss.
    W = jnp.array([[0.3, -0.2, 0.7], [1.1, 0.4, -0.5]])
    g = model_grad(diagonal_network(2).f, (W[0], W[1]), data4)
    np.testing.assert_allclose(jnp.stack(g), sf.grad_loss(W, data4, sf.Logistic()), rtol=1e-12)


@pytest.mark.parametrize(
    "model, theta",
    [
        (two_layer_linear(6, 4), two_layer_linear(6, 4).init(1.0, seed=2)),
        (linear_conv(3, 2, 6), linear_conv(3, 2, 6).init(1.0, seed=5)),
        (diagonal_network(3, 6), tuple(jnp.linspace(-1, 1, 6) + k for k in range(3))),
    ],
)
def test_effective_predictor_consistent(model, theta, rng):
    beta = model.effective_predictor(theta)
    assert beta.shape == (6,)
    for _ in range(3):
        x = jnp.asarray(rng.normal(size=6))
        np.testing.assert_allclose(model.f(theta, x), jnp.dot(beta, x), rtol=1e-12, atol=1e-13)


def test_linear_conv_predictor_hand_formula():
    C, K, d = 2, 3, 5
    w, v = linear_conv(C, K, d).init(1.0, seed=9)
    beta = linear_conv(C, K, d).effective_predictor((w, v))
    hand = np.zeros(d)
    for c in range(C):
        for i in range(d):
            for m in range(K):
                hand[(i + m) % d] += v[c, i] * w[c, m]
    np.testing.assert_allclose(beta, hand, rtol=1e-12)


def test_perturbation_over_all_leaves():
    G = (jnp.array([3.0, 0.0]), jnp.array([[4.0]]))
    eps = model_perturbation("l2", G, 0.5)
    np.testing.assert_allclose(eps[0], [0.3, 0.0], rtol=1e-15)
    np.testing.assert_allclose(eps[1], [[0.4]], rtol=1e-15)
    zero = model_perturbation("l2", (jnp.zeros(2), jnp.zeros((1, 1))), 0.5)
    assert all(np.all(np.asarray(z) == 0) for z in zero)  # G = 0 -> eps = 0 exactly, no NaN
    lin = model_perturbation("linf", G, 0.5)
    np.testing.assert_array_equal(lin[0], [0.5, 0.0])
    us = model_perturbation("usam", G, 0.5)
    np.testing.assert_array_equal(us[1], [[2.0]])
    assert np.all(np.asarray(model_perturbation("gd", G, 0.5)[0]) == 0)


def test_velocity_matches_diagonal_flows(data4):
    W = jnp.array([[0.3, -0.2, 0.7], [1.1, 0.4, -0.5]])
    for m in ("gd", "l2", "usam", "linf"):
        v = model_velocity(m, diagonal_network(2).f, (W[0], W[1]), 0.1, data4)
        ref = sf.real_time_velocity(W, 0.1, Method(m), data4, sf.Logistic())
        np.testing.assert_allclose(jnp.stack(v), ref, rtol=1e-12, atol=1e-15)


def test_solve_model_diagonal_equals_samflow_solve():
    data = sf.single_sample([0.5, 1.0, 1.5])
    ts = np.linspace(0.5, 20.0, 12)
    st = sf.SolverSettings(rtol=1e-10, atol=1e-13)
    model = diagonal_network(2, 3)
    # One compiled batch: row 0 is rho = 0 (the GD flow exactly, eps = 0), row 1 is l2 at rho = 0.05.
    tr = solve_model("l2", model, model.init(0.5), np.array([0.0, 0.05]), data, ts, st)
    np.testing.assert_array_equal(tr.status, Status.FINISHED)
    for i, (m, rho) in enumerate((("gd", 0.05), ("l2", 0.05))):
        ref = sf.solve(m, data, 0.5, rho, ts, depth=2, settings=st)
        assert int(ref.status) == Status.FINISHED
        b, rb = np.asarray(tr.beta[i]), np.asarray(ref.beta)
        rel = np.max(np.abs(b - rb) / np.abs(rb))
        assert rel < 1e-6, (m, rel)
        np.testing.assert_allclose(tr.loss[i], ref.loss, rtol=1e-6)
        # The trajectory has moved: this is not a trivial agreement.
        assert np.asarray(tr.loss[i])[-1] < 0.5 * np.log(2)
    assert tr.outputs.shape == (2, 12, 1)
    # l2-SAM differs from GD here by far more than the tolerance.
    assert np.max(np.abs(np.asarray(tr.beta[0] - tr.beta[1]))) > 1e-3


def test_rho_zero_is_gd(data4):
    model = two_layer_linear(3, 2)
    th0 = model.init(0.5, seed=4)
    ts = np.array([0.5, 1.0, 2.0])
    gd = run_model_discrete("gd", model, th0, 0.0, 0.05, ts, data4)
    for m in ("l2", "usam"):
        other = run_model_discrete(m, model, th0, 0.0, 0.05, ts, data4)
        np.testing.assert_array_equal(other.beta, gd.beta)
    assert not np.allclose(gd.beta[-1], model.effective_predictor(th0))


def test_discrete_flow_gap_first_order(data4):
    model = two_layer_linear(3, 2)
    th0 = model.init(0.7, seed=11)
    ts = np.array([0.5, 1.0, 1.5, 2.0])
    flow = solve_model("l2", model, th0, 0.05, data4, ts, sf.SolverSettings(rtol=1e-10, atol=1e-13))
    bf = np.asarray(flow.beta)
    gaps = []
    for eta in (0.02, 0.01):
        disc = run_model_discrete("l2", model, th0, 0.05, eta, ts, data4)
        np.testing.assert_allclose(disc.t, ts)
        gaps.append(np.max(np.linalg.norm(np.asarray(disc.beta) - bf, axis=1) / np.linalg.norm(bf, axis=1)))
    assert 0 < gaps[1] < gaps[0] < 0.05
    assert 1.6 < gaps[0] / gaps[1] < 2.4, gaps


def test_batched_rho_and_status(data4):
    model = two_layer_linear(3, 2)
    th0 = jax.vmap(lambda a: model.init(a))(jnp.array([0.5, 0.5, 0.5, 0.5]))
    th0 = (th0[0].at[3, 0, 0].set(np.nan), th0[1])  # one bad init in the batch
    ts = np.array([1.0, 50.0])
    tr = solve_model("l2", model, th0, np.array([0.0, 0.05, 0.1, 0.05]), data4, ts, theta0_batched=True)
    assert tr.beta.shape == (4, 2, 3) and tr.status.shape == (4,)
    np.testing.assert_array_equal(tr.status, [Status.FINISHED] * 3 + [Status.NONFINITE_INPUT])
    assert np.all(np.isnan(np.asarray(tr.beta)[3]))
    assert np.all(np.isfinite(np.asarray(tr.beta)[:3]))
    assert not np.allclose(tr.beta[0, -1], tr.beta[2, -1])  # rho matters
    assert np.all(np.asarray(tr.loss)[:3, -1] < np.asarray(tr.loss)[:3, 0])


def test_band_dominance():
    band = np.array([0, 0, 1, 1, 2, 2])
    b = np.array([[3.0, 0.0, 1.0, 1.0, 0.5, 0.5], [0, 0, 0, 0, 0, 0], [1, np.nan, 0, 0, 0, 0], [0, 0, 1, 1, 1, 1.1]])
    np.testing.assert_array_equal(band_dominance(b, band), [1, 0, -1, 3])


def test_banded_heatmap_quick(tmp_path):
    out = banded_heatmap(tmp_path / "banded.png", quick=True)
    assert (tmp_path / "banded.png").stat().st_size > 10_000
    assert (tmp_path / "banded.pdf").exists()
    # GD: the major band dominates at every (t, alpha), on both models.
    for key in ("diag/gd", "2layer/gd"):
        assert out[key]["frac_minor_first"] == 0.0 and out[key]["frac_major_end"] == 1.0
    # l2-SAM on the diagonal net: some alphas show minor bands before the major one.
    d = out["diag/l2"]
    assert d["frac_minor_then_major"] > 0
    assert all(0.2 < a < 0.6 for a in d["alpha_over_rho_minor_then_major"])
    assert d["statuses"].get("COLLAPSED", 0) >= 1  # small alpha/rho collapses
    dom = np.array(d["dominant_band"])
    assert np.all(dom[-3:] == 3)  # alpha/rho >= ~1: major first
    # Two-layer l2-SAM: no collapse event for generic models; small-alpha cells run
    # into the non-smooth point at 0 and end as MAX_STEPS, shown as no value (-1).
    t = out["2layer/l2"]
    assert t["statuses"].get("MAX_STEPS", 0) >= 1
    assert np.array(t["dominant_band"])[0, -1] == -1
    assert np.all(np.array(t["dominant_band"])[-3:] == 3)
