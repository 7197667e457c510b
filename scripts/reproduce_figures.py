"""Regenerate every figure of the paper's kind and check each claim against the theory.

    python scripts/reproduce_figures.py [--out figures/] [--quick] [--only NAMES] [--jobs N]

Writes into --out: one PNG and PDF per figure with a caption file (NAME.caption.md),
index.md (every figure, embedded) and report.md (each claim: prediction,
measurement, pass/fail). Prints the report and the time per figure. Exit code 0
when every check passes, 1 when one fails, 2 for bad arguments.

Figures (names for --only): depth1_directions, linf_limit, regime_chart, staircase,
trajectories, usam_ablation, discrete_gap, banded, generic_models, lp_family, lp_family_multi. Their parameters: configs/figures/*.toml
(each with a [quick] table for --quick, the small version the tests run).
The logic lives in the samflow/figures/ package.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv: "list[str] | None" = None) -> int:
    parser = argparse.ArgumentParser(prog="python scripts/reproduce_figures.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="figures", help="output folder (default: figures/)")
    parser.add_argument("--quick", action="store_true", help="small grids (about a minute; used by the tests)")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="build only these figures (names or comma lists)")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                        help="worker processes (default: min(2, CPUs); 1 runs in this process)")
    parser.add_argument("--config-dir", default=str(ROOT / "configs" / "figures"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    from samflow import figures
    from samflow._util.cli_common import backend_problem
    from samflow._util.io import DiskFullError
    from samflow._util.x64 import prepare_process

    prepare_process()  # float64 for the flows, Agg for the figures
    if (problem := backend_problem()) is not None:
        print(f"error: {problem}", file=sys.stderr)
        return 2

    only = [n for item in (args.only or []) for n in item.split(",") if n] or None
    if only:
        unknown = [n for n in only if n not in figures.FIGURES]
        if unknown:
            print(f"error: unknown figure(s) {', '.join(unknown)}; known: {', '.join(figures.FIGURES)}", file=sys.stderr)
            return 2
    if args.jobs < 1:
        print(f"error: --jobs must be >= 1, got {args.jobs}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    try:
        results = figures.run_all(args.out, quick=args.quick, only=only, jobs=args.jobs, config_dir=args.config_dir,
                                  progress=lambda m: print(m, flush=True))
    except DiskFullError as err:  # the file being written is removed; the figures written before are whole
        print(f"error: {err}; free space, then rerun", file=sys.stderr)
        return 2
    wall = time.perf_counter() - t0
    print()
    print(figures.report_table(results))
    print()
    n_pass, n_fail, n_note = figures._summary(results)
    print(f"{n_pass} checks pass, {n_fail} fail, {n_note} not checked")
    print()
    print("time per figure (wall s / CPU s" + (f", {args.jobs} processes in parallel" if args.jobs > 1 else "") + "):")
    for r in sorted(results, key=lambda r: -r.cpu_seconds):
        print(f"  {r.name:<18} {r.seconds:7.1f} {r.cpu_seconds:7.1f}")
    print(f"total wall time {wall:.1f} s")
    out = Path(args.out)
    print(f"figures: {out / 'index.md'}   report: {out / 'report.md'}")
    return 1 if n_fail else 0


if __name__ == "__main__":
    sys.exit(main())
