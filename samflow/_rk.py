"""One explicit Runge-Kutta step and its dense interpolant, with sums written out,
and the per-lane gathers and scatters of a lane loop: what the lane engine
(`samflow._lanes`) and the reduced solve (`samflow._reduced`) share."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float


def _erk_step(tableau, field, t0, t1, y0, args, f0):
    """One explicit Runge-Kutta step of diffrax's Butcher `tableau` (first same as
    last): (y1, y_error, dense_info, f1). k_i = h f(t_i, y_i) as in diffrax, so
    `dense_info` feeds the solver's own `interpolation_cls`.

    The stages are rolled: one `lax.fori_loop` over the tableau's rows, so the
    vector field is traced and compiled once per step, not once per stage (six
    times for Tsit5), which is most of a solver program's size. Each stage sum is
    still written out term by term in the tableau's order (no `tensordot`: XLA
    picks a dot kernel by the batch shape, and the lanes' bits must not depend on
    the width); the terms of a row past its last coefficient are skipped by a
    select, not multiplied by 0, so a stage's bits are those of the unrolled sum.
    """
    h = t1 - t0
    n_stages = len(tableau.c) + 1
    dtype = jnp.result_type(t0)
    A = np.zeros((n_stages, n_stages))
    for i, row in enumerate(tableau.a_lower, start=1):
        A[i, : len(row)] = row
    C = np.concatenate([[0.0], np.asarray(tableau.c, dtype=np.float64)])
    A, C = jnp.asarray(A, dtype), jnp.asarray(C, dtype)

    def stage_y(i, ks):
        # y_i = y0 + sum_{j < i} a_ij k_j, added in order of j.
        yi = y0
        for j in range(n_stages - 1):
            yi = jax.tree.map(lambda y, k: jnp.where(j < i, y + A[i, j] * k[j], y), yi, ks)
        return yi

    ks0 = jax.tree.map(lambda f: jnp.zeros((n_stages,) + jnp.shape(f), jnp.result_type(f)).at[0].set(h * f), f0)

    def body(i, carry):
        ks, _ = carry
        fi = field(t0 + C[i] * h, stage_y(i, ks), args)
        ks = jax.tree.map(lambda k, f: k.at[i].set(h * f), ks, fi)
        return ks, fi

    ks, fi = jax.lax.fori_loop(1, n_stages, body, (ks0, f0))
    if tableau.fsal:  # the last stage is at (t1, y1): its y is the solution
        y1 = stage_y(n_stages - 1, ks)
    else:  # pragma: no cover - every solver of _SOLVERS is FSAL
        y1 = y0
        for i, bi in enumerate(tableau.b_sol):
            if bi != 0:
                y1 = jax.tree.map(lambda y, k: y + float(bi) * k[i], y1, ks)
    err = None
    for i, ei in enumerate(tableau.b_error):
        if ei != 0:
            term = jax.tree.map(lambda k: float(ei) * k[i], ks)
            err = term if err is None else jax.tree.map(jnp.add, err, term)
    return y1, err, dict(y0=y0, y1=y1, k=ks), fi


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
    dense: dict

    def evaluate(self, t):
        k = self.dense["k"]
        m = jax.tree.leaves(k)[0].shape[0]
        dtype = jnp.result_type(self.t0)
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
        return jax.tree.map(combine, self.dense["y0"], self.dense["y1"], k)


def _take(tree, idx):
    return jax.tree.map(lambda x: x[idx], tree)


def _put(tree, idx, rows):
    return jax.tree.map(lambda x, r: x.at[idx].set(r, mode="drop"), tree, rows)
