"""Shared test setup: float64 and the Agg backend for the whole test process (as the
command lines set them; `import samflow` sets neither), common data sets and a seeded RNG."""

import jax
import matplotlib

jax.config.update("jax_enable_x64", True)
matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import samflow as sf  # noqa: E402


@pytest.fixture
def rng():
    """A fresh, seeded generator per test (tests do not depend on each other's draws)."""
    return np.random.default_rng(20260101)


@pytest.fixture(scope="session")
def mu12():
    """The paper's running example {(mu, +1)} with mu = (1, 2)."""
    return sf.single_sample([1.0, 2.0])


@pytest.fixture(scope="session")
def multi_data():
    """A multi-sample data set with labels +-1 (n = 5, d = 3)."""
    r = np.random.default_rng(7)
    X = r.normal(size=(5, 3))
    y = np.array([1.0, -1.0, 1.0, -1.0, -1.0])
    return sf.Dataset.from_arrays(X, y)


@pytest.fixture(params=["logistic", "exponential"])
def loss(request):
    return sf.get_loss(request.param)
