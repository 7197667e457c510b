"""`python -m samflow.sweep CONFIG ...`: the command line (`samflow.sweep.main`)."""

import sys

from .._util.startup import command_start, paused_gc

if __name__ == "__main__":
    with command_start(always=True), paused_gc():  # Ctrl-C while importing and setting up: one line, exit 130
        from .._util.x64 import prepare_process
        from ._cli import main
        from ._devices import use_cpu_cores

        prepare_process()  # float64 for the flows (docs/theory.md s.4), Agg for the figures
        use_cpu_cores()  # one CPU device per core, unless the user chose a count: sweeps shard over them
    sys.exit(main())  # from here on, main says how far a Ctrl-C got
