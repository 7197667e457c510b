"""Stored programs (`samflow._util.cache.StoredProgram`): a second process loads a solver's
compiled program instead of tracing it again. The loaded program must give the
traced path's results bit for bit, and anything wrong with a stored file (stale,
truncated, corrupt, unloadable, failing when run) must fall back to tracing with
equal results."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import xarray as xr

import samflow as sf
from samflow._util import cache as _cache
from samflow._engine.lanes import program_family
from samflow.config import load_config
from samflow.flows import Clock, Method
from samflow.sweep import _devices, solve_grid
from samflow.sweep._run import build_data, plan_sweep

ROOT = Path(__file__).resolve().parent.parent


def _bits(x) -> np.ndarray:
    """The bytes of an array (float NaNs and signed zeros compared as bits)."""
    x = np.ascontiguousarray(np.asarray(x))
    return x.view(np.uint8)


def _same_bits(a, b) -> bool:
    la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    return len(la) == len(lb) and all(
        np.shape(x) == np.shape(y) and np.asarray(x).dtype == np.asarray(y).dtype and np.array_equal(_bits(x), _bits(y))
        for x, y in zip(la, lb)
    )


@pytest.fixture
def programs(monkeypatch, tmp_path):
    """Stored programs on, in a fresh folder (as `enable_compilation_cache` turns them on
    for a command line; JAX's own cache is left as the test process has it)."""
    folder = tmp_path / "programs"
    monkeypatch.setattr(_cache, "_programs", folder)
    return folder


def _affine():
    return jax.jit(lambda x, y: jnp.sin(x) * y + jnp.cumsum(x))


ARGS = (jnp.linspace(0.0, 1.0, 7), jnp.asarray(3.0))


def test_programs_off_is_the_jitted_function():
    """With the stored programs off (the test process: `SAMFLOW_COMPILATION_CACHE=off`) a
    StoredProgram is its jitted function."""
    assert _cache.programs_dir() is None
    prog = _cache.StoredProgram(_affine(), "test")
    assert _same_bits(prog(*ARGS), _affine()(*ARGS)) and prog.loaded == 0


def test_library_process_stores_programs_by_default(monkeypatch, tmp_path):
    """A library process (no entry point decided) keeps its programs in the user's cache
    folder unless `SAMFLOW_COMPILATION_CACHE=off` or `SAMFLOW_STORED_PROGRAMS=off`."""
    monkeypatch.setattr(_cache, "_programs_decided", False)
    for name in (_cache.CACHE_ENV, _cache.PROGRAMS_ENV, "JAX_COMPILATION_CACHE_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert _cache.programs_dir() == tmp_path / "samflow" / "jax" / _cache.PROGRAMS_SUBDIR
    monkeypatch.setenv(_cache.CACHE_ENV, str(tmp_path / "mine"))
    assert _cache.programs_dir() == tmp_path / "mine" / _cache.PROGRAMS_SUBDIR
    monkeypatch.setenv(_cache.PROGRAMS_ENV, "off")
    assert _cache.programs_dir() is None
    monkeypatch.delenv(_cache.PROGRAMS_ENV)
    monkeypatch.setenv(_cache.CACHE_ENV, "off")
    assert _cache.programs_dir() is None


def test_second_program_loads_the_stored_one_with_equal_bits(programs):
    first = _cache.StoredProgram(_affine(), "test")
    out = first(*ARGS)
    files = sorted(programs.iterdir())
    assert len(files) == 1 and files[0].name == _cache.program_key("test", ARGS) + ".jaxexe"
    second = _cache.StoredProgram(_affine(), "test")  # a new process would build a new one
    assert _same_bits(second(*ARGS), out) and second.loaded == 1
    assert _same_bits(second(*ARGS), _affine()(*ARGS))  # and again, from memory


def test_key_names_everything_that_changes_the_program():
    key = _cache.program_key("test", ARGS)
    assert key == _cache.program_key("test", (jnp.linspace(0.0, 1.0, 7), jnp.asarray(3.0)))
    assert key != _cache.program_key("other", ARGS)  # the static arguments
    assert key != _cache.program_key("test", (jnp.linspace(0.0, 1.0, 8), jnp.asarray(3.0)))  # a shape
    assert key != _cache.program_key("test", (jnp.linspace(0.0, 1.0, 7, dtype=jnp.float32), jnp.asarray(3.0)))
    assert key != _cache.program_key("test", (ARGS[0], 3.0))  # a Python scalar, not an array
    s1, s2 = sf.SolverSettings(), sf.SolverSettings(rtol=1e-9)
    assert _cache.program_key(("m", s1), ARGS) != _cache.program_key(("m", s2), ARGS)


@pytest.mark.parametrize("damage", ["truncated", "flipped byte", "other key", "not a program"])
def test_damaged_file_is_ignored_and_rewritten(programs, damage):
    out = _cache.StoredProgram(_affine(), "test")(*ARGS)
    path = next(programs.iterdir())
    blob = path.read_bytes()
    if damage == "truncated":
        path.write_bytes(blob[: len(blob) // 2])
    elif damage == "flipped byte":
        path.write_bytes(blob[:-100] + bytes([blob[-100] ^ 0xFF]) + blob[-99:])
    elif damage == "other key":  # a file stored under another key, renamed onto this one
        head, rest = blob.split(b"\n", 1)
        path.write_bytes(head[:-4] + b"0000\n" + rest)
    else:
        path.write_bytes(b"hello\n")
    again = _cache.StoredProgram(_affine(), "test")
    assert _same_bits(again(*ARGS), out) and again.loaded == 0
    third = _cache.StoredProgram(_affine(), "test")
    assert _same_bits(third(*ARGS), out) and third.loaded == 1  # the rewritten file loads


def test_program_that_fails_when_run_falls_back_and_is_replaced(programs, monkeypatch):
    out = _cache.StoredProgram(_affine(), "test")(*ARGS)
    path = next(programs.iterdir())

    def broken(*args):
        raise RuntimeError("NOT_FOUND: Function fusion.1 not found")

    real_load = _cache._load
    monkeypatch.setattr(_cache, "_load", lambda p, key, args: broken)
    prog = _cache.StoredProgram(_affine(), "test")
    assert _same_bits(prog(*ARGS), out) and prog.loaded == 0
    monkeypatch.setattr(_cache, "_load", real_load)
    assert path.exists()  # removed, and written again by the fallback's compile
    fresh = _cache.StoredProgram(_affine(), "test")
    assert _same_bits(fresh(*ARGS), out) and fresh.loaded == 1


def test_unwritable_folder_still_runs(monkeypatch, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setattr(_cache, "_programs", blocker / "programs")  # cannot be made
    prog = _cache.StoredProgram(_affine(), "test")
    assert _same_bits(prog(*ARGS), _affine()(*ARGS)) and prog.loaded == 0


def test_environment_turns_only_the_programs_off(monkeypatch, tmp_path):
    updates = []
    monkeypatch.setattr(jax.config, "update", lambda name, value: updates.append(name))
    monkeypatch.setattr(_cache, "_programs", None)
    monkeypatch.setenv(_cache.PROGRAMS_ENV, "off")
    assert _cache.enable_compilation_cache(tmp_path / "c") == tmp_path / "c" and _cache.programs_dir() is None
    assert "jax_compilation_cache_dir" in updates  # JAX's cache stays on
    monkeypatch.delenv(_cache.PROGRAMS_ENV)
    _cache.enable_compilation_cache(tmp_path / "c")
    assert _cache.programs_dir() == tmp_path / "c" / _cache.PROGRAMS_SUBDIR


def test_sweep_solver_loaded_equals_traced(programs):
    """The sweep's solver (shard_map over the devices, vmapped diffrax loop): traced,
    stored-and-run, and loaded by a new StoredProgram give the same bits, on cells of
    the default sweep (its data, settings and save-time spacing; 4 cells, 8 saves)."""
    cfg = load_config(ROOT / "configs" / "default.toml")
    data = build_data(cfg)
    W0, rho, _ = plan_sweep(cfg, data).cells()
    pick = np.array([0, 40, 60, 95])  # one cell of each l2 regime and the largest alpha
    W0, rho = W0[pick], rho[pick]
    ts = np.geomspace(1e-2, 1e4, 8)
    settings = cfg.solver.to_settings(cfg.loss)
    run = lambda: solve_grid("gd", data, W0, rho, ts, settings=settings, batch_size=128, devices=1)
    _devices.sharded_solver.cache_clear()
    traced = run()  # traced and compiled, and stored
    assert len(list(programs.iterdir())) == 1
    _devices.sharded_solver.cache_clear()  # a new process: a new StoredProgram, which loads the file
    loaded = run()
    family = program_family(Method.GD, data.X.shape[0], among=[Method.GD])  # what solve_grid("gd") compiles
    fn, _ = _devices.sharded_solver(_devices.resolve_devices(1), family, Clock.T,
                                    settings.resolved(Method.GD, W0, data, Clock.T), False, len(pick), 0)  # 4 lanes, no switches
    assert fn.loaded == 1
    _devices.sharded_solver.cache_clear()
    assert _same_bits(traced, loaded)
    with pytest.MonkeyPatch.context() as mp:  # the traced path of a library process
        mp.setattr(_cache, "_programs", None)
        plain = run()
    _devices.sharded_solver.cache_clear()
    assert _same_bits(plain, loaded)


def _sweep(out: Path, cache: Path, programs: str) -> xr.Dataset:
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_NUM_CPU_DEVICES")}
    env.update(PYTHONPATH=str(ROOT), SAMFLOW_COMPILATION_CACHE=str(cache), SAMFLOW_STORED_PROGRAMS=programs)
    r = subprocess.run([sys.executable, "-m", "samflow.sweep", str(ROOT / "configs" / "default.toml"), "--out",
                        str(out), "--quiet", "--no-figures"], capture_output=True, text=True, timeout=900, env=env,
                       cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    return xr.load_dataset(out / "results.nc")


@pytest.mark.slow
def test_default_sweep_second_run_equals_traced_run(tmp_path):
    """`python -m samflow.sweep configs/default.toml` three times: traced (stored programs
    off), storing (first run), loading (second run, no tracing): every variable of the
    results file equal bit for bit, switch times included."""
    traced = _sweep(tmp_path / "a", tmp_path / "cache-a", "off")
    first = _sweep(tmp_path / "b", tmp_path / "cache-b", "on")
    n_programs = len(list((tmp_path / "cache-b" / _cache.PROGRAMS_SUBDIR).iterdir()))
    # One program for the 3 flows (the method is data of the program, samflow._engine.lanes.program_family;
    # it was 3, one per method, before), each solved once with its switch times in the same pass.
    assert n_programs == 1
    second = _sweep(tmp_path / "c", tmp_path / "cache-b", "on")
    assert len(list((tmp_path / "cache-b" / _cache.PROGRAMS_SUBDIR).iterdir())) == n_programs
    assert "switch_time" in traced
    for ds in (first, second):
        assert sorted(ds.variables) == sorted(traced.variables)
        for name in traced.variables:
            assert np.array_equal(_bits(traced[name].values), _bits(ds[name].values)), name


FIRST_SOLVE = """
import sys
import jax, numpy as np
jax.config.update("jax_enable_x64", True)
import samflow as sf
from samflow._util import cache as _cache
from samflow._engine import integrate as _integrate
before = jax.config.jax_compilation_cache_dir
tr = sf.solve(sys.argv[1], sf.single_sample([0.2, 0.4, 0.6, 0.8, 1.0]), alpha=0.1, rho=0.1, ts=np.geomspace(1e-2, 1e4, 8))
assert jax.config.jax_compilation_cache_dir == before  # no JAX setting changed
print("STATUS", int(tr.status), "BETA", np.asarray(tr.beta).tobytes().hex()[:64])
"""


def test_first_solve_from_python_loads_the_stored_program(tmp_path):
    """With $SAMFLOW_COMPILATION_CACHE set (the user's opt-in), `samflow.solve` in a plain
    Python process stores its program, and the next process loads it (not traced again)
    with equal bits; a solve of another method compiles and stores a program of its own
    (`samflow.solve` compiles the called method alone) and leaves the first file as it
    was; `import samflow` and the solve change no JAX setting."""
    env = {k: v for k, v in os.environ.items() if k not in (_cache.PROGRAMS_ENV, "JAX_COMPILATION_CACHE_DIR")}
    env.update(SAMFLOW_COMPILATION_CACHE=str(tmp_path / "cache"), PYTHONPATH=str(ROOT))
    runs = [subprocess.run([sys.executable, "-c", FIRST_SOLVE, "l2"], capture_output=True, text=True, env=env,
                           timeout=900) for _ in range(2)]
    for run in runs:
        assert run.returncode == 0, run.stderr[-2000:]
    files = sorted((tmp_path / "cache" / _cache.PROGRAMS_SUBDIR).iterdir())
    assert len(files) == 1 and files[0].suffix == ".jaxexe"
    stamp = files[0].stat().st_mtime_ns
    assert runs[0].stdout.split("STATUS")[1] == runs[1].stdout.split("STATUS")[1]
    # The second process loaded the file rather than writing it again (a compile writes it
    # anew); a solve of gd stores a program of its own, with numbers of its own.
    third = subprocess.run([sys.executable, "-c", FIRST_SOLVE, "gd"], capture_output=True, text=True, env=env,
                           timeout=900)
    assert third.returncode == 0, third.stderr[-2000:]
    after = sorted((tmp_path / "cache" / _cache.PROGRAMS_SUBDIR).iterdir())
    assert len(after) == 2 and files[0] in after
    assert files[0].stat().st_mtime_ns == stamp
    assert third.stdout.split("STATUS")[1] != runs[0].stdout.split("STATUS")[1]  # gd's numbers, not l2's
