"""The lane engine's compiled programs, shared by the tests that call it directly
(tests/test_reduced.py, tests/test_lanes.py).

The default suite spends most of its time compiling (issue 34). A test that jits its own
`lambda W, r: solve_lanes(..., data, ts closed over ...)` compiles a new program at every
call: two calls with the same shapes and settings compile twice, and the data, the save
times and the tolerances are constants of each program. Here there is one jitted function
for the whole test process: the static arguments (method, clock, `settings.program_key()`,
width, switch count, family) and the shapes key its programs; the inits, radii, data, save
times, p and the tolerances are its arguments. `run` pads the cells and the save times to a
few canonical counts, as `samflow.solve` does (`samflow._engine.integrate.canonical_shapes`:
NaN cells that end at time 0 and take no lane, save times that repeat the horizon), and
drops the padding after: a cell's numbers do not depend on the other cells of a call nor on
save times after its own (docs/theory.md s.4, tests/test_lanes.py). A call with
`pad=False` keeps its own shapes (a cell alone in a call of one cell). And a call repeated
with the same inputs and static arguments (another test of the same cells) returns the
first call's results (read-only arrays) without solving again.
"""

import functools
import hashlib

import jax
import numpy as np

from samflow._engine.integrate import bucket, unpad
from samflow._engine.lanes import solve_lanes

#: The canonical cell count: calls of up to 64 cells are padded to 64 (larger ones to a
#: power of two). NaN cells cost no lane and no step.
MIN_CELLS = 64
#: The canonical save count: up to 1024 save times are padded to 1024, more to the next
#: power of two (`samflow._engine.integrate.bucket`). Saves cost little (64 chart cells: a
#: warm solve of 24 save times in 23 ms at 32, 80 ms at 1024), a program 3-15 s to compile.
SAVE_COUNTS = (1024,)


@functools.partial(jax.jit, static_argnames=("method", "clock", "settings", "width", "switches", "family"))
def _program(W0, rho, data, ts, p, tol, index, *, method, clock, settings, width, switches, family):
    return solve_lanes(W0, rho, data, ts, method=method if family is None else index, clock=clock,
                       settings=settings, p=p, width=width, switches=switches, family=family, tol=tol)


def _pad(W0, rho, ts):
    """`(W0, rho, ts)` at the canonical counts, in numpy (no program for the padding): at
    least `MIN_CELLS` cells, a power of two, the extra ones NaN inits at radius 0 (as
    `samflow._engine.integrate.canonical_shapes`: they end at time 0 as `NONFINITE_INPUT`
    and take no lane); `SAVE_COUNTS` save times, the extra ones the horizon `ts[-1]`."""
    n, n_save = W0.shape[0], ts.shape[0]
    pad_n = max(MIN_CELLS, bucket(n)) - n
    pad_s = next((s for s in SAVE_COUNTS if s >= n_save), bucket(n_save)) - n_save
    W0 = np.concatenate([W0, np.full((pad_n,) + W0.shape[1:], np.nan)])
    rho = np.concatenate([rho, np.zeros(pad_n)])
    ts = np.concatenate([ts, np.full(pad_s, ts[-1])])
    return W0, rho, ts


def _digest(*arrays) -> str:
    h = hashlib.sha1()
    for x in arrays:
        x = np.ascontiguousarray(np.asarray(x))
        h.update(f"{x.dtype}{x.shape}".encode())
        h.update(x.tobytes())
    return h.hexdigest()


_RESULTS: dict = {}


def _frozen(tree):
    def freeze(x):
        x = np.array(x)  # a copy: the padded arrays are not kept
        x.flags.writeable = False
        return x

    return jax.tree_util.tree_map(freeze, tree)


def run(W0, rho, data, ts, *, method, clock, settings, width, switches=0, family=None, p=None, pad=True):
    """`solve_lanes(W0, rho, data, ts, ...)` (`settings` resolved) by the shared program of its
    static arguments, at the canonical shapes (`pad`); `(trajectory, iterations, switches)`
    as numpy arrays (read-only: they may be another test's too). `method`: a `Method`; with
    `family` (one program for its members) a member or an int index into it, traced."""
    W0, rho, ts = (np.asarray(x, np.float64) for x in (W0, rho, ts))
    p = None if p is None else np.float64(p)
    tol = settings.tolerances()
    index = None if family is None else np.int32(method if isinstance(method, int) else family.index(method))
    static = dict(method=method if family is None else None, clock=clock, settings=settings.program_key(),
                  width=int(width), switches=int(switches), family=family)
    key = (repr(sorted(static.items())), pad,
           _digest(W0, rho, data.X, data.y, ts, tol, np.nan if p is None else p, -1 if index is None else index))
    if key in _RESULTS:
        return _RESULTS[key]
    n, n_save = W0.shape[0], ts.shape[0]
    args = _pad(W0, rho, ts) if pad else (W0, rho, ts)
    traj, iters, raw = _program(*args[:2], data, args[2], p, tol, index, **static)
    traj, iters, raw = jax.tree_util.tree_map(np.asarray, (traj, iters, raw))
    out = _frozen((unpad(traj, n, n_save), iters, None if raw is None else tuple(x[:n] for x in raw)))
    _RESULTS[key] = out
    return out
