"""Prototype of the per-step-overhead lever (issue 14): the depth-2 l2 chart (d = 5,
bench.py's problem) with samflow's engine (`solve_grid`: segments between events,
every event function, the carried cell state) against a lean diffrax loop (W only,
one collapse event, one segment, `SaveAt(ts)`), cells sorted by alpha/rho, at
several batch widths, in one process (ratios hold under load).

    python scripts/lever_lean.py [--n 64] [--widths 128,512,4096]

Prints cells/s, steps/cell, and the lean loop's max relative difference of beta
from samflow's (before collapse). Measures only.
"""

from __future__ import annotations

import argparse
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

import samflow as sf  # noqa: E402
from samflow.sweep import solve_grid  # noqa: E402

from lever_stiff import SOLVERS, chart_solver  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=64)
    p.add_argument("--widths", default="128,512,4096")
    args = p.parse_args()
    data = sf.single_sample([0.2, 0.4, 0.6, 0.8, 1.0])
    a, r = np.meshgrid(np.geomspace(1e-2, 1e2, args.n), np.geomspace(1e-2, 1e1, args.n), indexing="ij")
    alpha, rho = a.ravel(), r.ravel()
    order = np.lexsort((rho, alpha / rho))  # the sweep's cost key
    alpha, rho = alpha[order], rho[order]
    W0 = np.broadcast_to(alpha[:, None, None], (alpha.size, 2, 5)).copy()
    ts = np.geomspace(1e-2, 1e4, 64)
    B = alpha.size
    print(f"{B} cells, {len(jax.devices())} device(s), load {os.getloadavg()[0]:.2f}", flush=True)
    solve_grid("l2", data, W0[:128], rho[:128], ts, batch_size=128)
    t0 = time.perf_counter()
    ref = solve_grid("l2", data, W0, rho, ts, batch_size=128)
    dt = time.perf_counter() - t0
    print(f"samflow solve_grid, batch 128: {B / dt:8.1f} cells/s, steps mean {np.mean(ref.num_steps):.0f}, "
          f"load {os.getloadavg()[0]:.2f}", flush=True)
    fn = chart_solver(SOLVERS["tsit5"], data, jnp.asarray(ts), 1e-8)
    for w in map(int, args.widths.split(",")):
        w = min(w, B)
        fn(jnp.asarray(W0[:w]), jnp.asarray(rho[:w]))[0].block_until_ready()  # compile
        t0 = time.perf_counter()
        outs = [fn(jnp.asarray(W0[i:i + w]), jnp.asarray(rho[i:i + w])) for i in range(0, B - w + 1, w)]
        beta = np.concatenate([np.asarray(o[0]) for o in outs])
        steps = np.concatenate([np.asarray(o[1]) for o in outs])
        dt = time.perf_counter() - t0
        n = beta.shape[0]
        rb = np.asarray(ref.beta)[:n]
        nr = np.linalg.norm(rb, axis=-1)
        ok = (nr > 1e-3) & np.isfinite(beta).all(-1)
        e = np.linalg.norm(beta - rb, axis=-1)[ok] / nr[ok]
        print(f"lean loop, batch {w:5d}: {n / dt:8.1f} cells/s, steps mean {steps.mean():.0f}, max rel diff "
              f"vs samflow {e.max():.1e}, load {os.getloadavg()[0]:.2f}", flush=True)


if __name__ == "__main__":
    main()
