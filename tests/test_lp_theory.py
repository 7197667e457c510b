"""lp-SAM closed forms of samflow.theory (docs/theory.md s.3.1, "lp-SAM").

The depth-2 field below is written directly from the definition of docs/theory.md
s.2 (eps = rho sign(G) |G|^(q-1) / ||G||_q^(q-1) over both layers), not taken from
samflow, and the rates are checked against it and against the l2 / linf closed forms.
"""

import numpy as np
import pytest
from scipy.optimize import brentq

from samflow import theory

MU = np.array([0.2, 0.4, 0.6, 0.8, 1.0])


def lp_field_depth2(u, v, rho, mu, p):
    """Rescaled lp-SAM field on one sample, depth 2, layers u, v: g(theta + eps)
    with g = (mu v, mu u) the negative gradient direction and eps the maximiser
    of <grad, eps> over ||eps||_p <= rho (grad = -s g)."""
    q = p / (p - 1.0)
    G = -np.concatenate([mu * v, mu * u])
    eps = rho * np.sign(G) * np.abs(G) ** (q - 1) / np.sum(np.abs(G) ** q) ** ((q - 1) / q)
    uh, vh = u + eps[: mu.size], v + eps[mu.size:]
    return mu * vh, mu * uh


@pytest.mark.parametrize("p", [1.25, 1.5, 2.0, 3.0, 4.0, 8.0, 64.0])
@pytest.mark.parametrize("a", [0.1, 0.45, 0.9, 2.5])
def test_rates_equal_the_field_at_equal_init(p, a):
    w = a * np.ones(MU.size)  # rho = 1
    du, dv = lp_field_depth2(w, w, 1.0, MU, p)
    np.testing.assert_allclose(du, dv, rtol=0, atol=1e-15)  # the layers stay equal
    np.testing.assert_allclose(theory.lp_growth_rates(MU, a=a, p=p), du / w, rtol=1e-12, atol=1e-14)


def test_p2_is_l2():
    a = np.geomspace(0.05, 5.0, 41)
    rates = theory.lp_growth_rates(MU, a=a, p=2.0)
    l2 = theory.l2_growth_rate(MU, w=a[:, None] * np.ones(MU.size), rho=1.0)
    np.testing.assert_allclose(rates, l2, rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(theory.lp_first_dominant(MU, a=a, p=2.0), theory.l2_first_dominant(MU, a=a))
    for rho in (0.3, 1.0, 7.0):
        lp, l2m = theory.lp_alpha_marks(MU, p=2.0, rho=rho), theory.l2_alpha_marks(MU, rho=rho)
        np.testing.assert_allclose(lp.all_shrink, l2m.all_shrink, rtol=1e-12)
        np.testing.assert_allclose(lp.major_first, l2m.major_first, rtol=1e-12)
    # mu = (1, 2): the worked example of s.3.1, 1 / sqrt 10 and 3 / sqrt 10
    mk = theory.lp_alpha_marks([1.0, 2.0], p=2.0)
    np.testing.assert_allclose([mk.all_shrink, mk.major_first], [1 / np.sqrt(10), 3 / np.sqrt(10)], rtol=1e-12)


def test_p_inf_is_linf_threshold():
    # q = 1: rate_j = mu_j (1 - 1/a) for every j; both marks at a = 1 (alpha = rho).
    for a in (0.5, 1.0, 3.0):
        np.testing.assert_allclose(theory.lp_growth_rates(MU, a=a, p=np.inf), MU * (1 - 1 / a), rtol=1e-14, atol=1e-16)
    mk = theory.lp_alpha_marks(MU, p=np.inf)
    assert float(mk.all_shrink) == 1.0 and float(mk.major_first) == 1.0
    assert float(theory.lp_major_shrink_mark(MU, p=np.inf)) == 1.0
    # and the marks tend there as p grows (q - 1 = 1 / (p - 1))
    gaps = [abs(float(theory.lp_alpha_marks(MU, p=p).major_first) - 1.0) for p in (8.0, 64.0, 512.0, 4096.0)]
    assert all(g1 > g2 for g1, g2 in zip(gaps, gaps[1:])) and gaps[-1] < 1e-3


@pytest.mark.parametrize("p", [1.25, 1.5, 3.0, 4.0, 8.0, 64.0])
def test_major_first_mark_is_where_the_major_rate_becomes_largest(p):
    """The closed form against a root of rate_d - max_{j<d} rate_j (brentq on the field)."""
    def margin(a):
        w = a * np.ones(MU.size)
        r = lp_field_depth2(w, w, 1.0, MU, p)[0] / w
        return r[-1] - np.max(r[:-1])

    root = brentq(margin, 1e-3, 1e3, xtol=1e-15, rtol=1e-15)
    mark = float(theory.lp_alpha_marks(MU, p=p).major_first)
    assert mark == pytest.approx(root, rel=1e-12)
    assert theory.lp_first_dominant(MU, a=mark * (1 + 1e-9), p=p) == 5
    assert theory.lp_first_dominant(MU, a=mark * (1 - 1e-9), p=p) == 4


@pytest.mark.parametrize("p", [1.5, 3.0, 8.0])
def test_shrink_marks_zero_the_rates(p):
    shrink = float(theory.lp_alpha_marks(MU, p=p).all_shrink)
    major = float(theory.lp_major_shrink_mark(MU, p=p))
    assert theory.lp_growth_rates(MU, a=shrink, p=p)[0] == pytest.approx(0.0, abs=1e-14)
    assert theory.lp_growth_rates(MU, a=major, p=p)[-1] == pytest.approx(0.0, abs=1e-14)
    assert np.all(theory.lp_growth_rates(MU, a=shrink * 0.999, p=p) < 0)
    # p > 2 (q < 2): the major shrink mark lies above the all-shrink mark; rate_j = 0 at c mu_j^(q-1)
    assert shrink < major


def test_issue_example_p3_major_shrinks_first():
    """p = 3, a = 0.5 (issue 27's example, where features 5, 4, 3 die in that
    order): 5 and 4 shrink from the start, 5 fastest; 1-3 grow, feature 2 leads."""
    r = theory.lp_growth_rates(MU, a=0.5, p=3.0)
    assert np.all(r[3:] < 0) and np.all(r[:3] > 0)
    assert np.all(np.diff(r[1:]) < 0)
    assert theory.lp_first_dominant(MU, a=0.5, p=3.0) == 2


def test_broadcast_and_refusals():
    r = theory.lp_growth_rates(MU, a=np.array([[0.5], [1.0]]), p=np.array([2.0, 3.0, 8.0]))
    assert r.shape == (2, 3, 5)
    np.testing.assert_allclose(r[1, 1], theory.lp_growth_rates(MU, a=1.0, p=3.0), rtol=0)
    for bad in (1.0, 0.5, np.nan, -2.0, "3"):
        with pytest.raises(ValueError, match="p must be a number in"):
            theory.lp_growth_rates(MU, a=1.0, p=bad)
    with pytest.raises(ValueError, match="a \\(= alpha / rho\\)"):
        theory.lp_growth_rates(MU, a=0.0, p=3.0)
    with pytest.raises(TypeError):
        theory.lp_growth_rates(MU, 1.0, 3.0)
    assert theory._lp_dual(3.0) == pytest.approx(1.5, rel=1e-15)
