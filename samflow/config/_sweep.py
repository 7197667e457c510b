"""The sweep config's schema (`SweepConfig` and its tables) and its readers
`parse_config`, `load_config`."""

from __future__ import annotations

import dataclasses
import functools
import math
import warnings
from pathlib import Path
from typing import Annotated, Literal, NamedTuple

import numpy as np
from pydantic import Field, field_validator, model_validator

from .._util.backend import backend_error
from .._engine.settings import SETTING_BOUNDS, SolverSettings, problems, stuck_inits
from ..datasets import Dataset
from ..flows import Method
from ._base import ConfigError, ConfigModel, RunConfig, distinct, field_check
from ._experiments import (
    DISCRETE_PREFIX,
    DiscreteConfig,
    LP_METHODS,
    LpConfig,
    GeneratorKeys,
    InitConfig,
    MethodName,
    ModelConfig,
    experiment_problems,
)
from ._errors import read_toml, validate

_Strict = ConfigModel


#: Most significant digits of a decimal that a generated axis value is snapped to (`as_written`).
SNAP_DIGITS = 8


def as_written(values: np.ndarray, tol: np.ndarray) -> np.ndarray:
    """`values` with each one replaced by the shortest decimal of at most
    `SNAP_DIGITS` significant digits within `tol` (same shape) of it, where
    there is one: the value its arithmetic meant (np.linspace(0.1, 0.5, 5)[2]
    is 0.30000000000000004, 1 float64 step from 0.3); the others unchanged.
    The first and last value stay as given (the written start and stop), and
    when snapping would break the strict increase the values come back as given.

    **Arguments:** `values` float64 (n,) increasing, finite; `tol` float64 (n,)
    >= 0, the arithmetic error of each value. **Returns:** float64 (n,).
    """
    out = np.array(values, dtype=np.float64)
    pending = np.flatnonzero((out != 0) & np.isfinite(out))
    pending = pending[(pending > 0) & (pending < out.size - 1)]
    with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):
        v = out[pending]
        mant = v / 10.0 ** np.floor(np.log10(np.abs(v)))  # in [1, 10), to a float64 step or two
        slack = tol[pending] / np.abs(v) * np.abs(mant) + 8 * np.spacing(np.abs(mant))
    for k in range(1, SNAP_DIGITS + 1):
        # A cheap test for every value, then the exact one for the few that pass it.
        near = np.abs(np.round(mant * 10.0 ** (k - 1)) / 10.0 ** (k - 1) - mant) <= slack
        hit = np.zeros(pending.size, dtype=bool)
        for j in np.flatnonzero(near):
            i = pending[j]
            d = float(f"{out[i]:.{k - 1}e}")  # the float64 nearest the k-digit decimal
            if abs(d - out[i]) <= tol[i]:
                out[i], hit[j] = d, True
        pending, mant, slack = pending[~hit], mant[~hit], slack[~hit]
        if not pending.size:
            break
    if out.size > 1 and np.any(np.diff(out) <= 0):
        return np.array(values, dtype=np.float64)
    return out


@functools.lru_cache(maxsize=32)
def _spaced(start: float, stop: float, num: int, log: bool) -> np.ndarray:
    """np.geomspace / np.linspace(start, stop, num), snapped `as_written` within
    the float64 error of that arithmetic; read-only (cached)."""
    with np.errstate(over="ignore", invalid="ignore"):
        if log:
            raw = np.geomspace(start, stop, num)
            # 10 ** x with x in [log10 start, log10 stop] off by a few float64 steps of x:
            # a relative error ln(10) |dx| of the value, plus the power's own rounding.
            span = max(abs(np.log10(start)), abs(np.log10(stop)), 1.0)
            tol = np.abs(raw) * (np.log(10.0) * 2 * np.spacing(span)) + 4 * np.spacing(np.abs(raw))
        else:
            raw = np.linspace(start, stop, num)
            # start + i * step: a few float64 steps of the larger of the value and start
            tol = 4 * np.spacing(np.maximum(np.abs(raw), abs(start)))
    out = as_written(raw, tol) if np.all(np.isfinite(raw)) else raw
    out.flags.writeable = False
    return out


class GridAxis(_Strict):
    """An evenly spaced axis: `num` points from `start` to `stop`, log or linear.

    The values are those of np.geomspace / np.linspace, except that a value
    within the float64 error of that arithmetic (a few float64 steps) of a
    decimal with at most 8 significant digits (`SNAP_DIGITS`) is that decimal (`as_written`):
    a linear axis from 0.1 to 0.5 in 5 points holds 0.3, not
    0.30000000000000004, so `ds.sel(rho=0.3)` finds it and the cell is solved at
    0.3. `start` and `stop` are kept as written. A value with no such decimal
    (10^-1.5 = 0.0316227766016838) is kept as np.geomspace gives it: select
    it by the value `ds.alpha` holds, or with `ds.sel(alpha=0.0316228,
    method="nearest")`.
    """

    start: float
    """First value of the axis (> 0 for a log axis)."""
    stop: float
    """Last value of the axis (> start when num > 1)."""
    num: Annotated[int, Field(ge=1, le=1_000_000)]
    """Number of points, start and stop included."""
    scale: Literal["log", "linear"] = "log"
    """Values: "log": geometric spacing; "linear": even spacing."""

    @model_validator(mode="after")
    def _check(self):
        if self.scale == "log" and (self.start <= 0 or self.stop <= 0):
            raise ValueError("a log-spaced axis needs start > 0 and stop > 0")
        if self.num > 1 and self.stop <= self.start:
            raise ValueError(f"stop ({self.stop}) must be greater than start ({self.start})")
        values = self.values()
        if not np.all(np.isfinite(values)) or (self.num > 1 and np.any(np.diff(values) <= 0)):
            raise ValueError(
                f"the axis from {self.start!r} to {self.stop!r} in {self.num} steps is not representable "
                "in float64 (overflow, or steps below float64 resolution); narrow it or use fewer points"
            )
        return self

    def values(self) -> np.ndarray:
        """The axis as a float64 array of shape (num,) (see the class docstring for its values)."""
        return _spaced(self.start, self.stop, self.num, self.scale == "log").copy()


def _axis_values(v: "list[float] | GridAxis", name: str) -> np.ndarray:
    arr = v.values() if isinstance(v, GridAxis) else np.asarray(v, dtype=np.float64)
    return arr


class DataConfig(GeneratorKeys):
    """The data: one sample `mu`, explicit `X` and `y`, a `file` (.npz or .csv),
    or a `generator` with its keys (`GeneratorKeys`).

    - `mu`: the single sample {(mu, +1)}, a list of d numbers.
    - `X`, `y`: a multi-sample data set given inline (n lists of d numbers; n labels).
    - `file`: a .npz holding arrays `X` and `y`, or a .csv whose last column is y.
    """

    mu: list[float] | None = None
    """The single sample {(mu, +1)}: its d features (feature d the major one in the paper's examples)."""
    X: list[list[float]] | None = None
    """A multi-sample data set given inline: n rows of d numbers (needs `y`)."""
    y: list[float] | None = None
    """The labels of the rows of `X`, each +1 or -1."""
    file: str | None = None
    """A data file: a .npz holding arrays `X` and `y`, or a .csv whose last column is y (relative to the
    config file)."""

    @model_validator(mode="after")
    def _one_source(self):
        given = [k for k in ("mu", "X", "file", "generator") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(
                "give exactly one of data.mu, data.X (with data.y), data.file or data.generator; got "
                + (", ".join(given) or "none")
            )
        if self.mu is not None:
            if len(self.mu) == 0:
                raise ValueError("data.mu must not be empty")
        if self.X is not None:
            if self.y is None:
                raise ValueError("data.X needs data.y (the labels, +1 or -1)")
            if len(self.X) == 0 or len(self.X[0]) == 0:
                raise ValueError("data.X must be a non-empty list of rows")
            if len({len(r) for r in self.X}) != 1:
                raise ValueError("every row of data.X must have the same length d")
            if len(self.y) != len(self.X):
                raise ValueError(f"data.y has {len(self.y)} labels but data.X has {len(self.X)} rows")
            if any(v not in (-1.0, 1.0) for v in self.y):
                raise ValueError("data.y must contain only the labels -1 and +1")
        elif self.y is not None:
            raise ValueError("data.y is only used together with data.X")
        found = self.generator_problems()
        if found:
            raise ValueError("\n".join(found))
        return self

    def inline(self) -> "Dataset | None":
        """The data set given in the config (`mu`, or `X` and `y`); None for a `file`
        (read by the sweep). **Raises:** `ValueError` for non-finite values."""
        if self.mu is not None:
            return Dataset.from_arrays(np.asarray(self.mu, dtype=np.float64)[None, :], np.ones(1))
        if self.X is not None:
            return Dataset.from_arrays(self.X, self.y)
        return self.generate()


class GridConfig(_Strict):
    """The (alpha, rho) grid.

    - `alpha`: the init scales, a list or `{start, stop, num, scale}`, each >= 0;
      every layer and coordinate starts at alpha.
    - `alpha_relative_to_rho`: if true, the alpha values are multiples of rho
      (alpha = value * rho), so the axis is alpha / rho.
    - `rho`: the SAM radii, a list or `{start, stop, num, scale}`, each >= 0.

    A list is used as written; a table's values are those of `GridAxis` (the
    decimals its arithmetic meant: 0.3, not 0.30000000000000004). Either way
    the results' `alpha` and `rho` coordinates hold exactly the values solved,
    so `ds.sel(rho=0.3)` selects the rho written 0.3; a value computed
    elsewhere (np.geomspace of your own) is selected with `method="nearest"`.

    An init of exactly 0 (alpha = 0, or rho = 0 in a relative grid, or an alpha
    whose power alpha^(L-1) underflows to 0 in float64) is refused at depth
    L >= 2 by `SweepConfig`: there W = 0 is a fixed point of every flow (each
    layer's gradient -r * prod_{k != l} w^(k) is 0, and so is the SAM ascent
    step, docs/theory.md s.1-2), so the cell would report a meaningless "finished" or
    "collapsed" at beta = 0. At depth 1 the gradient at 0 is -r(0) (nonzero
    unless the data's mean y_i x_i is 0), so every flow leaves 0 and a zero init is allowed.
    """

    alpha: list[float] | GridAxis
    """The init scales, each >= 0: a list, or a table {start, stop, num, scale}. Every layer and coordinate
    starts at alpha (times `[init]`'s pattern)."""
    rho: list[float] | GridAxis
    """The SAM radii, each >= 0: a list, or a table {start, stop, num, scale}. rho = 0 is gradient flow."""
    alpha_relative_to_rho: bool = False
    """If true, the alpha values are multiples of rho (alpha = value x rho): the results' alpha axis is alpha
    / rho and `alpha_init` holds the absolute scale."""

    @field_validator("alpha", "rho")
    @classmethod
    def _nonempty_sorted(cls, v, info):
        arr = _axis_values(v, info.field_name)
        if arr.size == 0:
            raise ValueError(f"grid.{info.field_name} is empty: give at least one value")
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"grid.{info.field_name} contains a non-finite value: give finite numbers")
        if np.any(np.diff(arr) <= 0):
            raise ValueError(f"grid.{info.field_name} must be strictly increasing: list its values in increasing order, without repeats")
        if info.field_name == "rho" and np.any(arr < 0):
            raise ValueError(f"grid.rho must be >= 0, got {arr.min()}: the SAM radius is a size (0 gives gradient flow)")
        if info.field_name == "alpha" and np.any(arr < 0):
            raise ValueError(f"grid.alpha must be >= 0, got {arr.min()}: the init scale is a size (give signs with init.W0)")
        return v

    def alpha_values(self) -> np.ndarray:
        """The alpha axis (absolute, or in units of rho when relative)."""
        return _axis_values(self.alpha, "alpha")

    def rho_values(self) -> np.ndarray:
        """The rho axis."""
        return _axis_values(self.rho, "rho")


class TimeConfig(_Strict):
    """Save times and horizon, in the units of the clock.

    - `t1`: the horizon (> 0). `num`: number of save times. `spacing`: "log" (from
      `t_min` to t1) or "linear" (from t1/num to t1; no t_min). `ts`: explicit save
      times instead (increasing, last one is the horizon; no num, spacing or
      t_min). A file that sets a key without effect is refused (`load_config`).
    """

    t1: float | None = None
    """The horizon (> 0) in the sweep's clock; required unless `ts` is given."""
    num: Annotated[int, Field(ge=1, le=100_000)] = 200
    """Number of save times."""
    spacing: Literal["log", "linear"] = "log"
    """Values: "log": from `t_min` to t1; "linear": from t1/num to t1 (no `t_min`)."""
    t_min: float = 1e-2
    """First save time of a log spacing (0 < t_min < t1)."""
    ts: list[float] | None = None
    """Explicit save times instead: increasing, the last one the horizon; takes no num, spacing or t_min."""

    @model_validator(mode="after")
    def _check(self):
        if self.ts is not None:
            arr = np.asarray(self.ts, dtype=np.float64)
            if arr.size == 0:
                raise ValueError("time.ts is empty: give at least one save time")
            if not np.all(np.isfinite(arr)) or np.any(arr < 0):
                raise ValueError("time.ts must hold finite times >= 0")
            if np.any(np.diff(arr) <= 0):
                raise ValueError("time.ts must be strictly increasing")
            if self.t1 is not None and not math.isclose(arr[-1], self.t1):
                raise ValueError(f"time.ts must end at the horizon t1 = {self.t1}, ends at {arr[-1]}")
            if arr[-1] <= 0:
                raise ValueError("time.ts must end at a time > 0")
            return self
        if self.t1 is None:
            raise ValueError("time.t1 (the horizon) is required unless time.ts is given")
        if self.t1 <= 0:
            raise ValueError(f"time.t1 must be > 0 (the flow starts at 0), got {self.t1}")
        if self.spacing == "log":
            if not (0 < self.t_min < self.t1):
                raise ValueError(f"time.t_min must satisfy 0 < t_min < t1, got {self.t_min}")
        return self

    def values(self) -> np.ndarray:
        """The save times, float64 array of shape (n_save,): `ts` as written, or
        generated as a `GridAxis` is (a time within float64 error of a short
        decimal is that decimal: with t1 = 1, num = 10, linear, the third is
        0.3), from t_min (log) or t1/num (linear) to exactly t1."""
        if self.ts is not None:
            return np.asarray(self.ts, dtype=np.float64)
        if self.spacing == "log":
            ts = _spaced(self.t_min, self.t1, self.num, True).copy()
        else:
            ts = _spaced(0.0, self.t1, self.num + 1, False)[1:].copy()  # i t1 / num, i = 1..num
        ts[-1] = self.t1
        return ts


class SolverConfig(_Strict):
    """Solver settings (`samflow.SolverSettings`): solver, rtol, atol, max_steps,
    capture_radius (relative to rho), blowup_log10, max_runs, coords ("linear"
    or "log": the state integrated, see `samflow.SolverSettings`); and how the
    grid is batched (`samflow.sweep.solve_grid`):

    - `batch_size`: lanes per device (one compilation): each lane steps one
      cell at a time and takes the next cell of its queue when that cell ends
      (`samflow._engine.lanes`). A cell's results do not depend on it, nor on the
      chunks, the budget or the number of devices (with the command lines' CPU
      arithmetic, `samflow._util.x64.exact_cpu_arithmetic`).
    - `memory_budget_mb`: bound on the solver's working memory (the outputs of
      one chunk plus the temporaries of the running batches,
      `samflow.sweep.cell_bytes`), from which the chunk size is derived.
    - `chunk_size`: cells per chunk (the unit of memory and of `--resume`
      checkpoints); when given it wins over `memory_budget_mb`.
    """

    # Bounds and defaults: samflow._engine.settings (SETTING_BOUNDS, SolverSettings), the one definition.
    solver: Literal["tsit5", "dopri5", "dopri8"] = SolverSettings.solver
    """The explicit Runge-Kutta method of diffrax."""
    rtol: Annotated[float, Field(**SETTING_BOUNDS["rtol"])] | None = SolverSettings.rtol
    """Relative tolerance of the adaptive step; unset: chosen by depth for beta within 1e-6 (1e-8 at depth <= 2,
    1e-11 at depth 3, 1e-12 from depth 4; `samflow.SolverSettings`)."""
    atol: Annotated[float, Field(**SETTING_BOUNDS["atol"])] | None = SolverSettings.atol
    """Absolute tolerance, relative to the init's norm |W(0)|; unset: with rtol unset, chosen by depth (1e-12,
    1e-15, 1e-16), else 1e-12."""
    max_steps: Annotated[int, Field(**SETTING_BOUNDS["max_steps"])] = SolverSettings.max_steps
    """Most solver steps per cell; a cell that needs more ends with status 4 (max steps)."""
    capture_radius: Annotated[float, Field(**SETTING_BOUNDS["capture_radius"])] = SolverSettings.capture_radius
    """The l2-SAM collapse event fires when ||W|| falls below capture_radius x rho."""
    blowup_log10: Annotated[float, Field(**SETTING_BOUNDS["blowup_log10"])] = SolverSettings.blowup_log10
    """Blow-up event: |beta| above 10**blowup_log10 ends the cell with status 3 (tau clock)."""
    max_runs: Annotated[int, Field(**SETTING_BOUNDS["max_runs"])] | None = SolverSettings.max_runs
    """Most runs of steps per cell (a run ends at an event: slide, switch); unset: the engine's
    default. `max_segments`, its name before 0.3, is read as this key with a FutureWarning."""
    coords: Literal["linear", "log"] = SolverSettings.coords
    """Values: "linear": integrate W; "log": integrate x = log|W| (gd, l2, usam, lp on one sample): no underflow of
    suppressed coordinates, and the fast choice for l2 charts at d >= 50 (with rtol = 1e-10 and batch_size
    = 16)."""
    reduce: Literal["auto", "all", "off"] = SolverSettings.reduce
    """Values: "auto": cells an exact reduction covers (depth-2 l2-SAM on one sample from equal layers: two
    scalars per cell at any d) are solved in the reduced state; "all": also every gd, l2, usam and lp cell whose
    layers start equal, as one row of d weights (1.3-3.1x less time per cell, but the first call takes 1.5-1.7x as
    long: it pays on charts of tens of thousands of cells); "off": always the general (L, d) state."""
    batch_size: Annotated[int, Field(ge=1, le=1_000_000)] = 128
    """Lanes per device (one compilation; each lane solves one cell at a time and takes the next when it ends).
    A cell's results do not depend on it."""
    memory_budget_mb: Annotated[float, Field(gt=0, le=1e9)] = 1024.0
    """Bound on the solver's working memory (outputs of one chunk plus the running batches' temporaries),
    from which the chunk size is derived."""
    chunk_size: Annotated[int, Field(ge=1, le=1_000_000_000)] | None = None
    """Cells per chunk (the unit of memory and of `--resume` checkpoints); wins over memory_budget_mb; unset:
    from the budget."""

    @model_validator(mode="before")
    @classmethod
    def _old_names(cls, data):
        # `max_segments` is max_runs' name before 0.3: still read (configs and the configs
        # stored in results files of 0.2), with a FutureWarning that names the new key.
        if isinstance(data, dict) and "max_segments" in data:
            if "max_runs" in data:
                raise ValueError("max_runs and max_segments (its name before 0.3) are both given: keep max_runs")
            warnings.warn("solver.max_segments is now solver.max_runs; the old name goes in the release after 0.3",
                          FutureWarning, stacklevel=2)
            data = {("max_runs" if k == "max_segments" else k): v for k, v in data.items()}
        return data

    def to_settings(self, loss: str = "logistic") -> SolverSettings:
        """The `samflow.SolverSettings` of these keys (the batching keys are the sweep's)."""
        keys = [f.name for f in dataclasses.fields(SolverSettings) if f.name != "loss"]
        return SolverSettings(loss=loss, **{k: getattr(self, k) for k in keys})


class OutputConfig(_Strict):
    """What to write. `dir`: results folder (the CLI's --out overrides it).
    `figures`: draw figures. `plot_rho`: the rho of the heat map (default: the
    first). `trajectory_alphas`: alphas (same units as grid.alpha: multiples of
    rho when `grid.alpha_relative_to_rho`) whose trajectories are drawn
    (default: three spread over the grid). Both must be values of the grid
    (to a relative 1e-4, so 6 significant digits suffice); any other value is
    refused in one line naming the nearest grid value, never snapped silently
    to another cell (`SweepConfig`).
    `save_weights`: also store every layer's weights (needs `save = "full"`).
    `save`: "full" (default) stores beta at every save time; "summary" stores
    per save time only the dominant index, whether it is tied, ||beta||, the
    loss and t (`samflow.Summary`, a fifth of the memory: for very large
    grids); the trajectory figure then is not drawn (see `samflow.store`).
    `switch_times`: locate every change of the dominant feature exactly
    (`samflow.switches`: the switch is one more event of each flow cell, recorded
    in the same pass as the solve; the `switch_*` variables); false leaves them out.
    `switch_refine`: solve the cells with switches again at tighter tolerances until
    every switch time's bound (`switch_time_err`) meets 1e-9 relative
    (`samflow.switches.refine_switches`)."""

    dir: str = "results"
    """The results folder; results go to `<dir>/<name>/` (the command line's --out overrides it)."""
    figures: bool = True
    """Draw the figures (heat map, trajectories, regime chart) after the solve."""
    plot_rho: float | None = None
    """The rho of the heat map and trajectory figures: a value of grid.rho (default: the first)."""
    trajectory_alphas: list[float] | None = None
    """The alphas (in grid.alpha's units) whose trajectories are drawn: values of the grid (default: three
    spread over it)."""
    save_weights: bool = False
    """Also store every layer's weights (variable `weights`); needs save = "full"."""
    save: Literal["full", "summary"] = "full"
    """Values: "full": beta at every save time; "summary": per save time only the dominant index, ||beta||, the loss
    and t (a fifth of the memory; no trajectory figure)."""
    switch_times: bool = True
    """Locate every change of the dominant feature exactly (the `switch_*` variables; each flow cell solved
    again with a switch event, about 1.6x the solve's time); false leaves them out."""
    switch_refine: bool = True
    """Refine the switch times: the cells with a switch are solved again at rtol 1e-12 (then 1e-13, 1e-14) until each
    time's bound `switch_time_err` is within 1e-9 of it (docs/theory.md s.5); false keeps the pass's times and
    their local bounds (5e-7 .. 3e-3 relative at rtol 1e-8, but below the error where the flow amplified it)."""

    @model_validator(mode="after")
    def _weights_need_full(self):
        if self.save_weights and self.save == "summary":
            raise ValueError(
                'output.save_weights = true needs output.save = "full" (a summary keeps no weights); '
                "drop one of the two"
            )
        return self


class SweepConfig(RunConfig):
    """A full sweep: see `configs/default.toml` for every key, commented."""

    name: str = "sweep"
    """The run's folder name under output.dir (see `RunConfig`); empty: the config file's name."""
    methods: list[MethodName] = Field(min_length=1)
    """The methods, side by side on the results' `flow` axis: flows "gd", "l2", "lp", "linf", "usam" and their
    iterations "discrete_*" (need `[discrete] eta`); "lp" and "discrete_lp" need `[lp] p`."""
    depth: Annotated[int, Field(ge=1, le=64)] = 2
    """Number of layers L of the diagonal network."""
    loss: Literal["logistic", "exponential"] = "logistic"
    """The margin loss ell(z): logistic log(1 + e^-z) or exponential e^-z."""
    clock: Literal["t", "tau"] = "t"
    """Values: "t": real time; "tau": the paper's rescaled time (one sample only)."""
    data: DataConfig
    """The data set (`[data]`): exactly one of mu, X and y, file, or generator."""
    grid: GridConfig
    """The (alpha, rho) grid (`[grid]`)."""
    time: TimeConfig
    """Save times and horizon (`[time]`), in the units of the clock."""
    solver: SolverConfig = SolverConfig()
    """Solver settings and batching (`[solver]`)."""
    output: OutputConfig = OutputConfig()
    """What is written (`[output]`)."""
    model: ModelConfig = ModelConfig()
    """The network: "diagonal" (default) or a `[model]` table naming another model and its keys."""
    init: InitConfig | None = None
    """The pattern of the init (`[init]`), times the grid's alpha; unset: every weight at alpha."""
    discrete: DiscreteConfig | None = None
    """The step sizes of the discrete methods (`[discrete]`); required with a discrete_* method."""
    lp: LpConfig | None = None
    """The exponents p of "lp" and "discrete_lp" (`[lp]`); required with either, refused without them."""

    _unique = field_check("methods", check=distinct("methods must not repeat a method"))

    @field_validator("model", mode="before")
    @classmethod
    def _model_name(cls, v):
        # `model = "two_layer_linear"` is short for `[model] name = "two_layer_linear"`.
        return {"name": v} if isinstance(v, str) else v

    @model_validator(mode="after")
    def _cross(self):
        # Every problem between keys, one line each, starting with the key it names
        # ("key: message" or "key = value ..."; see format_errors).
        alphas, rhos = self.grid.alpha_values(), self.grid.rho_values()
        relative = self.grid.alpha_relative_to_rho
        # The rules between clock, data, inits and coords: samflow._engine.settings.problems,
        # on the inline data (a data file is checked by the sweep once read).
        try:
            data = self.data.inline()
        except ValueError as err:
            raise ValueError(str(err)) from None
        except (AssertionError, RuntimeError) as err:  # from JAX: pydantic would blame the config ("Assertion failed")
            raise backend_error(err) from err
        found = experiment_problems(self, data.d if data is not None else None)
        if found:  # the checks below assume the tables fit together
            raise ValueError("\n".join(found))
        pattern = self.init_pattern(data.d) if data is not None else None
        peak = float(np.max(np.abs(pattern))) if pattern is not None else 1.0
        found = _init_problems(alphas * peak, rhos, relative, self.depth) if pattern is None or peak > 0 else []
        if pattern is not None and not found:
            found += pattern_problems(self, data.d)
        found += rule_problems(self, data)
        out = self.output
        if out.plot_rho is not None:
            found += _off_grid("output.plot_rho", [out.plot_rho], rhos, "grid.rho")
        if out.trajectory_alphas is not None:
            unit = " (multiples of rho: grid.alpha_relative_to_rho = true)" if relative else ""
            found += _off_grid("output.trajectory_alphas", out.trajectory_alphas, alphas, "grid.alpha" + unit)
        if found:
            raise ValueError("\n".join(found))
        return self

    @property
    def method_enums(self) -> list[Method]:
        """The flow methods (not the discrete ones) as `samflow.Method` values."""
        return [Method(m) for m in self.flow_methods]

    @property
    def flow_methods(self) -> list[str]:
        """The methods that are flows ("gd", "l2", "lp", "linf", "usam"), in config order."""
        return [m for m in self.methods if not m.startswith(DISCRETE_PREFIX)]

    def flow_entries(self) -> "list[FlowEntry]":
        """The entries of the results' `flow` axis, in config order, as `FlowEntry`
        (label, method, eta, p). A flow is (m, m, None, None); "lp" runs once per
        `[lp] p`, labelled "lp p=3" (also for a single p: the label says which
        ball); a discrete method runs once per step size, labelled "discrete_l2"
        for one eta, "discrete_l2 eta=0.01" for several, and "discrete_lp" once per
        (p, eta): "discrete_lp p=3" or "discrete_lp p=3 eta=0.01"."""
        out = []
        for m in self.methods:
            ps = [None] if m not in LP_METHODS else (
                [float(p) for p in self.lp.ps()] if self.lp is not None else [])
            for p in ps:
                base = m if p is None else f"{m} p={_short(p)}"
                if not m.startswith(DISCRETE_PREFIX):
                    out.append(FlowEntry(base, m, None, p))
                    continue
                etas = self.discrete.etas() if self.discrete is not None else np.zeros(0)
                for eta in etas:
                    label = base if etas.size == 1 else f"{base} eta={float(eta)!r}"
                    out.append(FlowEntry(label, m.removeprefix(DISCRETE_PREFIX), float(eta), p))
        return out

    def init_pattern(self, d: int) -> "np.ndarray | None":
        """The (depth, d) init pattern of `[init]` (multiplied by alpha in each cell), or None."""
        return None if self.init is None else self.init.pattern(self.depth, d)


class FlowEntry(NamedTuple):
    """One entry of a sweep's `flow` axis (`SweepConfig.flow_entries`): its `label`
    (the coordinate value), the `method` run ("gd", "l2", "lp", ...; without the
    "discrete_" prefix for a discrete one), the step size `eta` (None for a flow)
    and the exponent `p` of "lp" / "discrete_lp" (None for the other methods)."""

    label: str
    method: str
    eta: "float | None"
    p: "float | None"


def _short(x: float) -> str:
    """A number as a label writes it: 3.0 -> "3", 1.5 -> "1.5" (repr otherwise, exact)."""
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else repr(float(x))


def rule_problems(cfg: "SweepConfig", data: "Dataset | None") -> list[str]:
    """The rules between clock, methods, lp's exponents, data, inits and coords that
    the engine applies to each cell (`samflow._engine.settings.problems`), applied to the
    whole grid of `cfg`, one line each naming the key to change; `data` None (a
    data file not read yet) skips the rules that need it.

    "lp" runs once per `[lp] p`, and no rule depends on p any more (issue 36: log
    coordinates apply to every p), so it is checked once, at its largest p. The inits matter for log
    coordinates (every cell's W(0), the `[init]` pattern scaled by alpha).
    """
    pattern = cfg.init_pattern(data.d) if data is not None and cfg.init is not None else None
    W0 = None
    if cfg.solver.coords == "log":
        g = cfg.grid
        scales = _init_scales(g.alpha_values(), g.rho_values(), g.alpha_relative_to_rho).ravel()
        W0 = np.broadcast_to(scales[:, None, None], (scales.size, cfg.depth, data.d if data else 1))
        if pattern is not None:
            W0 = W0 * pattern[None]
    ps = sorted(float(p) for p in cfg.lp.ps()) if cfg.lp is not None and "lp" in cfg.flow_methods else []
    return problems(cfg.flow_methods, cfg.clock, data, W0, cfg.solver.coords, ps[-1] if ps else None)


def _init_scales(alphas: np.ndarray, rhos: np.ndarray, relative: bool) -> np.ndarray:
    """The absolute init scale of every cell, (A, R) float64, as the sweep computes it."""
    return alphas[:, None] * (rhos[None, :] if relative else np.ones_like(rhos)[None, :])


def _init_problems(alphas: np.ndarray, rhos: np.ndarray, relative: bool, depth: int) -> list[str]:
    """Lines ("key: message") for cells that start where no flow can leave (see
    `GridConfig`), or with beta(0) = alpha^L beyond the float64 range.

    At depth L >= 2 each layer's gradient is -r * prod_{k != l} w^(k): it is
    exactly 0 in float64 when the init alpha is 0 or alpha^(L-1) underflows, and
    then so is the SAM ascent step (0 when the gradient is 0), so W stays at its
    init under every method. At depth 1 the gradient is -r(beta), nonzero at 0.
    """
    with np.errstate(under="ignore", over="ignore"):
        a = _init_scales(alphas, rhos, relative)
        huge = ~np.isfinite(a ** depth)
        stuck = ((a == 0) | (a ** (depth - 1) == 0)) & (depth >= 2)
    lines = []
    if huge.any():
        v = float(np.min(a[huge]))
        lines.append(
            f"grid.alpha: the init alpha = {'alpha x rho = ' if relative else ''}{v!r} gives beta(0) = alpha^{depth} "
            "beyond the float64 range; use smaller alphas"
        )
    if not stuck.any():
        return lines
    fixed = (
        f"cannot move at depth {depth}: each layer's gradient is a product of the other layers' "
        "weights, exactly 0 in float64, so W stays there under every flow"
    )
    if relative and np.any(rhos == 0):
        lines.append(
            "grid.rho: rho = 0 with grid.alpha_relative_to_rho = true gives alpha = multiple x 0 = 0, "
            f"which {fixed}; drop 0 from grid.rho, give absolute alphas > 0, or use depth 1"
        )
        stuck[:, rhos == 0] = False
    if stuck.any():
        if np.any(alphas == 0):
            init = "alpha = 0"
        else:
            v = float(np.max(a[stuck]))
            init = f"alpha = {'alpha x rho = ' if relative else ''}{v!r} (alpha^{depth - 1} underflows to 0)"
        lines.append(f"grid.alpha: the init {init} {fixed}; use larger alphas > 0")
    return lines


_PATTERN_CHUNK = 65536  # cells per stuck_inits call in pattern_problems (bounded memory)


def pattern_problems(cfg: "SweepConfig", d: int) -> list[str]:
    """One line ("grid.alpha: ...") when some cell's init alpha x the `[init]`
    pattern (L, d) is one no flow can leave in float64: the exact rule that
    `samflow.sweep.solve_grid` applies (`samflow._engine.settings.stuck_inits`), where
    `_init_problems` sees only alpha x max|pattern| (e.g. at depth 3 a layer of
    zeros and a layer of 1e-200 stick at alpha = 1e-100). [] without a pattern."""
    pattern = cfg.init_pattern(d)
    if pattern is None or cfg.depth < 2:
        return []
    scales = _init_scales(cfg.grid.alpha_values(), cfg.grid.rho_values(), cfg.grid.alpha_relative_to_rho).ravel()
    for i in range(0, scales.size, _PATTERN_CHUNK):
        s = scales[i : i + _PATTERN_CHUNK]
        with np.errstate(under="ignore"):
            stuck = stuck_inits(s[:, None, None] * pattern[None])
        if stuck.any():
            v = float(s[int(np.argmax(stuck))])
            return [
                f"grid.alpha: the init {v!r} x init pattern leaves every gradient entry 0 in float64 (each is a "
                "product of the other layers' weights, and these underflow): no flow can leave it; use larger "
                "alphas or a pattern without tiny entries"
            ]
    return []


_ON_GRID_RTOL = 1e-4  # plot_rho / trajectory_alphas match a grid value to this relative tolerance


def _off_grid(key: str, values, axis: np.ndarray, axis_name: str) -> list[str]:
    """Lines for `values` of `key` that are not values of the grid `axis`.

    A value matches a grid value within a relative 1e-4 (so the 6 significant
    digits the message prints are enough), and only if exactly one grid value
    is that close; 0 matches only 0.
    """
    lines = []
    for v in values:
        close = np.isclose(axis, v, rtol=_ON_GRID_RTOL, atol=0.0)
        if close.sum() == 1:
            continue
        nearest = float(axis[np.argmin(np.abs(axis - v))])
        digits = 6 if close.sum() == 0 else 17
        if axis.size <= 8:
            listed = "one of " + ", ".join(f"{float(x):.{digits}g}" for x in axis)
        else:
            listed = f"one of its {axis.size} values from {float(axis[0]):.{digits}g} to {float(axis[-1]):.{digits}g}"
        lines.append(f"{key}: {v!r} is not a value of {axis_name}; give {listed} (nearest: {nearest:.{digits}g})")
    return lines


def parse_config(raw: dict, source: str = "config") -> SweepConfig:
    """Validate a sweep config given as a dict (as read from TOML).

    **Raises:** `ConfigError` listing every problem, one line each.
    """
    return validate(SweepConfig, raw, source)


def _ignored_time_keys(time: object, source: str) -> list[str]:
    """One line per key of a written `[time]` table that would have no effect: num,
    spacing and t_min beside explicit `ts`, t_min with linear spacing. A stored
    config (every key, defaults included) is not read through here."""
    if not isinstance(time, dict):
        return []
    if time.get("ts") is not None:
        return [f"{source}: time.{k}: not used when time.ts gives the save times; remove it (or remove ts)"
                for k in ("num", "spacing", "t_min") if k in time]
    if time.get("spacing") == "linear" and "t_min" in time:
        return [f'{source}: time.t_min: not used with spacing = "linear" (the save times run from t1/num to t1); '
                'remove it or use spacing = "log"']
    return []


def load_config(path: "str | Path") -> SweepConfig:
    """Read and validate a TOML config file.

    A key of `[time]` that the file sets but that would change nothing (`num`,
    `spacing` or `t_min` beside `ts`; `t_min` with linear spacing) is refused
    too: a reader would take it for the save times.

    **Raises:** `ConfigError` (one line per problem) for a missing or unreadable
    file, invalid TOML, invalid values or a `[time]` key without effect.
    """
    raw = read_toml(path)
    ignored = _ignored_time_keys(raw.get("time"), str(path))
    try:
        cfg = parse_config(raw, str(path))
    except ConfigError as err:
        named = str(err)  # a key already refused for its value is not named twice
        raise ConfigError("\n".join([named, *(x for x in ignored if x.split(": ")[1] + ":" not in named)])) from None
    if ignored:
        raise ConfigError("\n".join(ignored))
    return cfg
