"""Sweeps sharded over devices: on 4 CPU devices (forced host platform, in a
subprocess, since the device count is fixed when JAX starts) the results equal
the single-device run bit for bit; `use_cpu_cores` gives JAX one device per
core unless the user chose a count."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _python(code: str, **env) -> str:
    full_env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_NUM_CPU_DEVICES")}
    full_env.update(env)
    r = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
        timeout=1800, env=full_env, cwd=ROOT,  # a hang guard: at load 12 on 2 cores this file took 263 s
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


SHARDED = """
import dataclasses
import numpy as np
from samflow._util.x64 import exact_cpu_arithmetic
assert exact_cpu_arithmetic()  # the same bits at any call shape need it (docs/running.md), as in the command lines
import jax
import samflow as sf
from samflow.sweep import resolve_devices
from samflow.sweep import solve_grid

assert len(jax.local_devices()) == 4 and len(resolve_devices()) == 4
data = sf.single_sample([0.2, 0.4, 0.6, 0.8, 1.0])
ts = np.geomspace(1e-2, 1e3, 12)
a, r = np.geomspace(1e-2, 1e2, 10), np.geomspace(1e-2, 1.0, 3)
A, R = (x.ravel() for x in np.meshgrid(a, r, indexing="ij"))
W0 = np.broadcast_to((A * R)[:, None, None], (A.size, 2, 5)).copy()

def same(x, y):
    return all(np.array_equal(getattr(x, f.name), getattr(y, f.name), equal_nan=True)
               for f in dataclasses.fields(x))

one = solve_grid("l2", data, W0, R, ts, batch_size=4, devices=1, sort_key=A)
assert (one.status == int(sf.Status.COLLAPSED)).sum() >= 3
runs = {
    "4 devices (default), one chunk": dict(),
    "4 devices, chunks of 7 (not a multiple of the device count)": dict(chunk_size=7),
    "2 of the 4 devices": dict(devices=jax.local_devices()[2:]),
}
for what, kw in runs.items():
    out = solve_grid("l2", data, W0, R, ts, batch_size=4, sort_key=A, **kw)
    assert same(out, one), what
print("OK", len(runs))
"""


def test_sharded_equals_single_device_bit_for_bit():
    out = _python(SHARDED, XLA_FLAGS="--xla_force_host_platform_device_count=4")
    assert "OK 3" in out


def test_use_cpu_cores_sets_the_device_count_unless_the_user_chose():
    code = """
    import jax
    from samflow.sweep import use_cpu_cores
    print(use_cpu_cores({n}), len(jax.local_devices()), use_cpu_cores(5))
    """
    # A fresh process: 3 devices; once JAX has started, a second call does nothing.
    assert _python(code.format(n=3)).split() == ["3", "3", "None"]
    # The user's choice wins: XLA_FLAGS, or JAX_NUM_CPU_DEVICES.
    flags = "--xla_force_host_platform_device_count=2"
    assert _python(code.format(n=3), XLA_FLAGS=flags).split() == ["None", "2", "None"]
    assert _python(code.format(n=3), JAX_NUM_CPU_DEVICES="2").split() == ["None", "2", "None"]
    # Default: one device per core this process may run on.
    out = _python(code.format(n="")).split()
    assert out[0] == out[1] == str(len(os.sched_getaffinity(0)))


def test_cli_gives_jax_one_device_per_core():
    code = """
    import runpy, sys
    import jax
    sys.argv = ["samflow.sweep", "--help"]
    try:
        runpy.run_module("samflow.sweep", run_name="__main__")
    except SystemExit:
        pass
    print(len(jax.local_devices()))
    """
    assert _python(code).split()[-1] == str(len(os.sched_getaffinity(0)))
    assert _python(code, JAX_NUM_CPU_DEVICES="1").split()[-1] == "1"
