"""The atlas config (`configs/atlas.toml`), validated in full before anything runs."""

from __future__ import annotations

import warnings
from typing import Annotated, Literal

from pydantic import Field, model_validator

from .._util.cli_common import RunOutput
from .._engine.settings import SETTING_BOUNDS
from ..config import ConfigModel, RunConfig, read_toml, validate

__all__ = ["AtlasConfig", "Spectra", "load_atlas_config"]

_Pos = Annotated[float, Field(gt=0)]


class Spectra(ConfigModel):
    """The spectra mu (feature d the major one, mu_d = 1)."""

    linear: bool = True  # mu_j = j / d
    """Include the linear spectrum mu_j = j / d."""
    geometric: list[Annotated[float, Field(gt=0, lt=1)]] = []  # r = mu_1 / mu_d: mu_j = r^((d - j) / (d - 1))
    """Geometric spectra, one per ratio r = mu_1 / mu_d in (0, 1): mu_j = r^((d - j) / (d - 1))."""
    random: Annotated[int, Field(ge=0, le=100)] = 0  # draws: sorted uniform(0.1, 1), scaled to mu_d = 1
    """Number of random spectra: sorted uniform(0.1, 1) draws, scaled to mu_d = 1."""
    seed: Annotated[int, Field(ge=0)] = 0
    """Seed of the random spectra."""

    @model_validator(mode="after")
    def _some(self):
        if not (self.linear or self.geometric or self.random):
            raise ValueError("no spectrum: set linear = true, a geometric ratio list or random > 0")
        return self


class Samples(ConfigModel):
    """One sample {(mu, +1)} and/or n > 1 samples of `samflow.datasets.increasing_scale`."""

    one: bool = True
    """Solve on one sample {(mu, +1)}."""
    n: Annotated[int, Field(ge=0)] = 0  # 0: no multi-sample data; else n >= 2 samples
    """0: no multi-sample data; else n >= 2 samples of `samflow.datasets.increasing_scale`."""
    seed: Annotated[int, Field(ge=0)] = 0
    """Seed of the multi-sample data."""
    spread: Annotated[float, Field(ge=0)] = 0.25
    """Log-spread of the multi-sample magnitudes."""
    rho: _Pos = 0.01  # the radius of the multi-sample (real-time) solves
    """The radius of the multi-sample (real-time) solves."""
    linear_only: bool = True  # multi-sample data for the linear spectrum only (real-time solves are the slow part)
    """Multi-sample data for the linear spectrum only (real-time solves are the slow part)."""
    linf: bool = False  # solve linf collapse edges on multi-sample data too (each cell slides 2 L d times: slow)
    """Solve the linf collapse edges on multi-sample data too (slow: each cell slides 2 L d times)."""

    @model_validator(mode="after")
    def _check(self):
        if self.n == 1:
            raise ValueError("n: give n >= 2 for multi-sample data (one sample is `one = true`), or 0 for none")
        if not (self.one or self.n):
            raise ValueError("no data: set one = true or n >= 2")
        return self


class Bisection(ConfigModel):
    """`[bisection]`: the edge searches (`samflow.edges.EdgeSearch`) and the collapse solves."""

    bracket: Annotated[list[_Pos], Field(min_length=2, max_length=2)] = [1e-2, 1e1]  # scanned alpha / rho range
    """The scanned alpha / rho range [lo, hi]."""
    scan: Annotated[int, Field(ge=2, le=1000)] = 16  # points of the scan (collapse edge)
    """Points of the scan that brackets the collapse edge."""
    field_scan: Annotated[int, Field(ge=2, le=10000)] = 64  # points of the scan (first leader)
    """Points of the scan of the first leader (major-first edge)."""
    rtol: Annotated[float, Field(ge=1e-14, lt=0.5)] = 1e-6
    """Relative accuracy to which the edges are bisected."""
    max_rounds: Annotated[int, Field(ge=1, le=1000)] = 80
    """Most bisection rounds."""
    escape: Annotated[float, Field(gt=1)] = 100.0  # escaped once max|w| >= escape * rho
    """A cell has escaped the collapse once max|w| >= escape x rho."""
    horizon: _Pos | None = None  # final clock time of the collapse solves (None: samflow.edges' default)
    """Final clock time of the collapse solves; unset: samflow.edges' default."""
    # Depths at which the linf collapse edge is solved for. Elsewhere the edge is
    # the theory's a = 1 (s.3.2), drawn as the mark: from a = 1 - delta at L >= 4
    # the solver needs tau ~ delta^-(L-2) and ran out of its steps in the first
    # run for delta <= 1e-4 (so the bisection stalls far from 1e-6).
    linf_depths: list[Annotated[int, Field(ge=2, le=12)]] = [2]
    """Depths at which the linf collapse edge is solved for; elsewhere it is the theory's a = 1
    (docs/theory.md s.3.2), drawn as a mark."""

    @model_validator(mode="after")
    def _check(self):
        if not self.bracket[0] < self.bracket[1]:
            raise ValueError(f"bracket: need lo < hi, got {list(self.bracket)}")
        return self


class Solver(ConfigModel):
    """`[solver]`: the ODE solver and tolerances of every atlas solve (`samflow.SolverSettings`)."""

    # Bounds: samflow._engine.settings.SETTING_BOUNDS, the ones SolverSettings enforces.
    solver: Literal["tsit5", "dopri5", "dopri8"] = "tsit5"
    """The explicit Runge-Kutta method of diffrax."""
    rtol: Annotated[float, Field(**SETTING_BOUNDS["rtol"])] = 1e-8
    """Relative tolerance of the adaptive step."""
    atol: Annotated[float, Field(**SETTING_BOUNDS["atol"])] = 1e-12
    """Absolute tolerance, relative to the init's norm."""
    max_steps: Annotated[int, Field(**SETTING_BOUNDS["max_steps"])] = 4096
    """Most solver steps per cell."""


class Staircase(ConfigModel):
    """The time the staircase takes (the last switch), l2, one sample, linear mu."""

    depths: list[Annotated[int, Field(ge=2, le=12)]] = [2, 3, 4, 5, 6]
    """Depths of the staircase-time chart (l2, one sample, linear mu)."""
    d: Annotated[int, Field(ge=2, le=200)] = 5
    """Dimension of the staircase's spectrum."""
    num_alpha: Annotated[int, Field(ge=2, le=2000)] = 48
    """Number of alpha / rho values of the chart."""
    tau1: _Pos = 400.0  # tau horizon (rho = 1)
    """The tau horizon (rho = 1)."""
    tau_min: _Pos = 1e-3
    """First save time (tau)."""
    num_times: Annotated[int, Field(ge=2, le=20000)] = 400
    """Number of (log-spaced) save times."""

    @model_validator(mode="after")
    def _times(self):
        if not self.tau_min < self.tau1:
            raise ValueError(f"tau_min: need tau_min < tau1 (the save times run from tau_min to tau1), got {self.tau_min} and {self.tau1}")
        return self


class Output(RunOutput):
    """`[output]`: as `RunOutput`, with the atlas's own default folder."""

    dir: str = "results/atlas"
    """The results folder; results go to `<dir>/<name>/` (the command line's --out overrides it)."""


class AtlasConfig(RunConfig):
    """Schema of `configs/atlas.toml` (see that file for every key with a comment)."""

    name: str = "atlas"
    """The run's folder name under output.dir; empty: the config file's name."""
    methods: list[Literal["l2", "lp", "linf"]] = ["l2", "linf"]
    """The SAM flows whose edges are found ("lp" needs `p`)."""
    p: list[float] = []
    """The exponents p of lp-SAM (method "lp"), each 1 < p < inf, distinct: an optional axis, each p one entry
    of the atlas's `method` axis ("lp p=3"). Required with "lp", refused without it."""
    depths: list[Annotated[int, Field(ge=2, le=12)]] = [2, 3, 4, 5, 6]
    """The depths L of the edge charts."""
    dims: list[Annotated[int, Field(ge=2, le=200)]] = [2, 3, 5, 10, 20, 50]
    """The dimensions d of the edge charts."""
    spectra: Spectra = Spectra()
    """The spectra mu (`[spectra]`)."""
    samples: Samples = Samples()
    """One sample and/or multi-sample data (`[samples]`)."""
    bisection: Bisection = Bisection()
    """The edge searches (`[bisection]`)."""
    solver: Solver = Solver()
    """The ODE solver of every atlas solve (`[solver]`)."""
    staircase: Staircase = Staircase()
    """The staircase-time chart (`[staircase]`)."""
    output: Output = Output()
    """Where the results and figures go (`[output]`)."""

    @model_validator(mode="after")
    def _linear(self):
        if self.samples.n and self.samples.linear_only and not self.spectra.linear:
            raise ValueError("samples.linear_only: needs spectra.linear = true (or set linear_only = false)")
        return self

    @model_validator(mode="after")
    def _lp(self):
        bad = [x for x in self.p if not 1 < x < float("inf")]
        if bad:
            raise ValueError(f"p: each exponent must be a number with 1 < p < inf, got {bad[0]!r}")
        if len(set(self.p)) != len(self.p):
            raise ValueError(f"p: values repeat: {self.p}")
        if "lp" in self.methods and not self.p:
            raise ValueError('p: method "lp" needs its exponents: add p = [...] (each 1 < p < inf)')
        if self.p and "lp" not in self.methods:
            raise ValueError('p: no method "lp" in methods (p is its exponent); add "lp" to methods or remove p')
        return self

    def method_entries(self) -> "list[tuple[str, str, float | None]]":
        """The entries of the atlas's `method` axis: (label, method, p), "lp" once per
        p ("lp p=3", as the sweep's flow axis), the other methods with p None."""
        from ..config._sweep import _short

        out = []
        for m in self.methods:
            if m == "lp":
                out += [(f"lp p={_short(x)}", m, float(x)) for x in self.p]
            else:
                out.append((m, m, None))
        return out

    def quick(self) -> "AtlasConfig":
        """The `--quick` reduction of this config: depths 2 and 3, d in {2, 3}, the linear
        spectrum, one sample, a 12-point staircase at depth 2 (a test-sized run)."""
        return self.model_copy(update={
            "depths": [2, 3],
            "dims": [2, 3],
            "spectra": Spectra(linear=True),
            "samples": Samples(one=True, n=0),
            "staircase": self.staircase.model_copy(update={"depths": [2], "d": 3, "num_alpha": 12, "num_times": 100}),
        })

    @model_validator(mode="after")
    def _unique(self):
        for key in ("methods", "depths", "dims"):
            v = getattr(self, key)
            if not v:
                raise ValueError(f"{key}: give at least one value")
            if len(set(v)) != len(v):
                raise ValueError(f"{key}: values repeat: {v}")
        return self


def load_atlas_config(path) -> AtlasConfig:
    """Read and validate an atlas config.

    **Raises:** `samflow.config.ConfigError`, one line per problem (unknown key,
    wrong type, value out of range), naming the file and the key.
    """
    return validate(AtlasConfig, read_toml(path), str(path))


def __getattr__(name):
    """`quick_config`, `AtlasConfig.quick`'s name before 0.3: the method itself
    (`quick_config(cfg)` is `cfg.quick()`), with a FutureWarning naming it; the
    old name goes in the release after 0.3 (PEP 562)."""
    if name == "quick_config":
        warnings.warn("samflow.atlas.quick_config(cfg) is now the method AtlasConfig.quick() (cfg.quick()); "
                      "the old name goes in the release after 0.3", FutureWarning, stacklevel=2)
        return AtlasConfig.quick
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
