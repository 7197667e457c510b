"""`samflow.datasets`: determinism by seed, balanced labels, separability, the
ordering of feature scales, the band structure, and the round trip through
`samflow.datasets.load_dataset`."""

import numpy as np
import pytest

from samflow.analysis import max_margin_direction
from samflow.datasets import load_dataset
from samflow.datasets import banded, increasing_scale, save_dataset


def same(a, b):
    np.testing.assert_array_equal(np.asarray(a.X), np.asarray(b.X))
    np.testing.assert_array_equal(np.asarray(a.y), np.asarray(b.y))


def assert_separable(data):
    X, y = np.asarray(data.X), np.asarray(data.y)
    beta = max_margin_direction(X, y, 1, normalize=False)  # raises if not separable
    assert np.all(y * (X @ beta) >= 1 - 1e-9)


@pytest.mark.parametrize("n", [1, 7, 40])
def test_increasing_scale_basic(n):
    data = increasing_scale(n, 5, seed=3)
    assert data.X.shape == (n, 5) and data.y.shape == (n,)
    y = np.asarray(data.y)
    assert (y == 1).sum() - (y == -1).sum() == n % 2  # balanced
    yx = y[:, None] * np.asarray(data.X)
    assert np.all(yx > 0)  # separable coordinatewise, by construction
    assert_separable(data)


def test_increasing_scale_is_deterministic_by_seed():
    same(increasing_scale(20, 4, seed=1), increasing_scale(20, 4, seed=1))
    a, b = increasing_scale(20, 4, seed=1), increasing_scale(20, 4, seed=2)
    assert not np.array_equal(np.asarray(a.X), np.asarray(b.X))


def test_increasing_scale_orders_the_features():
    data = increasing_scale(4000, 5, seed=0)
    mag = np.mean(np.abs(np.asarray(data.X)), axis=0)
    assert np.all(np.diff(mag) > 0)
    np.testing.assert_allclose(mag, np.arange(1, 6) / 5, rtol=0.05)  # mean |x_ij| = s_j
    s = np.array([0.1, 1.0, 10.0])
    data = increasing_scale(4000, 3, seed=0, scales=s, spread=0.0)
    np.testing.assert_allclose(np.abs(np.asarray(data.X)), np.broadcast_to(s, (4000, 3)))


def test_increasing_scale_with_noise_is_still_separable():
    data = increasing_scale(30, 5, seed=4, noise=0.5)
    yx = np.asarray(data.y)[:, None] * np.asarray(data.X)
    assert np.any(yx < 0)  # noise can flip single coordinates ...
    assert_separable(data)  # ... but not separability
    with pytest.raises(ValueError, match="not linearly separable"):
        increasing_scale(400, 2, seed=0, noise=5.0)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(scales=[1.0, 0.5, 2.0]), "increasing"),
        (dict(scales=[0.0, 0.5, 2.0]), "> 0"),
        (dict(scales=[1.0, 2.0]), "shape"),
        (dict(spread=-1.0), "spread"),
        (dict(noise=float("nan")), "noise"),
    ],
)
def test_increasing_scale_input_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        increasing_scale(5, 3, 0, **kwargs)


@pytest.mark.parametrize("n, d, match", [(5, True, "d must be an integer >= 1, got True"),
                                         (True, 3, "n must be an integer >= 1, got True"),
                                         (5, 0, "d must be an integer >= 1, got 0")])
def test_generator_counts_refuse_bools(n, d, match):
    """d = True made a data set of d = 1 (True == 1), silently; n = True a numpy error."""
    for make in (lambda: increasing_scale(n, d, 0), lambda: banded(n, d=d, seed=0, n_bands=1)):
        with pytest.raises(ValueError, match=match):
            make()


def test_banded_vector_bands():
    data, band = banded(3000, 10, seed=5, n_bands=3)
    np.testing.assert_array_equal(band, [0, 0, 0, 0, 1, 1, 1, 2, 2, 2])
    mag = np.mean(np.abs(np.asarray(data.X)), axis=0)
    for b, s in enumerate([1 / 3, 2 / 3, 1.0]):
        np.testing.assert_allclose(mag[band == b], s, rtol=0.05)
    # every coordinate of a band is dimmer than every coordinate of the next band
    for b in range(2):
        assert mag[band == b].max() < mag[band == b + 1].min()
    assert_separable(data)
    same(data, banded(3000, 10, seed=5, n_bands=3)[0])


def test_banded_image_stripes():
    data, band = banded(50, None, seed=2, image_shape=(6, 4), n_bands=3, intensities=[0.1, 0.5, 2.0], spread=0.0)
    assert data.X.shape == (50, 24)
    np.testing.assert_array_equal(band.reshape(6, 4), np.repeat([[0], [0], [1], [1], [2], [2]], 4, axis=1))
    img = np.abs(np.asarray(data.X)).reshape(50, 6, 4)
    np.testing.assert_allclose(img[:, :2], 0.1)
    np.testing.assert_allclose(img[:, 4:], 2.0)
    assert_separable(data)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(d=2, n_bands=3), "n_bands"),
        (dict(d=None), "image_shape"),
        (dict(d=6, image_shape=(3, 2)), "not both"),
        (dict(d=6, intensities=[1.0, 1.0, 2.0]), "increasing"),
        # (4.7, 3) was truncated to (4, 3): 12 coordinates, silently.
        (dict(d=None, image_shape=(4.7, 3)), "image_shape"),
        (dict(d=None, image_shape=(4, 3, 2)), "image_shape"),
        (dict(d=5, n_bands=True), "n_bands"),
    ],
)
def test_banded_input_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        banded(5, seed=0, **kwargs)


@pytest.mark.parametrize("suffix", [".npz", ".csv"])
def test_round_trip_through_load_dataset(tmp_path, suffix):
    data = increasing_scale(9, 4, seed=8, noise=0.2)
    path = save_dataset(tmp_path / "sub" / f"data{suffix}", data)
    same(load_dataset(path), data)


def test_save_dataset_rejects_unknown_suffix(tmp_path):
    with pytest.raises(ValueError, match="unknown data file type"):
        save_dataset(tmp_path / "data.txt", increasing_scale(3, 2, seed=0))


def test_multisample_config_holds_the_generated_data():
    from pathlib import Path

    from samflow.config import load_config

    cfg = load_config(Path(__file__).resolve().parents[1] / "configs" / "multisample.toml")
    data = increasing_scale(4, 5, seed=0, spread=0.25)
    np.testing.assert_array_equal(cfg.data.X, np.round(np.asarray(data.X), 4))
    np.testing.assert_array_equal(cfg.data.y, np.asarray(data.y))
    assert_separable(data)
    # feature 5 is the major one: the l1 max-margin direction (GD's limit) is e_5
    np.testing.assert_allclose(max_margin_direction(np.array(cfg.data.X), np.array(cfg.data.y), 1), np.eye(5)[4], atol=1e-9)
