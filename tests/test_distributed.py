"""A sweep on many machines: --num-slices K --slice-index i slices, and the merge.

The merged slices must equal a single run bit for bit (NaN positions included);
the CLI must refuse bad slice arguments and incomplete or mixed slice sets with
one line and exit code 2, leaving no file behind.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from samflow.merge import SliceError, main as merge_main, merge_slices, slice_cells, slice_file_name
from samflow.store import read_results
from samflow.sweep import main

from helpers import sweep_toml

# Slow (whole sweeps in subprocesses): run with `pytest -m slow`; CI runs it.
pytestmark = pytest.mark.slow

# 4 alphas x 2 rhos = 8 cells; l2 collapses (NaN event times elsewhere), linf slides
# (NaN slide times elsewhere). Solver chunks of 3 cells: the K = 3 slices hold 3, 3
# and 2 cells, so one slice is smaller than a chunk (padded to the chunk's shape) and
# the others are not. Same structure as tests/test_resume.py (shared compilation).
def config(t1: float = 1e3) -> str:
    return sweep_toml("dist", ["l2", "linf"], alpha=[0.01, 0.3, 2.0, 10.0], rho=[0.05, 0.2], t1=t1, num=10,
                      solver={"chunk_size": 3})
K = 3


def _slice(cfg: Path, out: Path, k: int, i: int, *extra: str) -> int:
    return main([str(cfg), "--out", str(out), "--quiet", "--num-slices", str(k), "--slice-index", str(i), *extra])


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A whole run and the K slices of the same config (slices not merged)."""
    root = tmp_path_factory.mktemp("dist")
    cfg = root / "c.toml"
    cfg.write_text(config(t1=1e3))
    assert main([str(cfg), "--out", str(root / "whole"), "--quiet", "--no-figures"]) == 0
    for i in range(K):
        assert _slice(cfg, root / "sliced", K, i) == 0
    return root, cfg


def _fresh_copy(runs, tmp_path) -> Path:
    """A copy of the slices (only) of the sliced run, in a folder a test may modify."""
    root, _ = runs
    out = tmp_path / "sliced"
    shutil.copytree(root / "sliced" / "slices", out / "slices")
    return out


def test_slice_cells_partition_the_grid():
    rng = np.random.default_rng(0)
    for n, k in [(1, 1), (8, 3), (10, 10), (97, 16)]:
        order = rng.permutation(n)
        parts = [slice_cells(order, k, i) for i in range(k)]
        assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(n))
        assert max(p.size for p in parts) - min(p.size for p in parts) <= 1
        assert all(np.all(np.diff(p) > 0) for p in parts)
        assert all(np.array_equal(p, slice_cells(order, k, i)) for i, p in enumerate(parts))  # deterministic
    with pytest.raises(ValueError, match=r"^--num-slices 5 is more than the 4 \(alpha, rho\) cell\(s\) of the grid; use at most 4$"):
        slice_cells(np.arange(4), 5, 0)
    assert slice_file_name(3, 16) == "slice-0003-of-0016.nc"


def test_merged_slices_equal_the_whole_run_bit_for_bit(runs, capsys, monkeypatch):
    root, _ = runs
    drawn = []  # the figures are samflow.plots.plot_sweep's (tested in test_sweep.py); skip the drawing
    monkeypatch.setattr(
        "samflow.plots.plot_sweep",
        lambda ds, out_dir, output=None: drawn.append((ds, output)) or [Path(out_dir) / "dominant_heatmap.png"],
    )
    sliced = root / "sliced"
    names = sorted(p.name for p in (sliced / "slices").iterdir())
    assert names == [slice_file_name(i, K) for i in range(K)]  # no partial folders or temp files left
    assert not list(sliced.glob("*.png")) and not (sliced / "results.nc").exists()  # no figures for slices
    sizes = []
    for i in range(K):
        s = read_results(sliced / "slices" / slice_file_name(i, K))
        assert (int(s.attrs["slice_index"]), int(s.attrs["num_slices"])) == (i, K)
        assert s.attrs["config_key"] and "config" in s.attrs
        assert s["beta"].dims == ("flow", "cell", "time", "coord")
        sizes.append(s.sizes["cell"])
    assert sorted(sizes) == [2, 3, 3]

    assert merge_main([str(sliced)]) == 0
    out = capsys.readouterr().out
    assert "merged from 3 slices" in out and "dominant_heatmap.png" in out
    assert len(drawn) == 1 and drawn[0][0].sizes["alpha"] == 4
    # the merged run's own [output] section (the config stored with the slices)
    assert type(drawn[0][1]).__name__ == "OutputConfig" and drawn[0][1].figures

    whole, merged = read_results(root / "whole" / "results.nc"), read_results(sliced / "results.nc")
    assert merged.sizes == whole.sizes and list(merged.data_vars) == list(whole.data_vars)
    for name, var in whole.variables.items():
        got = merged[name]
        assert got.dims == var.dims and got.dtype == var.dtype, name
        assert np.array_equal(got.values, var.values, equal_nan=var.dtype.kind == "f"), name
        assert got.attrs.keys() == var.attrs.keys(), name
    # The test is not vacuous: collapses, slides and NaN entries are there.
    assert {1, 2} <= set(np.unique(whole["status"].values))
    assert np.isnan(whole["event_time"].values).any() and np.isnan(whole["slide_time"].values).any()
    # Everything but the run's own attributes is identical (variable attributes included).
    run_attrs = ("wall_time_s", "method_wall_time_s", "created", "merged_slices")
    bare_merged, bare_whole = merged.copy(), whole.copy()
    bare_merged.attrs, bare_whole.attrs = {}, {}
    xr.testing.assert_identical(bare_merged, bare_whole)
    assert {k: v for k, v in merged.attrs.items() if k not in run_attrs} == {
        k: v for k, v in whole.attrs.items() if k not in run_attrs
    }
    assert int(merged.attrs["merged_slices"]) == K

    # The merged file is not overwritten without --overwrite.
    assert merge_main([str(sliced), "--no-figures"]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert merge_main([str(sliced), "--no-figures", "--overwrite"]) == 0


@pytest.mark.parametrize(
    "args, message",
    [
        (["--num-slices", "0", "--slice-index", "0"], "--num-slices must be >= 1"),
        (["--num-slices", "3", "--slice-index", "3"], "--slice-index must be in 0..2"),
        (["--num-slices", "3", "--slice-index", "-1"], "--slice-index must be in 0..2"),
        (["--num-slices", "9", "--slice-index", "0"], "more than the 8 (alpha, rho) cell(s)"),
        (["--num-slices", "3"], "go together"),
        (["--slice-index", "1"], "go together"),
        (["--num-slices", "two", "--slice-index", "1"], "whole numbers"),
    ],
)
def test_bad_slice_arguments_one_line_exit_2_no_files(runs, tmp_path, capsys, args, message):
    _, cfg = runs
    out = tmp_path / "out"
    assert main([str(cfg), "--out", str(out), "--quiet", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists()


def test_slice_rerun_needs_overwrite_and_resume_is_per_slice(runs, tmp_path, capsys):
    _, cfg = runs
    out = _fresh_copy(runs, tmp_path)
    path = out / "slices" / slice_file_name(1, K)
    before = read_results(path)
    assert _slice(cfg, out, K, 1) == 2
    err = capsys.readouterr().err
    assert "exists" in err and "--overwrite" in err
    # A partial folder of slice 1 (an interrupted run) asks for --resume or --overwrite ...
    path.unlink()
    partial = out / "slices" / f".partial-{path.stem}"
    partial.mkdir()
    assert _slice(cfg, out, K, 1) == 2
    err = capsys.readouterr().err
    assert "slice 2 of 3 (--slice-index 1)" in err and "--resume" in err  # messages count from 1
    # ... and refuses chunks kept for another slice or config.
    (partial / "sweep.key").write_text("something else")
    assert _slice(cfg, out, K, 1, "--resume") == 2
    assert "different config" in capsys.readouterr().err
    assert _slice(cfg, out, K, 1, "--overwrite") == 0
    assert not partial.exists()
    after = read_results(path)
    for name in before.data_vars:
        assert np.array_equal(after[name].values, before[name].values, equal_nan=before[name].dtype.kind == "f")


def _merge_error(out: Path, capsys) -> str:
    assert merge_main([str(out), "--no-figures"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert not (out / "results.nc").exists()
    return err


def test_merge_refuses_missing_duplicated_and_foreign_slices(runs, tmp_path, capsys):
    root, cfg = runs
    out = _fresh_copy(runs, tmp_path)
    slices = out / "slices"
    second = slices / slice_file_name(1, K)

    # Missing.
    moved = tmp_path / "moved.nc"
    shutil.move(second, moved)
    err = _merge_error(out, capsys)
    assert "1 of 3 slices missing" in err and slice_file_name(1, K) in err
    shutil.move(moved, second)

    # Duplicated (a copy under another name).
    shutil.copy(second, slices / "slice-0001-of-0003-copy.nc")
    err = _merge_error(out, capsys)
    assert "slice 2 of 3 (--slice-index 1) appears twice" in err
    (slices / "slice-0001-of-0003-copy.nc").unlink()

    # From another config: slice 1 rerun with another horizon (same shapes, no new compilation).
    other_cfg = tmp_path / "other.toml"
    other_cfg.write_text(config(t1=5e2))
    other = tmp_path / "other"
    assert _slice(other_cfg, other, K, 1) == 0
    shutil.copy(other / "slices" / slice_file_name(1, K), second)
    err = _merge_error(out, capsys)
    assert "different configs" in err
    shutil.copy(root / "sliced" / "slices" / slice_file_name(1, K), second)

    # From another split of the same config.
    assert _slice(cfg, out, 4, 0) == 0
    err = _merge_error(out, capsys)
    assert "different splits" in err
    (slices / slice_file_name(0, 4)).unlink()

    # No slices at all; an unreadable one.
    assert "no slices" in _merge_error(tmp_path / "nothing", capsys)
    (slices / "slice-9999-of-9999.nc").write_text("not netCDF")
    assert "cannot read" in _merge_error(out, capsys)
    (slices / "slice-9999-of-9999.nc").unlink()

    # After all that, the folder still merges.
    assert merge_main([str(out), "--no-figures"]) == 0


def test_merge_slices_api_checks_coverage(runs):
    root, _ = runs
    parts = [read_results(root / "sliced" / "slices" / slice_file_name(i, K)) for i in range(K)]
    whole = read_results(root / "whole" / "results.nc")
    with pytest.raises(SliceError, match="not a slice"):
        merge_slices([whole])
    bad = parts[1].assign_coords(cell=parts[0]["cell"].values[: parts[1].sizes["cell"]])
    with pytest.raises(SliceError, match="not each of the 8 cells"):
        merge_slices([parts[0], bad, parts[2]])
    merged = merge_slices(parts[::-1])  # any order
    assert np.array_equal(merged["beta"].values, whole["beta"].values, equal_nan=True)
