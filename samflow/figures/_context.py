"""Where a figure writes, which configs it reads (schemas and loader), and the shared padded solve."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Literal

import jax
import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..config import ConfigError, ConfigModel, format_errors, read_toml
from ..datasets import Dataset, increasing_scale, single_sample
from ..solver import SolverSettings, Trajectory
from ..sweep import solve_grid


CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs" / "figures"
SETTINGS = SolverSettings()  # one settings value for every solve: shared compilations


# --- configs ---------------------------------------------------------------------


# (first save time, horizon) keys of the figure configs: save times run from the
# one to the other (`Context.log_times`), so the first must be below the horizon
# (a horizon may be a table, one per depth).
_TIME_PAIRS = (("t_min", "t1"), ("tau_min", "tau1"), ("sweep_t_min", "sweep_t1"))


def time_pair_problem(lo: str, t_min: float, hi: str, horizons) -> "str | None":
    """One line when `t_min` is not below every horizon (a number or a dict of them)."""
    values = list(horizons.values()) if isinstance(horizons, dict) else [horizons]
    bad = [h for h in values if not t_min < h]
    if not bad:
        return None
    return f"{lo}: the first save time must be below the horizon {hi}, got {lo} = {t_min!r} and {hi} = {bad[0]!r}"


class _Strict(ConfigModel):
    """Unknown keys and non-finite floats refused (`samflow.config.ConfigModel`);
    lax types (an integer where a float is expected is fine either way); a first
    save time at or past its horizon refused (`_TIME_PAIRS`)."""

    model_config = ConfigDict(strict=False)

    @model_validator(mode="after")
    def _times_increase(self):
        for lo, hi in _TIME_PAIRS:
            if getattr(self, lo, None) is not None and getattr(self, hi, None) is not None:
                problem = time_pair_problem(lo, getattr(self, lo), hi, getattr(self, hi))
                if problem:
                    raise ValueError(problem)
        return self


class MultiSampleSpec(_Strict):
    """`samflow.datasets.increasing_scale(n, d, seed, spread=...)`."""

    n: int = Field(ge=1)
    """Number of samples of the multi-sample data (`samflow.datasets.increasing_scale`)."""
    seed: int
    """Seed of the multi-sample data."""
    spread: float = Field(default=0.25, ge=0)
    """Log-spread of the multi-sample magnitudes."""


class CommonConfig(_Strict):
    """configs/figures/common.toml."""

    mu: list[float] = Field(min_length=2)
    """The single sample {(mu, +1)} of every figure."""
    n_save: int = Field(ge=8, le=2000)
    """Save times per solve (the same in every figure, so that programs are shared)."""
    chunk: int = Field(ge=1, le=4096)
    """Batch width of the figures' solves (cells per vmapped solve)."""
    multi_sample: MultiSampleSpec
    """The multi-sample data of the figures (`[multi_sample]`)."""


def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def load_figure_config(path: Path, model: type[BaseModel], quick: bool) -> Any:
    """Read a figure's TOML file, apply its `[quick]` table when `quick`, validate.

    Keys of the `[quick]` table override the top-level ones (tables are merged).

    **Raises:** `samflow.config.ConfigError` (a `ValueError`) naming the file and
    every bad or unknown key (of the full or the quick version), one line each;
    non-finite numbers are refused in every key.
    """
    raw = read_toml(path)  # one line for a missing file, another encoding or invalid TOML
    over = raw.pop("quick", {})
    quick_raw = _merge(raw, over)
    try:
        # Both versions are validated, so a typo in [quick] shows in a full run too.
        full_cfg = model.model_validate(raw)
        quick_cfg = model.model_validate(quick_raw)
    except ValidationError as err:
        raise ConfigError(format_errors(err, str(path), model)) from None
    return quick_cfg if quick else full_cfg


@dataclasses.dataclass(frozen=True)
class Context:
    """Where a figure writes, which configs it reads, and the shared settings."""

    out_dir: Path
    config_dir: Path
    quick: bool
    common: CommonConfig

    @classmethod
    def make(cls, out_dir, quick: bool = False, config_dir=None) -> "Context":
        config_dir = Path(config_dir or CONFIG_DIR)
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        common = load_figure_config(config_dir / "common.toml", CommonConfig, quick)
        return cls(out_dir, config_dir, quick, common)

    def config(self, name: str, model: type[BaseModel]) -> Any:
        return load_figure_config(self.config_dir / f"{name}.toml", model, self.quick)

    def config_ref(self, name: str) -> str:
        return f"configs/figures/{name}.toml" + (" [quick]" if self.quick else "")

    @property
    def mu(self) -> np.ndarray:
        return np.asarray(self.common.mu, dtype=np.float64)

    @property
    def d(self) -> int:
        return len(self.common.mu)

    def single_tau(self) -> Dataset:
        """{(mu, +1)} with one row (the rescaled clock needs one sample)."""
        return single_sample(self.mu)

    def single_rows(self) -> Dataset:
        """{(mu, +1)} as `multi_sample.n` identical rows: the same loss (a mean), and
        the same data shape as the multi-sample set, so one compilation serves both."""
        n = self.common.multi_sample.n
        return Dataset.from_arrays(np.tile(self.mu, (n, 1)), np.ones(n))

    def multi(self) -> Dataset:
        s = self.common.multi_sample
        return increasing_scale(s.n, self.d, s.seed, spread=s.spread)

    def log_times(self, t_min: float, t1: float) -> np.ndarray:
        ts = np.geomspace(t_min, t1, self.common.n_save)
        ts[-1] = t1
        return ts


def _init(alpha, depth: int, d: int) -> np.ndarray:
    """W(0) of shape (B, L, d): every layer at alpha, alpha (B,) or (B, d)."""
    a = np.asarray(alpha, dtype=np.float64)
    if a.ndim == 1:
        a = np.broadcast_to(a[:, None], (a.shape[0], d))
    return np.ascontiguousarray(np.broadcast_to(a[:, None, :], (a.shape[0], depth, d)))


def cost_key(W0, rho) -> np.ndarray:
    """(B,) log(max_j |W0| / rho) of each cell (W0 (B, L, d), rho (B,)): the ratio
    alpha / rho that decides a cell's regime and so its cost (collapsing and
    edge cells take many more steps), to sort cells of similar cost into the
    same lockstep batch. rho = 0 (GD) sorts last."""
    scale = np.abs(np.asarray(W0, dtype=np.float64)).reshape(len(W0), -1).max(axis=1)
    with np.errstate(divide="ignore"):
        return np.log(np.maximum(scale, 1e-300)) - np.log(np.asarray(rho, dtype=np.float64))


def _solve(ctx: Context, method: str, data: Dataset, W0, rho, ts, *, clock: str, p: "float | None" = None) -> Trajectory:
    """`solve_grid` with the run's chunk size, the batch padded to whole chunks,
    the cells sorted by `cost_key` into batches (results in the original order).

    Every call of a run has `n_save` save times and chunks of `chunk` cells, so
    the compilation is shared by all solves of a (method, clock, depth, data shape).
    The sort changes no bit (a cell's result depends on the batch width only,
    `solve_grid`); it cuts the lockstep work: the regime chart's grid took 6x
    less CPU time sorted (docs/benchmarks.md, "What was tried"). `p`: lp-SAM's
    exponent (method "lp" only; traced, so every p shares the compilation).
    """
    ts = np.asarray(ts, dtype=np.float64)
    if ts.shape != (ctx.common.n_save,):
        raise ValueError(f"internal: every solve saves {ctx.common.n_save} times, got {ts.shape}")
    W0 = np.asarray(W0, dtype=np.float64)
    B = W0.shape[0]
    rho = np.broadcast_to(np.asarray(rho, dtype=np.float64), (B,))
    c = ctx.common.chunk
    idx = np.minimum(np.arange(B + (-B) % c), B - 1)
    tr = solve_grid(method, data, W0[idx], rho[idx], ts, clock=clock, settings=SETTINGS, batch_size=c,
                    sort_key=cost_key(W0[idx], rho[idx]), **({} if p is None else {"p": p}))
    return jax.tree_util.tree_map(lambda x: np.asarray(x)[:B], tr)


MethodName = Literal["gd", "l2", "linf", "usam"]


# --- figure 3: l2-SAM regime chart over (alpha, rho) ----------------------------


class _LogAxis(_Strict):
    start: float = Field(gt=0)
    """First value (> 0)."""
    stop: float = Field(gt=0)
    """Last value (> 0)."""
    num: int = Field(ge=1)
    """Number of log-spaced points."""

    def values(self) -> np.ndarray:
        return np.geomspace(self.start, self.stop, self.num)
