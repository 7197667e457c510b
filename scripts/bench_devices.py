"""Speed-up of a sweep sharded over CPU devices (one per core) against one device.

    python scripts/bench_devices.py              # 64x64 l2 chart, 1 vs 2 devices
    python scripts/bench_devices.py --n 32 --devices 4 --batch-sizes 64,128

The chart is scripts/bench.py's: depth-2 l2-SAM, one sample mu = (0.2, ..., 1.0),
alpha log-spaced in [1e-2, 1e2], rho in [1e-2, 1e1], real time to 1e4, 64
log-spaced save times; cells cost-sorted by alpha / rho as `run_sweep` does.
The process gets `--devices` CPU devices (`samflow.sweep.use_cpu_cores`);
each configuration is compiled first, then timed warm `--repeats` times,
interleaved (the machine's load drifts), and the best time is kept. CPU time
is printed next to the wall time: CPU ~ devices x wall means the devices ran
in parallel. The results of every device count are checked equal bit for bit.
Ends with one line: `DEVICES speedup=<x> devices=<n> ...`.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import resource
import time

import numpy as np


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=64, help="grid n x n (default 64)")
    p.add_argument("--devices", type=int, default=2, help="CPU devices to compare with 1 (default 2)")
    p.add_argument("--batch-sizes", default="128", help="cells per device per vmapped solve, comma-separated")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)

    from samflow.sweep import use_cpu_cores

    use_cpu_cores(args.devices)  # before JAX starts
    import jax

    jax.config.update("jax_enable_x64", True)  # the flows compute in float64
    import samflow as sf
    from samflow.sweep import solve_grid

    n_dev = len(jax.local_devices())
    data = sf.single_sample([0.2, 0.4, 0.6, 0.8, 1.0])
    ts = np.geomspace(1e-2, 1e4, 64)
    a, r = np.geomspace(1e-2, 1e2, args.n), np.geomspace(1e-2, 1e1, args.n)
    A, R = (x.ravel() for x in np.meshgrid(a, r, indexing="ij"))
    W0 = np.broadcast_to(A[:, None, None], (A.size, 2, 5)).copy()
    print(f"l2 chart {args.n}x{args.n} ({A.size} cells), {n_dev} CPU device(s), "
          f"{len(os.sched_getaffinity(0))} core(s), load average {os.getloadavg()[0]:.1f}", flush=True)

    runs = {}
    for bs in (int(x) for x in args.batch_sizes.split(",")):
        for nd in sorted({1, n_dev}):
            runs[(bs, nd)] = lambda bs=bs, nd=nd: solve_grid(
                "l2", data, W0, R, ts, batch_size=bs, devices=nd, sort_key=A / R)
    outs, best = {}, {k: (np.inf, np.inf) for k in runs}
    for key, fn in runs.items():
        t0 = time.perf_counter()
        outs[key] = fn()
        print(f"  batch {key[0]:5d}, {key[1]} device(s): compile + first run {time.perf_counter() - t0:6.1f} s",
              flush=True)
    for _ in range(args.repeats):
        for key, fn in runs.items():
            ru0 = resource.getrusage(resource.RUSAGE_SELF)
            t0 = time.perf_counter()
            fn()
            wall = time.perf_counter() - t0
            ru1 = resource.getrusage(resource.RUSAGE_SELF)
            cpu = ru1.ru_utime - ru0.ru_utime + ru1.ru_stime - ru0.ru_stime
            if wall < best[key][0]:
                best[key] = (wall, cpu)
    speedups = []
    for (bs, nd), (wall, cpu) in best.items():
        line = f"  batch {bs:5d}, {nd} device(s): {wall:6.2f} s wall, {cpu:6.2f} s CPU, {A.size / wall:7.0f} cells/s"
        if nd > 1:
            s = best[(bs, 1)][0] / wall
            speedups.append(s)
            line += f", speed-up {s:.2f}x"
        print(line, flush=True)
        ref = outs[(bs, 1)]
        assert all(np.array_equal(getattr(ref, f.name), getattr(outs[(bs, nd)], f.name), equal_nan=True)
                   for f in dataclasses.fields(ref)), "results differ between device counts"
    print(f"DEVICES speedup={max(speedups, default=1.0):.2f} devices={n_dev} cells={A.size} "
          f"load={os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
