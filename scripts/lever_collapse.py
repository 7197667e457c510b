"""The collapse lever at large d (issue 14): the depth-2 l2 chart at d = 5, 50 and
200 (mu_j = j/d, bench.py's `other_charts` problem: alpha in [1e-2, 1e2] x rho in
[1e-2, 1e1], log-spaced, real time to t = 1e4, 64 log-spaced saves) solved by
`solve_grid` under several solver settings, one after the other in one process,
so that the ratios against the default hold under load.

    python scripts/lever_collapse.py [--d 5,50,200] [--n 8,8,8]
        [--configs default,log,b16,log_b16] [--log-rtol 1e-9] [--ref-cells 5]

Configurations: `default` (SolverSettings(), batch width 128 as in bench.py);
`log` (SolverSettings(coords="log", rtol=--log-rtol)); `b16` (batch_size=16);
`log_b16` (both). Each row prints: the first call (compiles), the warm run s,
cells/s, its ratio to the first configuration of the same d, steps per cell
(mean and max, collapsing cells and the others apart), the lockstep work and the
time per executed cell-step. Then, per configuration: the accuracy against
bench.py's own `reference` (scipy DOP853 rtol 1e-13; `cell_errors`: max over
saves before min(collapse times) of ||beta - ref|| / ||ref||) on a few cells
picked from the run with the most collapses (the slowest, fastest and median
collapsing cell, then the slowest other one and evenly spread ones), and the max
difference from the first configuration on every cell: beta, and the collapse
time (relative). The references are cached in --ref-cache (about a minute at
d = 200). Measures only; the load average (`os.getloadavg`) on every row.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402  (float64 on; Problem, grid_cells, reference, cell_errors, zero_from, TS)

import samflow as sf  # noqa: E402
from samflow.sweep import solve_grid, use_cpu_cores  # noqa: E402

CONFIGS = {  # name -> (SolverSettings overrides, batch width)
    "default": ({}, 128),
    "log": ({"coords": "log"}, 128),
    "b16": ({}, 16),
    "log_b16": ({"coords": "log"}, 16),
}


def load() -> str:
    return f"{os.getloadavg()[0]:.1f}"


def run(prob, alpha, rho, settings, width):
    """Compile (first call on one batch), then the warm whole grid: (compile s, run s, out)."""
    data = prob.dataset()
    W0 = np.broadcast_to(alpha[:, None, None], (alpha.size, prob.depth, prob.d)).copy()
    w = min(width, alpha.size)
    t0 = time.perf_counter()
    solve_grid(prob.method, data, W0[:w], rho[:w], bench.TS, clock="t", settings=settings, batch_size=width)
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    out = solve_grid(prob.method, data, W0, rho, bench.TS, clock="t", settings=settings, batch_size=width)
    run_s = time.perf_counter() - t0
    return first, run_s, out


def steps_line(out, width, run_s=None, devices=1):
    steps = np.asarray(out.num_steps)
    coll = np.asarray(out.status) == int(sf.Status.COLLAPSED)
    w = min(width, steps.size)
    pad = (-steps.size) % w
    chunks = np.concatenate([steps, np.repeat(steps[-1:], pad)]).reshape(-1, w)
    executed = np.sum(np.max(chunks, axis=1)) * w  # cell-steps a lockstep batch runs
    lock = executed / steps.sum()
    # A call hands `w` cells to each device (padding the last call), so a grid of
    # one or two batches keeps fewer devices busy.
    busy = min(devices, -(-steps.size // w))
    cost = f" | {run_s * busy / executed * 1e6:.1f} us per executed cell-step per busy core ({busy})" if run_s else ""
    part = lambda m: f"{steps[m].mean():.0f}/{steps[m].max()}" if m.any() else "-/-"  # noqa: E731
    bad = int(np.sum(np.isin(np.asarray(out.status), [int(sf.Status.MAX_STEPS), int(sf.Status.FAILED)])))
    return (f"steps mean {steps.mean():.0f} max {steps.max()} | collapsing ({coll.sum()}) mean/max {part(coll)}"
            f" | others mean/max {part(~coll)} | lockstep {lock:.1f}x{cost} | max_steps/failed {bad}"), steps


def pick_cells(out, k):
    """The reference cells: slowest, fastest and median collapsing cell, then the
    slowest others and evenly spread ones, up to k."""
    steps = np.asarray(out.num_steps)
    coll = np.flatnonzero(np.asarray(out.status) == int(sf.Status.COLLAPSED))
    chosen = []
    if coll.size:
        order = coll[np.argsort(steps[coll])]
        chosen += [order[-1], order[0], order[order.size // 2]]
    rest = np.setdiff1d(np.arange(steps.size), coll)
    if rest.size:
        chosen += [rest[np.argmax(steps[rest])]] + list(rest[np.linspace(0, rest.size - 1, k).astype(int)])
    return np.array(list(dict.fromkeys(int(i) for i in chosen))[:k])


def references(prob, alpha, rho, idx, cache: Path):
    """bench.reference on the cells idx, cached on disk by (d, alpha, rho)."""
    b_ref, T_ref = [], []
    store = dict(np.load(cache)) if cache.exists() else {}
    for i in idx:
        key = f"d{prob.d}_a{alpha[i]:.17g}_r{rho[i]:.17g}"
        if key + "_b" not in store:
            t0 = time.perf_counter()
            b, T = bench.reference(prob, alpha[i:i + 1], rho[i:i + 1])
            store[key + "_b"], store[key + "_T"] = b[0], T[0]
            np.savez(cache, **store)
            print(f"    reference d={prob.d} alpha {alpha[i]:.3g} rho {rho[i]:.3g}: "
                  f"{time.perf_counter() - t0:.1f} s (load {load()})", flush=True)
        b_ref.append(store[key + "_b"])
        T_ref.append(store[key + "_T"])
    return np.array(b_ref), np.array(T_ref)


def diff_from(out, base):
    """Max over all cells of the relative beta difference from `base` before the earlier collapse."""
    idx = np.arange(np.asarray(out.status).size)
    T, Tb = bench.zero_from(out, idx), bench.zero_from(base, idx)
    return float(np.max(bench.cell_errors(np.asarray(out.beta), T, np.asarray(base.beta), Tb)))


def time_change_probe(d: int, alpha, rho, rtol: float) -> None:
    """Step counts of a lean diffrax loop (Tsit5, log coordinates, the collapse
    event only, no saves) in real time t against the same flow in the collapse
    clock s of docs/theory.md s.4, ds = dt (1 + rho / ||mu * q||) (so ds = dt far
    from the collapse and ds ~ dt rho / ||mu * q|| near it), with t carried as a
    state and the solve stopped at t = T1 by a second event. Prints steps per
    cell for the collapsing cells. A probe of what the time change would save;
    it does not save at the requested t (that needs the interpolation of t(s))."""
    import diffrax
    import jax
    import jax.numpy as jnp

    from samflow.flows import log_velocity

    mu = jnp.asarray(np.arange(1, d + 1) / d)
    data = sf.single_sample(list(np.arange(1, d + 1) / d))
    loss = sf.Logistic()
    T1 = float(bench.TS[-1])

    def one(a, r, change):
        x0 = jnp.full((2, d), jnp.log(a))
        sign = jnp.ones((2, d))

        def field(s, y, args):
            x, t = y
            dx, _ = log_velocity(x, sign, r, sf.Method.L2, data, loss, False)
            if not change:
                return dx, jnp.ones(())
            X = jnp.sum(x, axis=0)
            log_n = 0.5 * jax.nn.logsumexp(2.0 * (jnp.log(mu)[None, :] + X[None, :] - x))
            kappa = jax.nn.sigmoid(log_n - jnp.log(r))  # dt/ds = 1 / (1 + rho / ||mu q||)
            return kappa * dx, kappa

        def cond(s, y, args, **kw):
            coll = 0.5 * jax.nn.logsumexp(2.0 * y[0]) - jnp.log(1e-6 * r)
            return jnp.minimum(coll, (T1 - y[1]) / T1) if change else coll

        ctrl = diffrax.PIDController(rtol=rtol, atol=rtol)
        sol = diffrax.diffeqsolve(
            diffrax.ODETerm(field), diffrax.Tsit5(), 0.0, 1e12 if change else T1, None, (x0, jnp.zeros(())),
            stepsize_controller=ctrl, event=diffrax.Event(cond), max_steps=100_000, throw=False,
            saveat=diffrax.SaveAt(t1=True))
        coll = 0.5 * jax.nn.logsumexp(2.0 * sol.ys[0][-1]) <= jnp.log(1e-6 * r) + 1e-6
        return sol.stats["num_steps"], coll, sol.ys[1][-1]

    for change in (False, True):
        fn = jax.jit(jax.vmap(lambda a, r: one(a, r, change)))
        steps, coll, t_end = map(np.asarray, fn(jnp.asarray(alpha), jnp.asarray(rho)))
        clock = "s (time change)" if change else "t"
        part = f"{steps[coll].mean():.0f}/{steps[coll].max()}" if coll.any() else "-/-"
        print(f"  probe d={d:<4} clock {clock:16s} collapsing ({coll.sum()}) steps mean/max {part}; "
              f"others mean/max {steps[~coll].mean():.0f}/{steps[~coll].max()}; "
              f"collapse t of the first collapsing cell {t_end[coll][:1]}", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--d", default="5,50,200")
    p.add_argument("--n", default="8,8,8", help="grid side per d")
    p.add_argument("--configs", default="default,log,b16,log_b16")
    p.add_argument("--log-rtol", default="1e-9", help="rtol(s) of the log rows, comma-separated")
    p.add_argument("--ref-cells", type=int, default=5)
    p.add_argument("--ref-cache", default="/tmp/lever_collapse_ref.npz")
    p.add_argument("--probe", action="store_true",
                   help="only the time-change probe (lean loop, step counts) on each d's chart")
    args = p.parse_args()
    use_cpu_cores()
    import jax

    print(f"{len(jax.devices())} device(s); load {load()}; reference cells per d: {args.ref_cells}", flush=True)
    if args.probe:
        for d, n in zip(map(int, args.d.split(",")), map(int, args.n.split(","))):
            alpha, rho = bench.grid_cells(n, n)
            time_change_probe(d, alpha, rho, float(args.log_rtol.split(",")[0]))
        return
    summary = []
    for d, n in zip(map(int, args.d.split(",")), map(int, args.n.split(","))):
        prob = bench.Problem("l2", 2, tuple(np.arange(1, d + 1) / d))
        alpha, rho = bench.grid_cells(n, n)
        print(f"\n== d = {d}: {n}x{n} chart ==", flush=True)
        runs = []  # (label, width, run s, out)
        for name in args.configs.split(","):
            over, width = CONFIGS[name]
            rtols = [float(r) for r in args.log_rtol.split(",")] if "coords" in over else [1e-8]
            for rtol in rtols:
                settings = dataclasses.replace(sf.SolverSettings(), rtol=rtol, **over)
                first_s, run_s, out = run(prob, alpha, rho, settings, width)
                runs.append((f"{name}(rtol {rtol:g})", width, run_s, out))
                print(f"  {runs[-1][0]:22s} 1st call {first_s:6.1f} s (compiles) | run {run_s:7.2f} s = "
                      f"{alpha.size / run_s:8.1f} cells/s ({runs[0][2] / run_s:5.2f}x {runs[0][0]}) | load {load()}",
                      flush=True)
                print(f"      {steps_line(out, width, run_s, len(jax.devices()))[0]}", flush=True)
        # Reference cells: from the run with the most collapsed cells (at d = 200 the
        # default's collapsing cells stop at max_steps instead).
        pick = max(runs, key=lambda r: int(np.sum(np.asarray(r[3].status) == int(sf.Status.COLLAPSED))))
        idx = pick_cells(pick[3], args.ref_cells)
        base = runs[0][3]
        # Plus, per configuration, the cell where it differs most from the first one.
        every = np.arange(alpha.size)
        for _, _, _, out in runs[1:]:
            e = bench.cell_errors(np.asarray(out.beta), bench.zero_from(out, every), np.asarray(base.beta),
                                  bench.zero_from(base, every))
            idx = np.array(list(dict.fromkeys(list(idx) + [int(np.argmax(np.where(np.isfinite(e), e, -1.0)))])))
        b_ref, T_ref = references(prob, alpha, rho, idx, Path(args.ref_cache))
        T0 = bench.zero_from(base, np.arange(alpha.size))
        rows = []
        for label, width, run_s, out in runs:
            T = bench.zero_from(out, idx)
            err = bench.cell_errors(np.asarray(out.beta)[idx], T, b_ref, T_ref)
            Ta = bench.zero_from(out, np.arange(alpha.size))
            both = np.isfinite(Ta) & np.isfinite(T0)
            t_diff = float(np.max(np.abs(Ta[both] - T0[both]) / T0[both])) if both.any() else float("nan")
            print(f"  {label:22s} max rel err vs reference on {len(idx)} cells {np.max(err):.1e} (per cell "
                  f"{' '.join(f'{e:.0e}' for e in err)}); vs {runs[0][0]}, all cells: beta {diff_from(out, base):.1e},"
                  f" collapse time {t_diff:.1e} ({int(both.sum())} cells)", flush=True)
            rows.append((label, alpha.size / run_s, runs[0][2] / run_s, np.asarray(out.num_steps), np.max(err)))
        summary.append((d, n, rows))
    print("\n== summary: cells/s (x default) | steps mean/max | max rel err ==", flush=True)
    for d, n, rows in summary:
        for label, rate, ratio, steps, err in rows:
            print(f"  d={d:<4} {n}x{n} {label:22s} {rate:8.1f} ({ratio:5.2f}x) | {steps.mean():6.0f}/{steps.max():6d}"
                  f" | {err:.1e}", flush=True)
    print(f"load at end {load()}", flush=True)


if __name__ == "__main__":
    main()
