"""Closed forms of samflow.theory against independent integrations (docs/theory.md s.3).

The right-hand sides below are written directly from docs/theory.md, not taken from
samflow, and integrated with scipy's solve_ivp at rtol 1e-10.
"""

import numpy as np
import pytest
from scipy.integrate import solve_ivp

from samflow import analysis, theory

RTOL = 1e-10
ATOL = 1e-13


def integrate(f, y0, t_end, t_eval=None, events=None, method="DOP853"):
    return solve_ivp(
        f, (0.0, t_end), np.asarray(y0, float), t_eval=t_eval, events=events,
        rtol=RTOL, atol=ATOL, method=method,
    )


def l2_field_general(W, rho, mu):
    """Rescaled l2-SAM field from section 2/3 on all layers: g(theta - rho g/||g||)."""

    def g(W):
        L = W.shape[0]
        return np.stack([mu * np.prod(np.delete(W, l, axis=0), axis=0) for l in range(L)])

    G = g(W)
    return g(W - rho * G / np.linalg.norm(G))


# --- GD -------------------------------------------------------------------------


def test_gd_depth2_matches_integration():
    mu = np.array([0.5, 1.0, 2.0])
    alpha = np.array([0.3, 0.1, 0.02])
    taus = np.array([0.0, 0.5, 1.7, 3.0])
    sol = integrate(lambda t, w: mu * w, alpha, taus[-1], t_eval=taus)
    w = theory.gd_depth2_symmetric(mu, alpha=alpha, tau=taus)
    assert w.shape == (4, 3)
    np.testing.assert_allclose(w, sol.y.T, rtol=1e-8)
    # A scalar alpha broadcasts to every coordinate.
    np.testing.assert_allclose(theory.gd_depth2_symmetric(mu, alpha=0.1, tau=2.0), 0.1 * np.exp(2 * mu))
    # Major feature dominates from the start, whatever alpha (same alpha_j).
    assert np.all(np.argmax(theory.gd_depth2_symmetric(mu, alpha=0.01, tau=taus[1:]), -1) == 2)


# --- linf-SAM, depth 2 ----------------------------------------------------------


def linf_depth2_field(rho, mu):
    return lambda t, w: mu * np.sign(w) * (np.abs(w) - rho)


def test_linf_depth2_matches_integration_with_sliding():
    mu = np.array([1.0, 2.0, 3.0])
    rho = 0.5
    alpha = np.array([0.2, 0.5, 0.8])  # below, at, above rho
    taus = np.linspace(0.0, 2.0, 41)
    w = theory.linf_depth2_symmetric(mu, alpha=alpha, rho=rho, tau=taus)
    tz = theory.linf_zero_time(mu, alpha=alpha, rho=rho)
    assert tz[0] == pytest.approx(np.log(rho / (rho - alpha[0])) / mu[0], rel=1e-14)
    assert np.isinf(tz[1]) and np.isinf(tz[2])
    for j in range(3):
        f = linf_depth2_field(rho, mu[j : j + 1])
        hit = lambda t, y: y[0]
        hit.terminal = True
        sol = integrate(f, alpha[j : j + 1], taus[-1], events=hit, method="RK45")
        if j == 0:
            # Reaches 0 at the closed-form time, and stays there (Filippov sliding).
            assert sol.t_events[0][0] == pytest.approx(tz[0], rel=1e-8)
            after = taus >= tz[0]
            assert np.all(w[after, 0] == 0.0)
        pre = taus < sol.t[-1] - 1e-12  # before the weight reaches 0 (if it does)
        dense = integrate(f, alpha[j : j + 1], taus[pre][-1], t_eval=taus[pre])
        np.testing.assert_allclose(w[pre, j], dense.y[0], rtol=1e-8, atol=1e-12)
    assert np.all(w[:, 1] == rho)


@pytest.mark.parametrize("L", [4, 6])
def test_linf_zero_time_even_depth(L):
    mu = np.array([0.7, 1.3])
    rho = 0.8
    alpha = np.array([0.3, 0.6])
    tz = theory.linf_zero_time(mu, alpha=alpha, rho=rho, depth=L)
    for j in range(2):
        hit = lambda t, y: y[0]
        hit.terminal = True
        sol = integrate(lambda t, w: mu[j] * (w - rho) ** (L - 1), [alpha[j]], 1e3, events=hit)
        assert sol.t_events[0][0] == pytest.approx(tz[j], rel=1e-8)
    # Depth 2 is the limit of the even-depth formula.
    assert theory.linf_zero_time(mu, alpha=0.0, rho=rho, depth=L) == pytest.approx([0.0, 0.0])


@pytest.mark.parametrize("L", [3, 5])
def test_linf_odd_depth_never_reaches_zero(L):
    mu = np.array([1.0, 2.0])
    rho, alpha = 0.8, np.array([0.1, 0.5])
    assert np.all(np.isinf(theory.linf_zero_time(mu, alpha=alpha, rho=rho, depth=L)))
    sol = integrate(lambda t, w: mu * (w - rho) ** (L - 1), alpha, 200.0)
    assert np.all(np.diff(sol.y, axis=1) >= -1e-15)  # rises ...
    assert np.all(sol.y < rho)  # ... towards rho, never past it


@pytest.mark.parametrize("L", [3, 4])
def test_linf_blowup_time(L):
    mu = np.array([1.0, 2.0, 3.0])
    rho = 0.5
    alpha = np.array([1.0, 0.8, 0.5])
    tb = theory.linf_blowup_time(mu, alpha=alpha, rho=rho, depth=L)
    assert np.isinf(tb[2])
    big = 1e7 if L == 3 else 1e4  # past this the solver's step underflows
    for j in range(2):
        hit = lambda t, y: y[0] - rho - big
        hit.terminal = True
        sol = integrate(lambda t, w: mu[j] * (w - rho) ** (L - 1), [alpha[j]], 100.0, events=hit)
        # Time from w - rho = big to infinity is big^-(L-2) / ((L-2) mu) <= 1e-7.
        assert sol.t_events[0][0] == pytest.approx(tb[j], rel=1e-6)
    assert np.all(np.isinf(theory.linf_blowup_time(mu, alpha=alpha, rho=rho, depth=2)))


def test_linf_limit_index_is_first_blowup():
    mu = np.array([1.0, 2.0, 3.0])
    rho = 0.5
    alpha = np.array([0.9, 0.6, 0.55])  # scores mu (alpha - rho): 0.4, 0.2, 0.15
    assert theory.linf_limit_index(mu, alpha=alpha, rho=rho, depth=3) == 1  # a minor feature
    assert theory.linf_limit_index(mu, alpha=alpha, rho=rho, depth=2) == 3  # argmax mu
    big = 1e6
    events = []
    for j in range(3):
        ev = lambda t, y, j=j: y[j] - rho - big
        ev.terminal = True
        events.append(ev)
    sol = integrate(lambda t, w: mu * (w - rho) ** 2, alpha, 100.0, events=events)
    first = int(np.argmin([e[0] if e.size else np.inf for e in sol.t_events])) + 1
    assert first == 1
    tb = theory.linf_blowup_time(mu, alpha=alpha, rho=rho, depth=3)
    assert np.argmin(tb) + 1 == 1
    # No alpha_j above rho: limit direction 0. Batched alpha.
    batch = np.array([[0.1, 0.2, 0.3], alpha, [0.5, 0.5, 0.6]])
    np.testing.assert_array_equal(theory.linf_limit_index(mu, alpha=batch, rho=rho, depth=3), [0, 1, 3])
    # Large depth does not overflow.
    assert theory.linf_limit_index(mu, alpha=alpha, rho=rho, depth=400) == 1


# --- l2-SAM ---------------------------------------------------------------------


@pytest.mark.parametrize("L", [2, 3, 4])
def test_l2_growth_rate_matches_general_field(L):
    rng = np.random.default_rng(L)
    mu = np.array([1.0, 1.5, 2.0, 4.0])
    rho = 0.7
    for _ in range(5):
        w = rng.uniform(0.05, 2.0, size=4)
        v = l2_field_general(np.tile(w, (L, 1)), rho, mu)
        np.testing.assert_allclose(v, np.tile(v[0], (L, 1)), rtol=1e-12)  # stays symmetric
        np.testing.assert_allclose(
            theory.l2_growth_rate(mu, w=w, rho=rho, depth=L), v[0] / w, rtol=1e-10, atol=1e-12
        )


def test_l2_growth_rate_depth2_formula_and_rules():
    rng = np.random.default_rng(0)
    mu = np.array([1.0, 2.0, 3.0, 5.0])
    rho = 1.0
    W = rng.uniform(0.01, 3.0, size=(50, 4))
    rate = theory.l2_growth_rate(mu, w=W, rho=rho)
    N = np.linalg.norm(mu * W, axis=-1, keepdims=True)
    np.testing.assert_allclose(rate, mu * (1 - rho * mu / (np.sqrt(2) * N)), rtol=1e-13)
    thr = theory.l2_growth_threshold(mu, w=W, rho=rho)
    assert thr.shape == (50,)
    # Coordinate j grows exactly when mu_j < sqrt(2) N / rho ...
    np.testing.assert_array_equal(rate > 0, mu < thr[:, None])
    # ... and j outgrows k (mu_k < mu_j) exactly when sqrt(2) N / rho > mu_j + mu_k.
    for j in range(4):
        for k in range(j):
            np.testing.assert_array_equal(rate[:, j] > rate[:, k], thr > mu[j] + mu[k])
    # All-zero w: the perturbation is undefined.
    assert np.all(np.isnan(theory.l2_growth_rate(mu, w=np.zeros(4), rho=rho)))
    # Scale invariance (w, rho) -> (c w, c rho).
    np.testing.assert_allclose(theory.l2_growth_rate(mu, w=3 * W, rho=3 * rho), rate, rtol=1e-12)


def l2_depth2_flow(rho, mu):
    return lambda t, w: mu * w * (1 - rho * mu / (np.sqrt(2) * np.linalg.norm(mu * w)))


def test_l2_first_dominant_matches_integration():
    mu = np.array([1.0, 1.5, 2.5, 4.0])
    checked = 0
    for a in np.geomspace(0.2, 3.0, 25):
        rate = mu * (1 - mu / (np.sqrt(2) * a * np.linalg.norm(mu)))
        top2 = np.sort(rate)[-2:]
        if top2[1] - top2[0] < 1e-2:
            continue
        sol = integrate(l2_depth2_flow(1.0, mu), a * np.ones(4), 1e-3)
        assert theory.l2_first_dominant(mu, a=a) == np.argmax(sol.y[:, -1]) + 1
        checked += 1
    assert checked >= 15
    # docs/theory.md s.3 example mu = (1, 2): minor first at a = 0.7, major first at a = 1.
    np.testing.assert_array_equal(theory.l2_first_dominant([1.0, 2.0], a=[0.7, 1.0]), [1, 2])


def test_l2_alpha_marks():
    mu = np.array([1.0, 2.0])
    m = theory.l2_alpha_marks(mu, rho=1.0)
    assert m.all_shrink == pytest.approx(1 / np.sqrt(10), rel=1e-15)
    assert m.major_first == pytest.approx(3 / np.sqrt(10), rel=1e-15)
    # Proportional to rho; vectorised over rho.
    m2 = theory.l2_alpha_marks(mu, rho=np.array([1.0, 2.0]))
    np.testing.assert_allclose(m2.major_first, [3 / np.sqrt(10), 6 / np.sqrt(10)])
    # The marks are where the depth-2 growth rates at w = alpha 1 change sign / order.
    mu = np.array([0.5, 1.0, 2.0, 3.0])
    rho = 0.8
    m = theory.l2_alpha_marks(mu, rho=rho)
    eps = 1e-6
    r_lo = theory.l2_growth_rate(mu, w=np.full(4, m.all_shrink * (1 - eps)), rho=rho)
    r_hi = theory.l2_growth_rate(mu, w=np.full(4, m.all_shrink * (1 + eps)), rho=rho)
    assert np.all(r_lo < 0) and r_hi[0] > 0
    r_lo = theory.l2_growth_rate(mu, w=np.full(4, m.major_first * (1 - eps)), rho=rho)
    r_hi = theory.l2_growth_rate(mu, w=np.full(4, m.major_first * (1 + eps)), rho=rho)
    assert r_lo[2] > r_lo[3] and np.argmax(r_hi) == 3
    # d = 1: one mark.
    m1 = theory.l2_alpha_marks([2.0], rho=1.0)
    assert m1.all_shrink == m1.major_first == pytest.approx(1 / np.sqrt(2))


def test_l2_first_band_matches_integration():
    """The band with the largest mean |beta_j| = w_j^2 right after the start, from an
    integration of the depth-2 flow (one sample, several coordinates per band)."""
    mu = np.array([0.3, 0.4, 0.35, 0.6, 0.7, 0.65, 1.0, 0.9, 1.1])
    band = np.repeat(np.arange(3), 3)
    mark = theory.l2_major_band_mark(mu, band=band)
    m1 = np.array([mu[band == b].mean() for b in range(3)])
    m2 = np.array([(mu[band == b] ** 2).mean() for b in range(3)])
    n = np.linalg.norm(mu)
    # The mark: band 3's mean rate equals the best other band's there.
    assert mark == pytest.approx(np.max((m2[2] - m2[:2]) / (np.sqrt(2) * n * (m1[2] - m1[:2]))), rel=1e-14)
    seen = set()
    for a in np.geomspace(0.12, 1.5, 30):
        rate = np.array([(mu * (1 - mu / (np.sqrt(2) * a * n)))[band == b].mean() for b in range(3)])
        top2 = np.sort(rate)[-2:]
        if top2[1] - top2[0] < 1e-2:
            continue
        sol = integrate(l2_depth2_flow(1.0, mu), a * np.ones(9), 1e-3)
        w2 = sol.y[:, -1] ** 2
        measured = np.argmax([w2[band == b].mean() for b in range(3)]) + 1
        assert theory.l2_first_band(mu, a=a, band=band) == measured
        assert (measured == 3) == (a > mark)
        seen.add(int(measured))
    assert seen == {1, 2, 3}
    # One coordinate per band: the per-feature rule and mark.
    mu5 = np.array([0.2, 0.4, 0.6, 0.8, 1.0])
    a = np.geomspace(0.05, 3.0, 200)
    np.testing.assert_array_equal(theory.l2_first_band(mu5, a=a, band=np.arange(5)), theory.l2_first_dominant(mu5, a=a))
    assert theory.l2_major_band_mark(mu5, band=np.arange(5)) == pytest.approx(float(theory.l2_alpha_marks(mu5, rho=1.0).major_first), rel=1e-12)
    with pytest.raises(ValueError, match="band"):
        theory.l2_first_band(mu, a=0.5, band=band[:-1])
    with pytest.raises(ValueError, match="major band"):
        theory.l2_major_band_mark(mu[::-1], band=band)


def test_l2_collapse_below_all_shrink_mark():
    mu = np.array([1.0, 2.0])
    alpha = 0.9 * theory.l2_alpha_marks(mu, rho=1.0).all_shrink
    hit = lambda t, w: np.linalg.norm(w) - 1e-6
    hit.terminal = True
    sol = integrate(l2_depth2_flow(1.0, mu), alpha * np.ones(2), 50.0, events=hit, method="RK45")
    assert sol.status == 1  # reached 0 in finite tau
    assert np.all(np.diff(np.linalg.norm(sol.y, axis=0)) < 0)


# --- max margin -----------------------------------------------------------------


def test_max_margin_single_closed_forms():
    mu = np.array([0.5, 1.0, 2.0])
    np.testing.assert_allclose(theory.l1_max_margin_single(mu), [0, 0, 0.5])
    np.testing.assert_allclose(theory.l2_max_margin_single(mu), mu / 5.25, rtol=1e-15)
    X, y = mu[None, :], np.array([1.0])
    np.testing.assert_allclose(
        analysis.max_margin_direction(X, y, 1, normalize=False),
        theory.l1_max_margin_single(mu), atol=1e-9,
    )
    np.testing.assert_allclose(
        analysis.max_margin_direction(X, y, 2, normalize=False),
        theory.l2_max_margin_single(mu), atol=1e-9,
    )


# --- errors ---------------------------------------------------------------------


def test_errors():
    mu = np.array([1.0, 2.0])
    with pytest.raises(ValueError, match="rho must be >= 0"):
        theory.linf_depth2_symmetric(mu, alpha=0.1, rho=-1.0, tau=1.0)
    with pytest.raises(ValueError, match="alpha must be >= 0"):
        theory.linf_zero_time(mu, alpha=[-0.1, 0.2], rho=1.0)
    with pytest.raises(ValueError, match="tau must be >= 0"):
        theory.linf_depth2_symmetric(mu, alpha=0.1, rho=1.0, tau=-1.0)
    with pytest.raises(ValueError, match="mu must be finite and > 0"):
        theory.gd_depth2_symmetric([1.0, -2.0], alpha=0.1, tau=1.0)
    with pytest.raises(ValueError, match=r"mu must have shape \(d,\)"):
        theory.gd_depth2_symmetric(np.ones((2, 2)), alpha=0.1, tau=1.0)
    with pytest.raises(ValueError, match="alpha of shape"):
        theory.gd_depth2_symmetric(mu, alpha=np.ones(3), tau=1.0)
    with pytest.raises(ValueError, match="depth must be an integer >= 2"):
        theory.linf_blowup_time(mu, alpha=1.0, rho=0.5, depth=1)
    with pytest.raises(ValueError, match="depth must be an integer >= 2"):
        theory.linf_limit_index(mu, alpha=1.0, rho=0.5, depth=2.0)
    with pytest.raises(ValueError, match="w must have shape"):
        theory.l2_growth_rate(mu, w=np.ones(3), rho=1.0)
    with pytest.raises(ValueError, match="mu must be increasing"):
        theory.l2_alpha_marks([2.0, 1.0], rho=1.0)
    with pytest.raises(ValueError, match="a .* must be finite and > 0"):
        theory.l2_first_dominant(mu, a=0.0)
    with pytest.raises(ValueError, match="rho must be >= 0"):
        theory.l2_alpha_marks(mu, rho=-0.5)


# The old positional calls (before issue 13): alpha, rho, mu, ... or a, mu. With mu
# first and the rest keyword-only, each must raise TypeError, never compute with
# swapped arguments (a silent wrong number).
OLD_POSITIONAL_CALLS = [
    ("gd_depth2_symmetric", (0.1, [1.0, 2.0], 1.0)),
    ("linf_depth2_symmetric", (0.1, 0.5, [1.0, 2.0], 1.0)),
    ("linf_zero_time", (0.1, 0.5, [1.0, 2.0])),
    ("linf_zero_time", (0.1, 0.5, [1.0, 2.0], 2)),
    ("linf_blowup_time", (0.9, 0.5, [1.0, 2.0], 3)),
    ("linf_limit_index", (0.9, 0.5, [1.0, 2.0], 3)),
    ("l2_growth_rate", ([0.3, 0.3], 1.0, [1.0, 2.0])),
    ("l2_growth_rate", ([0.3, 0.3], 1.0, [1.0, 2.0], 3)),
    ("l2_growth_threshold", ([0.3, 0.3], 1.0, [1.0, 2.0])),
    ("l2_first_dominant", (0.7, [1.0, 2.0])),
    ("l2_alpha_marks", ([1.0, 2.0], 1.0)),
    ("l2_first_band", (0.7, [1.0, 2.0], [0, 1])),
    ("l2_major_band_mark", ([1.0, 2.0], [0, 1])),
]


@pytest.mark.parametrize("name, args", OLD_POSITIONAL_CALLS, ids=[f"{n}/{len(a)}" for n, a in OLD_POSITIONAL_CALLS])
def test_old_positional_order_raises(name, args):
    with pytest.raises(TypeError, match="positional argument"):
        getattr(theory, name)(*args)


def test_one_argument_order():
    """Every public function of samflow.theory takes mu first and every other
    argument by keyword only (the module's one argument order)."""
    import inspect

    for name in theory.__all__:
        f = getattr(theory, name)
        if not inspect.isfunction(f):
            continue
        params = list(inspect.signature(f).parameters.values())
        assert params[0].name == "mu" and params[0].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD, name
        assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params[1:]), name


def test_keyword_calls_match_the_closed_forms():
    """The keyword calls compute what the formulas say (mu = (1, 2), rho = 1)."""
    mu = np.array([1.0, 2.0])
    m = theory.l2_alpha_marks(mu, rho=1.0)
    assert float(m.all_shrink) == pytest.approx(1 / np.sqrt(10), rel=1e-15)
    assert float(m.major_first) == pytest.approx(3 / np.sqrt(10), rel=1e-15)
    np.testing.assert_allclose(theory.linf_zero_time(mu, alpha=0.25, rho=0.5), np.log(2.0) / mu, rtol=1e-15)
    np.testing.assert_allclose(theory.gd_depth2_symmetric(mu, alpha=0.1, tau=2.0), 0.1 * np.exp(2 * mu), rtol=1e-15)


def test_no_caller_passes_more_than_mu_by_position():
    """A static check of every call of a samflow.theory function in the package, the
    scripts and the examples (the figures call them only when drawn): mu alone by
    position, so no caller meets the TypeError at run time."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    names = set(theory.__all__)
    bad, seen = [], 0
    for path in [*root.joinpath("samflow").rglob("*.py"), *root.joinpath("scripts").rglob("*.py"),
                 *root.joinpath("examples").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                f = node.func
                name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
                if name in names and path.name != "theory.py":
                    seen += 1
                    if len(node.args) > 1 or any(isinstance(a, ast.Starred) for a in node.args):
                        bad.append(f"{path.relative_to(root)}:{node.lineno} {name}")
    assert seen >= 10, seen  # the figures and the atlas call them
    assert not bad, bad


def test_linf_limit_index_depth2_with_an_infinite_init_is_the_fastest_exponential():
    # Depth 2: argmax {mu_j : alpha_j > rho} whatever the gap. Before, the score
    # 0 * log(inf) was NaN and argmax picked feature 1.
    mu = np.array([1.0, 2.0, 3.0])
    assert theory.linf_limit_index(mu, alpha=[np.inf, np.inf, 0.5], rho=1.0, depth=2) == 2
    assert theory.linf_limit_index(mu, alpha=[np.inf, 5.0, 2.0], rho=1.0, depth=2) == 3
    assert theory.linf_limit_index(mu, alpha=[np.inf, 5.0, 2.0], rho=1.0, depth=3) == 1  # blows up at tau = 0
