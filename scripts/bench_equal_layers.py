"""What the equal-layer reduction (`SolverSettings(reduce="all")`, docs/theory.md s.3.5) pays
and costs, against the general state (`reduce="off"`) in the same run.

    python scripts/bench_equal_layers.py           # the charts below
    python scripts/bench_equal_layers.py --quick   # two small charts

For each chart (one sample, mu_j = j / d, alpha log-spaced in [1e-2, 1e2] x rho in
[1e-2, 1e1], real time to 1e4, 64 log-spaced save times, `samflow.solve` on all cells in
one call) it prints the first call (compilation and solve) and the best of three warm calls
of each setting (interleaved), the warm cells/s and their ratio, and the largest difference of beta between the
two relative to max_j |beta_j| (statuses compared). Ends with one line

    EQUAL_LAYERS <chart>_speedup=... <chart>_compile_ratio=... ...

(speedup: warm cells/s of "all" over "off"; compile ratio: first call of "all" over "off").
Timings are of one run on whatever else the machine is doing: compare the ratios.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from samflow._util.x64 import exact_cpu_arithmetic  # noqa: E402

exact_cpu_arithmetic()

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

import samflow as sf  # noqa: E402

CHARTS = {  # name: (method, depth, d, alphas x rhos, p)
    "gd_L2_d5": ("gd", 2, 5, 64, None),
    "l2_L3_d5": ("l2", 3, 5, 64, None),
    "l2_L4_d5": ("l2", 4, 5, 64, None),
    "usam_L2_d5": ("usam", 2, 5, 32, None),
    "lp3_L3_d5": ("lp", 3, 5, 32, 3.0),
    "gd_L2_d50": ("gd", 2, 50, 16, None),
}
QUICK = ("l2_L3_d5", "gd_L2_d50")
WARM_RUNS = 3


def chart(method, depth, d, n, p):
    data = sf.single_sample(list(np.arange(1, d + 1) / d))
    A, R = np.meshgrid(np.geomspace(1e-2, 1e2, n), np.geomspace(1e-2, 1e1, n), indexing="ij")
    ts = np.geomspace(1e-2, 1e4, 64)
    def call(reduce):
        tr = sf.solve(method, data, A.ravel(), R.ravel(), ts, depth=depth, p=p, alpha_batched=True,
                      settings=sf.SolverSettings(reduce=reduce))
        jax.block_until_ready(tr.beta)
        return tr

    first, warm, out = {}, {"all": [], "off": []}, {}
    for reduce in ("all", "off"):
        t0 = time.perf_counter()
        out[reduce] = call(reduce)
        first[reduce] = time.perf_counter() - t0
    for _ in range(WARM_RUNS):  # interleaved, so that a change of load hits both
        for reduce in ("all", "off"):
            t0 = time.perf_counter()
            call(reduce)
            warm[reduce].append(time.perf_counter() - t0)
    for reduce in ("all", "off"):
        w = min(warm[reduce])
        print(f"    reduce={reduce!r:6} first call {first[reduce]:6.1f} s, warm {w:6.2f} s (best of {WARM_RUNS}) = "
              f"{n * n / w:9.0f} cells/s, {int(np.sum(out[reduce].num_steps))} steps", flush=True)
    a, b = out["all"], out["off"]
    fa, fb, wa, wb = first["all"], first["off"], min(warm["all"]), min(warm["off"])
    scale = np.nanmax(np.abs(np.asarray(b.beta)), axis=-1, keepdims=True)
    with np.errstate(invalid="ignore"):
        diff = float(np.nanmax(np.abs(np.asarray(a.beta) - np.asarray(b.beta)) / np.where(scale > 0, scale, 1.0)))
    same = bool(np.array_equal(np.asarray(a.status), np.asarray(b.status)))
    print(f"    one row {wb / wa:.2f}x the general state per cell; first call {fa / fb:.2f}x as long; "
          f"max |beta diff| / max|beta| {diff:.1e}; statuses {'equal' if same else 'DIFFERENT'}", flush=True)
    return wb / wa, fa / fb


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="two small charts")
    args = ap.parse_args()
    print(f"equal-layer reduction, {time.strftime('%Y-%m-%d %H:%M:%S %Z')}; jax {jax.__version__}; "
          f"load avg {' '.join(f'{x:.2f}' for x in __import__('os').getloadavg())}")
    fields = []
    for name in (QUICK if args.quick else CHARTS):
        method, depth, d, n, p = CHARTS[name]
        print(f"  {name}: {method} L={depth} d={d} {n}x{n} cells", flush=True)
        speed, compile_ratio = chart(method, depth, d, n, p)
        fields += [f"{name}_speedup={speed:.3g}", f"{name}_compile_ratio={compile_ratio:.3g}"]
    print("EQUAL_LAYERS " + " ".join(fields))


if __name__ == "__main__":
    main()
