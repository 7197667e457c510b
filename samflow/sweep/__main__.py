"""`python -m samflow.sweep CONFIG ...`: the command line (`samflow.sweep.main`)."""

import sys

from ._cli import main

if __name__ == "__main__":
    from .._x64 import use_float64
    from ._devices import use_cpu_cores

    use_float64()  # the flows compute in float64 (docs/theory.md s.4)
    use_cpu_cores()  # one CPU device per core, unless the user chose a count: sweeps shard over them
    sys.exit(main())
