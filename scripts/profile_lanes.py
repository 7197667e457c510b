"""Where a warm lane-engine iteration goes: time and XLA kernels per loop iteration.

Solves the depth-2 l2 chart of `scripts/bench.py` (mu = (0.2, ..., 1.0), alpha in
[1e-2, 1e2] x rho in [1e-2, 1e1], real time to 1e4, 64 log-spaced saves) with
`samflow._engine.lanes.solve_lanes` under `jax.jit` on one CPU device, with the command
lines' exact arithmetic (`samflow._util.x64.exact_cpu_arithmetic`), and prints the warm
time (best of `--repeats`), ns per cell-step and per lane and iteration, and the
lane efficiency. With `--profile` it also traces one warm call with
`jax.profiler` and prints the XLA kernels the program ran, per loop iteration,
grouped by kind (fusions, copies, scatters, reduce-windows, ...), with their time:
the table of docs/benchmarks.md ("Issue 34, second round").

    python scripts/profile_lanes.py                      # 64 x 64 cells, 256 lanes
    python scripts/profile_lanes.py --side 32 --width 64 --profile
"""

from __future__ import annotations

import argparse
import collections
import glob
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from samflow._util.x64 import exact_cpu_arithmetic  # noqa: E402

exact_cpu_arithmetic()

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import samflow as sf  # noqa: E402
from samflow._engine import lanes as _lanes  # noqa: E402
from samflow.flows import Clock  # noqa: E402


def chart(side: int, d: int = 5):
    mu = np.linspace(0.2, 1.0, d)
    data = sf.Dataset(X=jnp.asarray(mu)[None, :], y=jnp.ones(1))
    A, R = np.meshgrid(np.geomspace(1e-2, 1e2, side), np.geomspace(1e-2, 1e1, side), indexing="ij")
    W0 = np.broadcast_to(A.ravel()[:, None, None], (A.size, 2, d)).copy()
    return data, jnp.asarray(W0), jnp.asarray(R.ravel()), jnp.asarray(np.geomspace(1e-2, 1e4, 64))


def kernels(trace_dir: str, iterations: int) -> list[tuple[str, float, float]]:
    """(kind, launches per iteration, ms in all) of the XLA kernels in a trace."""
    from jax.profiler import ProfileData

    f = sorted(glob.glob(f"{trace_dir}/**/*.xplane.pb", recursive=True))[-1]
    time_ns, count = collections.Counter(), collections.Counter()
    for plane in ProfileData.from_file(f).planes:
        for line in plane.lines:
            if not line.name.startswith("tf_XLAEigen"):
                continue
            for ev in line.events:
                name = ev.name
                if name.startswith(("ThunkExecutor", "while", "cond", "end:", "Threadpool", "Slinky")):
                    continue
                kind = re.sub(r"(\.\d+)+$", "", name)
                kind = "fusion" if kind.endswith("fusion") else re.sub(r"_\d+$", "", kind)
                time_ns[kind] += ev.duration_ns
                count[kind] += 1
    return [(k, count[k] / iterations, v / 1e6) for k, v in time_ns.most_common()]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--side", type=int, default=64, help="cells per axis of the chart (default 64)")
    ap.add_argument("--width", type=int, default=256, help="lanes (default 256)")
    ap.add_argument("--method", default="l2")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--profile", action="store_true", help="also count the XLA kernels of one warm call")
    args = ap.parse_args(argv)
    data, W0, rho, ts = chart(args.side)
    settings = sf.SolverSettings()

    @jax.jit
    def go(W0, rho):
        traj, iters, _ = _lanes.solve_lanes(W0, rho, data, ts, method=args.method, clock=Clock.T,
                                            settings=settings, width=args.width)
        return traj.num_steps, iters

    t0 = time.perf_counter()
    jax.block_until_ready(go(W0, rho))
    first = time.perf_counter() - t0
    best = np.inf
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        steps, iters = jax.block_until_ready(go(W0, rho))
        best = min(best, time.perf_counter() - t0)
    steps, iters = int(np.sum(steps)), int(iters)
    print(f"{args.method}, {W0.shape[0]} cells, {args.width} lanes: first call {first:.1f} s, warm {best:.3f} s; "
          f"{best / steps * 1e9:.0f} ns per cell-step, {best / iters / args.width * 1e9:.0f} ns per lane and "
          f"iteration; {iters} iterations, lane efficiency {steps / iters / args.width:.3f}")
    if args.profile:
        with tempfile.TemporaryDirectory() as tmp:
            jax.profiler.start_trace(tmp)
            jax.block_until_ready(go(W0, rho))
            jax.profiler.stop_trace()
            rows = kernels(tmp, iters)
        print(f"XLA kernels per loop iteration: {sum(r[1] for r in rows):.0f}")
        for kind, per_iter, ms in rows[:15]:
            print(f"  {kind:28s} {per_iter:8.1f} per iteration  {ms:8.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
