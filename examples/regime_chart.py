"""The l2-SAM regime of each init over an (alpha/rho, rho) grid, printed as a table.

    python examples/regime_chart.py [--png PATH]

1 = collapse to 0, 2 = minor first, major last, 3 = major first (docs/theory.md s.3, s.5);
0 = undetermined (e.g. still climbing at the horizon). Depth 2, one sample, real time t.
The same chart for a whole config: `python -m samflow.sweep configs/regime_chart.toml`.
"""

import argparse

import numpy as np

import samflow as sf
from samflow.analysis import regime_label

parser = argparse.ArgumentParser()
parser.add_argument("--png", help="also draw the chart to this PNG")
args = parser.parse_args()

data = sf.single_sample([0.2, 0.4, 0.6, 0.8, 1.0])
ratios = np.geomspace(0.1, 3.0, 12)  # alpha / rho
rhos = np.array([0.01, 0.1])
ts = np.geomspace(1e-2, 1e3, 64)  # real time t
A, R = np.meshgrid(ratios, rhos, indexing="ij")  # (alpha, rho)
# One init per cell: a leading axis of length (number of cells), alpha_batched=True.
traj = sf.solve("l2", data, alpha=(A * R).ravel(), rho=R.ravel(), ts=ts, depth=2, alpha_batched=True)
reg = regime_label(traj.beta, traj.status).reshape(A.shape)

print("alpha/rho " + " ".join(f"rho={r:<5g}" for r in rhos))
for i, a in enumerate(ratios):
    print(f"{a:9.3f} " + " ".join(f"{reg[i, j]:^9d}" for j in range(len(rhos))))
if args.png:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4, 3.5))
    from samflow.plots import regime_cmap

    cmap, norm, _ = regime_cmap()  # the sweep's discrete colours: one colour per regime
    mesh = ax.pcolormesh(np.arange(len(rhos) + 1), np.arange(len(ratios) + 1), reg, cmap=cmap, norm=norm)
    ax.set_xticks(np.arange(len(rhos)) + 0.5, [f"{r:g}" for r in rhos])
    ax.set_yticks(np.arange(len(ratios)) + 0.5, [f"{a:.2f}" for a in ratios])
    ax.set(xlabel=r"$\rho$", ylabel=r"$\alpha/\rho$")
    bar = fig.colorbar(mesh, ax=ax, ticks=[0, 1, 2, 3], label="regime")
    bar.ax.set_ylim(-0.5, 3.5)  # 0 undetermined, 1, 2, 3 (the "no value" band of the map is not used here)
    fig.savefig(args.png, dpi=100, bbox_inches="tight")
    print("figure:", args.png)
