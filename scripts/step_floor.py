"""What XLA's CPU code makes of a bare Tsit5 step of the chart's field, by layout.

The floor under the lane engine's step (issue 34): the depth-2 l2-SAM field of
`scripts/bench.py`'s chart (one sample mu = (0.2, ..., 1.0); the residual
<mu, beta> - 1 in place of the logistic loss's slope, one exp less), six Tsit5 stages from diffrax's
tableau, the RMS error norm and a step-size rule, in a `fori_loop` of 400 steps
over `--width` lanes on one CPU device; no events, saves, records or refills.
Three layouts of the same arithmetic:

- `lane_first`: `jax.vmap` of the per-lane `(L, d)` code (the engine's layout);
- `rows`: every element a `(width,)` vector, the sums over d written out (the
  lane-minor "structure of arrays");
- `lane_minor_arr`: `(L, d, width)` arrays, the sums as reductions over d.

It prints ns per lane and step for each (best of 5). The numba loop of
`scripts/bench.py` (baseline C) takes about 480 ns of one core per step of a
cell, events, saves and all (docs/benchmarks.md, "Issue 34, seventh round").

    python scripts/step_floor.py                  # XLA's default flags
    python scripts/step_floor.py --exact          # samflow's process flags (exact arithmetic, classic emitters)
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--exact", action="store_true", help="samflow's XLA flags (samflow._util.x64.exact_cpu_arithmetic)")
    args = ap.parse_args(argv)
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=1").strip()
    if args.exact:
        from samflow._util.x64 import exact_cpu_arithmetic

        exact_cpu_arithmetic()
    import diffrax
    import jax
    import jax.numpy as jnp
    import numpy as np

    jax.config.update("jax_enable_x64", True)
    tab = diffrax.Tsit5.tableau
    W, d = args.width, 5
    mu = np.linspace(0.2, 1.0, d)
    tmap = jax.tree.map

    def field_rows(Y, rho):  # Y: 2d vectors (width,), layer 1 then layer 2
        w1, w2 = Y[:d], Y[d:]
        r = sum(mu[j] * w1[j] * w2[j] for j in range(d)) - 1.0
        g1 = [r * mu[j] * w2[j] for j in range(d)]
        g2 = [r * mu[j] * w1[j] for j in range(d)]
        c = rho / jnp.sqrt(sum(g * g for g in g1) + sum(g * g for g in g2))
        p1 = [w1[j] + c * g1[j] for j in range(d)]
        p2 = [w2[j] + c * g2[j] for j in range(d)]
        rp = sum(mu[j] * p1[j] * p2[j] for j in range(d)) - 1.0
        return tuple([-rp * mu[j] * p2[j] for j in range(d)] + [-rp * mu[j] * p1[j] for j in range(d)])

    def field_lane(Y, rho):  # Y (2, d): one lane
        m = jnp.asarray(mu)
        g = (jnp.sum(m * Y[0] * Y[1]) - 1.0) * m * Y[::-1]
        P = Y + rho / jnp.sqrt(jnp.sum(g * g)) * g
        return -(jnp.sum(m * P[0] * P[1]) - 1.0) * m * P[::-1]

    def field_arr(Y, rho):  # Y (2, d, width)
        m = jnp.asarray(mu)[:, None]
        g = (jnp.sum(m * Y[0] * Y[1], axis=0) - 1.0) * m * Y[::-1]
        P = Y + rho / jnp.sqrt(jnp.sum(g * g, axis=(0, 1))) * g
        return -(jnp.sum(m * P[0] * P[1], axis=0) - 1.0) * m * P[::-1]

    def tsit5(f, h, y, f0, rho, norm, rtol=1e-8, atol=1e-8):
        ks = [tmap(lambda v: h * v, f0)]
        yi = y
        for row in tab.a_lower:
            yi = y
            for a, k in zip(row, ks):
                if a != 0:
                    yi = tmap(lambda u, v, a=a: u + float(a) * v, yi, k)
            fi = f(yi, rho)
            ks.append(tmap(lambda v: h * v, fi))
        err = None
        for e, k in zip(tab.b_error, ks):
            if e != 0:
                err = tmap(lambda v, e=e: float(e) * v, k) if err is None else tmap(lambda u, v, e=e: u + float(e) * v, err, k)
        scaled = tmap(lambda e, a, b: e / (atol + rtol * jnp.maximum(jnp.abs(a), jnp.abs(b))), err, y, yi)
        en = norm(scaled)
        keep = en <= 1.0
        sel = lambda a, b: tmap(lambda u, v: jnp.where(keep, u, v), a, b)
        return h * jnp.clip(0.9 * en ** -0.2, 0.2, 10.0), sel(yi, y), sel(fi, f0)

    rng = np.random.default_rng(0)
    alpha = np.geomspace(1e-2, 1e2, W)
    rho = jnp.asarray(np.geomspace(1e-2, 1e1, W)[rng.permutation(W)])
    layouts = {
        "lane_first": (field_lane, jnp.asarray(np.broadcast_to(alpha[:, None, None], (W, 2, d)).copy()),
                       lambda e: jnp.sqrt(jnp.mean(e * e)), True),
        "rows": (field_rows, tuple(jnp.asarray(alpha) for _ in range(2 * d)),
                 lambda e: jnp.sqrt(sum(v * v for v in e) / len(e)), False),
        "lane_minor_arr": (field_arr, jnp.asarray(np.broadcast_to(alpha, (2, d, W)).copy()),
                           lambda e: jnp.sqrt(jnp.mean(e * e, axis=(0, 1))), False),
    }
    for name, (f, y, norm, vmapped) in layouts.items():
        one = lambda h, y, f0, rho, f=f, norm=norm: tsit5(f, h, y, f0, rho, norm)
        if vmapped:
            one, f = jax.vmap(one), jax.vmap(f)
        run = jax.jit(lambda h, y, f0, rho, one=one: jax.lax.fori_loop(0, args.steps, lambda i, c: one(*c, rho), (h, y, f0)))
        start = (jnp.full(W, 1e-3), y, f(y, rho))
        jax.block_until_ready(run(*start, rho))
        best = np.inf
        for _ in range(5):
            t0 = time.perf_counter()
            jax.block_until_ready(run(*start, rho))
            best = min(best, time.perf_counter() - t0)
        print(f"{name:15s} {W} lanes: {best / args.steps / W * 1e9:6.0f} ns per lane and step")
    return 0


if __name__ == "__main__":
    sys.exit(main())
