"""Progress of a long run (the sweep's cells, the CNN's epochs and runs): tqdm's bar on
a terminal or in a notebook, plain lines in a log file.

A bar redraws itself with carriage returns: with stderr redirected to a file (a
batch job's log) its updates pile up on one line that ends only with the run.
Where stderr is not a terminal, `progress_bar` prints instead one whole line
("cells: 1536/4096 (38%), 12 s, l2") at most every `interval_s` seconds, and one
when the count is complete. `progress_line` prints a line of its own with the
progress (the sweep's "compiling the solver ..." before its first compilation,
which in a cold run comes long before the first count).
"""

from __future__ import annotations

import sys
import time
from typing import Callable, TextIO

__all__ = ["PlainProgress", "progress_bar", "progress_line", "LOG_INTERVAL_S"]

#: Seconds between two progress lines in a log (and a line when the run completes).
LOG_INTERVAL_S = 20.0


class PlainProgress:
    """The part of tqdm's interface the runs use (`update`, `set_postfix_str`, a
    `with` block), printing whole lines to `file`: one when `interval_s` seconds
    (of `clock`) have passed since the last line, one when `n` reaches `total`,
    and one on leaving the block when counts are unprinted (not after an error)."""

    def __init__(self, total: int, desc: str, *, file: TextIO, interval_s: float = LOG_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic):
        self.total, self.desc, self.file, self.interval_s, self.clock = int(total), desc, file, interval_s, clock
        self.n, self.postfix = 0, ""
        self.t0 = self.last = clock()
        self.printed = 0

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        self.postfix = str(s)

    def update(self, n: int = 1) -> None:
        self.n += int(n)
        now = self.clock()
        if now - self.last >= self.interval_s or (self.n >= self.total and self.printed < self.n):
            self._line(now)

    def _line(self, now: float) -> None:
        pct = f" ({100 * self.n / self.total:.0f}%)" if self.total else ""
        tail = f", {self.postfix}" if self.postfix else ""
        print(f"{self.desc}: {self.n}/{self.total}{pct}, {now - self.t0:.0f} s{tail}", file=self.file, flush=True)
        self.last, self.printed = now, self.n

    def close(self) -> None:
        if self.printed < self.n:
            self._line(self.clock())

    def __enter__(self) -> "PlainProgress":
        return self

    def __exit__(self, kind, value, tb) -> None:
        if kind is None:
            self.close()


def progress_bar(total: int, desc: str, unit: str, *, disable: bool = False, file: "TextIO | None" = None,
                 interval_s: float = LOG_INTERVAL_S):
    """A progress counter of `total` `unit`s for a `with` block: tqdm's bar (`tqdm.auto`)
    when `file` (default stderr) is a terminal or in a notebook, a `PlainProgress`
    otherwise (a log file), nothing at all with `disable` (`--quiet`)."""
    import tqdm.auto
    from tqdm import autonotebook, std

    file = sys.stderr if file is None else file
    notebook = autonotebook.tqdm is not std.tqdm
    if disable or notebook or _is_terminal(file):
        return tqdm.auto.tqdm(total=total, desc=desc, unit=unit, disable=disable, file=file)
    return PlainProgress(total, desc, file=file, interval_s=interval_s)


def progress_line(bar, text: str) -> None:
    """Print `text` as a line of its own with the progress of `bar` (a `progress_bar`):
    above tqdm's bar on a terminal (which redraws below it), as the next line of a
    log, nothing when the bar is disabled (`--quiet`)."""
    if isinstance(bar, PlainProgress):
        print(text, file=bar.file, flush=True)
    elif not getattr(bar, "disable", True):
        bar.write(text, file=bar.fp)


def _is_terminal(file) -> bool:
    try:
        return bool(file.isatty())
    except (AttributeError, ValueError):  # no isatty, or closed
        return False
