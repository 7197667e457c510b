"""Batches of cells over devices, in bounded memory, with results that do not
depend on either.

A grid of B cells is solved as a sequence of *calls* of one compiled program.
Each call hands `n_dev * width` cells to a 1-D device mesh (axis "cells") with
`jax.shard_map`: every device runs its own lane loop (`samflow._engine.lanes`) over its
`width` cells with `lanes` lanes, independently of the other devices (no
collective, so no device waits for another inside a call; a `jit` over
`NamedSharding` inputs would instead synchronize the loop's condition at every
step).

**Bits.** A lane's arithmetic does not depend on the number of lanes or on the
other cells (no dot products; no fused multiply-adds and no YNNPACK reductions with
`samflow._util.x64.exact_cpu_arithmetic`): the lanes, the call size, chunking
(`chunk_size`, the memory budget), the device count and the order in which
calls are made change no bit of a cell (tests/test_lanes.py).

**Memory.** The device memory of a call is measured by XLA's buffer assignment
(`compiled.memory_analysis()`: outputs + temporaries). `cell_bytes` is the
formula fitted to those measurements (see its docstring); `chunk_cells` turns a
budget into the number of cells whose outputs may be alive at once.
"""

from __future__ import annotations

import functools
import math
import os
import sys
import threading
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from .._engine import lanes as _lanes, solution as _solution
from .._util.cache import StoredProgram
from .._util.x64 import compile_options
from ..flows import Method

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_MEMORY_BUDGET_MB",
    "resolve_devices",
    "batch_width",
    "cell_bytes",
    "chunk_cells",
    "in_flight_bytes",
    "results_bytes",
    "available_memory_bytes",
    "check_memory",
    "sharded_solver",
    "use_cpu_cores",
]  # (start_distributed, is_writer, agree, agree_same: the sweep's own, not re-exported)

#: Cells per device in one vmapped solve (64x64 l2 chart on 2 cores: 64 -> 1.8 s,
#: 128 -> 1.3 s, 256 -> 1.4 s, 512 -> 2.9 s, 1024 -> 3.3 s; cost-sorted cells).
DEFAULT_BATCH_SIZE = 128
DEFAULT_MEMORY_BUDGET_MB = 1024.0
#: Calls dispatched ahead of the one being fetched (devices compute while the host copies).
IN_FLIGHT = 2

AXIS = "cells"


def resolve_devices(devices: "Sequence[jax.Device] | int | None" = None) -> tuple:
    """The devices to shard over: all devices (None: the local ones, or, in a
    `jax.distributed` run of several processes, every process's devices, one
    global mesh), the first n local devices (an int), or the given devices.

    **Raises:** `ValueError` for an empty list, a count < 1 or above the number
    of local devices, or repeated devices.
    """
    local = jax.local_devices()
    if devices is None:
        return tuple(jax.devices())  # == local unless jax.distributed joined several processes
    if isinstance(devices, (int, np.integer)):
        if not (1 <= devices <= len(local)):
            raise ValueError(
                f"devices: asked for {devices} device(s), {len(local)} local device(s) available "
                "(more CPU devices: XLA_FLAGS=--xla_force_host_platform_device_count=N before jax starts)"
            )
        return tuple(local[: int(devices)])
    devs = tuple(devices)
    if not devs:
        raise ValueError("devices: give at least one device")
    if len(set(devs)) != len(devs):
        raise ValueError("devices: a device is listed twice")
    return devs


def batch_width(batch_size: int, n_cells: int) -> int:
    """Lanes per device: `min(batch_size, n_cells)` (a cell's results do not depend on it).

    **Raises:** `ValueError` if either argument is < 1.
    """
    if batch_size < 1 or n_cells < 1:
        raise ValueError(f"batch_size and n_cells must be >= 1, got {batch_size}, {n_cells}")
    return int(min(batch_size, n_cells))


def cell_bytes(L: int, d: int, n_save: int, *, summary: bool = False) -> tuple[int, int]:
    """Device bytes per cell of a vmapped solve: (outputs, temporaries).

    From XLA's buffer assignment (`memory_analysis()` of the compiled call) on
    CPU, float64, tsit5, fitted over L in {1, 2, 3}, d in {2, 5, 50}, n_save in
    {16, 64, 256}, gd / l2 / linf, batch widths 16 and 64 (per-cell bytes do not
    depend on the width). The formula is an upper bound: outputs exact to a few
    bytes; the `Trajectory` temporaries the larger of two fits: the first (three
    n x Ld buffers), and one refitted after the lane loop's hot inner loop
    (which carries no copy of the outputs through a conditional) over L in
    {1, 2, 3}, d in {5, 50}, n_save in {16, 64}, gd and l2, batches of 8, which
    the first fell short of at small n (by up to 15% at L = 1, n = 16). With
    Ld = L d and n = n_save:

    - outputs, `Trajectory`: 8 (n (Ld + d + 3) + Ld + d + 6): ts, t, W, beta
      and loss per save time, and the per-cell fields;
      `Summary`: 8 (3 n + Ld + d + 6) + 2 n: t, ||beta||, loss, and one byte
      each of dominant index and tie flag;
    - temporaries, `Trajectory`: 8 max(3 n Ld + 12 Ld + 96, n Ld + n d + 34 Ld
      + 128): the carried output of the lane loop (W and beta per save time),
      the tried steps (solver stages, dense output, controller state) in the
      lanes and gathered for the saves; the first term is 2x the measurement
      at large n;
      `Summary`: 8 (4 n (Ld + 1) + 12 Ld + 96) (beta and the sort of |beta| too).

    L = 2, d = 5, n = 64: outputs 9.4 kB (summary 1.8 kB), temporaries 17.1 kB
    (summary 24.3 kB); measured 9.4 / 1.8 kB and 9.3 (l2) / 21.5 kB. The host keeps
    the outputs of all B cells (less the `ts` field, one shared copy).
    """
    Ld = L * d
    if summary:
        out = 8 * (3 * n_save + Ld + d + 6) + 2 * n_save
        tmp = 8 * (4 * n_save * (Ld + 1) + 12 * Ld + 96)
    else:
        out = 8 * (n_save * (Ld + d + 3) + Ld + d + 6)
        tmp = 8 * max(3 * n_save * Ld + 12 * Ld + 96, n_save * Ld + n_save * d + 34 * Ld + 128)
    return int(out), int(tmp)


def chunk_cells(
    memory_budget_mb: float, width: int, n_devices: int, out_bytes: int, tmp_bytes: int
) -> int:
    """Cells per chunk under a memory budget: the largest `width * 2**k` with

        chunk * out_bytes + IN_FLIGHT * n_devices * width * (out_bytes + tmp_bytes) <= budget

    (one chunk's outputs are copied when it is checkpointed; at most `IN_FLIGHT`
    calls are alive on the devices, outputs and temporaries), and at least
    `width`. A power-of-two number of batches keeps the chunk boundaries the
    same for 1, 2, 4, 8, ... devices, so that `--resume` works across device
    counts. The returned arrays (B rows of outputs) are not part of the budget.

    **Raises:** `ValueError` for a budget <= 0.
    """
    if not memory_budget_mb > 0:
        raise ValueError(f"memory_budget_mb must be > 0, got {memory_budget_mb!r}")
    budget = memory_budget_mb * 2**20 - IN_FLIGHT * n_devices * width * (out_bytes + tmp_bytes)
    n_batches = max(1.0, budget / (width * out_bytes))
    return int(width * 2 ** int(math.floor(math.log2(n_batches))))


def in_flight_bytes(
    L: int, d: int, n_save: int, *, summary: bool, width: int, n_devices: int
) -> int:
    """Device bytes of the calls in flight: `IN_FLIGHT * n_devices * width *
    (outputs + temporaries)` per `cell_bytes`. The solver needs this much
    whatever `memory_budget_mb` says (`chunk_cells` never goes below one batch).

    E.g. L = 2, d = 32, 1000 save times, width 128, 2 devices: 1.11 GiB.
    """
    out_b, tmp_b = cell_bytes(L, d, n_save, summary=summary)
    return int(IN_FLIGHT * n_devices * width * (out_b + tmp_b))


def results_bytes(n_cells: int, n_methods: int, L: int, d: int, n_save: int, *, summary: bool) -> int:
    """Host bytes a sweep of `n_cells` cells and `n_methods` methods holds at its
    peak: the solver's outputs (`n_methods * n_cells` cells of `cell_bytes`
    outputs) and, at the same time, the labelled `xarray.Dataset` made from them
    (at most as large again), so twice the outputs. An upper bound (the outputs
    count the weights and save times, which the dataset does not keep).

    E.g. 512 x 512 cells, one method, L = 2, d = 32, 1000 save times, full
    save: 207.8 GB of outputs, 415.7 GB in all.
    """
    out_b, _ = cell_bytes(L, d, n_save, summary=summary)
    return int(2 * n_methods * n_cells * out_b)


def available_memory_bytes() -> "int | None":
    """Memory this process can still allocate, in bytes: `MemAvailable` of
    /proc/meminfo (else `os.sysconf` available pages), capped by a cgroup v2
    limit (`memory.max - memory.current`) when there is one; None when unknown.
    """
    avail = None
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError):
        pass
    if avail is None:
        try:
            avail = int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
        except (AttributeError, OSError, ValueError):
            avail = None
    try:
        root = "/sys/fs/cgroup/"
        with open(root + "memory.max") as fh:
            limit = fh.read().strip()
        if limit != "max":
            with open(root + "memory.current") as fh:
                left = int(limit) - int(fh.read().strip())
            avail = left if avail is None else min(avail, left)
    except (OSError, ValueError):
        pass
    return avail


def _gib(n: float) -> str:
    return f"{n / 2**30:.3g} GiB" if n >= 2**30 else f"{n / 2**20:.3g} MiB"


def check_memory(
    n_cells: int,
    n_methods: int,
    L: int,
    d: int,
    n_save: int,
    *,
    summary: bool,
    batch_size: int,
    n_devices: int,
    memory_budget_mb: float,
    available_bytes: "int | None",
    num_slices: "int | None" = None,
) -> "str | None":
    """Check, before anything is compiled, that a sweep's results fit in memory.

    **Arguments:** `n_cells` the cells this process solves (one slice's, with
    padding, under `--num-slices`); `n_methods`; `L`, `d`, `n_save` the shape;
    `summary` for `output.save = "summary"`; `batch_size`, `n_devices` the
    batching (`batch_width`); `memory_budget_mb` the config's budget;
    `available_bytes` the memory that can be allocated (`available_memory_bytes()`;
    None skips the refusal); `num_slices` K under `--num-slices K`, else None.

    Needs `results_bytes(...) + in_flight_bytes(...)`.

    **Returns:** None, or a one-line note when `memory_budget_mb` is below what
    the batches in flight need (the solver then uses more than the budget).

    **Raises:** `ValueError` (one line) when the need exceeds `available_bytes`,
    naming the fixes: `output.save = "summary"`, fewer save times (`time.num`),
    or `--num-slices` with a count that fits.
    """
    width = batch_width(batch_size, n_cells)
    flight = in_flight_bytes(L, d, n_save, summary=summary, width=width, n_devices=n_devices)
    held = results_bytes(n_cells, n_methods, L, d, n_save, summary=summary)
    need = held + flight
    if available_bytes is not None and need > available_bytes:
        what = f"{n_cells} cells" + (f" of this slice (of {num_slices})" if num_slices else "")
        fixes = []
        if not summary:
            s_need = results_bytes(n_cells, n_methods, L, d, n_save, summary=True) + in_flight_bytes(
                L, d, n_save, summary=True, width=width, n_devices=n_devices
            )
            fixes.append(f'output.save = "summary" (needs {_gib(s_need)})')
        fixes.append(f"fewer save times (time.num = {n_save} now)")
        room = available_bytes - flight
        if room > 0:
            k = max(2, math.ceil(held / room)) * (num_slices or 1)
            fixes.append(f"--num-slices {k} or more (one slice per process)")
        else:  # the batches in flight alone do not fit
            fixes.append(f"a smaller solver.batch_size ({width} cells per device now)")
        raise ValueError(
            f"the results need about {_gib(need)} of memory ({what} x {n_methods} method(s) x "
            f"{n_save} save times, L = {L}, d = {d}), more than the {_gib(available_bytes)} available; "
            f"use {', or '.join(fixes)}"
        )
    if flight > memory_budget_mb * 2**20:
        return (
            f"solver.memory_budget_mb = {memory_budget_mb:g} is below the {_gib(flight)} the batches in "
            f"flight need ({IN_FLIGHT} calls x {n_devices} device(s) x {width} cells); the solver uses "
            "that much anyway: raise memory_budget_mb or lower solver.batch_size"
        )
    return None


def use_cpu_cores(n: "int | None" = None) -> "int | None":
    """Give JAX one CPU device per core (or `n` devices), so that `solve_grid`
    shards a sweep over the cores (each device runs its own batch on its own
    thread; XLA runs one vmapped solve on one core).

    Call it before JAX's first computation. It changes nothing, and returns
    None, when JAX has already started, or when the user chose a count
    (`JAX_NUM_CPU_DEVICES` / `jax_num_cpu_devices`, or
    `--xla_force_host_platform_device_count` in `XLA_FLAGS`). Results do not
    depend on the number of devices.

    **Returns:** the number of CPU devices set, or None.
    """
    if jax.config.jax_num_cpu_devices != -1 or "xla_force_host_platform_device_count" in os.environ.get(
        "XLA_FLAGS", ""
    ):
        return None
    if n is None:
        try:
            n = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            n = os.cpu_count() or 1
    try:
        jax.config.update("jax_num_cpu_devices", int(n))
    except RuntimeError:  # the backend has started: too late
        return None
    return int(n)


def sharded_solver(devices: tuple, family: "tuple[Method, ...]", clock, settings, summary: bool = False,
                   lanes: int = 128, switches: int = 0):
    """The jitted solve of `n_dev * width` cells over `devices` (cached per structure).

    Returns `(fn, sharding)`: `fn(W0, rho, data, ts, p, index)` with `W0` (n_dev w, L, d)
    and `rho` (n_dev w,) placed with `sharding` (device i gets rows i w ... (i+1) w),
    `data`, `ts`, `p` (lp's exponent, a float64 scalar, NaN for the other
    methods: traced, one program for every p) and `index` (the method
    `family[index]`, an int32 scalar: traced, one program for every method of the
    `family`, `samflow._engine.lanes.program_family`) replicated, returns a `Trajectory` (or a `Summary` with
    `summary`) with leading axis n_dev w. One compilation per (devices, family,
    clock, settings, summary, w, L, d, n_save). With the compile cache on (the
    command lines), `fn` is a `samflow._util.cache.StoredProgram`: a second process
    loads the compiled program instead of tracing it again, same bits.

    `lanes`: lanes per device (`samflow._engine.lanes.solve_lanes`). `switches` K > 0:
    the switches of the leader are recorded in the same pass and checked
    (`samflow.switches`); `fn` then returns `(result, SwitchTimes)`.

    The program is made for `settings.program_key()` and takes rtol and atol
    traced, so calls at other tolerances (the switch refinement's) share it;
    `fn` passes `settings.tolerances()`. `sharded_solver.cache_clear()` forgets
    the programs (as a new process would).
    """
    program, sharding = _sharded_program(devices, family, clock, settings.program_key(), summary, lanes, switches)
    tol = jnp.asarray(settings.tolerances())
    return _WithTolerances(program, tol), sharding


class _WithTolerances:
    """A sharded program called with its tolerances: `fn(W0, rho, data, ts, p, index)`."""

    def __init__(self, program, tol):
        self.program, self.tol = program, tol

    def __call__(self, W0, rho, data, ts, p, index):
        return self.program(W0, rho, data, ts, p, index, self.tol)

    def lower(self, W0, rho, data, ts, p, index):
        return self.program.lower(W0, rho, data, ts, p, index, self.tol)

    def __getattr__(self, name):  # the StoredProgram's own (e.g. `loaded`, its key)
        return getattr(self.program, name)


@functools.lru_cache(maxsize=64)
def _sharded_program(devices: tuple, family, clock, settings, summary, lanes, switches):
    """`sharded_solver`'s program for `settings` (a `program_key()`), cached per structure:
    `fn(W0, rho, data, ts, p, index, tol)`."""
    from ..switches import SwitchTimes, _check

    mesh = jax.sharding.Mesh(np.asarray(devices), (AXIS,))
    P = PartitionSpec
    # Devices of other processes (jax.distributed): the outputs are gathered onto every
    # device (one all-gather after the solve), so each process reads the whole call's
    # results from its own devices and process 0 can write them.
    gather = any(dev.process_index != jax.process_index() for dev in devices)

    def per_device(W0, rho, data, ts, p, index, tol):
        # Looked up at trace time, so that a test can count traces.
        out, _, raw = _lanes.solve_lanes(W0, rho, data, ts, method=index, clock=clock, settings=settings, p=p,
                                         width=lanes, switches=switches, family=family, tol=tol)
        sw = jax.vmap(_check, in_axes=(0, 0, None))(SwitchTimes(*raw), out.W, ts) if switches else None
        out = _solution.summarize(out) if summary else out
        out = (out, sw) if switches else out
        return jax.lax.all_gather(out, AXIS, tiled=True) if gather else out

    body = jax.shard_map(
        per_device,
        mesh=mesh,
        in_specs=(P(AXIS), P(AXIS), P(), P(), P(), P(), P()),
        out_specs=P() if gather else P(AXIS),
        check_vma=False,  # diffrax's loops are not vma-typed
    )
    what = ("samflow.sweep.sharded_solver", tuple(dev.id for dev in devices), family, clock, settings, summary, gather,
            lanes, switches)
    return StoredProgram(jax.jit(body, compiler_options=compile_options()), what), NamedSharding(mesh, P(AXIS))


sharded_solver.cache_clear = _sharded_program.cache_clear


#: Seconds a process waits for the coordinator and the other processes (`--coordinator-timeout`).
COORDINATOR_TIMEOUT_S = 60.0


def start_distributed(
    coordinator: "str | None" = None, num_processes: "int | None" = None, process_id: "int | None" = None,
    timeout_s: float = COORDINATOR_TIMEOUT_S,
) -> int:
    """Join this process to a `jax.distributed` run: one global device mesh over the
    devices of every process (`resolve_devices`), each process solving the cells
    of its own devices, process 0 writing the results.

    **Arguments:** `coordinator` "host:port" of process 0's coordination service,
    `num_processes`, `process_id` (0 .. num_processes - 1). Any of them None: JAX
    reads them from the environment (`JAX_COORDINATOR_ADDRESS`, or the variables
    SLURM, Open MPI, Kubernetes or Cloud TPU set: e.g. one `srun` task per process).
    Call it before JAX's first computation. CPU devices of several processes talk
    over gloo (`jax_cpu_collectives_implementation`, JAX's default).

    When the coordinator does not answer, or not every process joins, within
    `timeout_s` seconds, the process prints one line ("error: ...", naming the
    coordinator's address and `--coordinator-timeout`) and exits with code 2
    (`os._exit`: JAX's own timeout aborts the process from C++, exit 134,
    which no Python code can catch, so a watchdog thread ends it first).

    **Returns:** the number of processes.

    **Raises:** `ValueError` (one line) for a process id outside 0 .. num_processes - 1,
    a count < 1, a coordinator that is not host:port, or when JAX cannot start
    (already started, or no cluster found in the environment).
    """
    if num_processes is not None and num_processes < 1:
        raise ValueError(f"--num-processes must be >= 1, got {num_processes}")
    if process_id is not None and num_processes is not None and not 0 <= process_id < num_processes:
        raise ValueError(f"--process-id must be in 0..{num_processes - 1}, got {process_id}")
    if coordinator is not None and not _host_port(coordinator):
        raise ValueError(f"--coordinator must be host:port (e.g. 10.0.0.1:12345), got {coordinator!r}")
    if not timeout_s > 0:
        raise ValueError(f"--coordinator-timeout must be > 0 seconds, got {timeout_s!r}")
    watchdog = threading.Timer(timeout_s, _no_coordinator, (coordinator, process_id, timeout_s))
    watchdog.daemon = True
    watchdog.start()
    try:
        # JAX's own limit later than the watchdog's: the watchdog speaks first.
        jax.distributed.initialize(coordinator, num_processes, process_id,
                                   initialization_timeout=int(math.ceil(timeout_s)) + 30)
    except (RuntimeError, ValueError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        given = {"--coordinator HOST:PORT": coordinator, "--num-processes N": num_processes, "--process-id I": process_id}
        missing = [flag for flag, v in given.items() if v is None]
        need = f" (missing: {', '.join(missing)})" if missing and len(missing) < 3 else ""
        raise ValueError(
            f"jax.distributed could not start ({first}); by hand, give all of --coordinator HOST:PORT, "
            f"--num-processes N and --process-id I{need}, or run under a scheduler JAX detects (e.g. srun)"
        ) from None
    finally:
        watchdog.cancel()
    return jax.process_count()


def _no_coordinator(coordinator: "str | None", process_id: "int | None", timeout_s: float) -> None:
    """The watchdog of `start_distributed`: one line on stderr, then exit code 2."""
    address = coordinator or os.environ.get("JAX_COORDINATOR_ADDRESS") or "the address the scheduler set"
    waited = f"within {timeout_s:g} s (--coordinator-timeout)"
    if process_id == 0:
        what = (f"process 0 (the coordinator, at {address}): not every process joined {waited}; start all of "
                "them with the same --coordinator and --num-processes, or raise --coordinator-timeout")
    else:
        what = (f"no coordinator answered at {address} {waited}; start process 0 (--process-id 0) on that host "
                "first, check the host and port, or raise --coordinator-timeout")
    sys.stdout.flush()
    print(f"error: jax.distributed: {what}", file=sys.stderr, flush=True)
    os._exit(2)  # the main thread is inside JAX's C++ connect; only an exit ends it


def _host_port(address: str) -> bool:
    host, _, port = address.rpartition(":")
    return bool(host) and port.isdigit() and 0 < int(port) < 65536


def is_writer() -> bool:
    """True in the process that writes results and checkpoints: process 0 of a
    `jax.distributed` run, or the only process."""
    return not jax.distributed.is_initialized() or jax.process_index() == 0


def agree(ok: bool) -> bool:
    """True when every process of a `jax.distributed` run passes `ok` True (a
    collective: every process must call it, at the same point); `ok` itself in a
    single process. Used so that a refusal in one process stops them all."""
    if not jax.distributed.is_initialized() or jax.process_count() == 1:
        return bool(ok)
    from jax.experimental import multihost_utils

    flags = multihost_utils.process_allgather(np.asarray([int(bool(ok))], np.int32))
    return bool(np.all(flags))


def agree_same(flag: bool) -> bool:
    """True when every process of a `jax.distributed` run passes the same `flag`
    (a collective, as `agree`); always True in a single process."""
    if not jax.distributed.is_initialized() or jax.process_count() == 1:
        return True
    from jax.experimental import multihost_utils

    flags = multihost_utils.process_allgather(np.asarray([int(bool(flag))], np.int32))
    return bool(np.all(flags == flags.flat[0]))
