"""Lever: the second run of `python -m samflow.sweep configs/default.toml` (issue 14's
warm_sweep_s, target <= 5 s with the compile cache warm), measured whole process.

Three variants, one after the other in this run, each with its own fresh compile
cache, each run once cold (fills the cache) and then `--repeats` times warm:

- before: the package as it was at `--base` (default: the merge base with main),
  extracted with `git archive` into a temporary folder;
- this tree with `SAMFLOW_STORED_PROGRAMS=off` (JAX's cache only: the solvers are
  traced again in every process);
- this tree (stored programs: a warm run loads the compiled solvers, no tracing).

For each it prints the wall of the whole process (best of the warm runs), the
solve ("done in"), the same run with `--no-figures` (so figures = the difference),
the ratio to "before", and checks that every variable of the results files is
equal bit for bit across the variants. Never a timed unit test; run it on a quiet
machine (the load average is printed before and after).

    python scripts/lever_warm.py [--repeats 2] [--base COMMIT] [--config configs/default.toml]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _run(pythonpath: Path, cache: Path, out: Path, config: Path, *, programs: str, figures: bool) -> tuple[float, float]:
    """One whole process: (wall s, the 'done in' solve s)."""
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_NUM_CPU_DEVICES")}
    env.update(PYTHONPATH=str(pythonpath), SAMFLOW_COMPILATION_CACHE=str(cache), SAMFLOW_STORED_PROGRAMS=programs)
    cmd = [sys.executable, "-m", "samflow.sweep", str(config), "--out", str(out), "--overwrite", "--quiet"]
    if not figures:
        cmd.append("--no-figures")
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=pythonpath, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"error: {' '.join(cmd)} exited {proc.returncode}: {proc.stderr.strip()[-2000:]}")
    m = re.search(r"done in ([0-9.]+) s", proc.stdout)
    return wall, float(m.group(1)) if m else float("nan")


def _same_results(paths: list[Path]) -> str:
    """'equal' when every variable of the results files has the same bits, else the differing names."""
    import numpy as np
    import xarray as xr

    sets = [xr.load_dataset(p) for p in paths]
    bad = set()
    for ds in sets[1:]:
        if sorted(ds.variables) != sorted(sets[0].variables):
            return "different variables"
        for name in sets[0].variables:
            a, b = np.ascontiguousarray(sets[0][name].values), np.ascontiguousarray(ds[name].values)
            if a.shape != b.shape or a.dtype != b.dtype or not np.array_equal(a.view(np.uint8), b.view(np.uint8)):
                bad.add(name)
    return "equal" if not bad else "differ: " + ", ".join(sorted(bad))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2, help="warm runs per variant (best is reported)")
    parser.add_argument("--base", default=None, help="commit of the 'before' variant (default: merge base with main)")
    parser.add_argument("--config", default=str(ROOT / "configs" / "default.toml"))
    args = parser.parse_args()
    config = Path(args.config).resolve()
    base = args.base or subprocess.run(["git", "merge-base", "HEAD", "main"], cwd=ROOT, capture_output=True,
                                       text=True).stdout.strip() or "HEAD"
    print(f"lever_warm: {config.name}, base {base[:12]}, {args.repeats} warm run(s) per variant; "
          f"load average at start {_load()}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "base").mkdir()
        archive = subprocess.run(["git", "archive", base, "samflow"], cwd=ROOT, capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(tmp / "base")], input=archive.stdout, check=True)
        variants = [("before (base commit)", tmp / "base", "off"), ("stored programs off", ROOT, "off"),
                    ("this tree", ROOT, "on")]
        rows, results = [], []
        for i, (name, path, programs) in enumerate(variants):
            cache, out = tmp / f"cache{i}", tmp / f"out{i}"
            cold, _ = _run(path, cache, out, config, programs=programs, figures=True)
            warm = [_run(path, cache, out, config, programs=programs, figures=True) for _ in range(args.repeats)]
            bare = [_run(path, cache, out, config, programs=programs, figures=False) for _ in range(args.repeats)]
            w, s = min(warm)
            b = min(x for x, _ in bare)
            rows.append((name, cold, w, s, b, w - b))
            results.append(out / "results.nc")
            print(f"  {name:22s} cold {cold:6.1f} s | warm {w:6.1f} s (solve 'done in' {s:5.1f} s) | "
                  f"warm --no-figures {b:6.1f} s, so figures {w - b:5.1f} s | load {_load()}", flush=True)
        ref = rows[0]
        print("ratios to 'before' (warm, whole process):")
        for name, cold, w, s, b, f in rows[1:]:
            print(f"  {name:22s} whole {ref[2] / w:5.2f}x  solve {ref[3] / s:5.2f}x  figures {ref[5] / f:5.2f}x  "
                  f"cold {cold / ref[1]:5.2f}x the time")
        print(f"results files of the three variants: {_same_results(results)} (bit for bit)")
    print(f"load average at end {_load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
