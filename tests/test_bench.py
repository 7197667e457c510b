"""The benchmark script runs end to end (tiny grids) and ends with a parseable BENCH line."""

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH_KEYS = ["cells_per_s", "speedup_vs_scipy", "speedup_vs_numpy_rk4", "grid256_s",
              "peak_mem_mb", "floor_ratio", "d50_cells_per_s", "d200_cells_per_s", "l3_vs_scipy",
              "l4_vs_scipy", "n4_vs_scipy", "warm_sweep_s", "figures_s", "first_compile_s",
              "d50_log_cells_per_s", "d200_log_cells_per_s", "cold_sweep_s", "first_python_solve_s",
              "warm_python_solve_s", "lane_efficiency", "d50_general_cells_per_s", "d200_general_cells_per_s",
              "numba_cells_per_s", "speedup_vs_numba", "lane_step_ns", "suite_s"]
# Not measured in tiny mode (the other charts; the figure script runs only under --full;
# the suite only under --suite); lane_efficiency and lane_step_ns are measured in every mode.
TINY_NAN = {"d50_cells_per_s", "d200_cells_per_s", "l3_vs_scipy", "l4_vs_scipy", "n4_vs_scipy", "figures_s",
            "d50_log_cells_per_s", "d200_log_cells_per_s", "d50_general_cells_per_s", "d200_general_cells_per_s",
            "suite_s"}
# Baseline C (the numba loop): measured where numba is installed (the "bench" extra), nan otherwise.
NUMBA_KEYS = {"numba_cells_per_s", "speedup_vs_numba"}
HAVE_NUMBA = importlib.util.find_spec("numba") is not None
# The targets of issue 34, one line each above the BENCH line: key, target.
TARGETS = {"speedup_vs_numba": ">= 1x", "grid256_s": "<= 1.1 s", "speedup_vs_scipy": ">= 700x",
           "d50_cells_per_s": ">= 5000 cells/s", "d200_cells_per_s": ">= 2000 cells/s",
           "first_python_solve_s": "<= 4 s", "warm_python_solve_s": "<= 2 s", "cold_sweep_s": "<= 15 s", "warm_sweep_s": "<= 4 s",
           "figures_s": "<= 90 s", "suite_s": "<= 600 s"}
NUMBER = r"([0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?|nan)"


def test_bench_compiles_its_charts_itself_and_its_children_keep_the_stored_programs(tmp_path):
    """The bench process turns samflow's stored programs off (a second run loaded the
    first run's charts from the user's cache folder: its `first_compile_s` was 0.60 s
    instead of 8 s), and its child processes (the sweeps, the first Python solve) get
    them back, in the fresh folder each is given."""
    probe = "import os; print(os.environ.get('SAMFLOW_STORED_PROGRAMS'))"
    code = ("import sys, pathlib; sys.path.insert(0, 'scripts'); import bench; "
            "from samflow._util.cache import programs_dir; "
            f"_, out = bench._process([sys.executable, '-c', {probe!r}], pathlib.Path({str(tmp_path)!r}), bench.ROOT); "
            "print('BENCH_PROCESS', programs_dir() is None, out.strip())")
    env = {k: v for k, v in __import__("os").environ.items() if k != "SAMFLOW_STORED_PROGRAMS"}
    env["SAMFLOW_COMPILATION_CACHE"] = str(tmp_path / "user")  # a user's folder: the stored programs on by default
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("BENCH_PROCESS"))
    assert line.split()[1:] == ["True", "None"]


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
    measured = {k for k in BENCH_KEYS if k not in TINY_NAN and (HAVE_NUMBA or k not in NUMBA_KEYS)}
    assert all(0 < values[k] < float("inf") for k in measured), last
    assert all(v != v for k, v in values.items() if k not in measured), last  # nan: not measured here
    assert 0 < values["lane_efficiency"] <= 1, last  # cell-steps / lane-steps
    assert 1 < values["lane_step_ns"] < 1e8, last  # wall ns per step of the chart: neither 0 nor absurd
    if HAVE_NUMBA:  # the loop's compile time is printed apart from its timings
        assert re.search(r"compiled in [0-9.]+ s", proc.stdout), proc.stdout[-3000:]
    else:
        assert "numba is not installed" in proc.stdout
    # Each target line: the BENCH value, the target, and the verdict that follows from the two.
    lines = proc.stdout.splitlines()
    raw = dict(zip(BENCH_KEYS, m.groups()))
    for key, target in TARGETS.items():
        (line,) = [ln for ln in lines if ln.split()[:1] == [key]]
        cells = [c.strip() for c in line.split("|")]
        assert cells[0].split()[1].removesuffix("x") == raw[key], line  # "6.5x": a speed-up
        op, goal = target.split()[0], float(target.split()[1].rstrip("x"))
        assert cells[1] == target, line
        value = values[key]
        if value != value:
            assert cells[2] == "not measured", line
        else:
            met = value >= goal if op == ">=" else value <= goal
            assert cells[2] == ("met" if met else "MISSED"), line
    # The machine, the extrapolation note and the baselines' accuracy are in the text.
    assert "cpu:" in proc.stdout and "jax " in proc.stdout
    assert "EXTRAPOLATED" in proc.stdout
    # The first-solve line says whether the earlier process left a warm cache for it.
    assert "files in the compile cache" in proc.stdout or "left the compile cache empty" in proc.stdout
