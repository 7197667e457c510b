"""Issue 14's lever "exact paths where the math gives them", measured.

GD and linf-SAM at depth 2 with equal layers have closed forms in the rescaled clock
tau (`samflow.theory.gd_depth2_symmetric`, `linf_depth2_symmetric`; docs/theory.md
s.3.1). This script times them against samflow's ODE solve of the same 64x64 chart
(d = 5, mu = (0.2, ..., 1.0), alpha in [1e-2, 1e2], rho in [1e-2, 1e1], 64 save
times in tau in [0, 20]), in one run, and prints the agreement (max relative error of
beta over the cells and save times) and the ratio. It only measures.

    python scripts/lever_exact.py
"""

from __future__ import annotations

import time

import jax
import numpy as np

jax.config.update("jax_enable_x64", True)

import samflow as sf  # noqa: E402
from samflow import theory  # noqa: E402
from samflow.sweep import solve_grid, use_cpu_cores  # noqa: E402

MU = np.array([0.2, 0.4, 0.6, 0.8, 1.0])
N = 64
TAU = np.linspace(0.0, 20.0, 64)


def grid():
    a, r = np.meshgrid(np.geomspace(1e-2, 1e2, N), np.geomspace(1e-2, 1e1, N), indexing="ij")
    return a.ravel(), r.ravel()


def solve(method, alpha, rho, data):
    """samflow's fastest chart path: `solve_grid` (batches of 128 cells per device, the
    cores as devices, as the sweep and scripts/bench.py run it)."""
    W0 = np.broadcast_to(alpha[:, None, None], (alpha.size, 2, MU.size)).copy()
    out = solve_grid(method, data, W0, rho, TAU, clock="tau", batch_size=128)
    return np.asarray(jax.block_until_ready(out.beta)), np.asarray(out.status)


def closed(method, alpha, rho):
    A = np.repeat(alpha[:, None], MU.size, 1)[:, None, :]
    if method == "gd":
        w = theory.gd_depth2_symmetric(MU, alpha=A, tau=np.broadcast_to(TAU, (alpha.size, TAU.size)))
    else:
        w = theory.linf_depth2_symmetric(MU, alpha=A, rho=rho[:, None, None], tau=np.broadcast_to(TAU, (alpha.size, TAU.size)))
    return w**2


def best(fn, repeats=3):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def main():
    use_cpu_cores()
    data = sf.single_sample(MU)
    alpha, rho = grid()
    print(f"exact paths vs the ODE: {N}x{N} chart, d = {MU.size}, {TAU.size} saves in tau in [0, 20]")
    for method in ("gd", "linf"):
        solve(method, alpha, rho, data)  # compile
        t_ode, (b_ode, status) = best(lambda: solve(method, alpha, rho, data), 2)
        t_cf, b_cf = best(lambda: closed(method, alpha, rho))
        ok = np.isfinite(b_ode).all(axis=(1, 2))
        scale = np.maximum(np.linalg.norm(b_cf, axis=2), 1e-300)
        err = np.linalg.norm(b_ode - b_cf, axis=2) / scale
        print(f"  {method:4s}: ODE {t_ode:8.3f} s ({alpha.size / t_ode:9.0f} cells/s), closed form {t_cf * 1e3:7.2f} ms "
              f"({alpha.size / t_cf:11.0f} cells/s): {t_ode / t_cf:7.0f}x; max rel. error of beta "
              f"{np.max(err[ok]):.1e} over {ok.sum()} finished cells (status counts {np.bincount(status)})")


if __name__ == "__main__":
    main()
