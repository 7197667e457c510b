"""The command line `python -m samflow.sweep` (`main`: arguments, refusals, exit codes)."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np

from .. import store
from ..config import ConfigError, SweepConfig, load_config
from ..status import FAILED_STATUSES
from ..store import write_results
from ._checkpoint import _finished_mismatch, config_key, partial_mismatch
from ._run import build_data, memory_preflight, run_sweep
from ._slices import SLICES_DIR, check_slice_args, slice_file_name


def _default_out(cfg: SweepConfig, config_path: Path) -> Path:
    return Path(cfg.output.dir) / (cfg.name or config_path.stem)


def main(argv: "list[str] | None" = None) -> int:
    """Command-line entry point; returns the exit code (0 ok, 2 bad input).

    `--resume` is always safe to pass (e.g. in job scripts): it continues an
    interrupted run of the same config and code stamp, succeeds without
    touching anything when the results are already complete, and refuses (exit
    2, one line naming both stamps) partial or finished results made under
    another code stamp (`samflow.store.code_stamp`), unless
    `--resume-any-version`. With `--resume --overwrite`, matching results are
    kept or continued and stale ones (another config or stamp) are replaced.
    Results that cannot fit in memory are refused before any folder is made.
    """
    parser = argparse.ArgumentParser(
        prog="python -m samflow.sweep",
        description="Sweep SAM flows over an (alpha, rho) grid and draw the regime heat maps.",
    )
    parser.add_argument("config", help="TOML config file (see configs/)")
    parser.add_argument("--out", help="output folder (default: output.dir/<name> of the config)")
    parser.add_argument("--overwrite", action="store_true", help="replace existing results")
    parser.add_argument(
        "--resume", action="store_true",
        help="continue an interrupted run of the same config and code; succeed, changing nothing, "
        "when its results are complete (with --overwrite: replace only stale results)",
    )
    parser.add_argument(
        "--resume-any-version", action="store_true",
        help="--resume, also over results made under another code stamp (samflow commit or "
        "package versions); the results then record every stamp (attribute resumed_code_stamps)",
    )
    parser.add_argument("--no-figures", action="store_true", help="write results only")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument(
        "--num-chunks", metavar="K",
        help="split the grid into K slices and run one of them (with --chunk-index), e.g. as a "
        "SLURM array task; writes <out>/slices/slice-000i-of-000K.nc, no figures; then run "
        "python -m samflow.merge <out>",
    )
    parser.add_argument("--chunk-index", metavar="I", help="the slice to run, 0..K-1 (with --num-chunks)")
    args = parser.parse_args(argv)
    resume = args.resume or args.resume_any_version

    def fail(msg: str) -> int:
        print(f"error: {msg}", file=sys.stderr)
        return 2

    sliced = args.num_chunks is not None or args.chunk_index is not None
    if sliced:
        if args.num_chunks is None or args.chunk_index is None:
            return fail("--num-chunks and --chunk-index go together: give both")
        try:
            n_chunks, chunk_index = int(args.num_chunks), int(args.chunk_index)
        except ValueError:
            return fail(
                "--num-chunks and --chunk-index take whole numbers "
                f"(got {args.num_chunks!r}, {args.chunk_index!r})"
            )
    config_path = Path(args.config)
    try:
        cfg = load_config(config_path)
    except ConfigError as err:
        return fail(str(err).replace("\n", "\nerror: "))
    out_dir = Path(args.out) if args.out else _default_out(cfg, config_path)
    work_dir, results_path, partial, grid_slice = out_dir, out_dir / "results.nc", out_dir / ".partial", None
    if sliced:
        try:
            check_slice_args(n_chunks, chunk_index, cfg.grid.alpha_values().size * cfg.grid.rho_values().size)
        except ValueError as err:
            return fail(str(err))
        grid_slice = (chunk_index, n_chunks)
        work_dir = out_dir / SLICES_DIR
        results_path = work_dir / slice_file_name(chunk_index, n_chunks)
        partial = work_dir / f".partial-{results_path.stem}"
    key = config_key(cfg)
    stamp = store.code_stamp()
    if results_path.exists():
        if resume:
            problem, note = _finished_mismatch(results_path, key, stamp, grid_slice, args.resume_any_version)
            if problem is None:
                if note:
                    print(note, file=sys.stderr)
                print(f"already complete: {results_path} (same config and code); nothing to do")
                return 0
            if not args.overwrite:
                return fail(problem)
        elif not args.overwrite:
            return fail(f"{results_path} exists; pass --overwrite to replace it (or another --out)")
    # Before any folder is made or changed, and before JAX compiles: do the results fit?
    try:
        data = build_data(cfg, config_path.parent)
        memory_note = memory_preflight(cfg, data, grid_slice)
    except ConfigError as err:
        return fail(str(err))
    chunk_key = key if grid_slice is None else f"{key} slice {grid_slice[0]} of {grid_slice[1]}"
    if partial.exists():
        if args.overwrite and not (
            resume
            and partial_mismatch(partial, chunk_key, None if args.resume_any_version else stamp) is None
        ):
            shutil.rmtree(partial)
        elif not resume:
            return fail(
                f"{partial.parent} holds partial results of an interrupted run"
                + (f" of slice {chunk_index} of {n_chunks}" if sliced else "")
                + "; pass --resume to continue it or --overwrite to start over"
            )
        else:
            problem = partial_mismatch(partial, chunk_key, None if args.resume_any_version else stamp)
            if problem is not None:
                return fail(problem)
    if memory_note:
        print(f"note: {memory_note}", file=sys.stderr)
    try:
        work_dir.mkdir(parents=True, exist_ok=True)
        # A unique name: slices on other machines may share the folder (and a pid).
        probe = work_dir / f".write-test-{os.getpid()}-{os.urandom(4).hex()}"
        probe.touch()
        probe.unlink()
    except OSError as err:
        return fail(f"--out / output.dir: cannot write to {work_dir}: {err.strerror}")

    t_start = time.perf_counter()
    try:
        ds = run_sweep(
            cfg, progress=not args.quiet, base_dir=config_path.parent, checkpoint_dir=partial,
            grid_slice=grid_slice, code_stamp=stamp, accept_other_stamp=args.resume_any_version,
        )
    except ConfigError as err:
        return fail(str(err))
    wall = time.perf_counter() - t_start
    ds.attrs["wall_time_s"] = wall
    write_results(ds, results_path)
    shutil.rmtree(partial, ignore_errors=True)
    if "resumed_code_stamps" in ds.attrs:
        print(
            f"note: combined chunks made under code stamp(s) {ds.attrs['resumed_code_stamps']} with this code "
            f"('{stamp}'); the attributes code_stamp and resumed_code_stamps record both",
            file=sys.stderr,
        )
    if sliced:
        print(f"slice: {results_path} ({chunk_index} of {n_chunks}; merge with python -m samflow.merge {out_dir})")
    else:
        print(f"results: {results_path}")
    n_bad = int(np.isin(ds["status"].values, FAILED_STATUSES).sum())
    if n_bad:
        print(f"note: {n_bad} cell(s) did not finish normally; see the 'status' variable", file=sys.stderr)
    if cfg.output.figures and not args.no_figures and not sliced:
        from ..plots import plot_sweep

        for path in plot_sweep(ds, out_dir, cfg):
            print(f"figure: {path}")
    print(f"done in {wall:.1f} s (solve incl. compilation)")
    return 0
