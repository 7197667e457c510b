"""Solver settings and the checks of a solve's inputs (one line per refusal).

`SolverSettings` is the static part of a solve (one compilation per value);
`check_*` validate the arguments of `samflow.solve` and its siblings and raise
a one-line `ValueError` naming the argument and the fix.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
import warnings

import diffrax
import jax
import numpy as np
from jaxtyping import ArrayLike

from .._util.checks import float64_array
from ..datasets import Dataset
from ..flows import TAU_ONE_SAMPLE, Clock, Method, log_coords_problem
from ..losses import get_loss


_SOLVERS = {"tsit5": diffrax.Tsit5, "dopri5": diffrax.Dopri5, "dopri8": diffrax.Dopri8}


COORDS = ("linear", "log")
#: `SolverSettings.reduce` (`samflow._engine.reduced`).
REDUCE = ("auto", "all", "off")

# One set of bounds for every numeric solver setting: `SolverSettings` (the
# Python API) and the config schema (`samflow.config.SolverConfig`, as pydantic
# Field constraints) both read it.
SETTING_BOUNDS: dict[str, dict[str, float]] = {
    "rtol": {"gt": 0, "lt": 1},
    "atol": {"gt": 0, "lt": 1},
    "max_steps": {"ge": 1, "le": 10_000_000},
    "capture_radius": {"gt": 0, "lt": 1},
    "blowup_log10": {"gt": 0, "le": 300},
    "max_runs": {"ge": 1, "le": 1_000_000},
}
_INTEGER_SETTINGS = ("max_steps", "max_runs")

#: The default tolerances by depth: (rtol, atol) for L <= 2, L = 3 and L >= 4
#: (`SolverSettings.resolved`, `default_tolerances`). Each keeps beta within 1e-6
#: relative of a tight reference (rtol 1e-13) at every save time over what the
#: shipped configs run (scripts/default_accuracy.py; docs/theory.md s.4.4): at
#: rtol 1e-8 depth 3 was off by up to 1.1e-4 and depth 4 by 2.9e-3 in real time
#: to 1e5 (an error of the slow phase moves the fast one's time).
DEFAULT_TOLERANCES = {2: (1e-8, 1e-12), 3: (1e-11, 1e-15), 4: (1e-12, 1e-16)}
#: The beta accuracy that `DEFAULT_TOLERANCES` were chosen for (relative, at every save time).
DEFAULT_ACCURACY = 1e-6
#: atol when rtol is given and atol is not (the default of the releases before 0.3).
EXPLICIT_RTOL_ATOL = 1e-12


def default_tolerances(depth: int) -> tuple[float, float]:
    """`(rtol, atol)`: the tolerances a solve at depth `depth` takes when its settings
    give none (`SolverSettings`, rtol None): `DEFAULT_TOLERANCES` (depth 1 and 2: the
    depth-2 pair; depth 5 and more: the depth-4 pair)."""
    return DEFAULT_TOLERANCES[min(max(int(depth), 2), 4)]
_OPS = {"gt": (operator.gt, ">"), "ge": (operator.ge, ">="), "lt": (operator.lt, "<"), "le": (operator.le, "<=")}


def bound_problem(name: str, value) -> "str | None":
    """One line naming `solver.<name>` when `value` is outside `SETTING_BOUNDS`
    (or of the wrong type), else None. `max_runs` may be None (automatic)."""
    if name in ("max_runs", "rtol", "atol") and value is None:
        return None
    bounds = SETTING_BOUNDS[name]
    integer = name in _INTEGER_SETTINGS
    if isinstance(value, (bool, np.bool_)):
        ok = False
    elif integer:
        ok = isinstance(value, (int, np.integer))
    else:
        ok = isinstance(value, (int, float, np.integer, np.floating)) and bool(np.isfinite(value))
    ok = ok and all(_OPS[k][0](value, v) for k, v in bounds.items())
    if ok:
        return None
    kind = "an integer" if integer else "a finite number"
    limits = " and ".join(f"{_OPS[k][1]} {v:d}" if integer else f"{_OPS[k][1]} {v:g}" for k, v in bounds.items())
    return f"solver.{name} must be {kind} {limits}, got {value!r}"


STUCK_INIT = (
    "the init cannot move at depth {depth}: each layer's gradient is a product of the other layers' "
    "weights, exactly 0 in float64 (alpha = 0, or alpha^(L-1) underflowing), so W stays there under "
    "every flow; use alpha > 0 large enough, or depth 1"
)


def stuck_inits(W0: np.ndarray) -> np.ndarray:
    """Which inits (B, L, d) no flow can leave: at depth L >= 2, -grad L =
    r * prod_{k != l} w^(k) and the SAM ascent step (0 when the gradient is 0)
    vanish for every r exactly when every prod_excl entry is 0 in float64.
    Returns (B,) bool (all False at depth 1, where the gradient is -r(beta))."""
    W0 = np.asarray(W0, dtype=np.float64)
    B, L, d = W0.shape
    if L < 2:
        return np.zeros(B, bool)
    with np.errstate(under="ignore", invalid="ignore"):
        excl = np.stack([np.prod(np.delete(W0, l, axis=1), axis=1) for l in range(L)], axis=1)
    return np.all(excl == 0, axis=(1, 2))


def problems(methods, clock, data: "Dataset | None" = None, W0=None, coords: str = "linear", p=None) -> list[str]:
    """Every rule between the parts of a solve that its parts alone cannot check,
    one line each (naming the key to change), in a fixed order; [] when none.

    The rules: the tau clock needs one sample (docs/theory.md s.3); log
    coordinates need gd/l2/usam on one sample with inits whose layer products
    have the signs of mu (`samflow.flows.log_coords_problem`). This is the one
    place they are checked: `solve`, `SolverSettings.resolved`, the sweep on a
    data file and the config schema (before its data are read: `data` or `W0`
    None skips what needs them) all call it. `p`: lp's exponent (a float, or
    None), applied to "lp" in `methods` (log coordinates need p <= 2).
    """
    out = []
    if Clock.parse(clock) is Clock.TAU and data is not None and data.X.shape[0] != 1:
        out.append(TAU_ONE_SAMPLE)
    if coords == "log":
        for m in methods:
            why = log_coords_problem(W0, data, m, p if Method.parse(m) is Method.LP else None)
            if why and why not in out:
                out.append(why)
    return out


def check_problem(methods, clock, data: "Dataset | None" = None, W0=None, coords: str = "linear", p=None) -> None:
    """`problems`, raised: `ValueError` with the first problem's line."""
    found = problems(methods, clock, data, W0, coords, p)
    if found:
        raise ValueError(found[0])


#: The warning of `SolverSettings`' old keyword and attribute (the config's is
#: `samflow.config.SolverConfig`'s).
MAX_SEGMENTS_RENAMED = ("SolverSettings.max_segments is now SolverSettings.max_runs; "
                        "the old name goes in the release after 0.3")


def _old_names(cls):
    """`cls` (`SolverSettings`) whose constructor also takes `max_segments`, max_runs'
    name before 0.3, with a FutureWarning naming the new one; the fields, their
    order, equality and hash (`program_key`) are those of the dataclass."""
    init = cls.__init__
    position = [f.name for f in dataclasses.fields(cls)].index("max_runs")

    @functools.wraps(init)
    def __init__(self, *args, max_segments=None, **kwargs):
        if max_segments is not None:
            if kwargs.get("max_runs") is not None or len(args) > position:
                raise ValueError("solver.max_runs and max_segments (its name before 0.3) are both given: keep max_runs")
            warnings.warn(MAX_SEGMENTS_RENAMED, FutureWarning, stacklevel=2)
            kwargs["max_runs"] = max_segments
        init(self, *args, **kwargs)

    cls.__init__ = __init__
    return cls


@_old_names
@dataclasses.dataclass(frozen=True)
class SolverSettings:
    """Settings of a solve (hashable: one compilation per distinct value of the
    fields but `rtol` and `atol`, which the compiled program takes as data,
    `program_key`).

    **Fields:**

    - `solver`: "tsit5" (default), "dopri5" or "dopri8" (diffrax explicit RK).
    - `rtol`, `atol`: tolerances of the PID step-size controller; the absolute
      tolerance used is atol x clip(max|W(0)|, 1e-150, 1), so that cells with tiny
      inits keep their relative accuracy. Traced: solves at other tolerances
      share one compiled program. None (the default): chosen by depth so that
      beta is within 1e-6 relative of the exact flow at every save time
      (`default_tolerances`: rtol 1e-8, atol 1e-12 at depth <= 2; 1e-11, 1e-15 at
      depth 3; 1e-12, 1e-16 from depth 4; measured over the shipped configs,
      docs/theory.md s.4.4); `resolved` fills them in. An rtol given without
      atol takes atol 1e-12.
    - `max_steps`: step budget of one run (the steps between two events).
    - `capture_radius`: collapse is declared when ||W||_2 <= capture_radius * rho
      (docs/theory.md section 4 recommends 1e-6 in float64); arrival at another
      critical point of the loss (l2) when ||G(W)|| / ||G(W_hat)|| <= capture_radius;
      lp with p > 2 captures a weight arriving at 0 only below capture_radius *
      rho / sqrt(L d) (docs/theory.md s.4.3).
    - `blowup_log10`: in the tau clock a cell stops as blown up when max_j |beta_j|
      >= 10**blowup_log10 (growth past the float64 range), or, for depth >= 3,
      when it nears a pole: relative growth rate x tau > 1e10 (finite-time
      blow-up; the event is then within ~1e-10 relative of the blow-up time).
    - `max_runs`: most runs of steps (events + 1) per cell; None means 2 L d + 2
      (plus 4 d for linf-SAM on multi-sample data: its r_j = 0 crossings and
      slides); with K switch times recorded, K + 1 more, also on a value set
      (a run ends at each switch). (Named `max_segments` before 0.3: `SolverSettings(max_segments=...)`,
      the attribute and a sweep config, `samflow.config.SolverConfig`, still
      read that name, with a FutureWarning naming `max_runs`.)
    - `loss`: "logistic" or "exponential".
    - `coords`: the state the solver integrates: "linear" (default; the weights
      W) or "log" (x = log|W| with the signs held fixed; gd, l2, usam and lp on one
      sample with sign(prod_l w_lj(0)) = sign(mu_j) only, see
      `samflow.flows.log_coords_eligible`). In log coordinates a suppressed
      coordinate never underflows to 0 (docs/theory.md s.4: in linear coordinates
      one that falls below ~1e-308 is lost for good, and "major last" with it),
      and the stiff decay of the major coordinates before an l2 collapse is
      plain linear motion (about half the steps); the absolute tolerance on x
      is `rtol`, since an error in x is a relative error of W. On CPU the log
      field costs about 1.5x per step, so at d = 5 the two run at about the
      same speed; linear stays the default because it places the collapse time
      about 10x more accurately at equal rtol (see docs/benchmarks.md). At
      large d log is the fast choice for l2 charts with collapsing cells: the
      rates of that decay spread by (mu_max / mu_min)^2, stiff in W but not in
      x, so a collapsing cell takes a few hundred steps from d = 5 to d = 200
      against ~11,000 at d = 50 in linear (which runs out of `max_steps` at
      d = 200); with rtol = 1e-10 beta stays within 1e-6 of the reference
      (1e-9 does not, at a save just before a collapse; docs/benchmarks.md,
      "Large d: log coordinates").
    - `reduce`: "auto" (default), "all" or "off". "auto" solves every cell that an
      exact reduction of the state covers, where the reduction pays for its
      compilation, in the reduced state, the others in the general one: today
      depth-2 l2-SAM on one sample from equal layers (W(0) `(2, d)` with both
      rows equal, no weight and no mu_j at 0) at d >= 8
      (`samflow._engine.reduced.AUTO_MIN_D`; below it the general state is as fast and
      the reduction's loop would only double the program), whose whole
      trajectory is two scalars at any d (docs/theory.md s.3.5,
      `samflow._engine.reduced`): the same `Trajectory` fields, statuses and events
      (collapse time and direction) to the settings' accuracy, in a fraction of
      the time at large d; switch times too. A reduced cell that meets anything
      but the horizon, a collapse or a switch (another event, `max_steps`, a
      failed step) is solved again by the general engine. "all": the two-scalar
      reduction at any d, and the equal-layer reduction (docs/theory.md s.3.5): a cell of gd, l2, usam or
      lp at depth >= 2 whose layers start equal runs as one row (d + 1
      numbers in place of L d + 1), with the same hand-back (silent: such a
      cell's results are those of "off" bit for bit), on any data, to the
      settings' accuracy: 1.3-3.1x less time per cell (13x for usam), but the
      program's first call takes 1.5-1.7x as long (4-7 s more), so it pays on
      charts of tens of thousands of cells, or when the compile cache holds
      the program (docs/benchmarks.md, "Exact reductions"). "off": always the
      general `(L, d)` state (the reference the reductions are tested against).
    """

    solver: str = "tsit5"
    rtol: float | None = None
    atol: float | None = None
    max_steps: int = 16384
    capture_radius: float = 1e-6
    blowup_log10: float = 200.0
    max_runs: int | None = None
    loss: str = "logistic"
    coords: str = "linear"
    reduce: str = "auto"

    @property
    def max_segments(self) -> "int | None":
        """`max_runs` under its name before 0.3 (with a FutureWarning)."""
        warnings.warn(MAX_SEGMENTS_RENAMED, FutureWarning, stacklevel=2)
        return self.max_runs

    def __post_init__(self):
        if self.solver not in _SOLVERS:
            raise ValueError(
                f"solver.solver: unknown solver {self.solver!r}; allowed: {', '.join(_SOLVERS)}"
            )
        for name in SETTING_BOUNDS:
            problem = bound_problem(name, getattr(self, name))
            if problem:
                raise ValueError(problem)
        get_loss(self.loss)
        if self.coords not in COORDS:
            raise ValueError(f"solver.coords must be 'linear' or 'log', got {self.coords!r}")
        if self.reduce not in REDUCE:
            raise ValueError(f"solver.reduce must be 'auto', 'all' or 'off', got {self.reduce!r}")

    def program_key(self) -> "SolverSettings":
        """These settings with the tolerances and the step budget at their defaults: what
        a compiled program depends on. rtol, atol and max_steps reach the lane engine
        traced (`tolerances`), so that solves at every tolerance and budget share one
        program (`samflow._engine.lanes.solve_lanes`'s `tol`; the switch refinement
        re-solves at three rtols; a run again with a larger `max_steps`, after cells
        ended as `MAX_STEPS`, compiles nothing)."""
        return dataclasses.replace(self, rtol=SolverSettings.rtol, atol=SolverSettings.atol,
                                   max_steps=SolverSettings.max_steps)

    def tolerances(self):
        """`(3,)` float64 `[rtol, atol, max_steps]`, the traced tolerances and step
        budget of a program made for `program_key()` (max_steps <= 10**7 is exact in
        float64)."""
        import numpy as np

        if self.rtol is None or self.atol is None:
            raise ValueError("SolverSettings.tolerances: rtol and atol are chosen by depth; call with_tolerances(depth) "
                             "or resolved(...) first")
        return np.asarray([self.rtol, self.atol, self.max_steps], np.float64)

    def resolved(self, method: "str | Method", W0, data: Dataset, clock: "str | Clock" = Clock.T, p=None) -> "SolverSettings":
        """These settings, checked against a batch of inits `W0` ((L, d) or
        (B, L, d), host arrays), its data and clock, with rtol and atol filled in
        for its depth (`with_tolerances`).

        **Raises:** `ValueError` (one line, `check_problem`): the tau clock on
        multi-sample data, or `coords` "log" for a batch that may not use it
        (`samflow.flows.log_coords_problem`; `p` lp's exponent, a float or None).
        """
        check_problem([method], clock, data, W0, self.coords, p)
        return self.with_tolerances(np.shape(W0)[-2])

    def with_tolerances(self, depth: int) -> "SolverSettings":
        """These settings with rtol and atol filled in for a solve at depth `depth`:
        `default_tolerances(depth)` where rtol is None, atol 1e-12 where only atol is."""
        if self.rtol is None:
            rtol, atol = default_tolerances(depth)
            return dataclasses.replace(self, rtol=rtol, atol=atol if self.atol is None else self.atol)
        if self.atol is None:
            return dataclasses.replace(self, atol=EXPLICIT_RTOL_ATOL)
        return self


def _brief(x) -> str:
    """A one-line, short rendering of a user value for an error message."""
    if isinstance(x, (np.ndarray, jax.Array)) or (isinstance(x, (list, tuple)) and len(x) > 0):
        try:
            a = np.asarray(x, dtype=np.float64)
            text = np.array2string(a, separator=", ", threshold=6, edgeitems=2, max_line_width=10**6)
            return text.replace("\n", "") if a.ndim else text
        except (TypeError, ValueError):
            pass
    text = " ".join(repr(x).split())
    return text if len(text) <= 80 else text[:77] + "..."


def _float_array(x, name: str) -> np.ndarray:
    """`x` as a float64 numpy array (`samflow._util.checks.float64_array`: a float32
    value that is not the number it prints as is widened with a warning), or a
    one-line `ValueError` naming `name`."""
    try:
        if isinstance(x, (str, bytes)) or np.iscomplexobj(x):
            raise TypeError
        return float64_array(x, name)  # a float32 0.1 is widened with a warning naming the number it became
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a real number or a regular array of real numbers, got {_brief(x)}") from None


def check_save_times(ts: ArrayLike, name: str = "ts") -> np.ndarray:
    """Validate save times: 1-D, finite, >= 0, strictly increasing, last > 0.

    **Returns:** float64 `(n_save,)`.

    **Raises:** `ValueError` naming `name` and what is wrong.
    """
    ts = _float_array(ts, name)
    if ts.ndim != 1 or ts.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D list of times, got shape {ts.shape}")
    if not np.all(np.isfinite(ts)):
        raise ValueError(f"{name} contains a non-finite time")
    if ts[0] < 0:
        raise ValueError(f"{name} must start at a time >= 0 (the flow starts at 0), got {ts[0]}")
    if np.any(np.diff(ts) <= 0):
        raise ValueError(f"{name} must be strictly increasing")
    if ts[-1] <= 0:
        raise ValueError(f"{name} must end at a time > 0, got {ts[-1]}")
    return ts


def check_depth(depth) -> int:
    """`depth` as an int >= 1, or a one-line `ValueError`."""
    if isinstance(depth, (bool, np.bool_)) or not (isinstance(depth, (int, np.integer)) and depth >= 1):
        raise ValueError(f"depth must be an integer >= 1, got {_brief(depth)}")
    return int(depth)


def check_rho(rho: ArrayLike) -> tuple[np.ndarray, bool]:
    """Validate the SAM radius of a call: a scalar (one cell) or a non-empty 1-D
    vector (one cell per entry), finite and >= 0.

    **Returns:** `(rho_b, batched)`: float64 `(B,)` (B = 1 for a scalar) and
    whether `rho` was a vector.

    **Raises:** `ValueError` naming rho and what is wrong.
    """
    r = _float_array(rho, "rho")
    if r.ndim > 1:
        raise ValueError(f"rho must be a scalar or a 1-D vector (one cell per entry), got shape {r.shape}")
    if r.ndim == 1 and r.size == 0:
        raise ValueError("rho is an empty vector: give at least one radius (or a scalar)")
    if not np.all(np.isfinite(r)):
        raise ValueError(f"rho must be finite, got {_brief(rho)}")
    if np.any(r < 0):
        raise ValueError(f"rho must be >= 0, got {_brief(rho)}")
    return np.atleast_1d(r), r.ndim == 1


def check_data(data: Dataset, name: str = "data") -> None:
    """Refuse, in one line naming `name`, anything but a valid `samflow.Dataset`:
    X (n, d) with n, d >= 1, all finite; y (n,) of labels -1 / +1
    (`Dataset.from_arrays` checks, for a `Dataset` built with the plain
    constructor). A non-finite data set is refused here rather than solved into
    a batch of `NONFINITE_INPUT` cells.
    """
    if not isinstance(data, Dataset):
        raise ValueError(
            f"{name} must be a samflow.Dataset (sf.single_sample(mu) or sf.Dataset.from_arrays(X, y)), "
            f"got {type(data).__name__}"
        )
    try:
        Dataset.from_arrays(np.asarray(data.X), np.asarray(data.y))
    except (TypeError, ValueError) as e:
        raise ValueError(f"{name}: {e}") from None


# The package's names for three helpers above (the generic models and the iteration engine use them).
SOLVERS, brief, float_array = _SOLVERS, _brief, _float_array
