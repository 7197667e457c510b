"""The figures' shared solve (`samflow.figures._context._solve`): cells sorted by cost
into lockstep batches, results unchanged bit for bit (a default test; the figures
themselves are built in the slow tests/test_figures.py)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.mark.slow  # one compilation: 16 s at load 5
def test_figure_solve_sorted_by_cost_equals_the_unsorted_solve_bit_for_bit():
    """The figures' `_solve` sorts cells by alpha / rho into lockstep batches
    (`cost_key`): the results come back in the caller's order and equal the
    unsorted `solve_grid` of the same padded cells bit for bit (one program)."""
    import numpy as np

    from samflow.figures._context import SETTINGS, Context, _init, _solve, cost_key
    from samflow.sweep import solve_grid

    ctx = Context.make(Path("/tmp") / "unused_figs", quick=True)
    rng = np.random.default_rng(5)
    a = rng.permutation(np.geomspace(1e-3, 3.0, 20))  # shuffled: the sort moves cells
    rho = rng.permutation(np.geomspace(1e-2, 1.0, 20))
    ts = ctx.log_times(1e-3, 50.0)
    got = _solve(ctx, "l2", ctx.single_tau(), _init(a, 2, ctx.d), rho, ts, clock="tau")
    c = ctx.common.chunk
    idx = np.minimum(np.arange(20 + (-20) % c), 19)
    ref = solve_grid("l2", ctx.single_tau(), _init(a, 2, ctx.d)[idx], rho[idx], ts, clock="tau", settings=SETTINGS,
                     batch_size=c)
    assert np.any(np.asarray(got.status) == 1) and np.any(np.asarray(got.status) == 0)  # collapsing and not
    for name in ("beta", "status", "event_time", "num_steps"):
        assert np.array_equal(np.asarray(getattr(got, name)), np.asarray(getattr(ref, name))[:20], equal_nan=True), name
    key = cost_key(_init(a, 2, ctx.d), rho)
    np.testing.assert_allclose(key, np.log(a / rho), rtol=1e-12)
    assert not np.array_equal(np.argsort(key), np.arange(20))  # the sort did reorder the cells
