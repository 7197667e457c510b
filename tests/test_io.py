"""The one atomic writer (samflow._io): a file is replaced whole or not at all."""

from __future__ import annotations

import os
import stat

import pytest

from samflow._io import atomic_path, atomic_write_bytes, atomic_write_text


def test_write_replaces_whole_with_normal_permissions(tmp_path):
    p = tmp_path / "r.txt"
    p.write_text("old")
    umask = os.umask(0o022)
    try:
        atomic_write_text("new", p)
    finally:
        os.umask(umask)
    assert p.read_text() == "new"
    assert stat.S_IMODE(p.stat().st_mode) == 0o644  # not mkstemp's 0600
    assert sorted(x.name for x in tmp_path.iterdir()) == ["r.txt"]


def test_a_failure_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    p = tmp_path / "r.nc"
    atomic_write_bytes(b"complete", p)
    with pytest.raises(KeyboardInterrupt):
        with atomic_path(p) as tmp:
            with open(tmp, "wb") as fh:
                fh.write(b"half")
            raise KeyboardInterrupt  # an interrupt mid-write
    assert p.read_bytes() == b"complete"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["r.nc"]
