"""The result store: a self-describing netCDF file per sweep, written atomically.

`to_dataset` labels the arrays of a sweep as an `xarray.Dataset`:

| variable             | dims                                  | meaning |
|----------------------|---------------------------------------|---------|
| beta                 | flow, alpha, rho, time, coord         | linear predictor |
| loss                 | flow, alpha, rho, time                | empirical loss L(theta) |
| real_time            | flow, alpha, rho, time                | t at each save time (= time for clock t) |
| status               | flow, alpha, rho                      | `samflow.Status` code (flag_meanings) |
| event_time           | flow, alpha, rho                      | collapse / blow-up / failure time, clock units |
| event_real_time      | flow, alpha, rho                      | the same in real time (`Trajectory.event_t`) |
| collapse_direction   | flow, alpha, rho, coord               | beta/||beta|| just before collapse |
| slide_time           | flow, alpha, rho, layer, coord        | time from which a weight slid at 0 |
| num_steps            | flow, alpha, rho                      | solver steps |
| alpha_init           | alpha, rho                            | the absolute init scale of each cell |
| eta (coordinate)     | flow                                  | step size of a discrete method, NaN for a flow (only with [discrete]) |
| p (coordinate)       | flow                                  | exponent of the SAM ball: p of "lp p=3", 2 for l2, inf for linf, NaN for gd, usam (only with [lp]) |
| weights (optional)   | flow, alpha, rho, time, layer, coord  | all weights |
| switch_time          | flow, alpha, rho, switch              | exact switch times of the dominant feature, clock units, NaN-padded (`add_switch_times`) |
| switch_time_err      | flow, alpha, rho, switch              | a bound on the error of each switch_time, clock units, NaN-padded (docs/theory.md s.5; after the sweep's refinement, from two solves, at most 1e-9 x switch_time where it was reached) |
| switch_real_time     | flow, alpha, rho, switch              | the same in real time t (+inf past e^69 in the tau clock) |
| switch_from, switch_to | flow, alpha, rho, switch            | int8 (int16 for d > 127, int32 for d > 32767): leader before / after (1-based), -1 padded |
| switch_first         | flow, alpha, rho                      | int8 (as switch_from): leader at the start (1-based), -1 without a record |
| switch_count         | flow, alpha, rho                      | switches found |
| switch_ok            | flow, alpha, rho                      | bool: False where the record was refused (all NaN / -1) |

With `output.save = "summary"` (`samflow.Summary`, for very large grids) the
file holds no `beta` (and no `weights`); per save time it keeps

| variable             | dims                                  | meaning |
|----------------------|---------------------------------------|---------|
| dominant             | flow, alpha, rho, time                | int8 (int16 for d > 127, int32 for d > 32767): argmax_j |beta_j|, 1-based; 0 where beta = 0 (collapsed), -1 where beta is not finite (`samflow.analysis.dominant_index`) |
| tied                 | flow, alpha, rho, time                | bool: the two largest |beta_j| within 1e-9 relative (`samflow.analysis.tied`) |
| beta_norm            | flow, alpha, rho, time                | ||beta||_2 (NaN where beta is not finite) |
| loss, real_time      | flow, alpha, rho, time                | as above |

and every per-cell variable above (status ... alpha_init) unchanged. These are
bit for bit what a full run gives: `dominant` equals `dominant_index(beta)` of
the full run, `loss`, `real_time` and the per-cell variables are equal, and
`beta_norm` is ||beta|| to the last bit or two. The regime labels follow from
`dominant` and `tied` (`samflow.analysis.regime_label_from_dominant`).

A *slice* of a sweep (`python -m samflow.sweep CONFIG --num-slices K --slice-index i`,
see `samflow.merge`) has the same variables with the two axes (alpha, rho)
replaced by one axis `cell`, whose coordinate holds the flattened index
`alpha index * n_rho + rho index` of each cell it solved; the `alpha` and `rho`
coordinates, `alpha_init` and the data stay whole. `samflow.merge.merge_slices`
puts K slices back into the layout above.

Discrete methods (`methods = ["discrete_l2", ...]`, `[discrete] eta`) are
entries of the same `flow` axis ("discrete_l2", or "discrete_l2 eta=0.01" for
several step sizes), on the same time axis: save time t holds the iterate
k = round(t / eta), whose real time k eta is `real_time`; see
`samflow.sweep._kinds` for the per-cell variables they fill (NaN where a kind
has none). lp-SAM (`methods = ["lp", ...]`, `[lp] p`) runs once per exponent,
one entry each ("lp p=3", also for a single p; "discrete_lp p=3 eta=0.01"),
with the coordinate `p` beside them. Generic models (`[model]`) fill the same variables from
`samflow.models.solve_model` (attribute `model`).

The coordinates `alpha`, `rho` and `time` hold the values of the config as
written: a list as given, a generated axis as `samflow.config.GridAxis` makes it
(0.3, not np.linspace's 0.30000000000000004), so `ds.sel(rho=0.3, alpha=0.7,
time=0.3)` selects by the numbers of the config; a value computed another way
is selected with `ds.sel(alpha=x, method="nearest")`. No coordinate carries a
`_FillValue` (`write_results`).

The method axis is named `flow` (values "gd", "l2", "linf", "usam"), not
"method": xarray's `.sel(method=...)` is the interpolation-method keyword and
would silently select nothing.

Attributes hold the full config (TOML-equivalent JSON), the package versions,
the clock, the loss, the depth, the data, and the wall time per method
(`method_wall_time_s`, JSON; the methods of a sweep share one compiled program,
whose compilation or loading falls in the first method's time);
`samflow.sweep.run_sweep` adds `config_key` (the hash of what sets the numbers),
`code_stamp` (`code_stamp()`: samflow's version, git commit, source hash and
the versions of `STAMP_PACKAGES`: jax, jaxlib, diffrax, equinox, optimistix,
lineax and numpy), `resumed_code_stamps` (a JSON list, only when
`--resume-any-version` combined chunks made under other stamps) and, for a
slice, `slice_index` and `num_slices`.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import importlib.metadata
import json
import sys
from pathlib import Path

import numpy as np
import xarray as xr

from ._util.cache import PROGRAM_PACKAGES
from ._util.io import atomic_write_netcdf
from ._engine.solution import index_dtype
from .status import STATUS_MESSAGES, Status

__all__ = ["ResultsLayout", "to_dataset", "write_results", "read_results", "locked_problem", "package_versions", "code_stamp",
           "source_hash"]

#: The packages whose versions enter `code_stamp`: every one whose code sets the numbers of a
#: solve (the flows are equinox modules; the events root-find with optimistix and lineax). The
#: one list, shared with the key of the stored programs (`samflow._util.cache.program_key`).
STAMP_PACKAGES = PROGRAM_PACKAGES
_PACKAGES = ("samflow", *STAMP_PACKAGES, "xarray")


def package_versions() -> dict[str, str]:
    """Versions of samflow (the code running: `samflow.__version__`, not the installed
    metadata, which an editable install or a checkout on PYTHONPATH can leave stale) and
    of the installed packages its numbers depend on."""
    out = {}
    for p in _PACKAGES:
        if p == "samflow":  # the package is imported whenever this module is (it is its parent)
            out[p] = sys.modules["samflow"].__version__
            continue
        try:
            out[p] = importlib.metadata.version(p)
        except importlib.metadata.PackageNotFoundError:
            out[p] = "not installed"
    return out


def _git_state(*pathspec: str) -> "tuple[str, bool] | None":
    """(HEAD commit, dirty) of the checkout holding the package, dirty meaning
    tracked files (under `pathspec`, default the whole checkout) differ from it;
    None outside a git checkout."""
    import subprocess

    here = Path(__file__).resolve().parent
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5
        )
        if head.returncode != 0:
            return None
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", *(("--", *pathspec) if pathspec else ())],
            cwd=here, capture_output=True, text=True, timeout=5,
        )
        return head.stdout.strip(), bool(dirty.stdout.strip())
    except (OSError, subprocess.SubprocessError):
        return None


def git_commit() -> str:
    """The git commit of the samflow source tree, with '+dirty' for local edits;
    'unknown' outside a git checkout."""
    state = _git_state()
    return "unknown" if state is None else state[0] + ("+dirty" if state[1] else "")


def source_hash() -> str:
    """The first 12 hex digits of the sha256 of samflow's Python sources.

    Hashes every `*.py` file under the package folder (path relative to the
    package, then its bytes), in sorted order: any edit of the code, committed
    or not, changes it; compiled caches and data files do not.
    """
    root = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for p in sorted(root.rglob("*.py")):
        h.update(p.relative_to(root).as_posix().encode() + b"\0")
        h.update(p.read_bytes() + b"\0")
    return h.hexdigest()[:12]


def _package_git_commit() -> str:
    """The git commit (12 hex digits) of the checkout that holds the package,
    with '-dirty' when tracked files of the package folder differ from it;
    'unknown' outside a git checkout."""
    state = _git_state(".")
    return "unknown" if state is None else state[0][:12] + ("-dirty" if state[1] else "")


def code_stamp(extra: "tuple[str, ...]" = ()) -> str:
    """One line that identifies the code a sweep's numbers come from.

    E.g. `samflow 0.1.0 git f9451ab8dfb5 src 3c2e61d0a9b7 jax 0.10.2 jaxlib
    0.10.2 diffrax 0.7.2 equinox 0.13.8 optimistix 0.1.0 lineax 0.1.1 numpy
    2.4.6`: samflow's version, the git commit of its checkout (`-dirty` when
    the package's tracked files have local edits; `unknown` outside git),
    `source_hash()` (so an uncommitted edit, or an edited copy outside git,
    changes the stamp too), and the versions of
    `STAMP_PACKAGES`, then of the packages `extra` (those another computation
    also depends on: the CNN study adds "optax", its SAM). The sweep stores it in
    its checkpoint folder and in every results file (attribute `code_stamp`);
    `--resume` and the merge of slices refuse to combine results made under
    different stamps, and so does the CNN study's `--resume` for its stored runs.
    """
    v = package_versions()
    parts = [f"samflow {v['samflow']}", f"git {_package_git_commit()}", f"src {source_hash()}"]
    for p in (*STAMP_PACKAGES, *extra):
        try:
            parts.append(f"{p} {importlib.metadata.version(p)}")
        except importlib.metadata.PackageNotFoundError:
            parts.append(f"{p} none")
    return " ".join(parts)


@dataclasses.dataclass(frozen=True, eq=False)
class ResultsLayout:
    """What `to_dataset` writes beside the solver's results: the coordinates and the
    attributes of a sweep, resolved once from its config: `samflow.sweep.results_layout(cfg)`
    builds it from a `SweepConfig` (`samflow.sweep.run_sweep` makes it so, with the rest
    of the sweep's plan)."""

    name: str
    """The run's name (the title "samflow sweep 'name'")."""
    config: dict
    """The config as JSON values (`SweepConfig.model_dump(mode="json")`), stored as the attribute `config`."""
    alpha: np.ndarray
    """The coordinate `alpha`, as the config writes it (`GridConfig.alpha_values`)."""
    rho: np.ndarray
    """The coordinate `rho`, as the config writes it."""
    time: np.ndarray
    """The save times (n_save,): the coordinate `time`."""
    depth: int
    """Layers L (the axis `layer`)."""
    clock: str
    """The clock of `time`, "t" or "tau" (its units)."""
    loss: str
    """The margin loss ("logistic" or "exponential")."""
    rtol: float
    """The relative tolerance the solves used (attribute `solver_rtol`)."""
    atol: float
    """The absolute tolerance the solves used (attribute `solver_atol`)."""
    alpha_relative_to_rho: bool = False
    """`alpha` in multiples of rho (`grid.alpha_relative_to_rho`)."""
    save: str = "full"
    """What the results hold: "full" (beta, a `Trajectory` per method) or "summary" (a `Summary`)."""
    save_weights: bool = False
    """Also write every layer's weights (variable `weights`)."""
    flow_eta: "dict | None" = None
    """With discrete methods: the step size of each `flow` label (None for a flow), the coordinate `eta`."""
    flow_p: "dict | None" = None
    """With lp methods: the exponent of each `flow` label's ball, the coordinate `p`."""
    attrs: dict = dataclasses.field(default_factory=dict)
    """Attributes of the experiment tables (`model`, `init`, `data_generator`), written as they are."""


def to_dataset(layout: ResultsLayout, data, alpha_abs, results, timings, cells=None) -> xr.Dataset:
    """Label the trajectories of a sweep (see the module docstring for the layout).

    **Arguments:** `layout` the coordinates and attributes (`ResultsLayout`;
    `samflow.sweep.results_layout(cfg)` builds it from a config);
    `data` the `Dataset`; `alpha_abs` (A, R) absolute init scales; `results`
    {Method: Trajectory with leading axis A*R, or n with `cells`; a `Summary`
    for each method when `layout.save` is "summary"}; `timings` {method name:
    seconds}; `cells` (n,) flattened indices (alpha index * R + rho index) of
    the cells in `results`, for a slice of the grid: the per-cell variables
    then have the axis `cell` in place of (alpha, rho).

    **Raises:** `TypeError` (one line) for a config as `layout` (0.2's argument:
    pass `samflow.sweep.results_layout(cfg)`);
    `ValueError` when `cells` is not 1-D, or holds an index outside [0, A*R) or
    twice, or when `results` are not all of the kind `layout.save` names
    (Trajectory for "full", Summary for "summary").
    """
    from ._engine.solution import Summary, Trajectory

    if not isinstance(layout, ResultsLayout):
        raise TypeError("to_dataset takes a samflow.store.ResultsLayout since samflow 0.3.0, not a config "
                        f"(got {type(layout).__name__}): pass samflow.sweep.results_layout(cfg)")
    A, R = alpha_abs.shape
    methods = list(results)
    summary = layout.save == "summary"
    want = Summary if summary else Trajectory
    labels = [str(getattr(m, "value", m)) for m in methods]
    wrong = [label for m, label in zip(methods, labels) if not isinstance(results[m], want)]
    if wrong:
        raise ValueError(
            f"output.save = {layout.save!r} needs a {want.__name__} per method; got another "
            f"kind for {', '.join(wrong)}"
        )
    L, d = layout.depth, data.d
    ts = layout.time
    if cells is not None:
        cells = np.asarray(cells, dtype=np.int64)
        bad = cells.ndim != 1 or np.any(cells < 0) or np.any(cells >= A * R)
        if bad or np.unique(cells).size != cells.size:
            raise ValueError(f"cells must be distinct flattened indices in [0, {A * R}), one per solved cell")
    grid_shape = (A, R) if cells is None else (cells.size,)

    def stack(field, tail):
        arr = np.stack([np.asarray(getattr(results[m], field)) for m in methods])
        return arr.reshape((len(methods),) + grid_shape + tail)

    n = len(ts)
    coords = {
        "flow": labels,
        "alpha": layout.alpha,
        "rho": layout.rho,
        "time": np.asarray(ts),
        "coord": np.arange(1, d + 1),
        "layer": np.arange(1, L + 1),
    }
    cell = ("flow", "alpha", "rho") if cells is None else ("flow", "cell")
    if cells is not None:
        coords["cell"] = cells
    coords.update(_experiment_coords(layout, labels))
    codes = [s.value for s in Status]
    per_time = _per_time_variables(stack, cell, n, d, summary)
    variables = {
        **per_time,
        "loss": (cell + ("time",), stack("loss", (n,)), {"long_name": "empirical loss"}),
        "real_time": (cell + ("time",), stack("t", (n,)), {"long_name": "real time t", "units": "t"}),
        "status": (
            cell,
            stack("status", ()).astype(np.int8),
            {
                "long_name": "how the solve of the cell ended",
                "flag_values": np.asarray(codes, np.int8),
                "flag_meanings": " ".join(s.name.lower() for s in Status),
                "flag_sentences": json.dumps({s.name.lower(): STATUS_MESSAGES[s] for s in Status}),
            },
        ),
        "event_time": (cell, stack("event_time", ()), {"long_name": "time of the event that ended the cell: collapse, critical point, blow-up, or where the solver stalled or failed (see status)", "units": layout.clock}),
        "event_real_time": (cell, stack("event_t", ()), {"long_name": "event time in real time t"}),
        "collapse_direction": (cell + ("coord",), stack("collapse_direction", (d,)), {"long_name": "beta/||beta|| just before collapse"}),
        "slide_time": (cell + ("layer", "coord"), stack("slide_time", (L, d)), {"long_name": "time from which the weight slid at 0", "units": layout.clock}),
        "num_steps": (cell, stack("num_steps", ()).astype(np.int64), {"long_name": "solver steps"}),
        "num_runs": (cell, stack("num_runs", ()).astype(np.int32), {"long_name": "runs of solver steps between events (events + 1)"}),
        "alpha_init": (("alpha", "rho"), np.asarray(alpha_abs), {"long_name": "absolute init scale alpha of the cell"}),
        "data_X": (("sample", "coord"), np.asarray(data.X), {"long_name": "inputs x_i"}),
        "data_y": (("sample",), np.asarray(data.y), {"long_name": "labels y_i"}),
    }
    if layout.save_weights:
        variables["weights"] = (cell + ("time", "layer", "coord"), stack("W", (n, L, d)), {"long_name": "weights w^(l)_j"})
    ds = xr.Dataset({k: xr.Variable(*v) for k, v in variables.items()}, coords=coords)
    ds["time"].attrs.update(long_name=("real time t" if layout.clock == "t" else "rescaled time tau"), units=layout.clock)
    ds["alpha"].attrs.update(
        long_name="init scale alpha / rho" if layout.alpha_relative_to_rho else "init scale alpha"
    )
    ds["rho"].attrs.update(long_name="SAM radius rho")
    if cells is not None:
        ds["cell"].attrs.update(long_name="flattened cell index: alpha index * n_rho + rho index")
    ds.attrs.update(layout.attrs)
    ds.attrs.update(
        # The tolerances the solves used (the config's, or those chosen by depth where it gives none).
        solver_rtol=layout.rtol,
        solver_atol=layout.atol,
        title=f"samflow sweep '{layout.name}'",
        # Strict JSON: a non-finite number (refused by every config schema) raises here
        # rather than being written as NaN / Infinity, which no JSON parser reads.
        config=json.dumps(layout.config, allow_nan=False),
        versions=json.dumps(package_versions()),
        git_commit=git_commit(),
        clock=layout.clock,
        loss=layout.loss,
        depth=layout.depth,
        alpha_relative_to_rho=int(layout.alpha_relative_to_rho),
        method_wall_time_s=json.dumps(timings),
        created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    )
    return ds


def _per_time_variables(stack, cell, n, d, summary) -> dict:
    """The per-cell variables over time besides the loss: beta (`summary` False) or
    the summary's dominant index, ties and ||beta|| (True), as {name: (dims, values,
    attrs)}; `stack(field, tail)` gathers a field of every flow's results."""
    if summary:
        per_time = {
            "dominant": (
                cell + ("time",),
                stack("dominant", (n,)),
                {
                    "long_name": "dominant feature argmax_j |beta_j| (1-based)",
                    "comment": "0 where beta = 0 (collapsed), -1 where beta is not finite",
                },
            ),
            "tied": (cell + ("time",), stack("tied", (n,)).astype(bool), {"long_name": "two largest |beta_j| tied within 1e-9 relative"}),
            "beta_norm": (cell + ("time",), stack("beta_norm", (n,)), {"long_name": "||beta||_2"}),
        }
    else:
        per_time = {
            "beta": (cell + ("time", "coord"), stack("beta", (n, d)), {"long_name": "linear predictor beta"}),
        }
    return per_time


def _experiment_coords(layout: ResultsLayout, labels: list[str]) -> dict:
    """The coordinates (flow,) of the experiment tables: `eta` when the sweep has
    discrete methods (`layout.flow_eta`), the step size of each discrete entry, NaN
    for a flow; `p` when it has lp methods (`layout.flow_p`), the exponent of each
    entry's ball: p for "lp" / "discrete_lp", 2 for l2, inf for linf (and their
    discrete iterations), NaN for gd and usam (`SweepConfig.flow_entries`). Without
    the table the coordinate is absent, so a file of an older config is unchanged."""
    out = {}
    if layout.flow_eta is not None:
        etas = layout.flow_eta
        values = np.asarray([np.nan if etas.get(k) is None else etas[k] for k in labels], np.float64)
        out["eta"] = ("flow", values, {
            "long_name": "step size eta of a discrete method (NaN for a flow)",
            "comment": "save time t holds the iterate k = round(t / eta), at real time k eta (real_time)",
        })
    if layout.flow_p is not None:
        values = np.asarray([layout.flow_p.get(k, np.nan) for k in labels], np.float64)
        out["p"] = ("flow", values, {
            "long_name": "exponent p of the SAM ball ||eps||_p <= rho (2: l2, inf: linf; NaN: gd, usam)",
        })
    return out


def add_switch_times(ds: xr.Dataset, switches: dict, cells=None) -> xr.Dataset:
    """Add the exact switch times of each method (`samflow.switches.SwitchTimes`
    with leading axis A*R, or n with `cells`, as `to_dataset` takes results) to
    `ds` as the `switch_*` variables of the module docstring, along a new axis
    `switch` (1..K). Methods of `ds` missing from `switches` get NaN / -1.

    **Raises:** `ValueError` when the records of the methods differ in K.
    """
    flows = [str(f) for f in ds["flow"].values]
    grid = ("alpha", "rho") if cells is None else ("cell",)
    shape = tuple(ds.sizes[g] for g in grid)
    Ks = {np.asarray(sw.time).shape[-1] for sw in switches.values()}
    if len(Ks) > 1:
        raise ValueError(f"switch records of different lengths {sorted(Ks)}")
    K = Ks.pop() if Ks else 1

    def stack(field, fill, dtype, tail):
        out = np.full((len(flows),) + shape + tail, fill, dtype)
        for i, f in enumerate(flows):
            sw = next((v for m, v in switches.items() if getattr(m, "value", m) == f), None)
            if sw is not None:
                out[i] = np.asarray(getattr(sw, field)).reshape(shape + tail)
        return out

    dims = ("flow",) + grid
    unit = ds.attrs.get("clock", "t")
    # Leaders are feature indices up to d: int8 would wrap past 127 (`index_dtype`).
    # (a results file always has `coord`; without it, SwitchTimes' own int32).
    idx = index_dtype(ds.sizes.get("coord", 2**31 - 1))
    ds = ds.assign_coords(switch=np.arange(1, K + 1))
    ds["switch_time"] = (dims + ("switch",), stack("time", np.nan, np.float64, (K,)),
                         {"long_name": "switch time of the dominant feature argmax_j |beta_j| (event-located)", "units": unit})
    ds["switch_time_err"] = (dims + ("switch",), stack("time_err", np.nan, np.float64, (K,)),
                             {"long_name": "bound on the error of switch_time (docs/theory.md s.5), NaN-padded",
                              "units": unit})
    ds["switch_real_time"] = (dims + ("switch",), stack("t", np.nan, np.float64, (K,)),
                              {"long_name": "switch time in real time t (+inf past e^69)"})
    ds["switch_from"] = (dims + ("switch",), stack("from_", -1, idx, (K,)), {"long_name": "leader before the switch (1-based), -1 padded"})
    ds["switch_to"] = (dims + ("switch",), stack("to", -1, idx, (K,)), {"long_name": "leader after the switch (1-based), -1 padded"})
    ds["switch_first"] = (dims, stack("first", -1, idx, ()),
                          {"long_name": "leader at the start (1-based; -1 where no record), before switch 1"})
    ds["switch_count"] = (dims, stack("count", 0, np.int32, ()), {"long_name": "switches found (more than the slots: refused)"})
    ds["switch_ok"] = (dims, stack("ok", False, bool, ()), {"long_name": "switch record kept (False: refused, all NaN; or not computed: discrete methods, generic models)"})
    return ds


def write_results(ds: xr.Dataset, path: "str | Path") -> Path:
    """Write `ds` to `path` (netCDF4 via h5netcdf) atomically.

    The file is written under a temporary name in the same folder and renamed
    into place, so a reader never sees a half-written file and a crash leaves
    no partial result behind (`samflow._util.io.atomic_write_netcdf`). Coordinates get
    no `_FillValue` (xarray gives a float one NaN by default): a coordinate has no
    missing values, and a reader that masks fill values (netCDF4, R, Julia) should
    not mask one (`eta` holds NaN for a flow as a value, "no step size").

    **Raises:** `samflow._util.io.DiskFullError` (an `OSError`; one line naming the
    folder and the bytes needed) when the file does not fit; nothing is left.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    encoding = {name: {"_FillValue": None} for name in ds.coords}
    return atomic_write_netcdf(ds, path, encoding=encoding)


def locked_problem(path: "str | Path", err: BaseException) -> "str | None":
    """One line when opening `path` failed with `err` because another process holds
    the file (HDF5's file lock: a program has it open for writing, e.g. a notebook
    or another run writing it in place), else None.

    h5py raises `BlockingIOError` (errno 11) "unable to lock file" then; the file
    itself may be whole, so the line says to close it there, not to replace it.
    """
    if isinstance(err, BlockingIOError) or "unable to lock file" in str(err):
        return (f"{path} is locked by another process (it holds the file open: HDF5 file lock); "
                "close it there or wait for that process to end, then rerun")
    return None


def read_results(path: "str | Path") -> xr.Dataset:
    """Open a results file written by `write_results` (loaded into memory).

    **Raises:** `FileNotFoundError` naming the path when it does not exist.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"results file not found: {path}")
    with xr.open_dataset(path, engine="h5netcdf") as ds:
        return ds.load()
