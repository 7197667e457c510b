"""Read a sweep's results file: its dimensions, the regime of each alpha and one trajectory.

    python -m samflow.sweep configs/default.toml          # writes results/default/results.nc
    python examples/read_results.py [results/default/results.nc]

Dims: flow (the method), alpha (alpha/rho when grid.alpha_relative_to_rho), rho, time,
coord (feature 1..d), layer, sample (the data rows). `event_time` is the collapse / blow-up
time in the sweep's clock and `event_real_time` the same in real time t (the field `event_t`
of `samflow.Trajectory`). README "The results file" lists every variable.
"""

import sys

import numpy as np
import xarray as xr

from samflow.analysis import dominant_index, regime_label, visited_sequence

path = sys.argv[1] if len(sys.argv) > 1 else "results/default/results.nc"
with xr.open_dataset(path) as ds:
    print(dict(ds.sizes))
    print("methods:", ds["flow"].values.tolist(), " clock:", ds.attrs["clock"])
    l2 = ds.sel(flow="l2").isel(rho=0)
    reg = regime_label(l2["beta"].values, l2["status"].values)  # (alpha,)
    names = {0: "undetermined (not at the major feature by the horizon)", 1: "1", 2: "2", 3: "3"}
    for r in (1, 2, 3, 0):  # 0: e.g. the climb just above the collapse edge outlasts the horizon
        a = l2["alpha"].values[reg == r]
        if r or a.size:
            count = f"{a.size} alpha{'s' if a.size > 1 else ''}"
            print(f"regime {names[r]}: " + (f"{count}, {a.min():.3g} to {a.max():.3g}" if a.size else "none"))
    i = int(np.flatnonzero(reg == 2)[0]) if np.any(reg == 2) else 0
    cell = l2.isel(alpha=i)
    print(f"alpha = {float(cell['alpha']):.3g}: dominant", visited_sequence(dominant_index(cell["beta"].values)),
          f"status {int(cell['status'])}, event_real_time {float(cell['event_real_time']):.4g}")
