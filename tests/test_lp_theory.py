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


# --- against samflow's lp field and edges (samflow.flows, samflow.edges) ----------------


@pytest.mark.parametrize("p", [1.25, 1.5, 3.0, 8.0])
@pytest.mark.parametrize("a", [0.3, 0.9, 2.0])
def test_rates_are_the_fields_log_velocity(p, a):
    """rate_j = d log w_j / dtau of the engine's field at w = alpha 1 (rho = 1), both
    clocks' shapes: velocity (tau clock) and, at p <= 2, the log-coordinate field."""
    import jax.numpy as jnp

    import samflow as sf
    from samflow.flows import log_velocity, velocity

    data = sf.single_sample(MU)
    W = a * jnp.ones((2, MU.size))
    V, _ = velocity(W, jnp.asarray(1.0), sf.Method.LP, data, sf.Logistic(), clock="tau", p=jnp.asarray(p))
    want = theory.lp_growth_rates(MU, a=a, p=p)
    np.testing.assert_allclose(np.asarray(V) / a, np.broadcast_to(want, (2, MU.size)), rtol=1e-12, atol=1e-14)
    if p <= 2:
        dx, _ = log_velocity(jnp.log(W), jnp.ones_like(W), jnp.asarray(1.0), sf.Method.LP, data, sf.Logistic(), True,
                             jnp.asarray(p))
        np.testing.assert_allclose(np.asarray(dx), np.broadcast_to(want, (2, MU.size)), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("p", [1.5, 3.0])
def test_rates_are_a_finite_difference_of_the_solution(p):
    """(log w(h) - log w(0)) / h of an lp solve (tau clock, rtol 1e-12) tends to the
    rates: central differences at h and h/2, error O(h^2)."""
    import samflow as sf

    a, h = 0.9, 1e-3
    tr = sf.solve("lp", sf.single_sample(MU), a, 1.0, [h, 2 * h], clock="tau", p=p,
                  settings=sf.SolverSettings(rtol=1e-12, atol=1e-14, coords="linear"))
    w = np.sqrt(np.asarray(tr.beta))  # beta = w^2 (equal layers, positive)
    # second-order one-sided difference of log w at tau = 0 from w(h), w(2h)
    fd = (4 * np.log(w[0] / a) - np.log(w[1] / a)) / (2 * h)
    np.testing.assert_allclose(fd, theory.lp_growth_rates(MU, a=a, p=p), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("p", [1.5, 3.0, 4.0, 8.0])
def test_major_first_edge_from_the_field_is_the_closed_form(p):
    """samflow.edges.major_first_edge (the first leader read off the field by
    bisection) equals lp_alpha_marks' closed form to 1e-10, for one p and for a
    list of p at once."""
    from samflow import edges

    mark = float(theory.lp_alpha_marks(MU, p=p).major_first)
    res = edges.major_first_edge(MU, 2, "lp", p=p)
    assert res.edge.shape == () and bool(res.converged)
    assert float(res.edge) == pytest.approx(mark, rel=1e-10)


def test_edges_take_a_list_of_p_and_p2_is_l2():
    from samflow import edges

    ps = [1.5, 2.0, 3.0, 4.0, 8.0]
    res = edges.major_first_edge(MU, 2, "lp", p=ps)
    assert res.edge.shape == (5,)
    np.testing.assert_allclose(res.edge, theory.lp_alpha_marks(MU, p=np.array(ps)).major_first, rtol=1e-10)
    np.testing.assert_allclose(res.edge[1], edges.major_first_edge(MU, 2, "l2").edge, rtol=1e-10)
    s = edges.EdgeSearch(rtol=1e-4)
    lp2, l2 = edges.collapse_edge(MU, 2, "lp", p=2.0, search=s), edges.collapse_edge(MU, 2, "l2", search=s)
    assert bool(lp2.converged) and float(lp2.edge) == pytest.approx(float(l2.edge), rel=2e-4)
    # scale invariance: the tau flow depends on alpha / rho only, so the collapse edge
    # lies above the all-shrink mark and below the major-first edge
    assert float(theory.lp_alpha_marks(MU, p=2.0).all_shrink) < float(lp2.edge) < float(res.edge[1])


def test_major_death_edge_p3():
    """p = 3: the major feature dies below a ~ 0.5415 (issue 27's a = 0.5 loses it
    first), above the collapse edge and below the major-shrink mark (its rate is
    < 0 at the start there, yet the rising minor features rescue it)."""
    import samflow as sf
    from samflow import edges

    s = edges.EdgeSearch(rtol=1e-5)
    de = edges.major_death_edge(MU, 2, p=3.0, search=s)
    ce = edges.collapse_edge(MU, 2, "lp", p=3.0, search=s)
    assert bool(de.converged) and bool(ce.converged)
    assert float(ce.edge) < float(de.edge) < float(theory.lp_major_shrink_mark(MU, p=3.0))
    assert float(de.edge) == pytest.approx(0.5415, abs=2e-4)
    # the outcome on either side, from the solver directly
    for a, dies in ((float(de.edge) * 0.99, True), (float(de.edge) * 1.01, False)):
        tr = sf.solve("lp", sf.single_sample(MU), a, 1.0, [1.0, 200.0], clock="tau", p=3.0)
        assert bool(np.isfinite(np.asarray(tr.slide_time)[:, -1]).any()) is dies, a


def test_edge_refusals():
    from samflow import edges

    with pytest.raises(ValueError, match="method 'lp' needs the exponent p"):
        edges.major_first_edge(MU, 2, "lp")
    with pytest.raises(ValueError, match="takes no p"):
        edges.collapse_edge(MU, 2, "l2", p=3.0)
    with pytest.raises(ValueError, match="p must be in \\(1, inf\\)"):
        edges.major_first_edge(MU, 2, "lp", p=[3.0, 0.5])
    with pytest.raises(ValueError, match="p must be > 2 for major_death_edge"):
        edges.major_death_edge(MU, 2, p=1.5)
    with pytest.raises(ValueError, match="do not broadcast"):
        edges.major_first_edge([MU, MU], 2, "lp", p=[2.0, 3.0, 4.0])
