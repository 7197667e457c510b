"""Benchmark samflow against the code a researcher would write instead.

    python scripts/bench.py            # quick: regime chart at 32x32 and 64x64
    python scripts/bench.py --full     # also 128x128 and 256x256
    python scripts/bench.py --tiny     # a 4x4 smoke run (used by tests/test_bench.py)

What it measures, in one run, on one machine, at one accuracy:

- **samflow**: the depth-2 l2-SAM regime chart (one sample, mu = (0.2, ..., 1.0),
  alpha log-spaced in [1e-2, 1e2], rho log-spaced in [1e-2, 1e1], real time to
  t = 1e4, 64 log-spaced save times in [1e-2, 1e4]) with `samflow.sweep.solve_grid`.
  Compilation is timed apart (a first call on the chunk shape, then a second one);
  the grid is then timed warm. Peak memory is the process' peak RSS (getrusage).
- **accuracy**: beta at the saved times against a reference, scipy DOP853 at
  rtol 1e-13 on the numpy field of docs/theory.md s.2, for a random subset of cells.
  Error of a cell: max over saved times before min(collapse time of both) of
  ||beta - beta_ref|| / ||beta_ref||.
- **baseline A**: a loop of scipy `solve_ivp(DOP853)` with a terminal collapse event
  at ||W|| = 1e-6 rho over the subset, at the loosest rtol (decade ladder) that
  reaches the accuracy target; its cells/s is scaled to the grid.
- **baseline B**: a vectorized numpy RK4 in real time over the whole grid with a
  fixed step h (steps land on the save times), collapsed cells masked once
  ||W|| < 1e-6 rho; h is halved from 1 until the target is met on the subset, or
  down to the mode's finest step (its speedup is then a lower bound, marked so).
- the same samflow measurement for GD, linf-SAM, depths 3 and 4, n = 4 samples, d = 50
  and d = 200 (the l2 rows with their scipy loops);
- a flop-and-byte floor for the chart and the ratio of the measured time to it.

The accuracy target of the baselines is max(1e-6, samflow's measured error):
the issue's 1e-6, or samflow's own error where that is worse. The last line is

    BENCH cells_per_s=... speedup_vs_scipy=... speedup_vs_numpy_rk4=... grid256_s=... peak_mem_mb=...
          floor_ratio=... d50_cells_per_s=... d200_cells_per_s=... l3_vs_scipy=... l4_vs_scipy=...
          n4_vs_scipy=... warm_sweep_s=... figures_s=... first_compile_s=...
          d50_log_cells_per_s=... d200_log_cells_per_s=... cold_sweep_s=...
          first_python_solve_s=... lane_efficiency=... d50_general_cells_per_s=...
          d200_general_cells_per_s=...

(one line; `nan` where a mode does not measure it: tiny skips the other charts, only
--full runs the figure script, and `lane_efficiency` is nan until the lane engine
of issue 26 provides it). Above it, the targets of issue 26, one line each: the
measured value, the target, met or MISSED. `cold_sweep_s` is the wall of
`python -m samflow.sweep configs/default.toml` as a whole process on an empty
compile cache and stored-programs folder (a fresh `SAMFLOW_COMPILATION_CACHE`,
`samflow._cache`), output to a temporary folder (tiny: a 2-cell config);
`warm_sweep_s` the wall of the same command run again right after, on that cache;
`first_python_solve_s` the import of samflow and one `sf.solve` (l2, one cell, 64
save times), timed inside a fresh Python process, after an earlier process made the
same call on the same cache folder (a library process does not turn samflow's
compile cache on today, so this one compiles again: the bench says so);
`figures_s` the wall of `scripts/reproduce_figures.py` with a cold cache;
`first_compile_s` the chart solver's cold compilation (this process keeps no
persistent cache); `*_vs_scipy` the l2 charts at depth 3, depth 4
and on n = 4 samples against their scipy loops at equal accuracy; `d50_log_*`,
`d200_log_*` the d = 50 and d = 200 charts again under the best documented
setting for large d (`LARGE_D_LOG`: log coordinates, rtol 1e-10, batch width 16,
`reduce="off"`); `d50_general_*`, `d200_general_*` the same charts with the general
(L, d) state (`reduce="off"`, the lane engine), where the default rows take the exact
reduction of depth-2 l2-SAM from equal layers (docs/theory.md s.3.5), and the two
engines' largest difference of beta. The d = 5 chart, the baselines' reference,
takes the reduction too (its cells are depth-2 l2-SAM from equal layers);
`lane_efficiency` measures the lane engine (`reduce="off"`).

This script only measures; it uses samflow's public API and changes nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import hashlib
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from scipy.integrate import solve_ivp
from scipy.special import expit

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)  # the flows compute in float64
import jax.numpy as jnp  # noqa: E402

import samflow as sf  # noqa: E402
from samflow.sweep import solve_grid  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

MU5 = (0.2, 0.4, 0.6, 0.8, 1.0)
ALPHA_RANGE = (1e-2, 1e2)
RHO_RANGE = (1e-2, 1e1)
T1 = 1e4
N_SAVE = 64
TS = np.geomspace(1e-2, T1, N_SAVE)
CAPTURE = 1e-6  # collapse when ||W||_2 <= CAPTURE * rho (samflow's default)
ZERO_TOL = 1e-9  # linf reference: a weight at ZERO_TOL * rho is taken to have reached 0
TARGET = 1e-6  # the issue's accuracy
REF_RTOL = 1e-13

MODES = {
    # chart grids (n x n), other flows' grids, subset sizes, chunk size, the finest RK4
    # step of the halving search (a step count, not a time budget, so that the result
    # does not depend on the load), the time spent timing RK4 on the whole grid
    # d50/d200: the grids of the d = 50 and d = 200 charts and their reference subset
    "tiny": dict(grids=[4], extra_grid=None, d50_grid=None, d200_grid=None, d_subset=0, subset=4,
                 extra_subset=0, chunk=128, rk4_h_min=1.0, rk4_time_s=1.0, scipy_max_rtol_levels=3),
    "quick": dict(grids=[32, 64], extra_grid=32, d50_grid=8, d200_grid=4, d_subset=4, subset=64,
                  extra_subset=16, chunk=128, rk4_h_min=1 / 16, rk4_time_s=15.0, scipy_max_rtol_levels=8),
    "full": dict(grids=[32, 64, 128, 256], extra_grid=64, d50_grid=16, d200_grid=8, d_subset=8, subset=64,
                 extra_subset=32, chunk=128, rk4_h_min=1 / 32, rk4_time_s=20.0, scipy_max_rtol_levels=8),
}


def say(*args):
    print(*args, flush=True)


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


# ----------------------------------------------------------------------------
# The problem: a grid of (alpha, rho) cells
# ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Problem:
    method: str  # "gd", "l2", "linf"
    depth: int
    mu: tuple  # the one sample {(mu, +1)}, or with X: the features of X's first row
    X: "tuple | None" = None  # n samples (rows), all labelled +1 (multi-sample charts)

    @property
    def d(self) -> int:
        return len(self.mu)

    @property
    def samples(self) -> np.ndarray:
        """(d,) mu of the one sample, or (n, d) X."""
        return np.asarray(self.X if self.X is not None else self.mu, dtype=float)

    def dataset(self):
        if self.X is None:
            return sf.single_sample(list(self.mu))
        return sf.Dataset.from_arrays(self.samples, np.ones(len(self.X)))

    @property
    def label(self) -> str:
        n = "" if self.X is None else f" n={len(self.X)}"
        return f"{self.method} L={self.depth} d={self.d}{n}"


def multi_sample_problem(method: str, depth: int, n: int = 4, d: int = 5) -> Problem:
    """n samples of d positive features (seeded), labels +1: the multi-sample chart."""
    X = np.random.default_rng(4).uniform(0.2, 1.0, size=(n, d)).round(3)
    return Problem(method, depth, tuple(X[0]), tuple(map(tuple, X)))


def grid_cells(n_alpha: int, n_rho: int):
    """Flattened (alpha, rho) cells, alpha-major: alpha (B,), rho (B,)."""
    a = np.geomspace(*ALPHA_RANGE, n_alpha)
    r = np.geomspace(*RHO_RANGE, n_rho)
    A, R = np.meshgrid(a, r, indexing="ij")
    return A.reshape(-1).copy(), R.reshape(-1).copy()


# ----------------------------------------------------------------------------
# The vector field in numpy, straight from docs/theory.md s.2 (one sample {(mu, +1)})
#   beta = prod_l w^(l), z = <beta, mu>, r = sigmoid(-z) mu, grad L = -r * prod_{k!=l} w^(k)
#   l2:   W_hat = W + rho grad L / ||grad L||_2      linf: W_hat = W + rho sign(grad L)
#   dW/dt = -grad L(W_hat) = r(W_hat) * prod_excl(W_hat)
# Works on one cell (L, d) or a batch (B, L, d).
# ----------------------------------------------------------------------------


def np_prod_excl(W):
    L = W.shape[-2]
    if L == 1:
        return np.ones_like(W)
    if L == 2:
        return W[..., ::-1, :]
    ones = np.ones_like(W[..., :1, :])
    before = np.cumprod(np.concatenate([ones, W[..., :-1, :]], axis=-2), axis=-2)
    after = np.cumprod(np.concatenate([ones, W[..., :0:-1, :]], axis=-2), axis=-2)[..., ::-1, :]
    return before * after


def _resid(beta, mu):
    """r = -grad_beta of the logistic loss: sigmoid(-z) mu for one sample (mu (d,)),
    the mean over the samples for X (n, d) with labels +1."""
    if mu.ndim == 1:
        return expit(-(beta @ mu))[..., None] * mu
    return np.mean(expit(-(beta @ mu.T))[..., :, None] * mu, axis=-2)


def np_field(W, rho, mu, method, sign_at_zero=None):
    """dW/dt of docs/theory.md s.2. `rho` is a scalar or (B,). For linf, `sign_at_zero`
    (same shape as W) stands in for sign(grad L) where grad L = 0 (a weight held at
    0 keeps the one-sided sign it had: the limit along the symmetric flow)."""
    P = np_prod_excl(W)
    r = _resid(np.prod(W, axis=-2), mu)  # (..., d)
    if method == "gd":
        Wh = W
    else:
        G = -r[..., None, :] * P
        if method == "l2":
            nG = np.sqrt(np.sum(G * G, axis=(-2, -1)))
            scale = np.asarray(rho) / np.where(nG > 0, nG, 1.0)  # eps = 0 where grad L = 0
            Wh = W + scale[..., None, None] * G
        elif method == "linf":
            sg = np.sign(G)
            if sign_at_zero is not None:
                sg = np.where(G == 0, sign_at_zero, sg)
            Wh = W + np.asarray(rho)[..., None, None] * sg
        else:
            raise ValueError(method)
        P = np_prod_excl(Wh)
    rh = _resid(np.prod(Wh, axis=-2), mu)
    return rh[..., None, :] * P


def check_np_field_against_samflow(prob: Problem, rng) -> float:
    """The baselines' field must be the same flow as samflow's: max rel. difference."""
    data = prob.dataset()
    loss = sf.Logistic()
    method = sf.Method(prob.method)
    f = jax.jit(lambda W, rho: sf.real_time_velocity(W, rho, method, data, loss))
    worst = 0.0
    for _ in range(4):
        W = rng.uniform(0.05, 1.5, size=(prob.depth, prob.d))
        rho = float(rng.uniform(0.05, 2.0))
        a = np.asarray(f(jnp.asarray(W), rho))
        b = np_field(W, rho, prob.samples, prob.method)
        worst = max(worst, float(np.max(np.abs(a - b)) / max(np.max(np.abs(a)), 1e-300)))
    return worst


# ----------------------------------------------------------------------------
# scipy: reference and baseline A (one cell per solve_ivp call)
# ----------------------------------------------------------------------------


def scipy_cell(prob: Problem, alpha, rho, ts, rtol, atol):
    """One cell with solve_ivp(DOP853). Returns beta (n_save, d), the time from
    which beta = 0 (inf if never) and the number of field evaluations.

    l2 (L >= 2): terminal event at ||W|| = CAPTURE rho (collapse), beta = 0 afterwards.
    linf: a weight that comes down to ZERO_TOL rho is set to 0 and held there (the
    Filippov sliding mode of the symmetric positive init, docs/theory.md s.3): terminal
    event, freeze, restart; beta = 0 once every weight is held. A held weight keeps
    the sign of grad L it had on its way down in the perturbation, so that the
    perturbed margin z_hat is continuous along the symmetric flow (w_hat_j = -rho).
    """
    mu = prob.samples
    L, d = prob.depth, prob.d
    W = np.full((L, d), float(alpha))
    frozen = np.zeros((L, d), bool)
    sign_at_zero = np.zeros((L, d))
    out = np.zeros((ts.size, d))
    t0, k0, nfev, T = 0.0, 0, 0, np.inf
    z0 = ZERO_TOL * rho

    def rhs(t, y):
        dW = np_field(y.reshape(L, d), rho, mu, prob.method, sign_at_zero)
        dW[frozen] = 0.0
        return dW.reshape(-1)

    events = None
    if prob.method == "l2" and L >= 2:
        def collapse(t, y):
            return np.sqrt(np.dot(y, y)) - CAPTURE * rho
        collapse.terminal, collapse.direction = True, -1
        events = collapse
    elif prob.method == "linf":
        # Stop just above 0: the field is discontinuous at 0 and a pure relative
        # tolerance would never let a step reach it.
        def reach_zero(t, y):
            act = ~frozen.reshape(-1)
            return np.min(np.where(act, y, np.inf)) - z0 if act.any() else 1.0
        reach_zero.terminal, reach_zero.direction = True, -1
        events = reach_zero
    while k0 < ts.size:
        sol = solve_ivp(rhs, (t0, ts[-1]), W.reshape(-1), method="DOP853", t_eval=ts[k0:],
                        rtol=rtol, atol=atol, events=events)
        nfev += sol.nfev
        n = len(sol.t)  # (a list, not an array, when no save time fell in the segment)
        if n:
            out[k0:k0 + n] = np.prod(np.asarray(sol.y).T.reshape(n, L, d), axis=1)
        k0 += n
        if sol.status != 1:  # finished (0) or failed (-1)
            if sol.status != 0:
                out[k0:] = np.nan
            break
        te, ye = sol.t_events[0][0], sol.y_events[0][0].reshape(L, d)
        if prob.method == "l2":
            T = te
            out[k0:] = 0.0
            break
        hit = ~frozen & (ye <= z0 * (1.0 + 1e-6))
        r_e = _resid(np.prod(ye, axis=0), mu)
        sign_at_zero = np.where(hit, np.sign(-r_e * np_prod_excl(ye)), sign_at_zero)
        frozen |= hit
        W = np.where(frozen, 0.0, ye)
        t0 = te
        if frozen.all():
            T = te
            out[k0:] = 0.0
            break
    return out, T, nfev


def reference(prob: Problem, alpha, rho):
    """Tight-tolerance reference for the cells (alpha_i, rho_i)."""
    betas, Ts = [], []
    for a, r in zip(alpha, rho):
        b, T, _ = scipy_cell(prob, a, r, TS, REF_RTOL, 1e-300)
        betas.append(b)
        Ts.append(T)
    return np.array(betas), np.array(Ts)


def cell_errors(beta, T, beta_ref, T_ref):
    """Per cell: max over saved times before min(T, T_ref) of ||beta - ref|| / ||ref||.

    A NaN at a compared time counts as an infinite error; 0/0 counts as 0.
    """
    keep = TS[None, :] < np.minimum(T, T_ref)[:, None]
    diff = np.linalg.norm(beta - beta_ref, axis=-1)
    nref = np.linalg.norm(beta_ref, axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        e = np.where(diff == 0, 0.0, diff / nref)
    e = np.where(np.isnan(e), np.inf, e)
    return np.max(np.where(keep, e, 0.0), axis=1)


# ----------------------------------------------------------------------------
# samflow
# ----------------------------------------------------------------------------


def zero_from(out, idx):
    """The time from which samflow's beta is 0 for good (inf if never): the
    collapse time, or the time the last weight slid to 0."""
    T = np.where(out.status[idx] == int(sf.Status.COLLAPSED), out.event_time[idx], np.inf)
    slide = np.asarray(out.slide_time[idx]).reshape(len(idx), -1)
    all_slid = np.all(np.isfinite(slide), axis=1)
    with np.errstate(invalid="ignore"):
        return np.where(all_slid, np.max(np.where(all_slid[:, None], slide, 0.0), axis=1), T)


class SamflowRunner:
    def __init__(self, prob: Problem, settings: sf.SolverSettings, chunk: int):
        self.prob, self.settings, self.chunk = prob, settings, chunk
        self.data = prob.dataset()
        self.compiled_shapes = {}

    def _W0(self, alpha):
        return np.broadcast_to(alpha[:, None, None], (alpha.size, self.prob.depth, self.prob.d)).copy()

    def solve(self, alpha, rho, chunk):
        return solve_grid(self.prob.method, self.data, self._W0(alpha), rho, TS,
                          clock="t", settings=self.settings, batch_size=chunk)

    def run_grid(self, n, subset, rng, repeats=1, quiet=False):
        """Solve the n x n chart: compile time, warm run time (best of `repeats`),
        steps, statuses, peak RSS, and the error on a random subset of cells."""
        prob = self.prob
        alpha, rho = grid_cells(n, n)
        size = min(self.chunk, alpha.size)  # lanes per device
        runs = []  # (wall s, cpu s, out)

        def timed(a, r, chunk):
            ru0 = resource.getrusage(resource.RUSAGE_SELF)
            t0 = time.perf_counter()
            out = self.solve(a, r, chunk)
            wall = time.perf_counter() - t0
            ru1 = resource.getrusage(resource.RUSAGE_SELF)
            return wall, (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime), out

        # A call's shape (lanes, the queue each device works through) follows from the
        # grid's size, so each chart compiles its own program: a first solve of the
        # whole chart (compiles and runs), then warm ones; compile = first - second.
        first = timed(alpha, rho, self.chunk)
        second = timed(alpha, rho, self.chunk)
        runs.append(second)
        first_s, second_s = first[0], second[0]
        while len(runs) < repeats:
            runs.append(timed(alpha, rho, self.chunk))
        run_s, cpu_s, out = min(runs, key=lambda x: x[0])
        rss = peak_rss_mb()
        steps = np.asarray(out.num_steps)
        slow = int(np.argmax(steps))
        res = dict(n=n, cells=alpha.size, chunk=size, first_s=first_s, second_s=second_s,
                   compile_s=first_s - second_s, run_s=run_s, cpu_s=cpu_s, repeats=len(runs),
                   cells_per_s=alpha.size / run_s,
                   steps_sum=int(np.sum(steps)), steps_mean=float(np.mean(steps)),
                   steps_max=int(np.max(steps)),
                   status=np.bincount(np.asarray(out.status), minlength=7),
                   out_bytes=int(sum(np.asarray(x).nbytes for x in jax.tree_util.tree_leaves(out))),
                   rss_mb=rss, out=out, alpha=alpha, rho=rho)
        if subset:
            idx = np.sort(rng.choice(alpha.size, size=min(subset, alpha.size), replace=False))
            t0 = time.perf_counter()
            b_ref, T_ref = reference(prob, alpha[idx], rho[idx])
            T = zero_from(out, idx)
            err = cell_errors(out.beta[idx], T, b_ref, T_ref)
            res.update(idx=idx, b_ref=b_ref, T_ref=T_ref, err=err, err_max=float(np.max(err)),
                       ref_s=time.perf_counter() - t0,
                       zero_mismatch=int(np.sum(np.isfinite(T) != np.isfinite(T_ref))))
        if not quiet:
            st = ", ".join(f"{sf.Status(i).name.lower()}={c}" for i, c in enumerate(res["status"]) if c)
            if subset:
                w = res["idx"][int(np.argmax(res["err"]))]
                acc = (f"accuracy: max rel err {res['err_max']:.2e} on {len(res['idx'])} random cells "
                       f"(worst: alpha {alpha[w]:.3g}, rho {rho[w]:.3g}; median {np.median(res['err']):.1e});"
                       f" cells where only one of samflow, reference reaches beta = 0: {res['zero_mismatch']}")
            else:
                acc = "accuracy not checked"
            say(f"  {n:>4}x{n:<4} {alpha.size:>6} cells | compile {res['compile_s']:6.2f} s"
                f" (1st call {first_s:.2f} s, 2nd {second_s:.2f} s, chunk {size}) | run {run_s:8.3f} s"
                f" (best of {len(runs)}; cpu {cpu_s:.1f} s) = {res['cells_per_s']:9.1f} cells/s")
            say(f"       steps/cell mean {res['steps_mean']:.0f}, max {res['steps_max']} (alpha "
                f"{alpha[slow]:.3g}, rho {rho[slow]:.3g}, {sf.Status(int(out.status[slow])).name.lower()});"
                f" | {st}"
                f" | peak RSS so far {rss:.0f} MB")
            say(f"       {acc}")
        return res


# ----------------------------------------------------------------------------
# Baseline B: vectorized numpy RK4, fixed step in real time
# ----------------------------------------------------------------------------


def rk4_schedule(h):
    """Steps per save interval: ceil(interval / h) equal steps landing on each save time."""
    edges = np.concatenate([[0.0], TS])
    return np.maximum(1, np.ceil(np.diff(edges) / h).astype(np.int64))


def rk4_grid(prob: Problem, alpha, rho, h, time_budget=None):
    """All cells at once. Returns beta (B, n_save, d), collapse time (B,),
    steps done, total steps of the schedule, seconds."""
    mu = prob.samples
    B, L, d = alpha.size, prob.depth, prob.d
    W = np.broadcast_to(alpha[:, None, None], (B, L, d)).copy()
    active = np.ones(B, bool)
    T = np.full(B, np.inf)
    out = np.full((B, TS.size, d), np.nan)
    sched = rk4_schedule(h)
    cap = CAPTURE * rho
    f = lambda W: np_field(W, rho, mu, prob.method)  # noqa: E731
    t, done = 0.0, 0
    t_start = time.perf_counter()
    for k, (tk, m) in enumerate(zip(TS, sched)):
        dt = (tk - t) / m
        for _ in range(m):
            k1 = f(W)
            k2 = f(W + (0.5 * dt) * k1)
            k3 = f(W + (0.5 * dt) * k2)
            k4 = f(W + dt * k3)
            W_new = W + (dt / 6.0) * (k1 + 2.0 * k2 + 2.0 * k3 + k4)
            W = np.where(active[:, None, None], W_new, W)
            t += dt
            done += 1
            hit = active & (np.sqrt(np.sum(W * W, axis=(1, 2))) < cap)
            if hit.any():
                T[hit] = t
                W[hit] = 0.0
                active &= ~hit
            if time_budget is not None and time.perf_counter() - t_start > time_budget:
                return out, T, done, int(sched.sum()), time.perf_counter() - t_start
        t = tk
        out[:, k] = np.prod(W, axis=1)
    return out, T, done, int(sched.sum()), time.perf_counter() - t_start


# ----------------------------------------------------------------------------
# Machine rates for the floor
# ----------------------------------------------------------------------------


def measure_rates(small: bool):
    n = 512 if small else 2048
    A = np.random.default_rng(0).standard_normal((n, n))
    A @ A
    best = min(_timeit(lambda: A @ A) for _ in range(3))
    matmul = 2.0 * n**3 / best

    size, iters = (1 << 14, 64) if small else (1 << 16, 512)

    @jax.jit
    def fma_chain(x):
        return jax.lax.fori_loop(0, iters, lambda i, y: y * 0.999999 + 1e-7, x)

    x = jnp.ones(size, jnp.float64)
    fma_chain(x).block_until_ready()
    best = min(_timeit(lambda: fma_chain(x).block_until_ready()) for _ in range(3))
    elementwise = 2.0 * size * iters / best

    m = (1 << 22) if small else (1 << 25)  # 32 MiB or 256 MiB of float64
    src = np.ones(m)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    best = min(_timeit(lambda: np.copyto(dst, src)) for _ in range(3))
    bandwidth = 2.0 * src.nbytes / best  # read + write
    return matmul, elementwise, bandwidth


def _timeit(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def l2_field_flops(L: int, d: int) -> int:
    """Floating-point operations of one l2-SAM field evaluation, one sample, counted
    from docs/theory.md s.2 at the minimum (exp, sqrt and a division count as 1 each):

    residual r(W):        beta (L-1)d, <beta, mu> 2d, sigmoid 3, r = s mu d
    prod_excl(W):         3(L-2)d for L >= 3 (prefix, suffix, combine), 0 for L = 2
    G = -r * prod_excl:   Ld
    ||G||:                2Ld + 1
    W_hat = W + c G:      1 (c = rho/||G||) + 2Ld
    r(W_hat), prod_excl(W_hat): as above
    dW = r_hat * P_hat:   Ld
    """
    residual = (L - 1) * d + 2 * d + 3 + d
    pex = 3 * (L - 2) * d if L >= 3 else 0
    return 2 * residual + 2 * pex + L * d + (2 * L * d + 1) + (1 + 2 * L * d) + L * d


TSIT5_EVALS_PER_STEP = 6  # 7 stages, first same as last (FSAL); rejected steps cost as much


# ----------------------------------------------------------------------------
# The run
# ----------------------------------------------------------------------------


#: Lanes of the lane-efficiency measurement (issue 26: >= 0.9 at >= 1024 lanes per device).
LANE_WIDTH = 1024


def lane_efficiency_of(prob: "Problem", alpha, rho, settings) -> float:
    """Cell-steps / lane-steps of the chart's cells solved in ONE call of
    `LANE_WIDTH` lanes of the lane engine (`samflow._lanes.solve_lanes`, the
    engine's own statistic: the loop's iterations): 1 when no lane ever idles.
    Saved at two times only (the steps do not depend on the save times)."""
    from samflow._lanes import solve_lanes
    from samflow.flows import Clock, Method

    W0 = np.broadcast_to(np.asarray(alpha)[:, None, None], (len(alpha), prob.depth, prob.d))
    data = prob.dataset()
    ts = jnp.asarray([0.0, T1])
    # The lane engine itself: `reduce="off"`, else these cells take the reduction (docs/theory.md s.3.5).
    settings = dataclasses.replace(settings, reduce="off").resolved(Method.L2, W0, data, Clock.T, None)
    fn = jax.jit(lambda W, r: solve_lanes(W, r, data, ts, method=Method.L2, clock=Clock.T, settings=settings,
                                          width=LANE_WIDTH)[:2])
    out, iters = fn(jnp.asarray(W0), jnp.asarray(rho))
    return float(np.sum(np.asarray(out.num_steps))) / (int(iters) * min(LANE_WIDTH, len(alpha)))


def machine_lines():
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:
        affinity = os.cpu_count()
    import diffrax
    import scipy

    try:
        rev = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT,
                             capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        rev = "?"
    solve_src = Path(sys.modules["samflow.solver"].__file__).read_bytes()
    return [
        f"date: {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}",
        f"cpu: {cpu}; cores: {os.cpu_count()} (usable {affinity}); load avg at start: "
        + " ".join(f"{x:.2f}" for x in os.getloadavg()),
        f"python {platform.python_version()}; jax {jax.__version__}; jaxlib "
        f"{getattr(__import__('jaxlib'), '__version__', '?')}; diffrax {diffrax.__version__}; "
        f"numpy {np.__version__}; scipy {scipy.__version__}; samflow {sf.__version__}",
        f"device: {jax.devices()[0].device_kind} ({jax.default_backend()}), {len(jax.devices())} device(s)",
        f"samflow tree: git {rev}; samflow/solver.py sha256 {hashlib.sha256(solve_src).hexdigest()[:12]}",
    ]


def fmt(x: float) -> str:
    return f"{x:.4g}"


def _reached(value: float, goal: float, higher: bool) -> bool:
    return value >= goal if higher else value <= goal


def _goal(value: float, goal: float, unit: str, *, higher: bool) -> str:
    """Where a measured number stands against a design goal, in words (no pass/fail)."""
    reached = _reached(value, goal, higher)
    side = ("at or above" if higher else "at or below") if reached else ("below" if higher else "above")
    return f"goal {'>=' if higher else '<='} {goal:g}{unit}: {side} it"



# ----------------------------------------------------------------------------
# Other charts (flows, depths, samples, dimensions) and their scipy loops
# ----------------------------------------------------------------------------


def scipy_ladder(prob: Problem, res: dict, target: float, levels: int) -> tuple:
    """The scipy DOP853 loop on the cells of `res["idx"]` at the loosest rtol of the
    decade ladder 1e-5, 1e-6, ... that reaches `target`: (cells/s, rtol, err, reached)."""
    alpha, rho = res["alpha"][res["idx"]], res["rho"][res["idx"]]
    for k in range(levels):
        rtol = 10.0 ** (-5 - k)
        t0 = time.perf_counter()
        out = [scipy_cell(prob, a, r, TS, rtol, 1e-4 * rtol) for a, r in zip(alpha, rho)]
        dt = time.perf_counter() - t0
        b, T = np.array([x[0] for x in out]), np.array([x[1] for x in out])
        e = float(np.max(cell_errors(b, T, res["b_ref"], res["T_ref"])))
        if e <= target:
            return len(out) / dt, rtol, e, True
    return len(out) / dt, rtol, e, False


# The best documented setting of the d = 50 and d = 200 charts (docs/benchmarks.md,
# "Large d"): log coordinates take a collapsing cell in a few
# hundred steps from d = 5 to d = 200 (linear: ~11,000 at d = 50, > 16,384 at
# d = 200); rtol 1e-10 keeps the error well under 1e-6 (1e-9 does not: 4e-6 on a
# cell of the 16x16 d = 50 chart, a save just before its collapse), and batch
# width 16 cuts the lockstep behind the slow cells and keeps both cores busy on
# these small grids.
LARGE_D_LOG = dict(coords="log", rtol=1e-10)
LARGE_D_WIDTH = 16


def chart_row_with(prob: Problem, grid: int, res: dict, settings, width: int, rng, what: str) -> dict:
    """The chart of `res` again under `settings` at width `width` (`what` says how), its
    error taken on the default row's reference cells. Returns its `run_grid` result."""
    say(f"    the same chart, {what}:")
    row = SamflowRunner(prob, settings, width).run_grid(grid, 0, rng)
    if "idx" in res:
        idx = res["idx"]
        err = cell_errors(row["out"].beta[idx], zero_from(row["out"], idx), res["b_ref"], res["T_ref"])
        say(f"       (its accuracy on the default row's reference cells: max rel err {np.max(err):.2e} on "
            f"{len(idx)} cells); "
            f"{row['cells_per_s'] / res['cells_per_s']:.3g}x the default row's cells/s")
    return row


def log_chart_row(prob: Problem, grid: int, res: dict, settings, rng) -> float:
    """The d >= 50 chart again under `LARGE_D_LOG` at width `LARGE_D_WIDTH` and
    `reduce="off"` (the general engine's best setting). Returns cells/s."""
    log_settings = dataclasses.replace(settings, reduce="off", **LARGE_D_LOG)
    return chart_row_with(prob, grid, res, log_settings, LARGE_D_WIDTH, rng,
                          f"SolverSettings(coords='log', rtol={LARGE_D_LOG['rtol']:g}, reduce='off'), batch width "
                          f"{LARGE_D_WIDTH} (the general engine's best documented setting at d >= 50)")["cells_per_s"]


def general_chart_row(prob: Problem, grid: int, res: dict, settings, chunk: int, rng) -> float:
    """The chart again with the general (L, d) state (`reduce="off"`), where the default
    row used the exact reduction (docs/theory.md s.3.5): cells/s, and the largest
    difference of the two engines' beta at the save times before either's collapse,
    relative to max_j |beta_j| there, and of their collapse times."""
    gen = chart_row_with(prob, grid, res, dataclasses.replace(settings, reduce="off"), chunk, rng,
                         "SolverSettings(reduce='off'): the general (L, d) state, the lane engine")
    a, b = res["out"], gen["out"]
    T = np.minimum(zero_from(a, np.arange(res["cells"])), zero_from(b, np.arange(res["cells"])))
    # Saves before either's collapse where both are finite (the general engine stalls at
    # `max_steps` on some d = 200 cells: NaN from there on).
    keep = (TS[None, :] < T[:, None]) & np.all(np.isfinite(a.beta) & np.isfinite(b.beta), axis=-1)
    ba, bb = np.asarray(a.beta), np.asarray(b.beta)
    scale = np.max(np.abs(bb), axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        rel = np.max(np.abs(ba - bb), axis=-1) / np.where(scale > 0, scale, 1.0)
    both = (np.asarray(a.status) == int(sf.Status.COLLAPSED)) & (np.asarray(b.status) == int(sf.Status.COLLAPSED))
    ta, tb = np.asarray(a.event_time)[both], np.asarray(b.event_time)[both]
    t_rel = float(np.max(np.abs(ta - tb) / tb)) if both.any() else float("nan")
    same = bool(np.array_equal(np.asarray(a.status), np.asarray(b.status)))
    say(f"       reduced vs general: max |beta diff| / max|beta| {np.max(np.where(keep, rel, 0.0)):.1e} (median "
        f"{np.median(rel[keep]):.1e}) at the saves before a collapse; collapse times to {t_rel:.1e} relative "
        f"({int(both.sum())} cells); statuses {'equal' if same else 'DIFFERENT'}; "
        f"reduced {res['cells_per_s'] / gen['cells_per_s']:.0f}x the general engine's cells/s")
    return gen["cells_per_s"]


def other_charts(cfg: dict, settings, chart: Problem, rng) -> dict:
    """GD, linf, l2 at L = 3, 4, n = 4 samples, d = 50 and d = 200, log coordinates:
    samflow's chart, and (l2 rows) its speed-up over the scipy loop at its accuracy.
    Returns {key: (cells/s, speed-up or nan)}."""
    rows = {}
    if cfg["extra_grid"] is None:
        say("== other flows (GD, linf, L = 3, 4, n = 4, d = 50, 200): skipped in tiny mode ==")
        return rows
    n = cfg["extra_grid"]
    say(f"== samflow, other charts on {n}x{n} grids, d = 50 and 200 (mu_j = j/d) on {cfg['d50_grid']}x"
        f"{cfg['d50_grid']} and {cfg['d200_grid']}x{cfg['d200_grid']} (same alpha, rho, times, settings; "
        f"reference on {cfg['extra_subset']} random cells, {cfg['d_subset']} at d >= 50; speed-up over the "
        f"scipy DOP853 loop at max(1e-6, samflow's error) for the l2 rows) ==")
    extras = [("gd", Problem("gd", 2, MU5), n), ("linf", Problem("linf", 2, MU5), n),
              ("l3", Problem("l2", 3, MU5), n), ("l4", Problem("l2", 4, MU5), n),
              ("n4", multi_sample_problem("l2", 2), n),
              ("d50", Problem("l2", 2, tuple(np.arange(1, 51) / 50.0)), cfg["d50_grid"]),
              ("d200", Problem("l2", 2, tuple(np.arange(1, 201) / 200.0)), cfg["d200_grid"])]
    for key, prob, grid in extras:
        dev = check_np_field_against_samflow(prob, rng)
        say(f"  {prob.label} (numpy field vs samflow: {dev:.1e})")
        subset = cfg["d_subset"] if prob.d >= 50 else cfg["extra_subset"]
        res = SamflowRunner(prob, settings, cfg["chunk"]).run_grid(grid, subset, rng)
        ratio = float("nan")
        if prob.method == "l2":
            target = max(TARGET, res["err_max"])
            rate, rtol, err, reached = scipy_ladder(prob, res, target, cfg["scipy_max_rtol_levels"])
            ratio = res["cells_per_s"] / rate
            say(f"       scipy loop: rtol {rtol:.0e} (err {err:.1e}{'' if reached else ', target NOT reached'}) "
                f"{rate:.2f} cells/s; samflow {ratio:.3g}x{'' if reached else ' (lower bound)'}")
        rows[key] = (res["cells_per_s"], ratio)
        if key in ("d50", "d200"):
            rows[key + "_general"] = (general_chart_row(prob, grid, res, settings, cfg["chunk"], rng), float("nan"))
            rows[key + "_log"] = (log_chart_row(prob, grid, res, settings, rng), float("nan"))
    say(f"  {chart.label} in log coordinates (SolverSettings(coords='log'), x = log|W|)")
    SamflowRunner(chart, dataclasses.replace(settings, coords="log"), cfg["chunk"]).run_grid(
        n, cfg["extra_subset"], rng)
    return rows


# ----------------------------------------------------------------------------
# Whole processes: the sweep twice (cold, then warm), a first solve, the figure script
# ----------------------------------------------------------------------------

TINY_SWEEP = """name = "bench"
methods = ["gd", "l2"]
[data]
mu = [0.2, 0.6, 1.0]
[grid]
alpha = [0.01, 1.0]
rho = [0.1]
[time]
t1 = 100.0
num = 8
"""


def _process(cmd: list, cache: Path, cwd: Path) -> tuple:
    """Run `cmd` as a fresh process with samflow's compile cache in `cache` (JAX's own
    cache variable dropped, so that no cache of the caller's takes part): (wall s, stdout),
    or (nan, None) after one error line when it fails."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), SAMFLOW_COMPILATION_CACHE=str(cache))
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        say(f"  error: {' '.join(cmd)} exited {proc.returncode}: {proc.stderr.strip().splitlines()[-1:]}")
        return float("nan"), None
    return time.perf_counter() - t0, proc.stdout


def _process_seconds(cmd: list, cache: Path, cwd: Path) -> float:
    return _process(cmd, cache, cwd)[0]


def _cache_files(cache: Path) -> int:
    """How many files a process left in the compile cache folder (JAX's entries and
    samflow's stored programs)."""
    return sum(1 for f in cache.rglob("*") if f.is_file()) if cache.is_dir() else 0


def sweep_runs(mode: str) -> tuple:
    """`python -m samflow.sweep configs/default.toml` (tiny mode: a 2-cell config)
    run twice in fresh processes on one fresh, empty compile cache (JAX's entries and
    the stored programs, `samflow._cache`), output to a temporary folder: the walls
    (cold_sweep_s, warm_sweep_s) of the first run (cold) and of the second (warm)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        config = ROOT / "configs" / "default.toml"
        if mode == "tiny":
            config = tmp / "bench.toml"
            config.write_text(TINY_SWEEP)
        cmd = [sys.executable, "-m", "samflow.sweep", str(config), "--out", str(tmp / "out"), "--overwrite",
               "--quiet"]
        cold = _process_seconds(cmd, tmp / "cache", ROOT)
        files = _cache_files(tmp / "cache")
        warm = _process_seconds(cmd, tmp / "cache", ROOT)
    say(f"  python -m samflow.sweep {config.name}: first run {cold:.1f} s (empty compile cache; it left "
        f"{files} files there), second run {warm:.1f} s (that cache warm), whole processes; load avg now "
        + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    return cold, warm


# A user's first solve in a fresh Python process: the import and one l2 cell, timed inside it.
FIRST_SOLVE = """import time
t0 = time.perf_counter()
import numpy as np
import samflow as sf
import jax
jax.config.update("jax_enable_x64", True)
out = sf.solve("l2", sf.single_sample([0.2, 0.4, 0.6, 0.8, 1.0]), alpha=0.1, rho=0.1,
               ts=np.geomspace(1e-2, 1e4, 64))
jax.block_until_ready(out)
print("FIRST_SOLVE_S", time.perf_counter() - t0)
"""


def first_python_solve() -> float:
    """The import of samflow and one `sf.solve` (l2, one cell, 64 save times) in a fresh
    Python process whose compile cache a first process doing the same call filled:
    seconds from before the import to the result (interpreter start-up left out).
    A library process does not turn samflow's compile cache on (only
    `samflow._x64.prepare_process`, the entry points, does), so today this second
    process compiles again; the line says how many files the first one cached."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "cache"
        cmd = [sys.executable, "-c", FIRST_SOLVE]
        _, first = _process(cmd, cache, ROOT)
        files = _cache_files(cache)
        wall, second = _process(cmd, cache, ROOT)
    if first is None or second is None:
        return float("nan")
    secs = [float(ln.split()[1]) for ln in (first + second).splitlines() if ln.startswith("FIRST_SOLVE_S ")]
    if len(secs) != 2:
        say("  error: the first-solve process printed no FIRST_SOLVE_S line")
        return float("nan")
    cached = (f"it left {files} files in the compile cache" if files else
              "it left the compile cache empty: import samflow does not turn the cache on, so this "
              "process compiled again")
    say(f"  import samflow + sf.solve('l2', one cell, 64 saves) in a fresh process: {secs[1]:.1f} s "
        f"(whole process {wall:.1f} s); the same in the process before it: {secs[0]:.1f} s ({cached})")
    return secs[1]


def figures_run() -> float:
    """`python scripts/reproduce_figures.py --out <tmp>` with a fresh compile cache: wall."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        s = _process_seconds([sys.executable, str(ROOT / "scripts" / "reproduce_figures.py"), "--out",
                              str(Path(tmp) / "figures")], Path(tmp) / "cache", ROOT)
    say(f"  python scripts/reproduce_figures.py (full, cold compile cache): {s:.1f} s")
    return s


# The targets of issue 26 ("One pass, every cell its own lane"): BENCH key, target,
# unit, whether higher is better.
ISSUE26_TARGETS = [("grid256_s", 2, " s", False), ("speedup_vs_scipy", 400, "x", True),
                   ("d50_cells_per_s", 5000, " cells/s", True), ("d200_cells_per_s", 2000, " cells/s", True),
                   ("lane_efficiency", 0.9, "", True), ("cold_sweep_s", 15, " s", False),
                   ("warm_sweep_s", 4, " s", False), ("figures_s", 60, " s", False),
                   ("first_compile_s", 2, " s", False), ("first_python_solve_s", 3, " s", False)]


def targets_lines(bench: dict, notes: dict) -> None:
    """The issue 26 targets, one line each: the measured value (`bench`, by BENCH key),
    the target, met or MISSED (`not measured` for a nan); `notes[key]` qualifies a value."""
    say("issue 26 targets (measured here | target | verdict):")
    for key, goal, unit, higher in ISSUE26_TARGETS:
        value = bench[key]
        op = ">=" if higher else "<="
        if value != value:
            verdict = "not measured"
        else:
            verdict = "met" if _reached(value, goal, higher) else "MISSED"
        note = f" ({notes[key]})" if key in notes else ""
        say(f"  {key:<22} {fmt(value):>10}{unit}{note} | {op} {goal:g}{unit} | {verdict}")


def summary_lines(rows: dict, first_compile_s: float, warm_s: float, figures_s: float, mode: str) -> None:
    """The issue's targets that are not the chart's, one line each."""
    say(f"  first compile of one solver (l2 chart; this process keeps no persistent cache): "
        f"{first_compile_s:.2f} s ({_goal(first_compile_s, 2, ' s', higher=False)})")
    say(f"  second run of the sweep, compile cache warm: {warm_s:.1f} s ({_goal(warm_s, 5, ' s', higher=False)})")
    if mode == "full":
        say(f"  figure script: {figures_s:.1f} s ({_goal(figures_s, 90, ' s', higher=False)})")
    for key in ("d50", "d200", "d50_general", "d200_general", "d50_log", "d200_log"):
        if key in rows:
            say(f"  {key} chart: {rows[key][0]:.1f} cells/s ({_goal(rows[key][0], 1000, ' cells/s', higher=True)})")
    for key in ("l3", "l4", "n4"):
        if key in rows:
            say(f"  {key} chart vs its scipy loop: {rows[key][1]:.1f}x ({_goal(rows[key][1], 100, 'x', higher=True)})")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    g = p.add_mutually_exclusive_group()
    g.add_argument("--full", action="store_true", help="also the 128x128 and 256x256 charts")
    g.add_argument("--tiny", action="store_true", help="4x4 smoke run (for the test)")
    p.add_argument("--rtol", type=float, default=1e-8, help="samflow rtol (default 1e-8)")
    p.add_argument("--atol", type=float, default=1e-12, help="samflow atol (default 1e-12)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--one-device", action="store_true",
                   help="do not give JAX one CPU device per core (samflow.sweep.use_cpu_cores)")
    args = p.parse_args(argv)
    if not args.one_device:
        from samflow.sweep import use_cpu_cores

        use_cpu_cores()  # before JAX's first computation; the sweep CLI does the same
    mode = "full" if args.full else "tiny" if args.tiny else "quick"
    cfg = MODES[mode]
    rng = np.random.default_rng(args.seed)
    settings = sf.SolverSettings(solver="tsit5", rtol=args.rtol, atol=args.atol)
    t_all = time.perf_counter()

    say(f"samflow benchmark, mode {mode}")
    for line in machine_lines():
        say("  " + line)
    say(f"  peak RSS after imports: {peak_rss_mb():.0f} MB")
    chart = Problem("l2", 2, MU5)
    say(f"problem: {chart.label}, mu = {MU5}, alpha in {ALPHA_RANGE} x rho in {RHO_RANGE} (log), "
        f"real time to t = {T1:g}, {N_SAVE} log-spaced save times in [1e-2, 1e4], logistic loss")
    say(f"samflow settings: tsit5, rtol {settings.rtol:g}, atol {settings.atol:g}, "
        f"capture radius {settings.capture_radius:g} rho, chunk size {cfg['chunk']}")
    say(f"accuracy: error of a cell = max over saved times before min(collapse times) of "
        f"||beta - beta_ref|| / ||beta_ref||; reference scipy DOP853 rtol {REF_RTOL:g}, atol 1e-300 "
        f"(numpy field of docs/theory.md s.2)")
    dev = check_np_field_against_samflow(chart, rng)
    say(f"numpy field vs samflow.real_time_velocity at random points: max rel diff {dev:.1e}")
    if not dev < 1e-12:
        say("error: the baselines' field is not samflow's flow")
        return 1

    # ---- samflow: the chart ------------------------------------------------
    say("")
    say(f"== samflow, {chart.label} regime chart (alpha x rho) ==")
    runner = SamflowRunner(chart, settings, cfg["chunk"])
    results = [runner.run_grid(n, cfg["subset"], rng, repeats=2 if n <= 64 else 1) for n in cfg["grids"]]
    chart_peak_mb = peak_rss_mb()
    big = results[-1]
    cells = np.array([r["cells"] for r in results], float)
    secs = np.array([r["run_s"] for r in results])
    if len(results) >= 2:
        slope, intercept = np.polyfit(cells, secs, 1)
    else:
        slope, intercept = secs[0] / cells[0], 0.0
    say(f"  time vs cells: slope {slope * 1e3:.4f} ms/cell ({1 / slope:.1f} cells/s), "
        f"intercept {intercept:.3f} s (least squares over {len(results)} grid(s))")
    measured_256 = [r for r in results if r["n"] == 256]
    if measured_256:
        grid256_s = measured_256[0]["run_s"]
        say(f"  256x256 chart: {grid256_s:.2f} s after compilation (MEASURED)")
    else:
        grid256_s = intercept + slope * 256 * 256
        say(f"  256x256 chart: {grid256_s:.2f} s after compilation (EXTRAPOLATED linearly from the "
            f"slope above; not measured in {mode} mode)")
    say(f"  peak RSS after the chart: {chart_peak_mb:.0f} MB (process peak, includes compilation)")
    samflow_err = big["err_max"]
    target = max(TARGET, samflow_err)
    say(f"  samflow max rel err on the {big['n']}x{big['n']} subset: {samflow_err:.2e}; "
        f"{'meets' if samflow_err <= TARGET else 'MISSES'} the 1e-6 requirement")
    say(f"  accuracy target for the baselines: {target:.2e} (= max(1e-6, samflow's error))")

    # ---- baseline A: scipy loop --------------------------------------------
    say("")
    say(f"== baseline A: loop of scipy solve_ivp(DOP853), collapse event, {len(big['idx'])} random cells "
        f"of the {big['n']}x{big['n']} grid, atol = 1e-4 rtol ==")
    alpha_s, rho_s = big["alpha"][big["idx"]], big["rho"][big["idx"]]
    scipy_rate = None
    scipy_at_own = None

    def scipy_loop(rtol):
        t0 = time.perf_counter()
        res = [scipy_cell(chart, a, r, TS, rtol, 1e-4 * rtol) for a, r in zip(alpha_s, rho_s)]
        return time.perf_counter() - t0, res

    for k in range(cfg["scipy_max_rtol_levels"]):
        rtol = 10.0 ** (-5 - k)
        dt, res = scipy_loop(rtol)
        b = np.array([x[0] for x in res])
        T = np.array([x[1] for x in res])
        nfev = np.mean([x[2] for x in res])
        e = float(np.max(cell_errors(b, T, big["b_ref"], big["T_ref"])))
        rate = len(res) / dt
        mism = int(np.sum(np.isfinite(T) != np.isfinite(big["T_ref"])))
        say(f"  rtol {rtol:.0e}: {dt:7.2f} s for {len(res)} cells = {rate:8.2f} cells/s, "
            f"{nfev:7.0f} evals/cell, max rel err {e:.2e}, cells where only one of scipy, "
            f"reference collapses: {mism}")
        if scipy_rate is None and e <= target:
            dt2, _ = scipy_loop(rtol)  # best of two, as for samflow
            scipy_rate, scipy_rtol, scipy_err = len(res) / min(dt, dt2), rtol, e
        if scipy_at_own is None and e <= samflow_err:
            scipy_at_own = (len(res) / dt, rtol, e)
        if scipy_rate is not None and (scipy_at_own is not None or samflow_err >= target):
            break
    speedup_met = scipy_rate is not None  # else the speed-up is a lower bound
    if scipy_rate is None:
        scipy_rate, scipy_rtol, scipy_err = rate, rtol, e
        say(f"  target not reached by rtol {rtol:.0e}: using it, one run (speedup is then a LOWER bound)")
    speedup_scipy = big["cells_per_s"] / scipy_rate
    say(f"  chosen rtol {scipy_rtol:.0e} (err {scipy_err:.2e} vs target {target:.2e}): "
        f"{scipy_rate:.2f} cells/s (best of 2 runs); scaled to the {big['n']}x{big['n']} grid: "
        f"{big['cells'] / scipy_rate:.1f} s (per-cell time x {big['cells']} cells, not run)")
    say(f"  speedup of samflow ({big['cells_per_s']:.1f} cells/s on {big['n']}x{big['n']}): "
        f"{speedup_scipy:.1f}x ({_goal(speedup_scipy, 300, 'x', higher=True)})")
    if scipy_at_own is not None and samflow_err < target:
        say(f"  at samflow's own error {samflow_err:.2e} scipy needs rtol {scipy_at_own[1]:.0e}: "
            f"{scipy_at_own[0]:.2f} cells/s, speedup {big['cells_per_s'] / scipy_at_own[0]:.1f}x")

    # ---- baseline B: numpy RK4 ---------------------------------------------
    say("")
    say(f"== baseline B: vectorized numpy RK4, fixed step h in real time (steps land on save times), "
        f"mask once ||W|| < 1e-6 rho; h halved from 1 down to {cfg['rk4_h_min']:g} on the same "
        f"{len(alpha_s)} cells ==")
    h, rk4, rk4_nc = 1.0, None, None
    no_zero = ~np.isfinite(big["T_ref"])
    while True:
        if h < cfg["rk4_h_min"] * (1 - 1e-9):
            say(f"  stopped: h = {h:g} ({int(rk4_schedule(h).sum())} steps) is below this mode's "
                f"finest step {cfg['rk4_h_min']:g}")
            break
        b, T, _, total, dt = rk4_grid(chart, alpha_s, rho_s, h)
        errs = cell_errors(b, T, big["b_ref"], big["T_ref"])
        e = float(np.max(errs))
        e_nc = float(np.max(errs[no_zero])) if no_zero.any() else 0.0
        mism = int(np.sum(np.isfinite(T) != np.isfinite(big["T_ref"])))
        say(f"  h {h:<10g} {total:>9} steps {dt:8.2f} s  max rel err {e:.2e} (cells that do not "
            f"collapse: {e_nc:.2e}); cells where only one of RK4, reference collapses: {mism}")
        rk4 = (h, total, e)
        if rk4_nc is None and e_nc <= target:
            rk4_nc = (h, total, e_nc)
        if e <= target:
            break
        h /= 2
    rk4_h, rk4_steps, rk4_err = rk4
    rk4_met = rk4_err <= target
    if rk4_met:
        say(f"  h = {rk4_h:g} ({rk4_steps} steps) reaches the target {target:.2e}")
    else:
        say(f"  target NOT reached: the finest h tried, {rk4_h:g} ({rk4_steps} steps), has max rel err "
            f"{rk4_err:.2e}; the timing below uses it, so the "
            f"speedup is a LOWER bound")
    _, _, done, total, dt = rk4_grid(chart, big["alpha"], big["rho"], rk4_h, time_budget=cfg["rk4_time_s"])
    per_step = dt / done
    rk4_grid_s = per_step * total
    rk4_rate = big["cells"] / rk4_grid_s
    how = "measured" if done == total else f"EXTRAPOLATED from {done} of {total} steps in {dt:.1f} s"
    say(f"  whole {big['n']}x{big['n']} grid at h = {rk4_h:g}: {per_step * 1e3:.2f} ms/step, "
        f"{rk4_grid_s:.1f} s ({how}) = {rk4_rate:.2f} cells/s")
    speedup_rk4 = big["cells_per_s"] / rk4_rate
    say(f"  speedup of samflow: {speedup_rk4:.1f}x{'' if rk4_met else ' (lower bound)'}")
    if rk4_nc is not None and not rk4_met:
        t_nc = per_step * rk4_nc[1]
        say(f"  (leaving out the cells that collapse, h = {rk4_nc[0]:g} ({rk4_nc[1]} steps) reaches "
            f"the target: {t_nc:.1f} s for the grid, speedup {big['cells_per_s'] * t_nc / big['cells']:.1f}x)")

    # ---- other flows, depths, dimensions -----------------------------------
    say("")
    rows = other_charts(cfg, settings, chart, rng)

    # ---- floor ----------------------------------------------------------------
    say("")
    say("== flop-and-byte floor of the chart ==")
    matmul, elementwise, bw = measure_rates(small=(mode == "tiny"))
    say(f"  machine: numpy float64 matmul {matmul / 1e9:.2f} GFLOP/s; jitted JAX float64 "
        f"elementwise FMA chain {elementwise / 1e9:.2f} GFLOP/s; numpy copy {bw / 1e9:.2f} GB/s")
    fl = l2_field_flops(chart.depth, chart.d)
    evals = TSIT5_EVALS_PER_STEP * big["steps_sum"]
    flops = evals * fl
    peak = max(matmul, elementwise)
    t_flop = flops / peak
    t_byte = big["out_bytes"] / bw
    floor = max(t_flop, t_byte)
    floor_ratio = big["run_s"] / floor
    say(f"  {big['n']}x{big['n']}: {big['steps_sum']} Tsit5 steps (accepted + rejected) x "
        f"{TSIT5_EVALS_PER_STEP} = {evals:.3e} field evaluations x {fl} flops (l2, L = 2, d = 5) "
        f"= {flops:.3e} flops")
    say(f"  flop floor {t_flop * 1e3:.2f} ms at {peak / 1e9:.2f} GFLOP/s "
        f"({flops / elementwise * 1e3:.2f} ms at the elementwise rate); byte floor "
        f"{t_byte * 1e3:.2f} ms ({big['out_bytes'] / 1e6:.1f} MB of results written)")
    say(f"  measured {big['run_s']:.3f} s = {floor_ratio:.0f}x the floor "
        f"({big['run_s'] / max(flops / elementwise, t_byte):.0f}x at the elementwise rate)")
    say("  (the floor counts neither RK stage arithmetic, error control nor event checks; the lanes' "
        "idle share is the lane efficiency below)")

    say("")
    say("design goals of samflow (what it aims for on a 2-core CPU; informational, not a test "
        "of this run):")
    say(f"  speedup over a scipy solve_ivp loop at equal accuracy: {speedup_scipy:.1f}x "
        f"({_goal(speedup_scipy, 300, 'x', higher=True)})")
    say(f"  256x256 l2-SAM chart after compilation: {grid256_s:.1f} s, "
        f"{'measured' if measured_256 else 'extrapolated'} ({_goal(grid256_s, 4, ' s', higher=False)})")
    lane_eff = lane_efficiency_of(chart, big["alpha"], big["rho"], settings)
    say(f"  lane efficiency (cell-steps / lane-steps) of the {big['n']}x{big['n']} chart in one call of "
        f"{LANE_WIDTH} lanes: {lane_eff:.3f} ({_goal(lane_eff, 0.9, '', higher=True)})")
    say("")
    say("== compilation, the whole sweep, the figures ==")
    cold_s, warm_s = sweep_runs(mode)
    first_solve_s = first_python_solve()
    figures_s = figures_run() if mode == "full" else float("nan")
    first_compile_s = results[0]["compile_s"]
    summary_lines(rows, first_compile_s, warm_s, figures_s, mode)
    say(f"total wall time {time.perf_counter() - t_all:.0f} s; final peak RSS {peak_rss_mb():.0f} MB; "
        f"load avg at end " + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    nan = (float("nan"), float("nan"))
    bench = dict(
        cells_per_s=big["cells_per_s"], speedup_vs_scipy=speedup_scipy, speedup_vs_numpy_rk4=speedup_rk4,
        grid256_s=grid256_s, peak_mem_mb=chart_peak_mb, floor_ratio=floor_ratio,
        d50_cells_per_s=rows.get("d50", nan)[0], d200_cells_per_s=rows.get("d200", nan)[0],
        l3_vs_scipy=rows.get("l3", nan)[1], l4_vs_scipy=rows.get("l4", nan)[1], n4_vs_scipy=rows.get("n4", nan)[1],
        warm_sweep_s=warm_s, figures_s=figures_s, first_compile_s=first_compile_s,
        d50_log_cells_per_s=rows.get("d50_log", nan)[0], d200_log_cells_per_s=rows.get("d200_log", nan)[0],
        cold_sweep_s=cold_s, first_python_solve_s=first_solve_s,
        lane_efficiency=lane_eff,
        d50_general_cells_per_s=rows.get("d50_general", nan)[0], d200_general_cells_per_s=rows.get("d200_general", nan)[0],
    )
    notes = {"lane_efficiency": f"{LANE_WIDTH} lanes, the {big['n']}x{big['n']} chart's cells"}
    if not measured_256:
        notes["grid256_s"] = "extrapolated"
    if not speedup_met:
        notes["speedup_vs_scipy"] = "a lower bound: scipy missed the accuracy target"
    say("")
    targets_lines(bench, notes)
    say("BENCH " + " ".join(f"{k}={fmt(v)}" for k, v in bench.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
