"""Config validation: every malformed config gives one clear line per problem,
naming the field, exit code 2 from the CLI, and no output left behind."""

from __future__ import annotations

import numpy as np
import pytest

from samflow.config import ConfigError, load_config, parse_config
from samflow.sweep import main

GOOD = """\
name = "ok"
methods = ["gd", "l2"]
depth = 2
loss = "logistic"
clock = "t"
[data]
mu = [1.0, 2.0]
[grid]
alpha = [0.3, 0.7]
rho = [1.0]
[time]
t1 = 10.0
num = 8
t_min = 0.01
[solver]
rtol = 1e-8
atol = 1e-12
max_steps = 4096
[output]
figures = false
"""


def edit(old: str, new: str) -> str:
    assert old in GOOD, old
    return GOOD.replace(old, new, 1)


# (config text, words the message must contain: the field, and a hint of the fix)
MALFORMED = [
    (edit('name = "ok"', 'name = "ok"\nmethod = ["gd"]'), ["method", "did you mean 'methods'"]),
    (edit("rtol = 1e-8", "rtl = 1e-8"), ["solver.rtl", "did you mean 'rtol'"]),
    (edit("[output]", "[outptu]"), ["outptu", "did you mean 'output'"]),
    (edit("t1 = 10.0", 't1 = "10"'), ["time.t1", "number"]),
    (edit("rtol = 1e-8", 'rtol = "1e-8"'), ["solver.rtol"]),
    (edit("depth = 2", "depth = 2.5"), ["depth", "integer"]),
    (edit("depth = 2", "depth = 0"), ["depth", "greater than or equal to 1"]),
    (edit("rho = [1.0]", "rho = [-1.0]"), ["grid.rho", ">= 0"]),
    (edit("rho = [1.0]", "rho = [nan]"), ["grid.rho", "non-finite"]),
    (edit("rho = [1.0]", "rho = [inf]"), ["grid.rho", "non-finite"]),
    (edit("rho = [1.0]", "rho = []"), ["grid.rho", "empty"]),
    (edit("alpha = [0.3, 0.7]", "alpha = []"), ["grid.alpha", "empty"]),
    (edit("alpha = [0.3, 0.7]", "alpha = [0.7, 0.3]"), ["grid.alpha", "increasing"]),
    (edit("alpha = [0.3, 0.7]", "alpha = [0.0, 0.7]"), ["grid.alpha", "> 0"]),
    (edit("alpha = [0.3, 0.7]", "alpha = {start = 1.0, stop = 0.1, num = 4}"), ["grid.alpha", "greater than start"]),
    (edit("alpha = [0.3, 0.7]", "alpha = {start = -1.0, stop = 1.0, num = 4, scale = \"log\"}"), ["grid.alpha", "start > 0"]),
    (edit("alpha = [0.3, 0.7]", "alpha = {start = 0.1, stop = 1.0, num = 0}"), ["grid.alpha.num", "greater than or equal to 1"]),
    (edit("alpha = [0.3, 0.7]", "alpha = {start = 0.1, stop = 1.0, num = 4, scale = \"cubic\"}"), ["grid.alpha.scale", "log"]),
    (edit("t1 = 10.0", "t1 = -5.0"), ["time", "t1 must be > 0"]),
    (edit("t1 = 10.0", "t1 = 0.0"), ["time", "t1 must be > 0"]),
    (edit("t_min = 0.01", "t_min = 20.0"), ["time", "t_min"]),
    (edit("t1 = 10.0\nnum = 8\nt_min = 0.01", "ts = [1.0, 0.5, 2.0]"), ["time", "increasing"]),
    (edit("t1 = 10.0\nnum = 8\nt_min = 0.01", "ts = []"), ["time", "empty"]),
    (edit("t1 = 10.0\nnum = 8\nt_min = 0.01", "t1 = 5.0\nts = [1.0, 2.0, 3.0]"), ["time", "end at the horizon"]),
    (edit("t1 = 10.0\nnum = 8\nt_min = 0.01", "num = 8"), ["time", "t1"]),
    (edit('methods = ["gd", "l2"]', 'methods = ["gd", "sam"]'), ["methods", "'gd'"]),
    (edit('methods = ["gd", "l2"]', "methods = []"), ["methods", "at least 1"]),
    (edit('methods = ["gd", "l2"]', 'methods = ["gd", "gd"]'), ["methods", "repeat"]),
    (edit('loss = "logistic"', 'loss = "hinge"'), ["loss", "'logistic'"]),
    (edit('clock = "t"', 'clock = "s"'), ["clock", "'t'"]),
    (edit("max_steps = 4096", 'max_steps = 4096\nsolver = "euler"'), ["solver.solver", "'tsit5'"]),
    (edit("max_steps = 4096", "max_steps = 0"), ["solver.max_steps", "greater than or equal to 1"]),
    (edit("rtol = 1e-8", "rtol = -1e-8"), ["solver.rtol", "greater than 0"]),
    (edit("mu = [1.0, 2.0]", "mu = []"), ["data", "mu must not be empty"]),
    (edit("mu = [1.0, 2.0]", "mu = [1.0, nan]"), ["data", "finite"]),
    (edit("mu = [1.0, 2.0]", "X = [[1.0, 2.0], [2.0, 1.0]]\ny = [1.0, 2.0]"), ["data", "-1 and +1"]),
    (edit("mu = [1.0, 2.0]", "X = [[1.0, 2.0], [2.0]]\ny = [1.0, -1.0]"), ["data", "same length"]),
    (edit("mu = [1.0, 2.0]", "X = [[1.0, 2.0], [2.0, 1.0]]\ny = [1.0]"), ["data", "labels"]),
    (edit("mu = [1.0, 2.0]", "X = [[1.0, 2.0]]"), ["data", "data.y"]),
    (edit("mu = [1.0, 2.0]", "mu = [1.0, 2.0]\nfile = \"d.npz\""), ["data", "exactly one"]),
    (edit("[data]\nmu = [1.0, 2.0]", "[data]"), ["data", "exactly one"]),
    (edit('clock = "t"', 'clock = "tau"').replace("mu = [1.0, 2.0]", "X = [[1.0, 2.0], [2.0, 1.0]]\ny = [1.0, -1.0]"), ["clock", "single sample"]),
    (edit("[grid]\nalpha = [0.3, 0.7]\nrho = [1.0]\n", ""), ["grid", "required"]),
    (edit("figures = false", "figures = \"no\""), ["output.figures"]),
    ("this is = not [toml", ["not valid TOML"]),
]


@pytest.mark.parametrize("text, words", MALFORMED, ids=[f"case{i:02d}" for i in range(len(MALFORMED))])
def test_malformed_config_one_line_per_problem(tmp_path, capsys, text, words):
    cfg = tmp_path / "bad.toml"
    cfg.write_text(text)
    out = tmp_path / "out"
    code = main([str(cfg), "--out", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2
    for w in words:
        assert w in err, f"{w!r} not in {err!r}"
    assert "Traceback" not in err
    assert all(line.startswith("error: ") for line in err.strip().splitlines())
    assert not (out / "results.nc").exists()
    assert not list(tmp_path.rglob("*.nc*"))


def test_at_least_thirty_malformed_configs():
    assert len(MALFORMED) >= 30


def test_all_problems_listed_at_once():
    text = edit("rtol = 1e-8", "rtl = 1e-8").replace("rho = [1.0]", "rho = [-1.0]").replace("depth = 2", "depth = 0")
    import tomllib

    with pytest.raises(ConfigError) as info:
        parse_config(tomllib.loads(text), "c.toml")
    lines = str(info.value).splitlines()
    assert len(lines) == 3
    assert any("solver.rtl" in l for l in lines)
    assert any("grid.rho" in l for l in lines)
    assert any(l.startswith("c.toml: depth") for l in lines)


def test_good_config_values(tmp_path):
    p = tmp_path / "good.toml"
    p.write_text(GOOD)
    cfg = load_config(p)
    np.testing.assert_array_equal(cfg.grid.alpha_values(), [0.3, 0.7])
    ts = cfg.time.values()
    assert ts.shape == (8,) and np.isclose(ts[0], 0.01) and ts[-1] == 10.0
    assert np.allclose(np.diff(np.log(ts)), np.log(1000.0) / 7)


def test_missing_data_file_and_unwritable_output(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text(edit("mu = [1.0, 2.0]", 'file = "missing.npz"'))
    assert main([str(bad), "--out", str(tmp_path / "o1"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "data.file" in err and "missing.npz" in err
    assert not (tmp_path / "o1" / "results.nc").exists()

    good = tmp_path / "good.toml"
    good.write_text(GOOD)
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where a folder should be")
    assert main([str(good), "--out", str(blocker / "sub"), "--quiet"]) == 2
    assert "cannot write" in capsys.readouterr().err
