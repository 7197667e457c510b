"""Cost of the exact switch times (samflow.switches) against the main solve, on an
A x R grid of l2-SAM (default config's problem: d = 5, real time to 1e4, 64 log
save times). Prints wall times of the main solve and of the re-solve, up to
each cell's `switch_horizon` (as the sweep) and to the end (compile excluded:
each is run twice, the second timed).

    python scripts/bench_switches.py [A] [R]
"""

import sys
import time

import numpy as np

from samflow._x64 import prepare_process

prepare_process()

import samflow as sf  # noqa: E402
from samflow.sweep import solve_grid  # noqa: E402
from samflow.switches import locate_switches, switch_horizon  # noqa: E402

A = int(sys.argv[1]) if len(sys.argv) > 1 else 64
R = int(sys.argv[2]) if len(sys.argv) > 2 else 64
method = sys.argv[3] if len(sys.argv) > 3 else "l2"
data = sf.single_sample([0.2, 0.4, 0.6, 0.8, 1.0])
a = np.geomspace(1e-2, 1e2, A)
r = np.geomspace(1e-2, 1e1, R)
alpha = (a[:, None] * r[None, :]).reshape(-1)
rho = np.broadcast_to(r[None, :], (A, R)).reshape(-1).copy()
W0 = np.broadcast_to(alpha[:, None, None], (A * R, 2, 5)).copy()
ts = np.geomspace(1e-2, 1e4, 64)


def timed(fn):
    fn()  # compile
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


t_main, traj = timed(lambda: solve_grid(method, data, W0, rho, ts, batch_size=128, summary=True))
# As the sweep does: each cell re-solved up to its horizon on the save grid.
t_stop = switch_horizon(np.asarray(traj.dominant), np.asarray(traj.tied), ts)
t_sw, sw = timed(lambda: locate_switches(method, data, W0, rho, ts, chunk=128, t_stop=t_stop))
t_end, _ = timed(lambda: locate_switches(method, data, W0, rho, ts, chunk=128))
print(f"{method} {A}x{R} cells: main solve {t_main:.1f} s; switch times (rtol 1e-10) {t_sw:.1f} s "
      f"= {t_sw / t_main:.2f} x; without the horizon (to t = 1e4) {t_end:.1f} s = {t_end / t_main:.2f} x")
print(f"switches found: {int(np.sum(sw.count))}, refused cells: {int(np.sum(~sw.ok))}, "
      f"max per cell {int(np.max(sw.count))}")
