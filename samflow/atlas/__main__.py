"""`python -m samflow.atlas CONFIG [--quick] [--out DIR]` (`samflow.atlas.main`)."""

import sys

from ._cli import main

if __name__ == "__main__":
    from .._x64 import prepare_process

    prepare_process()  # float64 for the flows, Agg for the figures
    sys.exit(main())
