"""The shared engine of the diagonal net and the generic models (issue 13 items 3, 6):
the per-method table, the perturbation on pytrees, the iteration engine and the
collapse extrapolation, against closed forms."""

import jax.numpy as jnp
import numpy as np
import pytest

import samflow as sf
from samflow._iterate import iterate, safe_inputs
from samflow._methods import GD, AbstractSam, L2Sam, LinfSam, LpSam, USam
from samflow._engine.singular import extrapolate_collapse, extrapolate_to_zero, linear_fill, zero_time
from samflow.flows import METHOD_LABELS, Method
from samflow.status import Status

G_TREE = (jnp.array([[3.0, 0.0], [-4.0, 0.0]]), jnp.array([0.0, 12.0]))  # ||G||_2 = 13


def _p(m):
    """lp's exponent for the table's tests (the other methods take none)."""
    return 3.0 if m is Method.LP else None


def test_every_method_has_one_final_class():
    classes = {m: type(m.spec) for m in Method}
    assert classes == {Method.GD: GD, Method.L2: L2Sam, Method.LINF: LinfSam, Method.USAM: USam, Method.LP: LpSam}
    assert all(isinstance(m.spec, AbstractSam) and m.spec.method is m for m in Method)
    assert METHOD_LABELS == {m: m.spec.label for m in Method}
    # Only linf slides, l2 and lp collapse, log coordinates for all but linf (lp: p <= 2).
    assert [m for m in Method if m.spec.slides] == [Method.LINF]
    assert [m for m in Method if m.spec.collapses] == [Method.L2, Method.LP]
    assert [m for m in Method if not m.spec.log_coords] == [Method.LINF]
    assert Method.L2.spec.events_at(2) == ("collapse", "critical")
    assert Method.L2.spec.events_at(1) == ("critical",)
    assert Method.LINF.spec.events_at(3) == ("cross",)
    assert Method.GD.spec.events_at(2) == Method.USAM.spec.events_at(2) == ()
    assert Method.LP.spec.events_at(2) == ("collapse", "critical", "cross")
    assert Method.LP.spec.events_at(1) == ("critical",)


def test_perturbation_on_a_pytree_closed_forms():
    rho = 0.5
    eps = {m: m.spec.perturbation(G_TREE, rho, p=_p(m)) for m in Method}
    np.testing.assert_array_equal(eps[Method.GD][1], [0.0, 0.0])
    np.testing.assert_allclose(eps[Method.L2][0], rho * np.array([[3.0, 0.0], [-4.0, 0.0]]) / 13.0, rtol=1e-15)
    np.testing.assert_allclose(eps[Method.L2][1], rho * np.array([0.0, 12.0]) / 13.0, rtol=1e-15)
    np.testing.assert_array_equal(eps[Method.LINF][0], [[0.5, 0.0], [-0.5, 0.0]])
    np.testing.assert_array_equal(eps[Method.USAM][1], [0.0, 6.0])
    # lp, p = 3 (q = 3/2): rho sign(G) |G|^(1/2) / ||G||_(3/2)^(1/2), ||G||_(3/2)^(3/2) = 3^1.5 + 4^1.5 + 12^1.5
    n = (3.0**1.5 + 8.0 + 12.0**1.5) ** (1.0 / 3.0)
    np.testing.assert_allclose(eps[Method.LP][0], rho * np.array([[3.0**0.5, 0.0], [-2.0, 0.0]]) / n, rtol=1e-14)
    np.testing.assert_allclose(eps[Method.LP][1], rho * np.array([0.0, 12.0**0.5]) / n, rtol=1e-14)
    # the linf sign override (the diagonal net's sign memory at a weight held at 0)
    sign = (jnp.array([[1.0, -1.0], [-1.0, 1.0]]), jnp.array([1.0, 1.0]))
    np.testing.assert_array_equal(Method.LINF.spec.perturbation(G_TREE, rho, sign=sign)[0], [[0.5, -0.5], [-0.5, 0.5]])
    # l2 of a zero gradient is exactly zero
    zero = Method.L2.spec.perturbation((jnp.zeros(2), jnp.zeros((1, 3))), rho)
    assert all(np.all(np.asarray(z) == 0) for z in zero)


@pytest.mark.parametrize("method", list(Method))
def test_slope_free_means_scale_invariant(method):
    """eps(c G) = eps(G) for c > 0 exactly for the slope-free methods (the tau clock
    of one sample perturbs with mu in place of r for those)."""
    spec = method.spec
    a = np.asarray(spec.perturbation(G_TREE, 0.3, p=_p(method))[1])
    b = np.asarray(spec.perturbation(tuple(7.0 * g for g in G_TREE), 0.3, p=_p(method))[1])
    assert np.allclose(a, b, rtol=1e-15, atol=0) == spec.slope_free


def test_diagonal_net_perturbation_is_the_pytree_one(multi_data, rng):
    """samflow.perturbation (hand-written G) and the pytree eps of the table agree
    bit for bit on G = -r prod_excl(W)."""
    W = jnp.asarray(rng.normal(size=(3, multi_data.d)))
    r = sf.residual(W, multi_data, sf.Logistic())
    G = -r[None, :] * sf.prod_excl(W)
    for m in Method:
        np.testing.assert_array_equal(sf.perturbation(W, r, 0.4, m, p=_p(m)), m.spec.perturbation(G, 0.4, p=_p(m)))


def test_iterate_closed_form_and_first_nonfinite():
    ks = jnp.asarray([0, 2, 5, 5, 9])
    x0 = (jnp.asarray([1.0, -3.0]),)
    ok = jnp.asarray(True)
    th, rows, status, k_bad, _ = iterate(lambda t: (2.0 * t[0],), x0, ks, ok)
    np.testing.assert_array_equal(th[0], np.array([2.0**k * np.array([1.0, -3.0]) for k in [0, 2, 5, 5, 9]]))
    assert bool(np.all(rows)) and int(status) == Status.FINISHED and int(k_bad) == -1
    # x -> x^2 from 1e80 overflows at k = 2 (1e320); NaN from the first bad save on.
    th, rows, status, k_bad, _ = iterate(lambda t: t * t, jnp.asarray([1e80]), jnp.asarray([1, 2, 3]), ok)
    assert int(k_bad) == 2 and int(status) == Status.FAILED
    np.testing.assert_array_equal(rows, [True, False, False])
    assert float(th[0, 0]) == 1e160 and np.all(np.isnan(th[1:]))


def test_safe_inputs_marks_and_neutralises():
    data = sf.single_sample([1.0, 2.0])
    th, rho, _, ok = safe_inputs((jnp.asarray([np.nan, 1.0]),), 0.5, data)
    assert not bool(ok) and float(rho) == 0.0 and np.all(np.asarray(th[0]) == 0)
    _, _, status, _, _ = iterate(lambda t: t, th, jnp.asarray([1]), ok)
    assert int(status) == Status.NONFINITE_INPUT


def test_zero_time_and_extrapolation_closed_forms():
    assert float(zero_time(3.0, -1.5)) == 2.0
    assert float(zero_time(3.0, 0.0)) == 0.0 and float(zero_time(3.0, 2.0)) == 0.0
    # R(theta) = theta_0 + 2 theta_1 along v = (-1, -1): R = 5 falls at 3 per unit time.
    theta = (jnp.asarray(1.0), jnp.asarray(2.0))
    v = (jnp.asarray(-1.0), jnp.asarray(-1.0))
    dt, point = extrapolate_to_zero(lambda th: th[0] + 2.0 * th[1], theta, v)
    assert float(dt) == pytest.approx(5.0 / 3.0, rel=1e-15)
    assert float(point[0] + 2.0 * point[1]) == pytest.approx(0.0, abs=1e-15)
    dt0, point0 = extrapolate_to_zero(lambda th: th[0] + 2.0 * th[1], theta, v, moving=False)
    assert float(dt0) == 0.0 and float(point0[1]) == 2.0
    # the diagonal net's collapse: ||W||^2 / (-W . dW)
    W, dW = jnp.asarray([[3.0, 4.0]]), jnp.asarray([[-3.0, -4.0]])
    assert float(extrapolate_collapse(W, dW)) == 1.0


def test_linear_fill_on_a_pytree():
    saved = (jnp.zeros((3, 2)),)
    out = linear_fill(saved, jnp.asarray([False, True, True]), jnp.asarray([0.0, 0.5, 1.0]),
                      (jnp.asarray([2.0, 4.0]),), (jnp.asarray([0.0, 0.0]),))
    np.testing.assert_array_equal(out[0], [[0.0, 0.0], [1.0, 2.0], [0.0, 0.0]])
