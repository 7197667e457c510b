"""What the command lines share (`python -m samflow.sweep`, `samflow.experiments.cnn`,
`samflow.experiments.cnn_study`): the config and `--out` arguments, the one-line
refusal with exit code 2, the config loaded and its output folder chosen
(`config_and_folder`), and the output folder made, locked and checked before any
work (`run_locked`).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, NoReturn, TypeVar

from .backend import backend_problem
from .io import DiskFullError
from ..config import ConfigError, ConfigModel

if TYPE_CHECKING:
    from .lock import OutputLock

__all__ = ["RunOutput", "EXIT_BAD_INPUT", "EXIT_SIGINT", "EXIT_SIGTERM", "Interrupted", "backend_problem", "command_parser", "config_and_folder", "existing_file", "fail", "fail_config", "lock_output", "print_figures", "run_command", "run_locked", "writable_folder"]

C = TypeVar("C")  # a config with `output.dir` and `run_folder`


class RunOutput(ConfigModel):
    """The `[output]` table that the atlas and CNN configs share: results go to
    `<dir>/<name>/` (the command line's `--out` overrides it); `figures` draws the
    figures. A config with another default folder subclasses it."""

    dir: str = "results"
    """The results folder; results go to `<dir>/<name>/` (the command line's --out overrides it)."""
    figures: bool = True
    """Draw the figures after the run."""


#: Exit code of a refused input (config, data, arguments, output folder).
EXIT_BAD_INPUT = 2
OUT_HELP = "output folder (default: output.dir/<name> of the config)"


class Interrupted(KeyboardInterrupt):
    """SIGTERM (or SIGINT) during a sweep: stops it like Ctrl-C, remembering the signal."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_interrupted(signum, frame):
    raise Interrupted(signum)


#: Exit codes of an interrupted sweep: 128 + the signal number, the shell's convention for a
#: process ended by a signal, so a job script (or a scheduler's epilogue) can tell a Ctrl-C
#: (SIGINT, 130) from the scheduler's notice before it kills a job (SIGTERM, 143).
EXIT_SIGINT, EXIT_SIGTERM = 128 + signal.SIGINT, 128 + signal.SIGTERM


def command_parser(
    prog: str, description: str, config_help: str, out_help: "str | None" = OUT_HELP, *,
    positional: str = "config", out_metavar: "str | None" = None,
) -> argparse.ArgumentParser:
    """An argument parser with the positional `config` (a TOML file; another input
    named by `positional`) and `--out` (none when `out_help` is None; shown as
    `out_metavar` in the usage); the command adds its own options after these."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument(positional, help=config_help)
    if out_help is not None:
        parser.add_argument("--out", metavar=out_metavar, help=out_help)
    return parser


def fail(msg: str) -> int:
    """Print `error: <msg>` on stderr; return `EXIT_BAD_INPUT` (2)."""
    print(f"error: {msg}", file=sys.stderr)
    return EXIT_BAD_INPUT


def fail_config(err: ConfigError) -> int:
    """`fail` for a `ConfigError`: each of its lines (one per problem) as its own `error:` line."""
    return fail(str(err).replace("\n", "\nerror: "))


def config_and_folder(
    load: Callable[[str | Path], C], config: str | Path, out: "str | None"
) -> "tuple[C, Path, None] | tuple[None, None, int]":
    """The opening of a command line: the config `load(config)` and its output folder,
    `--out` (`out`) or else `cfg.run_folder(cfg.output.dir, config)`.

    **Returns:** (the config, the folder, None); or, for a `ConfigError` of either,
    (None, None, the exit code of `fail_config`: its lines printed, 2).
    """
    try:
        cfg = load(config)
        return cfg, (Path(out) if out else cfg.run_folder(cfg.output.dir, config)), None
    except ConfigError as err:
        return None, None, fail_config(err)


def run_locked(folder: Path, name: str, what: str, run: Callable[[], int]) -> int:
    """`run()` with the lock `folder/name` held (`lock_output`, `what` naming this run in it),
    released afterwards, also on an error: the lock's empty folders go with it.

    **Returns:** `run()`'s exit code; or, when the lock is refused (another live run
    writes there, or the folder cannot be made), the one line of `fail` and 2.
    """
    lock, problem = lock_output(folder, name, what)
    if problem is not None:
        return fail(problem)
    try:
        return run()
    finally:
        lock.release()  # and the folder, when this run made it and left it empty


def existing_file(folder: Path, names: Iterable[str]) -> "Path | None":
    """The first of `names` that exists in `folder` (a result a run would replace), or None."""
    return next((folder / name for name in names if (folder / name).exists()), None)


def writable_folder(folder: Path) -> "str | None":
    """Make `folder` (and its parents) and write and remove a probe file in it.

    **Returns:** None, or the one-line problem ("--out / output.dir: cannot write
    to <folder>: <reason>"). The probe's name is unique (pid and random bytes):
    runs on other machines may share the folder, and a pid.
    """
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".write-test-{os.getpid()}-{os.urandom(4).hex()}"
        probe.touch()
        probe.unlink()
    except OSError as err:
        return f"--out / output.dir: cannot write to {folder}: {err.strerror}"
    return None


def lock_output(folder: Path, name: str, what: str) -> "tuple[OutputLock | None, str | None]":
    """Take the lock `folder/name` (`samflow._util.lock.take_lock`) before a command reads or
    changes what it writes in `folder`, making the folder (and its parents) first.

    **Returns:** (the lock, None), its `note` (a stale lock taken over) printed on
    stderr; or (None, the one-line problem: another live run is
    writing there, or the folder cannot be made). `what` names this run in the
    lock ("sweep"), for the refusals of others. The folders this call made are
    removed again when it refuses, and when the lock is released while they are
    still empty (a run refused later, e.g. for memory, leaves no folder behind).
    """
    from .lock import LockedError, remove_empty, take_lock

    made = [p for p in [folder, *folder.parents] if not p.exists()]
    try:
        folder.mkdir(parents=True, exist_ok=True)
        lock = take_lock(folder / name, what)
    except LockedError as err:
        remove_empty(made)
        return None, str(err)
    except OSError as err:
        remove_empty(made)
        return None, f"--out / output.dir: cannot write to {folder}: {err.strerror or err}"
    if lock.note:
        print(lock.note, file=sys.stderr)
    lock.tidy = made
    return lock, None


def print_figures(paths: Iterable[Path]) -> None:
    """One line `figure: <path>` per written figure file, on stdout; a figure saved
    also as a .pdf beside its .png gets a second line for the .pdf."""
    seen = set()
    for path in paths:
        path = Path(path)
        extra = [path.with_suffix(".pdf")] if path.suffix == ".png" else []
        for p in [path] + [q for q in extra if q.exists()]:
            if p not in seen:
                seen.add(p)
                print(f"figure: {p}")


def run_command(
    main: Callable[[], int], interrupted: str = "nothing was written", disk_full: str = "free space, then rerun the command"
) -> NoReturn:
    """Entry point of `python -m ...`: `prepare_process` (float64, Agg) first, then
    exit with `main()`'s code; a JAX platform that cannot start (`backend_problem`)
    is one line and exit code 2.

    A full disk (`samflow._util.io.DiskFullError`) ends it with one line, "error: no
    space left in <folder> for <file>: it needs about <size>, <size> free;
    `disk_full`", and exit code 2; the file being written is removed.

    Ctrl-C (SIGINT) or SIGTERM (a scheduler's notice) ends the command with one
    line, "interrupted (SIGINT); `interrupted`", and exit code 130 / 143 (128 +
    the signal, as `python -m samflow.sweep`), instead of a traceback from inside
    JAX; result files are written atomically, so none is half-written. The exit
    skips the interpreter's teardown (`os._exit`): with a compilation cut short,
    JAX's threads could crash it."""
    from .x64 import prepare_process

    previous = signal.signal(signal.SIGTERM, _raise_interrupted)
    try:
        prepare_process()  # imports matplotlib: a Ctrl-C here is the same one line
        if (problem := backend_problem()) is not None:
            sys.exit(fail(problem))
        code = main()
    except DiskFullError as err:
        code = fail(f"{err}; {disk_full}")
    except KeyboardInterrupt as err:
        signum = getattr(err, "signum", signal.SIGINT)
        print(f"interrupted ({signal.Signals(signum).name}); {interrupted}", file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(128 + signum)
    finally:
        signal.signal(signal.SIGTERM, previous)
    sys.exit(code)
