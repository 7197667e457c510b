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
from samflow.parallel import cell_bytes, chunk_cells, sharded_solver
from samflow.solve import Summary
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


@pytest.fixture(scope="module")
def whole():
    """Each method solved as one chunk (the default budget holds the whole grid)."""
    out = {}
    for m in ("l2", "linf", "gd"):
        W0, R, ratio = _cells(m)
        out[m] = solve_grid(m, DATA, W0, R, TS, batch_size=BATCH, devices=1, sort_key=ratio)
    return out


@pytest.mark.parametrize("method", ["l2", "linf", "gd"])
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
                 "num_steps", "num_segments"):
        assert np.array_equal(getattr(s, name), getattr(full, name), equal_nan=True), name


def test_byte_formula_bounds_xla_buffers():
    import jax.numpy as jnp

    from samflow.flows import Method
    from samflow.parallel import resolve_devices
    from samflow.solve import Clock, SolverSettings

    W0, R, _ = _cells("gd")
    settings = SolverSettings().resolved(Method.GD, W0, DATA)
    fn, _ = sharded_solver(resolve_devices(1), Method.GD, Clock.T, settings, False)
    mem = fn.lower(jnp.asarray(W0[:BATCH]), jnp.asarray(R[:BATCH]), DATA, jnp.asarray(TS)).compile().memory_analysis()
    out_b, tmp_b = cell_bytes(2, len(MU), TS.size)
    assert abs(mem.output_size_in_bytes / BATCH - out_b) <= 16
    assert 0.5 * tmp_b <= mem.temp_size_in_bytes / BATCH <= tmp_b


def test_chunk_cells_from_the_budget():
    out_b, tmp_b = cell_bytes(2, 5, 64)
    assert (out_b, tmp_b) == (9384, 17088)
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
