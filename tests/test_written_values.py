"""A number in a config is the number written (issue 25, items 5, 6 and 15).

- numpy values given from Python: integers, bools, float64 and arrays are taken
  as their Python values; a float32 that is not the number it prints as is
  refused in one line (a config) or widened with a warning naming the number it
  became (an argument of the Python API).
- generated axes (grid, save times) hold the decimals their arithmetic meant, so
  `ds.sel(rho=0.3)` finds the rho written 0.3; coordinates carry no _FillValue.
- a config saved with a byte-order mark is read.
"""

from __future__ import annotations

import codecs
import warnings
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from samflow.config import ConfigError, GridAxis, TimeConfig, load_config, parse_config, read_toml
from samflow.config._sweep import as_written

ROOT = Path(__file__).resolve().parents[1]

BASE = {
    "methods": ["l2"],
    "data": {"mu": [0.5, 1.0]},
    "grid": {"alpha": [0.5, 1.0], "rho": [0.1]},
    "time": {"t1": 10.0, "num": 5},
}


def _with(**over) -> dict:
    return {**BASE, **over}


# --- item 5: numpy values given from Python ---------------------------------------


def test_numpy_integers_bools_float64_and_arrays_are_their_python_values():
    raw = _with(
        depth=np.int64(3),
        grid={"alpha": np.geomspace(0.5, 2.0, 3), "rho": np.array([0.1, 0.3]), "alpha_relative_to_rho": np.bool_(True)},
        time={"t1": np.float64(10.0), "num": np.int32(5)},
        data={"X": np.eye(2), "y": np.array([1, -1])},
    )
    cfg = parse_config(raw)
    assert cfg.depth == 3 and type(cfg.depth) is int and cfg.time.num == 5 and type(cfg.time.num) is int
    assert cfg.grid.alpha == [0.5, 1.0, 2.0] and all(type(v) is float for v in cfg.grid.alpha)
    assert cfg.grid.rho == [0.1, 0.3] and cfg.grid.alpha_relative_to_rho is True
    assert cfg.data.X == [[1.0, 0.0], [0.0, 1.0]] and cfg.data.y == [1, -1]
    # the same config as the plain Python one, field for field
    plain = _with(depth=3, grid={"alpha": [0.5, 1.0, 2.0], "rho": [0.1, 0.3], "alpha_relative_to_rho": True},
                  time={"t1": 10.0, "num": 5}, data={"X": [[1.0, 0.0], [0.0, 1.0]], "y": [1, -1]})
    assert cfg == parse_config(plain)


@pytest.mark.parametrize("where, raw, shown", [
    ("grid.rho", _with(grid={"alpha": [0.5], "rho": [np.float32(0.1)]}), "0.10000000149011612"),
    ("grid.alpha", _with(grid={"alpha": np.geomspace(0.1, 1.0, 3, dtype=np.float32), "rho": [0.1]}), "0.10000000149011612"),
    ("time.t1", _with(time={"t1": np.float32(0.3), "num": 5}), "0.30000001192092896"),
    ("data.mu", _with(data={"mu": np.array([0.1, 1.0], np.float16)}), "0.0999755859375"),
])
def test_a_float32_that_is_not_its_decimal_is_refused_in_one_line(where, raw, shown):
    # Before: strict mode took np.float32(0.1) as 0.10000000149011612, and
    # ds.sel(rho=0.1) then missed the cell.
    with pytest.raises(ConfigError) as err:
        parse_config(raw, "py")
    lines = str(err.value).splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"py: {where}: a float"), lines
    assert shown in lines[0] and "give float64 numbers" in lines[0]


def test_a_float32_that_is_its_decimal_is_taken():
    cfg = parse_config(_with(grid={"alpha": [np.float32(0.5), np.float32(1.0)], "rho": [np.float32(0.25)]},
                             time={"t1": np.float32(10.0), "num": 5}))
    assert cfg.grid.alpha == [0.5, 1.0] and cfg.grid.rho == [0.25] and cfg.time.t1 == 10.0


def test_a_float32_in_a_list_of_tables_names_its_entry():
    from samflow.experiments.cnn_config import parse_cnn_config

    raw = {"tasks": [{"name": "a", "classes": [0, 1]}, {"name": "b", "alphas": [np.float32(0.3)]}]}
    with pytest.raises(ConfigError, match=r"^py: tasks\.1\.alphas: a float32 value: 0\.3 in float32 is "):
        parse_cnn_config(raw, "py")
    cfg = parse_cnn_config({"tasks": [{"name": "a", "alphas": np.array([0.3, 1.0])}], "seed": np.uint8(3)}, "py")
    assert cfg.tasks[0].alphas == [0.3, 1.0] and cfg.seed == 3


def test_the_python_api_widens_a_float32_with_a_warning_naming_the_number():
    from samflow._engine.settings import check_rho, check_save_times

    with pytest.warns(UserWarning, match=r"^rho: 0\.1 in float32 is 0\.10000000149011612 in float64, the number used"):
        r, _ = check_rho(np.float32(0.1))
    assert r[0] == float(np.float32(0.1))
    with pytest.warns(UserWarning, match=r"^ts: 0\.3 in float32 is 0\.30000001192092896"):
        check_save_times(np.array([0.3, 1.0], np.float32))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # exact values, float64 and ints pass silently
        assert check_rho(np.float32(0.5))[0][0] == 0.5
        check_rho(np.array([0.1, 0.2]))
        check_save_times([1, 2, 3])


def test_the_warning_points_at_the_callers_line():
    from samflow._iterate import save_iterations

    with pytest.warns(UserWarning, match=r"^eta: 0\.1 in float32") as record:
        save_iterations([1.0, 2.0], np.float32(0.1))
    assert record[0].filename == __file__


# --- item 6: generated axes hold the values written ---------------------------------


def test_a_linear_grid_holds_the_decimals_written():
    # np.linspace(0.1, 0.5, 5)[2] is 0.30000000000000004: ds.sel(rho=0.3) raised KeyError
    assert np.linspace(0.1, 0.5, 5)[2] != 0.3
    assert GridAxis(start=0.1, stop=0.5, num=5, scale="linear").values().tolist() == [0.1, 0.2, 0.3, 0.4, 0.5]
    axis = GridAxis(start=0.0, stop=1.0, num=11, scale="linear").values()
    assert axis.tolist() == [i / 10 for i in range(11)]  # i / 10 is the float64 nearest the decimal


@pytest.mark.parametrize("start, ratio, num", [(1e-3, 10, 7), (1e-8, 5, 13), (0.25, 2, 9), (2.0, 1.5, 5), (1e-30, 10, 9)])
def test_a_log_grid_holds_its_exact_decimals(start, ratio, num):
    exact = [Fraction(repr(start)) * Fraction(ratio) ** i for i in range(num)]
    values = GridAxis(start=start, stop=float(exact[-1]), num=num).values()
    assert values.tolist() == [float(e) for e in exact]


def test_values_without_a_short_decimal_are_numpys():
    # 10^(k/2) for odd k is irrational: kept as np.geomspace gives it, to the bit
    values = GridAxis(start=1e-3, stop=1e3, num=13).values()
    np.testing.assert_array_equal(values[1::2], np.geomspace(1e-3, 1e3, 13)[1::2])
    assert values[::2].tolist() == [1e-3, 1e-2, 0.1, 1.0, 10.0, 100.0, 1000.0]
    rng = np.random.default_rng(0)
    for _ in range(20):
        lo = float(10 ** rng.uniform(-6, 1))
        hi = lo * float(10 ** rng.uniform(0.5, 6))
        np.testing.assert_array_equal(GridAxis(start=lo, stop=hi, num=997).values(), np.geomspace(lo, hi, 997))


def test_as_written_keeps_the_ends_and_the_order():
    v = np.array([0.1, 0.30000000000000004, 0.30000000000000010])
    # both inner values are within the tolerance of 0.3: snapping would tie them, so nothing moves
    np.testing.assert_array_equal(as_written(np.array([0.0, *v[1:], 1.0]), np.full(4, 1e-15)), [0.0, *v[1:], 1.0])
    # the ends are the written start and stop, never snapped
    np.testing.assert_array_equal(as_written(np.array([0.30000000000000004, 0.5]), np.full(2, 1e-15)),
                                  [0.30000000000000004, 0.5])


def test_save_times_hold_the_decimals_and_end_at_t1():
    assert TimeConfig(t1=1.0, num=10, spacing="linear").values().tolist() == [i / 10 for i in range(1, 11)]
    assert TimeConfig(t1=0.3, num=3, spacing="linear").values().tolist() == [0.1, 0.2, 0.3]
    ts = TimeConfig(t1=1e4, num=9, t_min=1e-4).values()
    assert ts.tolist() == [1e-4, 1e-3, 1e-2, 0.1, 1.0, 10.0, 100.0, 1e3, 1e4]
    ts = TimeConfig(t1=7.3, num=50, t_min=0.013).values()
    assert ts[0] == 0.013 and ts[-1] == 7.3 and np.all(np.diff(ts) > 0)


# --- item 15: a byte-order mark ------------------------------------------------------


def test_a_config_saved_with_a_byte_order_mark_is_read(tmp_path):
    text = (ROOT / "configs" / "default.toml").read_text()
    p = tmp_path / "bom.toml"
    p.write_bytes(codecs.BOM_UTF8 + text.encode("utf-8"))
    # before: "not valid TOML: Invalid statement (at line 1, column 1)"
    assert load_config(p) == load_config(ROOT / "configs" / "default.toml")


@pytest.mark.parametrize("encoding, name", [("utf-16", "UTF-16"), ("utf-32", "UTF-32")])
def test_a_utf16_config_is_refused_saying_so(tmp_path, encoding, name):
    p = tmp_path / "wide.toml"
    p.write_bytes('name = "x"\n'.encode(encoding))  # Python writes the BOM first
    with pytest.raises(ConfigError) as err:
        read_toml(p)
    assert str(err.value) == (f"{p}: the file is {name} (it starts with a {name} byte-order mark); "
                              "TOML is UTF-8: save it as UTF-8")


def test_a_latin1_config_is_refused_naming_the_byte(tmp_path):
    p = tmp_path / "latin.toml"
    p.write_bytes('description = "caf\u00e9"\n'.encode("latin-1"))
    with pytest.raises(ConfigError, match=r"not UTF-8 \(byte 18 is b'\\xe9'\); TOML is UTF-8"):
        read_toml(p)


def test_a_figure_config_with_a_byte_order_mark_is_read(tmp_path):
    from samflow import figures

    src = ROOT / "configs" / "figures" / "trajectories.toml"
    p = tmp_path / "trajectories.toml"
    p.write_bytes(codecs.BOM_UTF8 + src.read_bytes())
    model = figures.FIGURE_CONFIGS["trajectories"]
    assert figures.load_figure_config(p, model, False) == figures.load_figure_config(src, model, False)


# --- item 6 after a real run: select by the values written; no fill value on coordinates


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    from samflow.store import write_results
    from samflow.sweep import run_sweep

    raw = {
        "name": "sel",
        "methods": ["l2"],
        "data": {"mu": [0.5, 1.0]},
        # alpha / rho in 0.3, 0.5, 0.7 (np.linspace: 0.7000000000000001), rho in 0.1, 0.3, 0.5
        # (np.linspace: 0.30000000000000004), save times 0.1 ... 1.0 (0.30000000000000004, 0.7000000000000001)
        "grid": {"alpha": {"start": 0.3, "stop": 0.9, "num": 4, "scale": "linear"}, "alpha_relative_to_rho": True,
                 "rho": {"start": 0.1, "stop": 0.5, "num": 5, "scale": "linear"}},
        "time": {"t1": 1.0, "num": 10, "spacing": "linear"},
        "output": {"figures": False, "switch_times": False},
    }
    ds = run_sweep(parse_config(raw), progress=False)
    return write_results(ds, tmp_path_factory.mktemp("sel") / "results.nc")


def test_a_run_is_selected_by_the_values_written(written):
    import xarray as xr

    assert np.linspace(0.1, 0.5, 5)[2] != 0.3 and np.linspace(0.3, 0.9, 4)[2] != 0.7  # numpy's values
    with xr.open_dataset(written, engine="h5netcdf") as ds:
        assert ds["rho"].values.tolist() == [0.1, 0.2, 0.3, 0.4, 0.5]
        assert ds["alpha"].values.tolist() == [0.3, 0.5, 0.7, 0.9]
        assert ds["time"].values.tolist() == [i / 10 for i in range(1, 11)]
        cell = ds.sel(flow="l2", rho=0.3, alpha=0.7)  # KeyError before
        assert float(cell["alpha_init"]) == 0.7 * 0.3  # the absolute init alpha/rho x rho
        assert cell.sel(time=0.3)["loss"].size == 1 and cell.sel(time=0.7)["loss"].size == 1


def test_coordinates_carry_no_fill_value(written):
    import h5py

    # Before: alpha, rho and time held _FillValue = NaN (xarray's default for floats).
    with h5py.File(written, "r") as f:
        for name in ("alpha", "rho", "time", "coord", "layer", "flow"):
            assert "_FillValue" not in f[name].attrs, name
        assert "_FillValue" in f["loss"].attrs  # data variables keep theirs
