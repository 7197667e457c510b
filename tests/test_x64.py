"""float64 without side effects (issue 13 item 7): `import samflow` changes no
JAX setting; the solvers compute in float64 in a float32 program and leave it
float32; `solve_cell`, traced in the caller's program, refuses float32 in one line.

These run in subprocesses: tests/conftest.py turns float64 on for this process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

import samflow as sf

ROOT = Path(__file__).resolve().parents[1]
MU = [0.2, 0.4, 0.6, 0.8, 1.0]


def _run(code: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu")
    env.pop("JAX_ENABLE_X64", None)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)


def test_import_leaves_jax_in_float32():
    p = _run("import jax, samflow, samflow.sweep, samflow.figures, samflow.analysis, samflow.atlas, samflow.edges; "
             "print(jax.config.jax_enable_x64)")
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "False"


def test_import_leaves_the_matplotlib_backend_alone():
    """plots.py, figures/ and the CNN plots used to call matplotlib.use("Agg") on import."""
    code = (
        "import matplotlib; matplotlib.use('svg')\n"
        "import samflow.plots, samflow.figures, samflow.experiments.cnn_plots, samflow.experiments.cnn_study_plots, samflow.atlas\n"
        "print(matplotlib.get_backend())"
    )
    p = _run(code)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "svg"


def test_solve_in_a_float32_program_gives_the_float64_result_and_keeps_float32(tmp_path):
    out = tmp_path / "beta.npy"
    code = f"""
import json, jax, jax.numpy as jnp, numpy as np
import samflow as sf
data = sf.single_sample({MU})
tr = sf.solve("l2", data, alpha=np.array([0.003, 0.006]), rho=np.array([0.01, 0.01]),
              ts=[0.0, 10.0, 1e4], alpha_batched=True)
np.save({str(out)!r}, np.asarray(tr.beta))
print(json.dumps([str(tr.beta.dtype), str(data.X.dtype), str(jnp.zeros(1).dtype),
                  bool(jax.config.jax_enable_x64), np.asarray(tr.status).tolist()]))
"""
    p = _run(code)
    assert p.returncode == 0, p.stderr
    beta_dtype, x_dtype, user_dtype, x64, status = json.loads(p.stdout.strip().splitlines()[-1])
    assert (beta_dtype, x_dtype, user_dtype, x64) == ("float64", "float64", "float32", False)
    ref = sf.solve("l2", sf.single_sample(MU), alpha=np.array([0.003, 0.006]), rho=np.array([0.01, 0.01]),
                   ts=[0.0, 10.0, 1e4], alpha_batched=True)
    assert status == np.asarray(ref.status).tolist() == [int(sf.Status.COLLAPSED), int(sf.Status.FINISHED)]
    # the same program as in a float64 process, to the last bit
    np.testing.assert_array_equal(np.load(out), np.asarray(ref.beta))


def test_solve_cell_refuses_float32_in_one_line():
    code = """
import jax.numpy as jnp
import samflow as sf
from samflow.solver import SolverSettings
W0 = jnp.full((2, 5), 0.006)
sf.solve_cell(W0, jnp.asarray(0.01), sf.single_sample([0.2, 0.4, 0.6, 0.8, 1.0]), jnp.asarray([1.0, 2.0]),
              method="l2", clock="t", settings=SolverSettings())
"""
    p = _run(code)
    assert p.returncode != 0
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("RuntimeError: samflow.solve_cell needs float64 in JAX")
    assert 'jax.config.update("jax_enable_x64", True)' in last


def test_exact_cpu_arithmetic_adds_only_flags_this_jaxlib_has_and_leaves_the_users(monkeypatch):
    """XLA ends the process on a flag it does not know, and the reduce flag is
    experimental: it is added only where jaxlib's XLA has it. A flag the user set in
    XLA_FLAGS is left as set (then the call says the arithmetic is not exact)."""
    from jax._src import xla_bridge

    from samflow._util import x64 as _x64

    monkeypatch.setattr(_x64, "_jaxlib_has", lambda *needles: False)
    assert _x64.exact_flags() == (_x64.EXACT_CPU_FLAG,)
    monkeypatch.setattr(_x64, "_jaxlib_has", lambda *needles: True)
    assert _x64.exact_flags() == (_x64.EXACT_CPU_FLAG, _x64.EXACT_REDUCE_FLAG)
    for flags, exact in [
        (f"--xla_force_host_platform_device_count=2 {_x64.EXACT_CPU_FLAG} {_x64.EXACT_REDUCE_FLAG}", True),
        (f"{_x64.EXACT_CPU_FLAG} --xla_cpu_experimental_ynn_fusion_type=dot,reduce", False),
        (f"--xla_cpu_max_isa=AVX2 {_x64.EXACT_REDUCE_FLAG}", False),
    ]:
        monkeypatch.setenv("XLA_FLAGS", flags)
        assert _x64.exact_cpu_arithmetic() is exact
        assert os.environ["XLA_FLAGS"] == flags
    # A flag missing once JAX's backend has started: too late, nothing is changed.
    monkeypatch.setattr(xla_bridge, "backends_are_initialized", lambda: True)
    monkeypatch.setenv("XLA_FLAGS", _x64.EXACT_CPU_FLAG)
    assert _x64.exact_cpu_arithmetic() is False
    assert os.environ["XLA_FLAGS"] == _x64.EXACT_CPU_FLAG


def test_the_fast_compile_flag_is_added_where_jaxlib_has_it(monkeypatch):
    """`FAST_COMPILE_FLAG` joins the exact flags in a process whose backend has not
    started (where jaxlib has it), is not part of what the call calls exact, and
    this test process (tests/conftest.py) runs with it, as the pinned bits were made."""
    from jax._src import xla_bridge

    from samflow._util import x64 as _x64

    assert _x64.FAST_COMPILE_FLAG in os.environ.get("XLA_FLAGS", "").split()  # jaxlib 0.10.2 has it
    monkeypatch.setattr(_x64, "_jaxlib_has", lambda *needles: True)
    assert _x64.process_flags() == (_x64.EXACT_CPU_FLAG, _x64.EXACT_REDUCE_FLAG, _x64.FAST_COMPILE_FLAG)
    monkeypatch.setattr(xla_bridge, "backends_are_initialized", lambda: False)
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
    assert _x64.exact_cpu_arithmetic() is True
    assert os.environ["XLA_FLAGS"].split() == ["--xla_force_host_platform_device_count=2", *_x64.process_flags()]
    # The user's own choice of the emitters is left as set, and the arithmetic is still exact.
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_use_fusion_emitters=true")
    assert _x64.exact_cpu_arithmetic() is True
    assert os.environ["XLA_FLAGS"].split() == ["--xla_cpu_use_fusion_emitters=true", *_x64.exact_flags()]
    # Started already: nothing is added; exact as long as the exact flags are there.
    monkeypatch.setattr(xla_bridge, "backends_are_initialized", lambda: True)
    monkeypatch.setenv("XLA_FLAGS", f"{_x64.EXACT_CPU_FLAG} {_x64.EXACT_REDUCE_FLAG}")
    assert _x64.exact_cpu_arithmetic() is True
    assert os.environ["XLA_FLAGS"] == f"{_x64.EXACT_CPU_FLAG} {_x64.EXACT_REDUCE_FLAG}"
    monkeypatch.setattr(_x64, "_jaxlib_has", lambda *needles: False)
    assert _x64.process_flags() == (_x64.EXACT_CPU_FLAG,)


def test_jaxlib_has_finds_the_flags_of_this_jaxlib_only():
    from samflow._util.x64 import _jaxlib_has

    assert _jaxlib_has(b"xla_cpu_max_isa")  # a flag every supported jaxlib has
    assert not _jaxlib_has(b"xla_cpu_max_isa", b"xla_no_such_flag_\x01")


def test_solve_compiles_with_the_classic_emitters_without_the_process_flag():
    """`samflow.solve` in a process without samflow's XLA flags compiles its program
    with XLA's classic fusion emitters as a per-program option
    (`samflow._util.x64.compile_options`): the bits of a process that sets the flag,
    not those of XLA's default emitters; a user's own choice of the flag wins."""
    code = (
        "import hashlib, numpy as np, samflow as sf\n"
        "out = sf.solve('l2', sf.single_sample([0.2, 0.4, 0.6, 0.8, 1.0]), alpha=np.array([0.01, 0.1, 0.5, 2.0]),\n"
        "               rho=np.full(4, 0.3), alpha_batched=True, ts=np.geomspace(1e-2, 1e3, 8))\n"
        "print(hashlib.sha256(np.asarray(out.beta).tobytes()).hexdigest())\n"
    )
    digests = {}
    for flags in ("", "--xla_cpu_use_fusion_emitters=false", "--xla_cpu_use_fusion_emitters=true"):
        env = dict(os.environ, PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu", XLA_FLAGS=flags,
                   SAMFLOW_COMPILATION_CACHE="off")
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
        assert proc.returncode == 0, proc.stderr[-2000:]
        digests[flags] = proc.stdout.strip().splitlines()[-1]
    assert digests[""] == digests["--xla_cpu_use_fusion_emitters=false"]
    # The emitters do change the last bits (so the equality above says the option applied).
    assert digests["--xla_cpu_use_fusion_emitters=true"] != digests[""]


def test_compile_options_leave_the_users_flag_alone(monkeypatch):
    from samflow._util import x64 as _x64

    monkeypatch.setattr(_x64, "_jaxlib_has", lambda *needles: True)
    monkeypatch.setenv("XLA_FLAGS", "")
    assert _x64.compile_options() == {"xla_cpu_use_fusion_emitters": False}
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_use_fusion_emitters=true")
    assert _x64.compile_options() is None  # the user's choice
    monkeypatch.setenv("XLA_FLAGS", " ".join(_x64.process_flags()))
    assert _x64.compile_options() is None  # the command lines: the flag itself, their programs unchanged
    monkeypatch.setattr(_x64, "_jaxlib_has", lambda *needles: False)
    monkeypatch.setenv("XLA_FLAGS", "")
    assert _x64.compile_options() is None  # a jaxlib without the flag
