"""Prototype of the stiffness lever (issue 14): the d = 50 depth-2 l2 chart integrated
by a lean diffrax loop (one solve per cell, W only, the collapse event, no
segments) with the explicit Tsit5 (samflow's solver) and with implicit solvers
(Kvaerno3/5: ESDIRK, Jacobian by autodiff inside diffrax's Newton/chord
iteration), same tolerances and cells, in one process so that the ratios hold
under load. (samflow's own engine carries a clock variable beside W, which
lineax's LU cannot take as is: an implicit solver there needs the state
flattened; see docs/benchmarks.md.)

    python scripts/lever_stiff.py [--n 4] [--d 50] [--solvers tsit5,kvaerno5]

Prints per solver: compile s, warm run s, cells/s, steps/cell mean and max, and
the max relative difference of beta at the save times (before collapse) from the
first solver's run. Measures only.
"""

from __future__ import annotations

import argparse
import os
import time

import diffrax
import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

import samflow as sf  # noqa: E402

SOLVERS = {"tsit5": diffrax.Tsit5, "kvaerno3": diffrax.Kvaerno3, "kvaerno5": diffrax.Kvaerno5,
           "dopri8": diffrax.Dopri8}


def chart_solver(solver, data, ts, rtol):
    loss = sf.Logistic()

    def cell(W0, rho):
        term = diffrax.ODETerm(lambda t, W, args: sf.real_time_velocity(W, rho, sf.Method.L2, data, loss))
        event = diffrax.Event(lambda t, y, args, **kw: jnp.sqrt(jnp.sum(y**2)) - 1e-6 * rho)
        ctrl = diffrax.PIDController(rtol=rtol, atol=1e-12 * jnp.max(jnp.abs(W0)))
        sol = diffrax.diffeqsolve(term, solver(), 0.0, ts[-1], None, W0, saveat=diffrax.SaveAt(ts=ts),
                                  stepsize_controller=ctrl, event=event, max_steps=200_000, throw=False)
        return jnp.prod(sol.ys, axis=1), sol.stats["num_steps"]

    return jax.jit(jax.vmap(cell))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=4, help="n x n (alpha, rho) grid")
    p.add_argument("--d", type=int, default=50)
    p.add_argument("--solvers", default="tsit5,kvaerno5")
    p.add_argument("--rtol", type=float, default=1e-8)
    args = p.parse_args()
    data = sf.single_sample(list(np.arange(1, args.d + 1) / args.d))
    a, r = np.meshgrid(np.geomspace(1e-2, 1e2, args.n), np.geomspace(1e-2, 1e1, args.n), indexing="ij")
    alpha, rho = a.ravel(), r.ravel()
    W0 = jnp.asarray(np.broadcast_to(alpha[:, None, None], (alpha.size, 2, args.d)).copy())
    ts = jnp.asarray(np.geomspace(1e-2, 1e4, 64))
    print(f"d = {args.d}, {alpha.size} cells, rtol {args.rtol:g}, load avg {os.getloadavg()[0]:.2f}", flush=True)
    ref = None
    for name in args.solvers.split(","):
        fn = chart_solver(SOLVERS[name], data, ts, args.rtol)
        t0 = time.perf_counter()
        jax.block_until_ready(fn(W0, jnp.asarray(rho)))
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        beta, steps = jax.block_until_ready(fn(W0, jnp.asarray(rho)))
        run = time.perf_counter() - t0
        beta, steps = np.asarray(beta), np.asarray(steps)
        diff = float("nan")
        if ref is None:
            ref = beta
        else:
            nr = np.linalg.norm(ref, axis=-1)
            ok = np.isfinite(ref).all(-1) & np.isfinite(beta).all(-1) & (nr > 0)
            e = np.linalg.norm(beta - ref, axis=-1)[ok] / nr[ok]
            diff = float(e.max()) if e.size else float("nan")
        print(f"{name:9s} compile {first - run:6.2f} s  run {run:7.3f} s = {alpha.size / run:8.1f} cells/s  "
              f"steps mean {steps.mean():7.0f} max {steps.max():6d}  max rel diff vs first {diff:.1e}  "
              f"load {os.getloadavg()[0]:.2f}", flush=True)


if __name__ == "__main__":
    main()
