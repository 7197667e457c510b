"""The command line of the atlas: arguments, refusals (exit 2, one line), outputs."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from .._util.cli_common import command_parser, run_locked
from .._util.io import atomic_write_text
from ..config import ConfigError
from ..store import write_results
from ._config import AtlasConfig, load_atlas_config


def run_atlas(cfg: AtlasConfig, out: str | Path, *, figures: bool = True, log=print) -> Path:
    """Compute the atlas of `cfg`, write `out/atlas.nc` (atomically), `out/tables.md` and the figures.

    **Returns:** the path of `atlas.nc`.
    """
    from ._compute import compute_atlas
    from ._figures import draw_atlas, tables

    out = Path(out)
    ds = compute_atlas(cfg, log=log)
    path = write_results(ds, out / "atlas.nc")
    log(f"wrote {path}")
    atomic_write_text(tables(ds), out / "tables.md")
    log(f"wrote {out / 'tables.md'}")
    if figures:
        for p in draw_atlas(ds, out):
            log(f"wrote {p}")
    return path


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code (0 ok, 2 bad input)."""
    parser = command_parser("python -m samflow.atlas", "Regime edges of SAM across depth, dimension and data.",
                            "TOML config file (see configs/atlas.toml)",
                            "output folder (default: output.dir of the config, /quick with --quick)")
    parser.add_argument("--quick", action="store_true", help="a small run (depths 2-3, d 2-3, linear mu, one sample)")
    parser.add_argument("--no-figures", action="store_true", help="write atlas.nc only")
    args = parser.parse_args(argv)
    try:
        cfg = load_atlas_config(args.config)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.quick:
        cfg = cfg.quick()
    out = Path(args.out) if args.out else Path(cfg.output.dir) / ("quick" if args.quick else "")
    if out.exists() and not out.is_dir():
        print(f"error: --out {out} is a file; give a folder", file=sys.stderr)
        return 2
    # Two atlases into one folder would leave atlas.nc of one and the tables or figures of the other.
    figures = cfg.output.figures and not args.no_figures
    return run_locked(out, ".atlas.lock", "atlas", lambda: _timed_run(lambda: run_atlas(cfg, out, figures=figures)))


def _timed_run(run) -> int:
    """`main` once the output folder is locked: `run()` (the atlas), then its time on stdout; exit code 0."""
    t0 = time.perf_counter()
    run()
    print(f"atlas done in {time.perf_counter() - t0:.0f} s")
    return 0
