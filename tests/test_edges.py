"""Regime edges by vectorized bisection (samflow.edges, re-exported by samflow.analysis).

Values: docs/theory.md s.3.1 (depth-2 major-first mark, closed form), s.3.2
(growth rates at depth L), the linf rule w_j - rho of one sign, and the
collapse edge of mu = (0.2, ..., 1.0) from issue 15 (0.347268815 +- 1e-8).
"""

import numpy as np
import pytest

import samflow as sf
from samflow import theory
from samflow.analysis import collapse_edge, major_first_edge, regime_label
from samflow.edges import COLLAPSE_SEARCH, MAJOR_FIRST_SEARCH, EdgeSearch
from samflow.atlas import l2_first_leader_mark

MU5 = np.array([0.2, 0.4, 0.6, 0.8, 1.0])


def test_major_first_edge_depth2_is_the_closed_form():
    # (mu_(d-1) + mu_d) / (sqrt 2 ||mu||) = 1.8 / (sqrt 2 sqrt 2.2) = 0.858116...
    closed = 1.8 / (np.sqrt(2.0) * np.linalg.norm(MU5))
    res = major_first_edge(MU5)
    assert res.edge.shape == ()
    assert abs(float(res.edge) - closed) < 1e-9
    assert abs(float(res.edge) - 0.858116) < 1e-6
    assert res.lo <= closed <= res.hi and bool(res.converged)
    assert res.hi / res.lo - 1 <= 2e-10


def test_major_first_edge_batched_over_spectra_and_depths(rng):
    # Several spectra of different d in one call: each equals the closed form
    # (depth 2) or the theory's growth-rate crossing (depth L, computed in NumPy).
    mus = [np.sort(rng.uniform(0.05, 1.0, d)) for d in (2, 3, 7, 12)]
    mus = [m / m[-1] for m in mus]
    res = major_first_edge(mus, depth=2)
    want = [float(theory.l2_alpha_marks(m, rho=1.0).major_first) for m in mus]
    np.testing.assert_allclose(res.edge, want, rtol=1e-9)
    depths = [3, 4, 5, 6]
    res = major_first_edge(mus, depth=depths)
    want = [l2_first_leader_mark(m, L) for m, L in zip(mus, depths)]
    np.testing.assert_allclose(res.edge, want, rtol=1e-9)
    # A spectrum alone equals the same spectrum padded in a batch with a longer one.
    alone = major_first_edge(mus[0], depth=3)
    assert float(alone.edge) == res.edge[0] or abs(float(alone.edge) / res.edge[0] - 1) < 1e-10


def test_odd_depth_has_a_lower_first_leader_edge():
    # Odd L: the field mu * w_hat^(L-1) >= 0; at small a the perturbation overshoots
    # and the major feature leads first again (d -> minor -> d along a).
    low = major_first_edge(MU5, depth=3, which="first")
    assert abs(float(low.edge) - l2_first_leader_mark(MU5, 3, "first")) < 1e-9
    top = major_first_edge(MU5, depth=3)
    assert float(low.edge) < float(top.edge)
    rates = theory.l2_growth_rate(MU5, w=np.full((1, 5), 0.5 * float(low.edge)), rho=1.0, depth=3)
    assert np.argmax(rates) == 4  # below the lower edge feature d leads
    # Even depth: no such change (minor features lead at every small a).
    assert np.isnan(major_first_edge(MU5, depth=4, which="first").edge)


def test_unconverged_edge_is_nan_with_its_bracket():
    """A bisection that runs out of rounds has a bracket, not an edge: `edge` is NaN
    (it was the bracket's midpoint, and the atlas printed such depth-6 collapse edges
    to 4 digits), the bracket holds the converged edge, `converged` is False."""
    full = major_first_edge(MU5, depth=3)
    short = major_first_edge(MU5, depth=3, search=EdgeSearch(max_rounds=2))
    assert bool(full.converged) and np.isfinite(full.edge)
    assert not bool(short.converged) and np.isnan(short.edge)
    assert short.lo < full.lo <= full.hi < short.hi  # the converged edge inside the short bracket
    assert short.hi / short.lo - 1 > 1e-3 and int(short.changes) == int(full.changes) == 2  # d, minor, d (odd L)


def test_linf_major_first_edge_is_alpha_equals_rho():
    # Equal init: w_j - rho has one sign for every j (docs/theory.md s.3.1, s.3.2).
    res = major_first_edge([MU5, MU5[:3] / 0.6], depth=[2, 4], method="linf")
    np.testing.assert_allclose(res.edge, 1.0, rtol=1e-9)
    odd = major_first_edge(MU5, depth=3, method="linf")
    assert np.isnan(odd.edge) and int(odd.changes) == 0


def test_multi_sample_edge_tends_to_the_mean_spectrum(rng):
    # Small weights: every margin ~ 0, r = s(0) mean_i y_i x_i (s.5): at a small
    # rho the multi-sample edge is the one-sample edge of mu_bar, to O(rho^2).
    data = sf.datasets.increasing_scale(6, 4, 3)
    mu_bar = np.mean(np.asarray(data.y)[:, None] * np.asarray(data.X), axis=0)
    res = major_first_edge(data, depth=2, rho=1e-4)
    assert abs(float(res.edge) / l2_first_leader_mark(mu_bar, 2) - 1) < 1e-6
    far = major_first_edge(data, depth=2, rho=1.0)
    assert abs(float(far.edge) / float(res.edge) - 1) > 1e-4  # and it does depend on rho


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(mu=[0.2, -0.4]), "mu\\[0\\] must be finite and > 0"),
        (dict(mu=[1.0]), "d >= 2"),
        (dict(mu=[1.0, 0.5]), "last feature must be the major one"),
        (dict(mu=MU5, depth=1), "depth must be an integer >= 2"),
        (dict(mu=MU5, method="gd"), "method must be 'l2', 'lp' or 'linf'"),
        (dict(mu=MU5, search=(1e-3, 1e2)), "search must be a samflow.edges.EdgeSearch"),
        (dict(mu=MU5, rho=-1.0), "rho must be a finite number > 0"),
        (dict(mu=MU5, rho=float("inf")), "rho must be a finite number > 0"),
        (dict(mu=MU5, rho=True), "rho must be a finite number > 0, got True"),  # ran as rho = 1
        (dict(mu=[MU5, MU5], depth=[2, 3, 4]), "do not broadcast"),
    ],
)
def test_edges_refuse_bad_input_in_one_line(kwargs, match):
    for fn in (major_first_edge, collapse_edge):
        with pytest.raises(ValueError, match=match) as err:
            fn(**kwargs)
        assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(rtol=0.0), "rtol must be a number in"),
        (dict(rtol=0.5), "rtol must be a number in"),
        (dict(bracket=(1.0, 0.5)), "bracket must be"),
        (dict(bracket="ab"), "bracket must be"),
        (dict(bracket=(0.0, 1.0)), "bracket must be"),
        (dict(scan=1), "scan must be an integer >= 2"),
        (dict(scan=8.0), "scan must be an integer >= 2"),
        (dict(max_rounds=0), "max_rounds must be an integer >= 1"),
        (dict(max_rounds=True), "max_rounds must be an integer >= 1"),
        (dict(rtol=float("nan")), "rtol must be a number in"),
        (dict(bracket=(1e-3, float("inf"))), "bracket must be"),
    ],
)
def test_edge_search_refuses_bad_knobs_in_one_line(kwargs, match):
    with pytest.raises(ValueError, match=match) as err:
        EdgeSearch(**kwargs)
    assert "\n" not in str(err.value)


def test_edge_search_fills_each_edge_default_and_the_0_1_keywords_are_refused():
    assert EdgeSearch(rtol=1e-8).over(COLLAPSE_SEARCH) == EdgeSearch((1e-2, 1e1), 16, 1e-8, 80)
    assert EdgeSearch(bracket=[1, 3]).over(MAJOR_FIRST_SEARCH) == EdgeSearch((1.0, 3.0), 64, 1e-10, 200)
    new = major_first_edge(MU5, depth=3, search=EdgeSearch(scan=32, rtol=1e-6))
    # Removed in 0.3.0 (deprecated through 0.2.x): one line that names the replacement.
    with pytest.raises(TypeError, match=r"^major_first_edge\(scan=..., rtol=...\): these keywords were removed in "
                                        r"samflow 0\.3\.0; pass search=EdgeSearch\(scan=..., rtol=...\)$"):
        major_first_edge(MU5, depth=3, scan=32, rtol=1e-6)
    fine = major_first_edge(MU5, depth=3)
    assert new.converged and float(new.hi / new.lo) - 1 <= 2e-6
    assert fine.converged and float(fine.hi / fine.lo) - 1 <= 2e-10
    assert int(new.n_solves) < int(fine.n_solves)
    np.testing.assert_allclose(new.edge, fine.edge, rtol=2e-6)
    with pytest.raises(TypeError, match="unexpected keyword argument 'rtl'"):
        collapse_edge(MU5, rtl=1e-3)
    # One keyword is "this keyword was" (it said "these keywords were" for one too).
    with pytest.raises(TypeError, match=r"^collapse_edge\(rtol=\.\.\.\): this keyword was removed in samflow 0\.3\.0; "
                                        r"pass search=EdgeSearch\(rtol=\.\.\.\)$"):
        collapse_edge(MU5, rtol=1e-8, search=EdgeSearch(rtol=1e-7))


@pytest.mark.slow
def test_collapse_edge_depth2_value_and_cost():
    # Issue 15: 0.347268815 +- 1e-8. The bisection is tightened to 3e-9 relative
    # (43 one-cell solves); the solver keeps its defaults (rtol 1e-8, log
    # coordinates): the edge, 0.3472688151, did not move with solver rtol 1e-10,
    # 1e-11, 1e-12 nor in linear coordinates at 1e-11 and 1e-12.
    res = collapse_edge(MU5, search=EdgeSearch(rtol=3e-9))
    assert abs(float(res.edge) - 0.347268815) < 1e-8
    assert bool(res.converged) and int(res.changes) == 1
    assert res.hi / res.lo - 1 <= 6e-9
    assert int(res.n_solves) < 50
    # The edge lies between the marks of s.3.1 (all-shrink < edge < major-first).
    marks = theory.l2_alpha_marks(MU5, rho=1.0)
    assert marks.all_shrink < res.edge < marks.major_first
    # Analysis re-exports the same function.
    import samflow.edges

    assert collapse_edge is samflow.edges.collapse_edge


@pytest.mark.slow
def test_collapse_edge_batched_matches_single_and_the_solve():
    # Padding (d = 2, 5 with a d = 8 spectrum) and batching leave each edge where
    # it is alone, to the bisection's tolerance; a public solve on either side
    # collapses / does not.
    mus = [np.array([0.5, 1.0]), MU5, np.arange(1, 9) / 8]
    batch = collapse_edge(mus, depth=2, search=EdgeSearch(rtol=1e-7))
    alone = collapse_edge(MU5, search=EdgeSearch(rtol=1e-7))
    assert abs(batch.edge[1] / float(alone.edge) - 1) < 3e-7
    # docs/theory.md s.3.1, mu = (1, 2) (same direction as (0.5, 1)): collapse up to ~0.52.
    assert 0.50 < batch.edge[0] < 0.54
    a = np.array([batch.lo[1] * (1 - 1e-5), batch.hi[1] * (1 + 1e-5)])
    tr = sf.solve("l2", sf.single_sample(MU5), a, np.ones(2), np.linspace(0, 400, 401), clock="tau",
                  alpha_batched=True)
    assert list(regime_label(tr.beta, tr.status)) == [1, 2]


@pytest.mark.slow
def test_major_first_edge_agrees_with_the_solved_regime():
    # The first leader read from the field at t = 0 is the regime of the trajectory:
    # 3 just above the edge, 2 just below (tau clock, depth 2).
    e = float(major_first_edge(MU5).edge)
    a = np.array([e * (1 - 1e-3), e * (1 + 1e-3)])
    tr = sf.solve("l2", sf.single_sample(MU5), a, np.ones(2), np.geomspace(1e-3, 200, 400), clock="tau",
                  alpha_batched=True)
    assert list(regime_label(tr.beta, tr.status)) == [2, 3]


@pytest.mark.slow
def test_linf_collapse_edge_is_alpha_equals_rho():
    # Equal init: w_j - rho has one sign for every j (s.3.1), so the edge is a = 1.
    res = collapse_edge([MU5, np.array([0.5, 1.0])], depth=2, method="linf", search=EdgeSearch(rtol=1e-6))
    np.testing.assert_allclose(res.edge, 1.0, rtol=2e-6)
    assert np.all(res.converged)
    assert np.isnan(collapse_edge(MU5, depth=3, method="linf").edge)
