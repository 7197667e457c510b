"""The layout of the sweep package (issue 13 step 5): the old module paths are
shims over the same objects, and the command line prints nothing on stderr for
`--help` (a package whose `__init__` imports its own `__main__` makes runpy warn
on every `python -m samflow.sweep`)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_old_paths_are_the_same_objects():
    import samflow.merge as merge
    import samflow.parallel as parallel
    from samflow.sweep import _devices, _slices

    assert parallel.__all__ == _devices.__all__
    for name in _devices.__all__ + ["IN_FLIGHT", "AXIS"]:
        assert getattr(parallel, name) is getattr(_devices, name), name
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
