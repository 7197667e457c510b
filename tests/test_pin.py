"""The numbers of a fixed small grid, pinned (issue 13: a restructuring moves no bits).

See `tests/pin_grid.py` for the grid and for how the reference is made. On the
machine kind the reference was made on (same CPU model and flags, same package
versions) every field must be equal bit for bit, NaN positions included;
elsewhere to 1e-7 relative with equal statuses. A change that is meant to change
numbers regenerates the reference (`python tests/pin_grid.py --save`) in its own
commit, saying why.

It runs in its own process, as `python tests/pin_grid.py --check`: a fresh JAX
with no compilation cache or other settings left by earlier tests of the same
pytest worker (XLA once crashed compiling in a worker that had run other files).
"""

from pathlib import Path

import pytest
from helpers import run_check_script

PIN = Path(__file__).resolve().parent / "pin_grid.py"


@pytest.mark.slow  # about 20 compilations; `pytest -m slow`, which CI runs
def test_pinned_grid_unchanged():
    run_check_script(PIN, ": equal", timeout=1500)
