"""Shared test setup: float64, the Agg backend and the persistent compile cache for
the whole test process, with the CPU arithmetic of the command lines
(`samflow._x64.exact_cpu_arithmetic`) (as the command lines set them; `import samflow` sets none of
them), common data sets and a seeded RNG."""

import os
from pathlib import Path

from samflow._x64 import exact_cpu_arithmetic

# Each xdist worker (and the command lines its tests start, which inherit the
# variable) keeps its compiled programs in a folder of its own: JAX writes cache
# entries without a lock, and a worker crashed inside JAX's cache read or write
# (SIGABRT or SIGSEGV in `compilation_cache.get/put_executable_and_time`) three
# times, each time while two processes shared one folder; never with one. A user's
# $SAMFLOW_COMPILATION_CACHE or $JAX_COMPILATION_CACHE_DIR is left as it is.
_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
if _WORKER and os.environ.get("SAMFLOW_COMPILATION_CACHE") is None and not os.environ.get("JAX_COMPILATION_CACHE_DIR"):
    _base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    os.environ["XDG_CACHE_HOME"] = str(_base / "samflow-tests" / _WORKER)

exact_cpu_arithmetic()  # before JAX starts: the arithmetic of the command lines (no FMA, XLA's own sums)

import jax  # noqa: E402
import matplotlib  # noqa: E402

jax.config.update("jax_enable_x64", True)
matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import samflow as sf  # noqa: E402
from samflow._cache import enable_compilation_cache  # noqa: E402

# The tests keep compiled programs on disk as the command lines do (samflow's cache
# folder, `samflow._cache.cache_dir`; SAMFLOW_COMPILATION_CACHE=off turns it off): the
# slow suite after the default one, the second xdist worker and a rerun then load a
# program instead of compiling it again (test_critical.py: 23 -> 11 CPU-s). A hit is
# the same executable as a compile (JAX keys an entry by the program, its compile
# options and the jaxlib version), so no result changes. The stored programs (which skip
# tracing) stay off here: in-process tests take the library's traced path, and
# tests/test_stored_programs.py and the command-line tests cover the stored one.
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
