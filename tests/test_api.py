"""The public contract of samflow, pinned before the restructuring (issue 13).

Every name of `samflow/__init__.py`, every import path that the README, the docs, the tests,
the scripts and the experiments use, the command lines with `--help`, the keys of
the sweep config and the layout of the results file. A pure restructuring keeps
all of these; a test here that fails names what a user's code would lose.
(The numbers themselves are pinned bit for bit by `tests/test_pin.py`.)
"""

import importlib
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from pydantic import BaseModel

import samflow as sf

ROOT = Path(__file__).resolve().parents[1]

PUBLIC = [
    "Clock", "Dataset", "Exponential", "Logistic", "Method", "STATUS_MESSAGES",
    "SolverSettings", "Status", "Summary", "Trajectory", "beta", "get_loss", "grad_loss",
    "init_weights", "loss_value", "perturbation", "prod_excl", "real_time_velocity",
    "rescaled_velocity", "residual", "single_sample", "solve", "solve_cell", "summarize", "unit_l2",
    "velocity",
]

# module -> names imported from it by README.md, docs/, tests/, scripts/ and
# samflow/experiments/ (collected with ast at f9451ab + issue 12), plus the module
# attributes they read (analysis.X, theory.X, figures.X, ...).
IMPORT_PATHS = {
    "samflow": ["Status", "analysis", "figures", "models", "plots", "store", "sweep", "theory"],
    "samflow.analysis": [
        "EdgeSearch", "collapse_edge", "major_first_edge",
        "band_dominance", "direction_distance", "dominant_index", "limit_direction",
        "max_margin_direction", "plateau", "regime_label", "regime_label_from_dominant",
        "switching_times", "switch_times", "SwitchTimes", "tied", "visited_sequence",
    ],
    "samflow.switches": ["REFINE_RTOL", "SwitchTimes", "locate_switches", "switches_of"],
    "samflow.config": [
        "ConfigError", "ConfigModel", "NON_FINITE_MESSAGE", "SweepConfig", "load_config",
        "parse_config", "read_toml", "validate",
    ],
    "samflow.datasets": ["Dataset", "banded", "increasing_scale", "load_dataset", "save_dataset", "single_sample"],
    "samflow.diagonal_net": ["beta", "grad_loss", "init_weights", "loss_value", "margins", "prod_excl", "residual"],
    "samflow.discrete": ["flow_gap", "run_discrete", "save_iterations"],
    "samflow.atlas": ["main"],
    "samflow.edges": [
        "COLLAPSE_SEARCH", "EdgeResult", "EdgeSearch", "MAJOR_FIRST_SEARCH", "collapse_edge", "major_death_edge",
        "major_first_edge",
    ],
    "samflow.experiments": ["cnn", "cnn_study"],
    "samflow.experiments.cnn_study": ["main", "run_study", "summarize", "t_interval"],
    "samflow.experiments.cnn": ["main"],
    "samflow.experiments.cnn_config": ["CnnConfig", "load_cnn_config", "parse_cnn_config"],
    "samflow.experiments.convnet": ["ConvNet", "make_convnet", "param_norm", "scale_init"],
    "samflow.experiments.gradcam": ["area_shares", "gradcam", "gradcam_batch", "major_mask", "mass_shares"],
    "samflow.experiments.images": [
        "DataNotFoundError", "ImageSet", "load_cifar10", "load_dataset", "load_digits",
        "load_mnist_subset", "load_svhn", "make_task",
    ],
    "samflow.experiments.train": ["NonFiniteError", "evaluate", "make_epoch", "make_optimizer", "normalize_safe"],
    "samflow.figures": [
        "BandedConfig", "CommonConfig", "DirectionsConfig", "DiscreteGapConfig", "FIGURES",
        "FIGURE_CONFIGS", "GenericModelsConfig", "LinfConfig", "LpFamilyConfig", "LpFamilyMultiConfig",
        "RegimeChartConfig",
        "StaircaseConfig", "TrajectoriesConfig", "UsamConfig", "check_figure_configs",
        "load_figure_config", "report_table", "run_all", "staircase_ok",
    ],
    "samflow.flows": [
        "Method", "log_coords_eligible", "log_velocity", "perturbation", "real_time_velocity",
        "rescaled_velocity", "unit_l2", "velocity",
    ],
    "samflow.losses": ["Exponential", "Logistic", "get_loss"],
    "samflow.merge": ["SliceError", "main", "merge_slices", "slice_cells", "slice_file_name"],
    "samflow.models": [
        "collapse_ratio", "diagonal_network", "linear_conv", "model_grad", "model_perturbation",
        "model_velocity", "run_model_discrete", "solve_model", "two_layer_linear",
    ],
    "samflow.plots": [
        "MISSING_COLOR", "NO_VALUE", "axis_scale", "cell_edges", "no_value_label",
        "normalized_beta", "plot_dominant_heatmap", "plot_regime_chart", "plot_sweep",
        "plot_trajectories", "regime_chart_edges", "regime_image", "status_text",
    ],
    "samflow.solver": ["Clock", "SolverSettings", "Summary", "Trajectory", "batch_cells", "solve", "solve_cell", "summarize"],
    "samflow.status": ["STATUS_MESSAGES", "Status"],
    "samflow.store": ["code_stamp", "read_results", "to_dataset", "write_results"],
    "samflow.sweep": [
        "NO_STAMP", "build_data", "config_key", "main", "memory_preflight", "results_layout", "run_sweep", "solve_grid",
        "use_cpu_cores", "resolve_devices", "cell_bytes", "chunk_cells", "check_memory", "results_bytes",
        "available_memory_bytes", "batch_width", "sharded_solver",
    ],
    "samflow.theory": [
        "gd_depth2_symmetric", "l1_max_margin_single", "l2_alpha_marks", "l2_first_band",
        "l2_first_dominant", "l2_growth_rate", "l2_growth_threshold", "l2_major_band_mark",
        "l2_max_margin_single", "linf_blowup_time", "linf_depth2_symmetric", "linf_limit_index",
        "linf_zero_time", "lp_alpha_marks", "lp_first_dominant", "lp_growth_rates", "lp_major_shrink_mark",
    ],
}

# Module paths removed in 0.3.0 (deprecated through 0.2.x; docs/layout.md, "Removed in 0.3.0"):
# old module -> the module that holds its names.
REMOVED_PATHS = {
    "samflow.data": "samflow.datasets",
    "samflow.model": "samflow.diagonal_net",
    "samflow.solve": "samflow.solver",
    "samflow.parallel": "samflow.sweep",
}

# The keys of a sweep config (TOML tables as dotted prefixes): docs/configs.md, "The keys at a glance".
CONFIG_KEYS = {
    "name", "description", "methods", "depth", "loss", "clock",
    "data.mu", "data.X", "data.y", "data.file",
    "grid.alpha", "grid.rho", "grid.alpha_relative_to_rho",
    "time.t1", "time.num", "time.spacing", "time.t_min", "time.ts",
    "solver.solver", "solver.rtol", "solver.atol", "solver.max_steps", "solver.capture_radius",
    "solver.blowup_log10", "solver.max_runs", "solver.coords", "solver.reduce", "solver.batch_size",
    "solver.memory_budget_mb", "solver.chunk_size",
    "output.dir", "output.figures", "output.plot_rho", "output.trajectory_alphas",
    "output.save_weights", "output.save", "output.switch_times", "output.switch_refine",
    # issue 15: generators, generic models, per-layer inits, discrete methods
    "data.generator", "data.n", "data.d", "data.seed", "data.n_bands", "data.intensities", "data.scales",
    "data.spread", "data.noise",
    "model.name", "model.width", "model.channels", "model.kernel", "model.seed",
    "init.W0", "init.alpha_j",
    "discrete.eta",
    # issue 27: lp-SAM's exponents
    "lp.p",
}

# The results file (full save): dims, coordinates, variables with their dims.
RESULT_DIMS = {"flow", "alpha", "rho", "time", "coord", "layer", "sample", "switch"}  # docs/results.md's list
RESULT_VARS = {
    "beta": ("flow", "alpha", "rho", "time", "coord"),
    "loss": ("flow", "alpha", "rho", "time"),
    "real_time": ("flow", "alpha", "rho", "time"),
    "status": ("flow", "alpha", "rho"),
    "event_time": ("flow", "alpha", "rho"),
    "event_real_time": ("flow", "alpha", "rho"),
    "collapse_direction": ("flow", "alpha", "rho", "coord"),
    "switch_time": ("flow", "alpha", "rho", "switch"),
    "switch_time_err": ("flow", "alpha", "rho", "switch"),
    "switch_real_time": ("flow", "alpha", "rho", "switch"),
    "switch_from": ("flow", "alpha", "rho", "switch"),
    "switch_to": ("flow", "alpha", "rho", "switch"),
    "switch_first": ("flow", "alpha", "rho"),
    "switch_count": ("flow", "alpha", "rho"),
    "switch_ok": ("flow", "alpha", "rho"),
}
RESULT_ATTRS = {"config", "config_key", "code_stamp", "git_commit", "versions"}


def test_public_names():
    assert sorted(sf.__all__) == sorted(PUBLIC)
    for name in PUBLIC:
        assert getattr(sf, name) is not None, name
    assert isinstance(sf.__version__, str)


@pytest.mark.parametrize("module", sorted(IMPORT_PATHS))
def test_import_paths(module):
    mod = importlib.import_module(module)

    def importable(name):  # `from module import name`: an attribute or a submodule
        if hasattr(mod, name):
            return True
        try:
            importlib.import_module(f"{module}.{name}")
            return True
        except ImportError:
            return False

    missing = [n for n in IMPORT_PATHS[module] if not importable(n)]
    assert not missing, f"{module} lost {missing}"


def test_the_reference_documents_the_plans_and_the_atlas_sections():
    """The API reference renders a module's `__all__`: the study's plan (`StudyPlan`,
    `StudyConfig.plan()`, `.quick()`) and the atlas's `Spectra` (what `spectra` takes
    since 0.3.0) were in none, and docs/reference/experiments.md did not render
    `samflow.experiments.cnn_study_config`."""
    from samflow import atlas
    from samflow.experiments import cnn_study, cnn_study_config

    assert "Spectra" in atlas.__all__ and atlas.Spectra is atlas.AtlasConfig.model_fields["spectra"].annotation
    assert {"StudyConfig", "StudyPlan"} <= set(cnn_study.__all__)
    assert {"StudyConfig", "StudyPlan"} <= set(cnn_study_config.__all__)
    assert callable(cnn_study.StudyConfig.plan) and callable(cnn_study.StudyConfig.quick)
    page = (ROOT / "docs" / "reference" / "experiments.md").read_text().splitlines()
    assert "::: samflow.experiments.cnn_study_config" in page and "::: samflow.atlas" in page
    # A plain module renders every public-looking name, __all__ or not: the page lists the
    # study config's members, without `quick` (StudyConfig.quick's old name, deprecated).
    members = page[page.index("::: samflow.experiments.cnn_study_config") + 2]
    assert members.strip().startswith("members: [") and "quick" not in members
    listed = {m.strip() for m in members.split("[", 1)[1].rstrip("]").split(",")}
    assert set(cnn_study_config.__all__) - {"ConfigError"} <= listed  # a new public name is listed too


def test_top_level_names_are_the_module_objects():
    """`sf.solve` is the function, and the same object as `samflow.solver.solve`."""
    assert callable(sf.solve) and sf.solve.__name__ == "solve"
    assert sf.solve is importlib.import_module("samflow.solver").solve
    assert sf.Status is importlib.import_module("samflow.status").Status
    assert sf.SolverSettings is importlib.import_module("samflow.solver").SolverSettings


def test_solve_is_the_function_and_the_module_is_solver():
    """`samflow.solver` is the module, `sf.solve` the function, also in a fresh
    interpreter after `import samflow.solver` (a submodule imported after the package
    sets the package attribute of its own name: none is named `solve` since 0.3.0)."""
    fresh = ("import samflow, samflow.solver, samflow.sweep; "
             "print(type(samflow.solve).__name__, samflow.solve is samflow.solver.solve)")
    out = subprocess.run([sys.executable, "-c", fresh], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["function", "True"]


@pytest.mark.parametrize("old", sorted(REMOVED_PATHS))
def test_removed_paths_are_gone_and_the_new_ones_hold_their_names(old):
    """0.3.0 removed the module paths deprecated through 0.2.x: importing one fails
    (no silent shim left behind), and the module that replaced it imports."""
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(old)
    assert importlib.import_module(REMOVED_PATHS[old]).__all__


def test_no_docstring_or_page_names_a_removed_module_path():
    """The module paths of REMOVED_PATHS are gone since 0.3.0: docstrings still sent readers
    to `samflow.solve.batch_cells` / `samflow.solve.solve_cell`, and the API reference
    called `samflow/solve.py` "the deprecated module path". A mention of a removed file
    says it was removed."""
    import re

    removed = "|".join(re.escape(old.removeprefix("samflow.")) for old in REMOVED_PATHS)
    attribute = re.compile(rf"samflow\.({removed})\.[A-Za-z_]")
    file = re.compile(rf"samflow/({removed})\.py")
    texts = sorted((ROOT / "samflow").rglob("*.py")) + sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md"]
    bad = []
    for path in texts:
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if attribute.search(line) or (file.search(line) and "removed" not in line):
                bad.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()}")
    assert not bad, "removed module paths named as if they were there:\n" + "\n".join(bad)


@pytest.mark.parametrize(
    "argv",
    [
        ["-m", "samflow.sweep", "--help"],
        ["-m", "samflow.merge", "--help"],
        ["-m", "samflow.experiments.cnn", "--help"],
        ["-m", "samflow.experiments.cnn_study", "--help"],
        ["-m", "samflow.atlas", "--help"],
        [str(ROOT / "scripts" / "reproduce_figures.py"), "--help"],
    ],
    ids=["sweep", "merge", "cnn", "cnn_study", "atlas", "reproduce_figures"],
)
def test_command_lines_help(argv):
    out = subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert "usage:" in out.stdout
    assert "Traceback" not in out.stderr


def test_sweep_help_lists_its_flags():
    from samflow.sweep import main

    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0


def _keys(model: type[BaseModel], prefix: str = "") -> set[str]:
    out = set()
    for name, field in model.model_fields.items():
        key = field.alias or name
        ann = field.annotation
        sub = [a for a in getattr(ann, "__args__", (ann,)) if isinstance(a, type) and issubclass(a, BaseModel)]
        # a table of the config (data, grid, time, solver, output) is walked; an inline
        # value table (a grid axis {start, stop, num, scale}) is a value, not keys
        if sub and not prefix and name in ("data", "grid", "time", "solver", "output", "model", "init", "discrete", "lp"):
            out |= _keys(sub[0], f"{key}.")
        else:
            out.add(prefix + key)
    return out


def test_config_keys():
    from samflow.config import SweepConfig

    assert _keys(SweepConfig) == CONFIG_KEYS


def test_default_config_lists_every_key():
    """configs/default.toml names every key (set, or commented out) for a newcomer to copy."""
    import re

    text = (ROOT / "configs" / "default.toml").read_text()
    for key in CONFIG_KEYS:
        leaf = re.escape(key.split(".")[-1])
        assert re.search(rf"\b{leaf} =", text), key


def test_results_file_layout(tmp_path):
    from samflow.config import parse_config
    from samflow.store import read_results, write_results
    from samflow.sweep import run_sweep

    cfg = parse_config(
        {
            "name": "api",
            "methods": ["gd", "l2"],
            "depth": 2,
            "data": {"mu": [0.5, 1.0]},
            "grid": {"alpha": [0.5, 2.0], "rho": [0.1], "alpha_relative_to_rho": True},
            "time": {"t1": 1.0, "num": 4},
            "output": {"dir": str(tmp_path), "figures": False},
        }
    )
    ds = run_sweep(cfg, progress=False)
    path = write_results(ds, tmp_path / "results.nc")
    back = read_results(path)
    assert RESULT_DIMS <= set(back.dims)
    for var, dims in RESULT_VARS.items():
        assert var in back.data_vars, var
        assert back[var].dims == dims, (var, back[var].dims)
    assert list(back["flow"].values) == ["gd", "l2"]
    assert back.sizes["alpha"] == 2 and back.sizes["rho"] == 1 and back.sizes["time"] == 4
    assert back.sizes["coord"] == 2
    # d = 2: 2 d + 2 switch slots; the leader (feature 2 for GD, tied at 0) never changes.
    assert back.sizes["switch"] == 6 and str(back["switch_to"].dtype) == "int8"
    assert bool(back["switch_ok"].all()) and int(back["switch_count"].sel(flow="gd").max()) == 0
    # The leader at the start: feature 2 for GD (the faster at the tie); for l2 the
    # theory's first dominant feature (minor first at alpha/rho = 0.5, docs/theory.md s.3).
    from samflow import theory

    assert (back["switch_first"].sel(flow="gd").values == 2).all()
    np.testing.assert_array_equal(back["switch_first"].sel(flow="l2").values[:, 0],
                                  theory.l2_first_dominant(np.array([0.5, 1.0]), a=np.array([0.5, 2.0])))
    assert RESULT_ATTRS <= set(back.attrs), RESULT_ATTRS - set(back.attrs)
    assert "eta" not in back.coords  # only with discrete methods
    # The key follows from the stored config alone (`config_key` takes its JSON values).
    import json

    from samflow.sweep import config_key

    assert config_key(json.loads(back.attrs["config"])) == back.attrs["config_key"]
    with pytest.raises(TypeError, match="model_dump"):
        config_key(cfg)


def test_results_file_layout_discrete(tmp_path):
    """Discrete methods are entries of the flow axis, with the coordinate eta (flow,)."""
    from samflow.config import parse_config
    from samflow.store import read_results, write_results
    from samflow.sweep import run_sweep

    cfg = parse_config(
        {
            "methods": ["gd", "discrete_gd", "discrete_l2"],
            "discrete": {"eta": [0.1, 0.05]},
            "data": {"mu": [0.5, 1.0]},
            "grid": {"alpha": [0.5, 2.0], "rho": [0.1]},
            "time": {"t1": 1.0, "num": 4, "spacing": "linear"},
        }
    )
    back = read_results(write_results(run_sweep(cfg, progress=False), tmp_path / "results.nc"))
    for var, dims in RESULT_VARS.items():
        assert back[var].dims == dims, (var, back[var].dims)
    assert list(back["flow"].values) == [
        "gd", "discrete_gd eta=0.1", "discrete_gd eta=0.05", "discrete_l2 eta=0.1", "discrete_l2 eta=0.05",
    ]
    eta = back["eta"].values
    assert back["eta"].dims == ("flow",) and np.isnan(eta[0]) and list(eta[1:]) == [0.1, 0.05, 0.1, 0.05]
    # The flow beside discrete entries still gets its exact switch times (the sweep
    # once looked them up by Method while the results were keyed by label, and
    # silently stored none); discrete entries have none (switch_ok False).
    ok = back["switch_ok"].values
    assert ok[0].all() and not ok[1:].any()
    assert (back["switch_count"].values[0] == 0).all()  # GD from equal inits: d leads throughout


def test_the_package_and_its_commands_import_nothing_deprecated():
    """`import samflow` and the command-line modules raise no DeprecationWarning (a
    warning on every import would teach users to ignore it)."""
    ok = subprocess.run([sys.executable, "-W", "error::DeprecationWarning", "-c",
                         "import samflow, samflow.sweep, samflow.switches, samflow.models, samflow.discrete, samflow.edges"],
                        capture_output=True, text=True, cwd=ROOT)
    assert ok.returncode == 0, ok.stderr[-1500:]