"""The atlas config (`configs/atlas.toml`), validated in full before anything runs."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from .._cli_common import RunOutput
from .._settings import SETTING_BOUNDS
from ..config import ConfigModel, RunConfig, read_toml, validate

__all__ = ["AtlasConfig", "load_atlas_config", "quick_config"]

_Pos = Annotated[float, Field(gt=0)]


class Spectra(ConfigModel):
    """The spectra mu (feature d the major one, mu_d = 1)."""

    linear: bool = True  # mu_j = j / d
    geometric: list[Annotated[float, Field(gt=0, lt=1)]] = []  # r = mu_1 / mu_d: mu_j = r^((d - j) / (d - 1))
    random: Annotated[int, Field(ge=0, le=100)] = 0  # draws: sorted uniform(0.1, 1), scaled to mu_d = 1
    seed: Annotated[int, Field(ge=0)] = 0

    @model_validator(mode="after")
    def _some(self):
        if not (self.linear or self.geometric or self.random):
            raise ValueError("no spectrum: set linear = true, a geometric ratio list or random > 0")
        return self


class Samples(ConfigModel):
    """One sample {(mu, +1)} and/or n > 1 samples of `samflow.datasets.increasing_scale`."""

    one: bool = True
    n: Annotated[int, Field(ge=0)] = 0  # 0: no multi-sample data; else n >= 2 samples
    seed: Annotated[int, Field(ge=0)] = 0
    spread: Annotated[float, Field(ge=0)] = 0.25
    rho: _Pos = 0.01  # the radius of the multi-sample (real-time) solves
    linear_only: bool = True  # multi-sample data for the linear spectrum only (real-time solves are the slow part)
    linf: bool = False  # solve linf collapse edges on multi-sample data too (each cell slides 2 L d times: slow)

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
    scan: Annotated[int, Field(ge=2, le=1000)] = 16  # points of the scan (collapse edge)
    field_scan: Annotated[int, Field(ge=2, le=10000)] = 64  # points of the scan (first leader)
    rtol: Annotated[float, Field(ge=1e-14, lt=0.5)] = 1e-6
    max_rounds: Annotated[int, Field(ge=1, le=1000)] = 80
    escape: Annotated[float, Field(gt=1)] = 100.0  # escaped once max|w| >= escape * rho
    horizon: _Pos | None = None  # final clock time of the collapse solves (None: samflow.edges' default)
    # Depths at which the linf collapse edge is solved for. Elsewhere the edge is
    # the theory's a = 1 (s.3.2), drawn as the mark: from a = 1 - delta at L >= 4
    # the solver needs tau ~ delta^-(L-2) and ran out of its steps in the first
    # segment for delta <= 1e-4 (so the bisection stalls far from 1e-6).
    linf_depths: list[Annotated[int, Field(ge=2, le=12)]] = [2]

    @model_validator(mode="after")
    def _check(self):
        if not self.bracket[0] < self.bracket[1]:
            raise ValueError(f"bracket: need lo < hi, got {list(self.bracket)}")
        return self


class Solver(ConfigModel):
    """`[solver]`: the ODE solver and tolerances of every atlas solve (`samflow.SolverSettings`)."""

    # Bounds: samflow._settings.SETTING_BOUNDS, the ones SolverSettings enforces.
    solver: Literal["tsit5", "dopri5", "dopri8"] = "tsit5"
    rtol: Annotated[float, Field(**SETTING_BOUNDS["rtol"])] = 1e-8
    atol: Annotated[float, Field(**SETTING_BOUNDS["atol"])] = 1e-12
    max_steps: Annotated[int, Field(**SETTING_BOUNDS["max_steps"])] = 4096


class Staircase(ConfigModel):
    """The time the staircase takes (the last switch), l2, one sample, linear mu."""

    depths: list[Annotated[int, Field(ge=2, le=12)]] = [2, 3, 4, 5, 6]
    d: Annotated[int, Field(ge=2, le=200)] = 5
    num_alpha: Annotated[int, Field(ge=2, le=2000)] = 48
    tau1: _Pos = 400.0  # tau horizon (rho = 1)
    tau_min: _Pos = 1e-3
    num_times: Annotated[int, Field(ge=2, le=20000)] = 400

    @model_validator(mode="after")
    def _times(self):
        if not self.tau_min < self.tau1:
            raise ValueError(f"tau_min: need tau_min < tau1 (the save times run from tau_min to tau1), got {self.tau_min} and {self.tau1}")
        return self


class Output(RunOutput):
    """`[output]`: as `RunOutput`, with the atlas's own default folder."""

    dir: str = "results/atlas"


class AtlasConfig(RunConfig):
    """Schema of `configs/atlas.toml` (see that file for every key with a comment)."""

    name: str = "atlas"
    methods: list[Literal["l2", "linf"]] = ["l2", "linf"]
    depths: list[Annotated[int, Field(ge=2, le=12)]] = [2, 3, 4, 5, 6]
    dims: list[Annotated[int, Field(ge=2, le=200)]] = [2, 3, 5, 10, 20, 50]
    spectra: Spectra = Spectra()
    samples: Samples = Samples()
    bisection: Bisection = Bisection()
    solver: Solver = Solver()
    staircase: Staircase = Staircase()
    output: Output = Output()

    @model_validator(mode="after")
    def _linear(self):
        if self.samples.n and self.samples.linear_only and not self.spectra.linear:
            raise ValueError("samples.linear_only: needs spectra.linear = true (or set linear_only = false)")
        return self

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


def quick_config(cfg: AtlasConfig) -> AtlasConfig:
    """The `--quick` reduction of `cfg`: depths 2 and 3, d in {2, 3}, the linear
    spectrum, one sample, a 12-point staircase at depth 2 (a test-sized run)."""
    return cfg.model_copy(update={
        "depths": [2, 3],
        "dims": [2, 3],
        "spectra": Spectra(linear=True),
        "samples": Samples(one=True, n=0),
        "staircase": cfg.staircase.model_copy(update={"depths": [2], "d": 3, "num_alpha": 12, "num_times": 100}),
    })
