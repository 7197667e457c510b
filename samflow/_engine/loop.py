"""The lane loop, written once: cells handed to lanes, one adaptive step per lane and iteration.

A call hands `n` cells to `width` lanes. At each iteration every busy lane
tries ONE step of its own cell with its own step size, so no lane waits for
another. What a cell's state is, how a step is tried and what happens at the
end of a run is the problem's (`LaneProblem`): the general `(L, d)` state
(`samflow._engine.lanes`) and the exact reductions (`samflow._engine.reduced`:
two scalars, or one row) are its instances, as diffrax runs one `loop` for any
solver. The stages of an iteration, in order:

1. **try the steps** (`LaneProblem.try_steps`): every lane, one step.
2. **end runs** (`_end_runs`): the lanes whose runs end in this step (an
   event, the horizon, the step budget, a failure) wait, redoing the same step
   (which gives the same bits), until `slots` of them wait (or the queue is
   empty, or no other lane moves: `_handle_ends`); then one real conditional
   (`lax.cond`) hands the first `slots` of them, compacted, with their cells'
   records, to `LaneProblem.end_runs`: locate the event, update the record,
   restart the run or finish the cell. So the costly work of an event runs in
   few iterations, on a compact batch.
3. **save inside the steps** (`_save_inside_steps`): the requested save times
   inside a step that is taken (up to where its run ended) are evaluated on the
   step's dense interpolant (`LaneProblem.save_values`) and written at
   (cell, save index).
4. **advance** (`LaneProblem.advance`): the lanes that go on take their step
   (or retry a rejected one smaller).
5. **refill lanes** (`_refill_lanes`): the lanes of finished cells hand their
   state to the records (`LaneProblem.retire`) and take the next cells of the
   queue (`LaneProblem.load`), in a real conditional.

Two nested `lax.while_loop`s run them. The inner one, the hot loop
(`_steps_until_ends`), runs the iterations that hand no run over: stages 1, 3
and 4 only, with no conditional and without the records in its carry. It stops
at the first iteration that must hand runs over; the outer loop then finishes
that iteration with all five stages (`_ending_iteration`) and enters the hot
loop again. The iterations, and so the bits, are those of one loop that runs
the five stages each time; the hot loop only leaves out what would do nothing.

Everything a lane computes is a function of its cell alone: the results do not
depend on the width, the order of the cells or the other cells of the call
(with `samflow._util.x64.exact_cpu_arithmetic`).
"""

from __future__ import annotations

import abc

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from .rk import _put, _take

__all__ = ["LaneProblem", "LoopState", "EndedRuns", "run_lanes", "where_rows"]


def where_rows(mask, a, b):
    """Per-lane select of two pytrees with a leading lane axis: `a` where `mask`
    `(width,)` holds, else `b`."""
    return jax.tree.map(lambda x, y: jnp.where(mask.reshape(mask.shape + (1,) * (x.ndim - 1)), x, y), a, b)


class EndedRuns(eqx.Module):
    """What `LaneProblem.end_runs` returns for a compact batch of `m` lanes whose
    runs ended (leading axis m):

    - `lanes`: their new lane states (a run restarted, or anything for a
      finished cell: its lane is refilled);
    - `t_limit` `(m,)`: the saves of this step are those up to it;
    - `strict` `(m,)` bool: strictly before `t_limit` (a run cut at an event);
    - `done` `(m,)` bool: the cell is finished (its lane goes to the queue);
    - `records`: the cells' new records (rows of the call's records).
    """

    lanes: object
    t_limit: Float[Array, " m"]
    strict: Bool[Array, " m"]
    done: Bool[Array, " m"]
    records: object


class LaneProblem(eqx.Module):
    """One kind of cell state stepped by `run_lanes` (module docstring).

    A lane is a pytree with a leading lane axis and at least the fields `cell`
    (`(width,)` int32, the cell it holds; n when idle) and `save_idx`
    (`(width,)` int32, the next save time to write). A tried step is a pytree
    with at least `t0`, `t_new` (`(width,)` float64, where the step started and
    where an accepted step ends) and `keep` (`(width,)` bool, accepted). The
    call's records are a pytree with a leading cell axis n.
    """

    @abc.abstractmethod
    def load(self, cells: Int[Array, " m"]):
        """Lanes holding `cells` (n: an idle lane, with a harmless copy of cell 0)."""

    @abc.abstractmethod
    def try_steps(self, lanes):
        """One step of every lane: the tried steps (leading lane axis)."""

    @abc.abstractmethod
    def run_ends(self, tried) -> Bool[Array, " width"]:
        """Which lanes' runs end in the tried step (an event, the horizon, the
        step budget, a failure)."""

    @abc.abstractmethod
    def end_runs(self, lanes, tried, records) -> EndedRuns:
        """The runs of a compact batch of lanes end: `lanes`, `tried` and the
        rows of their cells' `records` (leading axis m)."""

    @abc.abstractmethod
    def advance(self, lanes, tried):
        """The lanes whose runs go on take their tried steps (or retry smaller)."""

    @abc.abstractmethod
    def save_values(self, tried, t: Float[Array, " width"]):
        """Each lane's state at clock time `t` inside its tried step (a pytree
        whose leaves match the call's saved outputs without their cell and save
        axes)."""

    def retire(self, records, rows: Int[Array, " width"], lanes):
        """The records once the lanes of finished cells (`rows`; n: none) hand in
        what they carry. By default the records already hold it."""
        return records


class LoopState(eqx.Module):
    """The carry of `run_lanes`: the lanes (leading axis width), the call's
    records and saved outputs (leading axis n), the next place in the queue and
    the iterations so far."""

    lanes: object
    records: object
    outs: object
    nxt: Int[Array, ""]
    iters: Int[Array, ""]


def _no_ends(tried, width):
    """An iteration that ends no run: the saves of a step go up to its end (or its
    start if rejected)."""
    t_limit = jnp.where(tried.keep, tried.t_new, tried.t0)
    no = jnp.zeros((width,), bool)
    return no, t_limit, no


def _end_runs(problem, lanes, tried, ends, records, n, width, slots):
    """Stage 2: the first `slots` lanes of `ends` end their runs, compacted
    (`LaneProblem.end_runs`) with their cells' records. Returns (chosen, lanes,
    t_limit, strict, finished, records), at full width."""
    idx = jnp.nonzero(ends, size=slots, fill_value=width)[0]
    chosen = jnp.zeros((width,), bool).at[idx].set(True, mode="drop")
    at = jnp.minimum(idx, width - 1)
    sub = _take(lanes, at)
    ended = problem.end_runs(sub, _take(tried, at), _take(records, jnp.minimum(sub.cell, n - 1)))
    rows = jnp.where(idx < width, sub.cell, n)
    records = _put(records, rows, ended.records)
    finished = jnp.zeros((width,), bool).at[idx].set(ended.done, mode="drop")
    _, t_limit, strict = _no_ends(tried, width)
    return (chosen, _put(lanes, idx, ended.lanes), t_limit.at[idx].set(ended.t_limit, mode="drop"),
            strict.at[idx].set(ended.strict, mode="drop"), finished, records)


def _saves_due(save_idx, saving, t_limit, strict, ts):
    """How many save times each lane writes in this step `(width,)` int32: those
    from its next one (`save_idx`) up to `t_limit` (strictly before it where
    `strict`); none where not `saving` or `t_limit` is NaN. `ts` is sorted."""
    upto = jnp.where(strict, jnp.searchsorted(ts, t_limit, side="left", method="compare_all"),
                     jnp.searchsorted(ts, t_limit, side="right", method="compare_all"))
    return jnp.where(saving & ~jnp.isnan(t_limit), jnp.maximum(upto.astype(jnp.int32) - save_idx, 0), 0)


def _save_inside_steps(problem, tried, cells, save_idx, saving, t_limit, strict, outs, ts, n):
    """Stage 3: the save times inside this step (up to `t_limit`, strictly before it
    where `strict`), on its dense interpolant, written at (cell, save index).

    Compacted: the (lane, save) pairs due are numbered in lane order (a cumulative
    sum of the counts, `_saves_due`) and evaluated `width` pairs at a time, each
    on its lane's tried step (gathered), so a round evaluates only saves that are
    due, whatever their spread over the lanes; most steps need one round (none
    when no save is due)."""
    width = save_idx.shape[0]
    due = _saves_due(save_idx, saving, t_limit, strict, ts)
    last = jnp.cumsum(due)  # pairs of lanes 0..i, inclusive
    total = last[-1]
    first = last - due
    pair = jnp.arange(width, dtype=jnp.int32)

    def body(c):
        outs, base = c
        s = base + pair
        lane = jnp.minimum(jnp.searchsorted(last, s, side="right", method="compare_all"), width - 1)
        j = save_idx[lane] + (s - first[lane])
        values = problem.save_values(_take(tried, lane), ts[jnp.minimum(j, ts.shape[0] - 1)])
        rows = jnp.where(s < total, cells[lane], n)
        outs = jax.tree.map(lambda o, v: o.at[rows, j].set(v, mode="drop"), outs, values)
        return outs, base + width

    outs, _ = jax.lax.while_loop(lambda c: c[1] < total, body, (outs, jnp.zeros((), last.dtype)))
    return outs, save_idx + due


def _refill_lanes(problem, lanes, records, nxt, finished, queue, n_queue, n):
    """Stage 5: the finished cells' lanes hand in their state (`LaneProblem.retire`)
    and take the next cells of the queue."""
    rows = jnp.where(finished, lanes.cell, n)
    records = problem.retire(records, rows, lanes)
    take = nxt + jnp.cumsum(finished) - 1
    cells = jnp.where(finished, jnp.where(take < n_queue, queue[jnp.minimum(take, n - 1)], n), lanes.cell)
    lanes = where_rows(finished, problem.load(cells), lanes)
    return lanes, records, nxt + jnp.sum(finished).astype(jnp.int32)


def _handle_ends(ends, busy, nxt, n_queue, slots):
    """Whether this iteration hands its ending runs to `LaneProblem.end_runs`:
    `slots` of them wait, or some wait and the queue is empty or no other lane
    moves. Otherwise they redo this step next time, which gives the same bits."""
    n_end = jnp.sum(ends)
    return (n_end >= slots) | ((n_end > 0) & ((nxt >= n_queue) | (n_end == jnp.sum(busy))))


def _steps_until_ends(problem, state: LoopState, ts, n_queue, n, width, slots):
    """The hot loop: iterations that end no run (stages 1, 3 and 4 only: try the
    steps, save inside them, advance), until an iteration must hand its ending
    runs over (`_handle_ends`) or no lane is busy. The records are not in its
    carry and it has no conditional.

    Returns (lanes, outs, iters, tried, ends, handle): the state after the
    iterations taken, and the tried steps and ending runs of the iteration that
    must hand them over (`handle`; False: no lane is busy), not taken."""
    # try_steps traced ONCE: its jaxpr gives the carry's shapes and is the loop's step (tracing
    # it again for the shapes alone took a fifth of a program's tracing time)
    step, shapes = jax.make_jaxpr(problem.try_steps, return_shape=True)(state.lanes)
    tried0 = jax.tree.map(lambda a: jnp.zeros(a.shape, a.dtype), shapes)
    out_tree = jax.tree.structure(shapes)

    def try_steps(lanes):
        return jax.tree.unflatten(out_tree, jax.core.eval_jaxpr(step.jaxpr, step.consts, *jax.tree.leaves(lanes)))

    def body(c):
        lanes, outs, iters = c[:3]
        busy = lanes.cell < n
        tried = try_steps(lanes)
        ends = busy & problem.run_ends(tried)
        handle = _handle_ends(ends, busy, state.nxt, n_queue, slots)
        moving = busy & ~ends & ~handle
        _, t_limit, strict = _no_ends(tried, width)
        outs, save_idx = _save_inside_steps(problem, tried, lanes.cell, lanes.save_idx, moving & tried.keep, t_limit,
                                            strict, outs, ts, n)
        new = where_rows(moving, problem.advance(lanes, tried), lanes)
        new = eqx.tree_at(lambda l: l.save_idx, new, save_idx)
        return new, outs, iters + (~handle).astype(iters.dtype), tried, ends, handle

    init = (state.lanes, state.outs, state.iters, tried0, jnp.zeros((width,), bool), jnp.zeros((), bool))
    return jax.lax.while_loop(lambda c: ~c[5] & jnp.any(c[0].cell < n), body, init)


def _ending_iteration(problem, state: LoopState, tried, ends, handle, ts, queue, n_queue, n, width,
                      slots) -> LoopState:
    """The iteration that hands ending runs over (all five stages of the module
    docstring), from its tried steps `tried` and ending runs `ends`: the first
    `slots` of them end (`_end_runs`), the others redo their step next time.
    Nothing happens where `handle` is False (no lane is busy). The records alone
    go through the conditionals: the saved outputs are written by a loop that
    runs no time when nothing is due."""
    lanes, records, outs, nxt = state.lanes, state.records, state.outs, state.nxt
    busy = lanes.cell < n

    def no_ends(lanes, tried, records):
        no, t_limit, strict = _no_ends(tried, width)
        return no, lanes, t_limit, strict, no, records

    chosen, ended_lanes, t_limit, strict, finished, records = jax.lax.cond(
        handle, lambda l, t, r: _end_runs(problem, l, t, ends, r, n, width, slots), no_ends, lanes, tried, records)
    moving = busy & ~(ends & ~chosen)
    saving = moving & (tried.keep | chosen)
    outs, save_idx = _save_inside_steps(problem, tried, lanes.cell, lanes.save_idx, saving, t_limit, strict, outs,
                                        ts, n)
    advanced = problem.advance(lanes, tried)
    new = where_rows(moving & ~chosen, advanced, where_rows(chosen, ended_lanes, lanes))
    new = eqx.tree_at(lambda l: l.save_idx, new, save_idx)
    finished = busy & finished
    new, records, nxt = jax.lax.cond(
        jnp.any(finished), lambda *a: _refill_lanes(problem, *a, finished, queue, n_queue, n),
        lambda *a: a, new, records, nxt)
    return LoopState(new, records, outs, nxt, state.iters + handle.astype(state.iters.dtype))


def _iteration(problem, state: LoopState, ts, queue, n_queue, n, width, slots) -> LoopState:
    """One turn of the outer loop: the hot loop's iterations (`_steps_until_ends`),
    then the iteration that hands ending runs over (`_ending_iteration`)."""
    lanes, outs, iters, tried, ends, handle = _steps_until_ends(problem, state, ts, n_queue, n, width, slots)
    state = LoopState(lanes, state.records, outs, state.nxt, iters)
    return _ending_iteration(problem, state, tried, ends, handle, ts, queue, n_queue, n, width, slots)


def run_lanes(problem: LaneProblem, records, outs, ts: Float[Array, " n_save"], queue: Int[Array, " n"],
              n_queue: Int[Array, ""], *, n: int, width: int, slots: int) -> LoopState:
    """Run the cells `queue[:n_queue]` of a call in `width` lanes until every one
    is finished (module docstring); traceable.

    `records`: the call's per-cell records (leading axis n; `problem`'s);
    `outs`: its saved outputs (leaves `(n, n_save, ...)`), written at the save
    times `ts` `(n_save,)`; `queue` `(n,)` int32 the cells in the order they
    take lanes, the first `n_queue` of them to solve; `slots`: lanes whose runs
    end that are handled together (static).

    **Returns:** the final `LoopState` (its `records`, `outs` and `iters`: the
    number of loop iterations).
    """
    lane_ids = jnp.arange(width, dtype=jnp.int32)
    lanes0 = problem.load(jnp.where(lane_ids < n_queue, queue[jnp.minimum(lane_ids, n - 1)], n))
    state = LoopState(lanes0, records, outs, jnp.minimum(n_queue, width).astype(jnp.int32), jnp.zeros((), jnp.int32))
    return jax.lax.while_loop(lambda s: jnp.any(s.lanes.cell < n),
                              lambda s: _iteration(problem, s, ts, queue, n_queue, n, width, slots), state)
