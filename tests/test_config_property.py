"""Property-based tests of the config schemas (issue 12, "Beyond the cases").

Random valid and invalid configs (sweep, CNN, figures) must give either a parsed
config or a `ConfigError` of clear lines "source: key: message", never another
exception (a traceback from pydantic internals or numpy) and never a warning.
A parsed sweep config must be usable as is: finite grid and save times, no init
that no flow can leave, a strict-JSON dump. Pure validation: nothing is solved.
"""

from __future__ import annotations

import copy
import json
import math
import tomllib
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from samflow import figures
from samflow.config import ConfigError, SweepConfig, parse_config, validate
from samflow.experiments.cnn_config import CnnConfig
from samflow.sweep import config_key

ROOT = Path(__file__).resolve().parents[1]
# derandomize: the same examples every run (a CI run must not fail at random); database=None:
# no .hypothesis/ folder in the checkout.
SETTINGS = settings(max_examples=80, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow])

SWEEP_BASE = {
    "name": "p",
    "methods": ["gd", "l2"],
    "depth": 2,
    "data": {"mu": [1.0, 2.0]},
    "grid": {"alpha": [0.3, 0.7], "rho": [0.1, 1.0]},
    "time": {"t1": 10.0, "num": 8, "t_min": 0.01},
    "solver": {"rtol": 1e-8},
    "output": {"figures": False},
}
CNN_BASE = {"tasks": [{"name": "b", "classes": [0, 1]}], "train": {"alphas": [1.0, 2.0], "epochs": 2}}
FIGURE_BASES = [
    (figures.TrajectoriesConfig, "trajectories.toml"),
    (figures.LinfConfig, "linf_limit.toml"),
    (figures.RegimeChartConfig, "regime_chart.toml"),
]

# Values a user (or a typo) can put in a TOML file: every type TOML has, the
# non-finite floats it allows, and numbers at the edges of float64 and int64.
nasty_floats = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 1e-320, 5e-324, 1e308, -1e308, 1.7976931348623157e308]),
)
nasty_ints = st.one_of(st.integers(-(2**63), 2**63 - 1), st.sampled_from([0, -1, 2**31, 2**62]))
scalars = st.one_of(
    nasty_floats, nasty_ints, st.booleans(), st.text(max_size=6),
    st.sampled_from(["log", "linear", "gd", "l2", "linf", "usam", "tau", "t", "summary", "full"]),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.sampled_from(["start", "stop", "num", "scale", "mu", "X", "y", "x"]), inner, max_size=4),
    ),
    max_leaves=8,
)


def _paths(raw, prefix=()):
    """Every key path of a raw config (tables and list entries included)."""
    yield prefix
    if isinstance(raw, dict):
        for k, v in raw.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(raw, list):
        for i, v in enumerate(raw):
            yield from _paths(v, prefix + (i,))


def _mutate(raw: dict, path: tuple, action: str, value):
    raw = copy.deepcopy(raw)
    if not path:
        return raw
    node = raw
    for p in path[:-1]:
        node = node[p]
    last = path[-1]
    if action == "set":
        node[last] = value
    elif action == "delete" and isinstance(node, dict):
        del node[last]
    elif action == "add" and isinstance(node, dict):
        node[str(value)[:8] or "k"] = value
    return raw


@st.composite
def mutated(draw, base: dict):
    """`base` with 1 to 3 random edits: a key set to a random value, deleted, or added."""
    raw = base
    for _ in range(draw(st.integers(1, 3))):
        paths = list(_paths(raw))
        path = draw(st.sampled_from(paths))
        raw = _mutate(raw, path, draw(st.sampled_from(["set", "set", "delete", "add"])), draw(values))
    return raw


def _check_outcome(model, raw, source="c.toml"):
    """Validate: a config, or a ConfigError of lines 'source: key: message'; no other
    exception and no warning (numpy overflow, pydantic serialization)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            cfg = validate(model, raw, source)
        except ConfigError as err:
            lines = str(err).splitlines()
            assert lines
            for line in lines:
                assert line.startswith(source + ": ") and line.count(": ") >= 2, line
                assert "Traceback" not in line and "pydantic" not in line.lower(), line
            return None
    # Whatever is accepted is strict JSON (the stored `config` attribute).
    json.dumps(cfg.model_dump(mode="json"), allow_nan=False)
    return cfg


def _check_sweep_usable(cfg: SweepConfig):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        a, r, ts = cfg.grid.alpha_values(), cfg.grid.rho_values(), cfg.time.values()
        assert np.all(np.isfinite(a)) and np.all(a >= 0) and np.all(np.diff(a) > 0)
        assert np.all(np.isfinite(r)) and np.all(r >= 0) and np.all(np.diff(r) > 0)
        assert np.all(np.isfinite(ts)) and np.all(ts > 0) and np.all(np.diff(ts) > 0)
        with np.errstate(under="ignore", over="ignore"):
            inits = a[:, None] * (r[None, :] if cfg.grid.alpha_relative_to_rho else 1.0)
            assert np.all(np.isfinite(inits ** cfg.depth))  # beta(0) = alpha^L
            if cfg.depth >= 2:  # an init that can leave W = 0
                assert np.all(inits ** (cfg.depth - 1) > 0)
        config_key(cfg.model_dump(mode="json"))


@SETTINGS
@given(mutated(SWEEP_BASE))
def test_random_sweep_configs_parse_or_one_clear_line_each(raw):
    cfg = _check_outcome(SweepConfig, raw)
    if cfg is not None:
        _check_sweep_usable(cfg)


@SETTINGS
@given(mutated(CNN_BASE))
def test_random_cnn_configs_parse_or_one_clear_line_each(raw):
    _check_outcome(CnnConfig, raw)


@pytest.mark.parametrize("model, name", FIGURE_BASES, ids=[n for _, n in FIGURE_BASES])
def test_random_figure_configs_parse_or_one_clear_line_each(model, name):
    base = tomllib.loads((ROOT / "configs" / "figures" / name).read_text())
    base.pop("quick", None)

    @settings(max_examples=40, deadline=None, derandomize=True, database=None)
    @given(mutated(base))
    def check(raw):
        _check_outcome(model, raw)

    check()


# --- valid configs: generated inside the documented ranges, they must parse to the
# values given (and the grid keys they name must be on the grid).

finite = st.floats(allow_nan=False, allow_infinity=False)
positive = st.floats(min_value=1e-6, max_value=1e6)


@st.composite
def increasing(draw, lo=1e-6, hi=1e6, max_size=5):
    xs = draw(st.lists(st.floats(min_value=lo, max_value=hi), min_size=1, max_size=max_size, unique=True))
    return sorted(xs)


@st.composite
def valid_sweep(draw):
    depth = draw(st.integers(1, 6))
    methods = draw(st.lists(st.sampled_from(["gd", "l2", "linf", "usam"]), min_size=1, max_size=4, unique=True))
    relative = draw(st.booleans())
    alpha = draw(st.one_of(
        increasing(),
        st.builds(lambda a, k, n: {"start": a, "stop": a * k, "num": n, "scale": "log"},
                  positive, st.floats(1.5, 1e3), st.integers(2, 50)),
    ))
    rho = draw(st.one_of(increasing(0.0, 10.0), st.just([0.0, 0.1]) if depth == 1 else st.just([0.1])))
    t1 = draw(st.floats(1e-3, 1e6))
    time = draw(st.one_of(
        st.builds(lambda k, n: {"t1": t1, "num": n, "t_min": t1 * k}, st.floats(1e-6, 0.99), st.integers(1, 500)),
        st.builds(lambda n: {"t1": t1, "num": n, "spacing": "linear"}, st.integers(1, 500)),
    ))
    raw = {
        "methods": methods,
        "depth": depth,
        "data": {"mu": draw(st.lists(st.floats(0.01, 10.0), min_size=1, max_size=6))},
        "grid": {"alpha": alpha, "rho": rho, "alpha_relative_to_rho": relative},
        "time": time,
        "solver": {"rtol": draw(st.floats(1e-12, 0.5)), "max_steps": draw(st.integers(1, 100_000))},
        "output": {"figures": draw(st.booleans())},
    }
    if draw(st.booleans()):
        parsed = validate(SweepConfig.model_fields["grid"].annotation, raw["grid"])
        a, r = parsed.alpha_values(), parsed.rho_values()
        raw["output"]["plot_rho"] = float(draw(st.sampled_from(list(r))))
        raw["output"]["trajectory_alphas"] = [float(v) for v in draw(st.lists(st.sampled_from(list(a)), min_size=1, max_size=3))]
    return raw


def _zero_inits(raw) -> bool:
    g = raw["grid"]
    alphas = np.asarray(g["alpha"]) if isinstance(g["alpha"], list) else np.geomspace(
        g["alpha"]["start"], g["alpha"]["stop"], g["alpha"]["num"])
    rhos = np.asarray(g["rho"])
    with np.errstate(under="ignore"):
        inits = alphas[:, None] * (rhos[None, :] if g["alpha_relative_to_rho"] else 1.0)
        return raw["depth"] >= 2 and bool(np.any(inits ** (raw["depth"] - 1) == 0))


@SETTINGS
@given(valid_sweep())
def test_valid_sweep_configs_parse_to_their_values(raw):
    if _zero_inits(raw):
        with pytest.raises(ConfigError, match=r"^c\.toml: grid\.(rho|alpha): "):
            parse_config(raw, "c.toml")
        return
    cfg = _check_outcome(SweepConfig, raw)
    assert cfg is not None
    _check_sweep_usable(cfg)
    assert cfg.depth == raw["depth"] and cfg.methods == raw["methods"]
    if isinstance(raw["grid"]["alpha"], list):
        np.testing.assert_array_equal(cfg.grid.alpha_values(), raw["grid"]["alpha"])
    assert cfg.time.values()[-1] == raw["time"]["t1"]
    assert math.isclose(cfg.time.values()[0], raw["time"].get("t_min", raw["time"]["t1"] / raw["time"]["num"])) or (
        raw["time"]["num"] == 1
    )
