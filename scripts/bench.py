"""Benchmark samflow against the code a researcher would write instead.

    python scripts/bench.py            # quick: regime chart at 32x32 and 64x64
    python scripts/bench.py --full     # also 128x128 and 256x256
    python scripts/bench.py --tiny     # a 4x4 smoke run (used by tests/test_bench.py)
    python scripts/bench.py --suite    # any mode, and also time `python -m pytest -q` (suite_s)

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
- **baseline C**: a hand-written numba loop of the same field (`numba_cells`, the optional
  "bench" extra): per cell Tsit5 with diffrax's tableau, initial step and PIDController
  rule (pcoeff 0, icoeff 1, diffrax's defaults), beta at the save times from Tsit5's own
  interpolant, collapse at ||W|| < 1e-6 rho located by bisection on that interpolant,
  `numba.prange` over the cells on every core numba uses (all by default). Compiled
  first (its compile time printed apart); then the decade ladder rtol 1e-5, 1e-6, ...
  (atol 1e-4 rtol, as baseline A) on the subset to the loosest rtol that reaches the
  accuracy target, and the whole grid at it, warm (best of 2 up to 64x64, as samflow).
- the same samflow measurement for GD, linf-SAM, depths 3 and 4, n = 4 samples, d = 50
  and d = 200 (the l2 rows with their scipy loops);
- a flop-and-byte floor for the chart and the ratio of the measured time to it.

The accuracy target of the baselines is max(1e-6, samflow's measured error):
the issue's 1e-6, or samflow's own error where that is worse. The last line is

    BENCH cells_per_s=... speedup_vs_scipy=... speedup_vs_numpy_rk4=... grid256_s=... peak_mem_mb=...
          floor_ratio=... d50_cells_per_s=... d200_cells_per_s=... l3_vs_scipy=... l4_vs_scipy=...
          n4_vs_scipy=... warm_sweep_s=... figures_s=... first_compile_s=...
          d50_log_cells_per_s=... d200_log_cells_per_s=... cold_sweep_s=...
          first_python_solve_s=... warm_python_solve_s=... lane_efficiency=... d50_general_cells_per_s=...
          d200_general_cells_per_s=... numba_cells_per_s=... speedup_vs_numba=...
          lane_step_ns=... suite_s=...

(one line; `nan` where a mode does not measure it: tiny skips the other charts, only
--full runs the figure script, only --suite times the suite, and the numba fields are
nan, after a one-line note, where numba is not installed). Above it, the targets of
issue 34, one line each: the measured value, the target, met, MISSED or not measured.
`numba_cells_per_s` is baseline C's cells/s on the largest chart of the mode, and
`speedup_vs_numba` samflow's cells/s over it on that grid, in the same run, at the same
accuracy target (a lower bound, marked so, where the loop missed the target).
`lane_step_ns` is the largest chart's warm wall time (`run_s`, s) over its step count
(the sum over the cells of samflow's `num_steps`, accepted + rejected steps), in ns:
the wall cost of one cell's step with every device (core) working; times the number of
devices it is the device time per step. (The chart takes the depth-2 reduction, so
these are its steps; `lane_efficiency` measures the lane engine, `reduce="off"`, on the
same cells.) `suite_s` is the wall of
`python -m pytest -q` (the default suite) as a whole process with --suite, nan
without it or when the suite fails. `cold_sweep_s` is the wall of
`python -m samflow.sweep configs/default.toml` as a whole process on an empty
compile cache and stored-programs folder (a fresh `SAMFLOW_COMPILATION_CACHE`,
`samflow._util.cache`), output to a temporary folder (tiny: a 2-cell config);
`warm_sweep_s` the wall of the same command run again right after, on that cache;
`first_python_solve_s` the import of samflow and one `sf.solve` (l2, one cell, 64
save times), timed inside a fresh Python process on an empty cache folder (what a new
user meets; target <= 4 s), and `warm_python_solve_s` the same in a second process
after it, on the cache folder the first one filled (its stored program; target <= 2 s);
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
from samflow._util.cache import PROGRAMS_ENV  # noqa: E402
from samflow.sweep import solve_grid  # noqa: E402

# This process times the charts' compilation itself (`first_compile_s`, each chart's
# "compile"): with the stored programs on, a library process's default, a second bench run
# loaded the first one's from the user's cache folder (first_compile_s 0.60 s against 8.04 s).
# The child processes (`_process`) get a fresh folder of their own and the stored programs
# as a user's process has them.
os.environ[PROGRAMS_ENV] = "off"

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
        n = len(sol.t)  # (a list, not an array, when no save time fell in this solve_ivp call)
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
# Baseline C: a hand-written numba loop (per-cell Tsit5, PI control, dense output)
# ----------------------------------------------------------------------------
#
# What a researcher who knows numba writes in an afternoon for this chart: the l2-SAM
# field of `np_field` (one sample {(mu, +1)}, real time) in scalar loops over the (L, d)
# weights (the depth-2 chart with prod_excl written as the swap of the two layers), and a
# per-cell adaptive Tsit5 as diffrax does it: the tableau read from
# `diffrax.Tsit5.tableau`, diffrax's initial step (`_select_initial_step`), its
# PIDController step rule (rms norm of error / (atol + rtol max(|y0|, |y1|)), safety 0.9,
# factor in [0.2, 10] (at most 0.9 after a rejection), error order 6 = Tsit5's order + 1,
# pcoeff 0 and icoeff 1 as diffrax's defaults), Tsit5's own 5th-order interpolant
# (diffrax's `_Tsit5Interpolation`) for beta at the save times, the collapse
# ||W||_2 < CAPTURE rho tested at each accepted step's end and located by bisection on
# that interpolant, and `numba.prange` over the cells, dealt round-robin to the threads
# (cells of small alpha cost ~7x more steps than those of large alpha: in grid order the
# static split of prange gave one thread 88% of the steps).

try:
    import numba
except ImportError:  # the optional "bench" extra: pip install -e ".[bench]"
    numba = None

import diffrax  # noqa: E402

_TSIT5 = diffrax.Tsit5.tableau
#: Tsit5's Butcher tableau (float64): NB_A (7, 7) lower triangular (row s: the weights of
#: stages 0..s-1 in stage s; row 6 = the solution weights, first same as last), NB_C (7,)
#: the stage times, NB_B (7,) the solution weights (the 7th, 0), NB_E (7,) the error
#: weights (diffrax's b_error).
NB_A = np.zeros((7, 7))
for _s, _row in enumerate(_TSIT5.a_lower):
    NB_A[_s + 1, : _row.size] = _row
NB_C = np.concatenate([[0.0], np.asarray(_TSIT5.c, float)])
NB_B = np.asarray(_TSIT5.b_sol, float)
NB_E = np.asarray(_TSIT5.b_error, float)
#: diffrax.PIDController's defaults (pcoeff, icoeff, safety, factormin, factormax) and
#: Tsit5's error order (its order 5 + 1, diffrax's `AbstractSolver.error_order`).
NB_PCOEFF, NB_ICOEFF, NB_SAFETY, NB_FACTORMIN, NB_FACTORMAX = 0.0, 1.0, 0.9, 0.2, 10.0
NB_ERROR_ORDER = 6.0
#: Steps (accepted + rejected) of one cell before it is given up (beta = nan from there).
NB_MAX_STEPS = 200_000
#: Halvings of the collapse step's [0, 1] by the bisection: 2^-60 of a step, below
#: float64's resolution of t, so the located time is the interpolant's crossing.
NB_BISECT = 60
#: Statuses of `numba_cells`: reached ts[-1], collapsed, out of steps.
NB_DONE, NB_COLLAPSED, NB_OUT_OF_STEPS = 0, 1, 2
#: atol of the baseline at rtol r: 1e-4 r, as the scipy loop (baseline A).
NB_ATOL_PER_RTOL = 1e-4


def _tsit5_weights(theta, out):
    """Tsit5's interpolant weights b_i(theta) for theta in [0, 1] (diffrax's
    `_Tsit5Interpolation`, Tsitouras 2011): y(t0 + theta h) = y0 + h sum_i b_i f_i,
    f_i the 7 stage slopes. Writes `out` (7,) float64."""
    t = theta
    out[0] = -1.0530884977290216 * t * (t - 1.3299890189751412) * (t * t - 1.4364028541716351 * t
                                                                    + 0.7139816917074209)
    out[1] = 0.1017 * t * t * (t * t - 2.1966568338249754 * t + 1.2949852507374631)
    out[2] = 2.490627285651252793 * t * t * (t * t - 2.38535645472061657 * t + 1.57803468208092486)
    out[3] = -16.54810288924490272 * (t - 1.21712927295533244) * (t - 0.61620406037800089) * t * t
    out[4] = 47.37952196281928122 * (t - 1.203071208372362603) * (t - 0.658047292653547382) * t * t
    out[5] = -34.87065786149660974 * (t - 1.2) * (t - 0.666666666666666667) * t * t
    out[6] = 2.5 * (t - 1.0) * (t - 0.6) * t * t


def _l2_field_depth2(y, rho, mu, d, out):
    """`np_field(W, rho, mu, "l2")` at L = 2, one cell: y (2 d,) the weights (u = W[0],
    v = W[1]), rho (scalar), mu (d,); writes dW/dt (2 d,) to `out`. float64.
    grad L = -s mu (v, u) with s = sigmoid(-<u v, mu>); W_hat = W + rho grad L / ||grad L||
    (W where grad L = 0); dW/dt = sigmoid(-<u_hat v_hat, mu>) mu (v_hat, u_hat)."""
    z = 0.0
    nn = 0.0
    for j in range(d):
        u = y[j]
        v = y[d + j]
        z += u * v * mu[j]
        nn += mu[j] * mu[j] * (u * u + v * v)
    s = 1.0 / (1.0 + np.exp(z))
    c = -rho / np.sqrt(nn) if (nn > 0.0 and s > 0.0) else 0.0  # ||grad L|| = s sqrt(nn)
    zh = 0.0
    for j in range(d):
        uh = y[j] + c * mu[j] * y[d + j]
        vh = y[d + j] + c * mu[j] * y[j]
        out[j] = vh
        out[d + j] = uh
        zh += uh * vh * mu[j]
    sh = 1.0 / (1.0 + np.exp(zh))
    for j in range(d):
        out[j] *= sh * mu[j]
        out[d + j] *= sh * mu[j]


def _l2_field_general(y, rho, mu, L, d, out, wh, pex):
    """`np_field(W, rho, mu, "l2")` for one cell at any depth L: y (L d,) the weights W
    row-major (W[l, j] = y[l d + j]), rho (scalar), mu (d,); writes dW/dt (L d,) to `out`;
    `wh`, `pex` (L d,) are scratch. float64."""
    z = 0.0
    for j in range(d):
        b = 1.0
        for l in range(L):
            b *= y[l * d + j]
        z += b * mu[j]
        for l in range(L):
            p = 1.0
            for k in range(L):
                if k != l:
                    p *= y[k * d + j]
            pex[l * d + j] = p
    s = 1.0 / (1.0 + np.exp(z))
    nn = 0.0
    for i in range(L * d):
        g = s * mu[i % d] * pex[i]
        nn += g * g
    c = -rho * s / np.sqrt(nn) if nn > 0.0 else 0.0
    for i in range(L * d):
        wh[i] = y[i] + c * mu[i % d] * pex[i]
    zh = 0.0
    for j in range(d):
        b = 1.0
        for l in range(L):
            b *= wh[l * d + j]
        zh += b * mu[j]
    sh = 1.0 / (1.0 + np.exp(zh))
    for j in range(d):
        for l in range(L):
            p = 1.0
            for k in range(L):
                if k != l:
                    p *= wh[k * d + j]
            out[l * d + j] = sh * mu[j] * p


def _nb_field(y, rho, mu, L, d, out, wh, pex):
    """l2-SAM's dW/dt of one cell (see `_l2_field_general`); the depth-2 loop at L = 2."""
    if L == 2:
        _l2_field_depth2(y, rho, mu, d, out)
    else:
        _l2_field_general(y, rho, mu, L, d, out, wh, pex)


def _nb_interp(y0, h, k, w, n, out):
    """Tsit5's dense output y0 + h sum_s w_s k_s: y0 (n,), k (7, n) the stage slopes,
    w (7,) from `_tsit5_weights`; writes `out` (n,)."""
    for i in range(n):
        acc = 0.0
        for s in range(7):
            acc += w[s] * k[s, i]
        out[i] = y0[i] + h * acc


def _nb_norm(v, n):
    """||v[:n]||_2."""
    acc = 0.0
    for i in range(n):
        acc += v[i] * v[i]
    return np.sqrt(acc)


def _nb_beta(y, L, d, row):
    """beta = prod_l W[l, :] of the weights y (L d,), written to row (d,)."""
    for j in range(d):
        b = 1.0
        for l in range(L):
            b *= y[l * d + j]
        row[j] = b


def _nb_cell(alpha, rho, mu, L, ts, rtol, atol, cap, max_steps, beta_out):
    """One cell, W(0) = alpha in every weight, to t = ts[-1] (real time) by Tsit5 with
    diffrax's initial step and PI controller. Writes beta (n_save, d) at the save times
    ts (n_save,), increasing, > 0, into `beta_out`, from Tsit5's interpolant: 0 from the
    collapse on, nan from where the steps ran out. Returns (collapse time, inf if none;
    steps accepted + rejected; status NB_*)."""
    d = mu.size
    n = L * d
    n_save = ts.size
    y0 = np.full(n, alpha)
    y1 = np.empty(n)
    ys = np.empty(n)
    yi = np.empty(n)
    k = np.empty((7, n))
    wh = np.empty(n)
    pex = np.empty(n)
    w = np.empty(7)
    t_end = ts[n_save - 1]
    # diffrax's `_select_initial_step` (Hairer, Norsett & Wanner, Solving ODEs I, II.4)
    _nb_field(y0, rho, mu, L, d, k[0], wh, pex)
    d0 = 0.0
    d1 = 0.0
    for i in range(n):
        sc = atol + abs(y0[i]) * rtol
        d0 += (y0[i] / sc) ** 2
        d1 += (k[0, i] / sc) ** 2
    d0 = np.sqrt(d0 / n)
    d1 = np.sqrt(d1 / n)
    h0 = 1e-6 if (d0 < 1e-5 or d1 < 1e-5) else 0.01 * d0 / d1
    for i in range(n):
        ys[i] = y0[i] + h0 * k[0, i]
    _nb_field(ys, rho, mu, L, d, k[1], wh, pex)
    d2 = 0.0
    for i in range(n):
        sc = atol + abs(y0[i]) * rtol
        d2 += ((k[1, i] - k[0, i]) / sc) ** 2
    d2 = np.sqrt(d2 / n) / h0
    md = max(d1, d2)
    h1 = max(1e-6, h0 * 1e-3) if md <= 1e-15 else (0.01 / md) ** (1.0 / NB_ERROR_ORDER)
    h = min(100.0 * h0, h1)

    coeff1 = (NB_ICOEFF + NB_PCOEFF) / NB_ERROR_ORDER
    coeff2 = -NB_PCOEFF / NB_ERROR_ORDER
    prev_inv = 1.0  # the controller's state: 1 / the last accepted step's scaled error
    t = 0.0
    ks = 0  # the next save
    steps = 0
    while True:
        if steps >= max_steps:
            for q in range(ks, n_save):
                for j in range(d):
                    beta_out[q, j] = np.nan
            return np.inf, steps, NB_OUT_OF_STEPS
        last = t + h >= t_end
        if last:
            h = t_end - t
        # stages 1..6 (stage 0, k[0] = f(y0), is the last step's 7th: first same as last);
        # the 7th stage's point is the solution y1 (its row of NB_A is NB_B)
        for s in range(1, 7):
            for i in range(n):
                acc = 0.0
                for q in range(s):
                    acc += NB_A[s, q] * k[q, i]
                ys[i] = y0[i] + h * acc
            _nb_field(ys, rho, mu, L, d, k[s], wh, pex)
        err = 0.0
        finite = True
        for i in range(n):
            y1[i] = ys[i]
            e = 0.0
            for s in range(7):
                e += NB_E[s] * k[s, i]
            e *= h
            if not (np.isfinite(y1[i]) and np.isfinite(e)):
                finite = False
            sc = atol + max(abs(y0[i]), abs(y1[i])) * rtol
            err += (e / sc) ** 2
        err = np.sqrt(err / n) if finite else np.inf
        steps += 1
        keep = err < 1.0
        if keep:
            t1 = t_end if last else t + h
            t_hit = np.inf
            if _nb_norm(y1, n) < cap:  # collapsed in this step: where ||W(t)|| = cap
                lo, hi = 0.0, 1.0
                for _ in range(NB_BISECT):
                    mid = 0.5 * (lo + hi)
                    _tsit5_weights(mid, w)
                    _nb_interp(y0, h, k, w, n, yi)
                    if _nb_norm(yi, n) < cap:
                        hi = mid
                    else:
                        lo = mid
                t_hit = t + hi * h
            while ks < n_save and ts[ks] <= t1 and ts[ks] < t_hit:
                _tsit5_weights((ts[ks] - t) / h, w)
                _nb_interp(y0, h, k, w, n, yi)
                _nb_beta(yi, L, d, beta_out[ks])
                ks += 1
            if t_hit < np.inf:
                for q in range(ks, n_save):
                    for j in range(d):
                        beta_out[q, j] = 0.0
                return t_hit, steps, NB_COLLAPSED
            t = t1
            for i in range(n):
                y0[i] = y1[i]
                k[0, i] = k[6, i]
            if last:
                return np.inf, steps, NB_DONE
        # diffrax's PIDController.adapt_step_size: h <- h clip(safety inv^c1 prev_inv^c2)
        inv = 1.0 / err if err > 0.0 else np.inf
        if inv == 0.0 or np.isinf(inv):  # an infinite or zero error: the clip's bound
            factor = NB_FACTORMAX if keep else NB_FACTORMIN
        else:
            factor = NB_SAFETY * inv ** coeff1 * prev_inv ** coeff2
        if keep:
            factor = min(max(factor, 1.0), NB_FACTORMAX)
            prev_inv = inv if (inv > 0.0 and np.isfinite(inv)) else 1.0
        else:
            factor = min(max(factor, NB_FACTORMIN), NB_SAFETY)
        h = h * factor


def _nb_cells(order, alpha, rho, mu, L, ts, rtol, atol, max_steps, beta, T, steps, status):
    """The cells order[i], i < B, in parallel over the threads (`numba.prange`): alpha,
    rho (B,), mu (d,), ts (n_save,), order (B,) int64 a permutation; fills beta
    (B, n_save, d), T (B,) collapse times (inf if none), steps (B,) and status (B,) int64.
    float64."""
    for i in prange(order.size):  # noqa: F821 (numba.prange; bound below)
        c = order[i]
        T[c], steps[c], status[c] = _nb_cell(alpha[c], rho[c], mu, L, ts, rtol, atol, CAPTURE * rho[c],
                                             max_steps, beta[c])


if numba is not None:
    prange = numba.prange
    _njit = numba.njit(cache=False, error_model="numpy")
    # the field inlined into the step (numba's own inlining): ~15% fewer ns per step here
    _l2_field_depth2 = numba.njit(cache=False, error_model="numpy", inline="always")(_l2_field_depth2)
    _l2_field_general = _njit(_l2_field_general)
    _nb_field = numba.njit(cache=False, error_model="numpy", inline="always")(_nb_field)
    _tsit5_weights, _nb_interp, _nb_norm, _nb_beta, _nb_cell = (
        _njit(f) for f in (_tsit5_weights, _nb_interp, _nb_norm, _nb_beta, _nb_cell))
    _nb_cells = numba.njit(cache=False, error_model="numpy", parallel=True)(_nb_cells)


def numba_cells(prob: Problem, alpha, rho, rtol, atol, ts=TS, max_steps=NB_MAX_STEPS) -> dict:
    """Baseline C on the cells (alpha_i, rho_i) of an l2 problem with one sample
    (`prob.X` None): alpha, rho (B,) float64; ts (n_save,) the save times. Returns
    beta (B, n_save, d), T (B,) collapse times (inf if none), steps (B,) int64
    (accepted + rejected Tsit5 steps), status (B,) int64 (NB_DONE, NB_COLLAPSED,
    NB_OUT_OF_STEPS), seconds (the kernel's wall) and cpu_s (the process' CPU seconds
    over the kernel, every thread's, user + system). Needs numba (the "bench" extra).
    The first call compiles (seconds then include the compilation)."""
    if numba is None:
        raise RuntimeError('numba is not installed (pip install -e ".[bench]")')
    if prob.method != "l2" or prob.X is not None:
        raise ValueError(f"baseline C is written for l2-SAM on one sample, not {prob.label}")
    alpha = np.ascontiguousarray(alpha, dtype=np.float64)
    rho = np.ascontiguousarray(rho, dtype=np.float64)
    ts = np.ascontiguousarray(ts, dtype=np.float64)
    mu = np.ascontiguousarray(prob.mu, dtype=np.float64)
    B = alpha.size
    nt = numba.get_num_threads()
    # dealt round-robin: prange gives each thread one contiguous block of `order`
    order = np.concatenate([np.arange(t, B, nt) for t in range(nt)]).astype(np.int64)
    beta = np.empty((B, ts.size, prob.d))
    T = np.empty(B)
    steps = np.empty(B, np.int64)
    status = np.empty(B, np.int64)
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    _nb_cells(order, alpha, rho, mu, prob.depth, ts, float(rtol), float(atol), int(max_steps), beta, T, steps,
              status)
    wall = time.perf_counter() - t0
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    return dict(beta=beta, T=T, steps=steps, status=status, seconds=wall, cpu_s=cpu)


def numba_baseline(prob: Problem, res: dict, target: float, levels: int, repeats: int) -> "dict | None":
    """Baseline C on the chart of `res` (a `SamflowRunner.run_grid` result with its
    reference subset): compiled first (compile_s = the first call's wall on 2 cells minus
    the second's), then the decade ladder rtol 1e-5, 1e-6, ... (`levels` rungs, atol =
    NB_ATOL_PER_RTOL rtol) on the reference cells until the error reaches `target`, then
    the whole grid at that rtol, warm, best of `repeats` walls. Returns cells_per_s,
    rtol, err, reached, compile_s, grid_s (s), steps_sum (accepted + rejected steps of
    the grid), ns_per_step (grid wall / steps_sum, ns), cpu_s (that run's CPU seconds,
    all threads) and threads; None, after one line, where numba is not installed."""
    if numba is None:
        say('  numba is not installed (pip install -e ".[bench]"): baseline C not run; '
            "numba_cells_per_s and speedup_vs_numba are nan")
        return None
    threads = numba.get_num_threads()
    a2, r2 = res["alpha"][:2], res["rho"][:2]
    t0 = time.perf_counter()
    numba_cells(prob, a2, r2, 1e-8, 1e-12)
    first = time.perf_counter() - t0
    compile_s = first - numba_cells(prob, a2, r2, 1e-8, 1e-12)["seconds"]
    say(f"  numba {numba.__version__}, {threads} threads ({numba.threading_layer()} layer): compiled in "
        f"{compile_s:.2f} s (first call on 2 cells {first:.2f} s, less the second's; not in the timings below)")
    alpha_s, rho_s = res["alpha"][res["idx"]], res["rho"][res["idx"]]
    for k in range(levels):
        rtol = 10.0 ** (-5 - k)
        out = numba_cells(prob, alpha_s, rho_s, rtol, NB_ATOL_PER_RTOL * rtol)
        e = float(np.max(cell_errors(out["beta"], out["T"], res["b_ref"], res["T_ref"])))
        mism = int(np.sum(np.isfinite(out["T"]) != np.isfinite(res["T_ref"])))
        both = np.isfinite(out["T"]) & np.isfinite(res["T_ref"])
        t_rel = (f"collapse times to {np.max(np.abs(out['T'][both] / res['T_ref'][both] - 1)):.1e} relative"
                 if both.any() else "no cell collapses in both")
        say(f"  rtol {rtol:.0e}: {len(alpha_s)} cells, {np.mean(out['steps']):6.0f} steps/cell, max rel err "
            f"{e:.2e}, {t_rel}, cells where only one of numba, reference "
            f"collapses: {mism}, out of steps: {int(np.sum(out['status'] == NB_OUT_OF_STEPS))}")
        reached = e <= target
        if reached:
            break
    if not reached:
        say(f"  target not reached by rtol {rtol:.0e}: using it (samflow's speed-up over it is then a LOWER bound)")
    atol = NB_ATOL_PER_RTOL * rtol
    runs = [numba_cells(prob, res["alpha"], res["rho"], rtol, atol) for _ in range(repeats)]
    best = min(runs, key=lambda r: r["seconds"])
    grid_s = best["seconds"]
    steps_sum = int(np.sum(best["steps"]))
    st = np.bincount(best["status"], minlength=3)
    say(f"  whole {res['n']}x{res['n']} grid at rtol {rtol:.0e}, atol {atol:.0e}: {grid_s:.3f} s (best of "
        f"{len(runs)}; cpu {best['cpu_s']:.2f} s) = {res['cells'] / grid_s:.1f} cells/s; {steps_sum} steps "
        f"(accepted + rejected; {steps_sum / res['cells']:.0f}/cell), {grid_s / steps_sum * 1e9:.0f} ns of wall "
        f"and {best['cpu_s'] / steps_sum * 1e9:.0f} ns of CPU per step on {threads} threads; done {st[NB_DONE]}, "
        f"collapsed {st[NB_COLLAPSED]}, out of steps {st[NB_OUT_OF_STEPS]}")
    return dict(cells_per_s=res["cells"] / grid_s, rtol=rtol, err=e, reached=reached, compile_s=compile_s,
                grid_s=grid_s, steps_sum=steps_sum, ns_per_step=grid_s / steps_sum * 1e9, cpu_s=best["cpu_s"],
                threads=threads)


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
    `LANE_WIDTH` lanes of the lane engine (`samflow._engine.lanes.solve_lanes`, the
    engine's own statistic: the loop's iterations): 1 when no lane ever idles.
    Saved at two times only (the steps do not depend on the save times)."""
    from samflow._engine.lanes import solve_lanes
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
        f"numpy {np.__version__}; scipy {scipy.__version__}; "
        f"numba {numba.__version__ if numba is not None else 'not installed'}; samflow {sf.__version__}",
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


def _process(cmd: list, cache: Path, cwd: Path, user_env: bool = False) -> tuple:
    """Run `cmd` as a fresh process with samflow's compile cache in `cache` (JAX's own
    cache variable dropped, so that no cache of the caller's takes part): (wall s, stdout),
    or (nan, None) after one error line when it fails. `user_env`: without the
    bench's `XLA_FLAGS` as well, as a user's own Python process starts."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), SAMFLOW_COMPILATION_CACHE=str(cache))
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    env.pop(PROGRAMS_ENV, None)  # the bench's own setting (above), not a user's
    if user_env:
        env.pop("XLA_FLAGS", None)
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
    the stored programs, `samflow._util.cache`), output to a temporary folder: the walls
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


def first_python_solve() -> tuple[float, float]:
    """The import of samflow and one `sf.solve` (l2, one cell, 64 save times) in a fresh
    Python process on an empty cache folder, then in a second one on the folder the
    first filled (its stored program, `samflow._util.cache`), both without the bench's
    `XLA_FLAGS` (a user's own process): `(cold, warm)` seconds from
    before the import to the result (interpreter start-up left out); nan, nan when a
    process fails. The line says how many files the first one left."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "cache"
        cmd = [sys.executable, "-c", FIRST_SOLVE]
        _, first = _process(cmd, cache, ROOT, user_env=True)
        files = _cache_files(cache)
        wall, second = _process(cmd, cache, ROOT, user_env=True)
    if first is None or second is None:
        return float("nan"), float("nan")
    secs = [float(ln.split()[1]) for ln in (first + second).splitlines() if ln.startswith("FIRST_SOLVE_S ")]
    if len(secs) != 2:
        say("  error: the first-solve process printed no FIRST_SOLVE_S line")
        return float("nan"), float("nan")
    cached = (f"it left {files} files in the compile cache" if files else
              "it left the compile cache empty: import samflow does not turn the cache on, so this "
              "process compiled again")
    say(f"  import samflow + sf.solve('l2', one cell, 64 saves) in a fresh process: {secs[1]:.1f} s "
        f"(whole process {wall:.1f} s); the same in the process before it: {secs[0]:.1f} s ({cached})")
    return secs[0], secs[1]


def figures_run() -> float:
    """`python scripts/reproduce_figures.py --out <tmp>` with a fresh compile cache: wall."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        s = _process_seconds([sys.executable, str(ROOT / "scripts" / "reproduce_figures.py"), "--out",
                              str(Path(tmp) / "figures")], Path(tmp) / "cache", ROOT)
    say(f"  python scripts/reproduce_figures.py (full, cold compile cache): {s:.1f} s")
    return s


def suite_run(pytest_args=("-q",)) -> float:
    """`python -m pytest -q` (the default suite under pyproject's addopts: one worker per
    core, the tests marked slow left out) as a whole process in the repository, with
    PYTHONPATH at this tree: its wall in s; nan, after a line saying so, when it fails.
    `pytest_args` (tuple of str) replaces "-q" (a narrower run, to try this function)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-m", "pytest", *pytest_args]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    lines = proc.stdout.strip().splitlines()
    summary = lines[-1] if lines else "(no output)"
    shown = "python -m pytest " + " ".join(pytest_args)
    if proc.returncode != 0:
        say(f"  {shown} FAILED (exit {proc.returncode}) after {wall:.0f} s: {summary}; suite_s = nan")
        return float("nan")
    say(f"  {shown}: {wall:.1f} s whole process ({summary}); load avg now "
        + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    return wall


# The targets of issue 34 ("The peer in the bench"): BENCH key, target, unit, whether
# higher is better. (Issue 26's, with the runs that measured them: docs/benchmarks.md.)
ISSUE34_TARGETS = [("speedup_vs_numba", 1.0, "x", True), ("grid256_s", 1.1, " s", False),
                   ("speedup_vs_scipy", 700, "x", True), ("d50_cells_per_s", 5000, " cells/s", True),
                   ("d200_cells_per_s", 2000, " cells/s", True), ("first_python_solve_s", 4, " s", False),
                   ("warm_python_solve_s", 2, " s", False),
                   ("cold_sweep_s", 15, " s", False), ("warm_sweep_s", 4, " s", False),
                   ("figures_s", 90, " s", False), ("suite_s", 600, " s", False)]


def targets_lines(bench: dict, notes: dict) -> None:
    """The issue 34 targets, one line each: the measured value (`bench`, by BENCH key),
    the target, met or MISSED (`not measured` for a nan); `notes[key]` qualifies a value."""
    say("issue 34 targets (measured here | target | verdict):")
    for key, goal, unit, higher in ISSUE34_TARGETS:
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
    p.add_argument("--suite", action="store_true",
                   help="also time the test suite, `python -m pytest -q`, as a whole process (suite_s)")
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

    # ---- baseline C: numba loop ---------------------------------------------
    say("")
    say(f"== baseline C: a numba loop (per-cell Tsit5 with diffrax's tableau, initial step and PI controller, "
        f"Tsit5's interpolant at the save times, collapse ||W|| < 1e-6 rho located by bisection on it, "
        f"numba.prange over the cells); rtol ladder 1e-5, 1e-6, ... with atol = {NB_ATOL_PER_RTOL:g} rtol on the "
        f"same {len(alpha_s)} cells, then the whole {big['n']}x{big['n']} grid ==")
    nb = numba_baseline(chart, big, target, cfg["scipy_max_rtol_levels"], repeats=2 if big["n"] <= 64 else 1)
    if nb is not None:
        numba_rate, speedup_numba = nb["cells_per_s"], big["cells_per_s"] / nb["cells_per_s"]
        say(f"  chosen rtol {nb['rtol']:.0e} (err {nb['err']:.2e} vs target {target:.2e}): {numba_rate:.1f} "
            f"cells/s; samflow ({big['cells_per_s']:.1f} cells/s on the same grid, {big['run_s']:.3f} s) is "
            f"{speedup_numba:.3g}x{'' if nb['reached'] else ' (a lower bound)'} ("
            f"{_goal(speedup_numba, 1, 'x', higher=True)}); samflow {big['steps_sum'] / big['cells']:.0f} "
            f"steps/cell, numba {nb['steps_sum'] / big['cells']:.0f}; CPU seconds of the grid (all threads; "
            f"less sensitive to other jobs than walls): samflow {big['cpu_s']:.2f}, numba {nb['cpu_s']:.2f}")
    else:
        numba_rate = speedup_numba = float("nan")

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
    lane_step_ns = big["run_s"] / big["steps_sum"] * 1e9
    n_dev = len(jax.devices())
    say(f"  lane_step_ns: the {big['n']}x{big['n']} chart's warm wall {big['run_s']:.3f} s / its "
        f"{big['steps_sum']} steps (the sum over the cells of samflow's num_steps, accepted + rejected) = "
        f"{lane_step_ns:.0f} ns of wall per step with {n_dev} device(s) working ({lane_step_ns * n_dev:.0f} "
        f"device-ns per step; CPU {big['cpu_s'] / big['steps_sum'] * 1e9:.0f} ns per step)"
        + (f"; the numba loop: {nb['ns_per_step']:.0f} ns of wall and {nb['cpu_s'] / nb['steps_sum'] * 1e9:.0f} "
           f"ns of CPU per step on {nb['threads']} threads" if nb is not None else ""))
    say("")
    say("== compilation, the whole sweep, the figures ==")
    cold_s, warm_s = sweep_runs(mode)
    first_solve_s, warm_solve_s = first_python_solve()
    figures_s = figures_run() if mode == "full" else float("nan")
    suite_s = suite_run() if args.suite else float("nan")
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
        cold_sweep_s=cold_s, first_python_solve_s=first_solve_s, warm_python_solve_s=warm_solve_s,
        lane_efficiency=lane_eff,
        d50_general_cells_per_s=rows.get("d50_general", nan)[0], d200_general_cells_per_s=rows.get("d200_general", nan)[0],
        numba_cells_per_s=numba_rate, speedup_vs_numba=speedup_numba, lane_step_ns=lane_step_ns, suite_s=suite_s,
    )
    notes = {"lane_efficiency": f"{LANE_WIDTH} lanes, the {big['n']}x{big['n']} chart's cells"}
    if not measured_256:
        notes["grid256_s"] = "extrapolated"
    if not speedup_met:
        notes["speedup_vs_scipy"] = "a lower bound: scipy missed the accuracy target"
    if nb is not None and not nb["reached"]:
        notes["speedup_vs_numba"] = "a lower bound: the numba loop missed the accuracy target"
    if nb is None:
        notes["speedup_vs_numba"] = "numba is not installed"
    say("")
    targets_lines(bench, notes)
    say("BENCH " + " ".join(f"{k}={fmt(v)}" for k, v in bench.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
