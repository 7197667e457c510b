"""`solve` and `solve_cell`: the entry points of the engine, and how a call's
cells are made (`batch_cells`).

The cells are integrated by the lane engine (`samflow._engine.lanes`); what happens at
a cell's start, its events and its end is `samflow._engine.record` (docs/theory.md s.4).
"""

from __future__ import annotations

import dataclasses
import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from ..datasets import Dataset
from ..flows import Clock, Method
from .._methods import check_p, p_array
from .._util.cache import StoredProgram
from .lanes import DEFAULT_LANES, program_family, solve_lanes
from .settings import STUCK_INIT, SolverSettings, stuck_inits, _float_array, _brief, check_data, check_depth, check_rho, check_save_times
from .solution import Trajectory
from .._util.arrays import device_array
from .._util.x64 import compile_options, in_float64, require_float64

__all__ = ["solve", "solve_cell", "batch_cells"]


def solve_cell(
    W0: Float[Array, "L d"],
    rho: Float[Array, ""],
    data: Dataset,
    ts: Float[Array, " n_save"],
    *,
    method: Method,
    clock: Clock,
    settings: SolverSettings,
    p: "Float[Array, ''] | None" = None,
) -> Trajectory:
    """Solve one cell from W(0) = `W0` at radius `rho`; pure and vmappable.

    The clock starts at 0 and ends at `ts[-1]`. `ts` must be increasing with
    `ts[0] >= 0`; this function does not check (see `solve`). Batch it with
    `jax.vmap` over `W0` and `rho` (and `data` if wanted). The runs of steps
    and what ends each one are described in this module's docstring. `p`: the
    exponent of lp-SAM, a float64 scalar, traced (one compilation for every p;
    required for "lp", ignored otherwise; not checked here, see `solve`).

    **Returns:** a `Trajectory` (see there for shapes).

    **Raises:** `ValueError` for log coordinates with linf-SAM, or the tau clock
    on multi-sample linf data (checked when traced); `RuntimeError` when JAX is
    not in float64 (`jax.config.update("jax_enable_x64", True)`; `solve` does it
    for you).
    """
    require_float64("samflow.solve_cell")
    out, _, _ = solve_lanes(jnp.asarray(W0)[None], jnp.asarray(rho)[None], data, ts, method=Method.parse(method),
                         clock=Clock.parse(clock), settings=settings, p=p, width=1)
    return jax.tree_util.tree_map(lambda x: x[0], out)


@eqx.filter_jit
def _solve_batch(W0, rho, data, ts, family, index, clock, settings, p, tol):
    """The cells solved by the program of `family` (static), the method `family[index]`
    (`index` a traced int32: one program serves the family) at the tolerances and step
    budget `tol` (traced, `SolverSettings.tolerances`; `settings` is a `program_key()`)."""
    out, _, _ = solve_lanes(W0, rho, data, ts, method=index, clock=clock, settings=settings, p=p,
                            width=min(W0.shape[0], DEFAULT_LANES), family=family, tol=tol)
    return out


def bucket(n: int) -> int:
    """The canonical size for `n` (>= 1) cells or save times: the next power of two.
    A call is solved at the canonical sizes of its cell and save counts, so calls
    of 5, 6, 7 or 8 cells (or 40 to 64 save times) share one compiled program."""
    return 1 << max(0, int(n) - 1).bit_length()


def canonical_shapes(W0, rho, ts):
    """`(W0, rho, ts)` padded to `bucket` sizes: the extra cells have a NaN init
    (they end at time 0 as `NONFINITE_INPUT` and take no lane), the extra save
    times repeat the horizon `ts[-1]` (saved at the last step, where the horizon
    is). A cell's numbers do not depend on the number of cells or on save times
    after its own (docs/theory.md s.4: the same bits at any batching); `unpad`
    drops the padding."""
    W0, rho, ts = np.asarray(W0), np.asarray(rho), np.asarray(ts)  # padded on the host: nothing compiled
    n, n_save = W0.shape[0], ts.shape[0]
    pad_n, pad_s = bucket(n) - n, bucket(n_save) - n_save
    if pad_n:
        W0 = np.concatenate([W0, np.full((pad_n,) + W0.shape[1:], np.nan, W0.dtype)])
        rho = np.concatenate([rho, np.zeros((pad_n,), rho.dtype)])
    if pad_s:
        ts = np.concatenate([ts, np.full((pad_s,), ts[-1], ts.dtype)])
    return device_array(W0), device_array(rho), device_array(ts)


def unpad(traj: Trajectory, n: int, n_save: int) -> Trajectory:
    """The first `n` cells and `n_save` save times of a `Trajectory` solved at
    `canonical_shapes`, cut on the host (`device_array`: slicing a device array
    compiles a one-op program at every new shape)."""
    if traj.ts.shape[-1] == n_save and traj.status.shape[0] == n:
        return traj
    return Trajectory(**{
        f.name: device_array((lambda x: x[:n, :n_save] if f.name in _PER_SAVE else x[:n])(np.asarray(getattr(traj, f.name))))
        for f in dataclasses.fields(traj)
    })


#: The `Trajectory` fields with a save-time axis (axis 1 of a batched trajectory).
_PER_SAVE = ("ts", "t", "W", "beta", "loss")


@functools.lru_cache(maxsize=64)
def _stored_solve(family: tuple, clock: Clock, settings: SolverSettings) -> StoredProgram:
    """`_solve_batch` for these static arguments as a `samflow._util.cache.StoredProgram`:
    keyed by the family (here the called method alone) and the other static arguments."""
    def _solve_batch_program(W0, rho, data, ts, p, index, tol):
        return _solve_batch(W0, rho, data, ts, family, index, clock, settings, p, tol)

    # With the stored programs off it is the jitted function itself, compiled with
    # samflow's compile options (`samflow._util.x64.compile_options`) either way.
    fn = jax.jit(_solve_batch_program, compiler_options=compile_options())
    return StoredProgram(fn, ("samflow.solve", family, clock, settings))


def batch_cells(alpha: ArrayLike, rho: ArrayLike, depth: int, d: int, *, alpha_batched: bool = False):
    """The cells of a `solve`-style call: `(W0, rho_b, batched)` with `W0`
    float64 `(B, L, d)`, `rho_b` float64 `(B,)` and `batched` (rho was a vector).

    **The rule** (the same in `solve`, `samflow.discrete.run_discrete` and
    `flow_gap`; `samflow.models.solve_model` has `theta0_batched`): the cells are
    the entries of `rho` (B = len(rho), or one cell for a scalar rho).

    - `alpha_batched=False` (default): `alpha` is ONE init shared by every cell:
      a scalar, a (d,) vector or a (L, d) array (`samflow.init_weights`). Its
      shape is never compared with len(rho), so a (d,) or (L, d) alpha means the
      same for any number of radii.
    - `alpha_batched=True`: `alpha` has an explicit leading batch axis of length
      B = len(rho), one init per cell: `(B,)` scalars, `(B, d)` or `(B, L, d)`.
      rho must then be a vector.

    A shared alpha must be finite. A per-cell alpha may hold NaN or inf: that
    cell gets status `NONFINITE_INPUT` and the rest of the batch runs. An init
    from which no flow can move (depth >= 2 and every gradient entry, a product
    of the other layers' weights, exactly 0 in float64: alpha = 0, or alpha^(L-1)
    underflowing) is refused, shared or per cell (`samflow._engine.settings.stuck_inits`,
    the rule the config applies to its grid).

    **Raises:** `ValueError` (one line) for a depth < 1; a rho that is not a
    finite scalar or non-empty 1-D vector >= 0; an alpha whose shape fits none
    of the above; a shared alpha that is not finite; `alpha_batched=True` with a
    scalar rho or a leading axis other than len(rho).
    """
    from ..diagonal_net import _init_shape_message

    depth = check_depth(depth)
    rho_b, batched = check_rho(rho)
    B = rho_b.shape[0]
    a = _float_array(alpha, "alpha")
    if not isinstance(alpha_batched, (bool, np.bool_)):
        raise ValueError(f"alpha_batched must be True or False, got {_brief(alpha_batched)}")
    if alpha_batched:
        if not batched:
            raise ValueError(
                "alpha_batched=True needs rho as a 1-D vector, one radius per init; "
                "got a scalar rho (use np.full(len(alpha), rho))"
            )
        if a.ndim == 0 or a.shape[0] != B:
            raise ValueError(
                f"alpha_batched=True: alpha needs a leading axis of length len(rho) = {B}, got shape {a.shape}"
            )
        cell = a.shape[1:]
        if not (cell in ((), (d,), (depth, d))):
            raise ValueError(_init_shape_message(cell, depth, d, per_cell=True))
        W0 = np.broadcast_to(a.reshape((B,) + (1,) * (2 - len(cell)) + cell), (B, depth, d))
    else:
        if not (a.shape in ((), (d,), (depth, d))):
            raise ValueError(_init_shape_message(a.shape, depth, d))
        if not np.all(np.isfinite(a)):
            raise ValueError(
                f"alpha must be finite, got {_brief(alpha)} (per-cell inits with alpha_batched=True "
                "may hold NaN: those cells get status NONFINITE_INPUT)"
            )
        W0 = np.broadcast_to(a, (B, depth, d))  # `init_weights` (its shapes checked above), on the host
    stuck = stuck_inits(np.asarray(W0))
    if stuck.any():
        i = int(np.argmax(stuck))
        where = f"alpha[{i}] (cell {i})" if alpha_batched else "alpha"
        raise ValueError(f"{where}: {STUCK_INIT.format(depth=depth)}")
    return device_array(W0, np.float64), device_array(rho_b, np.float64), batched


@in_float64
def solve(
    method: "str | Method",
    data: Dataset,
    alpha: ArrayLike,
    rho: ArrayLike,
    ts: ArrayLike,
    *,
    depth: int = 2,
    clock: "str | Clock" = Clock.T,
    settings: SolverSettings = SolverSettings(),
    alpha_batched: bool = False,
    p: "float | None" = None,
) -> Trajectory:
    """Solve a flow from the init `alpha` at radius `rho`, for one cell or a batch.

    **Arguments:**

    - `method`: "gd", "l2", "linf", "usam" or "lp" (`samflow.Method`).
    - `p`: the exponent of "lp" (lp-SAM, ||eps||_p <= rho, docs/theory.md s.2
      (lp-SAM)): a real number in (1, inf), required for "lp" and refused for
      the other methods (`samflow._methods.check_p`). It is passed traced: every
      p shares one compilation. For p > 2 the columns of equal layers reach 0
      one by one (status `SLID` with `slide_time`); from unequal layers a lone
      weight crosses 0, and a column that reaches 0 as a whole stops the cell
      with `SURFACE` (docs/theory.md s.4.3, "unequal layers").
    - `data`: a `samflow.Dataset` (one sample for `clock="tau"`), finite.
    - `alpha`: the init, float. By default ONE init shared by every cell: a
      scalar, a (d,) per-coordinate vector or a (L, d) per-layer array
      (`samflow.init_weights`; a 1-D alpha is always (d,)). With
      `alpha_batched=True`, one init per cell along an explicit leading axis of
      length B = len(rho): `(B,)`, `(B, d)` or `(B, L, d)`. The shape of alpha
      is never matched against len(rho) (`batch_cells`).
    - `rho`: SAM radius >= 0, a scalar (one cell) or a non-empty (B,) vector
      (B cells; ignored by "gd").
    - `ts`: save times in the clock's units, increasing, the last one being the
      horizon. The clock starts at 0.
    - `depth`: L >= 1. `clock`: "t" (real time) or "tau" (rescaled, one sample).
    - `settings`: `SolverSettings`.
    - `alpha_batched`: see `alpha`.

    **Returns:** a `Trajectory`, batched over B when `rho` is a vector.

    **Raises:** `ValueError` (one line, before anything is compiled) for an
    unknown method or clock, a bad or missing p (or p with a method other than
    "lp"), a depth < 1, a rho that is negative, non-finite,
    empty or not 1-D, an alpha of a wrong shape or (shared) not finite, bad
    save times, data that is not a finite `Dataset`, or the tau clock on
    multi-sample data. A cell that fails raises nothing: see its `status`.

    Compiles once per (method, clock, settings, depth, d, batch size, number of
    save times); new values of alpha, rho, p, data or ts reuse the compilation.
    The program holds the called method alone: a program of the whole family
    (`samflow._engine.lanes.program_family`, the sweep's choice, where every method is
    run) costs about twice the compile time of one method (19.6 s against 9.7 s
    for l2 on 2 CPU cores), which a single solve would pay for nothing.
    With `$SAMFLOW_COMPILATION_CACHE` naming a folder, the compiled program is
    stored there and a later Python process loads it instead of tracing and
    compiling it (`samflow._util.cache.programs_dir`; no JAX setting is changed).
    """
    method = Method.parse(method)
    p = check_p(method, p)
    clock = Clock.parse(clock)
    depth = check_depth(depth)
    if not isinstance(settings, SolverSettings):
        raise ValueError(f"settings must be a samflow.SolverSettings, got {type(settings).__name__}")
    check_data(data)
    ts = check_save_times(ts)
    W0, rho_b, batched = batch_cells(alpha, rho, depth, data.d, alpha_batched=alpha_batched)
    settings = settings.resolved(method, np.asarray(W0), data, clock, p)
    family = program_family(method, data.X.shape[0], settings.coords, among=(method,))  # the method alone
    index = device_array(family.index(method), np.int32)
    n, n_save = W0.shape[0], ts.shape[0]
    W0, rho_b, ts = canonical_shapes(W0, rho_b, ts)
    # rtol, atol and max_steps traced (`SolverSettings.program_key`): one program for every tolerance and budget.
    key, tol = settings.program_key(), device_array(settings.tolerances())
    # A stored program (samflow._util.cache): loaded, not traced, when a session has made it before.
    out = _stored_solve(family, clock, key)(W0, rho_b, data, ts, p_array(method, p), index, tol)
    out = unpad(out, n, n_save)
    if not batched:  # through the host: x[0] of a device array compiles two one-op programs per shape
        out = jax.tree_util.tree_map(lambda x: device_array(np.asarray(x)[0]), out)
    return out
