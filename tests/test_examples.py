"""Every script in examples/ runs as docs/examples.md shows it and prints what it promises, and the
output the documentation shows for it (docs/examples/*.txt, included by docs/examples.md)
is still what it prints."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
RECORDED = ROOT / "docs" / "examples"


def _recorded(name: str) -> str:
    """The output docs/examples.md shows (regenerate: run the example as that page says,
    output into docs/examples/NAME)."""
    return (RECORDED / name).read_text()


def _run(name: str, *args: str, monkeypatch, capsys) -> str:
    monkeypatch.setattr(sys, "argv", [str(EXAMPLES / name), *args])
    runpy.run_path(str(EXAMPLES / name), run_name="__main__")
    return capsys.readouterr().out


def test_every_example_is_tested():
    tested = {"one_trajectory.py", "regime_chart.py", "gd_vs_sam.py", "read_results.py"}
    assert {p.name for p in EXAMPLES.glob("*.py")} == tested


def test_one_trajectory(monkeypatch, capsys):
    out = _run("one_trajectory.py", "0.3", monkeypatch=monkeypatch, capsys=capsys)
    # docs/figures/trajectories.png, regime-1 column: 2 -> 1, collapse at t = 14.17.
    assert "regime 1, status COLLAPSED" in out and "dominant features in order: 2 -> 1" in out
    t = float(out.split("collapsed to 0 at t = ")[1].split()[0])
    assert abs(t - 14.17) < 0.01
    assert out == _recorded("one_trajectory_0.3.txt")


def test_one_trajectory_default_is_the_documented_output(monkeypatch, capsys):
    out = _run("one_trajectory.py", monkeypatch=monkeypatch, capsys=capsys)
    assert "regime 2, status FINISHED" in out and "2 -> 3 -> 4 -> 5" in out
    assert out == _recorded("one_trajectory.txt")


@pytest.mark.slow  # three methods, three compilations
def test_gd_vs_sam(monkeypatch, capsys):
    out = _run("gd_vs_sam.py", monkeypatch=monkeypatch, capsys=capsys).splitlines()
    assert out[0].startswith("gd    FINISHED  dominant 5 ")
    assert out[1].startswith("l2    FINISHED  dominant 2 -> 3 -> 4 -> 5")
    assert out[2].startswith("linf  SLID")
    assert out == _recorded("gd_vs_sam.txt").splitlines()


@pytest.mark.slow  # 24 cells over 64 save times
def test_regime_chart(monkeypatch, capsys, tmp_path):
    out = _run("regime_chart.py", "--png", str(tmp_path / "c.png"), monkeypatch=monkeypatch, capsys=capsys)
    rows = [line.split() for line in out.splitlines()[1:13]]
    regimes = [int(r[1]) for r in rows]
    assert regimes == sorted(regimes) and {1, 2, 3} <= set(regimes)  # collapse, minor first, major first
    assert all(r[1] == r[2] for r in rows)  # depth 2, small rho: the regime is a function of alpha/rho
    assert (tmp_path / "c.png").stat().st_size > 0
    assert out.splitlines()[:-1] == _recorded("regime_chart.txt").splitlines()  # the last line names the PNG


def test_read_results(monkeypatch, capsys, tmp_path):
    from samflow.sweep import main

    cfg = RECORDED / "small.toml"  # the config docs/examples.md shows
    assert main([str(cfg), "--out", str(tmp_path / "o"), "--quiet"]) == 0
    capsys.readouterr()
    out = _run("read_results.py", str(tmp_path / "o" / "results.nc"), monkeypatch=monkeypatch, capsys=capsys)
    assert "'sample': 1" in out and "'coord': 2" in out and "methods: ['l2']" in out
    assert "regime 1: 2 alphas, 0.2 to 0.5" in out and "regime 3: 1 alphas, 2 to 2" in out
    assert out == _recorded("read_results.txt")
