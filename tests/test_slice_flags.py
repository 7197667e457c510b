"""Slices are --num-slices/--slice-index (the 0.1 names --num-chunks/--chunk-index still work,
unlisted); messages count slices from 1 and name the --slice-index they mean."""

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


@pytest.mark.parametrize("flags", [["--num-slices", "3", "--slice-index", "3"], ["--num-chunks", "3", "--chunk-index", "3"]])
def test_old_and_new_slice_flags_are_one_option(tmp_path, capsys, flags):
    cfg = tmp_path / "c.toml"
    cfg.write_text(CONFIG)
    assert main([str(cfg), "--out", str(tmp_path / "o"), *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == "error: --slice-index must be in 0..2 for --num-slices 3 (got 3)"
    # The old names work and say, one line each, which name replaces them.
    notes = err[:-1]
    if flags[0] == "--num-chunks":
        assert notes == [
            "note: --num-chunks is deprecated (samflow 0.1's name) and goes in the release after 0.2; use --num-slices",
            "note: --chunk-index is deprecated (samflow 0.1's name) and goes in the release after 0.2; use --slice-index",
        ]
    else:
        assert notes == []


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
