"""Issue 25, items 3, 11, 12: no run mixes its numbers with another's, no damaged file
ends in a traceback.

Item 3: a second sweep started (with --overwrite, --resume or no flag) while another
writes the same folder took the first's chunks as its own (|beta| off by up to 1.8)
and killed the first. Now the output carries a lock naming the live run, and every
chunk file carries its config key and code stamp, checked when it is loaded. The
"live run" of these tests is a `sleep` subprocess whose pid is written into the lock
(as the sweep writes its own): nothing depends on timing.
Item 11: a truncated chunk under `.partial/` is named in one note and recomputed.
Item 12: a results file another process holds open (HDF5 file lock) is reported as
locked, not as unreadable.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from samflow._util import lock as _lock
from samflow._util.lock import LockedError, lock_owner_text, take_lock
from samflow.config import ConfigError, load_config
from samflow.flows import Method
from samflow.merge import main as merge_main
from samflow.solver import Trajectory
from samflow.sweep import _cli, main, run_sweep
from samflow.sweep._checkpoint import ChunkCheckpoint
from test_stamps import _one_line_error as one_line_error, config  # the sweep of 6 cells, the one-line check

LOCK = ".results.lock"
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def cfg(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text(config(t1=1e3))  # linf, 6 cells in chunks of 2
    return p


@pytest.fixture
def live_pid():
    """The pid of a live process of this host (a `sleep`), killed after the test."""
    proc = subprocess.Popen(["sleep", "600"])
    yield proc.pid
    proc.kill()
    proc.wait()


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()  # reaped: the pid no longer names a process
    return proc.pid


def _hold(folder: Path, pid: int, what: str = "sweep", name: str = LOCK) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(lock_owner_text(pid, what))
    return folder / name


def _sweep(cfg: Path, out: Path, *extra: str) -> int:
    return main([str(cfg), "--out", str(out), "--quiet", *extra])


def _tree(folder: Path) -> dict:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _piece(n: int, value: float) -> Trajectory:
    """A Trajectory of n cells with every field `value` (shapes of d = 3, L = 2, 10 save times)."""
    shapes = {"collapse_direction": (3,), "slide_time": (2, 3), "ts": (10,), "t": (10,), "loss": (10,),
              "W": (10, 2, 3), "beta": (10, 3)}
    return Trajectory(**{f.name: np.full((n,) + shapes.get(f.name, ()), value)
                         for f in dataclasses.fields(Trajectory)})


# ---------------------------------------------------------------- the lock itself


def test_lock_is_exclusive_names_its_owner_and_is_released(tmp_path, live_pid):
    path = tmp_path / "x.lock"
    with take_lock(path, "sweep") as lock:
        owner = json.loads(path.read_text())
        assert owner["pid"] == os.getpid() and owner["host"] == socket.gethostname() and owner["what"] == "sweep"
        assert lock.note is None
        with pytest.raises(LockedError, match=f"another sweep, pid {os.getpid()}, started at "):
            take_lock(path, "merge")  # this live process holds it
    assert not path.exists()
    _hold(tmp_path, live_pid, "merge", "x.lock")
    with pytest.raises(LockedError) as err:
        take_lock(path, "sweep")
    assert f"another merge, pid {live_pid}, started at " in str(err.value) and "\n" not in str(err.value)
    assert json.loads(path.read_text())["pid"] == live_pid  # left alone


def test_a_dead_owners_lock_is_taken_over_with_a_note(tmp_path):
    dead = _dead_pid()
    path = _hold(tmp_path, dead, name="x.lock")
    lock = take_lock(path, "sweep")
    assert f"from pid {dead}" in lock.note and "no longer runs" in lock.note
    assert json.loads(path.read_text())["pid"] == os.getpid()
    assert [p.name for p in tmp_path.iterdir()] == ["x.lock"]  # the stale one is gone, nothing left aside
    lock.release()
    assert not path.exists()


def test_a_reused_pid_is_not_the_owner(tmp_path, live_pid, monkeypatch):
    """The lock records its process's start time: a live process with the same pid but
    another start time (the pid reused after the owner died) does not hold it."""
    path = _hold(tmp_path, live_pid, name="x.lock")
    owner = json.loads(path.read_text())
    if owner["proc_start"] is None:
        pytest.skip("no /proc on this system: process start times are not recorded")
    owner["proc_start"] = str(int(owner["proc_start"]) - 1)
    path.write_text(json.dumps(owner))
    assert "no longer runs" in take_lock(path, "sweep").note


def test_a_lock_of_another_host_is_honoured_and_names_the_file(tmp_path, live_pid):
    path = _hold(tmp_path, _dead_pid(), name="x.lock")
    owner = json.loads(path.read_text())
    path.write_text(json.dumps({**owner, "host": "elsewhere"}))
    with pytest.raises(LockedError) as err:
        take_lock(path, "sweep")
    assert "on host elsewhere" in str(err.value) and f"delete {path}" in str(err.value)
    path.write_text("")  # half written, or damaged
    with pytest.raises(LockedError, match="cannot be read; if no run is writing here, delete it"):
        take_lock(path, "sweep")


def test_a_takeover_never_removes_a_fresh_lock(tmp_path, live_pid, monkeypatch):
    """Two runs taking over one stale lock: the one that finds a fresh lock where the
    stale one was (the other run took it) puts it back and refuses."""
    path = _hold(tmp_path, _dead_pid(), name="x.lock")
    fresh = lock_owner_text(live_pid, "sweep")
    real_rename = os.rename

    def other_run_first(src, dst):  # the other run replaced the stale lock just before our rename
        Path(src).write_text(fresh)
        monkeypatch.setattr(_lock.os, "rename", real_rename)
        real_rename(src, dst)

    monkeypatch.setattr(_lock.os, "rename", other_run_first)
    with pytest.raises(LockedError, match=f"pid {live_pid}"):
        take_lock(path, "sweep")
    assert path.read_text() == fresh and [p.name for p in tmp_path.iterdir()] == ["x.lock"]


# ---------------------------------------------------------------- item 3: the sweep honours it


@pytest.mark.parametrize("flags", [(), ("--overwrite",), ("--resume",), ("--resume", "--overwrite")])
def test_a_second_sweep_refuses_while_another_writes_the_folder(cfg, tmp_path, live_pid, capsys, flags):
    out = tmp_path / "o"
    (out / ".partial").mkdir(parents=True)  # the first run's chunks so far
    (out / ".partial" / "linf-000000.npz").write_bytes(b"the first run's chunk")
    _hold(out, live_pid)
    before = _tree(out)
    assert _sweep(cfg, out, *flags) == 2
    line = one_line_error(capsys)
    assert f"{out}: another sweep, pid {live_pid}, started at " in line and "is writing here" in line
    assert "--resume" not in line  # not "partial results of an interrupted run"
    assert _tree(out) == before  # nothing read into, removed or written


def test_a_slice_locks_only_its_own_file(cfg, tmp_path, live_pid, capsys):
    """Slices of one grid run side by side into one folder: slice 1 runs while slice 0
    is held; slice 0 is refused."""
    out = tmp_path / "o"
    _hold(out / "slices", live_pid, name=".slice-0000-of-0002.lock")
    assert _sweep(cfg, out, "--num-slices", "2", "--slice-index", "0") == 2
    assert f"another sweep, pid {live_pid}" in one_line_error(capsys)
    assert _sweep(cfg, out, "--num-slices", "2", "--slice-index", "1") == 0
    assert (out / "slices" / "slice-0001-of-0002.nc").exists()
    assert sorted(p.name for p in (out / "slices").iterdir() if p.name.startswith(".")) == [".slice-0000-of-0002.lock"]


def test_a_dead_sweeps_lock_is_taken_over_and_the_run_completes(cfg, tmp_path, capsys):
    out = tmp_path / "o"
    dead = _dead_pid()
    _hold(out, dead)
    assert _sweep(cfg, out) == 0
    err = capsys.readouterr().err
    assert f"note: took over the lock of {out} from pid {dead}" in err
    assert (out / "results.nc").exists() and not (out / LOCK).exists()


@pytest.mark.parametrize("ending", ["error", "interrupt", "crash"])
def test_the_lock_is_released_however_the_run_ends(cfg, tmp_path, monkeypatch, capsys, ending):
    seen = []

    def run_plan(*args, **kwargs):
        seen.append(json.loads((out / LOCK).read_text())["pid"])  # held while it runs
        raise {"error": ConfigError("bad"), "interrupt": KeyboardInterrupt(), "crash": RuntimeError("bug")}[ending]

    out = tmp_path / "o"
    monkeypatch.setattr(_cli, "run_plan", run_plan)
    if ending == "crash":
        with pytest.raises(RuntimeError):
            _sweep(cfg, out)
    else:
        assert _sweep(cfg, out) == {"error": 2, "interrupt": 130}[ending]
    assert seen == [os.getpid()] and not (out / LOCK).exists()


# The sweep of `_held_at_the_checks`, run as `python -m samflow.sweep` is: its memory check
# (after the lock is taken, before anything is solved) says "locked" and waits on stdin.
_WAITS_AT_THE_CHECKS = """
import runpy, signal, sys
from samflow.sweep import _cli
signal.signal(signal.SIGINT, signal.default_int_handler)  # a pytest-xdist worker's children inherit SIG_IGN

def plan_memory(*args):
    print("locked", flush=True)
    sys.stdin.read()  # until the test's signal: nothing here depends on timing

_cli.plan_memory = plan_memory
sys.argv = ["samflow.sweep", *sys.argv[1:]]
runpy.run_module("samflow.sweep", run_name="__main__")
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_before_the_solve_releases_the_lock(cfg, tmp_path, sig):
    """SIGTERM before the solve started killed the sweep with its lock left behind (the
    handler was set only around the solve); Ctrl-C there ended in a traceback."""
    out = tmp_path / "o"
    proc = subprocess.Popen(
        [sys.executable, "-c", _WAITS_AT_THE_CHECKS, str(cfg), "--out", str(out), "--quiet"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert proc.stdout.readline().strip() == "locked", proc.stderr.read()
        assert json.loads((out / LOCK).read_text())["pid"] == proc.pid  # held from here on
        proc.send_signal(sig)
        code = proc.wait(timeout=300)
        err = proc.stderr.read()
    finally:
        proc.kill()
        proc.communicate()
    assert code == 128 + sig, err
    assert err.strip() == f"interrupted ({sig.name}) before the solve started; rerun the command", err
    assert not (out / LOCK).exists() and not out.exists()  # the lock, and the folder it made, are gone


def test_a_refused_sweep_leaves_no_folder_it_made(cfg, tmp_path, monkeypatch, capsys):
    """The lock makes the output folder; a run refused after it (here: results that
    cannot fit in memory) removes the folders it made again."""
    from samflow.sweep import _devices

    monkeypatch.setattr(_devices, "available_memory_bytes", lambda: 1000)
    out = tmp_path / "deep" / "o"
    assert _sweep(cfg, out) == 2
    assert "memory" in one_line_error(capsys) and not (tmp_path / "deep").exists()


def test_merge_and_sweep_share_the_results_lock(tmp_path, live_pid, capsys):
    out = tmp_path / "o"
    _hold(out, live_pid)
    assert merge_main([str(out), "--no-figures"]) == 2
    assert f"another sweep, pid {live_pid}" in one_line_error(capsys)


# ---------------------------------------------------------------- item 3: every chunk carries its key and stamp


def test_a_chunk_of_another_config_or_stamp_is_refused_when_loaded(tmp_path):
    """The folder's key was checked once at start; a chunk another run wrote into it
    later is caught when it is loaded, by its own key and stamp."""
    ChunkCheckpoint(tmp_path, "key-A", "stamp-1").save(Method.LINF, 0, _piece(2, 1.0))
    (tmp_path / "sweep.key").write_text("key-B")  # the other run took the folder over
    with pytest.raises(ConfigError) as err:
        ChunkCheckpoint(tmp_path, "key-B", "stamp-1").load(Method.LINF, 0)
    assert str(tmp_path / "linf-000000.npz") in str(err.value) and "another config" in str(err.value)
    (tmp_path / "sweep.key").write_text("key-A")
    with pytest.raises(ConfigError, match="code stamp 'stamp-1', this code is 'stamp-2'"):
        ChunkCheckpoint(tmp_path, "key-A", "stamp-2").load(Method.LINF, 0)
    cp = ChunkCheckpoint(tmp_path, "key-A", "stamp-2", accept_other_stamp=True)
    piece, switches = cp.load(Method.LINF, 0)
    np.testing.assert_array_equal(piece.beta, np.ones((2, 10, 3)))
    assert switches is None  # stored without switch times
    assert cp.other_stamps == ["stamp-1"]


# ---------------------------------------------------------------- item 11: a damaged chunk


def test_a_damaged_chunk_is_named_and_recomputed(cfg, tmp_path, capsys):
    out = tmp_path / "o"
    fresh = run_sweep(load_config(cfg), progress=False, checkpoint_dir=tmp_path / "fresh")
    run_sweep(load_config(cfg), progress=False, checkpoint_dir=out / ".partial")
    chunk = out / ".partial" / "linf-000001.npz"
    chunk.write_bytes(chunk.read_bytes()[:200])  # truncated (a full disk, a copy cut short)
    capsys.readouterr()
    assert _sweep(cfg, out, "--resume") == 0
    got = capsys.readouterr()
    err = got.err
    notes = [line for line in err.splitlines() if "damaged" in line]
    assert notes == [notes[0]] and str(chunk) in notes[0] and "recomputed" in notes[0] and "Traceback" not in err
    # 3 chunks, 1 of them damaged: 2 done (it said 3 of 3, then recomputed one)
    assert "resumed: 2 of 3 chunks already done (1 more damaged: recomputed)" in got.out.splitlines()
    with xr.open_dataset(out / "results.nc") as ds:
        for name in ("beta", "status", "num_steps"):  # the recomputed chunk: bit for bit a fresh run's
            np.testing.assert_array_equal(ds[name].values, fresh[name].values, err_msg=name)


def test_a_checkpoint_folder_deleted_during_the_run_is_made_again(cfg, tmp_path, monkeypatch, capsys):
    """Deleting .partial/ by hand while the sweep ran ended it in a traceback (the next
    chunk's write found no folder); now one note, the folder is made again (with its
    key and stamp) and the results are a fresh run's."""
    import shutil

    out = tmp_path / "o"
    fresh = run_sweep(load_config(cfg), progress=False, checkpoint_dir=tmp_path / "fresh")
    save, seen = ChunkCheckpoint.save, []

    def save_then_delete(self, method, k, piece, p=None, switches=None):
        save(self, method, k, piece, p, switches=switches)
        seen.append(sorted(p.name for p in self.folder.iterdir()))
        if k == 0:
            shutil.rmtree(self.folder)  # by hand, between two chunks

    monkeypatch.setattr(ChunkCheckpoint, "save", save_then_delete)
    capsys.readouterr()
    assert _sweep(cfg, out) == 0
    err = capsys.readouterr().err
    assert err.strip() == (f"note: the checkpoint folder {out / '.partial'} was deleted during the run; made again "
                           "(this run's results stay whole)"), err
    # chunk 1 went into the folder made again, with the key and stamp a --resume checks
    assert seen[1] == ["code.stamp", "linf-000001.npz", "sweep.key"] and len(seen) == 3
    with xr.open_dataset(out / "results.nc") as ds:
        for name in ("beta", "status", "num_steps"):
            np.testing.assert_array_equal(ds[name].values, fresh[name].values, err_msg=name)


# ---------------------------------------------------------------- item 12: a results file held open


@pytest.fixture
def held_open(tmp_path):
    """A results file held open for writing by another process (h5py, as a notebook would)."""
    path = tmp_path / "o" / "results.nc"
    path.parent.mkdir()
    xr.Dataset({"a": ("x", np.arange(3.0))}).to_netcdf(path, engine="h5netcdf")
    code = f"import h5py, sys; f = h5py.File({str(path)!r}, 'a'); print('open', flush=True); sys.stdin.read()"
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "open"  # it holds the file from here on
    yield path
    proc.stdin.close()
    proc.wait()


def test_a_results_file_locked_by_another_process_is_said_so(cfg, held_open, capsys):
    assert _sweep(cfg, held_open.parent, "--resume") == 2
    line = one_line_error(capsys)
    assert f"{held_open} is locked by another process" in line and "--overwrite" not in line
    (held_open.parent / "slices").mkdir()
    assert merge_main([str(held_open.parent), "--resume", "--no-figures"]) == 2
    assert f"{held_open} is locked by another process" in one_line_error(capsys)


# ---------------------------------------------------------------- siblings: the other commands that write a folder


@pytest.mark.parametrize("command, config, lock", [
    ("samflow.experiments.cnn_study", "cnn_study.toml", LOCK),
    ("samflow.experiments.cnn", "cnn_mnist.toml", LOCK),
    ("samflow.atlas", "atlas.toml", ".atlas.lock"),
])
def test_the_other_commands_refuse_while_another_run_writes_the_folder(tmp_path, live_pid, capsys, command, config, lock):
    import importlib

    main_of = importlib.import_module(command).main
    out = tmp_path / "o"
    _hold(out, live_pid, "CNN study", lock)
    (out / "runs").mkdir()
    (out / "runs" / "the-first-study's-run.npz").write_bytes(b"kept")
    before = _tree(out)
    flags = ["--overwrite"] if command != "samflow.atlas" else []
    assert main_of([str(ROOT / "configs" / config), "--out", str(out), *flags]) == 2
    assert f"another CNN study, pid {live_pid}" in one_line_error(capsys)
    assert _tree(out) == before  # --overwrite deleted the runs the first study was storing


def test_a_stored_cnn_run_carries_its_fingerprint_and_a_damaged_one_is_redone(tmp_path, capsys):
    from samflow.experiments import cnn_study as cs

    run = {**{k: np.arange(3.0) for k in cs.METRICS}, "status": "ok", "message": "", "wall_s": 1.5}
    path = tmp_path / "runs" / "a.npz"
    cs._save_run(path, run, "fp-A", "stamp-1")
    np.testing.assert_array_equal(cs._load_run(path, "fp-A", "stamp-1")["test_accuracy"], np.arange(3.0))
    with pytest.raises(ConfigError, match=f"{path} holds a run of another config"):
        cs._load_run(path, "fp-B", "stamp-1")  # written into this folder by another study
    path.write_bytes(path.read_bytes()[:100])
    capsys.readouterr()
    assert cs._load_run(path, "fp-A", "stamp-1") is None
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"note: stored run {path} is damaged") and err.endswith("it is run again") and "\n" not in err


# ---------------------------------------------------------------- the CNN study's runs carry the code stamp (item 4's sibling)


def test_a_stored_cnn_run_of_other_code_is_refused_naming_both_stamps(tmp_path):
    """With optax (or JAX, samflow...) upgraded, --resume mixed the old runs with the new
    ones silently: a run carries its code stamp, the sweep's plus optax's version."""
    import importlib.metadata

    from samflow import store
    from samflow.experiments import cnn_study as cs

    stamp = store.code_stamp(cs.STAMP_EXTRA)
    optax = importlib.metadata.version("optax") if importlib.util.find_spec("optax") else "none"
    assert stamp == f"{store.code_stamp()} optax {optax}"  # one implementation: the sweep's stamp, plus optax
    run = {**{k: np.arange(3.0) for k in cs.METRICS}, "status": "ok", "message": "", "wall_s": 1.5}
    path = tmp_path / "runs" / "a.npz"
    cs._save_run(path, run, "fp-A", "stamp-1")
    with np.load(path) as z:
        assert str(z["code_stamp"]) == "stamp-1"
    with pytest.raises(ConfigError) as err:
        cs._load_run(path, "fp-A", "stamp-2")
    line = str(err.value)
    assert line.startswith(f"{path} holds a run made under code stamp 'stamp-1', this code is 'stamp-2'")
    assert "--overwrite" in line and "\n" not in line
    with np.load(path) as z:  # a run stored before runs carried a stamp: judged by runs/fingerprint.json
        old = {name: z[name] for name in z.files if name != "code_stamp"}
    np.savez(path, **old)
    np.testing.assert_array_equal(cs._load_run(path, "fp-A", "stamp-2")["test_accuracy"], np.arange(3.0))


@pytest.mark.parametrize("recorded", ["samflow 0.0.1 git abc optax 0.0.1", None])
def test_cnn_study_resume_refuses_runs_of_other_code_in_one_line(tmp_path, capsys, recorded):
    """--resume of a study whose runs/fingerprint.json names another code stamp (or none:
    runs made before stamps) is refused before anything is trained, runs untouched."""
    from samflow import store
    from samflow.experiments import cnn_study as cs
    from samflow.experiments.cnn_study_config import load_study_config
    from samflow.sweep import NO_STAMP

    config = ROOT / "configs" / "cnn_study.toml"
    out = tmp_path / "o"
    kept = {"fingerprint": cs._fingerprint(load_study_config(config).plan().config)}
    if recorded is not None:
        kept["code_stamp"] = recorded
    (out / "runs").mkdir(parents=True)
    (out / "runs" / "fingerprint.json").write_text(json.dumps(kept))
    (out / "runs" / "a.npz").write_bytes(b"a finished run")
    before = _tree(out)
    assert cs.main([str(config), "--out", str(out), "--resume", "--quiet", "--no-figures"]) == 2
    line = one_line_error(capsys)
    old = NO_STAMP if recorded is None else recorded
    assert f"{out / 'runs'} holds runs made under code stamp '{old}', this code is '{store.code_stamp(cs.STAMP_EXTRA)}'" in line
    assert "--overwrite" in line
    assert _tree(out) == before
