"""The layout of the sweep package (issue 13 step 5): `samflow.merge` gives the
objects of `samflow.sweep._slices`, and the command line prints nothing on stderr for
`--help` (a package whose `__init__` imports its own `__main__` makes runpy warn
on every `python -m samflow.sweep`)."""

import subprocess
import sys
from pathlib import Path

import pytest

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


def test_results_layout_is_public_and_builds_to_datasets_first_argument():
    """0.3.0's to_dataset takes a ResultsLayout; its builder was the private
    samflow.sweep._run.results_layout, so a user had no public way to call it."""
    import numpy as np
    import pytest

    import samflow as sf
    import samflow.sweep as sweep
    from samflow.config import SweepConfig
    from samflow.store import ResultsLayout, to_dataset

    assert "results_layout" in sweep.__all__
    cfg = SweepConfig.model_validate({"name": "mine", "methods": ["gd"], "depth": 2, "data": {"mu": [0.5, 1.0]},
                                      "grid": {"alpha": [0.1], "rho": [0.2]}, "time": {"t1": 10.0, "num": 4}})
    layout = sweep.results_layout(cfg)
    assert isinstance(layout, ResultsLayout)
    data = sf.single_sample([0.5, 1.0])
    tr = sf.solve("gd", data, 0.1, np.array([0.2]), cfg.time.values(), depth=2)
    ds = to_dataset(layout, data, np.array([[0.1]]), {"gd": tr}, {"gd": 0.0})
    assert list(ds["flow"].values) == ["gd"] and ds.sizes["time"] == 4
    assert ds["alpha"].values.tolist() == [0.1] and ds["rho"].values.tolist() == [0.2]
    np.testing.assert_array_equal(ds["beta"].values[0, 0, 0], np.asarray(tr.beta)[0])
    with pytest.raises(TypeError, match=r"^to_dataset takes a samflow\.store\.ResultsLayout since samflow 0\.3\.0, "
                                        r"not a config \(got SweepConfig\): pass samflow\.sweep\.results_layout\(cfg\)$"):
        to_dataset(cfg, data, np.array([[0.1]]), {"gd": tr}, {"gd": 0.0})


def test_the_module_docstrings_describe_the_plan_and_the_lane_engine():
    """samflow.sweep's docstring described 0.1's engine ("one jitted, vmapped diffrax solve
    per chunk of cells") and samflow.sweep._run's predated the plan."""
    import samflow.sweep as sweep
    from samflow.sweep import _run

    assert "vmapped" not in sweep.__doc__ and "lane engine (`samflow._engine`" in sweep.__doc__
    for name in ("SweepPlan", "plan_sweep", "run_plan", "RunOptions"):
        assert f"`{name}`" in _run.__doc__ and hasattr(_run, name), name


def test_run_options_are_given_by_keyword():
    """run_sweep built its RunOptions positionally (five fields of like types): they are
    keyword-only, so a call cannot put one where another belongs."""
    import pytest

    from samflow.sweep._run import RunOptions

    with pytest.raises(TypeError):
        RunOptions(True, None, None, None, False)
    opts = RunOptions(progress=False, checkpoint_dir=None, grid_slice=(0, 2), code_stamp="x", accept_other_stamp=True)
    assert opts.grid_slice == (0, 2) and opts.code_stamp == "x" and opts.accept_other_stamp


@pytest.mark.parametrize("bad", [None, {"name": "x"}, "configs/default.toml"])
def test_results_layout_refuses_what_is_not_a_config_in_one_line(bad):
    """`results_layout` (public since 0.3.0) took anything and failed deep inside
    with an AttributeError; it now says what it takes."""
    from samflow.sweep import results_layout

    with pytest.raises(TypeError, match=r"^results_layout takes a SweepConfig \(samflow\.config\.load_config\(path\)\), "
                                        rf"got {type(bad).__name__}$"):
        results_layout(bad)
