"""GD against l2-SAM and linf-SAM from the same init: which feature leads, and where each ends.

    python examples/gd_vs_sam.py [ALPHA_OVER_RHO]      # default 0.42

GD is led by the major feature from the start; l2-SAM goes minor first, major last (at this
alpha/rho); linf-SAM slides every coordinate to 0 when alpha < rho (docs/theory.md s.2-4).
"""

import sys

import numpy as np

import samflow as sf
from samflow.analysis import dominant_index, limit_direction, tied, visited_sequence

a = float(sys.argv[1]) if len(sys.argv) > 1 else 0.42
rho = 0.01
data = sf.single_sample([0.2, 0.4, 0.6, 0.8, 1.0])
ts = np.linspace(0.1, 60.0, 300)  # real time t
for method in ("gd", "l2", "linf"):
    traj = sf.solve(method, data, alpha=a * rho, rho=rho, ts=ts, depth=2)
    dom = np.where(tied(traj.beta, 1e-9), 0, dominant_index(traj.beta))
    order = " -> ".join(map(str, visited_sequence(dom))) or "none (beta = 0)"
    beta_end = np.asarray(traj.beta[-1])
    # beta = 0 (an l2 collapse, a linf slide to 0) has no direction: say so rather than print zeros
    direction = np.round(limit_direction(traj.beta), 3) if np.any(beta_end != 0) else "undefined (beta = 0)"
    print(f"{method:5s} {sf.Status(int(traj.status)).name:9s} dominant {order:16s} "
          f"loss {float(traj.loss[-1]):.3g}  beta/||beta|| at t = {ts[-1]:g}: {direction}")
