"""The sweep config's experiment tables: discrete methods (`[discrete]`), models
other than the diagonal net (`[model]`), data generators (`data.generator`) and
per-layer / per-coordinate inits (`[init]`), with the rules between them and
the rest of the config (`experiment_problems`), one line each.

Shapes chosen (see docs/configs.md, "The keys at a glance"):

- A discrete algorithm is a *method*: `methods = ["l2", "discrete_l2"]`, its
  step sizes in `[discrete] eta = [...]`. The methods list is already the axis
  of what runs side by side (the results' `flow` axis, one heat map each), and
  eta belongs to the iterations only, so a flow-only config never sees it.
- `model = "two_layer_linear"` (a name) or a `[model]` table (`name`, and the
  model's own keys `width`, `channels`, `kernel`, `seed`).
- `data.generator = "banded" | "increasing_scale"` with the generator's keys
  in the same `[data]` table (n, d, seed, ...), as `data.mu` or `data.file`.
- `[init] W0 = [[...], ...]` (depth x d) or `alpha_j = [...]` (d,): the
  pattern of the init, multiplied by the grid's alpha in every cell.
"""

from __future__ import annotations

from typing import Annotated, Literal

import numpy as np
from pydantic import Field, field_validator, model_validator

from .._engine.settings import stuck_inits
from ._base import ConfigModel, field_check

DISCRETE_PREFIX = "discrete_"
FLOW_METHODS = ("gd", "l2", "lp", "linf", "usam")
DISCRETE_METHODS = tuple(DISCRETE_PREFIX + m for m in FLOW_METHODS)
MethodName = Literal["gd", "l2", "lp", "linf", "usam", "discrete_gd", "discrete_l2", "discrete_lp", "discrete_linf",
                     "discrete_usam"]
#: The methods that take the exponent p of `[lp]`.
LP_METHODS = ("lp", DISCRETE_PREFIX + "lp")

#: Most iterations (horizon / eta) a discrete cell may take.
MAX_ITERATIONS = 10**9


def _listed(v):
    """A number stands for the list of that number (a list keeps one error line per value)."""
    return [v] if isinstance(v, (int, float)) and not isinstance(v, bool) else v


def _distinct_in_range(values: list, key: str, one: str, ok, bad_text: str, what: str) -> None:
    """Refuse (`ValueError`, one line naming `key`) an empty list, a value for which
    `ok` is false, or a repeated value."""
    if not values:
        raise ValueError(f"{key} is empty: give at least one {one}")
    bad = [x for x in values if not ok(x)]
    if bad:
        raise ValueError(f"{key} {bad_text}, got {bad[0]!r}")
    if len(set(values)) != len(values):
        raise ValueError(f"{key} must not repeat {what}, got {values}")


class DiscreteConfig(ConfigModel):
    """`[discrete]`: `eta`, the step size(s) of the discrete methods: a number > 0 or a
    list of distinct numbers > 0 (each discrete method runs once per eta)."""

    eta: list[float]
    """Step size(s) > 0 of the discrete methods, a number or a list of distinct numbers: each discrete method
    runs once per eta (iteration k at t = k eta)."""

    # `eta = 0.1` is short for `eta = [0.1]` (a list keeps one error line per value).
    _one = field_validator("eta", mode="before")(lambda cls, v: _listed(v))
    _positive = field_check("eta", check=lambda v: _distinct_in_range(
        v, "discrete.eta", "step size > 0", lambda x: x > 0, "must be > 0 (a step size)", "a step size"))

    def etas(self) -> np.ndarray:
        """The step sizes, float64 (n_eta,), in the order given."""
        return np.atleast_1d(np.asarray(self.eta, dtype=np.float64))


class LpConfig(ConfigModel):
    """`[lp]`: `p`, the exponent(s) of the lp ball of the methods "lp" and "discrete_lp":
    a number in (1, inf) or a list of distinct ones (each runs once per p)."""

    p: list[float]
    """Exponent(s) p of the lp-SAM ball ||eps||_p <= rho, each a number with 1 < p < inf (p = 2 is "l2", the
    limit p -> inf is "linf"), a number or a list of distinct numbers: "lp" (and "discrete_lp") run once per p,
    each an entry "lp p=3" of the results' `flow` axis, also for a single p."""

    # `p = 3` is short for `p = [3]`, as discrete.eta.
    _one = field_validator("p", mode="before")(lambda cls, v: _listed(v))
    _in_range = field_check("p", check=lambda v: _distinct_in_range(
        v, "lp.p", "exponent p in (1, inf)", lambda x: 1 < x < float("inf"),
        "must be a number with 1 < p < inf (the lp ball's exponent; \"linf\" is p = inf)", "an exponent"))

    def ps(self) -> np.ndarray:
        """The exponents, float64 (n_p,), in the order given."""
        return np.atleast_1d(np.asarray(self.p, dtype=np.float64))


MODEL_KEYS = {"diagonal": (), "two_layer_linear": ("width", "seed"), "linear_conv": ("channels", "kernel", "seed")}
_REQUIRED = {"two_layer_linear": ("width",), "linear_conv": ("channels", "kernel")}
_MEANING = {"width": "the hidden width k", "channels": "the number of channels C", "kernel": "the kernel size K"}


class ModelConfig(ConfigModel):
    """`model`: the network. `model = "diagonal"` (default: the L-layer diagonal net,
    `samflow.solve`) or a table `[model] name = ...` with the model's own keys:

    - `two_layer_linear`: `width` k (f = <v, U x>, `samflow.models.two_layer_linear`),
      `seed` (optional: None gives U = eye(k, d), v = 1, an int normal draws);
    - `linear_conv`: `channels` C, `kernel` K (`samflow.models.linear_conv`), `seed`
      (optional: None gives w = 1, v = 1).

    Every weight is the model's init at scale 1 times the grid's alpha.
    """

    name: Literal["diagonal", "two_layer_linear", "linear_conv"] = "diagonal"
    """Values: "diagonal": the L-layer diagonal net (`samflow.solve`); "two_layer_linear": f = <v, U x>;
    "linear_conv": a linear conv net (both `samflow.models`, two layers, clock t)."""
    width: Annotated[int, Field(ge=1, le=100_000)] | None = None
    """The hidden width k of two_layer_linear (required there)."""
    channels: Annotated[int, Field(ge=1, le=10_000)] | None = None
    """The number of channels C of linear_conv (required there)."""
    kernel: Annotated[int, Field(ge=1, le=100_000)] | None = None
    """The kernel size K of linear_conv (required there)."""
    seed: Annotated[int, Field(ge=0)] | None = None
    """Init drawn from N(0, 1) with this seed (times alpha); unset: the model's deterministic init."""

    @model_validator(mode="after")
    def _own_keys(self):
        lines = []
        for key in ("width", "channels", "kernel", "seed"):
            if getattr(self, key) is not None and key not in MODEL_KEYS[self.name]:
                owners = [m for m, keys in MODEL_KEYS.items() if key in keys]
                lines.append(f"{key}: a key of model {' / '.join(owners)}, not of model {self.name}; remove it")
        for key in _REQUIRED.get(self.name, ()):
            if getattr(self, key) is None:
                lines.append(f"{key}: required by model {self.name} ({_MEANING[key]}); give it in [model]")
        if lines:
            raise ValueError("\n".join(lines))
        return self

    @property
    def generic(self) -> bool:
        """True for a model solved by `samflow.models` (not the diagonal net)."""
        return self.name != "diagonal"

    def build(self, d: int):
        """The `samflow.models.Model` of this table for inputs of dimension d."""
        from .. import models

        if self.name == "two_layer_linear":
            return models.two_layer_linear(d, self.width)
        if self.name == "linear_conv":
            return models.linear_conv(self.channels, self.kernel, d)
        raise ValueError("model diagonal is solved by samflow.solve, not samflow.models")


GENERATOR_KEYS = {
    "banded": ("n", "d", "seed", "n_bands", "intensities", "spread", "noise"),
    "increasing_scale": ("n", "d", "seed", "scales", "spread", "noise"),
}
_ALL_GENERATOR_KEYS = ("n", "d", "seed", "n_bands", "intensities", "scales", "spread", "noise")


class GeneratorKeys(ConfigModel):
    """The keys of `data.generator` (`samflow.datasets`), in the `[data]` table:

    - `generator`: "banded" (`samflow.datasets.banded`) or "increasing_scale"
      (`samflow.datasets.increasing_scale`).
    - `n` samples, `d` coordinates, `seed` (all three required): the same seed
      gives the same data.
    - banded: `n_bands` (default 3), `intensities` (n_bands,) increasing;
      increasing_scale: `scales` (d,) increasing.
    - both: `spread` (log-sd of the magnitudes), `noise` (>= 0).
    """

    generator: Literal["banded", "increasing_scale"] | None = None
    """Values: "banded" (`samflow.datasets.banded`) or "increasing_scale" (`samflow.datasets.increasing_scale`): data
    drawn from a seed, no file."""
    n: Annotated[int, Field(ge=1, le=10_000_000)] | None = None
    """Number of samples (required by a generator)."""
    d: Annotated[int, Field(ge=1, le=1_000_000)] | None = None
    """Number of coordinates (required by a generator)."""
    seed: Annotated[int, Field(ge=0)] | None = None
    """The generator's seed (required): the same seed gives the same data."""
    n_bands: Annotated[int, Field(ge=1, le=100_000)] | None = None
    """banded: number of bands of features (default 3)."""
    intensities: list[float] | None = None
    """banded: the bands' intensities, increasing, one per band."""
    scales: list[float] | None = None
    """increasing_scale: the features' scales, increasing, one per coordinate (default j / d)."""
    spread: Annotated[float, Field(ge=0)] | None = None
    """Log-standard deviation of the magnitudes (both generators)."""
    noise: Annotated[float, Field(ge=0)] | None = None
    """Additive noise level >= 0 (both generators)."""

    def generator_problems(self) -> list[str]:
        """Lines for keys of the other generator, missing keys, or keys without a generator."""
        given = [k for k in _ALL_GENERATOR_KEYS if getattr(self, k) is not None]
        if self.generator is None:
            return [f"{k}: a key of data.generator; add generator = \"banded\" or \"increasing_scale\", or remove it"
                    for k in given]
        own = GENERATOR_KEYS[self.generator]
        lines = [
            f"{k}: not a key of data.generator = \"{self.generator}\" (it takes {', '.join(own)}); remove it"
            for k in given if k not in own
        ]
        lines += [f"{k}: required by data.generator = \"{self.generator}\"" for k in ("n", "d", "seed")
                  if getattr(self, k) is None]
        return lines

    def generate(self):
        """The generated `samflow.Dataset` (None without a generator).

        **Raises:** `ValueError` with the generator's message, prefixed by the key.
        """
        from .. import datasets

        if self.generator is None:
            return None
        opts = {k: getattr(self, k) for k in ("spread", "noise") if getattr(self, k) is not None}
        try:
            if self.generator == "banded":
                if self.n_bands is not None:
                    opts["n_bands"] = self.n_bands
                data, _ = datasets.banded(self.n, self.d, self.seed, intensities=self.intensities, **opts)
                return data
            return datasets.increasing_scale(self.n, self.d, self.seed, scales=self.scales, **opts)
        except ValueError as err:
            raise ValueError(f"data.generator = \"{self.generator}\": {err}") from None


class InitConfig(ConfigModel):
    """`[init]`: the pattern of the init, multiplied by the grid's alpha (diagonal net only).

    - `W0 = [[...], ...]`: per layer and coordinate, shape (depth, d):
      w^(l)_j(0) = alpha * W0[l][j].
    - `alpha_j = [...]`: per coordinate, shape (d,): every layer starts at
      alpha * alpha_j (all equal to 1 is the plain grid).
    """

    W0: list[list[float]] | None = None
    """The init per layer and coordinate, shape (depth, d): `w^(l)_j(0) = alpha * W0[l][j]`. Entries may be
    negative or 0."""
    alpha_j: list[float] | None = None
    """The init per coordinate, shape (d,): every layer of coordinate j starts at alpha x alpha_j."""

    @model_validator(mode="after")
    def _one(self):
        given = [k for k in ("W0", "alpha_j") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of init.W0 (depth x d) or init.alpha_j (d,); got "
                             + (", ".join(given) or "none"))
        if self.W0 is not None and (not self.W0 or not self.W0[0] or len({len(r) for r in self.W0}) != 1):
            raise ValueError("init.W0 must be a non-empty list of rows (one per layer) of equal length d")
        if self.alpha_j is not None and not self.alpha_j:
            raise ValueError("init.alpha_j must not be empty: give one number per coordinate")
        return self

    def pattern(self, depth: int, d: int) -> np.ndarray:
        """The (depth, d) float64 pattern (checked by `experiment_problems`)."""
        if self.W0 is not None:
            return np.asarray(self.W0, dtype=np.float64)
        return np.broadcast_to(np.asarray(self.alpha_j, dtype=np.float64), (depth, d)).copy()


def experiment_problems(cfg, d: "int | None") -> list[str]:
    """Lines for the rules between the experiment tables and the rest of a sweep
    config `cfg` (a `SweepConfig`); `d` the data's dimension, None when not yet
    known (a data file). One line each, starting with the key to change."""
    lines = []
    discrete = [m for m in cfg.methods if m.startswith(DISCRETE_PREFIX)]
    if discrete and cfg.discrete is None:
        lines.append(f"methods: {discrete[0]} needs its step size: add [discrete] eta = [...] (> 0)")
    if cfg.discrete is not None and not discrete:
        lines.append(
            "discrete.eta: no discrete method in methods (eta is the step size of discrete_gd, discrete_l2, "
            "discrete_lp, discrete_linf, discrete_usam, not of a flow); add one to methods or remove [discrete]"
        )
    lp = [m for m in cfg.methods if m in LP_METHODS]
    if lp and cfg.lp is None:
        lines.append(f"methods: {lp[0]} needs its exponent: add [lp] p = [...] (each 1 < p < inf)")
    if cfg.lp is not None and not lp:
        lines.append('lp.p: no lp method in methods (p is the exponent of "lp" and "discrete_lp"); add one to '
                     "methods or remove [lp]")
    if discrete and cfg.discrete is not None:
        if cfg.clock != "t":
            lines.append('clock: discrete methods run in real time t (iteration k is at t = k eta); use clock = "t"')
        t1 = float(cfg.time.values()[-1])
        for eta in map(float, cfg.discrete.etas()):
            if t1 / eta < 1:
                lines.append(f"discrete.eta: {eta!r} is larger than the horizon {t1!r}: every save time "
                             "would be iteration 0; use a smaller eta")
            elif t1 / eta > MAX_ITERATIONS:
                lines.append(f"discrete.eta: {eta!r} needs {t1 / eta:.3g} iterations to the horizon {t1!r} "
                             f"(at most {MAX_ITERATIONS:.0e}); use a larger eta or a shorter time.t1")
    m = cfg.model
    if m.generic:
        why = f"model {m.name}"
        if "depth" in cfg.model_fields_set and cfg.depth != 2:
            lines.append(f"depth: {why} has two layers; remove depth or set depth = 2")
        if cfg.clock != "t":
            lines.append(f'clock: {why} is solved in real time t; use clock = "t"')
        if cfg.solver.coords != "linear":
            lines.append(f'solver.coords: {why} integrates its weights as they are; use coords = "linear"')
        if cfg.output.save_weights:
            lines.append(f"output.save_weights: {why} has no (layer, coord) weights to store; remove it")
        if cfg.init is not None:
            lines.append(f"init: per-layer inits are for model diagonal; {why} starts at its own init "
                         "(model.seed) times alpha; remove [init]")
    if cfg.init is not None and not m.generic:
        lines += _init_shape_problems(cfg.init, cfg.depth, d)
    return lines


def _init_shape_problems(init: InitConfig, depth: int, d: "int | None") -> list[str]:
    if init.W0 is not None:
        shape = (len(init.W0), len(init.W0[0]))
        if shape[0] != depth or (d is not None and shape[1] != d):
            want = f"(depth, d) = ({depth}, {d if d is not None else 'd'})"
            return [f"init.W0: has shape {shape}; it must be {want}: one row per layer, one number per coordinate"]
    elif d is not None and len(init.alpha_j) != d:
        return [f"init.alpha_j: has {len(init.alpha_j)} numbers; the data have d = {d} coordinates: give {d}"]
    pattern = init.pattern(depth, d if d is not None else len(init.W0[0] if init.W0 else init.alpha_j))
    if depth >= 2 and not np.any(pattern):
        return ["init: every entry is 0, a fixed point of every flow at depth >= 2 (each gradient is a "
                "product of other layers' weights); give nonzero entries"]
    if stuck_inits(pattern[None])[0]:
        return ["init: every gradient entry is 0 at this init (each is a product of the other layers' weights, "
                "and at every coordinate at least two layers are 0): a fixed point of every flow; give fewer zeros"]
    return []


def drop_unset_experiment_keys(dump: dict) -> dict:
    """`dump` (a `SweepConfig.model_dump(mode="json")`) without the experiment keys
    left at their defaults (no `[discrete]`, `[init]`, data generator; model
    diagonal), so that a config that does not use them keeps the `config_key` it
    had before they existed (its partial results and slices stay resumable)."""
    if dump.get("model") == {"name": "diagonal", "width": None, "channels": None, "kernel": None, "seed": None}:
        dump.pop("model")
    for key in ("init", "discrete", "lp"):
        if key in dump and dump[key] is None:
            dump.pop(key)
    data = dump.get("data", {})
    for key in ("generator",) + _ALL_GENERATOR_KEYS:
        if key in data and data[key] is None:
            data.pop(key)
    return dump
