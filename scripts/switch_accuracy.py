"""Switch times against scipy, with their bounds (issue 35; docs/theory.md s.5).

    PYTHONPATH=. python scripts/switch_accuracy.py            # 10 random cells per depth + the test cells
    PYTHONPATH=. python scripts/switch_accuracy.py --cells 3  # fewer random cells

For l2-SAM on one sample, d = 5: random cells (mu ~ U(0.1, 1) sorted, rho ~
U(0.05, 1), every weight ~ U(0.12, 0.6) rho; cells that collapse or never switch
are skipped) at depth 2 in the clock tau to 150 and at depth 3 in real time t to
1e5, plus the cells of tests/test_switch_bounds.py (shallow crossings). Each
switch time is compared with scipy's DOP853 at rtol 1e-13 on the NumPy field of
tests/switch_reference.py (its own error: the distance to rtol 1e-12, column
"ref"), for

- pass: the sweep's pass (`solve_grid(..., switches=K)`, default rtol 1e-8) and its
  local bound (`time_err` of the record);
- pass+refine: the same record after `refine_switches` (the sweep's post-processing);
- locate: `locate_switches(..., refine_to=None)` (rtol 1e-10, local bound);
- locate+refine: `locate_switches` at its defaults (refined to 1e-9).

Columns: relative error |time - t_ref| / t_ref and relative bound time_err / t_ref;
"x" marks a bound below the error (beyond the reference's own). The last lines give
the range of each column over all switches.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import switch_reference as ref  # noqa: E402


def random_cells(L, clock, T, n, seed):
    rng = np.random.default_rng(seed)
    out = []
    while len(out) < n:
        mu = np.sort(rng.uniform(0.1, 1.0, 5))
        rho = float(rng.uniform(0.05, 1.0))
        W0 = rng.uniform(0.2, 1.0, (L, 5)) * rho * 0.6
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                sw = ref.switches(W0, rho, mu, clock, T)
        except AssertionError:  # scipy stops at a collapse
            continue
        if sw:
            out.append((mu, rho, W0))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", type=int, default=10, help="random cells per depth (default 10)")
    args = ap.parse_args(argv)

    import jax

    jax.config.update("jax_enable_x64", True)
    import samflow as sf
    from samflow.switches import locate_switches, refine_switches
    from samflow.sweep import solve_grid

    sys.path.insert(0, str(ROOT / "tests"))
    import test_switch_bounds as tb

    cols = ["pass", "pass+refine", "locate", "locate+refine"]
    print(f"{'L':>1} {'cell':>4} {'t_ref':>11} {'rate':>8} {'ref':>7} "
          + " ".join(f"{c + ' err':>17} {'bound':>7}" for c in cols))
    worst = {(L, c): ([], []) for L in (2, 3) for c in cols}
    misses = {(L, c): 0 for L in (2, 3) for c in cols}
    t_start = time.perf_counter()
    for L in (2, 3):
        clock, T, test_cells = tb.CASES[L]
        cells = [(f"t{i}", np.asarray(m, float), r, np.asarray(w, float)) for i, (m, r, w) in enumerate(test_cells)]
        cells += [(f"r{i}", m, r, w) for i, (m, r, w) in enumerate(random_cells(L, clock, T, args.cells, 350 + L))]
        ts = tb._save_times(clock, T)
        for name, mu, rho, W0 in cells:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fine = ref.switches(W0, rho, mu, clock, T, rtol=1e-13)
                coarse = ref.switches(W0, rho, mu, clock, T, rtol=1e-12)
            t_ref = np.array([s[0] for s in fine])
            ref_err = np.abs(t_ref - np.array([s[0] for s in coarse]))
            data = sf.single_sample(mu)
            W, R = W0[None], np.array([rho])
            _, sw_pass = solve_grid("l2", data, W, R, ts, clock=clock, switches=12)
            recs = {
                "pass": sw_pass,
                "pass+refine": refine_switches("l2", data, W, R, ts, sw_pass, clock=clock),
                "locate": locate_switches("l2", data, W, R, ts, clock=clock, refine_to=None),
                "locate+refine": locate_switches("l2", data, W, R, ts, clock=clock),
            }
            n = t_ref.size
            for k in range(n):
                row = f"{L:>1} {name:>4} {t_ref[k]:11.6g} {fine[k][3]:8.1e} {ref_err[k] / t_ref[k]:7.0e} "
                for c in cols:
                    sw = recs[c]
                    if not bool(sw.ok[0]) or int(sw.count[0]) != n:
                        row += f"{'(record differs)':>17} {'':>7} "
                        continue
                    e = abs(sw.time[0, k] - t_ref[k])
                    b = sw.time_err[0, k]
                    miss = e > b + ref_err[k]
                    misses[L, c] += miss
                    worst[L, c][0].append(e / t_ref[k])
                    worst[L, c][1].append(b / t_ref[k])
                    row += f"{e / t_ref[k]:16.1e}{'x' if miss else ' '} {b / t_ref[k]:7.1e} "
                print(row, flush=True)
    print()
    for (L, c), (e, b) in worst.items():
        e, b = np.array(e), np.array(b)
        print(f"depth {L} {c:>14}: {e.size} switches, relative error {e.min():.1e} .. {e.max():.1e}, "
              f"relative bound {b.min():.1e} .. {b.max():.1e}, bound below the error: {misses[L, c]}")
    print(f"({time.perf_counter() - t_start:.0f} s)")


if __name__ == "__main__":
    main()
