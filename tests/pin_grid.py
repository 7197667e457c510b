"""A fixed small grid whose results must not move through a pure restructuring.

The four methods x both clocks x both coordinate systems (log only where it
applies: gd, l2, usam), depth 2 on the default data (l2 with the general state,
`reduce="off"`, and with its exact reduction, the default), over cells that span the
three l2 regimes and the linf sliding; plus the events that only other settings
reach (a depth-3 pole in tau, linf at depth 1, multi-sample data, a critical point
of the loss), the equal-layer reduction (`reduce="all"`), the discrete algorithm and the
generic-model engine.

    python tests/pin_grid.py --save    # write tests/data/pin_reference.npz (after a reviewed change of numbers)
    python tests/pin_grid.py --check   # compare this checkout with it, bit for bit (what tests/test_pin.py does)

The reference records the machine it was made on (package versions, CPU model and
flags): XLA generates code for the CPU it runs on, so bits are compared only on the
same kind of machine; elsewhere the comparison is to 1e-7 relative with equal statuses.
"""

from __future__ import annotations

import hashlib
import json
import platform
import sys
from importlib import metadata
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from samflow._util.x64 import exact_cpu_arithmetic  # noqa: E402

exact_cpu_arithmetic()  # as the command lines (no FMA, XLA's own sums: bits independent of the lane width)

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

# Check the checkout this file is in: run as a script, sys.path[0] is tests/, and
# an editable install elsewhere (another worktree, the main checkout) would win.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import samflow as sf  # noqa: E402

REFERENCE = Path(__file__).resolve().parent / "data" / "pin_reference.npz"

MU = [0.2, 0.4, 0.6, 0.8, 1.0]
ALPHA_OVER_RHO = np.array([0.05, 0.3, 0.6, 2.0])
RHOS = np.array([0.1, 1.0])
TS = {"t": np.array([0.0, 0.01, 0.3, 3.0, 30.0, 300.0]), "tau": np.array([0.0, 0.5, 2.0, 8.0, 20.0, 40.0])}
FIELDS = ("W", "beta", "t", "loss", "status", "event_time", "event_t", "collapse_direction", "slide_time", "num_steps")


def _cells():
    rho = np.repeat(RHOS, ALPHA_OVER_RHO.size)
    alpha = np.tile(ALPHA_OVER_RHO, RHOS.size) * rho
    return alpha, rho


def cases(engine_only: bool = False, **settings) -> dict[str, dict[str, np.ndarray]]:
    """Every pinned run: name -> {field: array}.

    `engine_only` leaves out the discrete algorithm and the generic-model engine
    (the runs that do not go through `samflow.solve`); `settings` are
    `SolverSettings` fields applied to every solve (e.g. rtol=1e-11), as
    `tests/engine_reference.py` uses them. The defaults make the pinned grid.
    """
    data = sf.single_sample(MU)
    alpha, rho = _cells()
    out = {}
    for method in ("gd", "l2", "linf", "usam"):
        for clock in ("t", "tau"):
            for coords in ("linear", "log"):
                if coords == "log" and method == "linf":
                    continue
                # The general (L, d) state: l2 cells here take the reduction otherwise.
                general = {"reduce": "off", **settings}
                tr = sf.solve(method, data, alpha=alpha, rho=rho, ts=TS[clock], depth=2, clock=clock,
                              settings=sf.SolverSettings(coords=coords, **general), alpha_batched=True)
                out[f"{method}-{clock}-{coords}"] = {f: np.asarray(getattr(tr, f)) for f in FIELDS}
                if method == "l2":  # the exact reduction (samflow._engine.reduced, docs/theory.md s.3.5;
                    # "auto" takes it only from d = 8 on, where it pays: "all" here at d = 5)
                    reduced = {"reduce": "all", **settings}
                    tr = sf.solve(method, data, alpha=alpha, rho=rho, ts=TS[clock], depth=2, clock=clock,
                                  settings=sf.SolverSettings(coords=coords, **reduced), alpha_batched=True)
                    out[f"{method}-{clock}-{coords}-reduced"] = {f: np.asarray(getattr(tr, f)) for f in FIELDS}
    # a depth-3 pole (blow-up in tau) and linf at depth 1 (zero hits, sliding)
    default = sf.SolverSettings(**settings)  # equal to SolverSettings() when settings is empty: the same compilation
    tr = sf.solve("l2", data, alpha=alpha, rho=rho, ts=TS["tau"], depth=3, clock="tau", settings=default,
                  alpha_batched=True)
    out["l2-tau-depth3"] = {f: np.asarray(getattr(tr, f)) for f in FIELDS}
    tr = sf.solve("linf", data, alpha=alpha, rho=rho, ts=TS["t"], depth=1, clock="t", settings=default,
                  alpha_batched=True)
    out["linf-t-depth1"] = {f: np.asarray(getattr(tr, f)) for f in FIELDS}
    # multi-sample data, mixed labels (issue 12 case 10: a critical point that is not 0)
    multi = sf.Dataset.from_arrays(
        [[0.2, 0.4, 0.6, 0.8, 1.0], [0.1, 0.5, 0.5, 0.9, 1.1], [0.3, 0.3, 0.7, 0.7, 0.9]], [1.0, 1.0, -1.0]
    )
    for method in ("l2", "linf"):
        tr = sf.solve(method, multi, alpha=alpha, rho=rho, ts=TS["t"], depth=2, clock="t", settings=default,
                      alpha_batched=True)
        out[f"{method}-t-multi"] = {f: np.asarray(getattr(tr, f)) for f in FIELDS}
    if engine_only:
        return out
    # the equal-layer reduction (reduce="all", docs/theory.md s.3.5; tests/test_reduced.py checks it
    # against the general state): l2 at depth 3, and gd in the tau clock in log coordinates
    rows = sf.SolverSettings(reduce="all")
    tr = sf.solve("l2", data, alpha=alpha, rho=rho, ts=TS["t"], depth=3, clock="t", settings=rows, alpha_batched=True)
    out["l2-t-depth3-all"] = {f: np.asarray(getattr(tr, f)) for f in FIELDS}
    tr = sf.solve("gd", data, alpha=alpha, rho=rho, ts=TS["tau"], depth=2, clock="tau", alpha_batched=True,
                  settings=sf.SolverSettings(reduce="all", coords="log"))
    out["gd-tau-log-all"] = {f: np.asarray(getattr(tr, f)) for f in FIELDS}
    # the discrete algorithm and the generic-model engine
    from samflow.discrete import run_discrete
    from samflow.models import diagonal_network, solve_model

    disc = run_discrete("l2", data, alpha=alpha, rho=rho, eta=0.01, ts=np.array([0.5, 1.0, 3.0]), alpha_batched=True)
    out["l2-discrete"] = {f: np.asarray(getattr(disc, f)) for f in ("beta", "loss", "t")}
    net = diagonal_network(2, len(MU))
    theta0 = tuple(np.stack(leaves) for leaves in zip(*[net.init(a) for a in alpha]))
    mt = solve_model("l2", net, theta0, rho, data, TS["t"], theta0_batched=True)
    out["l2-model"] = {
        f: np.asarray(getattr(mt, f)) for f in ("beta", "loss", "status", "event_time") if hasattr(mt, f)
    }
    return out


def fingerprint() -> dict[str, str]:
    """What sets the last bits besides the code: package versions and the CPU."""
    cpu = ""
    try:
        info = Path("/proc/cpuinfo").read_text()
        model = next((ln.split(":", 1)[1].strip() for ln in info.splitlines() if ln.startswith("model name")), "")
        flags = next((ln.split(":", 1)[1].strip() for ln in info.splitlines() if ln.startswith("flags")), "")
        cpu = f"{model} flags:{hashlib.sha256(flags.encode()).hexdigest()[:12]}"
    except OSError:
        cpu = platform.processor()
    fp = {"cpu": cpu, "machine": platform.machine(), "python": platform.python_version()}
    for pkg in ("jax", "jaxlib", "diffrax", "equinox", "optimistix", "numpy"):
        fp[pkg] = metadata.version(pkg)
    return fp


def save(path: Path = REFERENCE) -> None:
    flat = {f"{name}/{field}": arr for name, res in cases().items() for field, arr in res.items()}
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, __fingerprint__=np.array(json.dumps(fingerprint(), sort_keys=True)), **flat)


def load(path: Path = REFERENCE) -> tuple[dict, dict[str, dict[str, np.ndarray]]]:
    with np.load(path) as z:
        fp = json.loads(str(z["__fingerprint__"]))
        ref: dict[str, dict[str, np.ndarray]] = {}
        for key in z.files:
            if key == "__fingerprint__":
                continue
            name, field = key.split("/")
            ref.setdefault(name, {})[field] = z[key]
    return fp, ref


def compare(got, ref, exact: bool) -> list[str]:
    """Differences between two case dicts, one line each (empty: equal)."""
    problems = []
    if set(got) != set(ref):
        problems.append(f"cases differ: {sorted(set(got) ^ set(ref))}")
    for name in sorted(set(got) & set(ref)):
        for field in sorted(set(got[name]) | set(ref[name])):
            a, b = got[name].get(field), ref[name].get(field)
            if a is None or b is None or a.shape != b.shape:
                problems.append(f"{name}/{field}: missing or shape {getattr(a, 'shape', None)} vs {getattr(b, 'shape', None)}")
                continue
            if exact or field in ("status",):
                ok = np.array_equal(a, b, equal_nan=True)
            elif field == "num_steps":
                ok = True  # step counts may differ by a step off the reference machine
            else:
                ok = np.array_equal(np.isnan(a), np.isnan(b)) and np.allclose(a, b, rtol=1e-7, atol=0, equal_nan=True)
            if not ok:
                with np.errstate(invalid="ignore"):
                    diff = np.nanmax(np.abs(a.astype(float) - b.astype(float))) if a.size else 0.0
                problems.append(f"{name}/{field}: differs (max abs diff {diff:.3g})")
    return problems


if __name__ == "__main__":
    if "--save" in sys.argv:
        save()
        print(f"wrote {REFERENCE}")
    else:
        fp, ref = load()
        same = fp == fingerprint()
        problems = compare(cases(), ref, exact=same)
        print(("bit for bit" if same else "to 1e-7 (another machine)") + ": " + ("equal" if not problems else "\n".join(problems)))
        sys.exit(1 if problems else 0)
