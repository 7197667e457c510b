"""Every figure of the paper's kind, with the theory drawn over the simulation, and a report.

    python scripts/reproduce_figures.py --out figures/ [--quick] [--only NAMES] [--jobs N]

regenerates the figures of docs/theory.md sections 5 and 6 from the flows (one function
per figure, each taking `quick`), writes a caption file per figure, an index page
and a theory-vs-simulation report that checks each claim numerically:

| name | figure | what it checks |
|---|---|---|
| `depth1_directions` | direction of GD, l2-SAM, linf-SAM vs the max-margin directions over time | depth 1 -> l2 max-margin; depth 2 -> l1 |
| `linf_limit` | linf-SAM limit direction over per-coordinate inits, depth 2 and 3 | the rule j* = argmax mu_j (alpha_j - rho)^(L-2) |
| `regime_chart` | l2-SAM regimes over (alpha, rho), depth 2 | boundaries are lines alpha ~ rho; the predicted marks |
| `staircase` | dominant feature over (t, alpha), GD / l2 / linf, depths 2-4, one and four samples | GD flat at d; l2-SAM climbs |
| `trajectories` | beta_j and the loss, one panel per regime, plateau marked | switching order, first feature, plateau |
| `usam_ablation` | USAM vs l2-SAM | the normalization causes minor first |
| `discrete_gap` | discrete SAM vs its flow as eta shrinks | first-order gap |
| `banded` | dominant band over (t, alpha) on banded data, GD / l2-SAM, diagonal, two-layer and conv nets | GD flat at the major band; the diagonal net climbs bands; what the other nets do |
| `generic_models` | autodiff flows (`samflow.models`) against the hand-written diagonal net; two-layer and conv trajectories | same trajectories and collapse times; the two-layer collapse point |
| `lp_family` | lp-SAM regimes over (alpha/rho, p), depth 2, with the collapse, major-first and major-death edges as curves in p | major-first edge = closed form; p = 2 is l2; p -> inf tends to linf's a = 1 |
| `lp_family_multi` | the same chart on the 4-sample data, real time at one rho, with l2-SAM and linf-SAM columns beside it | major-first edge = closed form with mu = mean y_i x_i; the p = 2 column is l2-SAM's cells and edges; the largest p tends to linf's |

Data flow: config (configs/figures/*.toml) -> batched solves (`samflow.sweep.solve_grid`)
-> measurements (`samflow.analysis`) and predictions (`samflow.theory`) -> figures
and `Check`s. Each figure function can be called on its own from Python.

Seven figures (regime_chart, linf_limit, trajectories, banded, generic_models,
lp_family, lp_family_multi) read their config once, where they start: a plan function of the figure
resolves the config into a frozen plan (the grids, save times, data and tolerances
it uses); `measure` takes the plan and returns a frozen run (the measured numbers
and the plan), and the checks, the drawing and the caption take that run
(`_report._planned_figure`; generic_models plans its own config with banded's);
nothing after the plan reads the config. The four smaller figures (staircase,
depth1_directions, usam_ablation, discrete_gap) have no plan: one function loads
the config and reads it as it solves, measures, checks and draws.

Compilation of the solver dominates a cold run (about half of it: tens of
seconds per (method, clock, depth, data shape) on a loaded 2-core machine), so
every solve of a run uses the same chunk size and number of save times, and
`run_all` spreads the figures over worker processes in groups that share
compilations; the persistent compile cache (`samflow._util.cache`) keeps the
programs for the next run. The solves sort their cells by alpha / rho into
lockstep batches (`_context.cost_key`; no bit changes). Where the time goes:
docs/benchmarks.md.
"""

from ._context import (
    CONFIG_DIR as CONFIG_DIR,
    SETTINGS as SETTINGS,
    MultiSampleSpec as MultiSampleSpec,
    CommonConfig as CommonConfig,
    load_figure_config as load_figure_config,
    Context as Context,
    MethodName as MethodName,
)
from ._report import (
    Check as Check,
    FigureResult as FigureResult,
    report_table as report_table,
    _summary as _summary,
    write_report as write_report,
    write_index as write_index,
)
from ._draw import (
    DPI as DPI,
    _staircase_cmap as _staircase_cmap,
    _staircase_handles as _staircase_handles,
)
from ._measure import (
    TIED as TIED,
    MISSING as MISSING,
    staircase_ok as staircase_ok,
)
from ._directions import (
    DirectionsConfig as DirectionsConfig,
    depth1_directions as depth1_directions,
)
from ._linf_limit import (
    LinfConfig as LinfConfig,
    _linf_cmap as _linf_cmap,
    linf_limit as linf_limit,
)
from ._regime_chart import (
    RegimeChartConfig as RegimeChartConfig,
    regime_edges as regime_edges,
    regime_chart as regime_chart,
)
from ._staircase import (
    StaircaseConfig as StaircaseConfig,
    staircase as staircase,
)
from ._trajectories import (
    TrajectoriesConfig as TrajectoriesConfig,
    trajectories as trajectories,
)
from ._usam_ablation import (
    UsamConfig as UsamConfig,
    usam_ablation as usam_ablation,
)
from ._discrete_gap import (
    DiscreteGapConfig as DiscreteGapConfig,
    discrete_gap as discrete_gap,
)
from ._banded import (
    BandedConfig as BandedConfig,
    BANDED_MODELS as BANDED_MODELS,
    banded_heatmaps as banded_heatmaps,
)
from ._generic_models import (
    GenericModelsConfig as GenericModelsConfig,
    generic_models as generic_models,
)
from ._lp_family import (
    LpFamilyConfig as LpFamilyConfig,
    lp_family as lp_family,
)
from ._lp_family_multi import (
    LpFamilyMultiConfig as LpFamilyMultiConfig,
    lp_family_multi as lp_family_multi,
)
from ._runner import (
    FIGURES as FIGURES,
    GROUPS as GROUPS,
    FIGURE_CONFIGS as FIGURE_CONFIGS,
    check_figure_configs as check_figure_configs,
    run_all as run_all,
)

__all__ = [
    "Check",
    "FigureResult",
    "FIGURES",
    "CONFIG_DIR",
    "depth1_directions",
    "linf_limit",
    "regime_chart",
    "staircase",
    "trajectories",
    "usam_ablation",
    "discrete_gap",
    "banded_heatmaps",
    "generic_models",
    "lp_family",
    "lp_family_multi",
    "run_all",
    "report_table",
    "write_index",
]
