"""One l2-SAM trajectory: the order in which features become dominant, and the collapse time.

    python examples/one_trajectory.py [ALPHA_OVER_RHO]      # default 0.42 (regime 2); try 0.3 (collapse)

Depth 2, one sample {(mu, +1)} with mu = (0.2, 0.4, 0.6, 0.8, 1.0), rho = 0.01, every weight
starting at alpha. Times are real time t (samflow's default clock; `clock="tau"` gives the
paper's rescaled time). docs/theory.md s.3 (regimes), s.5 (what is measured).
"""

import sys

import numpy as np

import samflow as sf
from samflow.analysis import dominant_index, regime_label, switch_times, switching_times, tied, visited_sequence

a = float(sys.argv[1]) if len(sys.argv) > 1 else 0.42
rho = 0.01
data = sf.single_sample([0.2, 0.4, 0.6, 0.8, 1.0])
ts = np.linspace(0.1, 60.0, 600)  # save times, real time t
traj = sf.solve("l2", data, alpha=a * rho, rho=rho, ts=ts, depth=2)

dom = np.where(tied(traj.beta, 1e-9), 0, dominant_index(traj.beta))  # 0 where the lead is a tie
status = sf.Status(int(traj.status))
print(f"alpha/rho = {a:g}: regime {int(regime_label(traj.beta, traj.status))}, status {status.name}")
print("dominant features in order:", " -> ".join(map(str, visited_sequence(dom))))
# The exact switch times, located by an event of the solver (docs/theory.md s.5); the
# save grid dates each switch at the first save time after it (up to 0.1 late here).
exact = switch_times(traj, "l2", data, rho)
grid = switching_times(dom, ts)
if exact.ok and int(exact.count) == len(grid):
    print("switches, exact t (the save grid's date beside it):")
    for k, (t_grid, _, _) in enumerate(grid):
        print(f"  t = {float(exact.t[k]):6.2f}: {int(exact.from_[k])} -> {int(exact.to[k])}   (save grid: {t_grid:.2f})")
else:  # a record the check refused: the save grid's dates only, labelled as such
    print("switches, dated at the first save time after each (not exact):")
    for t, f, to in grid:
        print(f"  t = {t:6.2f}: {f} -> {to}")
if status == sf.Status.COLLAPSED:
    print(f"collapsed to 0 at t = {float(traj.event_time):.4f}")  # event_t: the same in real time
else:
    print(f"no collapse; final loss {float(traj.loss[-1]):.3g}")
