"""Extreme numerical inputs: tiny and huge inits, a zero data point, rho = 0,
float32 inputs. Nothing may raise, NaN or grind."""

from __future__ import annotations

import numpy as np
import pytest

import samflow as sf
from samflow.status import Status

MU = np.array([0.5, 1.0, 1.5])
TS = np.geomspace(1e-2, 1e3, 10)


# l2-SAM in the default run; gd, linf and usam (one compilation each) are marked slow.
METHODS_L2_FAST = [pytest.param(m, marks=pytest.mark.slow) if m != "l2" else m for m in ("gd", "l2", "linf", "usam")]


@pytest.mark.parametrize("method", METHODS_L2_FAST)
def test_rho_zero_equals_gd_exactly(method):
    data = sf.single_sample(MU)
    alphas = np.array([0.01, 0.3, 2.0])
    gd = sf.solve("gd", data, alphas, np.zeros(3), TS, alpha_batched=True)
    # The general state (l2's default reduces these equal-layer cells to two scalars,
    # which take steps of their own; checked below to the solver's accuracy).
    sam = sf.solve(method, data, alphas, np.zeros(3), TS, alpha_batched=True, settings=sf.SolverSettings(reduce="off"))
    # The same steps, and the same numbers to the last bit or two: the two methods are
    # two compiled programs, and XLA may vectorize a reduction (the step controller's
    # error norm) of one differently from the other's (bit for bit equal under the
    # segment engine, by the luck of the fusions; equal to 3e-15 under the lanes).
    np.testing.assert_array_equal(np.asarray(sam.num_steps), np.asarray(gd.num_steps))
    np.testing.assert_allclose(np.asarray(sam.W), np.asarray(gd.W), rtol=1e-13, atol=0)
    if method == "l2":  # the reduction (default): rho = 0 is gd's flow, to the solver's accuracy
        red = sf.solve(method, data, alphas, np.zeros(3), TS, alpha_batched=True)
        np.testing.assert_allclose(np.asarray(red.W), np.asarray(gd.W), rtol=1e-7, atol=0)


@pytest.mark.parametrize("method", METHODS_L2_FAST)
def test_tiny_and_huge_inits(method):
    data = sf.single_sample(MU)
    tr = sf.solve(method, data, np.array([1e-300, 1e150]), np.full(2, 0.1), TS, depth=2, alpha_batched=True)
    W, status = np.asarray(tr.W), np.asarray(tr.status)
    assert np.all(np.isfinite(W)) and np.all(np.isfinite(np.asarray(tr.loss)))
    assert np.all(np.asarray(tr.num_steps) < 500)
    # 1e-300: below the capture radius for l2 (collapsed at t = 0); for linf
    # below rho, so it slides at 0; for gd/usam the growth is invisible.
    if method == "l2":
        assert status[0] == Status.COLLAPSED and float(tr.event_time[0]) == 0.0
        assert np.all(W[0] == 0.0)
    elif method == "linf":
        assert status[0] == Status.SLID and np.all(W[0, -1] == 0.0)
    else:
        assert status[0] == Status.FINISHED
    # 1e150: the margin is 1e300, the loss and its slope underflow to 0: nothing
    # moves, exactly.
    assert status[1] == Status.FINISHED
    np.testing.assert_array_equal(W[1], 1e150)
    np.testing.assert_array_equal(np.asarray(tr.loss[1]), 0.0)


def test_tiny_init_keeps_relative_accuracy():
    # The absolute tolerance scales with the init: GD from 1e-100 follows
    # w_j = alpha exp(mu_j tau) to rtol (an absolute atol of 1e-12 would not).
    ts = np.linspace(0.5, 5.0, 10)
    tr = sf.solve("gd", sf.single_sample(MU), 1e-100, 0.0, ts, depth=2, clock="tau")
    expected = 1e-100 * np.exp(np.outer(ts, MU))
    np.testing.assert_allclose(np.asarray(tr.W)[:, 0, :], expected, rtol=1e-6)


@pytest.mark.parametrize("method", METHODS_L2_FAST)
def test_zero_data_point_leaves_the_weights_alone(method):
    data = sf.single_sample(np.zeros(3))
    tr = sf.solve(method, data, 0.4, 0.1, TS, depth=2)
    if method == "l2":
        # mu = 0: every W is a critical point of the (constant) loss, where the l2
        # direction is undefined: CRITICAL from t = 0, held at the init
        assert int(tr.status) == Status.CRITICAL and float(tr.event_time) == 0.0
    else:
        assert int(tr.status) in (Status.FINISHED, Status.SLID)
    np.testing.assert_array_equal(np.asarray(tr.W), 0.4)
    np.testing.assert_allclose(np.asarray(tr.loss), np.log(2.0), rtol=1e-15)


def test_float32_inputs_are_computed_in_float64():
    # ... widened to the float64 value of the float32 (0.3 in float32 is 0.30000001192092896),
    # with a warning naming that number (issue 25 item 5: it was silent)
    data = sf.single_sample(MU)
    a32 = np.float32(0.3)
    with pytest.warns(UserWarning) as record:
        tr32 = sf.solve("l2", data, np.asarray([a32]), np.asarray([0.2], np.float32), TS, alpha_batched=True)
    assert sorted(str(w.message).split(":")[0] for w in record) == ["alpha", "rho"]
    assert any("0.30000001192092896" in str(w.message) for w in record)
    tr64 = sf.solve("l2", data, np.asarray([float(a32)]), np.asarray([float(np.float32(0.2))]), TS, alpha_batched=True)
    assert np.asarray(tr32.W).dtype == np.float64
    np.testing.assert_array_equal(np.asarray(tr32.W), np.asarray(tr64.W))
