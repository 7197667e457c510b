"""Ctrl-C while a command line starts (`python -m samflow.sweep`, `samflow.plot`, ...).

Most of a command's first seconds go to imports (JAX, diffrax, pydantic, xarray,
matplotlib), and most of those happen before the command's own code runs: to
run `python -m samflow.sweep`, Python first imports the packages `samflow` and
`samflow.sweep`, whose `__init__` modules import the engine. A Ctrl-C there
printed a KeyboardInterrupt traceback from inside JAX. `command_start` turns it
into the one line and exit code that a Ctrl-C later in the run gives (130;
`samflow._util.cli_common.run_command`, `samflow.sweep.main`).

`paused_gc` pauses Python's cyclic garbage collector for a block that allocates
millions of short-lived objects and frees few: those imports, and tracing a
program (`samflow._util.cache.StoredProgram`).

This module imports only the standard library, so that the packages can use it
before their heavy imports.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import sys
from typing import Iterator

__all__ = ["STARTING_LINE", "command_start", "launching_command", "paused_gc"]

#: The line a Ctrl-C (or SIGTERM raised as KeyboardInterrupt) while starting prints; nothing was read or written yet.
STARTING_LINE = "interrupted ({signal}) while starting (importing); nothing was done: rerun the command"


def _main_module() -> "str | None":
    """The module of `python -m MODULE` (from `sys.orig_argv`), or None."""
    args = list(getattr(sys, "orig_argv", []))[1:]
    for i, a in enumerate(args):
        if a == "-m":
            return args[i + 1] if i + 1 < len(args) else None
        if a.startswith("-m") and not a.startswith("--"):
            return a[2:]
    return None


def launching_command() -> bool:
    """Whether Python is importing the packages of a `python -m samflow...` command
    before running it: while it locates the module of `-m`, `sys.argv[0]` is "-m"
    (it becomes the module's path when the module runs)."""
    if sys.argv[:1] != ["-m"]:
        return False
    module = _main_module() or ""
    return module == "samflow" or module.startswith("samflow.")


@contextlib.contextmanager
def command_start(always: bool = False) -> Iterator[None]:
    """Within the block, a KeyboardInterrupt (Ctrl-C) ends the process with
    `STARTING_LINE` on stderr and exit code 128 + the signal (130 for Ctrl-C), when
    the block is the start of a command line: `always` (a `__main__` module's own
    imports and setup), or, by default, only while Python imports the packages of
    `python -m samflow...` (`launching_command`; a program that imports samflow
    gets its KeyboardInterrupt as usual).

    The exit skips the interpreter's teardown (`os._exit`): a module cut off
    half-imported (JAX's, say) may not tear down cleanly."""
    try:
        yield
    except KeyboardInterrupt as err:
        if not (always or launching_command()):
            raise
        signum = getattr(err, "signum", signal.SIGINT)
        try:
            sys.stdout.flush()
            print(STARTING_LINE.format(signal=signal.Signals(signum).name), file=sys.stderr, flush=True)
        finally:
            os._exit(128 + signum)


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """Python's cyclic garbage collector off within the block, and on again after it
    when it was on before (a block inside another leaves it to the outer one).

    Importing JAX and diffrax, and tracing and lowering a lane program, allocate
    millions of objects that live to the end of the block; the collector, run after
    every 700 net allocations of container objects, went through them again and
    again for nothing: 0.11 s of `import samflow`'s 0.9 s, 0.12-0.13 s of the first
    `samflow.solve`'s 3.3 s and 1.5 s of a four-sample linf program's 19 s
    (docs/benchmarks.md, "Issue 34, eighth round"). What such a block leaves as
    garbage is collected by the next run of the collector after it (the
    four-sample program's peak memory: 780 -> 790 MB). Reference counting, which
    frees most objects, is not affected."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()
