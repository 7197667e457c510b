"""Today's engine, frozen (issue 26): a new engine must compute the same flows to
what the default settings promise (rtol 1e-8), not bit for bit.

See `tests/engine_reference.py` for the cases (the pinned grid's `samflow.solve`
runs and the paths it does not reach: lp-SAM, critical points, SURFACE, events
at the start, NONFINITE_INPUT, MAX_STEPS, depth 3 in tau, d = 50, the depth-3
detour and the README cell with their exact switch times) and for the
tolerances, which `python tests/engine_reference.py --validate` checks against
today's engine at rtol 1e-11. It runs in its own process, like tests/test_pin.py.
"""

from pathlib import Path

import numpy as np
import pytest
from helpers import run_check_script

SCRIPT = Path(__file__).resolve().parent / "engine_reference.py"


@pytest.mark.slow  # about 30 compilations, 7 minutes on 2 shared cores; `pytest -m slow`, which CI runs
def test_engine_matches_frozen_reference():
    run_check_script(SCRIPT, "within tolerance", timeout=3000)


def _case(beta, status=0, event_time=np.nan, loss=0.5):
    beta = np.asarray(beta, float)
    return {"beta": beta, "W": beta[..., None, :], "status": np.asarray(status), "event_time": np.asarray(event_time),
            "loss": np.full(beta.shape[:-1], loss), "num_steps": np.asarray(7)}


def _fields_failing(got, ref):
    from engine_reference import compare_to_reference

    return {q.split(":")[0] for q in compare_to_reference(got, ref)[0]}


def test_comparison_catches_what_it_must():
    """The comparator itself: beta relative to the cell's max |beta| at that save
    time, event times to 1e-7 relative, the loss through its log, NaN positions
    and statuses equal; num_steps ignored."""
    from engine_reference import compare_to_reference

    ref = {"c": _case([[1.0, 1e-3], [2.0, np.nan]], event_time=100.0, loss=1e-300)}
    ok = {"c": _case([[1.0 + 9e-7, 1e-3 + 9e-7], [2.0, np.nan]], event_time=100.0 + 9e-6, loss=1.0001e-300)}
    ok["c"]["num_steps"] = np.asarray(99)
    problems, worst = compare_to_reference(ok, ref)
    assert problems == [], problems
    assert worst["beta"][0] == pytest.approx(9e-7, rel=1e-6) and worst["event_time"][0] == pytest.approx(9e-8, rel=1e-6)
    assert worst["loss"][0] == pytest.approx(1e-4 / (300 * np.log(10)), rel=1e-3)  # the margin's relative error
    bad = {
        "beta": _case([[1.0, 1e-3 + 2e-6], [2.0, np.nan]], event_time=100.0, loss=1e-300),
        "nan": _case([[1.0, 1e-3], [2.0, 0.0]], event_time=100.0, loss=1e-300),
        "status": _case([[1.0, 1e-3], [2.0, np.nan]], status=1, event_time=100.0, loss=1e-300),
        "event_time": _case([[1.0, 1e-3], [2.0, np.nan]], event_time=100.0 + 2e-5, loss=1e-300),
        "loss": _case([[1.0, 1e-3], [2.0, np.nan]], event_time=100.0, loss=1.01e-300),
    }
    want = {"beta": {"c/beta", "c/W"}, "nan": {"c/beta", "c/W"}, "status": {"c/status"},
            "event_time": {"c/event_time"}, "loss": {"c/loss"}}
    for k, case in bad.items():
        assert _fields_failing({"c": case}, ref) == want[k], k
    assert compare_to_reference({}, ref)[0] == ["cases differ: ['c']"]


def test_comparison_masks():
    """The documented masks: a cell decaying to 0 is compared to 1% of its
    earlier size (DECAY_FLOOR), and a MAX_STEPS cell only where both are finite."""
    ref = {"c": _case([[1.0], [1e-4]])}
    assert _fields_failing({"c": _case([[1.0], [1e-4 + 5e-9]])}, ref) == set()  # 5e-7 of 1e-2
    assert _fields_failing({"c": _case([[1.0], [1e-4 + 2e-8]])}, ref) == {"c/beta", "c/W"}  # W = beta at L = 1
    # growing from a small init is compared to its own size: no floor from the future
    ref = {"c": _case([[1e-4], [1.0]])}
    assert _fields_failing({"c": _case([[1e-4 + 2e-10], [1.0]])}, ref) == {"c/beta", "c/W"}
    # MAX_STEPS (4): the stall time and which save times are NaN are the solver's
    stalled_ref = {"c": _case([[1.0, 1e-3], [2.0, np.nan]], status=4, event_time=50.0)}
    stalled = {"c": _case([[1.0, 1e-3], [np.nan, np.nan]], status=4, event_time=51.0)}
    assert _fields_failing(stalled, stalled_ref) == set()
    stalled["c"]["beta"][0, 0] += 1e-5
    assert _fields_failing(stalled, stalled_ref) == {"c/beta", "c/W"}


def test_continued_surface_cells():
    """CONTINUED: a cell the frozen engine stopped with SURFACE may now end SLID or
    FINISHED (compared before the old stop only), in the listed cases alone."""
    ref = {"linf-t-surface": _case([[1.0, 2.0], [np.nan, np.nan]], status=8, event_time=5.0)}
    on = _case([[1.0 + 1e-9, 2.0], [3.0, 4.0]], status=2)
    assert _fields_failing({"linf-t-surface": on}, ref) == set()
    off = _case([[1.0 + 1e-5, 2.0], [3.0, 4.0]], status=2)  # before the old stop: still held to the tolerance
    assert _fields_failing({"linf-t-surface": off}, ref) == {"linf-t-surface/beta", "linf-t-surface/W"}
    failed = _case([[1.0, 2.0], [3.0, 4.0]], status=4)  # MAX_STEPS is no continuation
    assert "linf-t-surface/status" in _fields_failing({"linf-t-surface": failed}, ref)
    other = {"other": ref["linf-t-surface"]}
    assert "other/status" in _fields_failing({"other": on}, other)
