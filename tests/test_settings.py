"""One settings definition (issue 13 item 4): the config schema and
`SolverSettings` share one set of bounds, and every rule between the parts of a
solve (tau clock, log coordinates) is decided by one function,
`samflow._engine.settings.problems`, with the same line from every door."""

from __future__ import annotations

import copy
import tomllib
from pathlib import Path

import numpy as np
import pytest

import samflow as sf
from samflow._engine.settings import SETTING_BOUNDS, TAU_ONE_SAMPLE, problems
from samflow.config import ConfigError, parse_config
from samflow.flows import LOG_NONZERO, LOG_NOT_LINF, LOG_SIGNS
from samflow.sweep import run_sweep, solve_grid

ROOT = Path(__file__).resolve().parents[1]
RAW = tomllib.loads((ROOT / "configs" / "default.toml").read_text())
TWO = sf.Dataset.from_arrays(np.array([[1.0, 2.0], [-1.0, 1.0]]), np.array([1.0, -1.0]))


def _probe_values(name):
    """Values on, just inside and just outside each bound of a setting."""
    out = []
    for op, v in SETTING_BOUNDS[name].items():
        if name in ("max_steps", "max_runs"):
            out += [int(v) - 1, int(v), int(v) + 1]
        else:
            out += [v, np.nextafter(float(v), -np.inf), np.nextafter(float(v), np.inf)]
    return out + ([2.5] if name in ("max_steps", "max_runs") else [float("inf")])


def _accepts_settings(name, value) -> bool:
    try:
        sf.SolverSettings(**{name: value})
        return True
    except ValueError as e:
        assert str(e).startswith(f"solver.{name} must be ") and "\n" not in str(e)
        return False


def _accepts_config(name, value) -> bool:
    raw = copy.deepcopy(RAW)
    raw.setdefault("solver", {})[name] = value
    try:
        parse_config(raw)
        return True
    except ConfigError as e:
        assert f"solver.{name}" in str(e)
        return False


@pytest.mark.parametrize("name", sorted(SETTING_BOUNDS))
def test_config_and_settings_accept_the_same_values(name):
    verdicts = [(v, _accepts_settings(name, v), _accepts_config(name, v)) for v in _probe_values(name)]
    assert all(a == b for _, a, b in verdicts), verdicts
    assert any(a for _, a, _ in verdicts) and not all(a for _, a, _ in verdicts)


def test_the_old_bounds_that_differed_are_refused_by_both():
    # SolverSettings accepted rtol = 2 and blowup_log10 ... with other bounds than the config (issue 13 P4)
    for name, value in [("rtol", 2.0), ("atol", 1.0), ("capture_radius", 1.5), ("max_steps", 10**8)]:
        assert not _accepts_settings(name, value) and not _accepts_config(name, value), name


def test_config_defaults_are_the_settings_defaults():
    cfg = parse_config(copy.deepcopy(RAW))
    raw_solver = RAW.get("solver", {})
    expected = sf.SolverSettings(**{k: v for k, v in raw_solver.items() if k in sf.SolverSettings.__dataclass_fields__})
    assert cfg.solver.to_settings(cfg.loss) == expected


def test_tau_on_several_samples_is_one_line_from_every_door(tmp_path):
    ts = np.array([0.5, 1.0])
    with pytest.raises(ValueError) as e1:
        sf.solve("gd", TWO, 0.1, 0.1, ts, clock="tau")
    # solve_grid used to pass it to the traced solve, which raised from inside the trace
    with pytest.raises(ValueError) as e2:
        solve_grid("gd", TWO, np.full((1, 2, 2), 0.1), np.array([0.1]), ts, clock="tau")
    raw = copy.deepcopy(RAW)
    raw["data"] = {"X": [[1.0, 2.0], [-1.0, 1.0]], "y": [1.0, -1.0]}
    raw["clock"] = "tau"
    with pytest.raises(ConfigError) as e3:
        parse_config(raw)
    np.savez(tmp_path / "two.npz", X=np.asarray(TWO.X), y=np.asarray(TWO.y))
    raw["data"] = {"file": str(tmp_path / "two.npz")}
    cfg = parse_config(raw)  # a file is read by the sweep, which checks it with the same rule
    with pytest.raises(ConfigError) as e4:
        run_sweep(cfg, progress=False)
    assert str(e1.value) == str(e2.value) == TAU_ONE_SAMPLE
    assert str(e3.value).endswith(TAU_ONE_SAMPLE)
    assert str(e4.value).startswith(TAU_ONE_SAMPLE)


def test_log_coordinate_rules_name_their_reason():
    one = sf.single_sample([1.0, 2.0])
    W = np.ones((2, 2))
    assert problems(["l2"], "t", one, W, "log") == []
    assert problems(["l2", "linf"], "t", one, W, "log") == [LOG_NOT_LINF]
    assert problems(["l2"], "t", one, np.zeros((2, 2)), "log") == [LOG_NONZERO]
    assert problems(["gd"], "t", sf.single_sample([1.0, -2.0]), W, "log") == [LOG_SIGNS]
    assert problems(["gd"], "tau", TWO, W, "log") == [TAU_ONE_SAMPLE, "solver.coords = 'log' needs one sample (data.mu); use coords = 'linear'"]
    assert problems(["gd", "linf"], "t", one, W, "linear") == []
    with pytest.raises(ValueError, match=r"^solver\.coords = 'log' needs sign"):
        sf.solve("l2", sf.single_sample([1.0, -2.0]), 0.1, 0.1, [1.0], settings=sf.SolverSettings(coords="log"))


def test_max_segments_is_read_as_max_runs_by_the_settings_and_the_config():
    """max_segments, max_runs' name before 0.3, still works where users wrote it: in
    `SolverSettings(...)` (and as its attribute) and as a sweep config's key, with one
    FutureWarning naming max_runs, and the same settings (so the same compiled
    program, `program_key`) as max_runs; both names at once are refused in one line."""
    new = sf.SolverSettings(max_runs=9)
    with pytest.warns(FutureWarning, match=r"max_segments is now SolverSettings\.max_runs") as rec:
        old = sf.SolverSettings(max_segments=9)
    assert len(rec) == 1 and rec[0].filename == __file__  # the warning points at the caller
    assert old == new and hash(old) == hash(new) and old.program_key() == new.program_key() and old.max_runs == 9
    with pytest.warns(FutureWarning, match=r"max_runs"):
        assert new.max_segments == 9
    with pytest.raises(ValueError, match=r"^solver\.max_runs and max_segments \(its name before 0\.3\) are both given"):
        sf.SolverSettings(max_runs=9, max_segments=9)

    def config(key):
        raw = copy.deepcopy(RAW)
        raw["solver"][key] = 9
        return parse_config(raw)

    with pytest.warns(FutureWarning, match=r"max_segments is now solver\.max_runs") as rec:
        cfg = config("max_segments")
    assert len(rec) == 1
    assert cfg == config("max_runs") and cfg.solver.max_runs == 9
    assert cfg.solver.to_settings(cfg.loss) == config("max_runs").solver.to_settings(cfg.loss)
    assert cfg.solver.to_settings(cfg.loss).max_runs == 9
