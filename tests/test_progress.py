"""Progress in a log file (samflow._util.progress): with stderr redirected, tqdm's bar put
every update on one line (carriage returns) until the run ended; now whole lines at a
modest rate, and nothing with --quiet. The clock is injected: no test waits."""

from __future__ import annotations

import io

import pytest
from helpers import SMALL_SWEEP

from samflow._util.progress import LOG_INTERVAL_S, PlainProgress, progress_bar


class _Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_plain_lines_at_most_every_interval_and_at_the_end():
    clock, log = _Clock(), io.StringIO()
    with PlainProgress(4096, "cells", file=log, interval_s=15.0, clock=clock) as bar:
        bar.set_postfix_str("gd")
        for k in range(8):  # eight chunks of 512 cells, 6 s apart
            clock.now += 6.0
            bar.update(512)
            if k == 3:
                bar.set_postfix_str("l2")
    # Updates at 6, 12, ..., 48 s: a line at 18 s (the first >= 15 s after the start), at 36 s
    # (the first >= 15 s after that), at 48 s (the end); none between, no carriage return.
    assert log.getvalue().splitlines() == [
        "cells: 1536/4096 (38%), 18 s, gd",
        "cells: 3072/4096 (75%), 36 s, l2",
        "cells: 4096/4096 (100%), 48 s, l2",
    ]
    assert "\r" not in log.getvalue()


def test_the_last_count_is_printed_once_on_leaving_the_block_and_not_after_an_error():
    clock, log = _Clock(), io.StringIO()
    with PlainProgress(10, "runs", file=log, clock=clock) as bar:
        clock.now += 1.0
        bar.update(3)  # an early stop (fewer runs than planned): printed on leaving
    assert log.getvalue().splitlines() == ["runs: 3/10 (30%), 1 s"]
    log2 = io.StringIO()
    with pytest.raises(KeyboardInterrupt):
        with PlainProgress(10, "runs", file=log2, clock=clock) as bar:
            bar.update(3)
            raise KeyboardInterrupt  # the command prints its own line (interrupted after ...)
    assert log2.getvalue() == ""


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_bar_is_tqdm_on_a_terminal_plain_in_a_log_and_silent_when_quiet():
    from tqdm import tqdm

    tty, log, quiet = _Terminal(), io.StringIO(), io.StringIO()
    with progress_bar(5, "cells", "cell", file=tty) as bar:
        assert isinstance(bar, tqdm)
        bar.update(5)
    assert "\r" in tty.getvalue()  # the bar redraws itself
    with progress_bar(5, "cells", "cell", file=log) as bar:
        assert isinstance(bar, PlainProgress) and bar.interval_s == LOG_INTERVAL_S
        bar.update(5)
    assert log.getvalue() == "cells: 5/5 (100%), 0 s\n"
    with progress_bar(5, "cells", "cell", file=quiet, disable=True) as bar:
        bar.update(5)
    assert quiet.getvalue() == ""
    assert 10 <= LOG_INTERVAL_S <= 30


CONFIG = SMALL_SWEEP + "switch_times = false\n"


def test_sweep_into_a_log_prints_whole_progress_lines(tmp_path, capsys):
    """stderr captured (not a terminal), as in a batch job's log: the last line of the
    progress is the complete count, alone on its line; --quiet prints none."""
    from samflow.sweep import main

    cfg = tmp_path / "c.toml"
    cfg.write_text(CONFIG)
    assert main([str(cfg), "--out", str(tmp_path / "a")]) == 0
    err = capsys.readouterr().err
    assert "\r" not in err
    progress = [line for line in err.splitlines() if line.startswith("cells: ")]
    assert progress and progress[-1].startswith("cells: 6/6 (100%), ") and progress[-1].endswith(" s, gd")
    assert main([str(cfg), "--out", str(tmp_path / "b"), "--quiet"]) == 0
    assert capsys.readouterr().err == ""


# Issue 35, fault 4: a cold sweep into a log printed nothing for its first 86 s (the
# compilation of the solver), then its first progress line. Now a line says it is
# compiling, before the program's first call, then the progress as before.
COMPILING = "compiling the solver for 6 cells, or loading it from the compile cache (first run on this machine: up to a minute) ..."


def test_a_sweep_into_a_log_says_it_is_compiling_before_it_compiles(tmp_path, capsys, monkeypatch):
    from samflow.sweep import _grid, main

    said_before_first_call = []
    real = _grid.sharded_solver

    def watched(*args, **kwargs):
        fn, sharding = real(*args, **kwargs)

        def call(*a):
            if not said_before_first_call:  # what stderr held when the program was first called
                said_before_first_call.append(capsys.readouterr().err)
            return fn(*a)

        return call, sharding

    monkeypatch.setattr(_grid, "sharded_solver", watched)
    cfg = tmp_path / "c.toml"
    cfg.write_text(CONFIG)
    assert main([str(cfg), "--out", str(tmp_path / "a")]) == 0
    assert said_before_first_call and said_before_first_call[0].splitlines() == [COMPILING]
    err = capsys.readouterr().err.splitlines()
    assert COMPILING not in err and err[-1].startswith("cells: 6/6 (100%), ")  # then progress, as before
    # --quiet: no line at all; every chunk already done (--resume): nothing compiles, nothing said.
    assert main([str(cfg), "--out", str(tmp_path / "b"), "--quiet"]) == 0
    assert capsys.readouterr().err == ""


def test_the_compiling_line_is_not_said_when_nothing_is_solved(tmp_path, capsys):
    """A resumed run whose chunks are all on disk solves nothing and says nothing of compiling."""
    import shutil

    from samflow.sweep import main

    cfg = tmp_path / "c.toml"
    cfg.write_text(CONFIG)
    out = tmp_path / "a"
    assert main([str(cfg), "--out", str(out), "--quiet", "--no-figures"]) == 0
    # An interrupted run that had finished every chunk: its checkpoints, no results file.
    partial = out / ".partial"
    from samflow.sweep import run_sweep
    from samflow.config import load_config

    run_sweep(load_config(cfg), progress=False, base_dir=cfg.parent, checkpoint_dir=partial)
    (out / "results.nc").unlink()
    capsys.readouterr()
    assert main([str(cfg), "--out", str(out), "--resume"]) == 0
    err = capsys.readouterr().err
    assert "compiling" not in err and "cells: 6/6 (100%)" in err, err
    shutil.rmtree(out)


def test_the_compiling_line_goes_above_a_terminal_bar():
    from samflow._util.progress import progress_line

    tty, log = _Terminal(), io.StringIO()
    with progress_bar(5, "cells", "cell", file=tty) as bar:
        progress_line(bar, "compiling ...")
    assert "compiling ...\n" in tty.getvalue()
    with progress_bar(5, "cells", "cell", file=log) as bar:
        progress_line(bar, "compiling ...")
    assert log.getvalue() == "compiling ...\n"
    quiet = io.StringIO()
    with progress_bar(5, "cells", "cell", file=quiet, disable=True) as bar:
        progress_line(bar, "compiling ...")
    assert quiet.getvalue() == ""
