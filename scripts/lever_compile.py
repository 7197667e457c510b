"""Prototype of the compile-time levers (issue 14): XLA CPU flags that shorten the
cold compilation of the sweep's solver, each in a fresh process (XLA reads its
flags once), against the default flags in the same run. For each: cold compile
(first call minus a warm call), warm run of the chart, and whether the results
equal the default flags' bit for bit.

    python scripts/lever_compile.py [--n 32]

Measures only (no persistent cache: each process compiles from scratch).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = {
    "default": "",
    "llvm_no_expensive": "--xla_llvm_disable_expensive_passes=true",
    "backend_opt_1": "--xla_backend_optimization_level=1",
    "backend_opt_0": "--xla_backend_optimization_level=0",
}
CHILD = """
import hashlib, os, sys, time
import numpy as np, jax
jax.config.update("jax_enable_x64", True)
import samflow as sf
from samflow.sweep import solve_grid
n = int(sys.argv[1])
a, r = np.meshgrid(np.geomspace(1e-2, 1e2, n), np.geomspace(1e-2, 1e1, n), indexing="ij")
W0 = np.broadcast_to(a.reshape(-1)[:, None, None], (n * n, 2, 5)).copy()
data, ts = sf.single_sample([0.2, 0.4, 0.6, 0.8, 1.0]), np.geomspace(1e-2, 1e4, 64)
t0 = time.perf_counter(); out = solve_grid("l2", data, W0, r.reshape(-1), ts, batch_size=128); first = time.perf_counter() - t0
t0 = time.perf_counter(); out = solve_grid("l2", data, W0, r.reshape(-1), ts, batch_size=128); run = time.perf_counter() - t0
h = hashlib.sha256(np.ascontiguousarray(out.beta).tobytes() + np.ascontiguousarray(out.event_time).tobytes()).hexdigest()[:12]
print(f"{first - run:.2f} {run:.3f} {h} {os.getloadavg()[0]:.2f}")
"""


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=32)
    p.add_argument("--variants", default=",".join(VARIANTS))
    args = p.parse_args()
    base = None
    for name in args.variants.split(","):
        env = dict(os.environ, XLA_FLAGS=VARIANTS[name], JAX_NUM_CPU_DEVICES="1", PYTHONPATH=str(ROOT),
                   JAX_COMPILATION_CACHE_DIR="")
        env.pop("JAX_COMPILATION_CACHE_DIR")
        r = subprocess.run([sys.executable, "-c", CHILD, str(args.n)], env=env, capture_output=True, text=True)
        if r.returncode:
            print(name, "failed:", r.stderr.strip().splitlines()[-1:])
            continue
        compile_s, run_s, h, load = r.stdout.split()
        base = base or h
        print(f"{name:18s} cold compile {float(compile_s):6.2f} s  run {float(run_s):7.3f} s  "
              f"bits {'equal' if h == base else 'DIFFER'} ({h})  load {load}", flush=True)


if __name__ == "__main__":
    main()
