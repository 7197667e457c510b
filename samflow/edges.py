"""The regime edges of SAM on one or more samples, as values of a = alpha / rho.

docs/theory.md s.3.1 names three regimes of l2-SAM from the equal init
w^(l)(0) = alpha 1: 1 collapse (the weights reach 0), 2 "minor first, major
last" (the leader starts below the major feature d and ends at d), 3 major first.
This module finds the two edges between them for any spectrum mu, depth L and
data set, by vectorized bisection on the flow's outcome:

- **collapse edge** (regime 1/2): the largest a whose flow collapses. The
  outcome of a cell is read from one solve (`samflow.solver.solve_cell`, vmapped
  over the cells of every problem at once, one batched solve per bisection
  round): status `COLLAPSED` = collapsed; escaped = the weights reached `escape`
  x rho (in the tau clock the solve stops there, status `BLEW_UP`; in real time
  the last saved weights are read); anything else (the horizon came first, a
  step budget ran out) = undecided, and the bisection of that problem stops
  with the bracket it has (its `edge` is then NaN, `EdgeResult`). The edge is
  the stable manifold of a saddle and has no closed form (s.3.1). Above `escape` rho no flow comes back to 0: there
  the perturbation is a relative O(rho / |w|) change of the weights and the
  field is that of gradient flow, which grows every weight.
- **major-first edge** (regime 2/3): the largest a at which the first dominant
  feature (the leader right after t = 0) changes to d and stays d above. d is
  the major feature: the last of a spectrum; for several samples, the largest
  mean_i y_i x_ij (with noisy magnitudes it need not be the last one). From an
  equal init every |beta_j(0)| = alpha^L is tied, so the first leader is
  argmax_j d|beta_j|/dt at t = 0: this is read from the flow's own field
  (`samflow.flows.velocity` at W(0), pushed through beta by
  forward-mode autodiff), which decides the outcome to rounding. A saved
  trajectory cannot: just below the edge the challenger leads only for a time
  proportional to the distance to the edge, by a relative margin proportional
  to its square, so at 1e-6 relative the lead lasts ~1e-6 in tau and is ~1e-12
  in beta, below the solver's tolerance and the tie rule of
  `samflow.analysis.regime_label`. At depth 2 the edge is the closed form
  (mu_(d-1) + mu_d) / (sqrt 2 ||mu||) (`samflow.theory.l2_alpha_marks`).

At odd depths the major feature also leads first at small a (the l2 field is
mu * w_hat^(L-1) >= 0 and a large perturbation overshoots), so the first
leader goes d -> minor -> d along the a axis: `which="first"` returns the lower
of these changes (the bottom of regime 2 there, since odd depths never collapse
in the tau clock, s.3.2).

Scale invariance (s.3, s.3.2): on one sample the outcome depends on a only,
so one-sample problems are solved in the tau clock at rho = 1. Several samples
have no tau clock: they are solved in real time at the given `rho` (default
0.01, the default config's radius, where the loss is still near ell(0) while
the features switch, s.3.4), and their edges may depend on rho.

Problems of the same depth and number of samples share one compiled solve:
shorter spectra are padded with features whose data are 0 and whose weights
start at 0 (their gradient, perturbation and field are 0, so they stay at 0
and change neither the norms nor the events of the real features).
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Bool, Float, Int

from .datasets import Dataset
from .flows import Method, velocity
from ._methods import check_p
from .losses import get_loss
from .diagonal_net import beta as beta_of
from .solver import Clock, SolverSettings, solve_cell
from .status import Status
from ._util.x64 import in_float64

__all__ = ["COLLAPSE_SEARCH", "EdgeResult", "EdgeSearch", "MAJOR_FIRST_SEARCH", "collapse_edge", "major_death_edge",
           "major_first_edge"]

_UNDECIDED = -1
_LOG_PAD = 1e-250


class EdgeResult(NamedTuple):
    """Regime edges in units of a = alpha / rho, one entry per problem.

    Each field has shape `(P,)` for P problems, or `()` for one problem given
    as one spectrum or one data set with a scalar depth.

    - `edge`: float64, the geometric mean of the final bracket, within `search.rtol`
      of every point in it; NaN where the scan saw no change and where the
      bisection did not converge (its bracket is then in `lo`, `hi`: the edge is
      somewhere inside, known to no better than their ratio).
    - `lo`, `hi`: float64, the final bracket, converged or not (NaN where no
      change was seen).
    - `n_solves`: int64, the cells solved for this problem (collapse edge) or
      the evaluations of the field at t = 0 (major-first edge), scan included.
    - `converged`: bool, the bracket reached the relative width `2 search.rtol`
      (False: a midpoint was undecided, or `search.max_rounds` ran out).
    - `changes`: int64, how many times the outcome changed along the scan
      grid (0: no edge in the scanned range).
    """

    edge: Float[np.ndarray, "*P"]
    lo: Float[np.ndarray, "*P"]
    hi: Float[np.ndarray, "*P"]
    n_solves: Int[np.ndarray, "*P"]
    converged: Bool[np.ndarray, "*P"]
    changes: Int[np.ndarray, "*P"]


@dataclasses.dataclass(frozen=True)
class _Problem:
    X: np.ndarray  # (n, d)
    y: np.ndarray  # (n,)
    depth: int
    p: "float | None" = None  # lp-SAM's exponent (None for the other methods)

    @property
    def mu_bar(self) -> np.ndarray:
        """mean_i y_i x_i: the one-sample mu, or its multi-sample analogue (s.5)."""
        return np.mean(self.y[:, None] * self.X, axis=0)


def _as_problems(mu, depth, p=None) -> tuple[list[_Problem], bool]:
    """The problems of a call and whether the result is a scalar (`p`: None, or
    the checked exponents of lp, (k,) broadcast against the spectra and depths)."""
    if isinstance(mu, Dataset):
        sets, one = [mu], True
    elif isinstance(mu, (list, tuple)) and mu and all(isinstance(m, Dataset) for m in mu):
        sets, one = list(mu), False
    else:
        if isinstance(mu, (list, tuple)) and mu and all(np.ndim(m) == 1 for m in mu):
            rows, one = [np.asarray(m, dtype=np.float64) for m in mu], False
        else:
            try:
                arr = np.asarray(mu, dtype=np.float64)
            except (TypeError, ValueError):
                raise ValueError("mu must be a (d,) or (P, d) array of floats, a list of 1-D spectra, "
                                 "or samflow.Dataset(s)") from None
            if arr.ndim not in (1, 2):
                raise ValueError(f"mu must have shape (d,) or (P, d), got shape {arr.shape}")
            rows, one = (list(arr) if arr.ndim == 2 else [arr]), arr.ndim == 1
        sets = []
        for i, m in enumerate(rows):
            if m.size < 2:
                raise ValueError(f"mu[{i}] has {m.size} feature(s); a regime edge needs d >= 2")
            if not (np.all(np.isfinite(m)) and np.all(m > 0)):
                raise ValueError(f"mu[{i}] must be finite and > 0 in every coordinate, got {m}")
            if np.argmax(m) != m.size - 1:
                raise ValueError(f"mu[{i}]: the last feature must be the major one (largest mu), got {m}")
            sets.append(Dataset(X=jnp.asarray(m[None, :]), y=jnp.ones(1)))
    probs_xy = []
    for i, ds in enumerate(sets):
        try:
            checked = Dataset.from_arrays(np.asarray(ds.X), np.asarray(ds.y))
        except ValueError as e:
            raise ValueError(f"data[{i}]: {e}") from None
        if checked.d < 2:
            raise ValueError(f"data[{i}] has d = {checked.d}; a regime edge needs d >= 2")
        probs_xy.append((np.asarray(checked.X), np.asarray(checked.y)))
    depths = np.atleast_1d(np.asarray(depth))
    if depths.ndim != 1 or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in depths.tolist()) \
            or np.any(depths < 2):
        raise ValueError(f"depth must be an integer >= 2 or a 1-D list of them, got {depth!r}")
    ps = [None] if p is None else list(p)
    one = one and np.ndim(depth) == 0 and len(ps) == 1 and not _is_list(p)
    P = max(len(probs_xy), depths.size, len(ps))
    if len(probs_xy) not in (1, P) or depths.size not in (1, P) or len(ps) not in (1, P):
        raise ValueError(f"{len(probs_xy)} spectra, {depths.size} depths and {len(ps)} exponents p do not broadcast; "
                         "give one of each or as many")
    probs = [_Problem(*probs_xy[i % len(probs_xy)], int(depths[i % depths.size]), ps[i % len(ps)]) for i in range(P)]
    return probs, one


def _is_list(p) -> bool:
    return p is not None and getattr(p, "_edge_list", False)


class _PList(list):
    """The exponents p of a call given as a list (the result then has a problem axis)."""

    _edge_list = True


def _check_ps(method: Method, p) -> "list[float] | None":
    """lp's exponent(s): a number or a 1-D list of them, each checked by
    `samflow._methods.check_p` (one line naming p); None for the other methods
    (which refuse a p)."""
    if method is not Method.LP or p is None:
        check_p(method, p)  # lp without p, or p with another method: one line
        return None
    if np.ndim(p) == 0:
        return [check_p(method, p)]
    if np.ndim(p) != 1 or np.size(p) == 0:
        raise ValueError(f"p must be a number in (1, inf) or a 1-D list of them (one per problem), got {p!r}")
    return _PList(check_p(method, v) for v in np.asarray(p, dtype=object).tolist())


@dataclasses.dataclass(frozen=True)
class EdgeSearch:
    """How an edge is searched for: a log scan of a = alpha / rho, then bisection.

    The four knobs that `collapse_edge` and `major_first_edge` share (the atlas
    config's `[bisection]` table holds the same ones). A field left at None takes
    the default of the edge it is passed to (`COLLAPSE_SEARCH`,
    `MAJOR_FIRST_SEARCH`), so `EdgeSearch(rtol=1e-8)` changes one knob only.

    - `bracket`: (lo, hi) with 0 < lo < hi finite, the scanned range of a.
    - `scan`: an integer >= 2, the points of the log scan over `bracket`.
    - `rtol`: in [1e-14, 0.5), the relative half-width of the final bracket
      around the edge (`EdgeResult.converged` when reached).
    - `max_rounds`: an integer >= 1, the most bisection rounds.

    **Raises:** `ValueError` (one line naming the field) at construction.
    """

    bracket: tuple[float, float] | None = None
    scan: int | None = None
    rtol: float | None = None
    max_rounds: int | None = None

    def __post_init__(self):
        if self.bracket is not None:
            try:
                lo, hi = (float(b) for b in self.bracket)
            except (TypeError, ValueError):
                lo = hi = math.nan
            if not (0 < lo < hi and math.isfinite(hi)):
                raise ValueError(f"bracket must be (lo, hi) with 0 < lo < hi finite, got {self.bracket!r}")
            object.__setattr__(self, "bracket", (lo, hi))
        if self.scan is not None and not (isinstance(self.scan, int) and self.scan >= 2):
            raise ValueError(f"scan must be an integer >= 2 (points of the starting grid), got {self.scan!r}")
        if self.rtol is not None and not (isinstance(self.rtol, float | int) and 1e-14 <= self.rtol < 0.5):
            raise ValueError(f"rtol must be a number in [1e-14, 0.5), got {self.rtol!r}")
        if self.max_rounds is not None and not (isinstance(self.max_rounds, int) and not isinstance(self.max_rounds, bool)
                                                and self.max_rounds >= 1):
            raise ValueError(f"max_rounds must be an integer >= 1, got {self.max_rounds!r}")

    def over(self, default: "EdgeSearch") -> "EdgeSearch":
        """These knobs, each one left at None taken from `default`."""
        return EdgeSearch(*(default_v if v is None else v for v, default_v in zip(
            dataclasses.astuple(self), dataclasses.astuple(default))))


COLLAPSE_SEARCH = EdgeSearch(bracket=(1e-2, 1e1), scan=16, rtol=1e-6, max_rounds=80)
"""The defaults of `collapse_edge` (each cell is an ODE solve: a short scan)."""
MAJOR_FIRST_SEARCH = EdgeSearch(bracket=(1e-3, 1e2), scan=64, rtol=1e-10, max_rounds=200)
"""The defaults of `major_first_edge` (each cell is one field evaluation)."""
_LEGACY = ("bracket", "scan", "rtol", "max_rounds")


def _check_common(fn: str, method, rho, search, legacy: dict, default: EdgeSearch) -> tuple[Method, EdgeSearch]:
    """The checks of the arguments that both edges take: the method parsed and
    the search resolved. The keywords `bracket`, `scan`, `rtol`, `max_rounds` of
    0.1 (deprecated through 0.2.x) are refused with one line that names their
    replacement, `search=EdgeSearch(...)`."""
    unknown = sorted(set(legacy) - set(_LEGACY))
    if unknown:
        raise TypeError(f"{fn}() got an unexpected keyword argument {unknown[0]!r}")
    if legacy:
        keys = ", ".join(f"{k}=..." for k in legacy)
        these = "this keyword was" if len(legacy) == 1 else "these keywords were"
        raise TypeError(f"{fn}({keys}): {these} removed in samflow 0.3.0; pass search=EdgeSearch({keys})")
    if search is None:
        search = EdgeSearch()
    elif not isinstance(search, EdgeSearch):
        raise ValueError(f"search must be a samflow.edges.EdgeSearch, got {type(search).__name__}")
    method = Method.parse(method)
    if method not in (Method.L2, Method.LP, Method.LINF):
        raise ValueError(f"method must be 'l2', 'lp' or 'linf' (the regimes are SAM notions), got {method.value!r}")
    if isinstance(rho, bool) or not (isinstance(rho, float | int) and 0 < rho < math.inf):
        raise ValueError(f"rho must be a finite number > 0, got {rho!r}")
    return method, search.over(default)


def _groups(probs: list[_Problem]) -> dict[tuple[int, int, bool], list[int]]:
    """Problem indices grouped by (depth, n, lp with p > 2): one compiled solve each
    (lp's p is traced, but p > 2 lets weights reach 0, so it has no log coordinates)."""
    out: dict[tuple[int, int, bool], list[int]] = {}
    for i, p in enumerate(probs):
        out.setdefault((p.depth, p.X.shape[0], p.p is not None and p.p > 2), []).append(i)
    return out


def _padded(probs: list[_Problem]):
    """X (P, n, D), y (P, n), mask (P, D) of real features, major index (P,)."""
    D = max(p.X.shape[1] for p in probs)
    n = probs[0].X.shape[0]
    X = np.zeros((len(probs), n, D))
    mask = np.zeros((len(probs), D))
    for i, p in enumerate(probs):
        X[i, :, : p.X.shape[1]] = p.X
        mask[i, : p.X.shape[1]] = 1.0
    y = np.stack([p.y for p in probs])
    # The major feature: the largest mean_i y_i x_ij (the last one of a spectrum,
    # checked in `_as_problems`); for several samples with noisy magnitudes it
    # need not be the last, and it is the one every flow favours from a large init.
    major = np.array([int(np.argmax(p.mu_bar)) for p in probs])
    return X, y, mask, major


def _bisect(outcome, P: int, search: EdgeSearch, which: str):
    """Scan then bisect P problems at once on a log axis of a (`search` resolved).

    `outcome(a)` maps a (P,) to int (P,): 1 where the property that holds just
    below the edge holds, 0 where it does not, -1 undecided. `which="last"`: the
    last change 1 -> 0 along the scan; `"first"`: the first change 0 -> 1.
    """
    bracket, scan, rtol, max_rounds = dataclasses.astuple(search)
    grid = np.geomspace(bracket[0], bracket[1], scan)
    vals = np.stack([outcome(np.full(P, g)) for g in grid], axis=1)  # (P, scan)
    n_solves = np.full(P, scan, dtype=np.int64)
    lo = np.full(P, np.nan)
    hi = np.full(P, np.nan)
    changes = np.zeros(P, dtype=np.int64)
    for i in range(P):
        ks = [k for k in range(scan) if vals[i, k] != _UNDECIDED]
        pairs = [(a, b) for a, b in zip(ks[:-1], ks[1:]) if vals[i, a] != vals[i, b]]
        changes[i] = len(pairs)
        if which == "last":
            sel = [(a, b) for a, b in pairs if vals[i, a] == 1]
            sel = sel[-1:] if sel else []
        else:
            sel = [(a, b) for a, b in pairs if vals[i, a] == 0]
            sel = sel[:1]
        if sel:
            lo[i], hi[i] = grid[sel[0][0]], grid[sel[0][1]]
    below_val = 1 if which == "last" else 0  # the outcome at the bracket's lower end
    active = np.isfinite(lo)
    stalled = np.zeros(P, bool)
    for _ in range(max_rounds):
        active &= ~stalled & (hi / np.where(active, lo, 1.0) - 1.0 > 2.0 * rtol)
        if not active.any():
            break
        mid = np.where(active, np.sqrt(np.where(active, lo * hi, 1.0)), grid[0])
        o = outcome(mid)
        n_solves += active
        # A midpoint exactly on the edge can be an equilibrium that decides nothing (linf
        # at alpha = rho: w - rho sign(w) = 0 exactly): look again just beside it.
        retry = active & (o == _UNDECIDED)
        if retry.any():
            mid = np.where(retry, mid * (1.0 + rtol), mid)
            o = np.where(retry, outcome(mid), o)
            n_solves += retry
        stalled |= active & (o == _UNDECIDED)
        go_lo = active & (o == below_val)
        go_hi = active & (o != below_val) & (o != _UNDECIDED)
        lo = np.where(go_lo, mid, lo)
        hi = np.where(go_hi, mid, hi)
    found = np.isfinite(lo)
    converged = found & (hi / np.where(found, lo, 1.0) - 1.0 <= 2.0 * rtol)
    # An unconverged bracket is no edge to rtol: NaN, so that no caller prints a
    # number whose digits past the bracket's width mean nothing (the atlas did).
    edge = np.where(converged, np.sqrt(np.where(converged, lo * hi, 1.0)), np.nan)
    return EdgeResult(edge, lo, hi, n_solves, converged, changes)


def _merge(parts: dict[tuple, tuple[list[int], EdgeResult]], P: int, one: bool) -> EdgeResult:
    out = EdgeResult(np.full(P, np.nan), np.full(P, np.nan), np.full(P, np.nan),
                     np.zeros(P, np.int64), np.zeros(P, bool), np.zeros(P, np.int64))
    for idx, res in parts.values():
        for f_out, f_in in zip(out, res):
            f_out[idx] = f_in
    if one:
        return EdgeResult(*(np.asarray(f[0]) for f in out))
    return out


@eqx.filter_jit
def _solve_cells(W0, rho, X, y, ts, method, clock, settings, p):
    """One batched solve: cells W0 (B, L, D), rho (B,), data X (B, n, D), y (B, n),
    lp's exponent p (B,) (NaN and unused for the other methods)."""
    def fn(W, r, x, yy, pp):
        return solve_cell(W, r, Dataset(X=x, y=yy), ts, method=method, clock=clock, settings=settings,
                          p=pp if method is Method.LP else None)
    return jax.vmap(fn)(W0, rho, X, y, p)


def _p_of(sub: list[_Problem]) -> jnp.ndarray:
    """The exponents of a group's problems, float64 (P,), NaN where there is none."""
    return jnp.asarray([np.nan if q.p is None else q.p for q in sub], dtype=jnp.float64)


@in_float64
def collapse_edge(
    mu,
    depth=2,
    method: str = "l2",
    *,
    rho: float = 0.01,
    search: EdgeSearch | None = None,
    horizon: float | None = None,
    escape: float = 100.0,
    settings: SolverSettings = SolverSettings(),
    coords: str | None = None,
    p=None,
    **legacy,
) -> EdgeResult:
    """The regime 1/2 edge: the largest a = alpha / rho whose flow collapses.

    docs/theory.md s.3.1 (the stable manifold of the saddle (rho / sqrt 2) e_1,
    no closed form) and s.3.2 (depth L); see the module docstring for how the
    outcome of a cell is read. The init is w^(l)(0) = alpha 1 in every layer.
    A log grid of `search.scan` values of a over `search.bracket` is solved
    first; the last change collapsed -> not collapsed along it is then bisected
    (in log a), one batched solve of every unfinished problem per round, until
    the bracket's relative width is 2 `search.rtol`.

    Odd depths (and linf at odd depth) never collapse from a positive init (the
    field is mu * w_hat^(L-1) >= 0, s.3.2): their edge is NaN with `changes` 0.

    **Arguments:**

    - `mu`: the problems. A spectrum `(d,)` (one sample {(mu, +1)}, feature d
      the major one), a `(P, d)` array or a list of spectra of any lengths, a
      `samflow.Dataset` or a list of them (several samples: solved in real
      time at radius `rho`). d >= 2.
    - `depth`: L >= 2, an int or one per problem (broadcast against `mu`).
    - `method`: "l2", "lp" or "linf".
    - `p`: lp-SAM's exponent (method "lp" only, required there; docs/theory.md
      s.2 and s.3.1 (lp-SAM)): a number in (1, inf), or a 1-D list of them, one
      problem each (broadcast against `mu` and `depth`, as they are against each
      other). For p > 2 a weight can reach 0 and slide there; a cell all of
      whose weights slid at 0 is collapsed, as for linf.
    - `rho`: the radius of multi-sample problems (one sample: rho = 1, exact by
      scale invariance).
    - `search`: an `EdgeSearch` (the scanned range of a, its number of points,
      the relative half-width of the final bracket, the most bisection
      rounds); its fields left at None take `COLLAPSE_SEARCH`'s: bracket
      (1e-2, 1e1), scan 16, rtol 1e-6, max_rounds 80. (The keywords `bracket`,
      `scan`, `rtol` and `max_rounds` of 0.1 were removed in 0.3.0: a
      `TypeError` names the `EdgeSearch` to pass instead.)
    - `horizon`: the clock's final time; default 1e30 / min_j mu_j in tau
      (rho = 1; a cell ends at its collapse or escape event, so only an
      undecided cell runs that far), 2 / rho^(L-2) times that in real time
      (s.3: dt/dtau ~ 2 while the weights are small; an escaped cell runs to
      the horizon there), with mu the mean of y_i x_i for several samples;
      for linf 100 / min_j mu_j times search.rtol^-(L-2) (from a = 1 - delta its weights reach 0 at
      tau ~ delta^-(L-2) / mu, s.3.2). A linf cell whose weights all slid at 0
      (`Trajectory.slide_time`) is collapsed.
    - `escape`: a cell is escaped once max |w| >= escape x rho.
    - `settings`: `samflow.SolverSettings` (its `blowup_log10` is replaced by
      the escape level in the tau clock, its `coords` by `coords`).
    - `coords`: "log" or "linear"; default (None) "log" for l2 on one sample
      (docs/theory.md s.4.5: near the saddle the major coordinates decay at a
      rate ~ mu_d^2 / mu_1, a stiff motion in linear coordinates that exhausts
      an explicit solver's steps at large d, and plain linear motion in log
      coordinates), "linear" otherwise (the only choice for linf and several
      samples).

    **Returns:** `EdgeResult` (`edge`, NaN unless `converged`; the bracket `lo`,
    `hi`; `n_solves`, the cells solved; `converged`; `changes`).

    **Raises:** `ValueError` (one line) for a bad spectrum, data set, depth,
    method or bisection parameter; `TypeError` for an unknown keyword.
    """
    method, search = _check_common("collapse_edge", method, rho, search, legacy, COLLAPSE_SEARCH)
    if not (isinstance(escape, float | int) and escape > 1):
        raise ValueError(f"escape must be a number > 1 (in units of rho), got {escape!r}")
    if horizon is not None and not (isinstance(horizon, float | int) and 0 < horizon < math.inf):
        raise ValueError(f"horizon must be a finite number > 0, got {horizon!r}")
    if not isinstance(settings, SolverSettings):
        raise ValueError(f"settings must be a samflow.SolverSettings, got {type(settings).__name__}")
    if coords not in (None, "log", "linear"):
        raise ValueError(f"coords must be 'log', 'linear' or None, got {coords!r}")
    probs, one = _as_problems(mu, depth, _check_ps(method, p))
    parts = {}
    for key, idx in _groups(probs).items():
        sub = [probs[i] for i in idx]
        L, n, sliding = key
        if L % 2 == 1:
            # Nothing to solve: the field is >= 0 (module docstring).
            k = len(idx)
            parts[key] = (idx, EdgeResult(np.full(k, np.nan), np.full(k, np.nan), np.full(k, np.nan),
                                          np.zeros(k, np.int64), np.zeros(k, bool), np.zeros(k, np.int64)))
            continue
        parts[key] = (idx, _collapse_group(sub, L, n, method, rho, search, horizon, escape, settings, coords,
                                           sliding, "collapse"))
    return _merge(parts, len(probs), one)


def _collapse_group(sub, L, n, method, rho, search: EdgeSearch, horizon, escape, settings, coords, sliding,
                    kind: str):
    """Bisect the problems `sub` of one group on the outcome of a solve from
    w = a rho 1: `kind` "collapse" (the cell collapsed) or "major_dies" (the
    major feature's weight reached 0 in some layer)."""
    X, y, mask, major = _padded(sub)
    P = len(sub)
    tau = n == 1
    slides = method.spec.slides or sliding
    r = 1.0 if tau else float(rho)
    mu_min = min(float(np.min(np.abs(p.mu_bar))) for p in sub)
    if horizon is None:
        # Cells stop at their event (collapse, or escape by the blow-up event
        # in tau), so a far horizon costs a decided cell nothing. Near the edge
        # the time to decide grows fast with depth: for mu = j/5 a cell 1e-7
        # from the edge decided at tau ~ 5e3 at depth 4, one 1e-4 away at
        # tau ~ 1e12 at depth 6 (there the step budget, not the horizon, ends
        # the bisection).
        T = 1e30 / mu_min
        T = T if tau else 2.0 * T / r ** (L - 2)
        if slides:
            # linf from a = 1 -+ delta reaches 0 or blows up at tau ~ delta^-(L-2) / mu
            # (s.3.2): follow it down to delta = rtol. Not further: a cell whose
            # weights all slid at 0 goes on to the horizon (no stop event), so a
            # far horizon costs every collapsed cell its whole step budget.
            T = 100.0 / mu_min * min(search.rtol, 0.1) ** -(L - 2)
            T = T if tau else 2.0 * T / r ** (L - 2)
    else:
        T = float(horizon)
    log = tau and method.spec.log_coords and not sliding and coords != "linear"
    if tau:
        settings = dataclasses.replace(settings, blowup_log10=min(300.0, L * math.log10(escape * r)),
                                       coords="log" if log else "linear")
    clock = Clock.TAU if tau else Clock.T
    ts = jnp.asarray([0.0, T])
    Xj, yj, rj, pj = jnp.asarray(X), jnp.asarray(y), jnp.full(P, r), _p_of(sub)
    maskj = jnp.asarray(mask)

    # Padded weights: 0 in linear coordinates; in log coordinates (no weight may
    # be 0) a weight far below every capture radius, which its zero field keeps there.
    pad = _LOG_PAD if log else 0.0

    def outcome(a):
        W0 = jnp.where(maskj[:, None, :] > 0, jnp.asarray(a * r)[:, None, None], pad) * jnp.ones((1, L, 1))
        tr = _solve_cells(W0, rj, Xj, yj, ts, method, clock, settings, pj)
        st = np.asarray(tr.status)
        Wf = np.asarray(tr.W[:, -1])
        fin = np.all(np.isfinite(Wf), axis=(1, 2))
        collapsed = (st == Status.COLLAPSED) | (fin & np.all(Wf == 0, axis=(1, 2)))
        if kind == "major_dies":
            rows = np.arange(P)
            slid_d = np.isfinite(np.asarray(tr.slide_time)[rows, :, major])  # (P, L)
            collapsed |= np.any(slid_d | (fin[:, None] & (Wf[rows, :, major] == 0)), axis=1)
        if slides:
            # Every weight slid at 0 (s.4.3): beta = 0 from then on, even if the
            # solver later ran out of steps following the zero state to the horizon.
            slid = np.isfinite(np.asarray(tr.slide_time)) | (mask[:, None, :] == 0)
            collapsed |= np.all(slid, axis=(1, 2))
        if tau:
            escaped = st == Status.BLEW_UP
        else:
            escaped = fin & (np.max(np.abs(np.where(fin[:, None, None], Wf, 0.0)), axis=(1, 2)) >= escape * r)
        return np.where(collapsed, 1, np.where(escaped, 0, _UNDECIDED))

    return _bisect(outcome, P, search, "last")


@in_float64
def major_death_edge(
    mu,
    depth=2,
    *,
    p,
    search: EdgeSearch | None = None,
    horizon: float | None = None,
    escape: float = 100.0,
    settings: SolverSettings = SolverSettings(),
) -> EdgeResult:
    """lp-SAM with p > 2: the largest a = alpha / rho at which the major feature dies.

    For p > 2 a shrinking weight reaches 0 in finite time and stays there
    (docs/theory.md s.3.1, lp-SAM: its log-rate holds w_j^(q-2), q < 2), and
    from w = alpha 1 the major coordinates shrink first at small a: below this
    edge the weight of the major feature d reaches 0 in some layer (or the
    whole flow collapses); above it the flow escapes with feature d alive.
    Searched as `collapse_edge` searches (one sample, tau clock at rho = 1;
    the same scan, bisection and `EdgeSearch` defaults, `COLLAPSE_SEARCH`),
    with the outcome "the major weight reached 0" (`Trajectory.slide_time` of
    feature d finite, or the weight exactly 0 at the end) in place of
    "collapsed". It lies near `samflow.theory.lp_major_shrink_mark`, the a
    below which rate_d < 0 at the start.

    **Arguments:** `mu` a spectrum `(d,)` or several (as `collapse_edge`, one
    sample each; the major feature the last); `depth` even >= 2 (or one per
    problem); keyword-only: `p`, a number in (2, inf) or a 1-D list of them,
    one per problem; `search`, `horizon`, `escape`, `settings` as in
    `collapse_edge`.

    **Returns:** `EdgeResult` (NaN where no change was seen or not converged).

    **Raises:** `ValueError` (one line) for p <= 2 (no weight reaches 0 there),
    several samples, odd depth, or a bad argument of `collapse_edge`.
    """
    method, search = _check_common("major_death_edge", Method.LP, 1.0, search, {}, COLLAPSE_SEARCH)
    ps = _check_ps(method, p)
    if any(v <= 2 for v in ps):
        raise ValueError(f"p must be > 2 for major_death_edge (for p <= 2 no weight reaches 0), got {p!r}")
    if not (isinstance(escape, float | int) and escape > 1):
        raise ValueError(f"escape must be a number > 1 (in units of rho), got {escape!r}")
    probs, one = _as_problems(mu, depth, ps)
    if any(q.X.shape[0] != 1 for q in probs) or any(q.depth % 2 for q in probs):
        raise ValueError("major_death_edge takes one sample per problem and even depths")
    parts = {}
    for key, idx in _groups(probs).items():
        L, n, sliding = key
        parts[key] = (idx, _collapse_group([probs[i] for i in idx], L, n, method, 1.0, search, horizon, escape,
                                           settings, "linear", sliding, "major_dies"))
    return _merge(parts, len(probs), one)


def _first_rates(a, rho, X, y, mask, p, method, L, loss, tau):
    """d|beta_j|/dclock at clock 0 from w^(l)(0) = a rho 1 (padded features: -inf).

    One sample (`tau`): the rescaled field, free of the loss slope s(z), which
    underflows to 0 at large margins and would hide the leader; it differs
    from the real-time field by the positive factor s(z_hat) only (s.3)."""

    def one(a_, r_, X_, y_, m_, p_):
        W = (a_ * r_) * jnp.ones((L, 1)) * m_[None, :]
        data = Dataset(X=X_, y=y_)
        V, _ = velocity(W, r_, method, data, loss, clock=Clock.TAU if tau else Clock.T,
                        p=p_ if method is Method.LP else None)
        b, db = jax.jvp(beta_of, (W,), (V,))
        return jnp.where(m_ > 0, jnp.sign(b) * db, -jnp.inf)

    return jax.vmap(one)(a, rho, X, y, mask, p)


_first_rates_jit = jax.jit(_first_rates, static_argnames=("method", "L", "loss", "tau"))


@in_float64
def major_first_edge(
    mu,
    depth=2,
    method: str = "l2",
    *,
    rho: float = 0.01,
    search: EdgeSearch | None = None,
    which: str = "last",
    loss: str = "logistic",
    p=None,
    **legacy,
) -> EdgeResult:
    """The regime 2/3 edge: the a = alpha / rho above which feature d leads first.

    The outcome of a cell is its first dominant feature, argmax_j d|beta_j|/dt
    at t = 0 from w^(l)(0) = alpha 1 (module docstring: read from the flow's
    field, exact to rounding, where a saved trajectory cannot resolve it). A
    log grid of `search.scan` values over `search.bracket` is evaluated, then
    the chosen change of the outcome is bisected, all problems at once.

    Depth 2, l2, one sample: (mu_(d-1) + mu_d) / (sqrt 2 ||mu||) (docs/theory.md
    s.3.1, `samflow.theory.l2_alpha_marks`). Depth L: the a where the growth
    rates mu_j (1 - mu_j / (sqrt L a ||mu||))^(L-1) of s.3.2 at w = alpha 1 cross.
    linf with an equal init: a = 1 (w_j - rho has one sign for every j,
    s.3.1); at odd depths the major feature leads first at every a (NaN).
    lp at depth 2, one sample: the a where the rates
    mu_j (1 - mu_j^(q-1) / (a 2^((q-1)/q) ||mu||_q^(q-1))) of s.3.1 (lp-SAM)
    make feature d the fastest, c_q (mu_d^q - mu_(d-1)^q) / (mu_d - mu_(d-1))
    (`samflow.theory.lp_alpha_marks`).

    **Arguments:** as `collapse_edge` (`mu`, `depth`, `method`, `rho`,
    `search`: its fields left at None take `MAJOR_FIRST_SEARCH`'s, bracket
    (1e-3, 1e2), scan 64, rtol 1e-10, max_rounds 200), and

    - `which`: "last" (default), the last change from "first leader is not d"
      to "is d" along a, the regime 2/3 edge; "first", the first change from
      "is d" to "is not d" (the lower end of regime 2 at odd depths, where d
      also leads first at small a).
    - `loss`: "logistic" or "exponential" (matters for several samples only).
    - `p`: lp-SAM's exponent, as in `collapse_edge`.

    **Returns:** `EdgeResult` (as `collapse_edge`'s); `n_solves` counts evaluations of the field.

    **Raises:** `ValueError` (one line) for bad arguments, as `collapse_edge`;
    `TypeError` for an unknown keyword.
    """
    method, search = _check_common("major_first_edge", method, rho, search, legacy, MAJOR_FIRST_SEARCH)
    if which not in ("last", "first"):
        raise ValueError(f"which must be 'last' or 'first', got {which!r}")
    loss_fn = get_loss(loss)
    probs, one = _as_problems(mu, depth, _check_ps(method, p))
    parts = {}
    for key, idx in _groups(probs).items():
        L, n, _ = key
        sub = [probs[i] for i in idx]
        X, y, mask, major = _padded(sub)
        P = len(sub)
        r = jnp.full(P, 1.0 if n == 1 else float(rho))
        Xj, yj, mj, pj = jnp.asarray(X), jnp.asarray(y), jnp.asarray(mask), _p_of(sub)

        def outcome(a, Xj=Xj, yj=yj, mj=mj, r=r, L=L, n=n, major=major, pj=pj):
            rates = np.asarray(_first_rates_jit(jnp.asarray(a), r, Xj, yj, mj, pj, method, L, loss_fn, n == 1))
            real = np.asarray(mj) > 0
            # No information where the field is not finite or all 0 (a loss
            # slope that underflowed at a large margin, several samples).
            ok = np.all(np.isfinite(np.where(real, rates, 0.0)), axis=1) & np.any(real & (rates != 0), axis=1)
            lead = np.argmax(rates, axis=1)
            return np.where(ok, (lead != major).astype(np.int64), _UNDECIDED)

        parts[key] = (idx, _bisect(outcome, P, search, which))
    return _merge(parts, len(probs), one)
