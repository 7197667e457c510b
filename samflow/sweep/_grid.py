"""`solve_grid`: a batch of cells in cost order, memory-bounded chunks and padded
calls of one compiled program per device (`samflow.sweep._devices`)."""

from __future__ import annotations

import collections
import dataclasses
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from ..config import ConfigError
from ..datasets import Dataset
from ..flows import Method
from .._engine.lanes import program_family
from .._methods import check_p, p_array
from .._util.x64 import in_float64
from .._engine.settings import STUCK_INIT, check_data, check_rho, float_array, stuck_inits
from ..solver import Clock, SolverSettings, Summary, Trajectory, check_save_times
from ._checkpoint import ChunkCheckpoint
from ._devices import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_MEMORY_BUDGET_MB,
    IN_FLIGHT,
    batch_width,
    cell_bytes,
    chunk_cells,
    resolve_devices,
    sharded_solver,
)


#: Cells per device in one call, in units of its lanes (the queue the lanes work through).
CALL_QUEUE = 8


def grid_chunk_size(
    B: int, L: int, d: int, n_save: int, *, chunk_size: "int | None", batch_size: int,
    memory_budget_mb: float, n_devices: int, summary: bool,
) -> int:
    """Cells per chunk of a `solve_grid` of B cells (the unit of memory and of checkpoints).

    `chunk_size` when given, else the largest chunk under `memory_budget_mb`
    (`chunk_cells`), and at most B. The number of chunks is `ceil(B / size)`.
    """
    if chunk_size is None:
        out_b, tmp_b = cell_bytes(L, d, n_save, summary=summary)
        chunk_size = chunk_cells(memory_budget_mb, batch_width(batch_size, B), n_devices, out_b, tmp_b)
    return int(min(chunk_size, B))


@in_float64
def solve_grid(
    method: "str | Method",
    data: Dataset,
    W0: Float[Array, "B L d"],
    rho: Float[Array, " B"],
    ts: Float[Array, " n_save"],
    *,
    clock: "str | Clock" = Clock.T,
    settings: SolverSettings = SolverSettings(),
    chunk_size: "int | None" = None,
    memory_budget_mb: float = DEFAULT_MEMORY_BUDGET_MB,
    batch_size: int = DEFAULT_BATCH_SIZE,
    devices: "Sequence[jax.Device] | int | None" = None,
    summary: bool = False,
    on_chunk: Callable[[int], None] | None = None,
    checkpoint: "ChunkCheckpoint | None" = None,
    sort_key: "np.ndarray | None" = None,
    p: "float | None" = None,
    switches: int = 0,
    program_methods: "Sequence[str | Method] | None" = None,
    on_first_call: Callable[[], None] | None = None,
) -> "Trajectory | Summary | tuple":
    """Solve a batch of B cells, sharded over devices, in memory-bounded chunks.

    The cells are sorted by `sort_key` and cut into *chunks* (the unit of
    memory and of `checkpoint`); each chunk is solved by calls of one compiled
    program that hand up to `CALL_QUEUE x lanes` cells to each device
    (`jax.shard_map` over a 1-D mesh: every device runs its own lane loop,
    `samflow._engine.lanes`, no device waits for another inside a call), with
    `lanes = min(batch_size, B)`; the last call is padded by repeating the
    last cell. For given cells and settings the results of a cell depend on
    the cell alone: not on `batch_size`, `chunk_size`, the memory budget, the
    devices, the sort or `checkpoint` (with the command lines' CPU arithmetic,
    `samflow._util.x64.exact_cpu_arithmetic`). Each cell keeps its own adaptive
    step size and status; no cell can stop or NaN another. One compilation
    per (methods of the program, clock, settings, devices, lanes, call size,
    L, d, n_save, summary, switches): with `program_methods` the method is
    data of the program, which serves those methods of `method`'s family
    (`samflow._engine.lanes.program_family`: linf on multi-sample data apart; no linf
    in log coordinates; docs/theory.md s.4), so a sweep of several methods
    compiles one program.

    **Arguments:**

    - `W0` (B, L, d) float64 initial weights; `rho` (B,) float64 radii; `ts`
      (n_save,) save times (`check_save_times`).
    - `p`: the exponent of method "lp" in (1, inf), required for "lp" and
      refused for the other methods (`samflow._methods.check_p`); traced, so
      every p shares one compiled program. `checkpoint` chunks are keyed by
      (method, p): several p share one checkpoint folder.
    - `chunk_size`: cells per chunk. When given it wins; otherwise it is derived
      from `memory_budget_mb` (`samflow.sweep.chunk_cells`: one chunk's
      outputs plus the calls in flight, per `samflow.sweep.cell_bytes`, stay
      under the budget). The budget bounds the solver's working memory, not the
      returned arrays (B rows of outputs, see `summary`).
    - `batch_size`: lanes per device (`samflow._engine.lanes`); a call hands each device
      up to `CALL_QUEUE` x lanes cells, which the lanes work through.
    - `devices`: the devices to shard over (a list, or a count of local
      devices); default all local devices. One CPU device per core:
      `samflow.sweep.use_cpu_cores()` before JAX starts (the CLI does it),
      or `JAX_NUM_CPU_DEVICES=N` in the environment.
    - `summary`: return a `Summary` (dominant index, ||beta||, loss, status and
      event fields), reduced on the device: about 1.8 kB per cell instead of
      8.9 kB for L = 2, d = 5, 64 save times.
    - `on_chunk(n)`: called with the number of cells finished after each call.
    - `on_first_call()`: called once, just before the compiled program's first
      call (where it is compiled, or loaded from the compile cache); not at all
      when every chunk comes from `checkpoint`. The sweep says there that it is
      compiling.
    - `checkpoint`: a `ChunkCheckpoint` that stores each finished chunk on disk
      and supplies the chunks a previous, interrupted run already finished.
    - `sort_key` (B,): the order in which the cells are handed to the lanes
      (e.g. alpha / rho, which decides the regime and the cost); results come
      back in the original order and do not depend on it.
    - `switches`: K > 0 also records the switches of the leader argmax_j
      |beta_j| of every cell in the same pass, K slots per cell
      (`samflow.switches`, docs/theory.md s.5; `ValueError` for anything but an
      integer >= 0); the return value is then
      `(result, SwitchTimes)` (NumPy, leading axis B). Checkpointed chunks
      carry them; a chunk stored without them is solved again.
    - `program_methods`: the methods the compiled program serves, the method
      being data of it (`samflow._engine.lanes.program_family(..., among=program_methods)`:
      those of them that share `method`'s family); None: `method` alone. A sweep
      passes its own methods: one program for all of them. A branch costs
      compile time, about 10% more CPU time per step for the conditional, and
      the program's temporaries are those of its largest branch (linf's and
      lp's grow as d^2, beyond `cell_bytes`), so a call of one method compiles
      that method alone.

    **Returns:** a `Trajectory` (or `Summary`) of NumPy arrays with leading axis
    B; its `ts` field is a read-only broadcast of `ts` (one copy for all cells).

    **Raises:** `ValueError` for an empty grid, a `W0` not of shape (B, L, d)
    or a `rho` not of shape (B,) (one radius per init), as `samflow.solve` for
    data that is not a finite `Dataset`, a negative or non-finite rho or an
    init no flow can leave, a `sort_key` not of shape (B,), a `chunk_size` or
    `batch_size` < 1, a bad `devices` or memory budget, or bad save times;
    `ConfigError` (a `ValueError`, one line) for a checkpoint whose chunks do
    not have this run's chunk size (e.g. made on another number of devices).
    """
    method, p, clock, W0, rho, ts_np, B = _checked_inputs(method, p, clock, switches, W0, rho, ts, data, chunk_size,
                                                          batch_size, sort_key)
    ts = jnp.asarray(ts_np)
    settings = settings.resolved(method, W0, data, clock, p)  # one line for a problem (check_problem)
    devs = resolve_devices(devices)
    n_dev = len(devs)
    size, width, lanes = _layout(B, W0.shape[1:], ts_np.size, n_dev, chunk_size, batch_size, memory_budget_mb, summary)
    per_call = width * n_dev
    family = program_family(method, data.X.shape[0], settings.coords, among=program_methods or (method,))
    fn, sharding = sharded_solver(devs, family, clock, settings, bool(summary), lanes, int(switches))
    perm = np.argsort(np.asarray(sort_key), kind="stable") if sort_key is not None else np.arange(B)
    W0, rho = W0[perm], rho[perm]
    cls = Summary if summary else Trajectory
    result = _solve_chunks(fn, sharding, method, data, W0, rho, ts, ts_np, perm, size=size, width=width,
                           n_dev=n_dev, per_call=per_call, summary=summary, cls=cls, on_chunk=on_chunk,
                           checkpoint=checkpoint, p=p_array(method, p), switches=int(switches),
                           index=jnp.asarray(family.index(method), jnp.int32), on_first_call=on_first_call)
    return _assemble(result, cls, ts_np, B, summary, switches)


def _checked_inputs(method, p, clock, switches, W0, rho, ts, data, chunk_size, batch_size, sort_key):
    """`solve_grid`'s inputs checked and parsed: (method, p, clock, W0, rho, the
    save times as NumPy, B). Raises as `solve_grid` says."""
    method = Method.parse(method)
    p = check_p(method, p)
    clock = Clock.parse(clock)
    if isinstance(switches, (bool, np.bool_)) or not isinstance(switches, (int, np.integer)) or switches < 0:
        raise ValueError(f"switches must be an integer >= 0 (0: no switch times), got {switches!r}")
    W0 = float_array(W0, "W0")  # float64; a float32 0.1 widened with a warning naming the number it became
    rho = float_array(rho, "rho")
    ts_np = check_save_times(ts)
    B = _check_grid(data, W0, rho, chunk_size, batch_size)
    if sort_key is not None and np.shape(sort_key) != (B,):
        raise ValueError(f"sort_key must have shape ({B},), one key per cell, got {np.shape(sort_key)}")
    return method, p, clock, W0, rho, ts_np, B


def _assemble(result, cls, ts_np, B, summary, switches):
    """`solve_grid`'s return from its chunks' columns (`result`): a `cls`
    (`Trajectory` or `Summary`), with the `SwitchTimes` when `switches` > 0."""
    sw = {name[len(SWITCH_PREFIX):]: result.pop(name) for name in list(result) if name.startswith(SWITCH_PREFIX)}
    if not summary:
        result["ts"] = np.broadcast_to(ts_np, (B, ts_np.size))
    if switches:
        from ..switches import SwitchTimes

        return cls(**result), SwitchTimes(**sw)
    return cls(**result)


def _layout(B, shape, n_save, n_dev, chunk_size, batch_size, memory_budget_mb, summary) -> tuple[int, int, int]:
    """(chunk size, cells per device and call, lanes) of a grid of B cells of `shape`
    (L, d) with `n_save` save times on `n_dev` devices (`grid_chunk_size`). A call
    hands each device a queue of up to CALL_QUEUE x lanes cells; a lane that finishes
    its cell takes the next one (samflow._engine.lanes), so no lane waits for another."""
    lanes = batch_width(batch_size, B)
    L, d = shape
    size = grid_chunk_size(B, L, d, n_save, chunk_size=chunk_size, batch_size=batch_size,
                           memory_budget_mb=memory_budget_mb, n_devices=n_dev, summary=summary)
    width = max(1, min(lanes * CALL_QUEUE, -(-size // n_dev)))
    return size, width, min(lanes, width)


def _check_grid(data: Dataset, W0: np.ndarray, rho: np.ndarray, chunk_size, batch_size) -> int:
    """The number of cells B; `ValueError` (one line, as `samflow.solve`) for data that is not a
    finite `Dataset`, the shapes, an empty grid, a negative or non-finite rho, an init no flow
    can leave, a bad chunk or batch size."""
    check_data(data)
    if W0.ndim != 3 or W0.shape[2] != data.d or rho.shape != W0.shape[:1]:
        raise ValueError(
            f"solve_grid needs W0 of shape (B, L, d = {data.d}) and rho of shape (B,), one radius per "
            f"init; got W0 {W0.shape} and rho {rho.shape}"
        )
    B = W0.shape[0]
    if B == 0:
        raise ValueError("the grid is empty: give at least one alpha and one rho")
    check_rho(rho)
    stuck = stuck_inits(W0)
    if stuck.any():
        raise ValueError(f"W0[{int(np.argmax(stuck))}]: {STUCK_INIT.format(depth=W0.shape[1])}")
    if chunk_size is not None and not (isinstance(chunk_size, (int, np.integer)) and chunk_size >= 1):
        raise ValueError(f"chunk_size must be an integer >= 1 or None, got {chunk_size!r}")
    if not (isinstance(batch_size, (int, np.integer)) and batch_size >= 1):
        raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
    return B


def _solve_chunks(fn, sharding, method: Method, data: Dataset, W0: np.ndarray, rho: np.ndarray, ts, ts_np: np.ndarray,
                  perm: np.ndarray, *, size: int, width: int, n_dev: int, per_call: int, summary: bool, cls,
                  on_chunk: Callable[[int], None] | None, checkpoint: "ChunkCheckpoint | None",
                  p=None, switches: int = 0, index=None,
                  on_first_call: Callable[[], None] | None = None) -> dict[str, np.ndarray]:
    """Solve the cells (already sorted by `perm`) chunk by chunk, `IN_FLIGHT` calls of `fn` dispatched at a
    time; each chunk taken from or stored in `checkpoint`; `p`, `index`: lp's exponent and the method's index
    in the program's family, passed to `fn`; `on_first_call` as `solve_grid`'s. Returns the output fields, in
    the original order."""
    B = perm.size
    result: dict[str, np.ndarray] = {}
    in_flight: collections.deque = collections.deque()
    p_key = None if p is None or np.isnan(float(p)) else float(p)  # the checkpoint's key of lp's exponent

    def put(rows: np.ndarray, fields: dict) -> None:
        """Write the cells of `fields` (arrays with leading axis len(rows)) into the result."""
        for name, value in fields.items():
            if name == "ts":
                continue
            value = np.asarray(value)
            if name not in result:
                result[name] = np.empty((B,) + value.shape[1:], value.dtype)
            result[name][rows] = value

    def finish_oldest() -> None:
        c0, idx, n_call, out = in_flight.popleft()
        keep = np.flatnonzero(idx < c0 + n_call)  # the real cells of the call (not the padding)
        put(perm[idx[keep]], {name: np.asarray(v)[keep] for name, v in _fields(out).items() if name != "ts"})
        if on_chunk is not None:
            on_chunk(n_call)

    for k, start in enumerate(range(0, B, size)):
        n_real = min(size, B - start)
        rows = perm[start : start + n_real]
        piece = checkpoint.load(method, k, p_key) if checkpoint is not None else None
        if piece is not None and switches:
            piece, sw_fields = piece
            if sw_fields is None:  # stored by a run without switch times: solved again
                piece = None
            else:
                put(rows, sw_fields)
        elif piece is not None:
            piece = piece[0]
        if piece is not None:
            if int(np.shape(piece.status)[0]) != n_real:
                raise ConfigError(
                    f"checkpoint: chunk {k} holds {np.shape(piece.status)[0]} cells, this run's chunk "
                    f"has {n_real}; the partial results were made with another chunk size (another "
                    "memory budget or device count): rerun with --overwrite, or set solver.chunk_size"
                )
            put(rows, _fields(piece))
            if on_chunk is not None:
                on_chunk(n_real)
            continue
        for c0 in range(start, start + n_real, per_call):
            n_call = min(per_call, start + n_real - c0)
            idx = np.minimum(np.arange(c0, c0 + per_call), start + n_real - 1)  # pad: repeat the last cell
            # Device i gets cells i, i + n_dev, ...: every device sees the same cost range.
            idx = idx.reshape(width, n_dev).T.reshape(-1)
            if len(in_flight) >= IN_FLIGHT:
                finish_oldest()
            if on_first_call is not None:
                on_first_call()
                on_first_call = None
            out = fn(jax.device_put(W0[idx], sharding), jax.device_put(rho[idx], sharding), data, ts, p, index)
            in_flight.append((c0, idx, n_call, out))  # dispatched asynchronously
        while in_flight:
            finish_oldest()
        if checkpoint is not None:
            fields = {name: arr[rows] for name, arr in result.items() if not name.startswith(SWITCH_PREFIX)}
            sw_fields = {name: arr[rows] for name, arr in result.items() if name.startswith(SWITCH_PREFIX)}
            if not summary:
                fields["ts"] = np.broadcast_to(ts_np, (n_real, ts_np.size))
            checkpoint.save(method, k, cls(**fields), p_key, switches=sw_fields or None)
    return result


#: Prefix of the switch-time fields among a call's outputs and in a stored chunk.
SWITCH_PREFIX = "switch_"


def _fields(piece) -> dict:
    """name -> array of a solver output: a `Trajectory` / `Summary`, or a pair of
    one and its `SwitchTimes` (names prefixed with `SWITCH_PREFIX`)."""
    if isinstance(piece, tuple):
        main, sw = piece
        return {**_fields(main), **{SWITCH_PREFIX + name: v for name, v in _fields(sw).items()}}
    return {f.name: getattr(piece, f.name) for f in dataclasses.fields(piece)}
