"""The result store survives kill -9: --resume finishes a killed sweep with results
identical, bit for bit, to an uninterrupted run; reruns are deterministic."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from samflow.sweep import main

from helpers import sweep_toml


def config(figures: bool = False) -> str:
    return sweep_toml("resume", ["linf"], alpha={"start": 1e-2, "stop": 1e1, "num": 48}, rho=[0.05], t1=1e3, num=10,
                      solver={"chunk_size": 3}, output={"figures": figures})

VARIABLES = ("beta", "loss", "real_time", "status", "event_time", "slide_time", "num_steps", "collapse_direction",
             "switch_time", "switch_from", "switch_to", "switch_ok")


def _run(cfg: Path, out: Path, *extra: str, wait: bool = True):
    cmd = [sys.executable, "-m", "samflow.sweep", str(cfg), "--out", str(out), "--quiet", *extra]
    if wait:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _same(a: Path, b: Path) -> None:
    with xr.open_dataset(a) as x, xr.open_dataset(b) as y:
        for v in VARIABLES:
            np.testing.assert_array_equal(x[v].values, y[v].values, err_msg=v)


@pytest.mark.slow
def test_kill_midway_then_resume_is_bit_identical(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text(config(figures=False))
    full = tmp_path / "full"
    assert main([str(cfg), "--out", str(full), "--quiet"]) == 0

    # Killed once two chunks are on disk. No deadline (a loaded machine took minutes
    # to start); and the kill may come after the last chunk when this process was
    # descheduled meanwhile: then again, in a fresh folder.
    for attempt in range(4):
        killed = tmp_path / f"killed{attempt}"
        proc = _run(cfg, killed, wait=False)
        partial = killed / ".partial"
        while len(list(partial.glob("*.npz"))) < 2 and proc.poll() is None:
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        n_done = len(list(partial.glob("*.npz")))
        if n_done < 16 and not (killed / "results.nc").exists():
            break
    else:
        pytest.fail("the sweep finished before the kill in all 4 tries")
    assert 2 <= n_done < 16, n_done  # killed midway: 16 chunks of 3 cells

    # Without --resume the CLI refuses, naming the flags.
    r = _run(cfg, killed)
    assert r.returncode == 2 and "--resume" in r.stderr and "--overwrite" in r.stderr

    r = _run(cfg, killed, "--resume")
    assert r.returncode == 0, r.stderr
    assert not partial.exists()
    _same(full / "results.nc", killed / "results.nc")


def test_resume_refuses_partial_results_of_another_config(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text(config(figures=False))
    out = tmp_path / "o"
    (out / ".partial").mkdir(parents=True)
    (out / ".partial" / "sweep.key").write_text("something else")
    r = _run(cfg, out, "--resume")
    assert r.returncode == 2 and "different config" in r.stderr
    assert not (out / "results.nc").exists()


def test_same_config_twice_is_deterministic_and_overwrite_is_explicit(tmp_path, capsys):
    cfg = tmp_path / "c.toml"
    cfg.write_text(config(figures=False))
    a, b = tmp_path / "a", tmp_path / "b"
    assert main([str(cfg), "--out", str(a), "--quiet"]) == 0
    assert main([str(cfg), "--out", str(b), "--quiet"]) == 0
    _same(a / "results.nc", b / "results.nc")
    assert main([str(cfg), "--out", str(a), "--quiet"]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert main([str(cfg), "--out", str(a), "--quiet", "--overwrite"]) == 0
    _same(a / "results.nc", b / "results.nc")
    with xr.open_dataset(a / "results.nc") as ds:
        for key in ("config", "versions", "git_commit", "wall_time_s", "method_wall_time_s"):
            assert key in ds.attrs


DATA_FILE_CONFIG = """\
name = "data_file"
methods = ["gd"]
[data]
file = "data.npz"
[grid]
alpha = [0.5, 1.0, 2.0, 4.0]
rho = [0.05]
[time]
t1 = 10.0
num = 3
[solver]
chunk_size = 2
[output]
figures = false
switch_times = false
"""


def _data_file_sweep(tmp_path: Path, X) -> Path:
    np.savez(tmp_path / "data.npz", X=np.asarray(X, np.float64), y=np.ones(len(X)))
    cfg = tmp_path / "c.toml"
    cfg.write_text(DATA_FILE_CONFIG)
    return cfg


def test_resume_after_the_data_file_changed_refuses_the_stale_chunks(tmp_path, capsys):
    """The chunks of an interrupted run were computed on the data file as it was then;
    --resume after the file changed must not merge them with cells solved on the new
    data (the config text, and so its key, is the same). It used to: results.nc held
    the new data_X beside betas of the old data for the reused chunk."""
    from samflow.config import load_config
    from samflow.sweep import run_sweep

    cfg = _data_file_sweep(tmp_path, [[0.3, 1.0]])
    out = tmp_path / "o"
    # An interrupted run: chunk 0 of 2 finished on the first data.
    run_sweep(load_config(cfg), progress=False, base_dir=tmp_path, checkpoint_dir=out / ".partial")
    (out / ".partial" / "gd-000001.npz").unlink()
    _data_file_sweep(tmp_path, [[1.0, 0.3]])  # the data file is edited, the config is not
    capsys.readouterr()
    assert main([str(cfg), "--out", str(out), "--quiet", "--resume"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "data" in err[0] and "--overwrite" in err[0], err
    assert not (out / "results.nc").exists()
    # With --overwrite the stale chunks go and every cell is solved on the new data.
    assert main([str(cfg), "--out", str(out), "--quiet", "--resume", "--overwrite"]) == 0
    fresh = tmp_path / "fresh"
    assert main([str(cfg), "--out", str(fresh), "--quiet"]) == 0
    with xr.open_dataset(out / "results.nc") as a, xr.open_dataset(fresh / "results.nc") as b:
        np.testing.assert_array_equal(a["beta"].values, b["beta"].values)
        # By symmetry of the two coordinates, GD from equal inits on mu = (1, 0.3) grows coordinate 1 most.
        assert np.all(a["beta"].values[0, :, 0, -1, 0] > a["beta"].values[0, :, 0, -1, 1])


def test_resume_of_finished_results_after_the_data_file_changed_refuses(tmp_path, capsys):
    """A finished results.nc of the old data file is not "already complete" for the new one."""
    cfg = _data_file_sweep(tmp_path, [[0.3, 1.0]])
    out = tmp_path / "o"
    assert main([str(cfg), "--out", str(out), "--quiet"]) == 0
    assert main([str(cfg), "--out", str(out), "--quiet", "--resume"]) == 0  # unchanged: nothing to do
    _data_file_sweep(tmp_path, [[1.0, 0.3]])
    capsys.readouterr()
    assert main([str(cfg), "--out", str(out), "--quiet", "--resume"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "data" in err[0] and "--overwrite" in err[0], err
    with xr.open_dataset(out / "results.nc") as ds:
        np.testing.assert_array_equal(ds["data_X"].values, [[0.3, 1.0]])  # left as it was


def test_merge_resume_after_slices_of_an_edited_data_file_is_not_complete(tmp_path, capsys):
    """`merge --resume` compared config key, code stamp and slice count only: after
    the data file was edited and the slices rerun with --overwrite, it kept the
    results.nc merged from the old slices as 'already complete'."""
    from samflow.merge import main as merge_main

    cfg = _data_file_sweep(tmp_path, [[0.3, 1.0]])
    out = tmp_path / "o"
    for i in range(2):
        assert main([str(cfg), "--out", str(out), "--quiet", "--num-slices", "2", "--slice-index", str(i)]) == 0
    assert merge_main([str(out), "--no-figures"]) == 0
    _data_file_sweep(tmp_path, [[1.0, 0.3]])
    for i in range(2):
        assert main([str(cfg), "--out", str(out), "--quiet", "--num-slices", "2", "--slice-index", str(i),
                     "--overwrite"]) == 0
    capsys.readouterr()
    assert merge_main([str(out), "--no-figures", "--resume"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not the merge" in err[0] and "--overwrite" in err[0], err
    assert merge_main([str(out), "--no-figures", "--resume", "--overwrite"]) == 0
    with xr.open_dataset(out / "results.nc") as ds:
        np.testing.assert_array_equal(ds["data_X"].values, [[1.0, 0.3]])
        assert np.all(ds["beta"].values[0, :, 0, -1, 0] > ds["beta"].values[0, :, 0, -1, 1])
