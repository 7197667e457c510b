"""Bounded memory: the chunk size (explicit or from the memory budget) changes
nothing in the results, bit for bit; the byte formula bounds XLA's buffers; the
on-device summary equals the analysis of the full trajectory."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import samflow as sf
from samflow.analysis import dominant_index, tied
from samflow.config import ConfigError, parse_config
from samflow.sweep import cell_bytes, chunk_cells, sharded_solver
from samflow.solver import Summary
from samflow.sweep import solve_grid

MU = [0.2, 0.4, 0.6, 0.8, 1.0]
DATA = sf.single_sample(MU)
TS = np.geomspace(1e-2, 1e3, 12)
BATCH = 8  # cells per vmapped solve: 24 cells are 3 batches


def _cells(method: str):
    """24 cells: alpha/rho in [1e-2, 1e2] x rho in {1e-2, 0.1, 1}, shuffled so
    that the cost sort has work to do."""
    a = np.geomspace(1e-2, 1e2, 8)
    r = np.geomspace(1e-2, 1.0, 3)
    A, R = (x.ravel() for x in np.meshgrid(a, r, indexing="ij"))
    alpha = A if method == "gd" else A * R
    order = np.random.default_rng(3).permutation(alpha.size)
    alpha, R, ratio = alpha[order], R[order], A[order]
    W0 = np.broadcast_to(alpha[:, None, None], (alpha.size, 2, len(MU))).copy()
    return W0, R, ratio


def _assert_identical(a, b, what: str) -> None:
    assert type(a) is type(b)
    for f in dataclasses.fields(a):
        x, y = np.asarray(getattr(a, f.name)), np.asarray(getattr(b, f.name))
        assert x.dtype == y.dtype and x.shape == y.shape, (what, f.name)
        assert np.array_equal(x, y, equal_nan=True), (what, f.name)


class _Whole(dict):
    """Each method solved as one chunk (the default budget holds the whole grid), on first use:
    the default run solves l2 only (linf and gd are slow variants)."""

    def __missing__(self, m):
        W0, R, ratio = _cells(m)
        self[m] = solve_grid(m, DATA, W0, R, TS, batch_size=BATCH, devices=1, sort_key=ratio)
        return self[m]


@pytest.fixture(scope="module")
def whole():
    return _Whole()


@pytest.mark.parametrize("method", ["l2", pytest.param("linf", marks=pytest.mark.slow), pytest.param("gd", marks=pytest.mark.slow)])
def test_chunked_equals_unchunked_bit_for_bit(whole, method):
    W0, R, ratio = _cells(method)
    ref = whole[method]
    status = np.bincount(ref.status, minlength=3)
    if method == "l2":
        assert status[int(sf.Status.COLLAPSED)] >= 3  # collapses, with their events
    if method == "linf":
        assert status[int(sf.Status.SLID)] >= 3  # sliding modes
    variants = {
        "chunk 1": dict(chunk_size=1),
        "chunk 7": dict(chunk_size=7),  # chunks that cut batches, padded calls
        "chunk = grid": dict(chunk_size=W0.shape[0]),
        "budget of one batch": dict(memory_budget_mb=1e-3),
    }
    for what, kw in variants.items():
        done = []
        out = solve_grid(method, DATA, W0, R, TS, batch_size=BATCH, devices=1, sort_key=ratio,
                         on_chunk=done.append, **kw)
        _assert_identical(out, ref, what)
        assert sum(done) == W0.shape[0]
    # Without a sort key the cells go to other batches: same bits again.
    _assert_identical(solve_grid(method, DATA, W0, R, TS, batch_size=BATCH, devices=1, chunk_size=5), ref, "unsorted")
    assert not ref.ts.flags.writeable and ref.ts.shape == (W0.shape[0], TS.size)


def test_summary_is_the_analysis_of_the_trajectory(whole):
    W0, R, ratio = _cells("l2")
    full = whole["l2"]
    s = solve_grid("l2", DATA, W0, R, TS, batch_size=BATCH, devices=1, sort_key=ratio, summary=True, chunk_size=7)
    assert isinstance(s, Summary)
    assert s.dominant.dtype == np.int8 and s.tied.dtype == bool
    np.testing.assert_array_equal(s.dominant, dominant_index(full.beta))
    np.testing.assert_array_equal(s.tied, tied(full.beta, 1e-9))
    assert (s.dominant == 0).any() and (s.dominant == 5).any()  # collapsed cells and the major feature
    np.testing.assert_allclose(s.beta_norm, np.linalg.norm(full.beta, axis=-1), rtol=1e-15, atol=0)
    for name in ("t", "loss", "status", "event_time", "event_t", "collapse_direction", "slide_time",
                 "num_steps", "num_runs"):
        assert np.array_equal(getattr(s, name), getattr(full, name), equal_nan=True), name


def test_byte_formula_bounds_xla_buffers():
    import jax.numpy as jnp

    from samflow._engine.lanes import program_family
    from samflow.flows import Method
    from samflow.sweep import resolve_devices
    from samflow.solver import Clock, SolverSettings

    W0, R, _ = _cells("gd")
    settings = SolverSettings().resolved(Method.GD, W0, DATA)
    family = program_family(Method.GD, DATA.X.shape[0], among=[Method.GD])  # what solve_grid("gd") compiles
    fn, _ = sharded_solver(resolve_devices(1), family, Clock.T, settings, False)
    mem = fn.lower(jnp.asarray(W0[:BATCH]), jnp.asarray(R[:BATCH]), DATA, jnp.asarray(TS), jnp.asarray(jnp.nan),
                   jnp.asarray(family.index(Method.GD), jnp.int32)).compile().memory_analysis()
    out_b, tmp_b = cell_bytes(2, len(MU), TS.size)
    assert abs(mem.output_size_in_bytes / BATCH - out_b) <= 16
    assert 0.5 * tmp_b <= mem.temp_size_in_bytes / BATCH <= tmp_b


def test_chunk_cells_from_the_budget():
    out_b, tmp_b = cell_bytes(2, 5, 64)
    assert (out_b, tmp_b) == (9384, 17088)
    # small n: the second fit (the hot loop's tried steps) bounds XLA's temporaries
    assert cell_bytes(1, 5, 16) == (1792, 8 * (80 + 80 + 170 + 128))  # measured 3,652 (l2) against 3,168 before
    for budget, n_dev in [(1024, 1), (1024, 4), (64, 2), (1, 1)]:
        c = chunk_cells(budget, 128, n_dev, out_b, tmp_b)
        k = c // 128
        assert c % 128 == 0 and k & (k - 1) == 0  # width x a power of two
        used = c * out_b + 2 * n_dev * 128 * (out_b + tmp_b)
        assert used <= budget * 2**20 or c == 128
        assert (2 * c) * out_b + 2 * n_dev * 128 * (out_b + tmp_b) > budget * 2**20  # the largest such
    assert chunk_cells(1024, 128, 1, out_b, tmp_b) == 65536
    with pytest.raises(ValueError, match="memory_budget_mb"):
        chunk_cells(0, 128, 1, out_b, tmp_b)


def test_solve_grid_rejects_bad_batching():
    W0, R, _ = _cells("gd")
    for kw, match in [({"chunk_size": 0}, "chunk_size"), ({"batch_size": 0}, "batch_size"),
                      ({"devices": 0}, "devices"), ({"devices": []}, "devices"),
                      ({"memory_budget_mb": -1.0}, "memory_budget_mb")]:
        with pytest.raises(ValueError, match=match):
            solve_grid("gd", DATA, W0, R, TS, **kw)


def test_config_keys_for_memory():
    base = {
        "methods": ["gd"], "data": {"mu": [1.0]}, "grid": {"alpha": [1.0], "rho": [0.1]},
        "time": {"t1": 1.0},
    }
    cfg = parse_config(base)
    assert cfg.solver.chunk_size is None and cfg.solver.memory_budget_mb == 1024.0
    assert cfg.solver.batch_size == 128
    cfg = parse_config({**base, "solver": {"memory_budget_mb": 256, "chunk_size": 64, "batch_size": 32}})
    assert (cfg.solver.memory_budget_mb, cfg.solver.chunk_size, cfg.solver.batch_size) == (256.0, 64, 32)
    for bad in ({"memory_budget_mb": 0}, {"chunk_size": 0}, {"batch_size": 0}):
        with pytest.raises(ConfigError, match=f"solver.{next(iter(bad))}"):
            parse_config({**base, "solver": bad})


# ---------------------------------------------------------------- issue 12, case 8: oversized runs

from samflow.sweep import check_memory, in_flight_bytes, results_bytes  # noqa: E402

GiB = 2**30
# The run: 512 x 512 cells, 1000 linear save times, depth 2, d = 32, full save, one method.
BIG = dict(n_cells=512 * 512, n_methods=1, L=2, d=32, n_save=1000)


def test_memory_estimate_of_the_oversized_run():
    # samflow's per-cell estimate: 208 GB of outputs; held twice (solver results + the dataset).
    assert results_bytes(**BIG, summary=False) == 2 * 262144 * 792816
    assert round(results_bytes(**BIG, summary=False) / 2 / 1e9) == 208
    # The batches in flight: 2 calls x 2 devices x 128 cells x (outputs + temporaries) = 1.11 GiB.
    assert round(in_flight_bytes(2, 32, 1000, summary=False, width=128, n_devices=2) / GiB, 2) == 1.11


def test_oversized_run_is_refused_in_one_line_naming_the_fixes():
    kw = dict(summary=False, batch_size=128, n_devices=2, memory_budget_mb=1024)
    with pytest.raises(ValueError) as err:
        check_memory(**BIG, **kw, available_bytes=125 * GiB)
    msg = str(err.value)
    assert "\n" not in msg and "388 GiB" in msg and "125 GiB available" in msg
    assert 'output.save = "summary"' in msg and "time.num" in msg and "--num-slices 4 or more" in msg
    # The summary run the message offers fits (14.1 GiB): only the budget note remains.
    note = check_memory(**{**BIG}, **{**kw, "summary": True}, available_bytes=125 * GiB)
    assert note is not None and "memory_budget_mb = 1024" in note
    # Enough memory: no refusal, but the budget is below the 1.11 GiB in flight: say so.
    note = check_memory(**BIG, **kw, available_bytes=1000 * GiB)
    assert "memory_budget_mb = 1024" in note and "1.11 GiB" in note and "batch_size" in note
    # A budget that holds the batches in flight: nothing to say; unknown available memory: no refusal.
    assert check_memory(**BIG, **{**kw, "memory_budget_mb": 2048}, available_bytes=1000 * GiB) is None
    assert check_memory(**BIG, **{**kw, "memory_budget_mb": 2048}, available_bytes=None) is None
    # A small run fits easily.
    assert check_memory(96, 3, 2, 5, 200, **kw, available_bytes=1 * GiB) is None


BIG_TOML = """\
name = "big"
methods = ["l2"]
depth = 2
[data]
X = [[{row}]]
y = [1.0]
[grid]
alpha = {{ start = 1e-2, stop = 1e2, num = 512 }}
alpha_relative_to_rho = true
rho = {{ start = 1e-3, stop = 1e-1, num = 512 }}
[time]
t1 = 100.0
num = 1000
spacing = "linear"
[output]
figures = false
"""


def test_cli_refuses_an_oversized_run_before_any_folder_or_compilation(tmp_path, monkeypatch, capsys):
    from samflow import sweep
    from samflow.config import load_config
    from samflow.sweep import _devices, _grid

    cfg = tmp_path / "big.toml"
    cfg.write_text(BIG_TOML.format(row=", ".join(["1.0"] * 32)))
    monkeypatch.setattr(_devices, "available_memory_bytes", lambda: 125 * GiB)

    def no_compile(*a, **k):
        raise AssertionError("compiled")

    monkeypatch.setattr(_grid, "sharded_solver", no_compile)
    out = tmp_path / "out"
    assert sweep.main([str(cfg), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: the results need about 388 GiB"), err
    assert 'output.save = "summary"' in err and "--num-slices" in err
    assert not out.exists()
    # One slice of 64 fits in 125 GiB: the pure check passes it (with the budget note, 1 device).
    loaded = load_config(cfg)
    data = sweep.build_data(loaded)
    note = sweep.memory_preflight(loaded, data, (0, 64), available_bytes=125 * GiB, n_devices=4)
    assert "memory_budget_mb = 1024" in note and "2.23 GiB" in note
    with pytest.raises(ConfigError, match="of this slice"):
        sweep.memory_preflight(loaded, data, (0, 2), available_bytes=125 * GiB, n_devices=4)
