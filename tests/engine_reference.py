"""Today's engine outputs, frozen, to compare a new engine with (issue 26, first step).

Everything `samflow.solve` computes on a fixed set of cases, plus exact switch
times (`samflow.switches.switch_times`, to the end): the engine-only part of
the pinned grid (`tests/pin_grid.py`'s `cases(engine_only=True)`: the four
methods x both clocks x both coordinate systems, the depth-3 pole, linf at
depth 1, multi-sample data) and the paths that grid does not reach:

- lp-SAM, p in (1.5, 3, 4), depth 2, both clocks (p > 2: weights slide to 0);
- l2 at depth 1 on symmetric data: a critical point, once at the start;
- linf on multi-sample data with a duplicated feature: status SURFACE;
- collapse that already holds at t = 0, a NaN / inf per-cell alpha
  (NONFINITE_INPUT), a step budget of 8 (MAX_STEPS);
- usam and gd at depth 3 in tau; a d = 50 l2 chart row (default settings);
- the depth-3 detour (one sample mu = (0.1, ..., 0.9), l2, rho = 0.1, alpha/rho
  near 0.018: the lead passes 5 -> 4 -> 5 at t ~ 1.8e3) and the default README
  cell (l2, depth 2, alpha = 0.0042, rho = 0.01: 2 -> 3 -> 4 -> 5 at 6.18,
  12.24, 16.39), with their switch times.

    python tests/engine_reference.py --save      # write tests/data/engine_reference.npz (today's engine only)
    python tests/engine_reference.py --check     # this checkout against it, to the settings' tolerances
    python tests/engine_reference.py --validate  # the same comparison for today's engine at rtol 1e-11
    python tests/engine_reference.py --validate --out run.npz   # ... keeping the run; --against run.npz reuses it

The comparison (`compare_to_reference`) is not bit for bit but to what the
default settings (rtol 1e-8) promise, so that an engine computing the same
flows differently passes: see TOLERANCES. `--validate` checks those
tolerances themselves: today's engine at rtol 1e-11 (and a larger step budget)
must pass against the file made at rtol 1e-8.

Masks (documented exceptions; the numbers behind them are at TOLERANCES):
- a MAX_STEPS cell stalls where the solver's step history puts it: only its
  status and the save times that are finite in both are compared (not
  event_time / event_t, nor which save times are NaN);
- beta and W decaying to 0 are compared to 1% of their earlier size
  (DECAY_FLOOR); the loss through its log (the margin);
- a CRITICAL cell's event time to CRITICAL_EVENT_RTOL; the detour's
  trajectory fields to CASE_RTOL;
- num_steps is stored for information and never compared;
- CONTINUED: where the frozen engine stopped a cell with status SURFACE and a
  later engine follows it on (issue 36: proportional columns of X are one r = 0
  surface), that cell must end SLID or FINISHED, and only the save times
  before the old stop (finite in the reference) and its statuses are compared.
- NONUNIQUE: where a later engine names a continuation that is not unique (status
  NONUNIQUE, issue 36: weights at 0 that could stay or leave, held) and the frozen
  engine went on by a rule of its own without a word (SLID or FINISHED), only the
  save times before the new `event_time` are compared, and the status is accepted.

Runs on 2 shared CPU cores: --save, --check, --validate 5 to 7 minutes each (about 30
compilations); --against PATH compares a run saved with --out PATH instead of
solving again.
"""

from __future__ import annotations

import inspect
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # pin_grid, also when imported from elsewhere

import pin_grid  # noqa: E402  (float64 on; this checkout first on sys.path)
from pin_grid import FIELDS, TS, fingerprint  # noqa: E402

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import samflow as sf  # noqa: E402
from samflow.switches import switch_times  # noqa: E402

REFERENCE = Path(__file__).resolve().parent / "data" / "engine_reference.npz"

MU = pin_grid.MU
A4 = np.array([0.05, 0.3, 0.6, 2.0])  # alpha/rho of the small batches (the pinned grid's)
SWITCH_FIELDS = ("time", "t", "from_", "to", "count", "first", "ok")

# The depth-3 detour: alpha/rho just above and below where the lead 5 -> 4 -> 5 appears.
# Its switch times here, 5 -> 4 -> 5 at 1765.6076, 1888.6322 (0.0180019) and 2216.7905,
# 2334.2736 (0.0134171), are 2.4e-3 and 3.7e-3 later than the 1765.6052,
# 1888.6298, 2216.7868, 2334.2699: those are the switch times at alpha/rho ~0.01800193
# and ~0.01341713 (measured slopes -7.4e4 and -1.3e5 per unit alpha/rho), i.e. the
# issue's alpha/rho are these values rounded to 6 digits, not an engine difference.
DETOUR_MU = [0.1, 0.3, 0.5, 0.7, 0.9]
DETOUR_A = np.array([0.0134171, 0.0180019, 0.0242, 0.05, 1.0])
DETOUR_RHO = 0.1
DETOUR_TS = np.concatenate([[0.0], np.logspace(-2, 5, 160)])  # 0 first: switch_times restarts from the init

# field -> (kind, rtol, floor): the error is |got - ref| / max(scale, floor) and
# must be <= rtol. NaN positions must be equal; equal values (inf included) are
# 0 error. Kinds:
# - "cell": scale = max |ref| of that cell at that save time (over d; over L
#   and d for W), but at least DECAY_FLOOR x its largest value at the earlier
#   save times (DECAY_FLOOR ** (1/L) for W, `_scale`): a cell decaying to 0
#   (a collapse, a slide, a critical point at 0) is compared to 1e-6 x 1% of
#   the size it had, i.e. to the settings' 1e-8 of it, not to its own
#   vanishing size (issue 26: beta right at an arrival; without the floor
#   l2-t-depth1-critical's held beta ~1e-13 fails at 2e-3 and linf-t-multi's
#   decaying beta at 2.3e-6);
# - "elem": scale = |ref| elementwise; "abs": scale 1; "exact": equal;
# - "log": |log got - log ref| / max(1, |log ref|): the loss, whose relative
#   error is the margin's absolute error (loss 1e-293 is exp(-673): a 1e-6 beta
#   moves it by 7e-4 relative), so the margin is compared to 1e-6 relative.
# The brief asked 1e-9 for event times; today's engine at rtol 1e-11 against
# rtol 1e-8 (--validate) differs by up to 5e-8 (lp3-tau event_t, the real time
# of a tau-clock arrival), 4e-8 (a linf slide at t = 2305) and 3e-7 (a CRITICAL
# capture at t = 261, the end of an asymptotic approach, see
# CRITICAL_EVENT_RTOL), and 2.5e-8 for a switch time at a slow crossing (the
# detour's alpha/rho = 1 cell), so 1e-9 would fail a correct engine: 1e-7.
TOLERANCES = {
    "status": ("exact", 0.0, 0.0),
    "beta": ("cell", 1e-6, 1e-300),
    "W": ("cell", 1e-6, 1e-300),
    "t": ("elem", 1e-6, 1e-300),
    "loss": ("log", 1e-6, 1.0),
    "event_time": ("elem", 1e-7, 1e-5),  # |got - ref| <= 1e-7 |ref| + 1e-12
    "event_t": ("elem", 1e-7, 1e-5),
    "slide_time": ("elem", 1e-7, 1e-5),
    "collapse_direction": ("abs", 1e-6, 1.0),
    # switch_times records ("t" there is a switch time, SWITCH_T)
    "time": ("elem", 1e-7, 1e-5),
    "from_": ("exact", 0.0, 0.0),
    "to": ("exact", 0.0, 0.0),
    "count": ("exact", 0.0, 0.0),
    "first": ("exact", 0.0, 0.0),
    "ok": ("exact", 0.0, 0.0),
}
SWITCH_T = TOLERANCES["time"]
INFO_ONLY = ("num_steps",)
DECAY_FLOOR = 1e-2
# A CRITICAL cell's event time ends an asymptotic approach to the critical
# point (captured when grad L is small enough): a relative error e of the state
# moves it by about e / (the approach rate), 3e-7 between rtol 1e-11 and 1e-8
# (l2-t-multi cell 6, t = 261; the other CRITICAL cells 2e-10).
CRITICAL_EVENT_RTOL = 1e-6
# Per-case tolerances for the trajectory fields of a case whose state at fixed
# time is ill-conditioned: the depth-3 detour runs to t = 1e5 through plateaus
# (5e-7 .. 8e-7 between rtol 1e-11 and 1e-8 away from its switches) and through
# two fast switches, where a 2e-9 relative shift in time moves beta by 3e-6 at
# the next save time (t = 2350, 1566.6, 1044.4). It is there for its switch
# times, compared at the switch tolerance.
CASE_RTOL = {"l2-t-depth3-detour": {"beta": 1e-5, "W": 1e-5, "loss": 1e-5}}


def _fields(tr, names=FIELDS) -> dict[str, np.ndarray]:
    return {f: np.asarray(getattr(tr, f)) for f in names}


def _switches(tr, method, data, rho, **kw):
    """`switch_times` to the last save time: `to_end=True` for the segment
    engine, whose default stops at a horizon; the lane engine always runs to
    the end and has no `to_end`."""
    if "to_end" in inspect.signature(switch_times).parameters:
        kw["to_end"] = True
    return _fields(switch_times(tr, method, data, rho, **kw), SWITCH_FIELDS)


def hidden_cases(**settings) -> dict[str, dict[str, np.ndarray]]:
    """The paths the pinned grid does not reach: name -> {field: array}.

    `settings` are `SolverSettings` fields for every solve (the validation's
    rtol); with "rtol" given, the switch re-solves use it too (else
    `samflow.switches.REFINE_RTOL`, their default)."""
    sw_rtol = None if "rtol" in settings else "default"
    default = sf.SolverSettings(**settings)
    data = sf.single_sample(MU)
    out = {}

    def run(name, method, d, alpha, rho, ts, **kw):
        kw.setdefault("settings", default)
        tr = sf.solve(method, d, alpha=np.asarray(alpha, float), rho=np.broadcast_to(rho, np.shape(alpha)[:1]) * 1.0,
                      ts=ts, alpha_batched=True, **kw)
        out[name] = _fields(tr)
        return tr

    # lp-SAM (scalar alpha per cell: balanced layers, as p > 2 requires); p is traced
    for clock in ("t", "tau"):
        for p in (1.5, 3.0, 4.0):
            run(f"lp{p:g}-{clock}", "lp", data, A4 * 1.0, 1.0, TS[clock], clock=clock, p=p)
    # l2 at depth 1 on symmetric data: grad L = 0 at beta = 0 (CRITICAL; alpha = 0 is there at the start)
    symmetric = sf.Dataset(X=jnp.array([[1.0], [1.0]]), y=jnp.array([1.0, -1.0]))
    run("l2-t-depth1-critical", "l2", symmetric, [0.0, 0.5, 1.0, 2.0], 0.1, TS["t"], depth=1)
    # linf, multi-sample, feature 5 duplicated as 4: sliding on two surfaces at once is SURFACE
    # (tests/test_linf_surface.py, cell 4)
    X = np.array([[0.2, 0.4, 0.6, 0.8, 1.0], [0.1, 0.5, 0.5, 0.9, 1.1], [0.3, 0.3, 0.7, 0.7, 0.9]])
    surface = sf.Dataset.from_arrays(X[:, [0, 1, 2, 4, 4]], [1.0, 1.0, -1.0])
    run("linf-t-surface", "linf", surface, np.logspace(-2, 2, 8) * 0.01, 0.01,
        np.array([1.0, 10.0, 30.0, 100.0, 300.0, 1000.0, 3000.0, 5000.0, 1e4]))
    # ||W(0)|| = 1e-8 sqrt(10) <= capture 1e-6 x rho: COLLAPSED at t = 0 (cell 0)
    run("l2-t-collapse-at-start", "l2", data, [1e-8, 0.005, 0.03, 0.2], 0.1, TS["t"])
    run("l2-t-nonfinite", "l2", data, [np.nan, 0.03, np.inf, 0.2], 0.1, TS["t"])
    run("l2-t-max-steps", "l2", data, A4 * 0.1, 0.1, TS["t"], settings=sf.SolverSettings(**{**settings, "max_steps": 8}))
    for method in ("usam", "gd"):
        run(f"{method}-tau-depth3", method, data, A4 * 0.1, 0.1, TS["tau"], depth=3, clock="tau")
    # one row of a d = 50 chart (configs/large_d.toml's data), default settings
    run("l2-t-d50", "l2", sf.single_sample(np.linspace(0.02, 1.0, 50)), np.logspace(-2, 1, 8) * 0.01, 0.01,
        np.logspace(-2, 4, 13))
    # the depth-3 detour, with its exact switch times
    detour = sf.single_sample(DETOUR_MU)
    tr = run("l2-t-depth3-detour", "l2", detour, DETOUR_A * DETOUR_RHO, DETOUR_RHO, DETOUR_TS, depth=3)
    out["switches-depth3-detour"] = _switches(tr, "l2", detour, np.full(DETOUR_A.size, DETOUR_RHO), settings=default,
                                              rtol=sw_rtol)
    # the default README cell (docs/python-api.md: 2 -> 3 -> 4 -> 5 at 6.18, 12.24, 16.39), one cell
    ts = np.linspace(0.1, 60.0, 600)
    tr = sf.solve("l2", data, alpha=0.0042, rho=0.01, ts=ts, depth=2, settings=default)
    out["l2-t-readme"] = _fields(tr)
    out["switches-readme"] = _switches(tr, "l2", data, 0.01, settings=default, rtol=sw_rtol)
    return out


def cases(**settings) -> dict[str, dict[str, np.ndarray]]:
    """Every frozen run: the pinned grid's `samflow.solve` cases and `hidden_cases`."""
    out = pin_grid.cases(engine_only=True, **settings)
    out.update(hidden_cases(**settings))
    return out


def _scale(b: np.ndarray, field: str) -> np.ndarray:
    """The "cell" scale of TOLERANCES: max |b| per save time over d (L and d
    for W), at least DECAY_FLOOR x its running max over the save times
    (DECAY_FLOOR ** (1/L) for W: where beta = prod_l w_l is at 1% of its past
    size, each of L balanced layers is at 1% ** (1/L) of its own)."""
    axes = (-2, -1) if field == "W" else (-1,)
    floor = DECAY_FLOOR ** (1.0 / b.shape[-2]) if field == "W" else DECAY_FLOOR
    now = np.max(np.where(np.isfinite(b), np.abs(b), 0.0), axis=axes, keepdims=True)
    save_axis = now.ndim - len(axes) - 1
    return np.maximum(now, floor * np.maximum.accumulate(now, axis=save_axis))


#: Cases whose SURFACE cells a later engine follows on (module docstring,
#: "CONTINUED"), with the reason.
CONTINUED = {
    "linf-t-surface": "issue 36: feature 5 duplicated as 4 is one r = 0 surface (samflow._engine.field."
                      "surface_groups), slid on, not two at once",
}


def compare_to_reference(got, ref) -> tuple[list[str], dict[str, tuple[float, float]]]:
    """Compare two case dicts (name -> {field: array}) to the tolerances of
    TOLERANCES (with CRITICAL_EVENT_RTOL, CASE_RTOL and the MAX_STEPS mask of
    the module docstring).

    Returns (problems: one line each, empty when all is within tolerance;
    {field: (max error over all cases, max of error / its tolerance)}). Missing
    cases or fields, shape and NaN-position differences, unequal statuses and
    switch counts are problems. num_steps is not compared.
    """
    problems: list[str] = []
    worst: dict[str, tuple[float, float]] = {}
    # A "<case>-reduced" run (the exact reduction, samflow._engine.reduced) is held to the
    # frozen general engine's run of the same cells, "<case>".
    ref = {**ref, **{k: ref[k[: -len("-reduced")]] for k in got if k.endswith("-reduced") and k[: -len("-reduced")] in ref}}

    def note(key, err, ratio):
        old = worst.get(key, (0.0, 0.0))
        worst[key] = (max(old[0], err), max(old[1], ratio))

    if set(got) != set(ref):
        problems.append(f"cases differ: {sorted(set(got) ^ set(ref))}")
    for name in sorted(set(got) & set(ref)):
        g, r = got[name], ref[name]
        status = np.asarray(r.get("status", -1))
        stalled = (status == int(sf.Status.MAX_STEPS)) | (np.asarray(g.get("status", -1)) == int(sf.Status.MAX_STEPS))
        continued = np.zeros(status.shape, bool)
        g_st = np.asarray(g.get("status", -1))
        named = (g_st == int(sf.Status.NONUNIQUE)) & np.isin(status, [int(sf.Status.SLID), int(sf.Status.FINISHED)])
        after = None
        if named.any() and "t" in g and np.ndim(g["t"]) == named.ndim + 1:
            t_new = np.asarray(g["t"], float)
            after = named[..., None] & ~(t_new < np.asarray(g["event_time"], float)[..., None])
        if name in CONTINUED:  # the SURFACE cells a later engine follows on: SLID or FINISHED now
            g_status = np.asarray(g.get("status", -1))
            continued = (status == int(sf.Status.SURFACE)) & np.isin(g_status, [int(sf.Status.SLID),
                                                                                   int(sf.Status.FINISHED)])
        for field in sorted((set(g) | set(r)) - set(INFO_ONLY)):
            a, b = g.get(field), r.get(field)
            if a is None or b is None or a.shape != b.shape:
                problems.append(f"{name}/{field}: missing or shape {getattr(a, 'shape', None)} vs {getattr(b, 'shape', None)}")
                continue
            switch = name.startswith("switches-")
            key = ("switch " + field) if switch and field in ("t", "time") else field
            kind, rtol, floor = SWITCH_T if key == "switch t" else TOLERANCES[field]
            rtol = CASE_RTOL.get(name, {}).get(field, rtol)
            if continued.any() and a.shape[:continued.ndim] == continued.shape:
                rows = np.broadcast_to(continued.reshape(continued.shape + (1,) * (a.ndim - continued.ndim)), a.shape)
                if kind == "exact":
                    a = np.where(rows, b, a)  # the status SURFACE -> SLID / FINISHED, checked above
                else:
                    drop = rows & (~np.isfinite(b) | (field in ("event_time", "event_t")))
                    a, b = np.where(drop, np.nan, a), np.where(drop, np.nan, b)
            if named.any() and a.shape[:named.ndim] == named.shape:
                if field in ("t", "W", "beta", "loss") and after is not None:  # the saves from event_time on
                    rows = np.broadcast_to(after.reshape(after.shape + (1,) * (a.ndim - after.ndim)), a.shape)
                else:  # the cell's own records (its status, event and hold times): by design
                    rows = np.broadcast_to(named.reshape(named.shape + (1,) * (a.ndim - named.ndim)), a.shape)
                if kind == "exact":
                    a = np.where(rows, b, a)
                else:
                    a, b = np.where(rows, np.nan, a), np.where(rows, np.nan, b)
            if kind == "exact":
                same = np.array_equal(a, b)
                note(key, 0.0 if same else np.inf, 0.0 if same else np.inf)
                if not same:
                    problems.append(f"{name}/{field}: differs: {a.ravel()[:8]} vs {b.ravel()[:8]}")
                continue
            a, b = a.astype(float), b.astype(float)
            if stalled.any():  # MAX_STEPS: the stall is the solver's; compare where both are finite
                rows = np.broadcast_to(stalled.reshape(stalled.shape + (1,) * (a.ndim - stalled.ndim)), a.shape)
                drop = rows & ((~np.isfinite(a) | ~np.isfinite(b)) | (field in ("event_time", "event_t")))
                a, b = np.where(drop, np.nan, a), np.where(drop, np.nan, b)
            if not np.array_equal(np.isnan(a), np.isnan(b)):
                problems.append(f"{name}/{field}: NaN positions differ ({int(np.sum(np.isnan(a) != np.isnan(b)))} entries)")
                note(key, np.inf, np.inf)
                continue
            with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
                if kind == "log":
                    err = np.abs(np.log(a) - np.log(b)) / np.maximum(np.abs(np.log(b)), floor)
                else:
                    scale = _scale(b, field) if kind == "cell" else (np.abs(b) if kind == "elem" else np.ones_like(b))
                    err = np.abs(a - b) / np.maximum(scale, floor)
            err = np.where((a == b) | np.isnan(b), 0.0, err)
            tol = np.full(err.shape, rtol)
            if field in ("event_time", "event_t") and status.shape == err.shape:
                tol = np.where(status == int(sf.Status.CRITICAL), max(rtol, CRITICAL_EVENT_RTOL), tol)
            ratio = err / tol
            note(key, float(np.max(err)) if err.size else 0.0, float(np.max(ratio)) if err.size else 0.0)
            if err.size and not np.max(ratio) <= 1.0:
                idx = np.unravel_index(int(np.argmax(ratio)), err.shape)
                problems.append(f"{name}/{field}: error {err[idx]:.3g} > {tol[idx]:g} at {tuple(int(i) for i in idx)} "
                                f"(got {a[idx]!r}, ref {b[idx]!r})")
    return problems, worst


def table(worst: dict[str, tuple[float, float]]) -> str:
    """The per-field maxima of `compare_to_reference` as a table."""
    lines = [f"{'field':<20}{'max error':>12}{'tolerance':>12}{'max err/tol':>13}"]
    for key in sorted(worst):
        tol = TOLERANCES["time" if key.startswith("switch ") else key][1]
        lines.append(f"{key:<20}{worst[key][0]:>12.3g}{tol:>12g}{worst[key][1]:>13.3g}")
    return "\n".join(lines)


def save(path: Path = REFERENCE) -> None:
    save_cases(cases(), path)


def save_cases(results: dict[str, dict[str, np.ndarray]], path: Path) -> None:
    """Write a case dict as `load` reads it, with this machine's fingerprint."""
    flat = {f"{name}/{field}": arr for name, res in results.items() for field, arr in res.items()}
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, __fingerprint__=np.array(json.dumps(fingerprint(), sort_keys=True)), **flat)


load = pin_grid.load


if __name__ == "__main__":
    start = time.perf_counter()
    if "--save" in sys.argv:
        save()
        print(f"wrote {REFERENCE} ({REFERENCE.stat().st_size} bytes) in {time.perf_counter() - start:.0f} s")
        sys.exit(0)
    validate = "--validate" in sys.argv
    _, ref = load(REFERENCE)
    if "--against" in sys.argv:  # a run saved earlier with --out: compare without solving again
        got = load(Path(sys.argv[sys.argv.index("--against") + 1]))[1]
    else:
        got = cases(rtol=1e-11, max_steps=1 << 16) if validate else cases()
    if "--out" in sys.argv:
        save_cases(got, Path(sys.argv[sys.argv.index("--out") + 1]))
    problems, worst = compare_to_reference(got, ref)
    print(("rtol 1e-11" if validate else "this checkout") + " against the frozen engine (rtol 1e-8), max errors:")
    print(table(worst))
    print("\n".join(problems) if problems else "within tolerance")
    print(f"({time.perf_counter() - start:.0f} s)")
    sys.exit(1 if problems else 0)
