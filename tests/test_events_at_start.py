"""Stop events that already hold at the start (issue 12, case 5).

diffrax fires an event only on a down-crossing of its condition, so a condition
that is already <= 0 at t0 never fires: a blow-up cell "finished" with |beta| =
2.2e6, and one exactly on the threshold burned all max_steps. Every stop event
kind is checked at t0, inside and exactly on its threshold: it must end with
its status at event time 0 in a few steps, the initial state saved at time 0
and NaN (blow-up) or the held state (collapse, critical point) after.
"""

import jax.numpy as jnp
import numpy as np
import pytest

import samflow as sf
from samflow.models import collapse_ratio, diagonal_network, solve_model
from samflow.solver import SolverSettings, _critical_ratio

TS = [0.0, 0.1, 1.0, 5.0]


def _blown_at_start(tr, W0):
    assert sf.Status(int(tr.status)) is sf.Status.BLEW_UP
    assert float(tr.event_time) == 0.0 and float(tr.event_t) == 0.0
    assert int(tr.num_steps) == 0
    np.testing.assert_allclose(np.asarray(tr.W[0]), W0, rtol=1e-15)  # save time 0: the init
    assert float(tr.t[0]) == 0.0
    assert np.all(np.isnan(np.asarray(tr.beta[1:])))
    assert np.all(np.isnan(np.asarray(tr.t[1:])))


def test_blowup_inside_threshold_at_start_issue_case():
    """The issue's cell: |beta(0)| = 100 > 10**1.5: BLEW_UP at 0, not FINISHED at 2.2e6."""
    tr = sf.solve("gd", sf.single_sample([0.5, 1]), alpha=10, rho=0.1, ts=[0.1, 1, 5], clock="tau",
                  settings=SolverSettings(blowup_log10=1.5))
    assert sf.Status(int(tr.status)) is sf.Status.BLEW_UP
    assert float(tr.event_time) == 0.0
    assert int(tr.num_steps) == 0
    assert np.all(np.isnan(np.asarray(tr.beta)))


# Default run: gd in linear coordinates; the other three variants are slow (one compilation each).
@pytest.mark.parametrize("coords, blowup_log10", [("linear", 2.0), pytest.param("log", 1.99, marks=pytest.mark.slow)])
@pytest.mark.parametrize("method", ["gd", pytest.param("l2", marks=pytest.mark.slow)])
def test_blowup_on_or_inside_threshold_at_start(method, coords, blowup_log10):
    """|beta(0)| = 10**2: exactly on blowup_log10 = 2 in linear coordinates; inside it
    in log coordinates (there log10|beta| = 2 log(10) / log(10) is not exact)."""
    tr = sf.solve(method, sf.single_sample([0.5, 1]), alpha=10.0, rho=0.1, ts=TS, clock="tau",
                  settings=SolverSettings(blowup_log10=blowup_log10, coords=coords))
    _blown_at_start(tr, np.full((2, 2), 10.0))


def test_blowup_on_threshold_issue_values():
    """alpha = sqrt(10), blowup_log10 = 1: burned all max_steps before (MAX_STEPS)."""
    tr = sf.solve("gd", sf.single_sample([0.5, 1]), alpha=np.sqrt(10), rho=0.1, ts=TS, clock="tau",
                  settings=SolverSettings(blowup_log10=1))
    _blown_at_start(tr, np.full((2, 2), np.sqrt(10)))


@pytest.mark.slow  # depth 3; depth 2 is in the default run
def test_blowup_depth3_at_start_and_just_outside():
    """Depth 3 (pole event present too): inside the threshold stops at 0; just outside
    it integrates and blows up at a small positive time."""
    data = sf.single_sample([0.5, 1])
    tr = sf.solve("gd", data, alpha=10.0, rho=0.1, ts=TS, depth=3, clock="tau",
                  settings=SolverSettings(blowup_log10=2.5))
    _blown_at_start(tr, np.full((3, 2), 10.0))
    tr = sf.solve("gd", data, alpha=10.0, rho=0.1, ts=TS, depth=3, clock="tau",
                  settings=SolverSettings(blowup_log10=3.01))
    assert sf.Status(int(tr.status)) is sf.Status.BLEW_UP
    # d beta_2 / dtau = 3 beta_2^(5/3) at beta_2 = 1000: 10**3.01 in about 2.3e-4.
    assert 1e-4 < float(tr.event_time) < 1e-3


@pytest.mark.parametrize("capture_radius", [0.5, pytest.param(0.6, marks=pytest.mark.slow)])  # exactly on, inside
def test_collapse_at_start(capture_radius):
    """||W(0)|| = 1.5 exactly (0.75 in 4 weights), rho = 3, capture 0.5 x 3 = 1.5:
    COLLAPSED at 0, W(0) saved at time 0 (it was NaN), 0 after."""
    tr = sf.solve("l2", sf.single_sample([0.5, 1]), alpha=0.75, rho=3.0, ts=TS,
                  settings=SolverSettings(capture_radius=capture_radius))
    assert sf.Status(int(tr.status)) is sf.Status.COLLAPSED
    assert float(tr.event_time) == 0.0 and int(tr.num_steps) == 0
    np.testing.assert_array_equal(np.asarray(tr.W[0]), np.full((2, 2), 0.75))
    np.testing.assert_array_equal(np.asarray(tr.W[1:]), 0.0)


def test_collapse_just_outside_capture_integrates():
    tr = sf.solve("l2", sf.single_sample([0.5, 1]), alpha=0.75, rho=3.0, ts=TS,
                  settings=SolverSettings(capture_radius=0.45))
    assert sf.Status(int(tr.status)) is sf.Status.COLLAPSED
    assert float(tr.event_time) > 0.0 and int(tr.num_steps) > 0


_SYMMETRIC = sf.Dataset(X=jnp.array([[1.0], [1.0]]), y=jnp.array([1.0, -1.0]))


def test_critical_point_at_start_depth1():
    """l2 at depth 1 from beta = 0, the minimiser of the symmetric data: grad L = 0."""
    tr = sf.solve("l2", _SYMMETRIC, alpha=0.0, rho=0.5, ts=TS, depth=1)
    assert sf.Status(int(tr.status)) is sf.Status.CRITICAL
    assert float(tr.event_time) == 0.0 and int(tr.num_steps) == 0
    np.testing.assert_array_equal(np.asarray(tr.W), 0.0)
    np.testing.assert_array_equal(np.asarray(tr.t), TS)


@pytest.mark.parametrize("factor", [1.0, pytest.param(2.0, marks=pytest.mark.slow)])  # exactly on, inside
def test_critical_point_on_threshold_at_start(factor):
    W0 = jnp.full((1, 1), 1e-8)
    R, ok = _critical_ratio(W0, jnp.asarray(0.5), _SYMMETRIC, sf.get_loss("logistic"))
    assert bool(ok) and 0 < float(R) < 1e-6
    tr = sf.solve("l2", _SYMMETRIC, alpha=1e-8, rho=0.5, ts=TS, depth=1,
                  settings=SolverSettings(capture_radius=factor * float(R)))
    assert sf.Status(int(tr.status)) is sf.Status.CRITICAL
    assert float(tr.event_time) == 0.0
    np.testing.assert_array_equal(np.asarray(tr.W), 1e-8)


def test_linf_zero_weight_at_start_decides_in_few_steps():
    """The linf sign switch at a weight that starts at 0 (its threshold, exactly):
    decided at the start (slide or leave), never stepped through."""
    tr = sf.solve("linf", sf.single_sample([0.5, 1]), alpha=[0.0, 0.3], rho=0.1, ts=TS)
    assert sf.Status(int(tr.status)) in (sf.Status.FINISHED, sf.Status.SLID)
    assert int(tr.num_steps) < 200
    assert np.all(np.isfinite(np.asarray(tr.W)))


def test_t_range_exceeded_at_start():
    """A tau cell whose loss is below ~1e-30 at the start: t is past the tracked
    range from 0 on (reported +inf), the cell still integrates and finishes."""
    tr = sf.solve("gd", sf.single_sample([0.5, 1]), alpha=9.0, rho=0.1, ts=TS, clock="tau")
    assert sf.Status(int(tr.status)) is sf.Status.FINISHED
    assert np.all(np.isinf(np.asarray(tr.t[1:])))


@pytest.mark.parametrize("factor", [1.0 + 1e-12, pytest.param(2.0, marks=pytest.mark.slow)])  # on (to the rounding of R under jit), inside
def test_solve_model_collapse_at_start(factor):
    """The generic-model solver's critical-point event at t0: COLLAPSED at 0, held."""
    m = diagonal_network(2)
    th0 = m.init(1e-4, 2)
    data = sf.single_sample([0.5, 1])
    R, ok = collapse_ratio(m.f, th0, 1.0, data)
    assert bool(ok) and 0 < float(R) < 1e-3
    tr = solve_model("l2", m, th0, 1.0, data, TS, settings=SolverSettings(capture_radius=factor * float(R)))
    assert sf.Status(int(tr.status)) is sf.Status.COLLAPSED
    assert float(tr.event_time) == 0.0
    assert int(tr.num_steps) < 10
    for leaf in tr.theta:
        np.testing.assert_array_equal(np.asarray(leaf), 1e-4)
