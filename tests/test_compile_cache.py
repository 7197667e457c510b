"""JAX's persistent compilation cache (`samflow._util.cache`): where it lives, and that a
second process loads `solve`'s program from it instead of compiling again (before,
diffrax's save-time checks put host callbacks into the program, which JAX never
writes to the cache)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import samflow as sf
from samflow._util import cache as _cache
from samflow.flows import Clock, Method
from samflow.solver import SolverSettings, solve_cell

ROOT = Path(__file__).resolve().parent.parent

# A tiny solve in a fresh process, as a command line starts it (prepare_process);
# prints the cache's verdict on the solver's program ("hit" or "miss").
TINY = """
import logging, sys
import numpy as np
from samflow._util.x64 import prepare_process
prepare_process()
seen = []
class H(logging.Handler):
    def emit(self, record):
        msg = record.getMessage()
        if "_solve_batch" in msg:
            seen.append("hit" if "cache hit" in msg else "miss" if "CACHE MISS" in msg else "")
logger = logging.getLogger("jax._src.compiler")
logger.setLevel(logging.DEBUG)
logger.addHandler(H())
import samflow as sf
sol = sf.solve("gd", sf.single_sample([0.5, 1.0]), 0.1, np.array([0.1, 0.2]), np.geomspace(1e-2, 10.0, 4))
print(" ".join(s for s in seen if s), float(sol.beta[0, -1, -1]))
"""


def _tiny(cache: Path) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_NUM_CPU_DEVICES")}
    # JAX's own cache only: `solve` would otherwise use the stored programs, which skip it
    # (tests/test_stored_programs.py checks those).
    env.update(PYTHONPATH=str(ROOT), SAMFLOW_COMPILATION_CACHE=str(cache), SAMFLOW_STORED_PROGRAMS="off")
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(TINY)], capture_output=True, text=True,
                       timeout=300, env=env, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout.strip()


def _solve_entries(cache: Path) -> list[str]:
    return sorted(p.name for p in cache.iterdir() if p.name.startswith("jit__solve_batch"))


def test_second_process_loads_solve_from_the_cache(tmp_path):
    """What matters is the solver's program: missed and written by the first process,
    loaded (not compiled, not written again) by the second. The other entries depend on
    the machine's load: JAX writes a program only when it compiled for longer than
    `MIN_COMPILE_TIME_S`, so on a loaded machine the second run may write a tiny helper
    (`jit_bitwise_or`, say) that compiled faster than that the first time; a check
    on the whole folder failed at load 5-8."""
    cache = tmp_path / "cache"
    first = _tiny(cache).split()
    solve = _solve_entries(cache)
    assert first[:-1] == ["miss"] and len(solve) == 1, (first, solve)
    second = _tiny(cache).split()
    assert second[:-1] == ["hit"], second  # loaded, not compiled
    assert _solve_entries(cache) == solve  # and not written again
    assert first[-1] == second[-1]  # the same result (printed with repr precision)


def test_solve_program_has_no_host_callback():
    """The reason the cache could not keep it: no `pure_callback` may be left in the program."""
    data = sf.single_sample([0.5, 1.0])
    fn = lambda W, r: solve_cell(W, r, data, np.geomspace(1e-2, 10.0, 4), method=Method.L2, clock=Clock.T,
                                 settings=SolverSettings())
    text = str(jax.make_jaxpr(jax.vmap(fn))(np.full((2, 2, 2), 0.1), np.array([0.1, 0.2])))
    assert "while" in text and "callback" not in text


def test_cache_dir_from_the_environment(monkeypatch, tmp_path):
    for var in (_cache.CACHE_ENV, "JAX_COMPILATION_CACHE_DIR", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert _cache.cache_dir() == tmp_path / ".cache" / "samflow" / "jax"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert _cache.cache_dir() == tmp_path / "xdg" / "samflow" / "jax"
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(tmp_path / "jaxdir"))
    assert _cache.cache_dir() == tmp_path / "jaxdir"
    monkeypatch.setenv(_cache.CACHE_ENV, str(tmp_path / "mine"))
    assert _cache.cache_dir() == tmp_path / "mine"
    for off in ("off", "0", "", "No"):
        monkeypatch.setenv(_cache.CACHE_ENV, off)
        assert _cache.cache_dir() is None and _cache.enable_compilation_cache() is None


def test_programs_false_keeps_only_jax_cache(monkeypatch, tmp_path):
    """`enable_compilation_cache(programs=False)` (the test suite's call) sets JAX's cache
    folder but leaves the stored programs off; the default turns both on."""
    updates = {}
    monkeypatch.setattr(jax.config, "update", lambda k, v: updates.__setitem__(k, v))
    monkeypatch.delenv(_cache.PROGRAMS_ENV, raising=False)
    monkeypatch.setattr(_cache, "_programs", _cache._programs)  # restored after the test
    assert _cache.enable_compilation_cache(tmp_path / "c", programs=False) == tmp_path / "c"
    assert updates["jax_compilation_cache_dir"] == str(tmp_path / "c") and _cache.programs_dir() is None
    _cache.enable_compilation_cache(tmp_path / "c")
    assert _cache.programs_dir() == tmp_path / "c" / _cache.PROGRAMS_SUBDIR
    monkeypatch.setenv(_cache.PROGRAMS_ENV, "off")
    _cache.enable_compilation_cache(tmp_path / "c")
    assert _cache.programs_dir() is None


def test_no_runtime_checks_restores_equinox_setting():
    from equinox import _errors

    before = _errors.EQX_ON_ERROR
    try:
        with _cache.no_runtime_checks():
            assert _errors.EQX_ON_ERROR == "off"
            raise KeyError("inside")
    except KeyError:
        pass
    assert _errors.EQX_ON_ERROR == before


def test_no_runtime_checks_does_not_leak_into_later_checks():
    """A check traced inside `no_runtime_checks` must not switch off the same check traced
    later outside it. equinox caches the trace of its error_if by argument shape, not by
    `EQX_ON_ERROR`, so without a separate cache for the "off" traces a user's later
    error_if (diffrax's save-time check, say) of the same shape silently checked nothing."""
    import equinox as eqx

    def checked(x):
        return eqx.error_if(x, x < 0, "negative entry")

    def program():  # a new outer program each time, as samflow's solver and a user's are
        return eqx.filter_jit(lambda x: 2.0 * checked(x))

    x = jnp.array([1.0, -2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0])  # a shape no other test uses
    with _cache.no_runtime_checks():
        assert np.array_equal(program()(x), 2.0 * x)  # off: no check
    with pytest.raises(Exception, match="negative entry"):
        jax.block_until_ready(program()(x))  # outside: checked again
    with _cache.no_runtime_checks():
        assert np.array_equal(program()(x), 2.0 * x)  # and off again inside
