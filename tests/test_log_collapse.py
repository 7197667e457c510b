"""Log coordinates bound the steps of an l2 collapse independently of d (issue 14).

In linear coordinates the decay of the major coordinates before an l2 collapse
is stiff, with rates spread by (mu_d / mu_1)^2 = d^2 for mu_j = j/d: the slowest
collapsing cell of the d = 50 chart takes ~11,000 Tsit5 steps and those of the
d = 200 chart run out of steps. In x = log|W| that decay is motion at a rate
~ rho mu_j^2 / ||mu * w||, whose Jacobian is rank one with eigenvalue the rate of
||mu * w|| itself: not stiff, so the step count does not grow with d
(docs/benchmarks.md, "Large d: log coordinates").
"""

import numpy as np
import pytest

import samflow as sf

TS = np.geomspace(1e-2, 1e4, 16)
# The slowest collapsing cell of bench.py's 8x8 d = 50 chart (11,345 steps in linear coordinates).
ALPHA, RHO = 0.1389495494373136, 1.389495494373136
LOG = sf.SolverSettings(coords="log", rtol=1e-10)


def chart_data(d):
    return sf.single_sample(list(np.arange(1, d + 1) / d))


@pytest.mark.slow
def test_log_coordinates_collapse_in_steps_bounded_in_d_and_agree_with_linear():
    lin50 = sf.solve("l2", chart_data(50), ALPHA, RHO, TS)
    log50 = sf.solve("l2", chart_data(50), ALPHA, RHO, TS, settings=LOG)
    log5 = sf.solve("l2", chart_data(5), ALPHA, RHO, TS, settings=LOG)
    for out in (lin50, log50, log5):
        assert int(out.status) == int(sf.Status.COLLAPSED)
    # Linear: the stiff decay (d^2 spread of rates) costs thousands of steps; log: a
    # few hundred, about as many at d = 50 as at d = 5.
    assert int(lin50.num_steps) > 5000
    assert int(log50.num_steps) < 600
    assert int(log50.num_steps) <= 1.5 * int(log5.num_steps)
    # The same flow: beta at the save times before the collapse, and the collapse time.
    T = float(lin50.event_time)
    assert float(log50.event_time) == pytest.approx(T, rel=1e-6)
    before = TS < T
    assert before.sum() >= 8
    b_lin, b_log = np.asarray(lin50.beta)[before], np.asarray(log50.beta)[before]
    rel = np.linalg.norm(b_log - b_lin, axis=-1) / np.linalg.norm(b_lin, axis=-1)
    assert np.max(rel) < 1e-6
