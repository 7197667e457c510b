"""One explicit Runge-Kutta step and its dense interpolant, with sums written out,
and the per-lane gathers and scatters of a lane loop: what the lane engine
(`samflow._engine.lanes`) and the reduced solve (`samflow._engine.reduced`) share."""

from __future__ import annotations

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float


def _erk_step(tableau, field, t0, t1, y0, args, f0):
    """One explicit Runge-Kutta step of diffrax's Butcher `tableau` (first same as
    last), unrolled: (y1, y_error, dense_info, f1). k_i = h f(t_i, y_i) as in
    diffrax; `dense_info` holds y0, y1 and the stages k as a tuple of pytrees
    like y0 (`_Dense` evaluates the solver's `interpolation_cls` from them). The
    stage sums are written out term by term (no `tensordot`): XLA picks a dot
    kernel by the batch shape, and the lanes' bits must not depend on the width.
    """
    h = t1 - t0
    add = lambda a, b: jax.tree.map(jnp.add, a, b)
    scale = lambda c, x: jax.tree.map(lambda v: c * v, x)
    ks = [scale(h, f0)]
    for ci, row in zip(tableau.c, tableau.a_lower):
        yi = y0
        for aij, kj in zip(row, ks):
            if aij != 0:
                yi = add(yi, scale(float(aij), kj))
        fi = field(t0 + float(ci) * h, yi, args)
        ks.append(scale(h, fi))
    if tableau.fsal:  # the last stage is at (t1, y1): its y is the solution
        y1 = yi
    else:  # pragma: no cover - every solver of _SOLVERS is FSAL
        y1 = y0
        for bi, ki in zip(tableau.b_sol, ks):
            if bi != 0:
                y1 = add(y1, scale(float(bi), ki))
    err = None
    for ei, ki in zip(tableau.b_error, ks):
        if ei != 0:
            term = scale(float(ei), ki)
            err = term if err is None else add(err, term)
    # The stages stay a tuple: stacked into one array they cost a chain of concatenate
    # kernels in every step, which the dense output, reading them one by one, never
    # needed (8% of a warm step; docs/benchmarks.md, "Issue 34, third round").
    return y1, err, dict(y0=y0, y1=y1, k=tuple(ks)), fi


class _Dense(eqx.Module):
    """The solver's dense interpolant on one step, evaluated with sums written out.

    diffrax's `interpolation_cls` is linear in (y0, y1, k): y(t) = a(t) y0 +
    b(t) y1 + sum_i c_i(t) k_i. Its coefficients are read by evaluating it on unit
    vectors (exact: every product is by 0 or 1), and the sum is then formed term
    by term, because the class's own `tensordot` takes other last bits at other
    batch widths (see `_erk_step`)."""

    cls: type = eqx.field(static=True)
    t0: Float[Array, ""]
    t1: Float[Array, ""]
    dense: dict  # y0, y1 and k: a tuple of the step's stages, each a pytree like y0 (`_erk_step`)

    def evaluate(self, t):
        k = self.dense["k"]
        m = len(k)
        dtype = jnp.result_type(self.t0)
        if self.cls is diffrax.Tsit5.interpolation_cls:
            # Tsit5's weights as diffrax forms them, without the matrix product of the
            # probe below (a kernel of its own, ~12 us a call at 256 lanes).
            one, zero = jnp.ones((), dtype), jnp.zeros((), dtype)
            probe = [one, zero] + _tsit5_weights(self.t0, t, self.t1)
        else:
            eye = jnp.eye(m + 2, dtype=dtype)
            probe = self.cls(t0=self.t0, t1=self.t1, y0=eye[0], y1=eye[1], k=eye[2:]).evaluate(t)
        def combine(y0, y1, ks):
            # Each product rounded on its own (no fused multiply-add, which XLA's
            # CPU code uses or not depending on how it vectorizes a batch shape).
            terms = jax.lax.optimization_barrier([probe[0] * y0, probe[1] * y1] + [probe[2 + i] * ks[i] for i in range(m)])
            out = terms[0]
            for term in terms[1:]:
                out = out + term
            return out
        return jax.tree.map(lambda y0, y1, *ks: combine(y0, y1, ks), self.dense["y0"], self.dense["y1"], *k)


def _tsit5_weights(t0, t, t1):
    """The weights b_1..b_7(theta) of Tsit5's dense output at `t` on the step [t0, t1]
    (Tsitouras 2011; the expressions of `diffrax.Tsit5`'s interpolation, operation
    for operation, so that they round as its own evaluation does)."""
    same = t0 == t1
    t = jnp.where(same, 0.0, t - t0) / jnp.where(same, 1.0, t1 - t0)
    b1 = -1.0530884977290216 * t * (t - 1.3299890189751412) * (t**2 - 1.4364028541716351 * t + 0.7139816917074209)
    b2 = 0.1017 * t**2 * (t**2 - 2.1966568338249754 * t + 1.2949852507374631)
    b3 = 2.490627285651252793 * t**2 * (t**2 - 2.38535645472061657 * t + 1.57803468208092486)
    b4 = -16.54810288924490272 * (t - 1.21712927295533244) * (t - 0.61620406037800089) * t**2
    b5 = 47.37952196281928122 * (t - 1.203071208372362603) * (t - 0.658047292653547382) * t**2
    b6 = -34.87065786149660974 * (t - 1.2) * (t - 0.666666666666666667) * t**2
    b7 = 2.5 * (t - 1) * (t - 0.6) * t**2
    return [b1, b2, b3, b4, b5, b6, b7]


def _take(tree, idx):
    return jax.tree.map(lambda x: x[idx], tree)


def _put(tree, idx, rows):
    return jax.tree.map(lambda x, r: x.at[idx].set(r, mode="drop"), tree, rows)
