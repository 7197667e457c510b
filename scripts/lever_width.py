"""Prototype of the batch-width lever at d = 50 (issue 14): the same 8x8 depth-2 l2
chart (mu_j = j/50, bench.py's problem) solved with `solve_grid` at several
per-device batch widths (cells sorted by the sweep's cost key alpha/rho), in one
process so that the ratios hold under load. A vmapped loop runs until its slowest
cell is done, and at d = 50 one collapsing cell takes ~11,000 steps against ~1,000.

    python scripts/lever_width.py [--n 8] [--d 50] [--widths 64,16,4]
"""

from __future__ import annotations

import argparse
import os
import time

import jax
import numpy as np

jax.config.update("jax_enable_x64", True)

import samflow as sf  # noqa: E402
from samflow.sweep import solve_grid  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=8)
    p.add_argument("--d", type=int, default=50)
    p.add_argument("--widths", default="64,16,4")
    args = p.parse_args()
    data = sf.single_sample(list(np.arange(1, args.d + 1) / args.d))
    a, r = np.meshgrid(np.geomspace(1e-2, 1e2, args.n), np.geomspace(1e-2, 1e1, args.n), indexing="ij")
    alpha, rho = a.ravel(), r.ravel()
    key = np.argsort(np.lexsort((rho, alpha / rho)))
    W0 = np.broadcast_to(alpha[:, None, None], (alpha.size, 2, args.d)).copy()
    ts = np.geomspace(1e-2, 1e4, 64)
    print(f"d = {args.d}, {alpha.size} cells, {len(jax.devices())} device(s), load {os.getloadavg()[0]:.2f}")
    for w in map(int, args.widths.split(",")):
        solve_grid("l2", data, W0[:w], rho[:w], ts, batch_size=w)  # compile
        t0 = time.perf_counter()
        out = solve_grid("l2", data, W0, rho, ts, batch_size=w, sort_key=key)
        dt = time.perf_counter() - t0
        steps = np.asarray(out.num_steps)[np.argsort(key)]
        lock = sum(steps[i:i + w].max() * len(steps[i:i + w]) for i in range(0, steps.size, w)) / steps.sum()
        print(f"batch {w:4d}: {alpha.size / dt:7.2f} cells/s, lockstep work {lock:.1f}x the steps taken, "
              f"load {os.getloadavg()[0]:.2f}", flush=True)


if __name__ == "__main__":
    main()
