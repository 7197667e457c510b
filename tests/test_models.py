"""Generic differentiable models (samflow.models): autodiff gradients, SAM perturbation
over pytrees, flows and their collapse event against samflow.solve, discrete vs flow."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import samflow as sf
from samflow.flows import Method
from samflow.models import (
    collapse_ratio,
    diagonal_network,
    linear_conv,
    model_grad,
    model_perturbation,
    model_velocity,
    run_model_discrete,
    solve_model,
    solve_model_cell,
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


def test_collapse_ratio_closed_form():
    """R = ||G(theta)|| / ||G(theta_hat)|| for the depth-2 diagonal net on one sample,
    u = v = s 1: G = -sigma(-z) (mu s, mu s), theta_hat = (s - rho mu / (sqrt 2 ||mu||)) 1 per layer."""
    mu = np.array([0.5, 1.0, 1.5])
    data = sf.single_sample(mu)
    rho, f = 0.3, diagonal_network(2, 3).f
    sig = lambda z: 1.0 / (1.0 + np.exp(z))
    for s in (1e-7, 1e-3, 0.05, 0.4):
        w_hat = s - rho * mu / (np.sqrt(2) * np.linalg.norm(mu))
        g = sig(s * s * mu.sum()) * np.sqrt(2) * s * np.linalg.norm(mu)
        gh = sig(np.dot(w_hat * w_hat, mu)) * np.sqrt(2) * np.linalg.norm(mu * w_hat)
        R, ok = collapse_ratio(f, (jnp.full(3, s), jnp.full(3, s)), rho, data)
        assert float(R) == pytest.approx(g / gh, rel=1e-12) and bool(ok)
    # Near 0, R ~ ||theta|| / rho times a constant: the capture condition of samflow.solve.
    R1 = float(collapse_ratio(f, (jnp.full(3, 1e-8), jnp.full(3, 1e-8)), rho, data)[0])
    R2 = float(collapse_ratio(f, (jnp.full(3, 2e-8), jnp.full(3, 2e-8)), rho, data)[0])
    assert R2 / R1 == pytest.approx(2.0, rel=1e-6)
    # G = 0 (theta = 0): R = 0. A linear model (depth 1) has no critical point: R > 0 at 0.
    assert float(collapse_ratio(f, (jnp.zeros(3), jnp.zeros(3)), rho, data)[0]) == 0.0
    assert float(collapse_ratio(diagonal_network(1, 3).f, (jnp.zeros(3),), rho, data)[0]) > 0.1
    # At a large margin a perturbation that multiplies the loss is no collapse (ok False).
    big = (jnp.full(3, 6.0), jnp.full(3, 6.0))
    assert not bool(collapse_ratio(f, big, 3.0, data)[1])


def test_generic_collapse_time_equals_hand_written():
    """l2-SAM on the diagonal network by autodiff: the collapse event of solve_model
    against samflow.solve's (same shapes and settings as the test above: one compilation)."""
    data = sf.single_sample([0.5, 1.0, 1.5])
    ts = np.linspace(0.5, 20.0, 12)
    st = sf.SolverSettings(rtol=1e-10, atol=1e-13)
    model = diagonal_network(2, 3)
    rho = np.array([1.5, 2.0])
    tr = solve_model("l2", model, model.init(0.5), rho, data, ts, st)
    refs = [sf.solve("l2", data, 0.5, r, ts, depth=2, settings=st) for r in rho]
    np.testing.assert_array_equal([int(r.status) for r in refs], Status.COLLAPSED)
    np.testing.assert_array_equal(tr.status, Status.COLLAPSED)
    t_ref = np.array([float(r.event_time) for r in refs])
    np.testing.assert_allclose(tr.event_time, t_ref, rtol=1e-7)
    assert np.all((t_ref > 2.0) & (t_ref < 10.0))  # not trivial
    after = ts[None, :] > t_ref[:, None]
    before = ~after
    b, rb = np.asarray(tr.beta), np.stack([np.asarray(r.beta) for r in refs])
    np.testing.assert_allclose(b[before], rb[before], rtol=1e-6)
    assert np.all(np.abs(b[after]) < 1e-20) and np.all(rb[after] == 0)
    np.testing.assert_allclose(np.asarray(tr.loss)[after], np.log(2), rtol=1e-12)
    # Starting inside the capture radius: collapsed at t = 0. GD (rho = 0) never collapses.
    tr0 = solve_model("l2", model, model.init(1e-9), np.array([0.05, 0.0]), data, ts, st)
    np.testing.assert_array_equal(tr0.status, [Status.COLLAPSED, Status.FINISHED])
    assert float(tr0.event_time[0]) == 0.0 and np.isnan(float(tr0.event_time[1]))
    np.testing.assert_allclose(tr0.beta[0], 1e-18, rtol=1e-12)  # stays where it started


def test_two_layer_collapses_to_a_critical_point_not_zero():
    """Two-layer net, one sample (r parallel to mu at all times): dU = v_hat r^T keeps
    the part of U(0) = alpha I orthogonal to mu, so l2-SAM stops at v = 0, U mu = 0 with
    ||U||_F = alpha sqrt(d - 1), loss log 2; the event ends it (no MAX_STEPS)."""
    mu = np.array([0.5, 1.0, 1.5])
    data = sf.single_sample(mu)
    model = two_layer_linear(3, 3)
    alpha = 0.1
    ts = np.linspace(0.5, 20.0, 12)
    tr = solve_model("l2", model, model.init(alpha), np.array([0.5, 0.0]), data, ts,
                     sf.SolverSettings(rtol=1e-10, atol=1e-13, max_steps=4096))
    assert int(tr.status[0]) == Status.COLLAPSED and int(tr.status[1]) == Status.FINISHED
    t_c = float(tr.event_time[0])
    assert 0.5 < t_c < 20.0
    U, v = np.asarray(tr.theta[0][0]), np.asarray(tr.theta[1][0])
    after = ts > t_c
    np.testing.assert_allclose(np.linalg.norm(U[after], axis=(1, 2)), alpha * np.sqrt(2), rtol=1e-9)
    assert np.all(np.linalg.norm(v[after], axis=1) < 1e-9 * alpha)
    assert np.all(np.linalg.norm(U[after] @ mu, axis=1) < 1e-9 * alpha)
    np.testing.assert_allclose(np.asarray(tr.loss[0])[after], np.log(2), rtol=1e-12)
    # Before the collapse beta shrinks; GD at rho = 0 grows.
    assert np.linalg.norm(tr.beta[0, 0]) < alpha**2 * np.sqrt(3)
    assert np.linalg.norm(tr.beta[1, -1]) > 1.0


def test_flat_norm_without_overflow_or_underflow():
    """The norm behind the critical-point ratio: ||(3, 4) s|| = 5 s from 1e-200 to 1e200
    (a plain sum of squares gives inf and 0 there)."""
    from samflow.models import _flat_norm

    for s in (1e-200, 1.0, 1e200):
        tree = (jnp.array([3.0]) * s, jnp.array([[4.0]]) * s)
        assert float(_flat_norm(tree)) == pytest.approx(5.0 * s, rel=1e-15)
    assert float(_flat_norm((jnp.zeros(3),))) == 0.0


# ------------------------------------------------- save-time checks and the compile cache


@pytest.mark.parametrize("ts, what", [([2.0, 1.0], "strictly increasing"), ([0.5, np.nan], "non-finite"),
                                      ([-1.0, 1.0], ">= 0"), ([[1.0, 2.0]], "1-D")])
def test_solve_model_cell_refuses_bad_save_times(data4, ts, what):
    """solve_model_cell checks its save times as solve_model does (one line naming ts),
    before diffrax's run-time check, which its program leaves out, could be needed."""
    model = two_layer_linear(3, 2)
    with pytest.raises(ValueError, match="^ts .*" + what) as err:
        solve_model_cell("l2", model.f, model.init(0.5), 0.05, data4, ts, settings=sf.SolverSettings(),
                         loss="logistic")
    assert "\n" not in str(err.value)


def _callback_case(data4):
    model = two_layer_linear(3, 2)
    th0 = model.init(0.5, seed=2)
    cell = lambda r, t: solve_model_cell("l2", model.f, th0, r, data4, t, settings=sf.SolverSettings(),
                                         loss="logistic", predictor=model.effective_predictor)
    return model, th0, cell


def test_solve_model_program_has_no_host_callback(data4):
    """Checked save times trace without diffrax's save-time check: no host callback,
    so the persistent compile cache keeps the program (JAX refuses to write programs
    with callbacks). Traced save times (jit over ts) are checked when the program
    runs instead: a callback (so the test can fail)."""
    _, _, cell = _callback_case(data4)
    ts, rho = np.array([0.5, 3.0, 40.0]), np.array([0.0, 0.02, 0.3])
    assert "callback" not in jax.jit(jax.vmap(lambda r: cell(r, ts))).lower(rho).as_text()
    assert "callback" in jax.jit(jax.vmap(cell, in_axes=(0, None))).lower(rho, ts).as_text()


@pytest.mark.slow
def test_checked_and_traced_save_times_same_bits(data4):
    """The program without diffrax's check (checked ts), the one with a run-time check
    (traced ts) and solve_model give the same bits; a bad traced ts raises at run
    time (three compilations: slow)."""
    model, th0, cell = _callback_case(data4)
    ts = np.array([0.5, 3.0, 40.0])
    rho = np.array([0.0, 0.02, 0.3])  # GD, and l2-SAM cells that go on and that collapse
    traced = jax.jit(jax.vmap(cell, in_axes=(0, None)))
    a, b = jax.jit(jax.vmap(lambda r: cell(r, ts)))(rho), traced(rho, ts)
    np.testing.assert_array_equal(a.status, [Status.FINISHED, Status.FINISHED, Status.COLLAPSED])
    c = solve_model("l2", model, th0, rho, data4, ts)
    for x, y, z in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), jax.tree_util.tree_leaves(c)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
        np.testing.assert_array_equal(np.asarray(x), np.asarray(z))
    with pytest.raises(Exception, match="ts must be finite, start at a time >= 0, be strictly increasing"):
        jax.block_until_ready(traced(rho, ts[::-1].copy()))


@pytest.mark.parametrize(
    "make, name",
    [
        (lambda: two_layer_linear(3, 0), "k"),  # before: U (0, 3), f = 0 for every theta, silently
        (lambda: two_layer_linear(0, 2), "d"),
        (lambda: two_layer_linear(3, 2.5), "k"),
        (lambda: linear_conv(0, 2, 6), "n_channels"),
        (lambda: linear_conv(2, 0, 6), "kernel"),  # before: no patches, f = 0
        (lambda: linear_conv(2, 2, True), "d"),
        (lambda: diagonal_network(True, 3), "depth"),  # before: one layer
        (lambda: diagonal_network(2, 0), "d"),
    ],
)
def test_model_sizes_must_be_integers_ge_1(make, name):
    with pytest.raises(ValueError, match=f"^{name} must be an integer >= 1"):
        make()
