"""Config validation: every malformed config gives one clear line per problem,
naming the field, exit code 2 from the CLI, and no output left behind."""

from __future__ import annotations

import re

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
    # Found by tests/test_config_property.py: an unknown key that looks like a union tag
    # crashed the error formatter (IndexError, a traceback); data.X was reported as 'data'.
    (edit('name = "ok"', 'name = "ok"\n"[]" = 1'), ["[]: unknown key"]),
    # a key holding a line break (U+0085 splits a str.splitlines line) stays on one line
    (edit('name = "ok"', 'name = "ok"\n"\\u0085" = 1'), ["'\\x85': unknown key"]),
    (edit("mu = [1.0, 2.0]", 'X = [[1.0, "a"]]\ny = [1.0]'), ["data.X.0.1: Input should be a valid number"]),
    (edit("t_min = 0.01", "t_min = nan"), ["time.t_min: non-finite value"]),
    (edit("mu = [1.0, 2.0]", "mu = [1.0, inf]"), ["data.mu.1: non-finite value"]),
]


@pytest.mark.parametrize("text, words", MALFORMED, ids=[f"case{i:02d}" for i in range(len(MALFORMED))])
def test_malformed_config_one_line_per_problem(tmp_path, capsys, text, words):
    err = "\n".join(_cli(tmp_path, capsys, text))  # exit 2, no output folder
    for w in words:
        assert w in err, f"{w!r} not in {err!r}"
    assert "Traceback" not in err
    assert all(line.startswith("error: ") for line in err.strip().splitlines())
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


@pytest.mark.parametrize("old, new, line", [
    ('methods = ["gd", "l2"]', 'method = ["gd", "l2"]',
     "c.toml: method: unknown key (did you mean 'methods'?, a required key that is missing); rename it"),
    ("[grid]", "[gird]", "c.toml: gird: unknown key (did you mean 'grid'?, a required key that is missing); rename it"),
    ("[time]", "[tme]", "c.toml: tme: unknown key (did you mean 'time'?, a required key that is missing); rename it"),
])
def test_a_misspelled_required_key_is_one_line(old, new, line):
    """It gave two lines ("methods: required key is missing" and "method: unknown
    key (did you mean 'methods'?)") for one mistake (found by a fresh-user probe)."""
    import tomllib

    with pytest.raises(ConfigError) as info:
        parse_config(tomllib.loads(edit(old, new)), "c.toml")
    assert str(info.value).splitlines() == [line]


def test_a_missing_required_key_with_no_look_alike_still_says_missing():
    import tomllib

    with pytest.raises(ConfigError) as info:
        parse_config(tomllib.loads(edit('methods = ["gd", "l2"]\n', "").replace("rtol", "rtl")), "c.toml")
    assert str(info.value).splitlines() == [
        "c.toml: methods: required key is missing",
        "c.toml: solver.rtl: unknown key (did you mean 'rtol'?); remove it or fix its spelling",
    ]


def test_good_config_values(tmp_path):
    p = tmp_path / "good.toml"
    p.write_text(GOOD)
    cfg = load_config(p)
    np.testing.assert_array_equal(cfg.grid.alpha_values(), [0.3, 0.7])
    ts = cfg.time.values()
    assert ts.shape == (8,) and np.isclose(ts[0], 0.01) and ts[-1] == 10.0
    assert np.allclose(np.diff(np.log(ts)), np.log(1000.0) / 7)


def test_max_segments_is_read_as_max_runs_and_says_so():
    """solver.max_segments, max_runs' name before 0.3 (in configs and in the configs
    stored in 0.2 results files), gives the same settings with a FutureWarning (shown
    to users by Python's default filters) naming the new key; both at once: one line."""
    import tomllib

    new = parse_config(tomllib.loads(edit("max_steps = 4096\n", "max_steps = 4096\nmax_runs = 9\n")), "c.toml")
    with pytest.warns(FutureWarning, match=r"^solver\.max_segments is now solver\.max_runs; the old name goes in "
                                           r"the release after 0\.3$"):
        old = parse_config(tomllib.loads(edit("max_steps = 4096\n", "max_steps = 4096\nmax_segments = 9\n")), "c.toml")
    assert old == new and old.solver.max_runs == 9
    assert old.solver.to_settings() == new.solver.to_settings()
    with pytest.raises(ConfigError) as info:
        parse_config(tomllib.loads(edit("max_steps = 4096\n", "max_steps = 4096\nmax_runs = 9\nmax_segments = 9\n")),
                     "c.toml")
    assert str(info.value).splitlines() == [
        "c.toml: solver: max_runs and max_segments (its name before 0.3) are both given: keep max_runs"]


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


# --------------------------------------------------------------------------- issue 12
# Case 4: non-finite numbers in any key of any schema; plot_rho / trajectory_alphas off
# the grid; the stored config is strict JSON. Case 2: inits that no flow can leave.

import copy  # noqa: E402
import json  # noqa: E402
import tomllib  # noqa: E402
import types  # noqa: E402
import typing  # noqa: E402
from pathlib import Path  # noqa: E402

from pydantic import BaseModel  # noqa: E402

from samflow import figures  # noqa: E402
from samflow.config import NON_FINITE_MESSAGE, ConfigModel, SweepConfig, validate  # noqa: E402
from samflow.experiments.cnn_config import CnnConfig  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
_DICT_KEY = "<key>"


def float_paths(model: type[BaseModel], prefix: tuple = ()):
    """Every place a float can sit in `model`: paths of field names, list/tuple
    indices and `_DICT_KEY` for a table's values, through unions and nested models."""
    for name, field in model.model_fields.items():
        yield from _walk(field.annotation, prefix + (name,))


def _walk(ann, path):
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if ann is float:
        yield path
    elif isinstance(ann, type) and issubclass(ann, BaseModel):
        yield from float_paths(ann, path)
    elif origin is typing.Annotated:
        yield from _walk(args[0], path)
    elif origin in (typing.Union, types.UnionType):
        for a in args:
            yield from _walk(a, path)
    elif origin is list:
        yield from _walk(args[0], path + (0,))
    elif origin is tuple:
        for i, a in enumerate(args):
            yield from _walk(a, path + (i,))
    elif origin is dict:
        yield from _walk(args[1], path + (_DICT_KEY,))


def _plain(x):
    """A model dump as TOML would give it (tuples as lists)."""
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x


def set_path(raw: dict, path: tuple, value):
    """A copy of `raw` with `value` at `path`, or None where `raw` has another shape there.
    Returns (raw, dotted key as the error names it)."""
    raw = copy.deepcopy(raw)
    node, names = raw, []
    for i, p in enumerate(path):
        last = i == len(path) - 1
        if p == _DICT_KEY:
            if not isinstance(node, dict) or not node:
                return None
            p = next(iter(node))
        if isinstance(p, int):
            if not isinstance(node, list):
                return None
            if len(node) <= p:
                node.extend([node[-1] if node else 0.0] * (p + 1 - len(node)))
        elif not isinstance(node, dict):
            return None
        names.append(str(p))
        if last:
            node[p] = value
        else:
            nxt = path[i + 1]
            if (node[p] if isinstance(p, int) else node.get(p)) is None:
                node[p] = [0.0] if isinstance(nxt, int) else None
                if node[p] is None:
                    return None
            node = node[p]
    return raw, ".".join(names)


def _sweep_bases():
    raw = tomllib.loads(GOOD)
    axis = copy.deepcopy(raw)
    axis["grid"] = {"alpha": {"start": 0.1, "stop": 1.0, "num": 3}, "rho": {"start": 0.5, "stop": 1.0, "num": 2, "scale": "linear"}}
    multi = copy.deepcopy(raw)
    multi["data"] = {"X": [[1.0, 2.0], [2.0, 1.0]], "y": [1.0, -1.0]}
    # issue 15's tables: discrete step sizes, per-layer and per-coordinate inits, generators
    discrete = copy.deepcopy(raw)
    discrete["methods"] = ["l2", "discrete_l2"]
    discrete["discrete"] = {"eta": [0.1, 0.05]}
    one_eta = copy.deepcopy(discrete)
    one_eta["discrete"] = {"eta": 0.1}
    per_layer = copy.deepcopy(raw)
    per_layer["init"] = {"W0": [[1.0, 2.0], [0.5, 1.0]]}
    per_coord = copy.deepcopy(raw)
    per_coord["init"] = {"alpha_j": [1.0, 2.0]}
    banded = copy.deepcopy(raw)
    banded["clock"] = "t"
    banded["data"] = {"generator": "banded", "n": 6, "d": 3, "seed": 0, "intensities": [0.2, 0.5, 1.0],
                      "spread": 0.3, "noise": 0.0}
    scaled = copy.deepcopy(banded)
    scaled["data"] = {"generator": "increasing_scale", "n": 4, "d": 3, "seed": 0, "scales": [0.2, 0.5, 1.0]}
    # issue 27: lp-SAM's exponents
    lp = copy.deepcopy(raw)
    lp["methods"] = ["l2", "lp"]
    lp["lp"] = {"p": [1.5, 3.0]}
    bases = (raw, axis, multi, discrete, one_eta, per_layer, per_coord, banded, scaled, lp)
    return [_plain(parse_config(r).model_dump()) for r in bases]


def _cnn_bases():
    raw = {"tasks": [{"name": "b", "classes": [0, 1], "alphas": [1.0, 2.0]}], "train": {"alphas": [1.0, 2.0], "epochs": 2}}
    return [_plain(validate(CnnConfig, raw).model_dump())]


def _figure_schemas():
    """(model, [base raws]) per top-level figure schema, each found by the shipped
    file that validates against it; every `*Config` schema of figures.py must have one."""
    models = [
        v for k, v in vars(figures).items()
        if isinstance(v, type) and issubclass(v, ConfigModel) and k.endswith("Config") and not k.startswith("_")
    ]
    out = {}
    for path in sorted((ROOT / "configs" / "figures").glob("*.toml")):
        raw = tomllib.loads(path.read_text())
        raw.pop("quick", None)
        for m in models:
            try:
                cfg = m.model_validate(raw)
            except Exception:
                continue
            out[m] = [_plain(cfg.model_dump())]
    assert set(out) == set(models), [m.__name__ for m in set(models) - set(out)]
    return list(out.items())


SCHEMAS = [(SweepConfig, _sweep_bases()), (CnnConfig, _cnn_bases())] + _figure_schemas()


@pytest.mark.parametrize("model, bases", SCHEMAS, ids=[m.__name__ for m, _ in SCHEMAS])
def test_every_float_key_of_every_schema_refuses_non_finite(model, bases):
    """Issue 12 case 4: nan, inf and -inf in any float key (nested lists, tuples and
    tables included) give exactly one line naming that key; before, `plot_rho = nan`,
    `trajectory_alphas = [inf]` and `time.t_min = nan` were accepted."""
    paths = sorted(set(float_paths(model)), key=str)
    assert paths
    for path in paths:
        tried = 0
        for base in bases:
            for bad in (float("nan"), float("inf"), float("-inf")):
                edited = set_path(base, path, bad)
                if edited is None:
                    continue
                raw, key = edited
                with pytest.raises(ConfigError) as info:
                    validate(model, raw, "c.toml")
                hint = LP_INF_HINT if bad == float("inf") and re.fullmatch(r"(lp\.)?p(\.\d+)?", key) else ""
                assert str(info.value) == f"c.toml: {key}: {NON_FINITE_MESSAGE}{hint} (got {bad!r})", path
                tried += 1
        assert tried, f"no base config of {model.__name__} has a place for {path}"


#: What an lp exponent of inf adds to the non-finite message: the method that is p = inf.
LP_INF_HINT = '; lp-SAM with p = inf is the method "linf": list "linf" in methods'


def test_lp_p_inf_points_to_linf():
    """`[lp] p = inf` said only "non-finite value" (the session of 2026-12-07 noticed it):
    the line now names the method that is p = inf; nan and -inf keep the plain message."""
    raw = tomllib.loads((ROOT / "configs" / "lp_family.toml").read_text())
    for p, line in ((float("inf"), f"c.toml: lp.p.1: {NON_FINITE_MESSAGE}{LP_INF_HINT} (got inf)"),
                    (float("nan"), f"c.toml: lp.p.1: {NON_FINITE_MESSAGE} (got nan)")):
        raw["lp"] = {"p": [3.0, p]}
        with pytest.raises(ConfigError) as info:
            validate(SweepConfig, raw, "c.toml")
        assert str(info.value) == line


def test_float_walk_finds_the_keys_of_the_issue():
    paths = set(float_paths(SweepConfig))
    for p in [("output", "plot_rho"), ("output", "trajectory_alphas", 0), ("time", "t_min"),
              ("grid", "alpha", 0), ("grid", "alpha", "start"), ("data", "X", 0, 0), ("solver", "rtol")]:
        assert p in paths
    assert ("train", "learning_rate") in set(float_paths(CnnConfig))
    assert ("tau1", _DICT_KEY) in set(float_paths(figures.LinfConfig))


def _cli(tmp_path, capsys, text):
    cfg = tmp_path / "bad.toml"
    cfg.write_text(text)
    out = tmp_path / "out"
    code = main([str(cfg), "--out", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2
    assert not out.exists()
    return err.strip().splitlines()


def test_issue_case4_non_finite_keys_on_the_command_line(tmp_path, capsys):
    text = edit("t_min = 0.01", 't_min = nan\nspacing = "linear"').replace(
        "figures = false", "figures = true\nplot_rho = nan\ntrajectory_alphas = [inf]"
    )
    lines = _cli(tmp_path, capsys, text)
    src = str(tmp_path / "bad.toml")
    assert lines == [
        f"error: {src}: time.t_min: {NON_FINITE_MESSAGE} (got nan)",
        f"error: {src}: output.plot_rho: {NON_FINITE_MESSAGE} (got nan)",
        f"error: {src}: output.trajectory_alphas.0: {NON_FINITE_MESSAGE} (got inf)",
    ]


def test_plot_rho_and_trajectory_alphas_must_be_grid_values(tmp_path, capsys):
    """Off-grid values were snapped silently to the nearest (or, for nan, the first)
    cell; now one line naming the key and the nearest grid value (6 digits, enough
    to be accepted)."""
    text = edit("figures = false", "plot_rho = 0.5\ntrajectory_alphas = [0.3, 0.6]")
    lines = _cli(tmp_path, capsys, text)
    src = str(tmp_path / "bad.toml")
    assert lines == [
        f"error: {src}: output.plot_rho: 0.5 is not a value of grid.rho; give one of 1 (nearest: 1)",
        f"error: {src}: output.trajectory_alphas: 0.6 is not a value of grid.alpha; give one of 0.3, 0.7 (nearest: 0.7)",
    ]
    # The default grid (96 log-spaced multiples of rho): the nearest value printed is accepted.
    raw = read_default()
    raw["output"]["trajectory_alphas"] = [0.1]
    with pytest.raises(ConfigError) as info:
        parse_config(raw, "d.toml")
    assert str(info.value) == (
        "d.toml: output.trajectory_alphas: 0.1 is not a value of grid.alpha (multiples of rho: "
        "grid.alpha_relative_to_rho = true); give one of its 96 values from 0.01 to 100 (nearest: 0.102453)"
    )
    raw["output"]["trajectory_alphas"] = [0.01, 0.102453, 100.0]
    raw["output"]["plot_rho"] = 0.01
    cfg = parse_config(raw)
    assert cfg.output.trajectory_alphas == [0.01, 0.102453, 100.0]


def read_default() -> dict:
    return tomllib.loads((ROOT / "configs" / "default.toml").read_text())


RHO0 = edit("alpha = [0.3, 0.7]\nrho = [1.0]", "alpha = [0.3, 1.0, 3.0]\nalpha_relative_to_rho = true\nrho = [0.0, 0.1]")


def test_issue_case2_rho_zero_in_a_relative_grid_refused(tmp_path, capsys):
    """Issue 12 case 2: rho = 0 with alpha_relative_to_rho at depth 2 started the rho = 0
    column at W = 0 (GD 'finished' with beta = 0, l2 'collapsed'); now one line naming
    grid.rho and no results folder."""
    lines = _cli(tmp_path, capsys, RHO0)
    assert len(lines) == 1
    assert lines[0].startswith(f"error: {tmp_path / 'bad.toml'}: grid.rho: rho = 0 with grid.alpha_relative_to_rho")
    assert "alpha = multiple x 0 = 0" in lines[0] and "drop 0 from grid.rho" in lines[0]


@pytest.mark.parametrize(
    "depth, grid, key",
    [
        (2, {"alpha": [0.0, 0.5], "rho": [0.1]}, "grid.alpha: the init alpha = 0 cannot move at depth 2"),
        (3, {"alpha": [0.0], "rho": [0.1], "alpha_relative_to_rho": True}, "grid.alpha: the init alpha = 0 cannot move at depth 3"),
        (4, {"alpha": [1e-200, 1.0], "rho": [0.1]}, "grid.alpha: the init alpha = 1e-200 (alpha^3 underflows to 0) cannot move"),
        (2, {"alpha": [1e-200], "rho": [1e-200], "alpha_relative_to_rho": True}, "grid.alpha: the init alpha = alpha x rho = 0.0"),
        (5, {"alpha": [1.0], "rho": [0.0, 1.0], "alpha_relative_to_rho": True}, "grid.rho: rho = 0 with"),
        (1, {"alpha": [0.0, 0.5], "rho": [0.1]}, None),  # depth 1: the gradient at 0 is -r(0) != 0
        (1, {"alpha": [1.0], "rho": [0.0, 0.1], "alpha_relative_to_rho": True}, None),
        (2, {"alpha": [1e-150], "rho": [0.1]}, None),  # alpha^1 = 1e-150 does not underflow
    ],
)
def test_zero_inits_refused_only_where_no_flow_can_leave(depth, grid, key):
    raw = tomllib.loads(GOOD)
    raw["depth"], raw["grid"] = depth, grid
    if key is None:
        assert parse_config(raw).depth == depth
        return
    with pytest.raises(ConfigError) as info:
        parse_config(raw, "c.toml")
    lines = str(info.value).splitlines()
    assert len(lines) == 1 and lines[0].startswith("c.toml: " + key), lines


@pytest.mark.parametrize(
    "depth, grid, line",
    [
        (2, {"alpha": [1e200], "rho": [0.1]},
         "grid.alpha: the init alpha = 1e+200 gives beta(0) = alpha^2 beyond the float64 range; use smaller alphas"),
        (1, {"alpha": [1e308], "rho": [10.0], "alpha_relative_to_rho": True},
         "grid.alpha: the init alpha = alpha x rho = inf gives beta(0) = alpha^1 beyond the float64 range; use smaller alphas"),
        (2, {"alpha": {"start": -1.7e308, "stop": 1.7e308, "num": 3, "scale": "linear"}, "rho": [0.1]},
         "grid.alpha: the axis from -1.7e+308 to 1.7e+308 in 3 steps is not representable in float64 "
         "(overflow, or steps below float64 resolution); narrow it or use fewer points"),
    ],
)
def test_inits_beyond_float64_refused(depth, grid, line):
    """Siblings of case 2 and case 4: an init or an axis that overflows float64 (accepted
    before; beta(0) = inf, or a RuntimeWarning and a vague 'non-finite' line)."""
    raw = tomllib.loads(GOOD)
    raw["depth"], raw["grid"] = depth, grid
    with pytest.raises(ConfigError) as info:
        parse_config(raw, "c.toml")
    assert str(info.value) == "c.toml: " + line


def test_zero_init_with_log_coords_refused():
    raw = tomllib.loads(GOOD)
    raw["depth"], raw["grid"]["alpha"], raw["solver"]["coords"] = 1, [0.0, 0.5], "log"
    with pytest.raises(ConfigError, match=r"^c\.toml: solver\.coords = 'log' needs every init alpha > 0"):
        parse_config(raw, "c.toml")


def test_depth1_zero_init_leaves_zero_and_the_stored_config_is_strict_json(tmp_path, capsys):
    """Depth 1, rho = 0 in a relative grid (alpha = 0 there) is allowed: in tau,
    GD at depth 1 is beta(tau) = alpha + mu tau (docs/theory.md s.3), so the rho = 0 column
    is at (2, 4) at tau = 2, not stuck at 0. The stored config parses as strict JSON."""
    text = (
        RHO0.replace("depth = 2", "depth = 1").replace('methods = ["gd", "l2"]', 'methods = ["gd"]')
        .replace('clock = "t"', 'clock = "tau"')
        .replace("t1 = 10.0\nnum = 8\nt_min = 0.01", "ts = [1.0, 2.0]")
    )
    cfg = tmp_path / "d1.toml"
    cfg.write_text(text)
    out = tmp_path / "out"
    assert main([str(cfg), "--out", str(out), "--quiet"]) == 0, capsys.readouterr().err
    import xarray as xr

    with xr.open_dataset(out / "results.nc") as ds:
        beta = ds["beta"].sel(flow="gd").values  # (alpha, rho, time, d)
        attrs = dict(ds.attrs)
    np.testing.assert_allclose(beta[:, 0, -1, :], [[2.0, 4.0]] * 3, rtol=1e-9)
    np.testing.assert_allclose(beta[:, 1, -1, :], np.array([0.03, 0.1, 0.3])[:, None] + [2.0, 4.0], rtol=1e-9)

    def refuse(name):
        raise ValueError(f"not strict JSON: {name}")

    stored = json.loads(attrs["config"], parse_constant=refuse)
    assert stored["grid"]["rho"] == [0.0, 0.1] and stored["depth"] == 1



def test_figure_configs_checked_before_any_figure(tmp_path):
    """A non-finite value in a figure config (here the [quick] table of
    trajectories.toml) stops `figures.run_all` with one line naming file and key,
    before any output folder is made; every shipped file passes the check."""
    import shutil

    figures.check_figure_configs(quick=False)
    figures.check_figure_configs(quick=True)
    assert set(figures.FIGURE_CONFIGS) == {p.stem for p in (ROOT / "configs" / "figures").glob("*.toml")}
    cdir = tmp_path / "cfg"
    shutil.copytree(ROOT / "configs" / "figures", cdir)
    path = cdir / "trajectories.toml"
    path.write_text(path.read_text() + "\nrel_band = nan\n")
    out = tmp_path / "out"
    with pytest.raises(ConfigError) as info:
        figures.run_all(out, quick=True, only=["depth1_directions"], config_dir=cdir)
    assert str(info.value) == f"{path}: rel_band: {NON_FINITE_MESSAGE} (got nan)"
    assert not out.exists()


def test_messages_name_the_field_and_value_once(tmp_path, capsys):
    """Issue 17: `rho = [-0.01]` said 'grid.rho: grid.rho must be >= 0, got -0.01 (got [-0.01])'."""
    cfg = tmp_path / "c.toml"
    cfg.write_text(edit("rho = [1.0]", "rho = [-0.01]"))
    assert main([str(cfg), "--quiet"]) == 2
    assert capsys.readouterr().err.strip() == f"error: {cfg}: grid.rho: must be >= 0, got -0.01: the SAM radius is a size (0 gives gradient flow)"


def test_a_folder_given_as_config_is_named_a_folder(tmp_path, capsys):
    (tmp_path / "a.toml").write_text(GOOD)
    (tmp_path / "default.toml").write_text(GOOD)
    assert main([str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: {tmp_path}: is a folder; give the path of one .toml file in it, e.g. {tmp_path / 'default.toml'}"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main([str(empty)]) == 2
    err = capsys.readouterr().err
    assert "is a folder" in err and "(see configs/)" in err and "not found" not in err


def test_existing_results_refusal_names_resume_and_overwrite(tmp_path, capsys):
    cfg = tmp_path / "c.toml"
    cfg.write_text(GOOD)
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.nc").write_text("")
    assert main([str(cfg), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "exists" in err and "--overwrite" in err and "--resume" in err


@pytest.mark.parametrize(
    "patch, line",
    [
        ({"output": {"switch_times": "yes"}}, "output.switch_times: must be true or false (TOML booleans, no quotes) (got 'yes')"),
        ({"depth": "2"}, "depth: Input should be a valid integer; a number is written without quotes (got '2')"),
        ({"discrete": {"eta": "0.05"}}, "discrete.eta: Input should be a valid list; a number is written without quotes (got '0.05')"),
    ],
)
def test_quoted_numbers_and_booleans_name_the_fix(patch, line):
    """A fresh user wrote `eta = "0.05"` and `switch_times = "yes"`: the line says
    what to write instead, not only pydantic's type name."""
    from samflow.config import ConfigError, parse_config

    raw = {"methods": ["l2", "discrete_l2"], "discrete": {"eta": 0.05}, "data": {"mu": [0.5, 1.0]},
           "grid": {"alpha": [0.5], "rho": [0.1]}, "time": {"t1": 1.0, "num": 4}}
    raw.update(patch)
    with pytest.raises(ConfigError) as err:
        parse_config(raw)
    assert str(err.value) == f"config: {line}"


@pytest.mark.parametrize(
    "name, edit, key",
    [
        ("banded", ("t_min = 1e-3", "t_min = 1e5"), "t_min"),
        ("usam_ablation", ("t_min = 1e-2", "t_min = 1e5"), "t_min"),
        ("regime_chart", ("tau_min = 1e-4", "tau_min = 1e9"), "tau_min"),
        ("linf_limit", ("tau_min = 1e-2", "tau_min = 100.0"), "tau_min"),  # above tau1["2"] = 60
        ("trajectories", ("sweep_t_min = 1e-3", "sweep_t_min = 1e6"), "sweep_t_min"),
        ("depth1_directions", ("t_min = 1e-2", "t_min = 1e9"), "rows.1.t_min"),  # above the second row's t1
        ("staircase", ("t_min = 1e-2", "t_min = 5e4"), "t_min"),  # above single.t1["2"] = 1e4
    ],
)
def test_figure_config_refuses_a_first_save_time_past_the_horizon(tmp_path, name, edit, key):
    # Before: validated, then np.geomspace(t_min, t1) ran backwards and the figure
    # died in check_save_times ("ts must be strictly increasing") mid-run.
    text = (ROOT / "configs" / "figures" / f"{name}.toml").read_text()
    assert text.count(edit[0]) >= 1
    path = tmp_path / f"{name}.toml"
    path.write_text(text.replace(edit[0], edit[1]))
    with pytest.raises(ValueError, match=re.escape(key) + ": the first save time"):
        figures.load_figure_config(path, figures.FIGURE_CONFIGS[name], False)


@pytest.mark.parametrize("old, new, keys", [
    ("t1 = 10.0\nnum = 8\nt_min = 0.01", "t1 = 10.0\nnum = 8\nt_min = 0.01\nts = [1.0, 10.0]", ["num", "t_min"]),
    ("t1 = 10.0\nnum = 8\nt_min = 0.01", 'ts = [1.0, 10.0]\nspacing = "log"', ["spacing"]),
])
def test_time_keys_beside_ts_are_refused_as_unused(tmp_path, capsys, old, new, keys):
    """`ts` gives the save times: num, spacing and t_min beside it changed nothing,
    silently (found by the adversarial probe)."""
    lines = _cli(tmp_path, capsys, edit(old, new))
    src = str(tmp_path / "bad.toml")
    assert lines == [f"error: {src}: time.{k}: not used when time.ts gives the save times; remove it (or remove ts)"
                     for k in keys]


def test_t_min_with_linear_spacing_is_refused_as_unused(tmp_path, capsys):
    """t_min = 5 with linear spacing still started the times at t1/num = 1.25."""
    lines = _cli(tmp_path, capsys, edit("t_min = 0.01", 't_min = 5.0\nspacing = "linear"'))
    assert lines == [f'error: {tmp_path / "bad.toml"}: time.t_min: not used with spacing = "linear" (the save times '
                     'run from t1/num to t1); remove it or use spacing = "log"']


def test_an_unused_time_key_is_listed_with_the_other_problems(tmp_path, capsys):
    """All problems at once; a key refused for its value (t_min = nan in
    test_issue_case4 above) is not also called unused."""
    lines = _cli(tmp_path, capsys, edit("t_min = 0.01", 't_min = 5.0\nspacing = "linear"').replace("num = 8", "num = 0"))
    assert [x.split(": ")[2] for x in lines] == ["time.num", "time.t_min"], lines
    assert "not used with spacing" in lines[1]


def test_linear_spacing_and_ts_alone_still_load(tmp_path):
    from samflow.config import load_config

    p = tmp_path / "a.toml"
    p.write_text(edit("t_min = 0.01", 'spacing = "linear"'))
    np.testing.assert_allclose(load_config(p).time.values(), np.linspace(1.25, 10.0, 8))
    p.write_text(edit("t1 = 10.0\nnum = 8\nt_min = 0.01", "t1 = 10.0\nts = [1.0, 10.0]"))
    np.testing.assert_array_equal(load_config(p).time.values(), [1.0, 10.0])


def test_tau_clock_sweep_configs_end_before_their_cells_blow_up():
    """Issue 35: configs/lp_family.toml ran to tau = 300, past tau ~ 229 where its cells reach
    |beta| = 10^blowup_log10 and stop as "blew up": 189 of 336 cells, a strip across every heat
    map panel. In tau, at depth 2 from equal layers on one sample, GD grows fastest of the flows,
    |beta_j| = alpha^2 e^(2 mu_j tau) (docs/theory.md s.3.1; the SAM flows' rates are smaller), so
    a shipped config's horizon must keep gd's largest |beta| below the threshold."""
    checked = []
    for path in sorted((ROOT / "configs").glob("*.toml")):
        if "\n[grid]" not in path.read_text():
            continue
        cfg = load_config(path)
        if cfg.clock != "tau" or cfg.depth != 2 or cfg.data.mu is None or cfg.init is not None:
            continue
        alpha = cfg.grid.alpha_values().max() * (cfg.grid.rho_values().max() if cfg.grid.alpha_relative_to_rho else 1)
        log10_beta = 2 * np.log10(alpha) + 2 * max(cfg.data.mu) * cfg.time.values()[-1] / np.log(10)
        assert log10_beta < cfg.solver.blowup_log10, (
            f"{path.name}: gd reaches |beta| = 10^{log10_beta:.0f} by time.t1, past solver.blowup_log10 = "
            f"{cfg.solver.blowup_log10:g}: its cells blow up before the horizon")
        checked.append(path.name)
    assert "lp_family.toml" in checked, checked


def test_lp_family_figure_ends_before_its_cells_blow_up():
    """Issue 35, the figure's twin of the test above: configs/figures/lp_family.toml ran to
    tau = 300, and 280 of its 576 chart cells (58 of 112 quick) stopped as "blew up" between
    tau = 229 and 295. lp-SAM's perturbation only slows a weight w_j >= 0, so at depth 2 in tau
    (rho = 1) |beta_j| <= a^2 e^(2 mu_j tau), a = alpha/rho: the horizon of both versions of the
    figure must keep that below the figures' threshold."""
    from samflow.figures import CONFIG_DIR, SETTINGS, CommonConfig, LpFamilyConfig, load_figure_config

    for quick in (False, True):
        mu = load_figure_config(CONFIG_DIR / "common.toml", CommonConfig, quick).mu
        cfg = load_figure_config(CONFIG_DIR / "lp_family.toml", LpFamilyConfig, quick)
        log10_beta = 2 * np.log10(cfg.a.values().max()) + 2 * max(mu) * cfg.tau1 / np.log(10)
        assert log10_beta < SETTINGS.blowup_log10, (
            f"lp_family.toml{' [quick]' if quick else ''}: |beta| can reach 10^{log10_beta:.0f} by tau1 = "
            f"{cfg.tau1:g}, past blowup_log10 = {SETTINGS.blowup_log10:g}: its cells blow up before the horizon")


def test_the_docs_give_the_engines_default_of_max_runs():
    """docs/configs.md gave max_runs' default as 2 L d + 2 alone; the engine adds 4 d for
    linf-SAM on multi-sample data and K + 1 with K switch times recorded (set or not).
    The engine's two lines are pinned here so that a change there shows up beside the doc."""
    engine = (ROOT / "samflow" / "_engine" / "lanes.py").read_text()
    assert "max_runs = settings.max_runs or (2 * L * d + 2 + (4 * d if multi else 0))" in engine
    assert "    if switches:\n        max_runs += switches + 1" in engine
    row = next(line for line in (ROOT / "docs" / "configs.md").read_text().splitlines()
               if line.startswith("| `solver.solver`"))
    assert ("unset: 2 L d + 2, plus 4 d for linf-SAM on multi-sample data" in row
            and "with `output.switch_times`, K + 1 more, set or unset" in row and "K = 2 d + 2" in row)
