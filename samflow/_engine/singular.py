"""The singular points of the flows, decided at the events that end a run
(docs/theory.md s.4): linf-SAM's slide-or-cross at a weight at 0 and at an
r_j = 0 surface (Filippov), l2-SAM's collapse to 0 (linear extrapolation from
the capture radius) and its arrival at another critical point of the loss.
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp

from ..datasets import Dataset
from ..flows import LOG_ZERO, Method
from ..diagonal_net import beta as beta_of
from ..diagonal_net import grad_loss, loss_value, residual
from .cell_state import CellState
from .._methods import dual_exponent
from .field import (
    SamField, RunArgs, _linf_multi_field, _rsurface_parts, _sliding_parts, _velocity, product_roots, r_unit,
    sliding_pair, surface_groups, vertex_parts,
)


_BIG = 1e300


# linf on multi-sample data: an r_j = 0 surface counts as crossed 1e-12 (in units
# of max|X|) past it, so that the next run starts strictly on the new side
# (diffrax fires an event only on a down-crossing from > 0).
_R_OFFSET = 1e-12


def _both_sides(one_sided, L, d):
    """`one_sided(c, side)` at every weight c (flat index) and side +1, -1: (f_plus,
    f_minus), each (L, d), from ONE vmap over the 2 L d pairs, so that the program
    holds one traced copy of the field where two vmaps held two."""
    n = L * d
    c = jnp.tile(jnp.arange(n), 2)
    side = jnp.repeat(jnp.asarray([1.0, -1.0]), n)
    f = jax.vmap(one_sided)(c, side)
    return f[:n].reshape(L, d), f[n:].reshape(L, d)


def _slide_decision(W, s, rho, data, memory, frozen, candidates, method, clock, loss, rsurf=None, p=None):
    """For weights at exactly 0 (`candidates`), decide slide or leave, from the
    one-sided limits of the field (Filippov): returns (memory, frozen) updated.
    lp-SAM (exponent `p`): its field is continuous, so both limits are the field
    at the point; a weight whose velocity there is 0 is held (at depth 2 with
    equal layers its whole column is 0 and so is eps there, docs/theory.md s.2
    (lp-SAM)), any other leaves to the side its velocity points to."""
    L, d = W.shape

    def one_sided(c, side):
        mem = memory.reshape(-1).at[c].set(side).reshape(L, d)
        dW, _ = _velocity(W, s, rho, data, mem, frozen, True, method, clock, loss, rsurf=rsurf, p=p)
        return dW.reshape(-1)[c]

    f_plus, f_minus = _both_sides(one_sided, L, d)
    out_plus = f_plus > 0
    out_minus = f_minus < 0
    came_from = memory
    # Leaves towards the one side whose field points away from 0; when both do
    # (a repelling surface), it keeps going the way it came, and from rest it stays.
    new_side = jnp.where(
        out_plus & ~out_minus,
        1.0,
        jnp.where(out_minus & ~out_plus, -1.0, jnp.where(out_plus & out_minus, -came_from, 0.0)),
    )
    slides = candidates & (new_side == 0)
    memory = jnp.where(candidates & ~slides, new_side, memory)
    return memory, frozen | slides


def _side_decision(n_plus, n_minus, came_from):
    """Filippov at a switching surface from the one-sided normal rates n+- (n > 0:
    the field moves to the + side): +1 / -1 leave to that side, 0 slide. When both
    point away (repelling) it keeps going the way it came (`came_from`; from rest,
    0: it stays, as `_slide_decision`)."""
    out_plus = n_plus > 0
    out_minus = n_minus < 0
    return jnp.where(
        out_plus & ~out_minus,
        1.0,
        jnp.where(out_minus & ~out_plus, -1.0, jnp.where(out_plus & out_minus, -came_from, 0.0)),
    )


def _rehold(W, rho, data, memory, frozen, rmem, rslide, loss, joint=None, ra=None):
    """Re-decide the weights held at 0 (`frozen`) after the sign of some r_j
    changed (linf, multi-sample): the field at 0 jumps with it. From the new
    one-sided limits (as `_slide_decision`): both into 0, it stays held; one
    side pointing away, it leaves to that side (memory set, no longer frozen);
    both away (repelling from rest, no unique Filippov continuation):
    `ambiguous`. At even depth a whole column at 0 is decided jointly
    (`_column_decision`, with `joint` (d,): the column was held by one joint
    arrival; it is never released: no unique continuation is `ambiguous`).
    Returns (memory, frozen, released, ambiguous): (L, d), (L, d), (L, d), ().
    """
    L, d = W.shape

    def one_sided(c, side):
        mem = memory.reshape(-1).at[c].set(side).reshape(L, d)
        # dW at c does not depend on which weights are frozen (only zeroed there)
        dW = _linf_multi_field(W, rho, data, mem, jnp.zeros_like(frozen), rmem, rslide, loss, ra)
        return dW.reshape(-1)[c]

    f_plus, f_minus = _both_sides(one_sided, L, d)
    out_plus = frozen & (f_plus > 0)
    out_minus = frozen & (f_minus < 0)
    one_way = out_plus ^ out_minus
    both = out_plus & out_minus
    if L == 1:  # a depth-1 hold of a coordinate of its own: its r_j does not move (`_rsurface_event`)
        one_way, both = one_way & ~_separable(data)[None], both & ~_separable(data)[None]
    released = one_way
    memory_new = jnp.where(one_way, jnp.where(out_plus, 1.0, -1.0), memory)
    ambiguous = both
    if L % 2 == 0:  # whole columns at 0: jointly (`_column_decision`)
        whole = jnp.all(frozen, axis=0) & jnp.all(memory != 0, axis=0)
        joint = jnp.zeros((d,), bool) if joint is None else joint
        _, mixed = _column_decision(W, rho, data, memory, whole, joint, rmem, rslide, loss, ra)
        released = jnp.where(whole[None], False, released)
        memory_new = jnp.where(whole[None], memory, memory_new)
        ambiguous = jnp.where(whole[None], mixed[None], ambiguous)
    return memory_new, frozen & ~released, released, jnp.any(ambiguous)


def _column_decision(W, rho, data, memory, whole, joint, rmem, rslide, loss, ra=None):
    """linf on multi-sample data, even depth: decide the columns j that are wholly
    at 0 (`whole` (d,): all L weights at 0, each with a sign memory), jointly
    (docs/theory.md s.4.3, "Whole columns at 0").

    A sign pattern m of a column sets eps_lj; flipping the whole pattern flips
    every eps_lj (L - 1 factors) and keeps beta_hat_j (L factors, even), hence
    r(W_hat): the field satisfies f(-m) = -f(m), and c(m) = F_lj(m) m_l is the same
    for m and -m. The patterns fall into two classes by P = prod_l m_l (the sign of
    beta_hat_j). A class attracts where c(m) < 0 for all l and every pattern of
    it, repels where c(m) > 0 for all. With P0 the class of the memory (the side
    the column came from) and P1 the other: the column is held (Filippov) when P0
    attracts and so does P1, or when P1 repels but the column arrived as a whole
    at once (`joint` (d,): the equal-layer rule, the pattern it came in keeps it).
    Any other case has no unique continuation: P0 attracts but P1 repels after a
    weight-by-weight arrival (it could stay or leave into P1), or P0 repels (it
    could stay or leave; NONUNIQUE_REPEL of the scipy reference), or neither
    class decides (NONUNIQUE_COLUMN): `mixed`, and the cell stops with SURFACE.
    Returns (hold, mixed), each (d,) bool.
    """
    L, d = W.shape
    patterns = jnp.asarray(list(itertools.product((1.0, -1.0), repeat=L)), W.dtype)  # (2^L, L)
    free = jnp.zeros(memory.shape, bool)

    def classes(j):
        def c(m):
            mem = memory.at[:, j].set(m)
            return _linf_multi_field(W, rho, data, mem, free, rmem, rslide, loss, ra)[:, j] * m

        cm = jax.vmap(c)(patterns)  # (2^L, L)
        att, rep = jnp.all(cm < 0, axis=1), jnp.all(cm > 0, axis=1)
        P = jnp.prod(patterns, axis=1)
        P0 = jnp.prod(memory[:, j])
        return (jnp.all(att | (P != P0)), jnp.all(att | (P == P0)), jnp.all(rep | (P == P0)))

    att0, att1, rep1 = jax.vmap(classes)(jnp.arange(d))
    hold = whole & att0 & (att1 | (rep1 & joint))
    return hold, whole & ~hold


def _rsurface_event(W, rho, data, memory, frozen, rmem, rslide, ra, roff, crossed, exited, weights, r_scale, loss):
    """After an r_j = 0 event of linf on multi-sample data (Filippov, as
    `_slide_decision` for a weight; docs/theory.md s.4.3).

    `crossed`: some r_j reached 0 (the one nearest its event, j). Sliding on no
    other surface and no other r_k at 0 with it, the one-sided rates n+- = d r_j/dt
    of f+- decide: both the same way, it crosses (rmem_j flips); both into the
    surface (n+ < 0 < n-), it slides along it (rslide_j). While the cell slides on
    one surface, or where two reach 0 together, the pair is decided by
    `decide_pair` (slide on both, on one, or on neither); a third surface
    (sliding on two, or three at once) is not followed: `surface`.
    `exited`: a sliding multiplier left [0, 1]; that surface is left to the side
    whose field now points away (a -> 1: +, a -> 0: -), and the other one of a
    pair goes on sliding alone (its multiplier is continuous there). Or the
    two-surface system folded (its roots merged): the pair is decided again.
    `weights`: a weight reached 0 in the same event; on a pair, the continuation
    is decided again under the new holds (`decide_pair`).
    `hold` (d,): at depth 1, a coordinate of its own (`_separable`) that slides is
    held instead (its weight frozen, `_rsurface_step`): r_j depends on w_1j alone,
    so the sliding mode is w_1j constant, and such holds are independent of each
    other and of other surfaces. `nonunique`: `decide_pair` found several
    continuations and took the first (its rule). `changed`: the r-sign state
    changed, so the weights held at 0 must be re-decided (`_rehold`).
    Returns (rmem, rslide, ra, surface, nonunique, changed, hold).
    """
    L, d = W.shape
    idx = jnp.arange(d)
    r = r_unit(W, data, loss)
    active = _rsurface_active(rmem, rslide, frozen, data)
    j = jnp.argmin(jnp.where(active, r * rmem + roff, _BIG))
    _, _, n_p, n_m = _rsurface_parts(W, rho, data, memory, frozen, rmem, rslide, loss, j=j)
    side = _side_decision(n_p, n_m, rmem[j])
    on_j = idx == j
    # Other r_k at 0 with it (to 1e-9 on r's scale): surfaces reached together.
    others = active & ~on_j & (jnp.abs(r) < 1e-9)
    s1, s2, two = sliding_pair(rslide)
    sliding = jnp.any(rslide)
    separate = (_separable(data)[j] & (L == 1))  # depth 1, a coordinate of its own: a hold
    three = crossed & (two | (sliding & jnp.any(others)) | (jnp.sum(others) > 1))
    pair = crossed & ~three & (sliding | jnp.any(others)) & ~separate
    if data.X.shape[0] <= 2:
        # One or two samples: the field has no two-surface form (`_sliding_parts`), since two
        # distinct surfaces meet only where g = 0. A meeting read as one (columns proportional
        # to just above PROPORTIONAL_TOL) is not followed: SURFACE, never a half-kept pair.
        three, pair = three | pair, jnp.zeros_like(pair)
    single = crossed & ~three & ~pair
    same, sign, _ = surface_groups(data)  # j's surface is that of its group: all flip together
    starts = single & (side == 0)
    rmem_new = jnp.where(single & same[j] & (side != 0), side * sign[j], rmem)
    # Depth 1, a coordinate of its own (`_separable`): r_j depends on w_1j alone,
    # so sliding on r_j = 0 is holding w_1j where it is (Filippov: d r_j/dt = 0).
    hold = starts & on_j & _separable(data) if L == 1 else jnp.zeros((d,), bool)
    rslide_new = rslide | (starts & on_j & ~hold)
    # an exit: the multiplier nearest the edge of [0, 1] leaves it; on two surfaces the
    # run also ends at a fold (the scaled discriminant below every margin): decided again
    _, a, disc = _sliding_parts(W, rho, data, memory, frozen, rmem, rslide, loss, ra)
    margin = jnp.minimum(a, 1.0 - a)
    fold = exited & two & (disc < jnp.min(margin))
    leaves = exited & ~fold
    i = jnp.argmin(margin)
    k = jnp.where(two & (i == 1), s2, s1)
    rmem_new = jnp.where(leaves & same[k], jnp.where(a[i] > 0.5, 1.0, -1.0) * sign[k], rmem_new)
    rslide_new = jnp.where(leaves & (idx == k), False, rslide_new)
    # a pair: an arrival while sliding on one, two arrivals at once, a fold, or new holds while on two
    u1 = jnp.where(pair, jnp.where(sliding, s1, j), s1)
    u2 = jnp.where(pair, jnp.where(sliding, j, jnp.argmax(others)), s2)
    redecide = pair | fold | (weights & two & ~exited & ~crossed)
    m1, m2, ra_new, several, none = decide_pair(W, rho, data, memory, frozen, rmem_new, loss, u1, u2)
    rmem_new = jnp.where(redecide & same[u1] & (m1 != 0), m1 * sign[u1], rmem_new)
    rmem_new = jnp.where(redecide & same[u2] & (m2 != 0), m2 * sign[u2], rmem_new)
    rslide_new = jnp.where(redecide & (idx == u1), m1 == 0, rslide_new)
    rslide_new = jnp.where(redecide & (idx == u2), m2 == 0, rslide_new)
    ra_new = jnp.where(redecide, ra_new, ra)
    surface = three | (redecide & none)
    nonunique = redecide & several & ~none
    changed = (single & (side != rmem[j])) | exited | redecide
    return rmem_new, rslide_new, ra_new, surface, nonunique, changed, hold


#: The continuations of a pair of surfaces (`decide_pair`), in the order its rule
#: takes them where several are consistent: each surface slides (0) or sits on a side.
PAIR_MODES = ((0, 0), (0, 1), (0, -1), (1, 0), (-1, 0), (1, 1), (1, -1), (-1, 1), (-1, -1))
#: A multiplier within this of [0, 1] is in it (as the scipy reference's `box_tol`).
BOX_TOL = 1e-12


def decide_pair(W, rho, data, memory, frozen, rmem, loss, j1, j2):
    """The continuation of linf-SAM at two r = 0 surfaces (columns j1 != j2 of
    different groups, `surface_groups`), from the four vertex fields
    (`vertex_parts`; docs/theory.md s.4.3, "Two surfaces at once").

    Each of the nine `PAIR_MODES` is a candidate: both slide (a root of
    `product_roots` in [0, 1]^2); one slides (its multiplier, pulled as in
    `_sliding_parts`, in [0, 1]) while the other sits on a side s, where the
    velocity must carry it into that side (s du/dt > 1e-10 max|n|); or both sit
    on sides. Exactly one consistent: it is taken. Several (or two roots in the
    box): the first in `PAIR_MODES` order is taken (the rule: keep the most
    surfaces, the first surface first, + before -), `several`. None: `none` (the
    cell stops with SURFACE). Returns (m1, m2, ra, several, none): the modes of
    j1 and j2 (0 slide, +-1 a side), the multipliers of a slide on both (else
    (0.5, 0.5)), two () bools.
    """
    f, n, u = vertex_parts(W, rho, data, memory, frozen, rmem, loss, j1, j2, True, True)
    tol = 1e-10 * jnp.max(jnp.abs(n))
    k = jnp.max(jnp.abs(n), axis=0)

    def in_box(a):
        return jnp.all((a >= -BOX_TOL) & (a <= 1.0 + BOX_TOL))

    roots, valid, _ = product_roots(n + k[None, :] * u[None, :])
    box = valid & jax.vmap(in_box)(roots)
    dup = box[0] & box[1] & (jnp.max(jnp.abs(roots[0] - roots[1])) < 1e-10)
    n_both = jnp.sum(box) - dup
    a_both = jnp.clip(roots[jnp.argmax(box)], 0.0, 1.0)

    def vertex(v1, v2):
        return 2 * (v1 < 0) + (v2 < 0)

    def one_slides(slide, side):
        """Surface `slide` (0 or 1) slides, the other sits on `side`."""
        other = 1 - slide
        p, m = (vertex(1, side), vertex(-1, side)) if slide == 0 else (vertex(side, 1), vertex(side, -1))
        ks = jnp.maximum(jnp.abs(n[p, slide]), jnp.abs(n[m, slide]))
        den = n[m, slide] - n[p, slide]
        a = jnp.where(den != 0, (n[m, slide] + ks * u[slide]) / jnp.where(den != 0, den, 1.0), jnp.nan)
        ac = jnp.clip(a, 0.0, 1.0)
        rate = ac * n[p, other] + (1.0 - ac) * n[m, other]
        return in_box(a) & (side * rate > tol)

    ok = [n_both >= 1]
    for m1, m2 in PAIR_MODES[1:]:
        if m1 == 0:
            ok.append(one_slides(0, m2))
        elif m2 == 0:
            ok.append(one_slides(1, m1))
        else:
            v = vertex(m1, m2)
            ok.append((m1 * n[v, 0] > tol) & (m2 * n[v, 1] > tol))
    ok = jnp.stack(ok)
    count = jnp.sum(ok[1:]) + n_both
    first = jnp.argmax(ok)
    modes = jnp.asarray(PAIR_MODES, W.dtype)[first]
    ra = jnp.where(first == 0, a_both, 0.5)
    return modes[0], modes[1], ra, count > 1, count == 0


def _critical_ratio(W, rho, data, loss, method=Method.L2, p=None):
    """How close l2-SAM (or lp-SAM, `method` "lp" with exponent `p`) is to a
    critical point of the loss: (R, ok), both ().

    R = ||G(W)|| / ||G(W_hat)||, with G = grad L (norm over all layers) and
    W_hat = W + eps(G) (rho G / ||G|| for l2): `samflow.models.collapse_ratio` for the diagonal
    network (docs/theory.md s.4). Near a critical point W* the l2 field stays of
    order rho while G vanishes linearly, so R ~ ||W - W*|| / rho. `ok` is
    L(W_hat) <= 2 L(W) with L(W) > 1e-280: it rules out a small R from large
    margins (a perturbation that multiplies the loss), including a loss that
    has underflowed. Norms are scaled by max|G| first (no underflow).
    """
    G = grad_loss(W, data, loss)
    W_hat = W + method.spec.perturbation(G, rho, p=p)
    G_hat = grad_loss(W_hat, data, loss)
    m = jnp.maximum(jnp.max(jnp.abs(G)), jnp.max(jnp.abs(G_hat)))
    m = jnp.where(m > 0, m, 1.0)
    g = jnp.sqrt(jnp.sum((G / m) ** 2))
    g_hat = jnp.sqrt(jnp.sum((G_hat / m) ** 2))
    R = jnp.where(g > 0, g / jnp.where(g_hat > 0, g_hat, 1.0), 0.0)
    value = loss_value(W, data, loss)
    ok = (loss_value(W_hat, data, loss) <= 2.0 * value) & (value > 1e-280)
    return R, ok


def _critical_cond(W, rho, data, loss, capture_radius, gate, method=Method.L2, p=None):
    """Event condition of the l2 (lp) critical point, positive until the arrival:
    R - capture_radius where armed (rho > 0, `ok`, ||W|| > gate x rho), else _BIG."""
    R, ok = _critical_ratio(W, rho, data, loss, method, p)
    armed = ok & (rho > 0)
    if gate > 0:
        armed = armed & (jnp.sqrt(jnp.sum(W**2)) > gate * rho)
    return jnp.where(armed, R - capture_radius, _BIG)


def zero_time(R, dR):
    """Clock time for a distance R to reach 0 falling linearly at its rate dR:
    R / -dR, 0 where R does not fall. R and dR may carry one common positive
    factor (it cancels). The one collapse extrapolation of samflow
    (docs/theory.md s.4): near a singular point the field is bounded, so R
    falls at a constant rate and the error is O(capture^2)."""
    return jnp.where(dR < 0, R / jnp.where(dR < 0, -dR, 1.0), 0.0)


# lp with p > 2 (docs/theory.md s.4.3): a column of equal weights reaches 0 like
# w ~ (T - t)^(1/k), k = 1 - (L - 1)^2 (q - 1) (2 - q at depth 2), tangentially, so
# the root of w on the solver's interpolant is off by ~(atol / c)^k. u = |w|^k
# falls to 0 at a finite rate: the `cross` event fires when the time left at that
# rate, |w| / (k |dw|), falls to ARRIVAL_CAPTURE x min(1, t) (clock units: the
# time scale of the flow near 0 is at most the time since the start), and the
# arrival is extrapolated to second order in u (`arrival_time`).
ARRIVAL_CAPTURE = 1e-4


def _arrival_power(p, depth):
    """k = 1 - (L - 1)^2 (q - 1): u = |w|^k falls to 0 at a finite rate where a
    column of equal weights reaches 0 under lp with q < 1 + 1/(L - 1)^2; 0 where
    it does not (p <= 2 at depth 2). The perturbed weight is ~ |w|^((L-1)(q-1))
    and the velocity carries L - 1 of them (docs/theory.md s.4.3)."""
    return jnp.maximum(1.0 - (depth - 1) ** 2 * (dual_exponent(p) - 1.0), 0.0)


def arrival_margin(W, dW, memory, p, capture, t, data, loss):
    """(L, d): w m - min(h k (-dw m), capture / sqrt(L d)), m the sign memory,
    h = ARRIVAL_CAPTURE x min(1, |t|) at clock time `t`, `capture` =
    capture_radius x rho: positive until the weight's time left to 0 at
    u = |w|^k's rate (`_arrival_power`) falls to h and |w| to capture /
    sqrt(L d) (so that a cell's last weights reach the collapse capture
    first); w m where k = 0 (a plain crossing of 0).

    In a column that is not balanced (`balanced_columns`) the weights reach 0
    one at a time (docs/theory.md s.4.3, "lp-SAM with p > 2: unequal layers"):
    where gradient flow alone would carry beta_j through 0 (r_j beta_j < 0) a
    lone weight crosses at a nonzero speed, a plain root of w m; where it would
    grow |beta_j| (r_j beta_j > 0) only the perturbation pulls the weight to 0,
    and it hovers near 0 on a non-Lipschitz field: captured at |w| = capture /
    sqrt(L d) (`_cross_or_slide` stops the cell there with SURFACE)."""
    L, d = W.shape
    k = _arrival_power(p, L)
    h = ARRIVAL_CAPTURE * jnp.minimum(1.0, jnp.abs(t))
    near = jnp.minimum(h * k * (-dW * memory), capture / jnp.sqrt(W.size))
    whole = W * memory - jnp.where(k > 0, near, 0.0)
    lone = W * memory - jnp.where((k > 0) & hovers(W, memory, data, loss)[None, :], capture / jnp.sqrt(W.size), 0.0)
    return jnp.where(balanced_columns(W)[None, :], whole, lone)


def hovers(W, memory, data, loss):
    """(d,) bool: r_j(W) sign(beta_j) > 0, gradient flow grows |beta_j| (lp's
    lone weights near 0 hover there, `arrival_margin`). The sign of beta_j is
    that of the sign memory (the sides the weights came from), so that a weight
    a root-finder put a hair past 0 does not flip it."""
    return residual(W, data, loss) * jnp.prod(memory, axis=0) > 0


def balanced_columns(W):
    """(d,) bool: every layer of column j has the same |w_lj|, bit for bit. Under
    lp with p > 2 such a column reaches 0 as a whole, in finite time, at the
    power `_arrival_power` (from equal layers the field keeps the layers equal
    exactly: the same arithmetic on the same numbers); in any other column the
    weights cross 0 one at a time, transversally."""
    A = jnp.abs(W)
    return jnp.all(A == A[:1], axis=0)


def arrival_time(W, dW, ddW, memory, p):
    """(L, d): the clock time left to w = 0, from u = |w|^k (`_arrival_power`)
    and its first two clock derivatives (from dW, ddW = dW/dclock,
    d^2W/dclock^2): the linear time s0 = |w| / (k (-dw m)) (`zero_time`) less
    (u''/2u') s0^2, so the error is O(ARRIVAL_CAPTURE^3); 0 where k = 0 or the
    weight does not fall."""
    k = _arrival_power(p, W.shape[0])
    R, R1, R2 = W * memory, dW * memory, ddW * memory
    s0 = zero_time(R, k * R1)
    falls = (k > 0) & (s0 > 0)
    R_s, R1_s = jnp.where(falls, R, 1.0), jnp.where(falls, R1, -1.0)
    curv = (R2 + (k - 1.0) * R1_s**2 / R_s) / R1_s  # u'' / u'
    return jnp.where(falls, s0 - 0.5 * curv * s0**2, 0.0)


def arrival_fill(out_W, ts, t_capture, t_arrive, W_capture, p):
    """Saved weights (n_save, L, d) with the weights held at 0 under lp
    replaced between their capture (clock time `t_capture`, value `W_capture`,
    (L, d); NaN: none) and their arrival `t_arrive` (L, d) by the path that
    `arrival_time` assumes, u = |w|^k linear in time: W_capture x ((t_arrive -
    t) / (t_arrive - t_capture))^(1/k)."""
    k = _arrival_power(p, W_capture.shape[0])
    t = ts[:, None, None]
    span = t_arrive - t_capture
    inside = (t > t_capture) & (t < t_arrive) & (span > 0) & (k > 0)
    frac = jnp.clip((t_arrive - t) / jnp.where(span > 0, span, 1.0), 0.0, 1.0)
    return jnp.where(inside, W_capture * frac ** (1.0 / jnp.where(k > 0, k, 1.0)), out_W)


def extrapolate_to_zero(R_fn, theta, v, moving=True):
    """The remaining clock time dt to R_fn = 0 along the velocity `v` (a pytree
    like theta), from R and its rate dR = d R_fn(theta)[v] (`zero_time`;
    0 where not `moving`), and the point theta + dt v. For any model and any
    distance function R_fn(theta) to a singular set, e.g. `_critical_ratio`
    here or `samflow.models.collapse_ratio`."""
    R, dR = jax.jvp(R_fn, (theta,), (v,))
    dt = jnp.where(moving, zero_time(R, dR), 0.0)
    return dt, jax.tree_util.tree_map(lambda x, u: x + dt * u, theta, v)


def _critical_target(W, dW, rho, data, loss, method=Method.L2, p=None):
    """Linear extrapolation to the critical point from the capture
    (`extrapolate_to_zero` with R = `_critical_ratio`). `dW` is dW/dclock;
    returns the remaining clock time dt (>= 0) and the point W + dt dW."""
    return extrapolate_to_zero(lambda w: _critical_ratio(w, rho, data, loss, method, p)[0], W, dW)


def linear_fill(saved, mask, frac, a, b):
    """Saved states (pytrees with a leading (n_save,) axis) replaced where
    `mask` by the straight path a + frac (b - a) (`frac` (n_save,)): the state
    between a capture and the singular point it is extrapolated to."""

    def fill(x, xa, xb):
        shape = (-1,) + (1,) * xa.ndim
        path = xa[None] + frac.reshape(shape) * (xb - xa)[None]
        return jnp.where(mask.reshape(shape), path, x)

    return jax.tree_util.tree_map(fill, saved, a, b)


def _hold_critical(out_W, after, approach, frac, W_detect, W_stop):
    """Saved weights (n_save, L, d) of a cell that reached a critical point: held
    at `W_stop` after the event, linear from the capture (`W_detect`) to it in
    between (`frac` 1 at the capture, 0 at the event), as the extrapolation assumes."""
    out_W = linear_fill(out_W, approach, frac, W_stop, W_detect)
    return jnp.where(after[:, None, None], W_stop[None], out_W)


def extrapolate_collapse(W, dW):
    """Remaining clock time to W = 0 along a straight line from the capture:
    `zero_time` of R = ||W|| at its rate W . dW / ||W||, both times ||W||,
    i.e. ||W||^2 / (-W . dW) (0 if the field does not point inwards). The
    field is bounded near 0, so the error is O(capture^2) (docs/theory.md s.4)."""
    return zero_time(jnp.sum(W**2), jnp.sum(W * dW))


def _beta_direction(field: SamField, Y, W):
    """beta / ||beta|| at state Y (log coordinates: without forming beta, which
    may underflow); 0/0 guarded."""
    if field.log_coords:
        X = jnp.sum(Y, axis=0)
        b = jnp.prod(field.sign, axis=0) * jnp.exp(X - jnp.max(X))
    else:
        b = beta_of(W)
    b_norm = jnp.sqrt(jnp.sum(b**2))
    return b / jnp.where(b_norm > 0, b_norm, 1.0)


def _cross_or_slide(
    field: SamField, c: CellState, args: RunArgs, W_end, Y_end, s_end, crossed, multi,
    dW_end=None, capture=None, t_end=None,
):
    """linf sign event: the weights that reached 0 are set to exactly 0, then
    slide or cross (`_slide_decision`; at even depth on multi-sample data a
    whole column at 0 is decided jointly, `_column_decision`). Under lp the
    weights inside their arrival capture (`arrival_margin`, with `dW_end` =
    dW/dclock at the event time `t_end`, `capture` = capture_radius x rho) are
    the ones set to 0; `col_mixed` is then True where a lone weight of a column
    that is not balanced was captured where it hovers near 0 (a column of
    unequal layers arriving: not followed, status SURFACE). `nonunique`: a
    whole column at 0 whose continuation is not unique (`_column_decision`),
    held at 0 all the same (status NONUNIQUE). Returns
    (Y_next, memory, frozen, col_mixed, nonunique): Y_next is the next run's state,
    the weights, or in log coordinates x = log|W| with a weight at 0 held at
    `LOG_ZERO` (lp with p > 2: a column arriving at 0 as a whole)."""
    method, clock, loss = field.method, field.clock, field.loss
    rho, data = args.rho, args.data
    L = W_end.shape[0]
    active = ~c.frozen & (c.memory != 0)
    dist = (arrival_margin(W_end, dW_end, c.memory, field.p, capture, t_end, data, loss) if method is Method.LP
            else W_end * c.memory)
    at_zero = crossed & active & (dist <= 1e-9 * rho)
    W_zero = jnp.where(at_zero, 0.0, W_end)
    # in log coordinates (lp) a weight at 0 is held at x = LOG_ZERO (exp underflows to 0)
    Y_next = jnp.where(at_zero, LOG_ZERO, Y_end) if field.log_coords else W_zero
    W_next = W_zero
    col_mixed = nonunique = jnp.asarray(False)
    if multi and L % 2 == 0:
        # a column wholly at 0 now (its last weights arriving, the others held) is decided jointly
        whole = jnp.all(at_zero | c.frozen, axis=0) & jnp.any(at_zero, axis=0) & jnp.all(c.memory != 0, axis=0)
        hold, mixed = _column_decision(W_next, rho, data, c.memory, whole, jnp.all(at_zero, axis=0), c.rmem,
                                       c.rslide, loss, c.ra)
        memory, frozen = _slide_decision(
            W_next, s_end, rho, data, c.memory, c.frozen, at_zero & ~whole[None], method, clock, loss,
            rsurf=args.rsurf, p=field.p,
        )
        # not unique (`_column_decision`): held all the same (the rule: stay at 0), and said so
        frozen = frozen | ((hold | mixed)[None] & at_zero)
        nonunique = jnp.any(mixed)
    elif method.spec.slides or "cross" in method.spec.events_at(L):
        memory, frozen = _slide_decision(
            W_next, s_end, rho, data, c.memory, c.frozen, at_zero, method, clock, loss, rsurf=args.rsurf, p=field.p
        )
        if method is Method.LP:
            # A lone weight captured near 0 where it hovers (`arrival_margin`): its
            # column reaches 0 from unequal layers, which samflow does not follow.
            col_mixed = jnp.any(at_zero & ~balanced_columns(W_end)[None, :] & hovers(W_end, c.memory, data, loss)[None, :])
    else:
        memory, frozen = c.memory, c.frozen
    return Y_next, memory, frozen, col_mixed, nonunique


def _separable(data: Dataset):
    """(d,) bool: coordinate j has samples of its own: every sample with
    x_ij != 0 has x_ik = 0 for k != j. Then r_j(W) depends on column j alone
    and the sign of r_j changes the field of column j alone."""
    nz = data.X != 0
    alone = jnp.sum(nz, axis=1) <= 1
    return jnp.all(alone[:, None] | ~nz, axis=0)


def _rsurface_active(rmem, rslide, frozen, data):
    """(d,) bool: the r_j = 0 surfaces whose crossing is an event: a side is
    known and the flow neither slides on it nor holds it (a depth-1 hold,
    `_rsurface_event`: r_j stays where it was held), and j leads its group of
    proportional columns (`surface_groups`: one surface, one event)."""
    held = frozen[0] & _separable(data) if frozen.shape[0] == 1 else False
    return (rmem != 0) & ~rslide & ~held & surface_groups(data)[2]


def _hold_point(W, data, loss, hold):
    """Where a weight held on its r_j = 0 surface at depth 1 (`_rsurface_event`'s
    `hold`) stays: at exactly 0 where r_j(w_1j = 0) is no farther from 0 than
    r_j at the event (the surface is w_1j = 0, e.g. one +1 and one -1 sample),
    else where the event found it (1e-12 max|X| past the surface)."""
    W0 = jnp.where(hold[None], 0.0, W)
    snap = hold & (jnp.abs(residual(W0, data, loss)) <= jnp.abs(residual(W, data, loss)))
    return jnp.where(snap[None], 0.0, W)


def _rsurface_step(field, c, args, W_next, memory, frozen, slide_time, hit, r_scale, t_end):
    """linf on multi-sample data, after a run: the r_j = 0 surface decision
    (`_rsurface_event`, a depth-1 hold included: the weight frozen from `t_end`,
    `_hold_point`) and the re-decision of the weights held at 0 when a sign of r
    changed (`_rehold`; weights with no unique way on stay held: `nonunique`, as
    a pair of surfaces with several continuations). Returns (W_next, memory,
    frozen, slide_time, rmem, rslide, roff, ra, surface, nonunique)."""
    rho, data, loss = args.rho, args.data, field.loss
    weights = hit.get("cross", jnp.asarray(False))
    rmem, rslide, ra, surface, several, changed, hold = _rsurface_event(
        W_next, rho, data, memory, frozen, c.rmem, c.rslide, c.ra, c.roff, hit["rcross"], hit["rexit"], weights,
        r_scale, loss,
    )
    W_next = _hold_point(W_next, data, loss, hold)
    slide_time = jnp.where(hold[None] & ~frozen, t_end, slide_time)
    frozen = frozen | hold[None]
    # a column held by one joint arrival: its weights' hold times are equal
    joint = jnp.all(frozen, axis=0) & jnp.all(slide_time == slide_time[:1], axis=0)
    mem2, frozen2, released, ambiguous = _rehold(W_next, rho, data, memory, frozen, rmem, rslide, loss, joint, ra)
    memory = jnp.where(changed, mem2, memory)
    frozen = jnp.where(changed, frozen2, frozen)
    slide_time = jnp.where(changed & released, jnp.nan, slide_time)
    # weights at 0 with no unique way on stay held (the rule): status NONUNIQUE
    nonunique = (changed & ambiguous) | several
    roff = _R_OFFSET + jnp.maximum(0.0, -r_unit(W_next, data, loss) * rmem)
    return W_next, memory, frozen, slide_time, rmem, rslide, roff, ra, surface, nonunique


def _initial_rsurface(field: SamField, W0, rho, data, memory0, frozen0):
    """linf on multi-sample data: the side of each r_j = 0 surface at the start;
    one that starts exactly on it is decided from the one-sided fields
    (Filippov), as a weight at 0 is; at depth 1 a coordinate of its own that
    slides there is held instead (`hold0`, its weight frozen from time 0).
    Returns (rmem0, rslide0, roff0, hold0), each (d,)."""
    d = W0.shape[1]
    dtype = W0.dtype
    loss = field.loss
    r0 = residual(W0, data, loss)
    rmem0 = jnp.sign(r0)
    rslide0 = jnp.zeros((d,), bool)
    n_p0, n_m0 = jax.vmap(
        lambda j: _rsurface_parts(W0, rho, data, memory0, frozen0, rmem0, rslide0, loss, j=j)[2:]
    )(jnp.arange(d))
    side0 = _side_decision(n_p0, n_m0, jnp.zeros((d,), dtype))
    on0 = (r0 == 0) & ~((n_p0 == 0) & (n_m0 == 0))  # not an r_j that is 0 for every W
    rmem0 = jnp.where(on0 & (side0 != 0), side0, rmem0)
    rslide0 = on0 & (side0 == 0)
    # Proportional columns are one surface (`surface_groups`): each takes the side
    # of its group's first column, and only that one slides.
    same, sign, lead = surface_groups(data)
    first = jnp.argmax(same, axis=1)
    rmem0 = sign[first, jnp.arange(d)] * rmem0[first]
    rslide0 = rslide0 & lead
    # Depth 1, a coordinate of its own: held where it starts (`_rsurface_event`).
    hold0 = rslide0 & _separable(data) if W0.shape[0] == 1 else jnp.zeros((d,), bool)
    return rmem0, rslide0 & ~hold0, jnp.full((d,), _R_OFFSET, dtype), hold0
