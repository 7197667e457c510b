"""`python -m samflow.atlas CONFIG [--quick] [--out DIR]` (`samflow.atlas.main`)."""

from ._cli import main

if __name__ == "__main__":
    from .._util.cli_common import run_command

    run_command(main, "nothing was written (the atlas is written whole at the end); rerun the command")
