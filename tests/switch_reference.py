"""Switch times of l2-SAM on one sample, by scipy alone (issue 35's references).

Independent of samflow's code: the field of docs/theory.md s.2-3 written here in
NumPy, (L, d) weights, any inits, in the clock tau (dW/dtau = g(W_hat)) or t
(dW/dt = s(z_hat) g(W_hat), logistic loss), integrated by `solve_ivp(DOP853)` with
one root-found event per pair of features on

    g_jk = log|beta_j| - log|beta_k| = sum_l (log|w_lj| - log|w_lk|),

the crossings walked in time order from the leader at the start (the fastest
growing of the features tied with the largest, as samflow's rule). Also the
slope dg/dt of each switch at the reference's root (for the tables).

Used by tests/test_switch_bounds.py and scripts/switch_accuracy.py.
"""

from __future__ import annotations

import numpy as np
import scipy.integrate
from scipy.special import expit


def prod_excl(W):
    """prod_{k != l} w_kj, (L, d)."""
    L = W.shape[0]
    out = np.ones_like(W)
    for l in range(L):
        for k in range(L):
            if k != l:
                out[l] *= W[k]
    return out


def field(W, rho, mu, clock):
    """l2-SAM: W_hat = W - rho g / ||g||, g(W) = mu * prod_excl(W) (= -grad L / s(z));
    tau: g(W_hat); t: s(z_hat) g(W_hat), s(z) = 1 / (1 + e^z) (logistic)."""
    g = mu * prod_excl(W)
    n = np.sqrt(np.sum(g * g))
    Wh = W - rho * g / n
    gh = mu * prod_excl(Wh)
    if clock == "tau":
        return gh
    z_hat = float(np.sum(mu * np.prod(Wh, axis=0)))
    return expit(-z_hat) * gh


def log_beta(W):
    return np.sum(np.log(np.abs(W)), axis=0)


def rates(W, rho, mu, clock):
    """d log|beta_j| / dclock."""
    return np.sum(field(W, rho, mu, clock) / W, axis=0)


def switches(W0, rho, mu, clock, t_end, rtol=1e-13):
    """[(time, from, to, slope)]: the leader's changes on (0, t_end], 1-based,
    with slope = d(log|beta_to| - log|beta_from|)/dclock at the root."""
    W0 = np.asarray(W0, float)
    L, d = W0.shape
    mu = np.asarray(mu, float)

    def f(t, y):
        return field(y.reshape(L, d), rho, mu, clock).ravel()

    pairs = [(i, j) for i in range(d) for j in range(i + 1, d)]
    events = [lambda t, y, i=i, j=j: float(log_beta(y.reshape(L, d))[i] - log_beta(y.reshape(L, d))[j])
              for i, j in pairs]
    sol = scipy.integrate.solve_ivp(f, (0.0, t_end), W0.ravel(), method="DOP853", rtol=rtol, atol=1e-300,
                                    events=events)
    assert sol.status == 0, sol.message
    lb0 = log_beta(W0)
    near = lb0 >= lb0.max() + np.log1p(-1e-9)
    lead = int(np.argmax(np.where(near, rates(W0, rho, mu, clock), -np.inf)))
    found = sorted((t, i, j, y) for (i, j), te, ye in zip(pairs, sol.t_events, sol.y_events)
                   for t, y in zip(te, ye) if t > 0)
    out = []
    for t, i, j, y in found:
        if lead in (i, j):
            new = j if lead == i else i
            r = rates(y.reshape(L, d), rho, mu, clock)
            out.append((t, lead + 1, new + 1, r[new] - r[lead]))
            lead = new
    return out
