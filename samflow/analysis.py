"""What to measure on a trajectory (docs/theory.md section 5).

Pure NumPy: every function accepts NumPy or JAX arrays and returns NumPy arrays,
vectorised over leading batch axes (a grid of cells). The layout follows
`samflow.Trajectory` with batch axes in front:

- `beta`: `(..., time, d)` linear predictor at the saved times;
- `loss`: `(..., time)` loss at the saved times;
- `status`: `(...)` int, a `samflow.Status` per cell.

A saved time is *valid* when beta there is finite: after a blow-up, a step
budget overrun or a solver failure the later saved values are NaN (see
`samflow.status`), and the measures here use the valid prefix only.

Indices of features are 1-based (feature 1 is the most minor, feature d the major
one), as in plots and tables.

The regime edges, which solve flows rather than measure saved ones, live in
`samflow.edges` and are re-exported here on first use (`collapse_edge`,
`major_first_edge`, `EdgeResult`, `EdgeSearch`), so that importing this module stays NumPy only.
"""

from __future__ import annotations

from collections import deque
from typing import NamedTuple

import numpy as np
from jaxtyping import ArrayLike, Bool, Float, Int

from ._util.checks import check_count
from ._lead import _as_beta, dominant_index, tied
from ._margin import max_margin_beta
from .datasets import Dataset
from .status import FAILED_STATUSES, Status

__all__ = [
    "EdgeResult",
    "EdgeSearch",
    "collapse_edge",
    "major_first_edge",
    "Plateau",
    "dominant_index",
    "band_dominance",
    "tied",
    "switching_times",
    "visited_sequence",
    "regime_label",
    "regime_label_from_dominant",
    "plateau",
    "limit_direction",
    "max_margin_direction",
    "direction_distance",
]

_FAILED = FAILED_STATUSES


def _unit(v: np.ndarray) -> np.ndarray:
    """v / ||v||_2 over the last axis, scaled by max|v| first (no overflow at 1e200).

    Rows that are all zero give 0; rows with a NaN or inf give NaN.
    """
    m = np.max(np.abs(v), axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        s = v / np.where(m > 0, m, 1.0)
        n = np.sqrt(np.sum(s * s, axis=-1, keepdims=True))
        return np.where(m > 0, s / np.where(m > 0, n, 1.0), 0.0)


def _some_time(b: np.ndarray) -> np.ndarray:
    if b.shape[-2] == 0:
        raise ValueError(f"beta has no saved time (shape {b.shape}): give at least one")
    return b


def band_dominance(beta: ArrayLike, band: ArrayLike) -> Int[np.ndarray, "*batch"]:
    """Dominant band of beta: the band with the largest mean |beta_j| (docs/theory.md s.5, s.6).

    The banded-data analogue of `dominant_index`, for data whose coordinates fall
    into bands (`samflow.datasets.banded`); ties go to the lowest band.

    **Arguments:** `beta` `(..., d)` float; `band` `(d,)` int, the 0-based band of
    each coordinate (every band 0..max non-empty).

    **Returns:** int64 `(...)`: the band, 1-based (1 minor ... n_bands major); 0
    where beta is all zero (collapsed); -1 where beta is not finite.

    **Raises:** `ValueError` if the last axis of beta does not match band, or
    band is not 0-based integer bands with every band 0..max non-empty.
    """
    from .theory import _band_index

    b = np.asarray(beta, dtype=np.float64)
    bd = np.asarray(band)
    if b.ndim < 1 or bd.ndim != 1 or b.shape[-1] != bd.size:
        raise ValueError(f"beta (..., d) and band (d,) disagree: shapes {b.shape} and {bd.shape}")
    bd, nb = _band_index(bd, bd.size)
    a = np.abs(b)
    means = np.stack([a[..., bd == k].mean(axis=-1) for k in range(nb)], axis=-1)
    finite = np.all(np.isfinite(b), axis=-1)
    means = np.where(finite[..., None], means, 0.0)
    dom = np.where(means.max(axis=-1) > 0, np.argmax(means, axis=-1) + 1, 0)
    return np.where(finite, dom, -1).astype(np.int64)


def _as_dom_1d(dom: ArrayLike) -> np.ndarray:
    d = np.asarray(dom)
    if d.ndim != 1:
        raise ValueError(f"dom must be 1-D (one trajectory over time), got shape {d.shape}")
    return d.astype(np.int64)


def switching_times(dom: ArrayLike, times: ArrayLike) -> list[tuple[float, int, int]]:
    """Times at which the dominant index of one trajectory changes.

    Entries <= 0 (collapsed or non-finite saved times, see `dominant_index`) are
    dropped first, so a switch is a change between two consecutive remaining
    entries; it is dated at the first saved time that has the new index (the
    switch happened between the previous remaining saved time and this one).
    For the switch times located by the solver, see `switch_times`.

    **Arguments:** `dom` `(time,)` int, from `dominant_index`; `times` `(time,)`.

    **Returns:** list of `(time, from_index, to_index)` in time order.

    **Raises:** `ValueError` if `dom` is not 1-D or `times` has another shape.
    """
    d = _as_dom_1d(dom)
    t = np.asarray(times, dtype=np.float64)
    if t.shape != d.shape:
        raise ValueError(f"times must have the shape of dom {d.shape}, got {t.shape}")
    keep = d > 0
    d, t = d[keep], t[keep]
    change = np.nonzero(d[1:] != d[:-1])[0] + 1
    return [(float(t[k]), int(d[k - 1]), int(d[k])) for k in change]


def visited_sequence(dom: ArrayLike) -> list[int]:
    """Distinct dominant indices in the order visited (e.g. [1, 2, 1, 2, 3]).

    Entries <= 0 are dropped, then consecutive duplicates are merged.

    **Arguments:** `dom` `(time,)` int, from `dominant_index`.

    **Returns:** list of int.

    **Raises:** `ValueError` if `dom` is not 1-D.
    """
    d = _as_dom_1d(dom)
    d = d[d > 0]
    if d.size == 0:
        return []
    keep = np.concatenate([[True], d[1:] != d[:-1]])
    return [int(v) for v in d[keep]]


def regime_label(
    beta: ArrayLike,
    status: ArrayLike,
    d: int | None = None,
    *,
    tie_tol: float = 1e-9,
    min_valid: int = 2,
) -> Int[np.ndarray, "*batch"]:
    """Regime of each cell (docs/theory.md section 5): 1 collapse, 2 sequential, 3 major first.

    The rules, applied in this order to each cell:

    1. status `NONFINITE_INPUT` -> 0 (nothing was integrated).
    2. status `COLLAPSED` -> **1**.
    3. the last finite saved beta is exactly all zero (e.g. every linf-SAM weight
       slid to 0) -> **1**.
    4. Let V be the *informative* saved times: beta finite, not all zero and not
       tied (`tied(beta, tie_tol)`: the symmetric init is tied at time 0). If V has
       fewer than `min_valid` times -> 0.
    5. the dominant index is `d` at every time in V -> **3** (major first).
    6. the dominant index is `d` at the last time of V and a more minor feature
       at some earlier time of V -> **2** (sequential amplification: a minor
       feature leads before the major one takes over for good). This includes
       the detour d -> k -> d of odd depth (docs/theory.md s.3.1): the major
       feature leads first, a minor one overtakes it, the major leads at the end.
    7. otherwise -> 0 (undetermined: a minor feature leads at the last time of V,
       i.e. the horizon ends before the major feature leads (for l2-SAM on one
       sample every cell that does not collapse ends there), or the valid prefix
       of a BLEW_UP / MAX_STEPS / FAILED / SURFACE cell is too short to tell).

    So every sequence of leaders has one label: all d -> 3; ending at d after
    some k < d -> 2; ending at k < d -> 0 (the horizon cut it short).

    A failed cell (BLEW_UP, MAX_STEPS, FAILED, SURFACE) is labelled from its valid prefix
    by rules 3 to 7, so its label is 1, 2 or 3 only when that prefix shows it.
    A CRITICAL cell (held at a critical point of the loss) is labelled by rules
    3 to 7 like a FINISHED one, from its saved beta (1 when held at beta = 0).

    **Arguments:**

    - `beta`: `(..., time, d)` linear predictor at the saved times.
    - `status`: `(...)` int, `samflow.Status` values.
    - `d`: 1-based index of the major feature; default `beta.shape[-1]` (the last
      coordinate, the largest mu_j of docs/theory.md section 1).
    - `tie_tol`: relative tie tolerance of rule 4.
    - `min_valid`: fewest informative times needed for rules 5 and 6 (>= 1).

    **Returns:** int8 array of shape `(...)`, values in {0, 1, 2, 3}.

    **Raises:** `ValueError` if beta has no saved time, the shape of `status`
    is not `beta.shape[:-2]`, `d` is not an integer in 1..beta.shape[-1], or
    `min_valid` is not an integer >= 1.
    """
    b = _some_time(_as_beta(beta))
    st = np.asarray(status)
    batch = b.shape[:-2]
    if st.shape != batch:
        raise ValueError(f"status must have shape {batch} (beta.shape[:-2]), got {st.shape}")
    D = b.shape[-1]
    major = D if d is None else check_count(d, "d (the 1-based major feature)", 1)
    if not (1 <= major <= D):
        raise ValueError(f"d must be a feature index in 1..{D}, got {d!r}")
    min_valid = check_count(min_valid, "min_valid", 1)
    return _regime(dominant_index(b), tied(b, tie_tol), st, major, min_valid)


def regime_label_from_dominant(
    dom: ArrayLike,
    is_tied: ArrayLike,
    status: ArrayLike,
    d: int,
    *,
    min_valid: int = 2,
) -> Int[np.ndarray, "*batch"]:
    """`regime_label` from the dominant index and the ties instead of beta.

    For results saved with `output.save = "summary"` (no beta): with `dom` =
    `dominant_index(beta)` and `is_tied` = `tied(beta, tie_tol)` this equals
    `regime_label(beta, status, d, tie_tol=tie_tol, min_valid=min_valid)`
    exactly; a summary's `dominant` and `tied` are these with tie_tol 1e-9,
    `regime_label`'s default.

    **Arguments:** `dom` `(..., time)` int (1..D, 0 all zero, -1 not finite);
    `is_tied` `(..., time)` bool; `status` `(...)`; `d` the 1-based index of the
    major feature (the number of features for the usual data, which a
    summary does not hold: pass `ds.sizes["coord"]`); `min_valid` as
    `regime_label`.

    **Returns:** int8 array of shape `(...)`, values in {0, 1, 2, 3}.

    **Raises:** `ValueError` for mismatched shapes, or `d` or `min_valid` not an
    integer >= 1.
    """
    dm = np.asarray(dom).astype(np.int64)
    tt = np.asarray(is_tied).astype(bool)
    st = np.asarray(status)
    if dm.ndim < 1 or tt.shape != dm.shape:
        raise ValueError(f"dom and is_tied must have one shape (..., time), got {dm.shape} and {tt.shape}")
    if st.shape != dm.shape[:-1]:
        raise ValueError(f"status must have shape {dm.shape[:-1]} (dom.shape[:-1]), got {st.shape}")
    d = check_count(d, "d (the 1-based major feature)", 1)
    min_valid = check_count(min_valid, "min_valid", 1)
    return _regime(dm, tt, st, d, min_valid)


def _regime(dom: np.ndarray, is_tied: np.ndarray, st: np.ndarray, major: int, min_valid: int) -> np.ndarray:
    """The rules of `regime_label` on the dominant index (..., T) and the ties (..., T)."""
    batch = dom.shape[:-1]
    T = dom.shape[-1]
    finite = dom >= 0
    info = (dom > 0) & ~is_tied
    tt = np.arange(T)

    # Last finite saved time, and whether beta is all zero there.
    has_finite = finite.any(axis=-1)
    last_fin = np.max(np.where(finite, tt, -1), axis=-1)
    dom_last_fin = np.take_along_axis(dom, np.maximum(last_fin, 0)[..., None], axis=-1)[..., 0]
    ends_zero = has_finite & (dom_last_fin == 0)

    n_info = info.sum(axis=-1)
    last = T - 1 - np.argmax(info[..., ::-1], axis=-1)
    dom_last = np.take_along_axis(dom, last[..., None], axis=-1)[..., 0]
    all_major = np.all(np.where(info, dom == major, True), axis=-1)

    enough = n_info >= min_valid
    label = np.zeros(batch, dtype=np.int8)
    label = np.where(enough & (dom_last == major), 2, label)  # a minor led somewhere: not all_major
    label = np.where(enough & all_major, 3, label)
    label = np.where(ends_zero, 1, label)
    label = np.where(st == Status.COLLAPSED, 1, label)
    label = np.where(st == Status.NONFINITE_INPUT, 0, label)
    return label.astype(np.int8)


class Plateau(NamedTuple):
    """A loss plateau per cell (see `plateau`); each field has shape `(...)`, NaN if none."""

    start: Float[np.ndarray, "*batch"]
    end: Float[np.ndarray, "*batch"]
    level: Float[np.ndarray, "*batch"]

    @property
    def duration(self) -> Float[np.ndarray, "*batch"]:
        """end - start (NaN if none)."""
        return self.end - self.start


def _plateau_1d(loss, x, t, rel_band, rel_drop, min_duration):
    n = loss.size
    # Two pointers: for each end k, the smallest start i with
    # max(loss[i..k]) <= (1 + rel_band) min(loss[i..k]); monotone deques hold the
    # window max and min.
    qmax: deque[int] = deque()
    qmin: deque[int] = deque()
    i = 0
    start = np.empty(n, dtype=np.int64)
    wmin = np.empty(n)
    for k in range(n):
        v = loss[k]
        while qmax and loss[qmax[-1]] <= v:
            qmax.pop()
        qmax.append(k)
        while qmin and loss[qmin[-1]] >= v:
            qmin.pop()
        qmin.append(k)
        while loss[qmax[0]] > (1.0 + rel_band) * loss[qmin[0]]:
            i += 1
            if qmax[0] < i:
                qmax.popleft()
            if qmin[0] < i:
                qmin.popleft()
        start[k] = i
        wmin[k] = loss[qmin[0]]
    later_min = np.append(np.minimum.accumulate(loss[::-1])[::-1][1:], np.inf)
    falls = later_min < (1.0 - rel_drop) * wmin
    dur = x - x[start]
    ok = falls & (dur > 0) & (dur >= min_duration)
    if not ok.any():
        return np.nan, np.nan, np.nan
    k = int(np.argmax(np.where(ok, dur, -np.inf)))
    i = int(start[k])
    return float(t[i]), float(t[k]), float(np.median(loss[i : k + 1]))


def plateau(
    loss: ArrayLike,
    times: ArrayLike,
    rel_band: float = 0.1,
    rel_drop: float = 0.5,
    *,
    log_time: bool = False,
    min_duration: float = 0.0,
) -> Plateau:
    """The loss plateau: the longest flat stretch of the loss curve before it falls.

    Definition (docs/theory.md section 5, "plateau detection"). Over the valid saved
    times (finite loss and time; time > 0 when `log_time`), a *stretch* is a run
    of consecutive saved times i..k on which the loss stays in a relative band,

        max(loss[i..k]) <= (1 + rel_band) * min(loss[i..k]),

    and that is *followed by a fall*: some later saved loss is below
    (1 - rel_drop) * min(loss[i..k]). The plateau is the stretch of longest
    duration x[k] - x[i], with x = time (or log(time) when `log_time`), among
    those with duration > 0 and >= `min_duration`; ties go to the earliest. A loss
    that never falls by the factor (1 - rel_drop) after its flat part (regime 1:
    the loss stays at ell(0) or rises) has no plateau. The band makes the test
    insensitive to a loss that rises a little before it falls (docs/theory.md
    section 3) and to slow drift; for a curve that decays at a steady rate the
    reported stretch is short (about ln(1 + rel_band) / rate), so compare
    durations, not existence.

    Use the tau clock with `log_time=False`; for real time t saved on a log grid
    use `log_time=True` (then the early stretch before anything moves counts too,
    since it spans decades of t). Durations in linear time on a log-spaced grid
    are dominated by the slow late decay of the loss and mean little.

    **Arguments:**

    - `loss`: `(..., time)` loss at the saved times (positive).
    - `times`: `(time,)` or `(..., time)` saved times, increasing.
    - `rel_band`: relative width of the flat band (> 0).
    - `rel_drop`: relative fall that must follow, in (0, 1).
    - `log_time`: measure durations in log(time).
    - `min_duration`: shortest duration reported (in the units of x).

    **Returns:** `Plateau(start, end, level)`, each float64 of shape `(...)`:
    the first and last saved time of the stretch and the median loss on it; NaN
    where there is no plateau.

    **Raises:** `ValueError` if `times` does not broadcast against `loss` or
    decreases over the valid saved times, a loss is negative, `rel_band` <= 0 or
    `rel_drop` is not in (0, 1).
    """
    L = np.asarray(loss, dtype=np.float64)
    if L.ndim < 1:
        raise ValueError(f"loss must have shape (..., time), got shape {L.shape}")
    t = np.asarray(times, dtype=np.float64)
    try:
        t = np.broadcast_to(t, L.shape)
    except ValueError:
        raise ValueError(
            f"times of shape {t.shape} does not broadcast against loss of shape {L.shape}"
        ) from None
    if not (rel_band > 0):
        raise ValueError(f"rel_band must be > 0, got {rel_band!r}")
    if not (0 < rel_drop < 1):
        raise ValueError(f"rel_drop must be in (0, 1), got {rel_drop!r}")
    if np.any(L < 0):
        raise ValueError("loss must be >= 0 (a loss value; the flat band is relative to it), got a negative entry")
    batch = L.shape[:-1]
    out = np.full((3,) + batch, np.nan)
    for idx in np.ndindex(*batch):
        li, ti = L[idx], t[idx]
        ok = np.isfinite(li) & np.isfinite(ti)
        if log_time:
            ok &= ti > 0
        li, ti = li[ok], ti[ok]
        if np.any(np.diff(ti) < 0):
            where = f" (cell {idx})" if idx else ""
            raise ValueError(f"times must be increasing over the valid saved times{where}; sort loss and times by time")
        if li.size < 2:
            continue
        x = np.log(ti) if log_time else ti
        out[(slice(None),) + idx] = _plateau_1d(li, x, ti, rel_band, rel_drop, min_duration)
    return Plateau(out[0], out[1], out[2])


def limit_direction(beta: ArrayLike) -> Float[np.ndarray, "*batch d"]:
    """beta / ||beta||_2 at the last valid (finite) saved time (docs/theory.md section 5).

    Computed without overflow for |beta| up to the float64 range. A collapsed cell
    (beta exactly 0 there) gives the zero vector (limit direction 0, as for
    linf-SAM with every alpha_j < rho); use `Trajectory.collapse_direction` for
    the direction just before an l2-SAM collapse. A cell with no finite saved time
    gives NaN.

    **Arguments:** `beta` `(..., time, d)`.

    **Returns:** float64 `(..., d)`.

    **Raises:** `ValueError` if beta has fewer than 2 axes or no saved time.
    """
    b = _some_time(_as_beta(beta))
    T = b.shape[-2]
    finite = np.all(np.isfinite(b), axis=-1)
    last = np.max(np.where(finite, np.arange(T), -1), axis=-1)
    bl = np.take_along_axis(b, np.maximum(last, 0)[..., None, None], axis=-2)[..., 0, :]
    u = _unit(bl)
    return np.where((last >= 0)[..., None], u, np.nan)


def max_margin_direction(
    X: ArrayLike, y: ArrayLike, p: int, *, normalize: bool = True
) -> Float[np.ndarray, " d"]:
    """The l_p max-margin predictor, argmin ||beta||_p s.t. y_i <beta, x_i> >= 1.

    docs/theory.md section 5. p = 1 is the linear program min sum(b+ + b-) over
    beta = b+ - b-, b+/- >= 0 (scipy `linprog`, HiGHS); p = 2 is the quadratic
    program min ||beta||^2 / 2 (SLSQP from the feasible l1 point, then polished
    exactly on its active constraints: beta = A_S^T (A_S A_S^T)^+ 1, kept when
    feasible and no longer). For one sample (mu, +1) the answers are e_d / mu_d
    (p = 1, d = argmax mu) and mu / ||mu||^2 (p = 2). The l1 solution need not be
    unique (ties in the data); the LP returns one vertex.

    **Arguments:**

    - `X`: `(n, d)` inputs. `y`: `(n,)` labels in {-1, +1}. `p`: 1 or 2.
    - `normalize`: return the unit vector beta / ||beta||_2 (default) or beta.

    **Returns:** float64 `(d,)`.

    **Raises:** `ValueError` if the shapes disagree, a value is not finite, a label
    is not +-1, p is not 1 or 2, or the data are not linearly separable (the
    constraints are infeasible).
    """
    Dataset.from_arrays(X, y)  # a data set's checks: shapes, finite values, labels +-1
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if isinstance(p, (bool, np.bool_)) or p not in (1, 2):  # True == 1: a flag passed for p
        raise ValueError(f"p must be 1 or 2, got {p!r}")
    b = max_margin_beta(y[:, None] * X, p)
    return _unit(b) if normalize else b


def direction_distance(beta: ArrayLike, ref: ArrayLike) -> Float[np.ndarray, "*batch"]:
    """|| beta / ||beta|| - ref / ||ref|| ||_2 over the last axis (0 to 2).

    **Arguments:** `beta` `(..., d)` and `ref` `(..., d)`, broadcast together.

    **Returns:** float64 of the broadcast shape without the last axis; NaN where
    either vector is zero or non-finite (no direction).

    **Raises:** `ValueError` if the shapes do not broadcast.
    """
    b = np.asarray(beta, dtype=np.float64)
    r = np.asarray(ref, dtype=np.float64)
    if b.ndim < 1 or r.ndim < 1:
        raise ValueError("beta and ref must have a last axis of features")
    try:
        np.broadcast_shapes(b.shape, r.shape)
    except ValueError:
        raise ValueError(
            f"beta of shape {b.shape} does not broadcast against ref of shape {r.shape}"
        ) from None

    def no_dir(v):
        return ~np.all(np.isfinite(v), axis=-1) | ~np.any(v != 0, axis=-1)

    dist = np.linalg.norm(_unit(b) - _unit(r), axis=-1)
    return np.where(no_dir(b) | no_dir(r), np.nan, dist)


_EDGES = ("EdgeResult", "EdgeSearch", "collapse_edge", "major_first_edge")


def __getattr__(name: str):
    # The edges solve flows (JAX): import them on first use only.
    if name in _EDGES:
        from . import edges

        return getattr(edges, name)
    # The exact switch times solve flows too (samflow.switches).
    if name in ("switch_times", "SwitchTimes"):
        from . import switches

        return getattr(switches, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
