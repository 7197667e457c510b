"""FIGURES, the compile groups, the figure-config check and run_all over worker processes."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from pydantic import BaseModel

from ..config import ConfigError
from ._context import CONFIG_DIR, CommonConfig, load_figure_config
from ._report import FigureResult, write_index, write_report
from ._directions import DirectionsConfig, depth1_directions
from ._linf_limit import LinfConfig, linf_limit
from ._regime_chart import RegimeChartConfig, regime_chart
from ._staircase import StaircaseConfig, staircase
from ._trajectories import TrajectoriesConfig, trajectories
from ._usam_ablation import UsamConfig, usam_ablation
from ._discrete_gap import DiscreteGapConfig, discrete_gap
from ._banded import BandedConfig, banded_heatmaps
from ._generic_models import GenericModelsConfig, generic_models
from ._lp_family import LpFamilyConfig, lp_family
from ._lp_family_multi import LpFamilyMultiConfig, lp_family_multi


# --- running everything: groups, report, index ------------------------------------

FIGURES: dict[str, Callable[..., FigureResult]] = {
    "depth1_directions": depth1_directions,
    "linf_limit": linf_limit,
    "regime_chart": regime_chart,
    "staircase": staircase,
    "trajectories": trajectories,
    "usam_ablation": usam_ablation,
    "discrete_gap": discrete_gap,
    "banded": banded_heatmaps,
    "generic_models": generic_models,
    "lp_family": lp_family,
    "lp_family_multi": lp_family_multi,
}

# Figures that share compilations run in one process, in this order (the real-time
# depth-2 solves of the first group serve all four of its figures).
GROUPS: list[list[str]] = [
    ["staircase", "usam_ablation", "trajectories", "depth1_directions"],
    ["banded", "generic_models"],  # the same data and models: shared compilations
    ["linf_limit"],
    ["regime_chart"],
    ["discrete_gap"],
    ["lp_family"],
    ["lp_family_multi"],  # real time on 4 samples: lp, l2, linf and their edge solves
]


def _run_group(names: list[str], out_dir: str, quick: bool, config_dir: str | None) -> list[FigureResult]:
    """Build figures `names` (in a spawned worker process: float64 first, as the script)."""
    from .._util.x64 import prepare_process

    prepare_process()
    return [FIGURES[n](out_dir, quick=quick, config_dir=config_dir) for n in names]


# Every figure config file (configs/figures/<name>.toml) and its schema.
FIGURE_CONFIGS: dict[str, type[BaseModel]] = {
    "common": CommonConfig,
    "depth1_directions": DirectionsConfig,
    "linf_limit": LinfConfig,
    "regime_chart": RegimeChartConfig,
    "staircase": StaircaseConfig,
    "trajectories": TrajectoriesConfig,
    "usam_ablation": UsamConfig,
    "discrete_gap": DiscreteGapConfig,
    "banded": BandedConfig,
    "generic_models": GenericModelsConfig,
    "lp_family": LpFamilyConfig,
    "lp_family_multi": LpFamilyMultiConfig,
}


def check_figure_configs(quick: bool = False, config_dir=None) -> None:
    """Validate every figure config file (full and `[quick]` versions) up front, so a
    bad value stops the run before any figure is built or any folder made.

    **Raises:** `samflow.config.ConfigError` listing every problem of every file,
    one line each, naming the file and the key.
    """
    config_dir = Path(config_dir or CONFIG_DIR)
    problems = []
    for name, model in FIGURE_CONFIGS.items():
        try:
            load_figure_config(config_dir / f"{name}.toml", model, quick)
        except ValueError as err:
            problems.append(str(err))
    if problems:
        raise ConfigError("\n".join(problems))


def run_all(out_dir, *, quick: bool = False, only: list[str] | None = None, jobs: int = 1,
            config_dir=None, progress: Callable[[str], None] | None = None) -> list[FigureResult]:
    """Build the figures (all, or those named in `only`), then the report and the index.

    With `jobs` > 1 the groups of `GROUPS` run in that many worker processes
    (spawned, each compiling its own solvers), largest group first.

    **Returns:** the `FigureResult`s in the order of `FIGURES`.

    **Raises:** `ValueError` for an unknown figure name; `samflow.config.ConfigError`
    (a `ValueError`) for a bad config file (`check_figure_configs`), before any
    figure is built.
    """
    names = list(FIGURES) if not only else list(dict.fromkeys(only))
    unknown = [n for n in names if n not in FIGURES]
    if unknown:
        raise ValueError(f"unknown figure(s) {', '.join(unknown)}; known: {', '.join(FIGURES)}")
    check_figure_configs(quick, config_dir)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    groups = [[n for n in g if n in names] for g in GROUPS]
    groups = [g for g in groups if g]
    say = progress or (lambda msg: None)
    results: dict[str, FigureResult] = {}
    cdir = None if config_dir is None else str(config_dir)
    if jobs <= 1:
        for g in groups:
            for n in g:
                say(f"building {n} ...")
                results[n] = FIGURES[n](out_dir, quick=quick, config_dir=cdir)
                say(f"  {n}: {results[n].seconds:.1f} s")
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        ctx = multiprocessing.get_context("spawn")  # JAX does not survive fork
        with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as ex:
            futs = {ex.submit(_run_group, g, str(out_dir), quick, cdir): g for g in groups}
            say(f"building {len(names)} figure(s) in {len(groups)} group(s) on {jobs} processes ...")
            for f in as_completed(futs):
                for r in f.result():
                    results[r.name] = r
                    say(f"  {r.name}: {r.seconds:.1f} s")
    ordered = [results[n] for n in FIGURES if n in results]
    write_report(out_dir, ordered, quick=quick)
    write_index(out_dir, ordered, quick=quick)
    return ordered
