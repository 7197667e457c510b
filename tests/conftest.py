"""Shared test setup: float64, the Agg backend and JAX's persistent compile cache off
for the whole test process, with the CPU arithmetic of the command lines
(`samflow._util.x64.exact_cpu_arithmetic`) (as the command lines set them; `import samflow` sets none of
them), common data sets and a seeded RNG."""

import os

from samflow._util.x64 import exact_cpu_arithmetic

# JAX's persistent compilation cache is off in the test processes and in the command
# lines their tests start (they inherit the variable), unless the user set
# $SAMFLOW_COMPILATION_CACHE: jaxlib 0.10.2 crashed (SIGSEGV or SIGABRT) inside
# `executable.serialize()` and `backend.deserialize_executable()` of JAX's cache
# write and read, in a worker of the whole suite about once a run (CI of stop 31 and
# the run after it, with a folder of its own per worker), each time in a test that
# passes alone; and pytest-xdist 3.8 with --dist loadfile then waits forever for the
# crashed worker's files (the CI ran out of its time). The tests of the cache
# itself (test_compile_cache.py, test_stored_programs.py, test_release.py,
# test_multiprocess.py) set their own folder.
os.environ.setdefault("SAMFLOW_COMPILATION_CACHE", "off")

exact_cpu_arithmetic()  # before JAX starts: the arithmetic of the command lines (no FMA, XLA's own sums)

import jax  # noqa: E402
import matplotlib  # noqa: E402

jax.config.update("jax_enable_x64", True)
matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import samflow as sf  # noqa: E402
from samflow._util.cache import enable_compilation_cache  # noqa: E402

# With the cache off (above) this only records the choice: the stored programs (which
# skip tracing) stay off in the test processes, whose tests take the library's traced
# path; tests/test_stored_programs.py and the command-line tests cover the stored one.
enable_compilation_cache(programs=False)


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
