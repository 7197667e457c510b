"""The numbers of a fixed small grid, pinned (issue 13: a restructuring moves no bits).

See `tests/pin_grid.py` for the grid and for how the reference is made. On the
machine kind the reference was made on (same CPU model and flags, same package
versions) every field must be equal bit for bit, NaN positions included;
elsewhere to 1e-7 relative with equal statuses. A change that is meant to change
numbers regenerates the reference (`python tests/pin_grid.py --save`) in its own
commit, saying why.
"""

import pin_grid
import pytest


@pytest.mark.slow  # about 20 compilations; `pytest -m slow`, which CI runs
def test_pinned_grid_unchanged():
    fp, ref = pin_grid.load()
    same = fp == pin_grid.fingerprint()
    problems = pin_grid.compare(pin_grid.cases(), ref, exact=same)
    assert not problems, ("bit for bit" if same else "to 1e-7") + ":\n" + "\n".join(problems)
