"""The vector field of one cell, in diffrax's form field(t, y, args).

`SamField` holds what is static (method, clock, loss, the signs of log
coordinates); `RunArgs` what changes only at events (the sign memory of
linf-SAM, the weights held at 0, the r_j = 0 surfaces of multi-sample linf).
The flows themselves are `samflow.flows` (docs/theory.md s.2-3); this module
adds the clock s = log(1 + t) of the tau clock, log coordinates, and the
Filippov field of linf-SAM on an r_j(W) = 0 surface (docs/theory.md s.4).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float

from ..datasets import Dataset
from ..flows import Clock, Method, log_velocity, perturbed_weights, velocity
from ..losses import AbstractLoss
from ..diagonal_net import margins, prod_excl, residual


class RunArgs(eqx.Module):
    """What the vector field and the event conditions read during one run of steps
    (diffrax's `args`): constant inside a run, changed only at its events.

    **Fields** (one cell):

    - `rho`: `()` SAM radius. `data`: the `Dataset` (inputs made finite).
    - `memory`: `(L, d)` the side of 0 each weight is on (+-1; 0: at rest), from
      which linf-SAM takes sign(w_lj) between sign events (docs/theory.md s.4).
    - `frozen`: `(L, d)` bool, weights held at 0 (Filippov sliding).
    - `track`: `()` bool, the tau clock still follows s = log(1 + t).
    - `rmem`, `rslide`, `roff`: `(d,)`, linf-SAM on multi-sample data only (else
      None): the side of each r_j = 0 surface, the coordinates sliding on their
      surfaces (at most two, `sliding_pair`), and the event offsets (`_rsurface_event`).
    - `ra`: `(2,)`, the multipliers (a_1, a_2) of a slide on two surfaces at the
      start of the run (`two_surface_field` follows the root nearest them; else unused).
    """

    rho: Float[Array, ""]
    data: Dataset
    memory: Float[Array, "L d"]
    frozen: Bool[Array, "L d"]
    track: Bool[Array, ""]
    rmem: Float[Array, " d"] | None = None
    rslide: Bool[Array, " d"] | None = None
    roff: Float[Array, " d"] | None = None
    ra: Float[Array, " 2"] | None = None

    @property
    def rsurf(self):
        """(rmem, rslide, ra) for `_velocity` on multi-sample linf data, else None."""
        return None if self.rmem is None else (self.rmem, self.rslide, self.ra)


class SamField(eqx.Module):
    """The vector field of one cell in diffrax's form `field(t, y, args)`, with
    y = (Y, s) and `args` a `RunArgs`; returns (dY, ds) per unit clock time.

    Y is the weights W `(L, d)`, or x = log|W| with the signs `sign` held fixed
    (log coordinates, `sign` not None). s = log(1 + t) is the real time carried
    by the tau clock (0 in the t clock). See `_velocity` (docs/theory.md s.2-4).
    `p` is lp-SAM's exponent, a traced float64 scalar (None for the other
    methods): one compiled program serves every p. `layers`: None, or an int
    L >= 2 when Y (with `sign`, the memory and the held weights of `args`) is
    `(1, d)`, one row standing for L equal layers (the equal-layer reduction,
    `samflow._engine.reduced`, docs/theory.md s.3.5); not with linf on multi-sample data.
    """

    method: Method = eqx.field(static=True)
    clock: Clock = eqx.field(static=True)
    loss: AbstractLoss = eqx.field(static=True)
    sign: Float[Array, "L d"] | None = None
    p: Float[Array, ""] | None = None
    layers: int | None = eqx.field(static=True, default=None)

    @property
    def log_coords(self) -> bool:
        return self.sign is not None

    def to_W(self, Y):
        """Weights from the state (identity in linear coordinates)."""
        return self.sign * jnp.exp(Y) if self.log_coords else Y

    def __call__(self, t, y, args: RunArgs):
        W, s = y
        return _velocity(
            W, s, args.rho, args.data, args.memory, args.frozen, args.track,
            self.method, self.clock, self.loss, self.sign, args.rsurf, self.p, self.layers,
        )

    def velocity_W(self, Y, s, args: RunArgs):
        """dW/dclock and ds/dclock at state (Y, s), in linear coordinates."""
        dY, ds = self(None, (Y, s), args)
        return (self.to_W(Y) * dY if self.log_coords else dY), ds


def _velocity_impl(W, s, rho, data, memory, frozen, track, method, clock, loss, sign=None, rsurf=None, p=None, layers=None):
    """(dW, ds) of the run's field, frozen weights held at 0.

    With `rsurf` = (rmem, rslide, ra) given (linf on multi-sample data, clock t), the
    field is `_linf_multi_field`: the sign of r_j from its memory, Filippov
    sliding on one r_j = 0 surface or on two at once.

    With `sign` given, `W` is x = log|W| and the result is (dx, ds) (log
    coordinates, `samflow.flows.log_velocity`). `p`: lp's exponent (else None).
    `layers`: `samflow.flows.velocity`'s (W one row standing for equal layers).

    In the tau clock s = log(1 + t), ds/dtau = exp(log(dt/dtau) - s): smooth, and
    error-controlled like the weights. Its stiffness is about d log(dt/dtau)/dtau,
    which stays moderate while t < e^_LOG_T_MAX; past that (`track` false) t is
    no longer followed (docs/theory.md s.4: integrating t is stiff once the loss is tiny).
    """
    if sign is not None:
        dW, log_rate = log_velocity(W, sign, rho, method, data, loss, clock is Clock.TAU, p, layers)
        if method is Method.LP:  # p > 2: a column held at 0 (x = LOG_ZERO)
            dW = jnp.where(frozen, 0.0, dW)
    elif rsurf is not None:
        return _linf_multi_field(W, rho, data, memory, frozen, *rsurf[:2], loss, rsurf[2]), jnp.zeros_like(s)
    else:
        dW, log_rate = velocity(W, rho, method, data, loss, memory, clock=clock, p=p, layers=layers)
        dW = jnp.where(frozen, 0.0, dW)
    if clock is Clock.T:
        return dW, jnp.zeros_like(s)
    return dW, jnp.where(track, jnp.exp(jnp.minimum(log_rate - s, 700.0)), 0.0)


#: The field as a nested jit: the calls of a program with the same shapes and static
#: arguments (the six stages of a step, each at its own time) trace `_velocity_impl` once
#: and lower to calls of one function, which XLA inlines: the same program and bits,
#: traced and lowered in less time (a linf program on four samples: 5.5 -> 4.3 s).
_velocity = eqx.filter_jit(_velocity_impl)


def _linf_multi_field(W, rho, data, memory, frozen, rmem, rslide, loss, ra=None):
    """Real-time linf-SAM field on multi-sample data with the sign memory of r.

    eps_lj = rho sign(G_lj), G_lj = -r_j(W) prod_excl_lj(W): besides the weights
    (`memory`, `frozen` as in `_velocity`), its sign flips where r_j(W) = 0. Between
    two events the field uses `rmem` (d,), the side of each r_j = 0 surface the
    cell is on (+-1; 0: plain sign(r_j)), so it is smooth inside a run. On the
    surfaces it slides along (`rslide` (d,), at most two True, `sliding_pair`) it
    is the Filippov field that keeps them: on one, a f+ + (1 - a) f- (Filippov,
    "Differential equations with discontinuous righthand sides", 1988, s.2.4); on
    two, the product-form combination of the four vertex fields with multipliers
    (a_1, a_2), the root of `product_roots` nearest `ra` (`_sliding_parts`,
    docs/theory.md s.4.3, "Two surfaces at once"). Shape (L, d), per unit t.
    """
    return _sliding_parts(W, rho, data, memory, frozen, rmem, rslide, loss, ra)[0]


def _one_sided_r(W, rho, data, memory, frozen, rmem, loss):
    """The linf field with the sign of r_j taken from `rmem` (0: sign(r_j(W)))."""
    r = residual(W, data, loss)
    rs = jnp.where(rmem != 0, rmem, r)  # linf uses only the sign of r
    W_hat = perturbed_weights(W, rs, rho, Method.LINF, memory)
    dW = residual(W_hat, data, loss)[None, :] * prod_excl(W_hat)
    return jnp.where(frozen, 0.0, dW)


#: Two columns of X whose unit vectors agree to this (max norm, up to sign) share
#: one r = 0 surface (`surface_groups`).
PROPORTIONAL_TOL = 1e-12


def surface_groups(data: Dataset):
    """The r_j = 0 surfaces of linf-SAM on multi-sample data, as groups of columns
    (docs/theory.md s.4.3, "Proportional columns").

    r = X^T g(W) with g the per-sample slopes, so two columns j, k of `X` that are
    proportional (x_k = c x_j, c != 0) have r_k = c r_j for every W: r_j = 0 and
    r_k = 0 are ONE surface, crossed together and slid on with one multiplier.
    Proportional: the unit columns agree up to sign to `PROPORTIONAL_TOL` (max
    norm); a zero column is in a group of its own (its r is 0 for every W).

    **Returns:** (same, sign, lead): `same` `(d, d)` bool, the columns of each
    column's group (`same[j, j]` True); `sign` `(d, d)` float, sign(c) of x_k =
    c x_j (+1 off the groups); `lead` `(d,)` bool, the first column of each
    group (the one whose surface events fire and whose `rslide` is set).
    """
    X = data.X
    norm = jnp.sqrt(jnp.sum(X * X, axis=0))
    nz = norm > 0
    u = X / jnp.where(nz, norm, 1.0)[None, :]
    dot = jnp.sum(u[:, :, None] * u[:, None, :], axis=0)
    sign = jnp.where(dot < 0, -1.0, 1.0).astype(X.dtype)
    gap = jnp.max(jnp.abs(u[:, :, None] - sign[None] * u[:, None, :]), axis=0)
    d = X.shape[1]
    eye = jnp.eye(d, dtype=bool)
    same = eye | (nz[:, None] & nz[None, :] & (gap <= PROPORTIONAL_TOL))
    sign = jnp.where(same, sign, 1.0)
    lead = jnp.argmax(same, axis=1) == jnp.arange(d)
    return same, sign, lead


def _rsurface_parts(W, rho, data, memory, frozen, rmem, rslide, loss, j=None):
    """(field, a, n_plus, n_minus) at W for the r_j = 0 surface of coordinate `j`
    (default: the sliding one, argmax `rslide`).

    f+- are the fields with sign(r_j) = +-1 (f+ applies where r_j > 0; the
    columns proportional to j, `surface_groups`, take their sign with it); n+- =
    du_j/dt along them, u = `r_unit`(W) (r on the surfaces' scale: a JVP, with
    the sign of d r_j/dt). The sliding field is a f+ + (1 - a) f- with

        a = (n- + k u_j) / (n- - n+),   k = max(|n+|, |n-|),

    so that du_j/dt = -k u_j along it: on the surface (u_j = 0) this is Filippov's
    a = n- / (n- - n+) (in [0, 1] exactly when n+ and n- have opposite signs,
    0/0 guarded to 0), and a cell that has drifted off it by the integration's
    error is pulled back at the rate the one-sided fields cross it (docs/theory.md
    s.4.3, "Staying on the surface"). Without the pull, d r_j/dt = 0 holds r_j at
    its error while r's scale falls with the loss, and u_j drifts away (on three
    samples it went from 3e-10 to 1e-2 in one slide). `field` is the sliding field
    where `rslide[j]`, else the one-sided field of `rmem`. (L, d), (), (), ().
    """
    if j is None:
        j = jnp.argmax(rslide)
    same, sign, _ = surface_groups(data)
    group = same[j]  # the columns of j's surface (`surface_groups`), each on its side
    f_p = _one_sided_r(W, rho, data, memory, frozen, jnp.where(group, sign[j], rmem), loss)
    f_m = _one_sided_r(W, rho, data, memory, frozen, jnp.where(group, -sign[j], rmem), loss)
    u_j = lambda w: r_unit(w, data, loss)[j]
    u, n_p = jax.jvp(u_j, (W,), (f_p,))
    _, n_m = jax.jvp(u_j, (W,), (f_m,))
    den = n_m - n_p
    pull = jnp.maximum(jnp.abs(n_p), jnp.abs(n_m)) * u
    a = jnp.where(den != 0, (n_m + pull) / jnp.where(den != 0, den, 1.0), 0.0)
    sliding = rslide[j]
    f_plain = jnp.where(rmem[j] > 0, f_p, f_m)
    f_plain = jnp.where(rmem[j] == 0, _one_sided_r(W, rho, data, memory, frozen, rmem, loss), f_plain)
    ac = jnp.clip(a, 0.0, 1.0)
    f = jnp.where(sliding, ac * f_p + (1.0 - ac) * f_m, f_plain)
    return f, a, n_p, n_m


#: The vertices of a pair of surfaces, in the order of `vertex_parts`: the sides
#: (v_1, v_2) of r on the first and on the second surface.
VERTICES = ((1.0, 1.0), (1.0, -1.0), (-1.0, 1.0), (-1.0, -1.0))


def sliding_pair(rslide):
    """(j1, j2, two) of the sliding surfaces `rslide` (d,) bool: the first sliding
    column j1 (0 where none slides), the second j2 (= j1 unless `two`)."""
    idx = jnp.arange(rslide.shape[0])
    j1 = jnp.argmax(rslide)
    rest = rslide & (idx != j1)
    two = jnp.any(rest)
    return j1, jnp.where(two, jnp.argmax(rest), j1), two


def vertex_parts(W, rho, data, memory, frozen, rmem, loss, j1, j2, on1, on2):
    """The vertex fields of the surfaces of columns j1 and j2 (docs/theory.md s.4.3).

    For each vertex v of `VERTICES`, f_v is the one-sided field (`_one_sided_r`)
    with the side of r on j1's surface (its group of proportional columns,
    `surface_groups`) set to v_1 where `on1`, on j2's to v_2 where `on2`
    (elsewhere `rmem`'s sides); n_v = (du_j1/dt, du_j2/dt) along f_v, u =
    `r_unit`. With j2 = j1 and `on2` False the vertices are f+, f+, f-, f-
    (one surface); with neither on, all four are the field of `rmem`. One vmap
    over the vertices. Returns f (4, L, d), n (4, 2), u (2,) = (u_j1, u_j2).
    """
    same, sign, _ = surface_groups(data)
    jj = jnp.stack([j1, j2])

    def one(v):
        m = jnp.where(same[j1] & on1, v[0] * sign[j1], rmem)
        m = jnp.where(same[j2] & on2, v[1] * sign[j2], m)
        f = _one_sided_r(W, rho, data, memory, frozen, m, loss)
        u, du = jax.jvp(lambda w: r_unit(w, data, loss), (W,), (f,))
        return f, du[jj], u[jj]

    f, n, u = jax.vmap(one)(jnp.asarray(VERTICES, W.dtype))
    return f, n, u[0]


def product_roots(n):
    """The multipliers a = (a_1, a_2) that keep two surfaces, from the normal rates
    n (4, 2) of the vertex fields (`VERTICES` order, pulled as in `_sliding_parts`).

    The product-form combination F(a) = sum_v lam_1(v_1) lam_2(v_2) f_v,
    lam(+) = a, lam(-) = 1 - a, moves the surfaces at the rates c(a) = A + B a_1 +
    C a_2 + D a_1 a_2 (bilinear, each (2,)); eliminating a_2 leaves al a_1^2 +
    be a_1 + ga = 0, solved in the cancellation-free form (q = -(be + sgn(be)
    sqrt(disc)) / 2, roots q / al and ga / q; one root -ga / be where al is 0
    to 1e-14 of the coefficients), a_2 from the better conditioned equation,
    then three Newton steps on the bilinear system (docs/theory.md s.4.3, "Two
    surfaces at once"; tests/reference_sliding.py `product_multipliers`).
    Returns roots (2, 2), valid (2,) bool (a real root), and the discriminant
    scaled to [-1, 1] (0 where the two roots merge: a fold)."""
    A = n[3]
    B = n[1] - A
    C = n[2] - A
    D = n[0] - n[1] - n[2] + A
    al = B[1] * D[0] - D[1] * B[0]
    be = A[1] * D[0] + B[1] * C[0] - C[1] * B[0] - D[1] * A[0]
    ga = A[1] * C[0] - C[1] * A[0]
    scale = jnp.maximum(jnp.maximum(jnp.abs(al), jnp.abs(be)), jnp.maximum(jnp.abs(ga), 1e-300))
    lin = jnp.abs(al) <= 1e-14 * scale
    disc = be * be - 4.0 * al * ga
    sq = jnp.sqrt(jnp.maximum(disc, 0.0))
    q = -0.5 * (be + jnp.where(be < 0, -sq, sq))
    qs = jnp.where(q != 0, q, 1.0)
    r_lin = -ga / jnp.where(be != 0, be, 1.0)
    a1 = jnp.stack([jnp.where(lin, r_lin, q / jnp.where(al != 0, al, 1.0)), jnp.where(lin, r_lin, ga / qs)])
    valid = jnp.where(lin, be != 0, (disc >= 0) & (q != 0))
    valid = jnp.stack([valid, valid & ~lin])

    def second(x1):
        den0, den1 = C[0] + D[0] * x1, C[1] + D[1] * x1
        use0 = jnp.abs(den0) >= jnp.abs(den1)
        den = jnp.where(use0, den0, den1)
        num = jnp.where(use0, A[0] + B[0] * x1, A[1] + B[1] * x1)
        x2 = -num / jnp.where(den != 0, den, 1.0)
        a = jnp.stack([x1, x2])
        for _ in range(3):  # Newton on the bilinear system
            c = A + B * a[0] + C * a[1] + D * a[0] * a[1]
            J00, J01 = B[0] + D[0] * a[1], C[0] + D[0] * a[0]
            J10, J11 = B[1] + D[1] * a[1], C[1] + D[1] * a[0]
            det = J00 * J11 - J01 * J10
            ok = det != 0
            dets = jnp.where(ok, det, 1.0)
            step = jnp.stack([J11 * c[0] - J01 * c[1], J00 * c[1] - J10 * c[0]]) / dets
            a = jnp.where(ok, a - step, a)
        return a, den != 0

    roots, ok2 = jax.vmap(second)(a1)
    disc_s = disc / jnp.maximum(jnp.maximum(be * be, jnp.abs(4.0 * al * ga)), 1e-300)
    return roots, valid & ok2 & jnp.all(jnp.isfinite(roots), axis=1), disc_s


def combine(f, a):
    """The product-form combination sum_v lam_1(v_1) lam_2(v_2) f_v of the vertex
    fields f (4, ...) (`VERTICES` order) with multipliers a (2,)."""
    V = jnp.asarray(VERTICES, a.dtype)
    lam = jnp.prod(jnp.where(V > 0, a[None, :], 1.0 - a[None, :]), axis=1)
    return jnp.tensordot(lam, f, axes=1)


def _sliding_parts(W, rho, data, memory, frozen, rmem, rslide, loss, ra=None):
    """(field, a, disc) of the run's r-mode (`rslide`, at most two True): the
    field (L, d) of `_linf_multi_field`, the multipliers a (2,) (continued past
    [0, 1]: `_rexit_condition` stops a run where one leaves it) and the scaled
    discriminant of a two-surface slide (1 otherwise; 0 at a fold).

    One surface j (docs/theory.md s.4.3, "Staying on the surface"): f+- are the
    fields with sign(r_j) = +-1 (the columns proportional to j with it), n+- =
    du_j/dt along them (u = `r_unit`, r on its own scale), and the sliding field
    a f+ + (1 - a) f- with

        a = (n- + k u_j) / (n- - n+),   k = max(|n+|, |n-|),

    so that du_j/dt = -k u_j along it: on the surface this is Filippov's a = n- /
    (n- - n+), and a cell that has drifted off it by the integration's error is
    pulled back at the rate the one-sided fields cross it (d r_j/dt = 0 alone
    held r_j at its error while r's scale fell with the loss: on three samples
    u_j went from 3e-10 to 1e-2 in one slide). a[1] = a[0].

    Two surfaces j1, j2 ("Two surfaces at once"): the product form over the four
    vertex fields (`vertex_parts`, `combine`), with each vertex's rates pulled the
    same way, n_v + k u (k (2,) the largest |n_v| per surface), and a the root
    of `product_roots` nearest `ra` (the run's start: the branch stays the same
    until a fold ends the run). No surface: the field of `rmem`.

    On one or two samples two distinct surfaces never hold at once (r_j = r_k = 0
    for columns that are not proportional needs g = 0, "Proportional columns"):
    there the one-surface field alone is built (`_rsurface_parts`: three
    one-sided fields, not the four vertex fields; the field costs 1.47x as much
    with them, 1713 against 1166 ns per cell on four samples)."""
    if data.X.shape[0] <= 2:
        f, a, _, _ = _rsurface_parts(W, rho, data, memory, frozen, rmem, rslide, loss)
        return f, jnp.stack([a, a]), jnp.ones((), W.dtype)
    j1, j2, two = sliding_pair(rslide)
    sliding = rslide[j1]
    f, n, u = vertex_parts(W, rho, data, memory, frozen, rmem, loss, j1, j2, sliding, two)
    k = jnp.max(jnp.abs(n), axis=0)
    # one surface: vertices 0 and 3 are f+ and f-
    n_p, n_m = n[0, 0], n[3, 0]
    den = n_m - n_p
    a1 = jnp.where(den != 0, (n_m + k[0] * u[0]) / jnp.where(den != 0, den, 1.0), 0.0)
    ac = jnp.clip(a1, 0.0, 1.0)
    f_one = ac * f[0] + (1.0 - ac) * f[3]
    # two surfaces: the root nearest the run's start
    roots, valid, disc = product_roots(n + k[None, :] * u[None, :])
    ra = jnp.full((2,), 0.5, W.dtype) if ra is None else ra
    dist = jnp.where(valid, jnp.max(jnp.abs(roots - ra[None, :]), axis=1), jnp.inf)
    a2 = roots[jnp.argmin(dist)]
    f_two = combine(f, jnp.clip(a2, 0.0, 1.0))
    field = jnp.where(two, f_two, jnp.where(sliding, f_one, f[0]))
    a = jnp.where(two, a2, jnp.stack([a1, a1]))
    return field, a, jnp.where(two & jnp.any(valid), disc, jnp.where(two, -1.0, 1.0))


def r_unit(W, data: Dataset, loss):
    """r(W) on the scale of the switching surfaces, (d,): r_j / (max|X| mean_i slope(z_i)),
    in [-1, 1] whatever the size of the loss (docs/theory.md s.4.3).

    r = X^T g with g_i = y_i slope(z_i) / n, so r_j = 0 exactly where this is 0,
    but r itself shrinks with the loss: as the loss falls to 1e-9, 1e-20, ...
    every r_j passes any fixed threshold, and the surface events (their
    offsets, "another surface at 0") then read a live r_j as 0. The weights
    slope(z_i) / sum slope are a softmax of -log(1 / slope) (`log_inv_slope`):
    no underflow where the slopes do."""
    w = jax.nn.softmax(-loss.log_inv_slope(margins(W, data)))
    return jnp.sum(data.X * (data.y * w)[:, None], axis=0) / _r_scale(data)


def _r_scale(data: Dataset):
    """max|X|: r_j / max|X| is dimensionless (|r_j| <= max|x_ij| max slope)."""
    r_scale = jnp.max(jnp.abs(data.X))
    return jnp.where(r_scale > 0, r_scale, 1.0)
