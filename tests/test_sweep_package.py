"""The layout of the sweep package (issue 13 step 5): `samflow.merge` gives the
objects of `samflow.sweep._slices`, and the command line prints nothing on stderr for
`--help` (a package whose `__init__` imports its own `__main__` makes runpy warn
on every `python -m samflow.sweep`)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_merge_gives_the_slices_objects():
    import samflow.merge as merge
    from samflow.sweep import _slices

    for name in merge.__all__:
        if name != "main":
            assert getattr(merge, name) is getattr(_slices, name), name


def test_sweep_help_writes_nothing_to_stderr():
    out = subprocess.run(
        [sys.executable, "-W", "error::RuntimeWarning", "-m", "samflow.sweep", "--help"],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )
    assert out.returncode == 0 and "usage: python -m samflow.sweep" in out.stdout
    assert out.stderr == ""
