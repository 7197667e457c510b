"""One sweep over several processes (`jax.distributed`): two local processes over
127.0.0.1 (CPU collectives over gloo), one global device mesh, process 0 writing
the results. They must equal a single process's bit for bit, and `--resume` must
reuse the chunks an earlier run left. Also: the distributed flags are checked
before JAX starts (one line, exit 2)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import SMALL_SWEEP

from samflow import store
from samflow.config import load_config
from samflow.store import read_results
from samflow.sweep import main
from samflow.sweep._devices import start_distributed
from samflow.sweep._run import run_sweep

ROOT = Path(__file__).resolve().parent.parent

CONFIG = SMALL_SWEEP


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _two_processes(cfg: Path, out: Path, cache: Path, *extra: str) -> list[subprocess.CompletedProcess]:
    """`python -m samflow.sweep` as processes 0 and 1 of one jax.distributed run."""
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_NUM_CPU_DEVICES")}
    env.update(PYTHONPATH=str(ROOT), SAMFLOW_COMPILATION_CACHE=str(cache))
    port = _free_port()
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "samflow.sweep", str(cfg), "--out", str(out), "--quiet",
             "--coordinator", f"127.0.0.1:{port}", "--num-processes", "2", "--process-id", str(i), *extra],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT,
        )
        for i in range(2)
    ]
    done = []
    try:
        for p in procs:
            stdout, stderr = p.communicate(timeout=900)  # a hang guard (at load 10 on 2 cores: 2 min)
            done.append(subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return done


def test_two_processes_resume_and_equal_one_bit_for_bit(tmp_path):
    cfg_path = tmp_path / "mp.toml"
    cfg_path.write_text(CONFIG)
    cfg = load_config(cfg_path)
    # One process, in this test process: the reference, and the chunks an interrupted run leaves.
    partial = tmp_path / "resumed" / ".partial"
    ref = run_sweep(cfg, progress=False, base_dir=tmp_path, checkpoint_dir=partial, code_stamp=store.code_stamp())
    chunks = sorted(partial.glob("*.npz"))
    assert len(chunks) == 3
    for path in chunks[1:]:  # as if interrupted after the first chunk
        path.unlink()

    # Two processes (2 CPU devices each: a global mesh of 4) solve the 2 chunks left.
    p0, p1 = _two_processes(cfg_path, tmp_path / "resumed", tmp_path / "cache", "--resume")
    assert p0.returncode == 0 and p1.returncode == 0, (p0.stderr[-2000:], p1.stderr[-2000:])
    assert "resumed: 1 of 3 chunks already done" in p0.stdout
    assert f"results: {tmp_path / 'resumed' / 'results.nc'}" in p0.stdout
    assert "process 1 of 2: done" in p1.stdout and "results:" not in p1.stdout  # process 0 writes
    assert not partial.exists()  # removed by process 0 once the results were written

    got = read_results(tmp_path / "resumed" / "results.nc")
    assert got.sizes == ref.sizes
    for var in ref.data_vars:
        a, b = ref[var].values, got[var].values
        assert a.dtype == b.dtype and np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), var
    assert np.isfinite(ref["beta"].values).all() and np.ptp(ref["beta"].values) > 0  # not vacuous


@pytest.mark.parametrize(
    "args, message",
    [
        (["--num-processes", "2", "--process-id", "2"], "--process-id must be in 0..1, got 2"),
        (["--num-processes", "0"], "--num-processes must be >= 1, got 0"),
        (["--coordinator", "localhost"], "--coordinator must be host:port"),
        (["--coordinator", "localhost:99999", "--num-processes", "2", "--process-id", "0"],
         "--coordinator must be host:port"),
    ],
)
def test_bad_distributed_flags_one_line_exit_2(tmp_path, capsys, args, message):
    cfg = tmp_path / "mp.toml"
    cfg.write_text(CONFIG)
    assert main([str(cfg), "--out", str(tmp_path / "out"), "--quiet", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "out").exists()


def test_start_distributed_checks_before_jax_starts():
    with pytest.raises(ValueError, match=r"^--process-id must be in 0\.\.2, got -1$"):
        start_distributed("127.0.0.1:1234", 3, -1)


def test_sweep_help_lists_the_distributed_flags(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--distributed", "--coordinator", "--num-processes", "--process-id"):
        assert flag in out


def test_some_distributed_flags_without_a_scheduler_name_the_missing_ones(tmp_path):
    """A fresh user gave only --num-processes 2 and got JAX's "coordinator_address
    should be defined"; the line now names the flags still to give."""
    cfg = tmp_path / "mp.toml"
    cfg.write_text(CONFIG)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OMPI_", "JAX_COORDINATOR"))}
    env["PYTHONPATH"] = str(ROOT)
    r = subprocess.run([sys.executable, "-m", "samflow.sweep", str(cfg), "--out", str(tmp_path / "out"), "--quiet",
                        "--num-processes", "2"], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 2, r.stderr[-1500:]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "missing: --coordinator HOST:PORT, --process-id I" in lines[0], r.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("process_id", [1, 0], ids=["worker", "coordinator"])
def test_a_coordinator_that_never_comes_is_one_line_after_the_timeout(tmp_path, process_id):
    """Process 1 with no process 0 listening waited 307 s in silence, then JAX aborted
    from C++ (exit 134, "another task died"); process 0 without its peers the same.
    Now: after --coordinator-timeout, one line naming the address, exit 2. (The upper
    bound on the wait is a generous one: the test never measures time.)"""
    cfg = tmp_path / "mp.toml"
    cfg.write_text(CONFIG)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OMPI_", "JAX_COORDINATOR"))}
    env["PYTHONPATH"] = str(ROOT)
    address = f"127.0.0.1:{_free_port()}"  # nothing listens there
    r = subprocess.run([sys.executable, "-m", "samflow.sweep", str(cfg), "--out", str(tmp_path / "out"), "--quiet",
                        "--coordinator", address, "--num-processes", "2", "--process-id", str(process_id),
                        "--coordinator-timeout", "3"], capture_output=True, text=True, env=env, timeout=240)
    assert r.returncode == 2, r.stderr[-1500:]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr[-1500:]
    assert lines[0].startswith("error: jax.distributed: ") and address in lines[0], lines[0]
    assert "within 3 s (--coordinator-timeout)" in lines[0]
    assert ("not every process joined" in lines[0]) == (process_id == 0)
    assert not (tmp_path / "out").exists()


def test_coordinator_timeout_must_be_positive():
    with pytest.raises(ValueError, match=r"^--coordinator-timeout must be > 0 seconds, got 0$"):
        start_distributed("127.0.0.1:1234", 2, 1, timeout_s=0)
