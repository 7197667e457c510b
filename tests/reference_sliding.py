"""Independent references for issue 36 ("Sliding everywhere"): NumPy + SciPy only.

Nothing here imports samflow. The flows are those of docs/theory.md s.1-2,
written again, in real time t, with the logistic loss:

    beta = prod_l w_l,  z_i = y_i <beta, x_i>,  s(z) = 1 / (1 + e^z),
    r_j(W) = (1/n) sum_i s(z_i) y_i x_ij,  q_lj = prod_{k != l} w_kj,
    G = grad L = -r * q,  dW/dt = r(W_hat) * q(W_hat),  W_hat = W + eps(G).

    python tests/reference_sliding.py --write   # regenerate tests/data/sliding_reference.json
    python tests/reference_sliding.py           # recompute and compare with the fixture

(a) linf-SAM on several samples: Filippov sliding on r = 0 surfaces
-------------------------------------------------------------------

eps_lj = rho sign(G_lj) = -rho sign(r_j) sig_lj with sig_lj = prod_{k != l} sign(w_kj):
the field is smooth except where a weight or some r_j changes sign.

*Surfaces.* Weight surfaces w_lj = 0, and r surfaces r_j = 0. Columns are grouped
by proportionality: if X[:, j] = kappa_j X[:, c] then r_j = kappa_j r_c for every W,
so {r_j = 0} and {r_c = 0} are ONE surface and sign(r_j) = sign(kappa_j) sign(r_c)
switches together (`column_groups`). A group switches only if the column
y_i x_ic takes both signs (else r_c never vanishes, s > 0). With two samples,
r_c = 0 says s(z_1) / s(z_2) = -y_2 x_2c / (y_1 x_1c), one scalar condition; two
distinct (non-proportional) switching groups would need two different values of
one ratio: two samples never give two distinct surfaces at once. With n samples the
surfaces {r_j = 0, j in J} meet where the slope vector (s_i) > 0 is orthogonal to
the columns (y_i x_ij), j in J: |J| = 2 needs n >= 3 (`THREE`, below).

On the issue's data X = [(0.2, 0.4, 0.6, 0.8, 1.0), (0.1, -0.2, 0.3, -0.4, -0.05)],
y = (1, -1): columns 1 and 3 are proportional (x_3 = 3 x_1) and so are 2 and 4
(x_4 = 2 x_2); y_i x_i2 = (0.4, 0.2) and (0.8, 0.4) have one sign, as has column 5
((1.0, 0.05)), so r_2, r_4, r_5 > 0 always. The only switching surface is
{r_1 = 0} = {r_3 = 0} = {s(z_1) = s(z_2) / 2}: every "two surfaces at once"
there is this one surface (samflow's `_rsurface_event` counts r_3 at 0 beside r_1
as a second surface: status SURFACE).

*Filippov sliding, the rule used.* While the groups S = (g_1..g_k) slide, the velocity
is the convex combination of the 2^k neighbouring fields with PRODUCT-FORM
(multilinear) multipliers,

    F(W; a) = sum_{v in {+,-}^k} prod_i lam_i(v_i) f_v(W),   lam_i(+) = a_i, lam_i(-) = 1 - a_i,

where f_v is the field with sign(r_{g_i}) = v_i, and a in [0, 1]^k solves the k
equations  d r_{g_i}/dt = grad r_{g_i} . F(W; a) = 0  (each keeps its surface).
k = 1: a = n_- / (n_- - n_+), n_+- = grad r . f_+- (samflow's rule, Filippov s.2.4).
k = 2: with c_i(a) = A_i + B_i a_1 + C_i a_2 + D_i a_1 a_2 (bilinear) the system reduces to
one quadratic in a_1 (`product_multipliers`): zero, one or two roots in [0, 1]^2.
Why this rule: it is the limit delta -> 0 of the regularisation that replaces each
lam_i(+) by (1 + tanh(r_{g_i} / delta)) / 2 (the slow manifold of the fast variables
r / delta is exactly c(a) = 0), which `regularized_solve` integrates by brute
force; for k = 1 it is Filippov's (unique) convex combination and the eta -> 0 limit
of discrete linf-SAM's chatter. (It is NOT the limit of tanh(r / delta) put in place of
sign(r) inside eps, "equivalent control" in the field: the field is not affine in
sign(r_j); tests/test_linf_surface.py measured a 2e-4 difference for k = 1.)
For k >= 2 Filippov's set {sum_v lam_v f_v : lam in the simplex, c = 0} has
2^k - 1 - k free parameters (one at k = 2): the differential inclusion has many
velocities, so ANY single continuation is a selection; `filippov_spread` gives the
range of d beta / dt over that set. The reference follows the product rule and
names the points where even it is not unique (statuses below).

*Leaving.* A sliding group leaves when its multiplier leaves [0, 1] (event a_i = 0
or 1; to the - or + side). At k = 2 the product system keeps the other multiplier
continuous (a_1 = 1 turns F into the k = 1 combination of the other surface).

*Arrivals at a surface* (a non-sliding group reaching r = 0, or an exit) are decided
by enumerating every continuation of the surfaces involved U (the sliding ones and
the new one, |U| <= 2): each surface either slides (multiplier in [0, 1]) or sits on
a side +-, on which the velocity must point strictly into that side
(side x grad r . F > 0). Exactly one consistent continuation: it is taken. None:
status NO_CONTINUATION. Several: NONUNIQUE_MODES. Two product roots in [0, 1]^2:
NONUNIQUE_PRODUCT. A fold of the product system (its two roots merge, the
discriminant reaches 0 during a run): NONUNIQUE_FOLD. Three surfaces at once:
K3_UNSUPPORTED (needs >= 4 samples; no cell here).

*Weights at 0 are held as samflow does today* (docs/theory.md s.4.3): a weight that
reaches 0 is decided from its one-sided fields f_+- (sign memory +-1, with the r-mode
of the run, sliding combination included): both into 0: held (its velocity 0, the
other weights keep the field of the side it came from); one away: it leaves that
way; both away: it keeps going. At even depth a whole column at 0 is decided
jointly (flipping a column's signs gives f(-m) = -f(m)): f(m) m < 0 for all its
weights: held; > 0 for all: it leaves along m; mixed: NONUNIQUE_COLUMN (stay and
leave are both Filippov solutions). After every change of an r sign or sliding set
the held weights are re-decided: one side away: released (event "release"); both
away: NONUNIQUE_REPEL.
Holding with the came-from side is a selection too: for a lone weight at 0 (others
in its column nonzero) the Filippov combination of its two sides differs from it in
the velocity of every other weight (through r(W_hat), beta_hat_j jumps with the
held weight's sign); `hold_rule="filippov"` follows that combination instead (a
product factor per held weight; `linf_solve(..., hold_rule="filippov")`), so the
gap can be measured (tests/test_reference_sliding.py).
At even depth with unequal layers, a lone weight at 0 whose column partner also
reaches 0 gives a column at 0 from two different sides: for one sample and equal
layers f(m) m < 0 for every m, held; on several samples r_j(W_hat) can take both
signs over the four quadrants and the column is a saddle: NONUNIQUE_COLUMN.

(b) lp-SAM, p > 2 (q = p / (p - 1) < 2)
--------------------------------------

eps = rho sign(G) |G|^(q-1) / ||G||_q^(q-1) (norm over all L d entries): continuous but
only Hoelder where some G_lj = 0, i.e. where a weight of another layer of column j is 0
or r_j = 0. Consequences, derived here (and checked in tests/test_reference_sliding.py):

- A lone weight reaching 0 (some other weight of its column nonzero): near w_lj = 0,
  dw_lj/dt = r_j(W_hat) prod_{k != l} w_hat_kj -> r_j prod_{k != l} w_kj != 0 (the
  perturbations of the other weights vanish like |w_lj|^(q-1)): a TRANSVERSAL crossing
  with a nonzero speed, unique. Event "cross", no capture, no exponent. But at depth 2
  each weight also pushes itself to 0: du/dt = r_j(W_hat) (v - c sgn(u) |u|^(q-1)), so
  when the partner v is small the weight relaxes to the point where v_hat = 0
  (|u| = (|v| / c)^(1/(q-1))) and, as v decays, the column reaches 0 as a whole in finite
  time with the smaller weight slaved ~ |v|^(1/(q-1)). The reference does not follow
  that (two crossings of one column within 1e-6 (1 + t): status COLUMN_ARRIVAL); the
  fixture's unequal cells end before it.
- A column of equal weights w (|w_lj| = w for all l; equal layers stay equal): with
  c = rho |r_j|^(q-1) / ||G||_q^(q-1), w_hat = w - c sgn w^((L-1)(q-1)) and
  dw/dt = r_j(W_hat) w_hat^(L-1) ~ -C sgn |w|^e,   e = (L-1)^2 (q-1),
  when (L-1)(q-1) < 1 (the perturbation dominates w_hat). So the column reaches 0 in
  finite time iff e < 1 and the sign drives it to 0 (always at L = 2; at odd L,
  dw/dt ~ r_j c^(L-1) |w|^e > 0 for r_j > 0: only from negative equal layers), like
  w ~ (T - t)^(1/k),

      k = 1 - (L - 1)^2 (q - 1)          (NOT 1 - (L - 1)(q - 1) as docs/theory.md s.4.3
                                           and samflow's `_arrival_power` say for L >= 3;
                                           both give 2 - q at L = 2).

  The docs' (L - 1)(q - 1) is the exponent of w_hat, not of the velocity, which takes
  L - 1 factors of w_hat. Example: L = 4, p = 20: k = 10/19 (docs 16/19); L = 3 from
  negative equal layers (dw/dt = r w_hat^2 > 0), p = 8: k = 3/7 (docs 5/7); at L = 3,
  p = 3 or 4 and L = 4, p <= 10, e >= 1: no finite-time arrival at all (algebraic
  decay), where the docs' k > 0 for L = 4, 4 < p <= 10.
  The reference integrates equal-layer cells in y_j = sgn(w_j) |w_j|^k (k per the
  formula above), where the arrival is a plain root with finite speed
  dy/dt -> -k C; the column is then held at 0 (the field there is exactly 0; at
  L = 2 it points into 0 from both sides, checked at each arrival).
- r_j = 0 under lp: the field is continuous there (no sliding), the crossing is
  transversal; it is an event only so that the integration restarts at the
  Hoelder point (kind "rcross").

Cases of the fixture (`cells`): issue_one_surface, exit, two_surfaces,
zero_while_sliding, nonunique (linf); lp3_two_samples, lp4_two_samples, lp_unequal
(lp); lp_column_arrival (lp from layers equal to 1e-6..1e-2: a column arrives at 0
as a whole, its smaller weight hovering near 0, not followed: status COLUMN_ARRIVAL);
long_slide (linf, three samples: a slide on one surface while the loss falls
by orders of magnitude, saves inside it; an integrator that keeps only d r/dt = 0
drifts off the surface there, as r's scale falls with the loss).

Accuracy: DOP853, rtol 1e-12 (atol 1e-14 x the scale), events root-found by scipy's
brentq on the dense output (xtol 4 eps). Checked by re-solving every cell at rtol
1e-13 (`build(rtol=1e-13)`, tests/test_reference_sliding.py): the same statuses and
event lists, beta within 1e-10 of each cell's max|beta| at every save, event times
within 1.3e-10 (|t| <= 60), 5.5e-10 for one shallow r_j = 0 crossing of lp at
depth 3 (t = 38.6, 1.4e-11 relative); the test asks 1e-9 and 1e-10 max(1, t).
Indices in events are 0-based: ("hold", [l, j]) for weight w_lj, ("slide", [j...])
for the columns of an r group.
"""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

import numpy as np
import scipy.integrate
from scipy.special import expit

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the other scipy reference, also when imported from elsewhere
from switch_reference import prod_excl  # noqa: E402  (q_lj = prod_{k != l} w_kj, by products)

FIXTURE = Path(__file__).resolve().parent / "data" / "sliding_reference.json"

ISSUE_X = np.array([[0.2, 0.4, 0.6, 0.8, 1.0], [0.1, -0.2, 0.3, -0.4, -0.05]])
ISSUE_Y = np.array([1.0, -1.0])


# ------------------------------------------------------------------ the model


def slope(z):
    """s(z) = -ell'(z) = sigmoid(-z), logistic."""
    return expit(-z)


def dslope(z):
    """ds/dz = -sigmoid(-z) sigmoid(z)."""
    return -expit(-z) * expit(z)


def residual(W, X, y):
    """r(W) = (1/n) sum_i s(z_i) y_i x_i, (d,)."""
    z = y * (X @ np.prod(W, axis=0))
    return X.T @ (slope(z) * y) / X.shape[0]


def rdot(W, F, X, y):
    """d r / dt along the velocity F (L, d): (d,)."""
    z = y * (X @ np.prod(W, axis=0))
    db = np.sum(prod_excl(W) * F, axis=0)
    dz = y * (X @ db)
    return X.T @ (dslope(z) * y * dz) / X.shape[0]


def column_groups(X, y, tol=1e-12):
    """Proportional columns share one r surface. Returns (groups, kappa, switching):
    groups a list of column lists (first = representative c), kappa (d,) with
    X[:, j] = kappa_j X[:, c], switching (len(groups),) bool: y_i x_ic takes both signs."""
    d = X.shape[1]
    groups, kappa = [], np.zeros(d)
    for j in range(d):
        for g in groups:
            c = g[0]
            xc, xj = X[:, c], X[:, j]
            k = (xc @ xj) / (xc @ xc)
            if np.max(np.abs(xj - k * xc)) <= tol * max(np.max(np.abs(xj)), 1e-300):
                g.append(j)
                kappa[j] = k
                break
        else:
            groups.append([j])
            kappa[j] = 1.0
    yx = y[:, None] * X
    switching = np.array([bool(np.any(yx[:, g[0]] > 0) and np.any(yx[:, g[0]] < 0)) for g in groups])
    return groups, kappa, switching


# ------------------------------------------------------------------ linf fields


class Linf:
    """linf-SAM on data (X, y), depth L, radius rho, with Filippov sliding on r groups."""

    def __init__(self, X, y, L, rho, hold_rule="memory"):
        self.X = np.asarray(X, float)
        self.y = np.asarray(y, float)
        self.L, self.rho = int(L), float(rho)
        self.d = self.X.shape[1]
        self.groups, self.kappa, self.switching = column_groups(self.X, self.y)
        self.col_group = np.zeros(self.d, int)
        for gi, g in enumerate(self.groups):
            self.col_group[g] = gi
        self.rscale = np.array([np.linalg.norm(self.X[:, g[0]]) for g in self.groups])
        self.hold_rule = hold_rule

    # r of a group, normalised: phi_g = r_c / ||x_c||
    def phi(self, W):
        r = residual(W, self.X, self.y)
        return np.array([r[g[0]] for g in self.groups]) / self.rscale

    def phidot(self, W, F):
        rd = rdot(W, F, self.X, self.y)
        return np.array([rd[g[0]] for g in self.groups]) / self.rscale

    def col_signs(self, gsign):
        """sign(r_j) per column from the group signs (G,)."""
        return np.sign(self.kappa) * gsign[self.col_group]

    def vertex_field(self, W, gsign, mem, frozen):
        """The smooth field with sign(r_g) = gsign, sign(w) = mem; frozen weights 0."""
        s = self.col_signs(gsign)
        Wh = W - self.rho * s[None, :] * prod_excl(mem)
        f = residual(Wh, self.X, self.y)[None, :] * prod_excl(Wh)
        return np.where(frozen, 0.0, f)

    def weight_vertex_field(self, W, gsign, mem, frozen):
        """`vertex_field`, with held weights (hold_rule "filippov") combined over
        their two sides: product multipliers b, one per held lone weight, that keep
        its velocity 0 (`_held_multipliers`)."""
        if self.hold_rule == "memory":
            return self.vertex_field(W, gsign, mem, frozen)
        held = [tuple(ix) for ix in np.argwhere(frozen)]
        lone = [h for h in held if not np.all(frozen[:, h[1]])]
        if not lone:
            return self.vertex_field(W, gsign, mem, frozen)
        fields = {}
        for v in itertools.product((1.0, -1.0), repeat=len(lone)):
            m = mem.copy()
            for (l, j), vi in zip(lone, v):
                m[l, j] = vi
            fields[v] = self.vertex_field(W, gsign, m, np.zeros_like(frozen))
        b = _held_multipliers(fields, lone)
        F = np.zeros_like(W)
        for v, f in fields.items():
            F += np.prod([bi if vi > 0 else 1 - bi for bi, vi in zip(b, v)]) * f
        return np.where(frozen, 0.0, F)

    def mean_slope(self, W):
        """m(W) = (1/n) sum_i s(z_i): the scale of r, which falls with the loss."""
        return np.mean(slope(self.y * (self.X @ np.prod(W, axis=0))))

    def mean_slope_dot(self, W, F):
        """d m / dt along the velocity F (L, d)."""
        z = self.y * (self.X @ np.prod(W, axis=0))
        dz = self.y * (self.X @ np.sum(prod_excl(W) * F, axis=0))
        return np.mean(dslope(z) * dz)

    def vertices(self, W, S, gsign, mem, frozen):
        """{v: (f_v, n_v)} for the sliding groups S: f_v the field with sign(r_S) = v,
        n_v (k,) the rate it gives phi_S, pulled towards the surfaces:

            n_v = d phi_S/dt (f_v) - phi_S m'(f_v) / m + kappa phi_S,

        m the mean slope and kappa = max_v |d(phi_S / m)/dt (f_v)| m per group. The
        multipliers solving sum_v prod lam n_v = 0 then give d(phi_S / m)/dt =
        -kappa phi_S / m: on the surfaces (phi_S = 0) this is Filippov's rule; a
        solution that has left them by the integration's error comes back at the rate
        the vertex fields cross them. With d phi_S/dt = 0 alone, phi_S stays at that
        error while m falls with the loss: on the long_slide cells phi_S / m grew
        from 1e-12 to 1e-2, and the exit time moved with rtol (0.164 at 1e-10,
        0.201 at 1e-12, 0.218 at 1e-13)."""
        S = list(S)
        m = self.mean_slope(W)
        phi = self.phi(W)[S]
        out, rel = {}, {}
        for v in itertools.product((1.0, -1.0), repeat=len(S)):
            gs = gsign.copy()
            gs[S] = v
            f = self.weight_vertex_field(W, gs, mem, frozen)
            rel[v] = self.phidot(W, f)[S] - phi * self.mean_slope_dot(W, f) / m
            out[v] = f
        kappa = np.max(np.abs(np.array(list(rel.values()))), axis=0) / m
        return {v: (f, rel[v] + kappa * phi) for v, f in out.items()}

    def sliding_field(self, W, S, gsign, mem, frozen, a_ref=None, box=True):
        """(F, a, roots): the product-form Filippov field on the groups S (the root
        nearest `a_ref`; `box` False: continued outside [0, 1]^k, for the events)."""
        if not S:
            return self.weight_vertex_field(W, gsign, mem, frozen), np.zeros(0), [np.zeros(0)]
        vx = self.vertices(W, S, gsign, mem, frozen)
        roots = product_multipliers({v: n for v, (f, n) in vx.items()}, len(S), box=box)
        if not roots:
            return None, None, roots
        if a_ref is None or len(roots) == 1:
            a = roots[0]
        else:
            a = min(roots, key=lambda r: np.max(np.abs(r - a_ref)))
        F = combine({v: f for v, (f, n) in vx.items()}, a)
        return F, a, roots


def combine(fields, a):
    """sum_v prod_i lam_i(v_i) f_v."""
    F = 0.0
    for v, f in fields.items():
        F = F + np.prod([ai if vi > 0 else 1 - ai for ai, vi in zip(a, v)]) * f
    return F


def _held_multipliers(fields, lone):
    """Product multipliers b (one per lone held weight) with every held velocity 0."""
    n = {v: np.array([f[l, j] for (l, j) in lone]) for v, f in fields.items()}
    roots = product_multipliers(n, len(lone))
    if not roots:
        raise _Stop("NONUNIQUE_HOLD")  # no Filippov combination holds them all
    return roots[0]


def _bilinear(n):
    """k = 2: the bilinear system c(a) = A + B a_1 + C a_2 + D a_1 a_2 (each (2,)) from
    the normal rates n (v -> (2,)), and the quadratic al a_1^2 + be a_1 + ga = 0 that
    eliminating a_2 leaves: (A, B, C, D, al, be, ga)."""
    A = n[(-1.0, -1.0)]
    B = n[(1.0, -1.0)] - A
    C = n[(-1.0, 1.0)] - A
    D = n[(1.0, 1.0)] - n[(1.0, -1.0)] - n[(-1.0, 1.0)] + A
    al = B[1] * D[0] - D[1] * B[0]
    be = A[1] * D[0] + B[1] * C[0] - C[1] * B[0] - D[1] * A[0]
    ga = A[1] * C[0] - C[1] * A[0]
    return A, B, C, D, al, be, ga


def product_multipliers(n, k, box_tol=1e-12, box=True):
    """The roots a in [0, 1]^k of sum_v prod_i lam_i(v_i) n_v = 0 (k equations),
    n a dict v -> (k,) normal rates. k = 1: linear; k = 2: bilinear, reduced to one
    quadratic in a_1. Returns a list of arrays (possibly empty, or two roots);
    `box` False: every real root (the run's field continued past an exit)."""
    if k == 1:
        npl, nmi = n[(1.0,)][0], n[(-1.0,)][0]
        den = nmi - npl
        if den == 0:
            return []
        a = nmi / den
        if not box:
            return [np.array([a])]
        return [np.array([min(max(a, 0.0), 1.0)])] if -box_tol <= a <= 1 + box_tol else []
    if k == 2:
        A, B, C, D, al, be, ga = _bilinear(n)
        scale = max(abs(al), abs(be), abs(ga), 1e-300)
        if abs(al) <= 1e-14 * scale:
            cands = [-ga / be] if be != 0 else []
        else:
            disc = be * be - 4 * al * ga
            if disc < 0:
                cands = []
            else:
                sq = np.sqrt(disc)
                q_ = -0.5 * (be + np.copysign(sq, be))
                cands = [q_ / al, ga / q_] if q_ != 0 else [0.0]
        out = []
        for a1 in cands:
            den0 = C[0] + D[0] * a1
            den1 = C[1] + D[1] * a1
            den, num = (den0, A[0] + B[0] * a1) if abs(den0) >= abs(den1) else (den1, A[1] + B[1] * a1)
            if den == 0:
                continue
            a2 = -num / den
            a = np.array([a1, a2])
            # polish by Newton on the bilinear system
            for _ in range(3):
                c = A + B * a[0] + C * a[1] + D * a[0] * a[1]
                J = np.array([[B[0] + D[0] * a[1], C[0] + D[0] * a[0]], [B[1] + D[1] * a[1], C[1] + D[1] * a[0]]])
                try:
                    a = a - np.linalg.solve(J, c)
                except np.linalg.LinAlgError:
                    break
            if not box or (np.all(a >= -box_tol) and np.all(a <= 1 + box_tol)):
                a = np.clip(a, 0.0, 1.0) if box else a
                if not any(np.max(np.abs(a - o)) < 1e-10 for o in out):
                    out.append(a)
        return out
    raise _Stop("K3_UNSUPPORTED")


def product_discriminant(n):
    """k = 2: the discriminant of the quadratic in a_1 (scaled); 0 where two roots merge."""
    _, _, _, _, al, be, ga = _bilinear(n)
    return (be * be - 4 * al * ga) / max(be * be, abs(4 * al * ga), 1e-300)


class _Stop(Exception):
    def __init__(self, status):
        super().__init__(status)
        self.status = status


# ------------------------------------------------------------------ linf: the event loop


def _patterns(L):
    """Sign patterns of a column, one per pair {m, -m} when L is even (f(-m) = -f(m))."""
    pats = [np.array(v) for v in itertools.product((1.0, -1.0), repeat=L)]
    return [m for m in pats if m[0] > 0] if L % 2 == 0 else pats


class LinfRun:
    """One cell of linf-SAM with event-driven sliding (see the module docstring)."""

    def __init__(self, prob: Linf, W0, t_end, saves, rtol=1e-12, max_runs=400):
        self.p = prob
        self.W = np.array(W0, float)
        self.t_end, self.saves = float(t_end), np.asarray(saves, float)
        self.rtol, self.max_runs = rtol, max_runs
        L, d = self.W.shape
        self.scale = max(np.max(np.abs(self.W)), prob.rho)
        self.mem = np.sign(self.W)
        self.frozen = np.zeros((L, d), bool)
        phi = prob.phi(self.W)
        self.gsign = np.where(phi != 0, np.sign(phi), 1.0)
        self.S: tuple = ()
        self.a = np.zeros(0)
        self.events: list = []
        self.out = np.full((len(self.saves), d), np.nan)
        self.status = "FINISHED"
        self.max_k = 0
        self.joint = set()  # columns that reached 0 as a whole at one event
        self.runs = []  # (t, W, S, a, gsign, mem, frozen) at the start of every run

    # the field of the current mode, per unit t
    def field(self, W, mem=None, frozen=None, box=False):
        mem = self.mem if mem is None else mem
        frozen = self.frozen if frozen is None else frozen
        F, a, roots = self.p.sliding_field(W, self.S, self.gsign, mem, frozen, a_ref=self.a, box=box)
        if F is None:  # the product system has no real root here (past a fold)
            raise _Stop("NONUNIQUE_FOLD")
        return F, a

    def _rate_tol(self, W):
        f = self.p.vertex_field(W, self.gsign, self.mem, self.frozen)
        return 1e-10 * max(np.max(np.abs(self.p.phidot(W, f))), 1e-300)

    # ------------------------------------------------------------ decisions

    def decide_surfaces(self, W, U):
        """Enumerate the continuations of the surfaces U (group indices): each slides
        or takes a side; exactly one consistent -> (S, gsign, a), else _Stop."""
        U = sorted(U)
        if len(U) > 2:
            raise _Stop("K3_UNSUPPORTED")
        tol = self._rate_tol(W)
        found = []
        for assign in itertools.product(("slide", 1.0, -1.0), repeat=len(U)):
            gs = self.gsign.copy()
            T = []
            for g, a_ in zip(U, assign):
                if a_ == "slide":
                    T.append(g)
                else:
                    gs[g] = a_
            S = tuple(sorted(set(self.S) - set(U)) + T)
            S = tuple(sorted(S))
            if S:
                vx = self.p.vertices(W, S, gs, self.mem, self.frozen)
                roots = product_multipliers({v: n for v, (f, n) in vx.items()}, len(S))
                if len(roots) > 1:
                    found.append(("multi", S, gs, roots))
                    continue
                cand = [(r, combine({v: f for v, (f, n) in vx.items()}, r)) for r in roots]
            else:
                cand = [(np.zeros(0), self.p.weight_vertex_field(W, gs, self.mem, self.frozen))]
            for r, F in cand:
                rates = self.p.phidot(W, F)
                ok = all(gs[g] * rates[g] > tol for g, a_ in zip(U, assign) if a_ != "slide")
                if ok:
                    found.append(("one", S, gs, r))
        if not found:
            raise _Stop("NO_CONTINUATION")
        if len(found) > 1:
            raise _Stop("NONUNIQUE_MODES")
        kind, S, gs, r = found[0]
        if kind == "multi":
            raise _Stop("NONUNIQUE_PRODUCT")
        return S, gs, r

    def one_sided(self, W, l, j, side, frozen=None):
        mem = self.mem.copy()
        mem[l, j] = side
        fr = self.frozen.copy() if frozen is None else frozen.copy()
        fr[l, j] = False
        F, _ = self.field(W, mem=mem, frozen=fr, box=False)  # multipliers continued
        return F

    def column_classes(self, W, j, frozen):
        """A whole column j at 0: c(m) = F_lj(m) m_l for every sign pattern m (equal
        over l, see the docstring); returns {+1, -1} -> (attract, repel) for the
        patterns of that product prod_l m_l."""
        fr = frozen.copy()
        fr[:, j] = False
        out = {}
        for m in itertools.product((1.0, -1.0), repeat=self.p.L):
            m = np.array(m)
            mem = self.mem.copy()
            mem[:, j] = m
            F, _ = self.field(W, mem=mem, frozen=fr, box=False)
            c = F[:, j] * m
            P = float(np.prod(m))
            at, rp = out.get(P, (True, True))
            out[P] = (at and bool(np.all(c < 0)), rp and bool(np.all(c > 0)))
        return out

    def column_decision(self, W, j, frozen, joint, arriving):
        """Whole column j at 0, came from the pattern m0 = mem[:, j]. Returns 'hold',
        'hold_sym' (held by the equal-layer rule although the other class repels),
        'cross' (odd depth: on to -m0; every leaving pattern gives the same beta),
        'leave' or raises the status (see the module docstring)."""
        m0 = self.mem[:, j]
        P0 = float(np.prod(m0))
        cl = self.column_classes(W, j, frozen)
        att0, rep0 = cl[P0]
        att1, rep1 = cl[-P0]
        if self.p.L % 2 == 1:
            if rep1 and (att0 or not arriving):
                return "cross" if arriving else "leave_other"
            if att0 and att1:
                return "hold"
            raise _Stop("NONUNIQUE_COLUMN")
        if att0 and att1:
            return "hold"
        if att0 and rep1:
            if joint:
                return "hold_sym"
            raise _Stop("NONUNIQUE_COLUMN")
        if rep0 and not arriving:
            raise _Stop("NONUNIQUE_REPEL")
        raise _Stop("NONUNIQUE_COLUMN")

    def decide_weights(self, W, t, cand):
        """Weights `cand` (L, d) bool just at 0 (set to 0 in W): slide (held), cross or turn."""
        L, d = W.shape
        for j in range(d):
            if not cand[:, j].any():
                continue
            if np.all(cand[:, j] | self.frozen[:, j]):  # the whole column at 0
                joint = bool(np.all(cand[:, j]))
                verdict = self.column_decision(W, j, self.frozen, joint, arriving=True)
                if verdict == "cross":
                    self.mem[:, j] = -self.mem[:, j]
                    self.events.append((t, "column_cross", [j]))
                    continue
                if joint:
                    self.joint.add(j)
                for l in np.nonzero(cand[:, j])[0]:
                    self.frozen[l, j] = True
                    self.events.append((t, verdict, [int(l), j]))
                continue
            for l in np.nonzero(cand[:, j])[0]:
                fp = self.one_sided(W, l, j, 1.0)[l, j]
                fm = self.one_sided(W, l, j, -1.0)[l, j]
                out_p, out_m = fp > 0, fm < 0
                if out_p and not out_m:
                    side = 1.0
                elif out_m and not out_p:
                    side = -1.0
                elif out_p and out_m:
                    side = -self.mem[l, j]
                else:
                    side = 0.0
                if side == 0.0:
                    self.frozen[l, j] = True
                    self.events.append((t, "hold", [int(l), j]))
                else:
                    kind = "cross" if side != self.mem[l, j] else "turn"
                    self.mem[l, j] = side
                    self.events.append((t, kind, [int(l), j]))

    def rehold(self, W, t):
        """After the r-mode changed: re-decide the held weights."""
        L, d = W.shape
        for j in range(d):
            if not self.frozen[:, j].any():
                continue
            if np.all(self.frozen[:, j]):
                self.column_decision(W, j, self.frozen, j in self.joint, arriving=False)
                continue
            for l in np.nonzero(self.frozen[:, j])[0]:
                fp = self.one_sided(W, l, j, 1.0)[l, j]
                fm = self.one_sided(W, l, j, -1.0)[l, j]
                out_p, out_m = fp > 0, fm < 0
                if out_p and out_m:
                    raise _Stop("NONUNIQUE_REPEL")
                if out_p or out_m:
                    self.frozen[l, j] = False
                    self.mem[l, j] = 1.0 if out_p else -1.0
                    self.events.append((t, "release", [int(l), j]))

    # ------------------------------------------------------------ the loop

    def events_fns(self):
        p = self.p
        fns, tags = [], []
        L, d = self.W.shape
        for l in range(L):
            for j in range(d):
                if not self.frozen[l, j] and self.mem[l, j] != 0:
                    fns.append(lambda t, y, l=l, j=j: y[l * d + j] * self.mem[l, j] / self.scale)
                    tags.append(("w", (l, j)))
        for g in range(len(p.groups)):
            if p.switching[g] and g not in self.S:
                fns.append(lambda t, y, g=g: p.phi(y.reshape(L, d))[g] * self.gsign[g] + self.off[g])
                tags.append(("r", g))
        for i, g in enumerate(self.S):
            fns.append(lambda t, y, i=i: self.field(y.reshape(L, d))[1][i])
            tags.append(("exit-", g))
            fns.append(lambda t, y, i=i: 1.0 - self.field(y.reshape(L, d))[1][i])
            tags.append(("exit+", g))
        if len(self.S) == 2:
            def disc(t, y):
                vx = p.vertices(y.reshape(L, d), self.S, self.gsign, self.mem, self.frozen)
                return product_discriminant({v: n for v, (f, n) in vx.items()})
            fns.append(disc)
            tags.append(("fold", None))
        for f in fns:
            f.terminal = True
            f.direction = -1
        return fns, tags

    def run(self):
        p = self.p
        L, d = self.W.shape
        t = 0.0
        W = self.W
        self.off = np.zeros(len(p.groups))
        try:
            # the start: an r group exactly at 0, weights exactly at 0
            on = [g for g in range(len(p.groups)) if p.switching[g] and p.phi(W)[g] == 0]
            if on:
                self.S, self.gsign, self.a = self.decide_surfaces(W, on)
            zero = (W == 0) & (self.mem == 0)
            if zero.any():
                raise _Stop("ZERO_INIT_UNSUPPORTED")
            for _ in range(self.max_runs):
                if self.S:
                    F, a, roots = p.sliding_field(W, self.S, self.gsign, self.mem, self.frozen, a_ref=self.a)
                    if F is None:
                        raise _Stop("NO_CONTINUATION")
                    self.a = a
                    self.max_k = max(self.max_k, len(self.S))
                self.runs.append((t, W.copy(), self.S, self.a.copy(), self.gsign.copy(), self.mem.copy(),
                                  self.frozen.copy()))
                phi0 = p.phi(W)
                self.off = np.maximum(0.0, -phi0 * self.gsign) + 0.0
                fns, tags = self.events_fns()

                def rhs(tt, y):
                    F, _ = self.field(y.reshape(L, d))
                    return F.ravel()

                te = self.saves[(self.saves > t) & (self.saves <= self.t_end)]
                sol = scipy.integrate.solve_ivp(
                    rhs, (t, self.t_end), W.ravel(), method="DOP853", rtol=self.rtol,
                    atol=1e-14 * self.scale, events=fns, t_eval=te if len(te) else [t], dense_output=False)
                if sol.status == -1:
                    raise _Stop("FAILED")
                for tt, yy in zip(sol.t, np.asarray(sol.y).reshape(L * d, -1).T):
                    if not len(te):
                        break
                    k = np.searchsorted(self.saves, tt)
                    self.out[k] = np.prod(yy.reshape(L, d), axis=0)
                if sol.status == 0:
                    if np.any(self.saves == 0.0):
                        self.out[self.saves == 0.0] = np.prod(self.W, axis=0)
                    return self.result()
                # which event(s)
                hit = [i for i, te_ in enumerate(sol.t_events) if len(te_)]
                t = float(sol.t_events[hit[0]][-1])
                W = sol.y_events[hit[0]][-1].reshape(L, d).copy()
                for k_ in np.nonzero(self.saves == t)[0]:
                    self.out[k_] = np.prod(W, axis=0)
                self.handle(t, W, [tags[i] for i in hit])
            raise _Stop("MAX_RUNS")
        except _Stop as e:
            self.status = e.status
            self.events.append((t, "stop", e.status))
            return self.result()

    def handle(self, t, W, tags):
        p = self.p
        L, d = W.shape
        # weights at 0 (the one found, and any other within 1e-12 of the scale)
        cand = (~self.frozen) & (self.mem != 0) & (np.abs(W) <= 1e-12 * self.scale)
        for kind, ix in tags:
            if kind == "w":
                cand[ix] = True
        changed_r = False
        if cand.any():
            W[cand] = 0.0
            self.decide_weights(W, t, cand)
            if self.S:  # the sliding set under the new holds
                self.S, self.gsign, self.a = self.decide_surfaces(W, list(self.S))
        kinds = [k for k, _ in tags]
        if "fold" in kinds:
            raise _Stop("NONUNIQUE_FOLD")
        exits = [(k, g) for k, g in tags if k in ("exit-", "exit+")]
        if exits:
            for k, g in exits:
                S = list(self.S)
                S.remove(g)
                self.S = tuple(S)
                self.gsign[g] = 1.0 if k == "exit+" else -1.0
                self.events.append((t, "exit", list(p.groups[g])))
            if self.S:
                self.S, self.gsign, self.a = self.decide_surfaces(W, list(self.S))
            changed_r = True
        arr = [g for k, g in tags if k == "r"]
        phi = p.phi(W)
        arr += [g for g in range(len(p.groups)) if p.switching[g] and g not in self.S and g not in arr
                and abs(phi[g]) <= 1e-13 and arr]
        if arr:
            before = (self.S, self.gsign.copy())
            U = sorted(set(self.S) | set(arr))
            self.S, self.gsign, self.a = self.decide_surfaces(W, U)
            for g in arr:
                if g in self.S:
                    self.events.append((t, "slide", list(p.groups[g])))
                elif self.gsign[g] != before[1][g]:
                    self.events.append((t, "rcross", list(p.groups[g])))
                else:
                    self.events.append((t, "rturn", list(p.groups[g])))
            for g in before[0]:
                if g not in self.S:
                    self.events.append((t, "exit", list(p.groups[g])))
            changed_r = True
        if changed_r:
            self.rehold(W, t)
            if self.S:
                self.S, self.gsign, self.a = self.decide_surfaces(W, list(self.S))

    def result(self):
        return {"beta": self.out, "events": self.events, "status": self.status, "max_k": self.max_k,
                "runs": self.runs}


def linf_solve(X, y, L, rho, W0, t_end, saves, rtol=1e-12, hold_rule="memory"):
    """linf-SAM cell: {'beta' (n_save, d), 'events' [(t, kind, index)], 'status', 'max_k'}."""
    return LinfRun(Linf(X, y, L, rho, hold_rule), W0, t_end, saves, rtol).run()


def regularized_solve(X, y, L, rho, W0, t_end, saves, delta, rtol=1e-10):
    """Brute force for the sliding rule: every switching group's sign replaced by the
    smooth multiplier lam_g = (1 + tanh(phi_g / delta)) / 2 in the product form
    F = sum_v prod_g lam_g(v_g) f_v (weights keep the signs of W0: for cells whose
    weights do not reach 0). Stiff (rates ~ 1/delta): Radau. As delta -> 0 it tends
    to the product-form Filippov flow (its slow manifold is c(a) = 0). Returns beta
    at `saves` (n_save, d)."""
    prob = Linf(X, y, L, rho)
    W0 = np.asarray(W0, float)
    Lw, d = W0.shape
    mem = np.sign(W0)
    frozen = np.zeros_like(W0, bool)
    sw = [g for g in range(len(prob.groups)) if prob.switching[g]]
    gs0 = np.sign(prob.phi(W0))

    def rhs(t, Y):
        W = Y.reshape(Lw, d)
        lam = 0.5 * (1 + np.tanh(prob.phi(W)[sw] / delta))
        F = 0.0
        for v in itertools.product((1.0, -1.0), repeat=len(sw)):
            gs = gs0.copy()
            gs[sw] = v
            wgt = np.prod([l_ if vi > 0 else 1 - l_ for l_, vi in zip(lam, v)])
            F = F + wgt * prob.vertex_field(W, gs, mem, frozen)
        return F.ravel()

    sol = scipy.integrate.solve_ivp(rhs, (0.0, t_end), W0.ravel(), method="Radau", rtol=rtol,
                                    atol=1e-12 * max(np.max(np.abs(W0)), rho), t_eval=saves)
    assert sol.status == 0, sol.message
    return np.array([np.prod(yy.reshape(Lw, d), axis=0) for yy in sol.y.T])


def filippov_spread(prob, W, S, gsign, mem, frozen, e):
    """Over Filippov's whole set at an intersection of the groups S (lam in the simplex
    over the 2^k vertices, every grad r_S . F = 0), the range [min, max] of e . dbeta/dt
    (e (d,)): a nonzero width means the set of velocities is not a point."""
    from scipy.optimize import linprog

    vx = prob.vertices(W, S, gsign, mem, frozen)
    keys = list(vx)
    Q = prod_excl(W)
    c = np.array([e @ np.sum(Q * vx[v][0], axis=0) for v in keys])
    A_eq = np.vstack([np.array([vx[v][1] for v in keys]).T, np.ones(len(keys))])
    b_eq = np.r_[np.zeros(len(S)), 1.0]
    lo = linprog(c, A_eq=A_eq, b_eq=b_eq, bounds=[(0, 1)] * len(keys))
    hi = linprog(-c, A_eq=A_eq, b_eq=b_eq, bounds=[(0, 1)] * len(keys))
    return lo.fun, -hi.fun


# ------------------------------------------------------------------ lp-SAM, p > 2


def lp_eps(G, rho, p):
    """rho sign(G) |G|^(q-1) / ||G||_q^(q-1), norm over all entries (scaled by max|G|)."""
    q = p / (p - 1.0)
    m = np.max(np.abs(G))
    if m == 0:
        return np.zeros_like(G)
    g = G / m
    return rho * np.sign(g) * np.abs(g) ** (q - 1) / np.sum(np.abs(g) ** q) ** ((q - 1) / q)


def lp_field(W, X, y, rho, p):
    """dW/dt of lp-SAM, (L, d)."""
    G = -residual(W, X, y)[None, :] * prod_excl(W)
    Wh = W + lp_eps(G, rho, p)
    return residual(Wh, X, y)[None, :] * prod_excl(Wh)


def lp_row_field(w, L, X, y, rho, p):
    """Equal layers: the field of the row w (d,) standing for L equal layers (the
    norm over L equal rows is L^(1/q) times the row's)."""
    q = p / (p - 1.0)
    W = np.repeat(w[None, :], L, axis=0)
    G = -residual(W, X, y) * w ** (L - 1)
    Wh = w + lp_eps(G, rho, p) / L ** ((q - 1) / q)
    return residual(np.repeat(Wh[None, :], L, axis=0), X, y) * Wh ** (L - 1)


def arrival_power(p, L):
    """k = 1 - (L - 1)^2 (q - 1): a column of equal weights reaches 0 like (T - t)^(1/k)
    (see the docstring); <= 0: no finite-time arrival."""
    q = p / (p - 1.0)
    return 1.0 - (L - 1) ** 2 * (q - 1.0)


def lp_solve(X, y, L, rho, p, W0, t_end, saves, rtol=1e-12, max_runs=200):
    """lp-SAM cell. Equal layers (every row of W0 equal): the row in y = sgn|w|^k
    (k = `arrival_power`, when > 0), arrivals at 0 held; else W with transversal
    crossings of 0 as events. Events at r_j = 0 crossings (Hoelder points) either way.
    Returns {'beta', 'events', 'status'}."""
    X, y = np.asarray(X, float), np.asarray(y, float)
    W0 = np.array(W0, float)
    L_, d = W0.shape
    assert L_ == L
    saves = np.asarray(saves, float)
    out = np.full((len(saves), d), np.nan)
    events = []
    equal = bool(np.all(W0 == W0[0]))
    k = arrival_power(p, L) if equal else 0.0
    use_y = equal and k > 0
    scale = max(np.max(np.abs(W0)), rho)
    held = np.zeros(d, bool)
    groups, kappa, switching = column_groups(X, y)

    kk = [k]  # the power of the run: k, or 1 for the last column (its arrival is the collapse)

    if equal:
        def to_w(Y):
            return np.sign(Y) * np.abs(Y) ** (1.0 / kk[0]) if use_y else Y

        def rhs(t, Y):
            w = to_w(Y)
            f = lp_row_field(w, L, X, y, rho, p)
            if use_y:
                nz = w != 0
                f = np.where(nz, kk[0] * np.abs(np.where(nz, w, 1.0)) ** (kk[0] - 1) * f, 0.0)
            return np.where(held, 0.0, f)

        wrow = W0[0].copy()

        def Wof(Y):
            return np.repeat(to_w(Y)[None, :], L, axis=0)
    else:
        def rhs(t, Y):
            return lp_field(Y.reshape(L, d), X, y, rho, p).ravel()

        state = W0.ravel().copy()

        def Wof(Y):
            return Y.reshape(L, d)

    last_cross = {}
    r_side = {}  # the side of r_c = 0 a residual crossed to in the run just ended
    t = 0.0
    for _ in range(max_runs):
        if equal:
            kk[0] = k if np.sum(wrow != 0) >= 2 else 1.0
            state = np.sign(wrow) * np.abs(wrow) ** kk[0] if use_y else wrow.copy()
        W = Wof(state)
        sgn = np.sign(state)
        phi0 = residual(W, X, y)
        rs = np.sign(phi0)
        # A run that starts at an r crossing starts where the root finder put it, within
        # its tolerance on either side of r_c = 0: the side is the one r crossed to (its
        # sign at the root is the last bits of the machine's arithmetic; read from them,
        # the same crossing could fire again at once, run after run).
        for c, side in r_side.items():
            rs[c] = side
        r_side = {}
        fns, tags = [], []
        for i in range(state.size):
            if sgn[i] != 0 and not (equal and held[i]):
                fns.append(lambda tt, Y, i=i: Y[i] * sgn[i])
                tags.append(("w", i))
        for gi, g in enumerate(groups):
            if switching[gi] and rs[g[0]] != 0:
                c = g[0]
                fns.append(lambda tt, Y, c=c: residual(Wof(Y), X, y)[c] * rs[c] / np.linalg.norm(X[:, c]))
                tags.append(("r", gi))
        for f in fns:
            f.terminal, f.direction = True, -1
        te = saves[(saves > t) & (saves <= t_end)]
        sol = scipy.integrate.solve_ivp(rhs, (t, t_end), state, method="DOP853", rtol=rtol,
                                        atol=1e-14 * (scale ** kk[0] if use_y else scale), events=fns,
                                        t_eval=te if len(te) else [t])
        if sol.status == -1:
            return {"beta": out, "events": events + [(t, "stop", "FAILED")], "status": "FAILED"}
        if len(te):
            for tt, yy in zip(sol.t, np.asarray(sol.y).T):
                out[np.searchsorted(saves, tt)] = np.prod(Wof(yy), axis=0)
        if sol.status == 0:
            if np.any(saves == 0.0):
                out[saves == 0.0] = np.prod(W0, axis=0)
            return {"beta": out, "events": events, "status": "FINISHED"}
        hit = [i for i, e in enumerate(sol.t_events) if len(e)]
        t = float(sol.t_events[hit[0]][-1])
        state = sol.y_events[hit[0]][-1].copy()
        for ks in np.nonzero(saves == t)[0]:
            out[ks] = np.prod(Wof(state), axis=0)
        for i in hit:
            kind, ix = tags[i]
            if kind == "w":
                state[ix] = 0.0
                if equal and np.sum(state != 0) == 0:
                    # the last column: W = 0, where eps is undefined (the collapse)
                    out[saves > t] = 0.0
                    return {"beta": out, "events": events + [(t, "collapse", [ix])], "status": "COLLAPSED"}
                if equal:
                    # a column of equal weights at 0: the field there is 0; held when
                    # it points into 0 from both sides
                    wp = np.where(np.arange(d) == ix, 1e-9 * scale, Wof(state)[0])
                    wm = np.where(np.arange(d) == ix, -1e-9 * scale, Wof(state)[0])
                    fp = lp_row_field(wp, L, X, y, rho, p)[ix]
                    fm = lp_row_field(wm, L, X, y, rho, p)[ix]
                    if fp < 0 < fm:
                        held[ix] = True
                        events.append((t, "arrive", [ix]))
                    else:
                        return {"beta": out, "events": events + [(t, "stop", "NONUNIQUE_LP_ZERO")],
                                "status": "NONUNIQUE_LP_ZERO"}
                else:
                    # a lone weight: transversal, it crosses with its nonzero speed
                    l, j = divmod(ix, d)
                    if j in last_cross and t - last_cross[j] < 1e-6 * (1 + t):
                        # the other weight of the column crossed just before: both are near
                        # 0, the column arrives as a whole (not followed here)
                        return {"beta": out, "events": events + [(t, "stop", "COLUMN_ARRIVAL")],
                                "status": "COLUMN_ARRIVAL"}
                    last_cross[j] = t
                    events.append((t, "cross", [int(l), int(j)]))
            else:
                r_side[groups[ix][0]] = -rs[groups[ix][0]]
                events.append((t, "rcross", list(groups[ix])))
        if equal:
            wrow = to_w(state)
    return {"beta": out, "events": events + [(t, "stop", "MAX_RUNS")], "status": "MAX_RUNS"}


# ------------------------------------------------------------------ the cells of the fixture

THREE_Y = [1.0, -1.0, 1.0]
SAVES = [0.5, 1.0, 2.0, 3.0, 5.0, 8.0, 12.0, 16.0, 20.0, 25.0, 30.0, 40.0, 50.0, 60.0]


def _cell(case, kind, X, y, L, rho, W0, t_end, p=None, saves=SAVES):
    W0 = np.asarray(W0, float)
    return {"case": case, "method": kind, "X": np.asarray(X, float).tolist(), "y": list(map(float, y)),
            "L": int(L), "rho": float(rho), "p": p, "W0": W0.tolist(), "horizon": float(t_end),
            "saves": [s_ for s_ in saves if s_ <= t_end]}


def cells():
    """The fixture's cells, by case (see the module docstring for what each shows)."""
    out = []
    IX, IY = ISSUE_X.tolist(), ISSUE_Y.tolist()
    # the issue's data, depth 3, rho = 1: "two surfaces" r_1 = r_3 = 0 are one surface;
    # each cell slides on it, exits, and column 3 crosses 0 as a whole
    for a in (0.01, 0.1, 0.2, 0.3, 0.4, 0.52):
        out.append(_cell("issue_one_surface", "linf", IX, IY, 3, 1.0, np.full((3, 5), a), 40.0))
    # exits from a surface (the multiplier leaves [0, 1]), three samples, depth 2
    for X, W0, rho in [
        ([[0.19, -0.85, -0.93], [-0.65, -0.26, -0.66], [-0.3, 0.83, -0.97]], [[2.0846291190080346, -1.161232798138844, -1.6701330698316446], [1.8384427821744496, -1.8384427821744496, -1.8384427821744496]], 1.0),
        ([[0.89, -0.18, -0.3], [0.99, 0.03, -0.16], [0.4, -0.5, 0.92]], [[1.6927785497601628, 1.6927785497601628, -1.6927785497601628]] * 2, 1.0),
        ([[-0.25, -0.7, 0.11], [-0.9, 0.83, -0.29], [-0.43, -0.1, -0.79]], [[0.6700810115811903] * 3] * 2, 0.3),
        ([[-0.17, -0.86, -0.81], [-0.98, -0.36, -0.68], [0.9, 0.26, -0.8]], [[-1.5342767202387693, -1.5816692711751523, -0.8165632560055637], [-1.730546970333182, -1.730546970333182, -1.730546970333182]], 1.0),
        ([[-0.5, -0.66, -0.24], [-0.9, 0.65, 0.14], [0.02, -0.07, 0.11]], [[1.0281766447291827, 3.3255775742387157, 2.7741153302658876], [2.484935589410647, 2.484935589410647, 2.484935589410647]], 1.0),
        ([[-0.42, 0.11, -0.45], [-0.51, -0.04, 0.87], [0.82, 0.78, 0.86]], [[0.3432072156754362, -0.586669890696212, 0.9188917870302118], [0.6481308881161788, -0.6481308881161788, 0.6481308881161788]], 0.3),
    ]:
        out.append(_cell("exit", "linf", X, THREE_Y, 2, rho, W0, 40.0))
    # genuine intersections of two distinct surfaces (three samples)
    for X, L, rho, w0 in [
        ([[-0.28, 0.35, -0.74], [-0.9, 0.55, -0.56], [-0.19, -0.02, 0.89]], 2, 1.0, [1.6914880428900565] * 3),
        ([[0.86, -0.41, 0.27], [0.89, 0.4, -0.89], [0.24, 0.71, -0.89]], 2, 0.3, [0.38679003973174947] * 3),
        ([[-0.48, -0.35, 0.1], [-0.82, -0.19, 0.36], [0.67, 0.03, 0.9]], 2, 1.0, [2.390734725688458] * 3),
        ([[0.12, 0.08, -0.72], [-0.95, 0.95, -0.94], [-0.9, -0.08, 0.87]], 3, 1.0, [2.9774814223196113] * 3),
        ([[-0.99, 0.29, -0.39], [-0.51, 0.21, -0.65], [0.47, 0.55, -0.72]], 3, 0.3,
         [0.8349980177850077, 0.8349980177850077, -0.8349980177850077]),
        ([[0.21, -0.43, -0.7], [-0.75, -0.69, 0.83], [-0.26, 0.13, -0.71]], 3, 1.0, [2.9768061174111855] * 3),
    ]:
        out.append(_cell("two_surfaces", "linf", X, THREE_Y, L, rho, np.tile(w0, (L, 1)), 60.0))
    # a weight (column) reaching 0 while sliding on a surface
    for X, W0, rho in [
        ([[0.81, 0.32, 0.81], [0.04, 0.25, 0.65], [-0.17, -0.19, 0.4]], [[0.4319515144604159, -0.4319515144604159, 0.4319515144604159]] * 2, 0.3),
        ([[0.88, -0.32, -0.13], [-0.37, 0.49, -0.92], [-0.87, -0.19, -0.51]], [[-0.6432052373738465, -0.6432052373738465, 0.6432052373738465]] * 2, 0.3),
        ([[-0.42, 0.6, -0.17], [0.11, 0.35, 0.04], [-0.48, 0.96, -0.81]], [[1.462958285589606, -1.462958285589606, 1.462958285589606]] * 2, 1.0),
        ([[0.75, 0.11, 0.3], [0.11, -0.28, -0.4], [0.01, -0.4, 0.12]], [[1.3031240834979807, -1.3031240834979807, 1.3031240834979807]] * 2, 1.0),
        ([[-0.47, -0.47, 0.55], [-0.65, 0.65, 0.8], [0.14, -0.44, -0.13]], [[-2.5939068686645945, 1.0001094682453369, 1.0875395471699834], [-1.8028038847514043, 1.8028038847514043, 1.8028038847514043]], 1.0),
        ([[0.48, 0.72, 0.44], [0.12, -0.43, -0.64], [0.63, 0.24, -0.53]], [[1.4681232594260378, 0.6012150762115646, 0.668000348325321], [1.319658801840268, 1.319658801840268, 1.319658801840268]], 1.0),
    ]:
        out.append(_cell("zero_while_sliding", "linf", X, THREE_Y, 2, rho, W0, 40.0))
    # genuinely non-unique continuations (named statuses, NaN after)
    for X, W0, rho in [
        ([[-0.15, -0.98, 0.3], [-0.19, -0.77, 0.26], [-0.11, -0.39, -0.46]], [[0.7123035741485416, 1.0780991360744758, 1.0309287030306027], [0.7696374637031975, 0.7696374637031975, 0.7696374637031975]], 1.0),
        ([[-0.11, 0.79, -0.59], [-0.86, 0.12, -0.31], [-0.04, -0.85, -0.65]], [[0.8710182903876443, -0.6645770510434593, -1.0669634740946095], [1.3646620377756407, -1.3646620377756407, -1.3646620377756407]], 1.0),
        ([[0.05, -0.86, 0.32], [-0.95, -0.61, 0.48], [-0.2, 0.44, 0.08]], [[-0.4688561979347682] * 3] * 2, 0.3),
    ]:
        out.append(_cell("nonunique", "linf", X, THREE_Y, 2, rho, W0, 50.0))
    # lp, p = 3 and 4, the issue's two samples, equal layers
    for p in (3.0, 4.0):
        for L, a in ((2, 0.2), (2, 0.5), (2, 1.0), (3, 0.2), (3, 0.5), (3, 1.0)):
            out.append(_cell(f"lp{int(p)}_two_samples", "lp", IX, IY, L, 1.0, np.full((L, 5), a), 40.0, p))
    # lp on unequal layers: a weight crosses 0 in one layer
    for p in (3.0, 4.0):
        for a in (0.9, 1.0, 1.2):
            W0 = np.full((2, 5), a)
            W0[0] *= np.array([1.0, 0.5, 2.0, 1.5, 0.7])
            out.append(_cell("lp_unequal", "lp", IX, IY, 2, 1.0, W0, 12.0, p))
    # lp from nearly equal layers: the column that reaches 0 from equal layers now
    # arrives from unequal ones, its smaller weight hovering near 0 (COLUMN_ARRIVAL)
    for p, delta in ((3.0, 1e-6), (3.0, 1e-3), (3.0, 1e-2), (4.0, 1e-3)):
        W0 = np.full((2, 5), 0.5)
        W0[0] *= 1 + delta * np.arange(1.0, 6.0)
        out.append(_cell("lp_column_arrival", "lp", IX, IY, 2, 1.0, W0, 40.0, p))
    # long slides while the loss falls by orders of magnitude (three samples, columns 1
    # and 2 proportional: one surface); saves inside the slide
    X = [[0.2, -0.4, 0.5, 0.3], [0.1, -0.2, -0.3, 0.6], [0.3, -0.6, 0.2, -0.1]]
    for L, a in ((3, 5.0), (3, 3.0), (2, 4.0), (2, 8.0)):
        out.append(_cell("long_slide", "linf", X, THREE_Y, L, 1.0, np.full((L, 4), a), 5.0,
                         saves=[0.1, 0.12, 0.15, 0.2, 0.3, 0.5, 1.0, 2.0, 5.0]))
    return out


def solve_cell(c, rtol=1e-12):
    X, y = np.array(c["X"]), np.array(c["y"])
    if c["method"] == "linf":
        r = linf_solve(X, y, c["L"], c["rho"], np.array(c["W0"]), c["horizon"], c["saves"], rtol=rtol)
        r.pop("runs")
    else:
        r = lp_solve(X, y, c["L"], c["rho"], c["p"], np.array(c["W0"]), c["horizon"], c["saves"], rtol=rtol)
    ev = [[float(t), k, (ix if isinstance(ix, str) else [int(i) for i in ix])] for t, k, ix in r["events"]]
    return {"beta": [[None if not np.isfinite(b) else float(b) for b in row] for row in r["beta"]],
            "events": ev, "status": r["status"]}


def build(rtol=1e-12):
    out = []
    for c in cells():
        out.append({**c, **solve_cell(c, rtol)})
    return out


def compare(a, b):
    """Max |beta| difference (relative to max|beta| of the cell), max event-time
    difference (relative to max(1, t)) between two builds; also whether statuses and
    event kinds agree."""
    worst_b, worst_t, same = 0.0, 0.0, True
    for x, y_ in zip(a, b):
        ba = np.array([[np.nan if v is None else v for v in row] for row in x["beta"]], float)
        bb = np.array([[np.nan if v is None else v for v in row] for row in y_["beta"]], float)
        fin = np.isfinite(ba) & np.isfinite(bb)
        same &= bool(np.array_equal(np.isfinite(ba), np.isfinite(bb)))
        if fin.any():
            worst_b = max(worst_b, float(np.max(np.abs(ba[fin] - bb[fin])) / max(np.max(np.abs(bb[fin])), 1e-300)))
        same &= x["status"] == y_["status"] and [e[1:] for e in x["events"]] == [e[1:] for e in y_["events"]]
        if len(x["events"]) == len(y_["events"]):
            for e, f in zip(x["events"], y_["events"]):
                worst_t = max(worst_t, abs(e[0] - f[0]) / max(1.0, abs(f[0])))
    return worst_b, worst_t, same


if __name__ == "__main__":
    import time

    t0 = time.perf_counter()
    got = build()
    if "--write" in sys.argv:
        FIXTURE.parent.mkdir(parents=True, exist_ok=True)
        FIXTURE.write_text(json.dumps({"cells": got}, indent=None, separators=(",", ":")) + "\n")
        print(f"wrote {FIXTURE} ({FIXTURE.stat().st_size} bytes, {len(got)} cells) in {time.perf_counter() - t0:.0f} s")
    else:
        ref = json.loads(FIXTURE.read_text())["cells"]
        print("beta, event times, same statuses/events:", compare(got, ref))
    for c in got:
        print(c["case"], c["L"], c["status"], [(round(e[0], 4), e[1], e[2]) for e in c["events"]][:8])
