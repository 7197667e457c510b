"""`python -m samflow.atlas CONFIG [--quick] [--out DIR]` (`samflow.atlas.main`)."""

import sys

from ._cli import main

if __name__ == "__main__":
    sys.exit(main())
