"""Python's garbage collector waits while samflow imports JAX and traces a program
(`samflow._util.startup.paused_gc`), and is as the program had it afterwards."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from samflow._util import cache as _cache
from samflow._util.startup import paused_gc

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def gc_on():
    """The collector on for the test, and as it was after it."""
    was = gc.isenabled()
    gc.enable()
    yield
    (gc.enable if was else gc.disable)()


def test_paused_gc_restores_the_state_it_found(gc_on):
    with paused_gc():
        assert not gc.isenabled()
        with paused_gc():  # an inner block leaves it to the outer one
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(ZeroDivisionError):
        with paused_gc():
            1 / 0
    assert gc.isenabled()
    gc.disable()
    with paused_gc():
        assert not gc.isenabled()
    assert not gc.isenabled()  # it was off: it stays off


@pytest.mark.parametrize("folder", [False, True], ids=["traced", "stored"])
def test_a_program_is_traced_with_the_collector_paused(gc_on, monkeypatch, tmp_path, folder):
    """Both paths of `StoredProgram` (the jitted call, and compile-and-store): the trace
    runs with the collector off, the call returns with it on, with the jitted result."""
    if folder:
        monkeypatch.setattr(_cache, "_programs", tmp_path / "programs")
    seen = []

    def f(x):
        seen.append(gc.isenabled())  # Python runs at trace time only
        return jnp.sin(x) * 2.0

    prog = _cache.StoredProgram(jax.jit(f), ("test_paused_gc", folder))
    x = jnp.linspace(0.0, 1.0, 5)
    out = prog(x)
    assert seen == [False]
    assert gc.isenabled()
    np.testing.assert_array_equal(np.asarray(out), np.asarray(jnp.sin(x) * 2.0))
    if folder:
        assert len(list((tmp_path / "programs").iterdir())) == 1


@pytest.mark.parametrize("module", ["samflow", "samflow.sweep", "samflow.plot"])
def test_importing_samflow_collects_no_garbage_and_leaves_the_collector_on(module):
    """Without the pause, `import samflow` ran the collector about 300 times (0.11 s of
    0.9 s); with it, 4-5 times: while Python imports `samflow._util.startup` (before the
    pause) and once at the end of each paused import (its garbage). The collector is on
    after the import, and stays off where the program had it off."""
    code = (
        "import gc, sys\n"
        "runs = [0]\n"
        "gc.callbacks.append(lambda phase, info: runs.__setitem__(0, runs[0] + (phase == 'start')))\n"
        "off = sys.argv[1] == 'off'\n"
        "if off: gc.disable()\n"
        f"import {module}\n"
        "print(runs[0], gc.isenabled())\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu")
    for state, enabled in (("on", "True"), ("off", "False")):
        p = subprocess.run([sys.executable, "-c", code, state], capture_output=True, text=True, env=env, timeout=600)
        assert p.returncode == 0, p.stderr
        runs, after = p.stdout.split()
        assert after == enabled
        assert int(runs) <= 10, p.stdout
