"""Sweep configuration: a TOML file, validated in full before any computation.

A config names the methods, the depth, the data, the (alpha, rho) grid, the save
times and the solver settings (see `configs/default.toml` for every key with a
comment). `load_config` reads and validates a file and raises `ConfigError`,
whose message lists every problem of the file, one line each, naming the field,
the bad value and what is allowed.

Modules: `_base` (`ConfigModel`, `RunConfig`, `ConfigError`, list checks shared by every
schema), `_errors` (one line per problem, `read_toml`), `_sweep` (the sweep
schema), `_experiments` (its tables `[discrete]`, `[model]`, `[init]` and the
keys of `data.generator`, with the rules between them).
"""

from ._base import (
    NAME_RULE as NAME_RULE,
    NON_FINITE_MESSAGE as NON_FINITE_MESSAGE,
    ConfigError as ConfigError,
    ConfigModel as ConfigModel,
    RunConfig as RunConfig,
    check_name as check_name,
    distinct as distinct,
    field_check as field_check,
    increasing as increasing,
)
from ._errors import format_errors as format_errors, read_toml as read_toml, validate as validate
from ._sweep import (
    _ON_GRID_RTOL as _ON_GRID_RTOL,
    DataConfig as DataConfig,
    GridAxis as GridAxis,
    GridConfig as GridConfig,
    OutputConfig as OutputConfig,
    SolverConfig as SolverConfig,
    SweepConfig as SweepConfig,
    TimeConfig as TimeConfig,
    _axis_values as _axis_values,
    _init_problems as _init_problems,
    _init_scales as _init_scales,
    _off_grid as _off_grid,
    load_config as load_config,
    parse_config as parse_config,
)

_Strict = ConfigModel

__all__ = ["ConfigError", "ConfigModel", "SweepConfig", "format_errors", "load_config", "parse_config", "read_toml"]
