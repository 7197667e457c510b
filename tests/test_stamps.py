"""Issue 12, cases 6 and 11: every stamp that guards reuse.

Case 6: partial chunks, finished results and slices carry a code stamp
(samflow version, git commit + dirty marker, source hash, the versions of
`samflow.store.STAMP_PACKAGES`); `--resume` and the merge refuse to combine results
made under different stamps (exit 2, one line naming both), unless an explicit
flag accepts it, and then the result records both.
Case 11: `--resume` on complete, matching results succeeds and changes nothing.
A code change is simulated by monkeypatching `samflow.store.code_stamp`.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import re
from pathlib import Path

import numpy as np
import pytest

import samflow
from samflow import store
from samflow.config import load_config
from samflow.merge import main as merge_main, slice_file_name
from samflow.store import read_results
from samflow.sweep import NO_STAMP, main, run_sweep

from helpers import sweep_toml


def config(t1: float = 1e3) -> str:
    return sweep_toml("stamps", ["linf"], alpha=[0.01, 0.1, 0.3, 1.0, 3.0, 10.0], rho=[0.05], t1=t1, num=10,
                      solver={"chunk_size": 2}, output={"figures": False, "switch_times": False})
OLD, NEW = "samflow 0.1.0 git aaaaaaaaaaaa src 111111111111 (test)", "samflow 0.1.0 git bbbbbbbbbbbb src 222222222222 (test)"


@pytest.fixture
def cfg(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text(config(t1=1e3))
    return p


def _stamp(monkeypatch, value: str) -> None:
    monkeypatch.setattr(store, "code_stamp", lambda: value)


def _run(cfg: Path, out: Path, *extra: str) -> int:
    return main([str(cfg), "--out", str(out), "--quiet", *extra])


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    return lines[0]


def _fingerprint(path: Path):
    st = path.stat()
    return st.st_mtime_ns, hashlib.sha256(path.read_bytes()).hexdigest()


def _killed_after_first_chunks(cfg: Path, out: Path, stamp: str, keep: int = 1) -> Path:
    """The partial folder a run under `stamp` leaves when killed after `keep` of its 3 chunks."""
    partial = out / ".partial"
    run_sweep(load_config(cfg), progress=False, checkpoint_dir=partial, code_stamp=stamp)
    chunks = sorted(partial.glob("*.npz"))
    assert len(chunks) == 3  # 6 cells, chunks of 2
    for c in chunks[keep:]:
        c.unlink()
    return partial


def _finished_run(cfg: Path, tmp_path: Path, monkeypatch) -> tuple:
    """A finished run of `cfg` under OLD into tmp_path/o: (out, its results.nc, that file's fingerprint)."""
    _stamp(monkeypatch, OLD)
    out = tmp_path / "o"
    assert _run(cfg, out) == 0
    path = out / "results.nc"
    return out, path, _fingerprint(path)


# ---------------------------------------------------------------- the stamp itself


def test_the_stamp_names_the_version_of_the_code_running_not_the_installed_metadata(monkeypatch):
    """A checkout run on PYTHONPATH beside an older editable install stamped its results
    'samflow 0.1.0' while its code was 0.2.0 (the metadata is written at install time)."""
    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda p: "0.0.1" if p == "samflow" else real(p))
    assert store.code_stamp().startswith(f"samflow {samflow.__version__} git ")
    assert store.package_versions()["samflow"] == samflow.__version__ != "0.0.1"


def test_code_stamp_names_version_commit_sources_and_packages():
    s = store.code_stamp()
    assert s.startswith(f"samflow {samflow.__version__} git ")
    commit = re.search(r" git (\S+) ", s).group(1)
    assert commit == "unknown" or re.fullmatch(r"[0-9a-f]{12}(-dirty)?", commit), commit
    for p in ("jax", "jaxlib", "diffrax", "numpy"):
        assert f" {p} {importlib.metadata.version(p)}" in s
    # The source hash covers every .py file of the package (so any uncommitted edit changes it).
    root = Path(samflow.__file__).resolve().parent
    h = hashlib.sha256()
    for p in sorted(root.rglob("*.py")):
        h.update(p.relative_to(root).as_posix().encode() + b"\0" + p.read_bytes() + b"\0")
    assert f" src {h.hexdigest()[:12]} " in s
    assert store.code_stamp() == s  # deterministic


def test_code_stamp_covers_every_package_that_sets_the_numbers(monkeypatch):
    """Issue 25, item 4: the events root-find with optimistix and lineax and the fields
    are equinox modules, but the stamp named only jax, jaxlib, diffrax and numpy: with
    those upgraded, --resume mixed chunks silently. One list serves the stamp and the
    key of the stored programs."""
    from samflow._util import cache as _cache

    assert store.STAMP_PACKAGES is _cache.PROGRAM_PACKAGES
    assert {"equinox", "optimistix", "lineax"} <= set(store.STAMP_PACKAGES)
    before = store.code_stamp()
    real = importlib.metadata.version
    for p in store.STAMP_PACKAGES:
        assert f" {p} " in f"{before} "
        monkeypatch.setattr(importlib.metadata, "version", lambda name, p=p: "99.0" if name == p else real(name))
        assert store.code_stamp() != before, p  # an upgrade of any of them is another stamp
    monkeypatch.setattr(importlib.metadata, "version", real)
    assert set(store.package_versions()) == {"samflow", "xarray", *store.STAMP_PACKAGES}


# ---------------------------------------------------------------- case 6: partial chunks


def test_resume_after_a_code_change_is_refused_naming_both_stamps(cfg, tmp_path, monkeypatch, capsys):
    out = tmp_path / "o"
    partial = _killed_after_first_chunks(cfg, out, OLD)
    before = {p.name: _fingerprint(p) for p in partial.iterdir()}
    _stamp(monkeypatch, NEW)
    assert _run(cfg, out, "--resume") == 2
    line = _one_line_error(capsys)
    assert OLD in line and NEW in line and "--resume-any-version" in line and "--overwrite" in line
    assert not (out / "results.nc").exists()
    assert {p.name: _fingerprint(p) for p in partial.iterdir()} == before  # nothing touched


def test_resume_any_version_combines_and_records_both_stamps(cfg, tmp_path, monkeypatch, capsys):
    out = tmp_path / "o"
    _killed_after_first_chunks(cfg, out, OLD)
    _stamp(monkeypatch, NEW)
    assert _run(cfg, out, "--resume-any-version") == 0
    assert "record both" in capsys.readouterr().err
    ds = read_results(out / "results.nc")
    assert ds.attrs["code_stamp"] == NEW and json.loads(ds.attrs["resumed_code_stamps"]) == [OLD]
    assert not (out / ".partial").exists()


def test_resume_under_the_same_stamp_records_one_stamp_and_equals_a_fresh_run(cfg, tmp_path, monkeypatch):
    _stamp(monkeypatch, OLD)
    out, fresh = tmp_path / "o", tmp_path / "fresh"
    _killed_after_first_chunks(cfg, out, OLD)
    assert _run(cfg, out, "--resume") == 0
    assert _run(cfg, fresh) == 0
    a, b = read_results(out / "results.nc"), read_results(fresh / "results.nc")
    assert a.attrs["code_stamp"] == OLD and "resumed_code_stamps" not in a.attrs
    for v in ("beta", "status", "event_time", "slide_time", "num_steps"):
        np.testing.assert_array_equal(a[v].values, b[v].values, err_msg=v)


def test_partial_chunks_without_a_stamp_are_refused(cfg, tmp_path, monkeypatch, capsys):
    """Chunks from before stamps existed (no code.stamp file) count as another stamp."""
    out = tmp_path / "o"
    partial = _killed_after_first_chunks(cfg, out, OLD)
    (partial / "code.stamp").unlink()
    _stamp(monkeypatch, NEW)
    assert _run(cfg, out, "--resume") == 2
    line = _one_line_error(capsys)
    assert NO_STAMP in line and NEW in line


def test_resume_overwrite_replaces_stale_partial_results(cfg, tmp_path, monkeypatch, capsys):
    out = tmp_path / "o"
    _killed_after_first_chunks(cfg, out, OLD)
    _stamp(monkeypatch, NEW)
    assert _run(cfg, out, "--resume", "--overwrite") == 0
    ds = read_results(out / "results.nc")
    assert ds.attrs["code_stamp"] == NEW and "resumed_code_stamps" not in ds.attrs


# ---------------------------------------------------------------- case 11: finished results


def test_resume_on_a_finished_run_is_already_complete_and_touches_nothing(cfg, tmp_path, monkeypatch, capsys):
    out, path, before = _finished_run(cfg, tmp_path, monkeypatch)
    capsys.readouterr()
    for extra in (["--resume"], ["--resume", "--overwrite"], ["--resume-any-version"]):
        assert _run(cfg, out, *extra) == 0, extra
        cap = capsys.readouterr()
        assert "already complete" in cap.out and not cap.err, (extra, cap)
        assert _fingerprint(path) == before, extra
        assert sorted(p.name for p in out.iterdir()) == ["results.nc"]


def test_resume_on_finished_slices_is_already_complete(cfg, tmp_path, monkeypatch, capsys):
    _stamp(monkeypatch, OLD)
    out = tmp_path / "o"
    for i in range(3):
        assert _run(cfg, out, "--num-slices", "3", "--slice-index", str(i)) == 0
    path = out / "slices" / slice_file_name(1, 3)
    before = _fingerprint(path)
    capsys.readouterr()
    assert _run(cfg, out, "--num-slices", "3", "--slice-index", "1", "--resume") == 0
    assert "already complete" in capsys.readouterr().out
    assert _fingerprint(path) == before
    # The afterok merge, resubmitted: also a no-op once done.
    assert merge_main([str(out), "--no-figures"]) == 0
    merged = _fingerprint(out / "results.nc")
    capsys.readouterr()
    assert merge_main([str(out), "--no-figures", "--resume"]) == 0
    assert "already complete" in capsys.readouterr().out
    assert _fingerprint(out / "results.nc") == merged
    assert read_results(out / "results.nc").attrs["code_stamp"] == OLD


def test_resume_on_results_of_another_stamp_or_config_is_refused(cfg, tmp_path, monkeypatch, capsys):
    out, path, before = _finished_run(cfg, tmp_path, monkeypatch)
    _stamp(monkeypatch, NEW)
    capsys.readouterr()
    assert _run(cfg, out, "--resume") == 2
    line = _one_line_error(capsys)
    assert OLD in line and NEW in line and "--overwrite" in line
    assert _fingerprint(path) == before
    # Another config in the same folder.
    other = tmp_path / "other.toml"
    other.write_text(config(t1=5e2))
    assert _run(other, out, "--resume") == 2
    assert "different config" in _one_line_error(capsys)
    assert _fingerprint(path) == before
    # --resume --overwrite recomputes what is stale.
    assert _run(cfg, out, "--resume", "--overwrite") == 0
    assert read_results(path).attrs["code_stamp"] == NEW


# ---------------------------------------------------------------- sibling: the merge of slices


def test_merge_refuses_slices_of_different_stamps(cfg, tmp_path, monkeypatch, capsys):
    out = tmp_path / "o"
    _stamp(monkeypatch, OLD)
    for i in (0, 2):
        assert _run(cfg, out, "--num-slices", "3", "--slice-index", str(i)) == 0
    _stamp(monkeypatch, NEW)
    assert _run(cfg, out, "--num-slices", "3", "--slice-index", "1") == 0
    capsys.readouterr()
    assert merge_main([str(out), "--no-figures"]) == 2
    line = _one_line_error(capsys)
    assert OLD in line and NEW in line and "--any-version" in line
    assert not (out / "results.nc").exists()
    assert merge_main([str(out), "--no-figures", "--any-version"]) == 0
    assert "different code" in capsys.readouterr().err
    stamps = read_results(out / "results.nc").attrs["code_stamp"].split(" | ")
    assert sorted(stamps) == sorted([OLD, NEW])


# ---------------------------------------------------------------- sibling: the chunk-size guard


def test_resume_with_another_chunk_size_is_one_line_not_a_traceback(tmp_path, monkeypatch, capsys):
    """Chunks derived from the memory budget depend on the device count (not in the
    config key): resuming on another machine used to raise a ValueError traceback."""
    from samflow.sweep import _grid

    p = tmp_path / "c.toml"
    p.write_text(config(t1=1e3).replace("chunk_size = 2", "memory_budget_mb = 1024"))
    out = tmp_path / "o"
    monkeypatch.setattr(_grid, "chunk_cells", lambda *a: 2)
    run_sweep(load_config(p), progress=False, checkpoint_dir=out / ".partial")
    for c in sorted((out / ".partial").glob("*.npz"))[1:]:
        c.unlink()
    monkeypatch.setattr(_grid, "chunk_cells", lambda *a: 4)  # as on another number of devices
    assert _run(p, out, "--resume") == 2
    line = _one_line_error(capsys)
    assert "chunk 0 holds 2 cells" in line and "has 4" in line and "--overwrite" in line
    assert not (out / "results.nc").exists()
