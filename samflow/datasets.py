"""Binary classification data sets: what one is, and how to make, load and save one.

A data set is n samples (x_i, y_i) with x_i in R^d and labels y_i in {-1, +1}
(docs/theory.md section 1): `Dataset`. The single-sample data set {(mu, +1)} with
0 < mu_1 < ... < mu_d (`single_sample`) is the paper's main object: coordinate 1 is
the most minor feature, coordinate d the major one. `load_dataset` reads a `.npz`
or `.csv` file, `save_dataset` writes one that it reads back exactly.

**Generators.** The paper checks its single-sample findings on data sets of many
samples whose features have increasing scale (feature 1 minor, feature d major) and
on "banded" data, whose coordinates fall into a few bands of distinct intensity,
like the dark background and bright strokes of a digit (docs/theory.md sections 1
and 6). Both generators here build every sample as

    y_i x_ij = s_j m_ij + noise * s_j xi_ij,
    m_ij = exp(spread * z_ij - spread^2 / 2),   z_ij, xi_ij ~ N(0, 1),

with labels y_i = +-1 balanced (n // 2 of each, one more +1 when n is odd, in a
seeded random order). m_ij > 0 has mean 1 and log-standard deviation `spread`,
so feature j has mean magnitude s_j, and with `noise = 0` every y_i x_i is
positive coordinatewise: beta = (1, ..., 1) separates the data, by construction.
With `noise > 0` separability is checked with the l1 max-margin linear program
(`samflow._margin`, as `samflow.analysis.max_margin_direction`) and a `ValueError` says when it fails.

The same `seed` always gives the same data (NumPy `default_rng`).

`faint_patch_images` is the image analogue with a ground truth (docs/cnn.md): it
adds to given digit images (the major feature, bright strokes) a faint patch
whose place carries the label too (the minor feature, by construction).
"""

from __future__ import annotations

from pathlib import Path

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Int

from ._util.arrays import device_array
from ._util.checks import check_count
from ._margin import max_margin_beta
from ._util.x64 import float64

__all__ = [
    "Dataset", "load_dataset", "single_sample",
    "increasing_scale", "banded", "balanced_labels", "save_dataset", "faint_patch_masks", "faint_patch_images",
]


class Dataset(eqx.Module):
    """Binary data (X, y).

    **Fields:**

    - `X`: `Float[Array, "n d"]`, float64, the inputs x_i as rows.
    - `y`: `Float[Array, " n"]`, float64, the labels, each -1 or +1.

    Use `Dataset.from_arrays` to build one with validation; the plain constructor
    does no checks so that it can be used inside `jax.vmap`.
    """

    X: Float[Array, "n d"]
    y: Float[Array, " n"]

    @classmethod
    def from_arrays(cls, X: ArrayLike, y: ArrayLike) -> "Dataset":
        """Validate and build a data set.

        **Arguments:** `X` of shape (n, d), `y` of shape (n,), both finite.

        **Raises:** `ValueError` when the shapes disagree, a value is not finite,
        or a label is not -1 or +1.
        """
        X = np.asarray(X, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        if X.ndim != 2 or X.shape[0] == 0 or X.shape[1] == 0:
            raise ValueError(f"X must have shape (n, d) with n, d >= 1, got {X.shape}")
        if y.shape != (X.shape[0],):
            raise ValueError(f"y must have shape ({X.shape[0]},) to match X, got {y.shape}")
        if not np.all(np.isfinite(X)):
            raise ValueError("X contains a non-finite value (NaN or inf)")
        if not np.all(np.isin(y, (-1.0, 1.0))):
            raise ValueError("y must contain only the labels -1 and +1")
        with float64():  # float64 arrays even in a float32 program
            return cls(X=device_array(X), y=device_array(y))

    @property
    def n(self) -> int:
        """Number of samples."""
        return self.X.shape[0]

    @property
    def d(self) -> int:
        """Input dimension."""
        return self.X.shape[1]

    @property
    def is_single_sample(self) -> bool:
        """True for a one-sample data set, the case the rescaled flows need."""
        return self.X.shape[0] == 1

    @property
    def mu(self) -> Float[Array, " d"]:
        """y_1 x_1 of a one-sample data set: the point mu of {(mu, +1)}.

        **Raises:** `ValueError` when the data set has more than one sample.
        """
        if not self.is_single_sample:
            raise ValueError(f"mu is defined for one sample only, this data set has {self.n}")
        return self.y[0] * self.X[0]


def single_sample(mu: ArrayLike) -> Dataset:
    """The data set {(mu, +1)} of docs/theory.md section 1.

    **Arguments:** `mu`, shape (d,), finite. The paper orders 0 < mu_1 < ... < mu_d,
    but any finite mu is accepted (the analysis calls the largest |mu_j| major).

    **Raises:** `ValueError` when mu is empty, not one-dimensional or not finite.
    """
    mu = np.asarray(mu, dtype=np.float64)
    if mu.ndim != 1 or mu.size == 0:
        raise ValueError(f"mu must be a non-empty vector, got shape {mu.shape}")
    return Dataset.from_arrays(mu[None, :], np.ones(1))


def load_dataset(path) -> Dataset:
    """Load binary data from a file.

    **Arguments:** `path` of a `.npz` file holding arrays `X` (n, d) and `y` (n,),
    or a `.csv` file of n rows whose last column is the label y and the others x.

    **Raises:** `FileNotFoundError` naming the path when it does not exist;
    `ValueError` for another suffix, missing arrays, or invalid values.
    """
    from pathlib import Path

    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"data file not found: {p}")
    if p.suffix == ".npz":
        with np.load(p) as f:
            missing = [k for k in ("X", "y") if k not in f]
            if missing:
                raise ValueError(f"{p}: the .npz file lacks the array(s) {', '.join(missing)}")
            X, y = f["X"], f["y"]
    elif p.suffix == ".csv":
        table = np.loadtxt(p, delimiter=",", ndmin=2)
        if table.shape[1] < 2:
            raise ValueError(f"{p}: a data .csv needs at least 2 columns (features, then the label)")
        X, y = table[:, :-1], table[:, -1]
    else:
        raise ValueError(f"{p}: unknown data file type {p.suffix!r}; use .npz (X, y) or .csv")
    return Dataset.from_arrays(X, y)


def balanced_labels(n: int, rng: np.random.Generator) -> np.ndarray:
    """n labels, n // 2 of them -1 and the rest +1, in a random order from `rng`."""
    y = np.ones(n)
    y[: n // 2] = -1.0
    return rng.permutation(y)


def _check_counts(n, d):
    # A bool is refused too: d = True made data of d = 1, silently.
    check_count(n, "n"), check_count(d, "d")


def _check_amounts(spread, noise):
    if not (np.isfinite(spread) and spread >= 0):
        raise ValueError(f"spread must be a finite number >= 0, got {spread!r}")
    if not (np.isfinite(noise) and noise >= 0):
        raise ValueError(f"noise must be a finite number >= 0, got {noise!r}")


def _samples(s: np.ndarray, n: int, rng: np.random.Generator, spread: float, noise: float) -> Dataset:
    """X, y from per-feature scales s (d,), by the rule of the module docstring."""
    d = s.size
    y = balanced_labels(n, rng)
    m = np.exp(spread * rng.standard_normal((n, d)) - 0.5 * spread**2)
    yx = s[None, :] * m
    if noise > 0:
        yx = yx + noise * s[None, :] * rng.standard_normal((n, d))
    X = y[:, None] * yx
    if noise > 0 and not np.all(yx > 0):
        try:
            max_margin_beta(y[:, None] * X, 1)
        except ValueError:
            raise ValueError(
                f"the data drawn with noise = {noise} are not linearly separable; "
                "use a smaller noise or another seed"
            ) from None
    return Dataset.from_arrays(X, y)


def _increasing(values: ArrayLike | None, k: int, name: str, major: str) -> np.ndarray:
    """Scales (k,), finite, > 0 and strictly increasing; None gives (1, 2, ..., k) / k."""
    if values is None:
        return np.arange(1, k + 1, dtype=np.float64) / k
    s = np.asarray(values, dtype=np.float64)
    if s.shape != (k,):
        raise ValueError(f"{name} must have shape ({k},), got {s.shape}")
    if not (np.all(np.isfinite(s)) and np.all(s > 0) and np.all(np.diff(s) > 0)):
        raise ValueError(f"{name} must be finite, > 0 and strictly increasing ({major})")
    return s


def increasing_scale(
    n: int,
    d: int,
    seed: int,
    *,
    scales: ArrayLike | None = None,
    spread: float = 0.5,
    noise: float = 0.0,
) -> Dataset:
    """Binary data with features of increasing scale (feature 1 minor, feature d major).

    y_i x_ij = s_j m_ij (+ noise), see the module docstring: the multi-sample
    analogue of {(mu, +1)} with 0 < mu_1 < ... < mu_d (docs/theory.md section 1).

    **Arguments:**

    - `n`: number of samples >= 1; `d`: number of features >= 1.
    - `seed`: seed of the NumPy generator; the same seed gives the same data.
    - `scales`: the per-feature scales s, shape (d,), positive and strictly
      increasing; default s_j = j / d (0.2, 0.4, ..., 1.0 for d = 5, like the
      default config's mu).
    - `spread`: log-standard deviation of the per-sample magnitudes m_ij (0: every
      sample is +-s).
    - `noise`: scale, relative to s_j, of an extra label-independent Gaussian term.

    **Returns:** a `samflow.Dataset` with X (n, d), y (n,), linearly separable.

    **Raises:** `ValueError` for bad sizes, scales that are not positive and
    strictly increasing, a negative spread or noise, or (with noise > 0) a draw
    that is not linearly separable.
    """
    _check_counts(n, d)
    _check_amounts(spread, noise)
    s = _increasing(scales, d, "scales", "feature d major")
    return _samples(s, n, np.random.default_rng(seed), spread, noise)


def banded(
    n: int,
    d: int | None,
    seed: int,
    *,
    n_bands: int = 3,
    intensities: ArrayLike | None = None,
    image_shape: tuple[int, int] | None = None,
    spread: float = 0.3,
    noise: float = 0.0,
) -> tuple[Dataset, Int[np.ndarray, " d"]]:
    """Banded data: coordinates in a few bands of distinct intensity, minor to major.

    Coordinate j lies in band b(j) in 0..n_bands-1 and has scale s_j =
    intensities[b(j)]; samples follow the rule of the module docstring. For a
    vector (the default) the bands are contiguous blocks of coordinates of nearly
    equal size (`numpy.array_split`), band 0 first. For a small image
    (`image_shape = (h, w)`, flattened row-major, d = h w) the bands are
    horizontal stripes: row r lies in band r * n_bands // h.

    **Arguments:**

    - `n`: number of samples >= 1.
    - `d`: number of coordinates >= n_bands (None when `image_shape` is given).
    - `seed`: seed of the NumPy generator; the same seed gives the same data.
    - `n_bands`: number of bands >= 1.
    - `intensities`: the band intensities, shape (n_bands,), positive and strictly
      increasing (band 0 minor, the last band major); default b + 1 over n_bands
      (1/3, 2/3, 1 for three bands).
    - `image_shape`: (h, w) for flattened images with h >= n_bands.
    - `spread`, `noise`: as in `increasing_scale`.

    **Returns:** `(data, band)`: a linearly separable `samflow.Dataset` with X
    (n, d), and the 0-based band index of each coordinate, int64 (d,),
    non-decreasing.

    **Raises:** `ValueError` for bad sizes (an `image_shape` not of two
    integers), intensities that are not positive and
    strictly increasing, both or neither of `d` and `image_shape`, or (with
    noise > 0) a draw that is not linearly separable.
    """
    if isinstance(n_bands, bool) or not (isinstance(n_bands, (int, np.integer)) and n_bands >= 1):
        raise ValueError(f"n_bands must be an integer >= 1, got {n_bands!r}")
    if image_shape is not None:
        if d is not None:
            raise ValueError("give either d or image_shape, not both")
        shape = tuple(image_shape) if isinstance(image_shape, (tuple, list)) else ()
        if len(shape) != 2 or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in shape):
            raise ValueError(f"image_shape must be two integers (h, w), got {image_shape!r}")
        h, w = (int(v) for v in shape)
        if h < n_bands or w < 1:
            raise ValueError(f"image_shape must be (h, w) with h >= n_bands = {n_bands} and w >= 1, got {image_shape}")
        d = h * w
        band = np.repeat(np.arange(h) * n_bands // h, w)
    else:
        if d is None:
            raise ValueError("give d (the number of coordinates) or image_shape")
        _check_counts(n, d)
        if d < n_bands:
            raise ValueError(f"d = {d} is less than n_bands = {n_bands}: every band needs a coordinate")
        band = np.concatenate(
            [np.full(len(idx), b) for b, idx in enumerate(np.array_split(np.arange(d), n_bands))]
        )
    _check_counts(n, d)
    _check_amounts(spread, noise)
    inten = _increasing(intensities, n_bands, "intensities", "last band major")
    data = _samples(inten[band], n, np.random.default_rng(seed), spread, noise)
    return data, band.astype(np.int64)


def save_dataset(path: "str | Path", data: Dataset) -> Path:
    """Write a data set in a form `load_dataset` reads back exactly.

    **Arguments:** `path` ending in `.npz` (arrays `X` (n, d) and `y` (n,)) or
    `.csv` (one row per sample: the d features, then the label; 17 significant
    digits, so float64 values round-trip); `data`, a `samflow.Dataset`.

    **Returns:** the path written, as a `Path`.

    **Raises:** `ValueError` for another suffix. Missing parent folders are
    created.
    """
    p = Path(path)
    X = np.asarray(data.X, dtype=np.float64)
    y = np.asarray(data.y, dtype=np.float64)
    if p.suffix not in (".npz", ".csv"):
        raise ValueError(f"{p}: unknown data file type {p.suffix!r}; use .npz (X, y) or .csv")
    p.parent.mkdir(parents=True, exist_ok=True)
    if p.suffix == ".npz":
        np.savez(p, X=X, y=y)
    else:
        np.savetxt(p, np.column_stack([X, y]), delimiter=",", fmt="%.17g")
    return p


def faint_patch_masks(shape: tuple[int, int], size: int = 3) -> np.ndarray:
    """The two places of the faint feature of `faint_patch_images`, (2, H, W) booleans.

    Mask 0 (label y = -1) is the `size` x `size` square in the top-left corner,
    mask 1 (y = +1) the one in the top-right corner: on centred digits (MNIST
    keeps a margin of 4 of 28 pixels) both lie on the background.

    **Raises:** `ValueError` when two squares of `size` do not fit side by side in `shape`.
    """
    h, w = (int(v) for v in shape)
    if not (isinstance(size, (int, np.integer)) and size >= 1 and size <= h and 2 * size <= w):
        raise ValueError(f"size must be an integer in 1..{min(h, w // 2)} for images of shape {(h, w)}, got {size!r}")
    masks = np.zeros((2, h, w), dtype=bool)
    masks[0, :size, :size] = True
    masks[1, :size, w - size :] = True
    return masks


def faint_patch_images(
    images: ArrayLike,
    y: ArrayLike,
    *,
    contrast: float = 0.3,
    size: int = 3,
    strokes: bool = True,
    swap: bool = False,
    noise: float = 0.0,
    seed: int = 0,
) -> np.ndarray:
    """Digits whose label is carried twice: by the strokes and by a faint patch.

    The ground-truth image task of docs/cnn.md. Every image keeps its digit (the
    major feature: bright strokes, intensity up to 1) and gets a `size` x `size`
    patch of raw intensity `contrast` at the place of its label
    (`faint_patch_masks`: top-left for y = -1, top-right for y = +1), a minor
    feature by construction (`contrast` below the major-pixel threshold).
    Pixels under the patch become max(digit, contrast). The test-time
    interventions of the study are the same function:

    - remove the faint feature: `contrast = 0` (both places stay background);
    - remove the strokes: `strokes = False` (only the patch on a black image;
      also the "faint feature alone" training set);
    - swap: `swap = True` puts the patch at the other label's place.

    **Arguments:** `images` (n, H, W) raw intensities in [0, 1]; `y` (n,) labels
    in {-1, +1}; `contrast` in [0, 1]; `size` the patch side in pixels; `noise`
    the standard deviation of Gaussian pixel noise added last (then clipped to
    [0, 1]), drawn from `seed` (the same seed gives the same images).

    **Returns:** float32 (n, H, W) in [0, 1].

    **Raises:** `ValueError` for images that are not (n, H, W) or hold a value
    outside [0, 1] (or NaN), labels that are not +-1 or of another length,
    contrast outside [0, 1], a negative noise, `strokes` or `swap` not a bool, or
    a patch that does not fit (`faint_patch_masks`).
    """
    x = np.asarray(images, dtype=np.float32)
    lab = np.asarray(y, dtype=np.float64).reshape(-1)
    if x.ndim != 3:
        raise ValueError(f"images must have shape (n, H, W), got {x.shape}")
    if lab.shape != (x.shape[0],) or not np.all(np.isin(lab, (-1.0, 1.0))):
        raise ValueError(f"y must hold {x.shape[0]} labels, each -1 or +1")
    if not (np.isfinite(contrast) and 0.0 <= contrast <= 1.0):
        raise ValueError(f"contrast must be in [0, 1], got {contrast!r}")
    if not (np.isfinite(noise) and noise >= 0):
        raise ValueError(f"noise must be a finite number >= 0, got {noise!r}")
    if not np.all((x >= 0) & (x <= 1)):  # also NaN
        raise ValueError(
            "images must hold raw intensities in [0, 1] (divide 0..255 pixels by 255), "
            f"got values in [{np.nanmin(x) if x.size else 0:g}, {np.nanmax(x) if x.size else 0:g}] or NaN"
        )
    for name, flag in (("strokes", strokes), ("swap", swap)):
        if not isinstance(flag, (bool, np.bool_)):
            raise ValueError(f"{name} must be True or False, got {flag!r}")
    masks = faint_patch_masks(x.shape[1:], size)
    place = (lab > 0) != bool(swap)  # True: the +1 place
    patch = np.where(place[:, None, None], masks[1], masks[0]).astype(np.float32) * np.float32(contrast)
    out = np.maximum(x if strokes else np.zeros_like(x), patch)
    if noise > 0:
        out = np.clip(out + np.random.default_rng(seed).normal(0.0, noise, out.shape), 0.0, 1.0)
    return out.astype(np.float32)
