"""The benchmark script runs end to end (tiny grids) and ends with a parseable BENCH line."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH_KEYS = ["cells_per_s", "speedup_vs_scipy", "speedup_vs_numpy_rk4", "grid256_s",
              "peak_mem_mb", "floor_ratio", "d50_cells_per_s", "d200_cells_per_s", "l3_vs_scipy",
              "l4_vs_scipy", "n4_vs_scipy", "warm_sweep_s", "figures_s", "first_compile_s",
              "d50_log_cells_per_s", "d200_log_cells_per_s"]
# Not measured in tiny mode (the other charts; the figure script runs only under --full).
TINY_NAN = {"d50_cells_per_s", "d200_cells_per_s", "l3_vs_scipy", "l4_vs_scipy", "n4_vs_scipy", "figures_s",
            "d50_log_cells_per_s", "d200_log_cells_per_s"}
NUMBER = r"([0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?|nan)"


@pytest.mark.slow
def test_bench_tiny_prints_a_bench_line_with_positive_numbers():
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "bench.py"), "--tiny"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    last = proc.stdout.strip().splitlines()[-1]
    pattern = "^BENCH " + " ".join(f"{k}={NUMBER}" for k in BENCH_KEYS) + "$"
    m = re.match(pattern, last)
    assert m, f"last line is not a BENCH line in the expected form: {last!r}"
    values = dict(zip(BENCH_KEYS, (float(v) for v in m.groups())))
    assert all(v > 0 and v < float("inf") for k, v in values.items() if k not in TINY_NAN), last
    assert all(v != v for k, v in values.items() if k in TINY_NAN), last  # nan: not measured in tiny mode
    # The machine, the extrapolation note and the baselines' accuracy are in the text.
    assert "cpu:" in proc.stdout and "jax " in proc.stdout
    assert "EXTRAPOLATED" in proc.stdout
