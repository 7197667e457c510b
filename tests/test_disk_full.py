"""A full disk: one line naming the folder and the bytes needed, exit code 2, no
temporary file left, and `--resume` completes once there is space again.

Before: a sweep into a 1 MB tmpfs printed a 51-66-line traceback, and crashed
(exit 139) when results.nc was the write that failed (HDF5 writing into a full
disk), leaving its temporary file. The writes are made to fail here by the same
OSError(ENOSPC) the kernel gives, at each write site of a sweep.
"""

from __future__ import annotations

import errno
import pickle
import re
import shutil
from collections import namedtuple
from pathlib import Path

import pytest
import xarray as xr
from helpers import SMALL_SWEEP

from samflow._util import io as _io
from samflow._util.io import DiskFullError, atomic_path, atomic_write_bytes
from samflow.sweep import _checkpoint, main

CONFIG = SMALL_SWEEP + "switch_times = false\n"  # 3 checkpoints of 2 cells
ONE_LINE = re.compile(r"error: no space left in (\S+) for (\S+): it needs (about|more than) [\d.]+ (bytes|KiB|MiB|GiB), "
                      r"[\d.]+ (bytes|KiB|MiB|GiB) free; (.+)")
Usage = namedtuple("Usage", "total used free")


class _FullFile:
    """An open file whose write stores half the bytes, then fails as a full disk does."""

    def __init__(self, path, mode="wb"):
        self.fh = open(path, mode)

    def write(self, data):
        self.fh.write(bytes(memoryview(data))[: len(memoryview(data)) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    def __getattr__(self, name):
        return getattr(self.fh, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.fh.close()


def _fail_writes(monkeypatch, module, name_start: str, after: int = 0) -> None:
    """`open` in `module` gives a full disk for the temporaries of files named `name_start`...,
    after `after` such writes have succeeded."""
    seen = []

    def fake_open(path, mode="r", *args, **kwargs):
        if "w" in mode and Path(path).name.startswith(f".{name_start}"):
            seen.append(path)
            if len(seen) > after:
                return _FullFile(path, mode)
        return open(path, mode, *args, **kwargs)

    monkeypatch.setattr(module, "open", fake_open, raising=False)


def _temporaries(folder: Path) -> list[str]:
    return [str(p) for p in folder.rglob("*.tmp")]


def test_a_write_that_runs_out_of_space_is_one_line_and_leaves_nothing(tmp_path, monkeypatch):
    target = tmp_path / "r.bin"
    atomic_write_bytes(b"old", target)
    _fail_writes(monkeypatch, _io, "r.bin")
    with pytest.raises(DiskFullError) as exc:
        atomic_write_bytes(b"x" * 4096, target)
    assert str(exc.value).startswith(f"no space left in {tmp_path} for r.bin: it needs about 4 KiB, ")
    assert exc.value.need == 4096 and exc.value.folder == tmp_path and exc.value.errno == errno.ENOSPC
    assert target.read_bytes() == b"old" and sorted(p.name for p in tmp_path.iterdir()) == ["r.bin"]
    # A write of unknown size says how far it got (the half _FullFile stored).
    with pytest.raises(DiskFullError, match=r"for r\.bin: it needs more than 1 KiB, "):
        with atomic_path(target) as tmp, _io.open(tmp, "wb") as fh:
            fh.write(b"y" * 2048)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.bin"]


def test_a_file_larger_than_the_free_space_is_refused_before_writing(tmp_path, monkeypatch):
    monkeypatch.setattr(shutil, "disk_usage", lambda p: Usage(10**6, 10**6 - 1000, 1000))
    with pytest.raises(DiskFullError, match=rf"^no space left in {re.escape(str(tmp_path))} for a\.nc: it needs "
                                            r"about 1\.95 KiB, 1000 bytes free$"):
        atomic_write_bytes(b"z" * 2000, tmp_path / "a.nc")
    assert list(tmp_path.iterdir()) == []  # not even a temporary was made
    atomic_write_bytes(b"z" * 1000, tmp_path / "b.nc")  # exactly the free space fits


def test_disk_full_error_survives_a_worker_process(tmp_path):
    """reproduce_figures --jobs N re-raises a worker's error in the parent (pickled)."""
    err = pickle.loads(pickle.dumps(DiskFullError(tmp_path / "f.png", 5000, 10, 0)))
    assert isinstance(err, DiskFullError) and err.folder == tmp_path and err.need == 5000
    assert str(err) == f"no space left in {tmp_path} for f.png: it needs about 4.88 KiB, 10 bytes free"


def _sweep(tmp_path: Path, capsys, *extra: str) -> tuple[int, str, str]:
    cfg = tmp_path / "c.toml"
    cfg.write_text(CONFIG)
    code = main([str(cfg), "--out", str(tmp_path / "out"), "--quiet", *extra])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("where", ["chunk", "results"])
def test_sweep_out_of_space_then_resume_completes(tmp_path, capsys, monkeypatch, where):
    if where == "chunk":  # the second of three checkpoints
        _fail_writes(monkeypatch, _checkpoint, "gd-", after=1)
    else:
        _fail_writes(monkeypatch, _io, "results.nc")
    code, _, err = _sweep(tmp_path, capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    m = ONE_LINE.fullmatch(lines[0])
    assert m, lines[0]
    out = tmp_path / "out"
    kept = sorted(p.name for p in (out / ".partial").glob("*.npz"))
    if where == "chunk":
        assert (m.group(1), m.group(2)) == (str(out / ".partial"), "gd-000001.npz")
        assert m.group(6) == "free space, then rerun with --resume (1 of 3 chunks are kept)"
        assert kept == ["gd-000000.npz"]
    else:
        assert (m.group(1), m.group(2)) == (str(out), "results.nc")
        assert m.group(6) == "free space, then rerun with --resume (3 of 3 chunks are kept)"
        assert kept == ["gd-000000.npz", "gd-000001.npz", "gd-000002.npz"]
    assert _temporaries(out) == [] and not (out / "results.nc").exists()

    monkeypatch.undo()  # space again
    code, stdout, err = _sweep(tmp_path, capsys, "--resume")
    assert code == 0, err
    assert f"resumed: {len(kept)} of 3 chunks already done" in stdout
    with xr.open_dataset(out / "results.nc", engine="h5netcdf") as ds:
        assert ds.sizes["alpha"] == 3 and ds.sizes["rho"] == 2 and (ds["status"] == 0).all()
    assert _temporaries(out) == [] and not (out / ".partial").exists()


def test_sweep_that_cannot_fit_is_refused_before_solving(tmp_path, capsys, monkeypatch):
    """The checkpoints and results file are bounded as their memory is (results_bytes):
    2 x 6 cells x 1 method x 8 (8 (6 + 3 + 3) + 6 + 3 + 6) bytes = 10656 bytes (L = 2, d = 3, 8 save times)."""
    from samflow.sweep import results_bytes

    assert results_bytes(6, 1, 2, 3, 8, summary=False) == 2 * 6 * 8 * (8 * (6 + 3 + 3) + 6 + 3 + 6)
    need = results_bytes(6, 1, 2, 3, 8, summary=False)
    monkeypatch.setattr(shutil, "disk_usage", lambda p: Usage(10**9, 10**9, need - 1))
    code, stdout, err = _sweep(tmp_path, capsys)
    assert code == 2 and stdout == ""
    out = tmp_path / "out"
    assert err.strip().splitlines() == [
        f"error: no space left in {out} for this run: its checkpoints and results need about "
        f"{_io.size_text(need)}, {_io.size_text(need - 1)} free; free space, or choose another --out"
    ]
    assert not out.exists()


def test_no_room_even_for_the_temporary_is_the_same_one_line(tmp_path, monkeypatch):
    import tempfile

    def no_inode(*args, **kwargs):
        raise OSError(errno.EDQUOT, "Disk quota exceeded")

    monkeypatch.setattr(tempfile, "mkstemp", no_inode)
    with pytest.raises(DiskFullError, match=rf"^no space left in {re.escape(str(tmp_path))} for c\.txt: it needs "
                                            r"more space, [\d.]+ (bytes|KiB|MiB|GiB) free$"):
        with atomic_path(tmp_path / "c.txt"):
            pass
    assert list(tmp_path.iterdir()) == []


def test_reproduce_figures_full_disk_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch):
    import importlib.util

    from samflow import figures

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("reproduce_figures", root / "scripts" / "reproduce_figures.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)

    def full(out, **kwargs):
        raise DiskFullError(Path(out) / "banded.png", 300_000, 1000)

    monkeypatch.setattr(figures, "run_all", full)
    assert script.main(["--out", str(tmp_path / "figs"), "--only", "banded", "--jobs", "1"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.splitlines() == [
        f"error: no space left in {tmp_path / 'figs'} for banded.png: it needs about 293 KiB, 1000 bytes free; "
        "free space, then rerun"
    ]
