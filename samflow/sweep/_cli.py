"""The command line `python -m samflow.sweep` (`main`: arguments, refusals, exit codes)."""

from __future__ import annotations

import argparse
import contextlib
import shutil
import signal
import sys
import threading
import time
from pathlib import Path

import jax
import numpy as np

from .. import store
from .._util.io import DiskFullError
from .._util.cli_common import (
    EXIT_SIGINT,
    EXIT_SIGTERM,
    _raise_interrupted,
    backend_problem,
    command_parser,
    config_and_folder,
    fail,
    lock_output,
    print_figures,
    writable_folder,
)
from ..config import ConfigError, load_config
from ..status import FAILED_STATUSES
from ..store import write_results
from . import _devices
from ._checkpoint import _finished_mismatch, chunk_key, damaged_chunks, partial_mismatch
from ._run import RunOptions, SweepPlan, build_data, check_data_file, chunk_count, disk_preflight, plan_memory, plan_sweep, run_plan
from ._slices import SLICES_DIR, check_slice_args, slice_file_name


def _chunks_done(partial: Path) -> int:
    """Finished chunks kept in a checkpoint folder (written atomically: a `.tmp` is not one)."""
    return len(list(partial.glob("*.npz"))) if partial.is_dir() else 0


def main(argv: "list[str] | None" = None) -> int:
    """Command-line entry point; returns the exit code (0 ok, 2 bad input).

    `--resume` is always safe to pass (e.g. in job scripts): it continues an
    interrupted run of the same config and code stamp, succeeds without
    touching anything when the results are already complete, and refuses (exit
    2, one line naming both stamps) partial or finished results made under
    another code stamp (`samflow.store.code_stamp`), unless
    `--resume-any-version`. With `--resume --overwrite`, matching results are
    kept or continued and stale ones (another config or stamp) are replaced.
    Results that cannot fit in memory are refused before any folder is made, and
    so are runs whose files cannot fit on the disk; a disk that fills during the
    run ends it with one line (exit 2), the finished chunks kept for `--resume`.
    While another sweep writes the same results (its lock, `samflow._util.lock`, beside
    them), every run is refused (exit 2, one line naming its pid and start time),
    with or without --overwrite / --resume; a lock left by a killed run is taken
    over with a note. Ctrl-C or SIGTERM, from the checks on, ends the run with one
    line and exit 130 / 143, its lock released.
    """
    parser = _parser()
    args = parser.parse_args(argv)
    agreed: list = []  # _run appends to it once every process has agreed to run
    held: list = []  # the output lock, once taken; released however the run ends
    with _sigterm_interrupts():  # a SIGTERM before the solve killed the run with its lock left behind
        try:
            # JAX starting its platform takes seconds (a GPU's much more): a Ctrl-C then is one line too.
            if (problem := _start_distributed(args) or backend_problem()) is not None:
                return fail(problem)
            code = _checks_and_run(args, agreed, held)
        except KeyboardInterrupt as err:  # before the solve (`_run` says how far a solve got)
            signum = getattr(err, "signum", signal.SIGINT)
            print(f"interrupted ({signal.Signals(signum).name}) before the solve started; rerun the command",
                  file=sys.stderr)
            code = 128 + signum
        finally:
            for lock in held:
                lock.release()
    if not agreed and jax.distributed.is_initialized():
        _devices.agree(False)  # this process refused: the others stop too (exit 2)
    return code


@contextlib.contextmanager
def _sigterm_interrupts():
    """Within the block, SIGTERM (a scheduler's notice before it kills a job) raises
    `Interrupted`, a KeyboardInterrupt, as Ctrl-C does; the previous handler is put
    back after. Only the main thread may set a handler: from another thread (main()
    called from a worker thread) it does nothing."""
    on_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _raise_interrupted) if on_main else None
    try:
        yield
    finally:
        if on_main:  # None: the previous handler was not set from Python
            signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


def _start_distributed(args) -> "str | None":
    """`jax.distributed.initialize` when asked (`--distributed` or its three flags);
    a one-line problem, or None. Other processes than 0 draw no progress bar."""
    if not (args.distributed or args.coordinator or args.num_processes is not None or args.process_id is not None):
        return None
    try:
        _devices.start_distributed(args.coordinator, args.num_processes, args.process_id, args.coordinator_timeout)
    except ValueError as err:
        return str(err)
    if not _devices.is_writer():
        args.quiet = True
    return None


def _checks_and_run(args, agreed: list, held: list) -> int:
    """The refusals of `main` (before anything is written), then `_run`. The lock on
    the output (`_take_lock`) goes into `held`."""
    resume = args.resume or args.resume_any_version
    sliced = args.num_slices is not None or args.slice_index is not None
    if sliced:
        if args.num_slices is None or args.slice_index is None:
            return fail("--num-slices and --slice-index go together: give both")
        try:
            n_slices, slice_index = int(args.num_slices), int(args.slice_index)
        except ValueError:
            return fail(
                "--num-slices and --slice-index take whole numbers "
                f"(got {args.num_slices!r}, {args.slice_index!r})"
            )
    config_path = Path(args.config)
    cfg, out_dir, refused = config_and_folder(load_config, config_path, args.out)
    if refused is not None:
        return refused
    work_dir, results_path, partial, grid_slice = out_dir, out_dir / "results.nc", out_dir / ".partial", None
    # Messages count slices from 1; the file names and --slice-index from 0.
    slice_text = f"{slice_index + 1} of {n_slices} (--slice-index {slice_index})" if sliced else None
    if sliced:
        try:
            check_slice_args(n_slices, slice_index, cfg.grid.alpha_values().size * cfg.grid.rho_values().size)
        except ValueError as err:
            return fail(str(err))
        grid_slice = (slice_index, n_slices)
        work_dir = out_dir / SLICES_DIR
        results_path = work_dir / slice_file_name(slice_index, n_slices)
        partial = work_dir / f".partial-{results_path.stem}"
    stamp = store.code_stamp()
    try:
        data = build_data(cfg, config_path.parent, str(config_path))
        check_data_file(cfg, data, str(config_path))  # before any folder is made
    except ConfigError as err:
        return fail(str(err))
    plan = plan_sweep(cfg, data)  # below here nothing reads the config
    key = plan.key
    if (problem := _take_lock(results_path, held)) is not None:  # before anything there is read
        return fail(problem)
    if results_path.exists():
        if resume:
            problem, note = _finished_mismatch(results_path, key, stamp, grid_slice, args.resume_any_version, data)
            if problem is None:
                if note:
                    print(note, file=sys.stderr)
                if plan.output.figures and not args.no_figures and not sliced and _devices.is_writer():
                    from ..plot import resume_figures

                    return resume_figures(results_path, out_dir)
                print(f"already complete: {results_path} (same config and code); nothing to do")
                return 0
            if not args.overwrite:
                return fail(problem)
        elif not args.overwrite:
            return fail(
                f"{results_path} exists; pass --overwrite to replace it, --resume to keep it if it holds "
                "this config's complete results, or another --out"
            )
    # Before any folder is made or changed, and before JAX compiles: do the results fit?
    try:
        memory_note = plan_memory(plan, grid_slice)
    except ConfigError as err:
        return fail(str(err))
    partial_key = chunk_key(key, data, grid_slice, from_file=plan.data_file is not None)
    if partial.exists():
        if args.overwrite and not (
            resume
            and partial_mismatch(partial, partial_key, None if args.resume_any_version else stamp) is None
        ):
            if _devices.is_writer():  # process 0 writes and removes (jax.distributed)
                shutil.rmtree(partial, ignore_errors=True)
        elif not resume:
            return fail(
                f"{partial.parent} holds partial results of an interrupted run"
                + (f" of slice {slice_text}" if sliced else "")
                + "; pass --resume to continue it or --overwrite to start over"
            )
        else:
            problem = partial_mismatch(partial, partial_key, None if args.resume_any_version else stamp)
            if problem is not None:
                return fail(problem)
    if memory_note:
        print(f"note: {memory_note}", file=sys.stderr)
    try:
        disk_preflight(plan, work_dir, grid_slice, partial)
    except ConfigError as err:
        return fail(str(err))
    if problem := writable_folder(work_dir):  # slices on other machines may share it
        return fail(problem)

    n_total = chunk_count(plan, grid_slice)
    if resume and (done := _chunks_done(partial)):
        damaged = len(damaged_chunks(partial))  # recomputed: not done
        print(f"resumed: {done - damaged} of {n_total} chunks already done"
              + (f" ({damaged} more damaged: recomputed)" if damaged else ""))
    agreed.append(True)
    if not _devices.agree(True):
        return fail("another process of this jax.distributed run refused it (see its error line)")
    return _run(plan, args, partial, grid_slice, stamp, results_path, out_dir, slice_text, n_total)


def _take_lock(results_path: Path, held: list) -> "str | None":
    """Lock what this run writes (its results file, checkpoints and figures) against
    another sweep writing the same: the file `.<results stem>.lock` beside the results
    (one per slice: slices of one grid run side by side by design), taken by process 0
    of a jax.distributed run (the others refuse with it, `agree`). Appends the lock to
    `held`; returns None, or the one-line refusal naming the live run."""
    if not _devices.is_writer():
        return None
    lock, problem = lock_output(results_path.parent, f".{results_path.stem}.lock", "sweep")
    if lock is not None:
        held.append(lock)
    return problem


def _interrupted_line(done: int, n_total: int) -> str:
    """The line an interrupted run prints: the checkpointed chunks kept for
    --resume, or, where nothing is checkpointed (generic models, discrete
    methods only), that a rerun starts over."""
    if n_total == 0:
        return "interrupted; nothing of this run is checkpointed (generic models and discrete methods are recomputed): rerun to start over"
    return f"interrupted after {done} of {n_total} chunks; rerun with --resume to continue"


def _disk_full_next(stage: str, results_path: Path, done: int, n_total: int) -> str:
    """What to do after a full disk stopped the run at `stage` ("solve", "write" or "figures")."""
    if stage == "figures":
        return f"{results_path} is written, some figures are not: free space, then rerun with --overwrite"
    kept = f" ({done} of {n_total} chunks are kept)" if n_total else ""
    return f"free space, then rerun with --resume{kept}"


def _parser() -> argparse.ArgumentParser:
    """The arguments of `python -m samflow.sweep`."""
    parser = command_parser(
        "python -m samflow.sweep",
        "Sweep SAM flows over an (alpha, rho) grid and draw the regime heat maps.",
        "TOML config file (see configs/)",
    )
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
        "--num-slices", metavar="K", dest="num_slices",
        help="split the grid into K slices and run one of them (with --slice-index), e.g. as a "
        "SLURM array task; writes <out>/slices/slice-000i-of-000K.nc, no figures; then run "
        "python -m samflow.merge <out>",
    )
    parser.add_argument("--slice-index", metavar="I", dest="slice_index",
                        help="the slice to run, 0..K-1 (with --num-slices)")
    parser.add_argument(
        "--distributed", action="store_true",
        help="one run over several processes or hosts (jax.distributed): one global device mesh, "
        "process 0 writes the results; the process count and id come from the scheduler (SLURM: "
        "one srun task per process) or from the three flags below",
    )
    parser.add_argument("--coordinator", metavar="HOST:PORT",
                        help="address of process 0 (implies --distributed), e.g. 10.0.0.1:12345")
    parser.add_argument("--num-processes", metavar="N", type=int, help="processes in all (implies --distributed)")
    parser.add_argument("--process-id", metavar="I", type=int, help="this process, 0..N-1 (implies --distributed)")
    parser.add_argument(
        "--coordinator-timeout", metavar="SECONDS", type=float, default=_devices.COORDINATOR_TIMEOUT_S,
        help="how long a process waits for the coordinator and the other processes before it stops with "
        f"one line (default {_devices.COORDINATOR_TIMEOUT_S:g})",
    )
    # The names of samflow 0.1 (a slice is not a chunk: chunks are the memory and checkpoint
    # unit inside a run), deprecated through 0.2.x, removed in 0.3.0: one line naming the new flag.
    parser.add_argument("--num-chunks", dest="num_slices", action=_OldSliceFlag, help=argparse.SUPPRESS)
    parser.add_argument("--chunk-index", dest="slice_index", action=_OldSliceFlag, help=argparse.SUPPRESS)
    return parser


_NEW_SLICE_FLAG = {"--num-chunks": "--num-slices", "--chunk-index": "--slice-index"}


class _OldSliceFlag(argparse.Action):
    """A flag of samflow 0.1 removed in 0.3.0: `error:` in one line naming its new name, exit 2."""

    def __call__(self, parser, namespace, values, option_string=None):
        parser.exit(2, f"error: {option_string} was removed in samflow 0.3.0; use {_NEW_SLICE_FLAG[option_string]}\n")


def _run(plan: SweepPlan, args, partial, grid_slice, stamp, results_path, out_dir, slice_text, n_total) -> int:
    """Solve `plan` (`run_plan`), write and draw, with SIGINT/SIGTERM (`main`'s `_sigterm_interrupts`) turned
    into one line and exit 130/143 (checkpoints kept); returns the exit code."""
    stage = "solve"
    try:
        t_start = time.perf_counter()
        ds = run_plan(plan, RunOptions(progress=not args.quiet, checkpoint_dir=partial, grid_slice=grid_slice, code_stamp=stamp,
                                       accept_other_stamp=args.resume_any_version))
        wall = time.perf_counter() - t_start
        ds.attrs["wall_time_s"] = wall
        stage = "write"
        if not _devices.is_writer():  # jax.distributed: process 0 writes and reports
            print(f"process {jax.process_index()} of {jax.process_count()}: done in {wall:.1f} s")
            return 0
        write_results(ds, results_path)  # atomic: the file is whole or absent
        stage = "figures"
        _report(ds, args, plan.output, stamp, results_path, partial, out_dir, slice_text, wall)
    except ConfigError as err:
        return fail(str(err))
    except DiskFullError as err:  # the finished chunks are kept, the file being written is removed
        return fail(f"{err}; {_disk_full_next(stage, results_path, _chunks_done(partial), n_total)}")
    except KeyboardInterrupt as err:
        code = EXIT_SIGTERM if getattr(err, "signum", signal.SIGINT) == signal.SIGTERM else EXIT_SIGINT
        if stage == "figures" or (stage == "write" and results_path.exists()):
            from ..plot import interrupted_line

            print(interrupted_line(results_path), file=sys.stderr)
        else:
            print(_interrupted_line(_chunks_done(partial), n_total), file=sys.stderr)
        return code
    return 0


def _report(ds, args, output, stamp, results_path, partial, out_dir, slice_text, wall) -> None:
    """After the results are written: drop the checkpoints, print the notes, draw the
    figures (`output`: the config's `[output]` section)."""
    sliced = slice_text is not None
    shutil.rmtree(partial, ignore_errors=True)
    if "resumed_code_stamps" in ds.attrs:
        print(
            f"note: combined chunks made under code stamp(s) {ds.attrs['resumed_code_stamps']} with this code "
            f"('{stamp}'); the attributes code_stamp and resumed_code_stamps record both",
            file=sys.stderr,
        )
    if sliced:
        print(f"slice: {results_path} ({slice_text}; merge with python -m samflow.merge {out_dir})")
    else:
        print(f"results: {results_path}")
    n_bad = int(np.isin(ds["status"].values, FAILED_STATUSES).sum())
    if n_bad:
        print(f"note: {n_bad} cell(s) did not finish normally; see the 'status' variable", file=sys.stderr)
    if output.figures and not args.no_figures and not sliced:
        from ..plots import plot_sweep

        print_figures(plot_sweep(ds, out_dir, output))
    print(f"done in {wall:.1f} s (solve, its compilation and the switch times)")
