"""Slices are --num-slices/--slice-index (the 0.1 names --num-chunks/--chunk-index, removed in
0.3.0, say so in one line); messages count slices from 1 and name the --slice-index they mean."""

from __future__ import annotations

import pytest

from samflow.sweep import main
from samflow.sweep._slices import slice_file_name

CONFIG = """\
methods = ["l2"]
[data]
mu = [0.2, 1.0]
[grid]
alpha = [0.2, 0.5, 2.0]
alpha_relative_to_rho = true
rho = [0.01]
[time]
t1 = 10.0
num = 4
[output]
figures = false
"""


def test_slice_flags_are_checked_in_one_line(tmp_path, capsys):
    cfg = tmp_path / "c.toml"
    cfg.write_text(CONFIG)
    assert main([str(cfg), "--out", str(tmp_path / "o"), "--num-slices", "3", "--slice-index", "3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: --slice-index must be in 0..2 for --num-slices 3 (got 3)"]


@pytest.mark.parametrize("old,new", [("--num-chunks", "--num-slices"), ("--chunk-index", "--slice-index")])
def test_the_removed_0_1_flags_name_their_replacement(tmp_path, capsys, old, new):
    cfg = tmp_path / "c.toml"
    cfg.write_text(CONFIG)
    with pytest.raises(SystemExit) as stop:
        main([str(cfg), "--out", str(tmp_path / "o"), old, "1"])
    assert stop.value.code == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"error: {old} was removed in samflow 0.3.0; use {new}"]
    assert not (tmp_path / "o").exists()


def test_help_lists_only_the_slice_names(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "--num-slices" in out and "--slice-index" in out and "chunk-index" not in out and "num-chunks" not in out


def test_slice_messages_count_from_one(tmp_path, capsys):
    cfg = tmp_path / "c.toml"
    cfg.write_text(CONFIG)
    out = tmp_path / "o"
    (out / "slices" / f".partial-{slice_file_name(1, 3)[:-3]}").mkdir(parents=True)
    assert main([str(cfg), "--out", str(out), "--num-slices", "3", "--slice-index", "1"]) == 2
    err = capsys.readouterr().err
    assert "of slice 2 of 3 (--slice-index 1);" in err and "--resume" in err
