"""Compute the atlas: edges for every (method, data, depth, d, spectrum), theory
marks beside them, and the time of the staircase."""

from __future__ import annotations

import time

import numpy as np
import xarray as xr

from .. import theory
from ..analysis import dominant_index, tied
from ..datasets import increasing_scale, single_sample
from ..edges import EdgeSearch, collapse_edge, major_first_edge
from ..solver import SolverSettings, solve
from ..status import Status
from ..store import code_stamp
from ..switches import locate_switches
from ._config import AtlasConfig, Samples, Spectra, Staircase

__all__ = ["compute_atlas", "l2_first_leader_mark", "spectra"]


def spectra(s: Spectra, d: int) -> list[tuple[str, np.ndarray]]:
    """The (label, mu) spectra of dimension d of the config's `[spectra]` section `s`
    (`AtlasConfig.spectra`), increasing, with mu_d = 1.

    linear: mu_j = j / d; geometric r: mu_j = r^((d - j) / (d - 1)), so mu_1 / mu_d
    = r at every d (the gap mu_(d-1) / mu_d = r^(1/(d-1)) closes as d grows);
    random: sorted uniform(0.1, 1) draws over their largest (seeded per d).

    **Raises:** `TypeError` (one line) for the whole `AtlasConfig` as `s` (0.2's
    argument): pass its `.spectra`.
    """
    if isinstance(s, AtlasConfig):
        raise TypeError("spectra takes the config's [spectra] section since samflow 0.3.0: pass cfg.spectra, not cfg")
    out = []
    if s.linear:
        out.append(("linear", np.arange(1, d + 1) / d))
    for r in s.geometric:
        out.append((f"geometric {r:g}", r ** (np.arange(d - 1, -1, -1, dtype=np.float64) / (d - 1))))
    rng = np.random.default_rng([s.seed, d])
    for k in range(s.random):
        u = np.sort(rng.uniform(0.1, 1.0, d))
        out.append((f"random {k + 1}", u / u[-1]))
    return out


def l2_first_leader_mark(mu: np.ndarray, depth: int, which: str = "last", lo=1e-3, hi=1e2, rtol=1e-12) -> float:
    """The a = alpha / rho where the first leader of symmetric l2-SAM changes to
    (or, `which="first"`, away from) the major feature, from the growth rates of
    `samflow.theory.l2_growth_rate` at w = a 1 (docs/theory.md s.3.2), by NumPy
    bisection: an independent computation of `samflow.edges.major_first_edge`.
    Depth 2 with increasing mu: `theory.l2_alpha_marks(mu, rho=1).major_first`.
    The major feature is argmax mu (as in `samflow.edges`). NaN if no change."""
    d = mu.size
    major = int(np.argmax(mu))
    if depth == 2 and which == "last" and np.all(np.diff(mu) >= 0):
        return float(theory.l2_alpha_marks(mu, rho=1.0).major_first)

    def not_major(a):
        a = np.atleast_1d(a)
        rate = theory.l2_growth_rate(mu, w=a[:, None] * np.ones(d), rho=1.0, depth=depth)
        return np.argmax(rate, axis=-1) != major

    g = np.geomspace(lo, hi, 4000)
    v = not_major(g)
    ch = np.flatnonzero(v[:-1] & ~v[1:]) if which == "last" else np.flatnonzero(~v[:-1] & v[1:])
    if ch.size == 0:
        return float("nan")
    k = ch[-1] if which == "last" else ch[0]
    a0, a1 = g[k], g[k + 1]
    want = bool(v[k])
    while a1 / a0 - 1 > rtol:
        m = np.sqrt(a0 * a1)
        if bool(not_major(m)[0]) == want:
            a0 = m
        else:
            a1 = m
    return float(np.sqrt(a0 * a1))


def _datasets(s: Samples, kind: str, mus: list[np.ndarray]):
    """The data sets of `kind` ("one": one sample; else `s.n` samples, `[samples]`) for each spectrum of `mus`."""
    if kind == "one":
        return [single_sample(m) for m in mus]
    return [increasing_scale(s.n, m.size, s.seed, scales=m, spread=s.spread) for m in mus]


def compute_atlas(cfg: AtlasConfig, log=print) -> xr.Dataset:
    """Every edge of the atlas, as an `xarray.Dataset` (layout in `samflow.atlas`)."""
    t_start = time.perf_counter()
    kinds = (["one"] if cfg.samples.one else []) + ([f"n={cfg.samples.n}"] if cfg.samples.n else [])
    labels = [lab for lab, _ in spectra(cfg.spectra, 2)]
    D = max(cfg.dims)
    entries = cfg.method_entries()
    M, K, Ls, Ds, S = len(entries), len(kinds), cfg.depths, cfg.dims, len(labels)
    shape = (M, K, len(Ls), len(Ds), S)

    def full(v=np.nan, dtype=np.float64):
        return np.full(shape, v, dtype=dtype)

    out = {k: full() for k in ("collapse_edge", "collapse_lo", "collapse_hi", "major_edge", "major_lo", "major_hi",
                               "major_low_edge", "major_low_lo", "major_low_hi", "mark_all_shrink", "mark_major",
                               "mark_major_low")}
    for k in ("collapse_n_solves", "major_n_evals", "major_low_n_evals"):
        out[k] = full(0, np.int64)
    for k in ("collapse_converged", "major_converged", "major_low_converged"):
        out[k] = full(False, bool)
    seconds = np.zeros((M, K, len(Ls)))
    mu_bar = np.full((K, len(Ds), S, D), np.nan)
    settings = SolverSettings(solver=cfg.solver.solver, rtol=cfg.solver.rtol, atol=cfg.solver.atol,
                              max_steps=cfg.solver.max_steps)
    b = cfg.bisection
    collapse_search = EdgeSearch(tuple(b.bracket), b.scan, b.rtol, b.max_rounds)
    # The first leader costs one field evaluation per cell: a finer scan, a
    # wider bracket and a tighter bracket width than the collapse solves.
    major_search = EdgeSearch((min(b.bracket[0], 1e-3), max(b.bracket[1], 1e2)), b.field_scan, min(b.rtol, 1e-10), 200)
    for ki, kind in enumerate(kinds):
        cells, sets = [], []
        for di, d in enumerate(Ds):
            sp = spectra(cfg.spectra, d)
            if kind != "one" and cfg.samples.linear_only:
                sp = [x for x in sp if x[0] == "linear"]
            ds_list = _datasets(cfg.samples, kind, [m for _, m in sp])
            for si, ds in enumerate(ds_list):
                cells.append((di, si))
                sets.append(ds)
                mu_bar[ki, di, si, :d] = np.mean(np.asarray(ds.y)[:, None] * np.asarray(ds.X), axis=0)
        di_idx = np.array([c[0] for c in cells])
        si_idx = np.array([c[1] for c in cells])
        for mi, (label, method, p) in enumerate(entries):
            p_kw = {} if p is None else {"p": p}
            for li, L in enumerate(Ls):
                t0 = time.perf_counter()
                sel = (mi, ki, li, di_idx, si_idx)
                solve_linf = L in b.linf_depths and (kind == "one" or cfg.samples.linf)
                # lp with p > 2 lets weights reach 0, which the engine follows on one sample only.
                solve_lp = method == "lp" and (kind == "one" or p <= 2)
                solve_collapse = L % 2 == 0 and (method == "l2" or solve_lp or (method == "linf" and solve_linf))
                if solve_collapse:
                    ce = collapse_edge(sets, L, method, rho=cfg.samples.rho, search=collapse_search, escape=b.escape,
                                       settings=settings, horizon=b.horizon, **p_kw)
                    out["collapse_edge"][sel], out["collapse_lo"][sel], out["collapse_hi"][sel] = ce.edge, ce.lo, ce.hi
                    out["collapse_n_solves"][sel], out["collapse_converged"][sel] = ce.n_solves, ce.converged
                common = dict(rho=cfg.samples.rho, search=major_search)
                me = major_first_edge(sets, L, method, **common, **p_kw)
                out["major_edge"][sel], out["major_lo"][sel], out["major_hi"][sel] = me.edge, me.lo, me.hi
                out["major_n_evals"][sel], out["major_converged"][sel] = me.n_solves, me.converged
                if L % 2 == 1:
                    lo_e = major_first_edge(sets, L, method, which="first", **common, **p_kw)
                    out["major_low_edge"][sel], out["major_low_lo"][sel], out["major_low_hi"][sel] = lo_e.edge, lo_e.lo, lo_e.hi
                    out["major_low_n_evals"][sel], out["major_low_converged"][sel] = lo_e.n_solves, lo_e.converged
                for (di, si) in cells:
                    mu = mu_bar[ki, di, si, : Ds[di]]
                    if method == "linf":
                        # w_j - rho has one sign for every j from an equal init (s.3.1, s.3.2).
                        out["mark_all_shrink"][mi, ki, li, di, si] = 1.0 if L % 2 == 0 else np.nan
                        out["mark_major"][mi, ki, li, di, si] = 1.0 if L % 2 == 0 else np.nan
                        continue
                    if method == "lp":
                        # The closed forms of docs/theory.md s.3.1 (lp-SAM): depth 2, increasing mu only.
                        if L == 2 and np.all(np.diff(mu) > 0):
                            mk = theory.lp_alpha_marks(mu, p=p)
                            out["mark_all_shrink"][mi, ki, li, di, si] = float(mk.all_shrink)
                            out["mark_major"][mi, ki, li, di, si] = float(mk.major_first)
                        continue
                    if L % 2 == 0:
                        # Every rate mu_j (1 - mu_j / (sqrt L a ||mu||))^(L-1) < 0 below this a (s.3.2).
                        out["mark_all_shrink"][mi, ki, li, di, si] = mu[0] / (np.sqrt(L) * np.linalg.norm(mu))
                    out["mark_major"][mi, ki, li, di, si] = l2_first_leader_mark(mu, L)
                    if L % 2 == 1:
                        out["mark_major_low"][mi, ki, li, di, si] = l2_first_leader_mark(mu, L, "first")
                seconds[mi, ki, li] = time.perf_counter() - t0
                solved = ["major"] + (["collapse"] if solve_collapse else []) \
                    + (["major_low"] if L % 2 == 1 else [])
                notes = [_convergence_note(out, key, sel) for key in solved]
                log(f"{label} {kind} L={L}: {len(sets)} problems in {seconds[mi, ki, li]:.1f} s"
                    + "".join(f"; {n}" for n in notes if n))
    known = {}
    sc = cfg.staircase
    if "l2" in cfg.methods and "one" in kinds and cfg.spectra.linear and sc.d in Ds:
        mi, di = cfg.methods.index("l2"), Ds.index(sc.d)
        at = (mi, 0, slice(None), di, 0)
        for li, L in enumerate(Ls):
            low = "collapse" if L % 2 == 0 else "major_low"
            known[L] = (_inner_end(*(out[f"{low}_{f}"][at][li] for f in ("edge", "lo", "hi")), above=True),
                        _inner_end(*(out[f"major_{f}"][at][li] for f in ("edge", "lo", "hi")), above=False))
    stair = staircase_times(cfg.staircase, settings, known)
    coords = {"method": [e[0] for e in entries], "samples": kinds, "depth": list(Ls), "d": list(Ds),
              "spectrum": labels, "feature": np.arange(1, D + 1)}
    about = {"title": "samflow regime atlas", "config_name": cfg.name, "config": cfg.model_dump_json(),
             "code_stamp": code_stamp(), "bisection_rtol": b.rtol, "rho_multi_sample": cfg.samples.rho}
    return _to_dataset(out, mu_bar, seconds, stair, coords, about, t_start)


_EDGE_NAMES = {"collapse": "collapse edge", "major": "major-first edge", "major_low": "lower first-leader edge"}


def _convergence_note(out: dict, key: str, sel: tuple) -> str:
    """The log's word on the bisections of one edge at one (method, samples, depth):
    how many converged, and that the others are NaN with their brackets in tables.md
    ("" when every edge that the scan found converged and that is the major-first one)."""
    edge = "collapse_edge" if key == "collapse" else f"{key}_edge"
    found = np.isfinite(out[f"{key}_lo"][sel])
    conv = out[f"{key}_converged"][sel]
    n_open = int((found & ~conv).sum())
    if key != "collapse" and n_open == 0:
        return ""
    note = f"{_EDGE_NAMES[key]} converged for {int(conv.sum())} of {found.size}"
    if n_open:
        note += f" ({n_open} not converged: NaN in {edge}, their brackets [lo, hi] in tables.md)"
    return note


def _inner_end(edge: float, lo: float, hi: float, *, above: bool) -> float:
    """An edge of regime 2 for the staircase grid: the edge, or where its bisection did
    not converge (edge NaN, `samflow.edges.EdgeResult`) the end of its bracket on the
    regime-2 side (`above`: the band lies above this edge; its `hi` is the lowest a
    known to be inside it)."""
    if np.isfinite(edge):
        return float(edge)
    return float(hi if above else lo)


def _to_dataset(out: dict, mu_bar, seconds, stair: dict, coords: dict, about: dict, t_start: float) -> xr.Dataset:
    """The atlas arrays as an `xarray.Dataset` with descriptions, the spectral gap and the width of regime 2.

    `coords` the coordinates (method, samples, depth, d, spectrum, feature); `about` the
    attributes that say what made it (title, config_name, config, code_stamp, bisection_rtol,
    rho_multi_sample), followed by the total time since `t_start` and the clock."""
    Ds = coords["d"]
    K, S = len(coords["samples"]), len(coords["spectrum"])
    dims5 = ("method", "samples", "depth", "d", "spectrum")
    attrs_of = {
        "collapse_edge": "regime 1/2 edge, alpha/rho (largest that collapses; NaN: none, e.g. odd depth, or the "
                         "bisection did not converge: the edge is inside [collapse_lo, collapse_hi])",
        "collapse_lo": "collapse-edge bracket, lower end (collapses)",
        "collapse_hi": "collapse-edge bracket, upper end (escapes)",
        "collapse_n_solves": "cells solved for the collapse edge (scan included)",
        "collapse_converged": "collapse bracket reached 2 rtol",
        "major_edge": "regime 2/3 edge, alpha/rho: the first leader is feature d above it (NaN: none, or not "
                      "converged: inside [major_lo, major_hi])",
        "major_lo": "major-first bracket, lower end", "major_hi": "major-first bracket, upper end",
        "major_n_evals": "evaluations of the field at t = 0 for the major-first edge",
        "major_converged": "major-first bracket reached its rtol",
        "major_low_edge": "odd depths: the alpha/rho below which feature d again leads first (bottom of regime 2; "
                          "NaN: none, or not converged: inside [major_low_lo, major_low_hi])",
        "major_low_lo": "lower major-first bracket, lower end", "major_low_hi": "lower major-first bracket, upper end",
        "major_low_n_evals": "evaluations of the field for the lower edge",
        "major_low_converged": "lower bracket reached its rtol",
        "mark_all_shrink": "theory: every coordinate shrinks at the start below this alpha/rho (l2, even depth; linf: 1; "
                           "lp: depth 2, samflow.theory.lp_alpha_marks)",
        "mark_major": "theory: first-leader change to d from samflow.theory.l2_growth_rate (depth 2: l2_alpha_marks; "
                      "linf: 1; lp: depth 2, lp_alpha_marks, NaN at other depths)",
        "mark_major_low": "theory: lower first-leader change at odd depth (l2_growth_rate)",
    }
    ds = xr.Dataset(
        {k: (dims5, v, {"description": attrs_of[k]}) for k, v in out.items()},
        coords=coords,
    )
    ds["mu"] = (("samples", "d", "spectrum", "feature"), mu_bar,
                {"description": "mean_i y_i x_i of each data set (the spectrum mu for one sample), NaN-padded"})
    gap = mu_bar[..., :][:, :, :, :]
    gaps = np.full((K, len(Ds), S), np.nan)
    for di, d in enumerate(Ds):
        gaps[:, di, :] = gap[:, di, :, d - 2] / gap[:, di, :, d - 1]
    ds["gap"] = (("samples", "d", "spectrum"), gaps, {"description": "spectral gap mu_(d-1) / mu_d"})
    # The lower edge: the collapse edge where its scan found one (even depth), else the
    # lower first-leader edge (odd depth); NaN where its bisection did not converge.
    collapse = np.isfinite(ds.collapse_lo.values)
    lower = {f: np.where(collapse, ds[f"collapse_{f}"].values, ds[f"major_low_{f}"].values) for f in ("edge", "lo", "hi")}
    ds["width"] = (dims5, np.log10(ds.major_edge.values / lower["edge"]),
                   {"description": "width of regime 2, log10(major edge / lower edge); lower edge = collapse edge "
                                   "(even depth) or major_low_edge (odd depth); NaN where either edge is NaN"})
    ds["width_lo"] = (dims5, np.log10(ds.major_lo.values / lower["hi"]),
                      {"description": "width of regime 2 from the brackets, smallest: log10(major_lo / lower edge's hi)"})
    ds["width_hi"] = (dims5, np.log10(ds.major_hi.values / lower["lo"]),
                      {"description": "width of regime 2 from the brackets, largest: log10(major_hi / lower edge's lo)"})
    ds["seconds"] = (("method", "samples", "depth"), seconds, {"description": "wall time of each (method, samples, depth)"})
    for k, v in stair.items():
        ds[k] = v
    ds.attrs.update({
        **about,
        "seconds_total": time.perf_counter() - t_start,
        "clock": "one sample: tau at rho = 1 (scale invariant); several samples: real time at rho_multi_sample",
    })
    return ds


def staircase_times(sc: Staircase, settings: SolverSettings, known: dict | None = None) -> dict:
    """Last switch time (tau, rho = 1) of l2-SAM, one sample, linear mu, over a
    grid of alpha / rho inside regime 2 at each depth of the config's `[staircase]`
    section `sc` (`AtlasConfig.staircase`; `known`: {depth: (lower edge, major-first
    edge)} the atlas found, else they are solved here): from just above
    the lower edge (the collapse edge at even depth, where the time grows without
    bound, docs/theory.md s.3.1; a quarter of the lower first-leader edge at odd
    depth) to the major-first edge. The switches are located exactly
    (`samflow.switches.locate_switches`: each cell solved again with a switch
    event), not dated at the save times (which put them up to one save step late)."""
    mu = np.arange(1, sc.d + 1) / sc.d
    ts = np.concatenate([[0.0], np.geomspace(sc.tau_min, sc.tau1, sc.num_times - 1)])
    grid = np.full((len(sc.depths), sc.num_alpha), np.nan)
    last = np.full_like(grid, np.nan)
    n_sw = np.zeros(grid.shape, np.int64)
    final = np.zeros(grid.shape, np.int64)
    collapsed = np.zeros(grid.shape, bool)
    edges = np.full((len(sc.depths), 2), np.nan)
    st_settings = SolverSettings(solver=settings.solver, rtol=settings.rtol, atol=settings.atol,
                                 max_steps=settings.max_steps, blowup_log10=200.0)
    s = np.geomspace(1e-5, 1.0, sc.num_alpha)  # the lower edge is known to ~1e-6
    known = known or {}
    for li, L in enumerate(sc.depths):
        if L in known and np.all(np.isfinite(known[L])):
            low, top = known[L]  # the atlas's own edges for this spectrum
        else:
            t = major_first_edge(mu, L)
            b = collapse_edge(mu, L, settings=settings) if L % 2 == 0 else major_first_edge(mu, L, which="first")
            low, top = _inner_end(b.edge, b.lo, b.hi, above=True), _inner_end(t.edge, t.lo, t.hi, above=False)
        if L % 2 == 0:
            a = low + (top - low) * s
        else:
            a = np.geomspace(low / 4.0, top, sc.num_alpha)
        edges[li] = low, top
        grid[li] = a
        tr = solve("l2", single_sample(mu), a, np.ones_like(a), ts, depth=L, clock="tau", settings=st_settings,
                   alpha_batched=True)
        beta = np.asarray(tr.beta)
        tie = tied(beta, 1e-9)
        dom = np.where(tie, 0, dominant_index(beta))
        collapsed[li] = np.asarray(tr.status) == Status.COLLAPSED
        W0 = np.broadcast_to(a[:, None, None], (a.size, L, sc.d))
        sw = locate_switches("l2", single_sample(mu), W0, np.ones_like(a), ts, clock="tau", settings=st_settings)
        count, ok, times = np.asarray(sw.count), np.asarray(sw.ok), np.asarray(sw.time)
        for i in range(a.size):
            n_sw[li, i] = count[i] if ok[i] else -1
            informative = dom[i][dom[i] > 0]
            final[li, i] = informative[-1] if informative.size else 0
            if ok[i] and count[i] > 0 and not collapsed[li, i]:
                last[li, i] = times[i, count[i] - 1]
    dims = ("stair_depth", "stair_point")
    return {
        "stair_a": (dims, grid, {"description": "alpha / rho of the staircase solves"}),
        "stair_last_switch": (dims, last,
                              {"description": "tau of the last change of the dominant feature (event-located, "
                                              "samflow.switches; NaN: no switch, collapsed or a refused record), "
                                              "l2, one sample, linear mu, rho = 1"}),
        "stair_n_switches": (dims, n_sw, {"description": "number of switches of the leader (-1: record refused)"}),
        "stair_collapsed": (dims, collapsed, {"description": "the cell collapsed"}),
        "stair_final_leader": (dims, final, {"description": "the dominant feature at the last informative save time "
                                                            "(before a blow-up in tau at depth >= 3; 0: none, e.g. collapsed)"}),
        "stair_edges": (("stair_depth", "edge"), edges,
                        {"description": "lower edge (collapse edge at even depth, lower first-leader edge at odd) and "
                                        "major-first edge; where a bisection did not converge, the end of its bracket "
                                        "inside regime 2"}),
        "stair_depth": ("stair_depth", list(sc.depths)),
        "stair_d": ((), sc.d),
    }
