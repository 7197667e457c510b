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

CONFIG = """\
name = "resume"
methods = ["linf"]
[data]
mu = [0.2, 0.6, 1.0]
[grid]
alpha = {{ start = 1e-2, stop = 1e1, num = 48 }}
alpha_relative_to_rho = true
rho = [0.05]
[time]
t1 = 1e3
num = 10
[solver]
chunk_size = 3
[output]
figures = {figures}
"""

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
    cfg.write_text(CONFIG.format(figures="false"))
    full = tmp_path / "full"
    assert main([str(cfg), "--out", str(full), "--quiet"]) == 0

    killed = tmp_path / "killed"
    proc = _run(cfg, killed, wait=False)
    partial = killed / ".partial"
    deadline = time.time() + 300
    while time.time() < deadline and len(list(partial.glob("*.npz"))) < 2 and proc.poll() is None:
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    n_done = len(list(partial.glob("*.npz")))
    assert 2 <= n_done < 16, n_done  # killed midway: 16 chunks of 3 cells
    assert not (killed / "results.nc").exists()

    # Without --resume the CLI refuses, naming the flags.
    r = _run(cfg, killed)
    assert r.returncode == 2 and "--resume" in r.stderr and "--overwrite" in r.stderr

    r = _run(cfg, killed, "--resume")
    assert r.returncode == 0, r.stderr
    assert not partial.exists()
    _same(full / "results.nc", killed / "results.nc")


def test_resume_refuses_partial_results_of_another_config(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text(CONFIG.format(figures="false"))
    out = tmp_path / "o"
    (out / ".partial").mkdir(parents=True)
    (out / ".partial" / "sweep.key").write_text("something else")
    r = _run(cfg, out, "--resume")
    assert r.returncode == 2 and "different config" in r.stderr
    assert not (out / "results.nc").exists()


def test_same_config_twice_is_deterministic_and_overwrite_is_explicit(tmp_path, capsys):
    cfg = tmp_path / "c.toml"
    cfg.write_text(CONFIG.format(figures="false"))
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
