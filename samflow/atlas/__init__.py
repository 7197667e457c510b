"""The regime atlas: where the three regimes of SAM lie across depth, dimension and data.

`python -m samflow.atlas configs/atlas.toml [--quick] [--out DIR]` computes, for
l2-SAM and linf-SAM from the equal init w^(l)(0) = alpha 1, the collapse edge
(regime 1/2) and the major-first edge (regime 2/3) as values of a = alpha / rho
(`samflow.edges`), for every depth, dimension d, spectrum mu (linear, geometric,
random) and data kind (one sample, n samples of `samflow.datasets.increasing_scale`),
with the theory's marks beside them (`samflow.theory`, docs/theory.md s.3), and
the time of the staircase (the last switch) against a. It writes

- `atlas.nc`: the edges, their brackets, the number of solves (dims method,
  samples, depth, d, spectrum; see the variables' `description`; an edge whose
  bisection did not converge is NaN, its bracket kept), `tables.md`, and
- `fig_edges_vs_depth.png`, `fig_edges_vs_d.png`, `fig_edges_vs_gap.png`,
  `fig_width.png`, `fig_staircase_time.png`.

Data flow: config (`load_atlas_config`) -> edges (`compute_atlas`) -> netCDF ->
figures (`draw_atlas`, which reads only the dataset).
"""

from ._cli import main, run_atlas
from ._compute import compute_atlas, l2_first_leader_mark, spectra
from ._config import AtlasConfig, Spectra, load_atlas_config
from ._figures import draw_atlas

__all__ = ["AtlasConfig", "Spectra", "compute_atlas", "draw_atlas", "l2_first_leader_mark", "load_atlas_config", "main",
           "run_atlas", "spectra"]


def __getattr__(name):
    """`quick_config`, 0.2's name of `AtlasConfig.quick` (a FutureWarning; `samflow.atlas._config`)."""
    if name == "quick_config":
        from . import _config

        return _config.__getattr__(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
