"""Independent reference computations shared by the tests.

Nothing here calls samflow's flow or solver code: these are the second
implementations the tests compare against (and `run_check_script`, which runs
a reference script of tests/ in its own process), and the config texts the
command-line tests write (`toml_text`, `sweep_toml`).
"""

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
from scipy.integrate import solve_ivp

import samflow as sf

# Every solver test saves at this many times, so that the compilations
# (keyed on the number of save times) are shared across tests.
N_SAVE = 16

METHODS = ["gd", "l2", "linf", "usam"]


def _toml(v) -> str:
    """A TOML value: bool, int, float (repr: the same number), str, list or inline table."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return '"' + v + '"'
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {_toml(x)}" for k, x in v.items()) + " }"
    return "[" + ", ".join(_toml(x) for x in v) + "]"


def _is_table_array(v) -> bool:
    return isinstance(v, list) and bool(v) and all(isinstance(x, dict) for x in v)


def toml_text(doc: dict) -> str:
    """The TOML text of the config `doc`, a line a key in `doc`'s order: its plain keys
    first, then a `[table]` for each dict and a `[[table]]` for each list of dicts (a
    dict inside a table is written as an inline table). For the tests that write a
    config file; `tomllib.loads(toml_text(doc)) == doc`."""
    tables = {k: v for k, v in doc.items() if isinstance(v, dict) or _is_table_array(v)}
    lines = [f"{k} = {_toml(v)}" for k, v in doc.items() if k not in tables]
    for name, table in tables.items():
        for keys in table if isinstance(table, list) else [table]:
            lines += [f"[[{name}]]" if isinstance(table, list) else f"[{name}]"]
            lines += [f"{k} = {_toml(v)}" for k, v in keys.items()]
    return "\n".join(lines) + "\n"


def sweep_toml(name: str, methods, *, alpha, rho, t1, num, mu=(0.2, 0.6, 1.0), solver=None, output=None) -> str:
    """The TOML text of a small sweep config for the command-line tests: one sample
    `mu`, the grid `alpha` (alpha / rho: a list, or a {start, stop, num} table) x
    `rho`, real time to `t1` with `num` save times, then the `[solver]` keys and,
    last, the `[output]` keys given (so a test may append more output keys)."""
    doc = {"name": name, "methods": list(methods), "data": {"mu": list(mu)},
           "grid": {"alpha": alpha, "alpha_relative_to_rho": True, "rho": rho}, "time": {"t1": t1, "num": num}}
    for table, keys in (("solver", solver), ("output", output)):
        if keys is not None:
            doc[table] = keys
    return toml_text(doc)


# A sweep config for the command-line tests: 3 x 2 = 6 cells, gd only (its program
# compiles fastest); chunks of 2 cells and batches of 2 cells per device: 3 chunks,
# so a resumed run reuses some. Ends in [output]: a test may append output keys.
SMALL_SWEEP = sweep_toml("small", ["gd"], alpha=[0.01, 0.3, 2.0], rho=[0.05, 0.2], t1=1e3, num=8,
                         solver={"chunk_size": 2, "batch_size": 2}, output={"figures": False})


def rel_err(got, expected):
    """max |got - expected| / |expected| (elementwise)."""
    got = np.asarray(got, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    return float(np.max(np.abs(got - expected) / np.abs(expected)))


def random_data(rng, n, d):
    """n samples in R^d with labels +-1 (both labels present when n >= 2)."""
    X = rng.normal(size=(n, d))
    y = rng.choice([-1.0, 1.0], size=n)
    if n >= 2:
        y[0], y[1] = 1.0, -1.0
    return sf.Dataset.from_arrays(X, y)


def chain_loss(W, data, loss):
    """The empirical loss with beta written as an explicit chain of products
    (a second implementation of `samflow.loss_value`, exact at zeros under AD)."""
    b = W[0]
    for k in range(1, W.shape[0]):
        b = b * W[k]
    z = data.y * (data.X @ b)
    return jnp.mean(loss.value(z))


def grad_by_ad(W, data, loss):
    return jax.grad(chain_loss)(jnp.asarray(W), data, loss)


def eps_reference(G, rho, method):
    """The SAM perturbation of docs/theory.md section 2, from a gradient G (numpy)."""
    G = np.asarray(G, dtype=np.float64)
    if method == "gd":
        return np.zeros_like(G)
    if method == "l2":
        n = np.linalg.norm(G)
        return np.zeros_like(G) if n == 0 else rho * G / n
    if method == "linf":
        return rho * np.sign(G)
    if method == "usam":
        return rho * G
    raise ValueError(method)


def sym_depth2_l2_rhs(mu, rho):
    """dw_j/dtau = mu_j w_j (1 - rho mu_j / (sqrt(2) ||mu * w||)), docs/theory.md s.3."""
    mu = np.asarray(mu, dtype=np.float64)

    def rhs(tau, w):
        N = np.linalg.norm(mu * w)
        return mu * w * (1.0 - rho * mu / (np.sqrt(2.0) * N))

    return rhs


def sym_depth2_l2_collapse_time(mu, alpha, rho, radius=1e-9):
    """Collapse time of the symmetric depth-2 l2 flow by scipy (DOP853)."""
    mu = np.asarray(mu, dtype=np.float64)
    w0 = np.full(mu.shape, alpha, dtype=np.float64)

    def hit(tau, w):
        return np.linalg.norm(w) - radius

    hit.terminal = True
    hit.direction = -1
    sol = solve_ivp(
        sym_depth2_l2_rhs(mu, rho), (0.0, 100.0), w0, method="DOP853",
        rtol=1e-12, atol=1e-15, events=hit,
    )
    assert sol.t_events[0].size == 1, "reference solve did not collapse"
    return float(sol.t_events[0][0])


def sym_depth2_l2_real_time(mu, alpha, rho, taus):
    """Real time t(tau) of the symmetric depth-2 l2 flow, logistic loss, by scipy:
    dt/dtau = 1 / sigmoid(-z_hat) = 1 + exp(z_hat), z_hat = <w_hat^2, mu>."""
    mu = np.asarray(mu, dtype=np.float64)
    rhs_w = sym_depth2_l2_rhs(mu, rho)

    def rhs(tau, y):
        w = y[:-1]
        N = np.linalg.norm(mu * w)
        w_hat = w - rho * mu * w / (np.sqrt(2.0) * N)
        z_hat = np.dot(w_hat**2, mu)
        return np.append(rhs_w(tau, w), 1.0 + np.exp(z_hat))

    y0 = np.append(np.full(mu.shape, alpha, dtype=np.float64), 0.0)
    sol = solve_ivp(rhs, (0.0, float(taus[-1])), y0, method="DOP853", t_eval=taus,
                    rtol=1e-12, atol=1e-14)
    assert sol.success
    return sol.y[-1]


def run_check_script(script, expect: str, timeout: float) -> str:
    """Run `python script --check` in its own process (a fresh JAX: no
    compilation cache or settings left by earlier tests of the worker) and
    assert it exits 0 and prints `expect`; returns its stdout. For the
    reference scripts tests/pin_grid.py and tests/engine_reference.py."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
    assert expect in out.stdout, out.stdout
    return out.stdout


@contextlib.contextmanager
def compilations(name: str):
    """The list of JAX's "Finished XLA compilation" messages of the function `name`
    inside the block (each one a program compiled)."""
    import logging

    seen = []

    class _Count(logging.Handler):
        def emit(self, record):
            if name in record.getMessage() and "Finished XLA compilation" in record.getMessage():
                seen.append(record.getMessage())

    handler = _Count()
    logging.getLogger("jax").addHandler(handler)
    try:
        with jax.log_compiles(True):
            yield seen
    finally:
        logging.getLogger("jax").removeHandler(handler)
