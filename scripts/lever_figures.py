"""Where the figure script's time goes (issue 14, "Compilation"): per figure, wall
and CPU time, and the part JAX spends tracing (jaxpr), lowering (MLIR), compiling
(XLA, cache misses) or loading programs from the persistent cache (hits), with
the distinct programs it compiled and their shapes. Two passes, each a fresh
process on the same cache folder: cold (empty folder) then warm; the ratios are
taken in this one run.

    python scripts/lever_figures.py [--quick] [--only NAMES] [--cache DIR] [--passes cold,warm]

Measures only. Each pass builds the figures into a temporary folder in ONE
process, one figure after the other (`reproduce_figures.py --jobs 1`), so that
each figure's numbers are its own (the script's default runs two worker
processes in parallel; compare its wall time with `/usr/bin/time`). The tracing
time is the union of the top-level trace spans (nested jits are not counted
twice); "compile" and "load" are XLA's backend-compile spans, split by the
cache's verdict (miss or hit).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MIN_PROGRAM_S = 0.5  # programs listed one by one: XLA compile (or load) at least this long


def _union(spans: list[tuple[float, float]]) -> float:
    """Total length of a union of intervals (nested traces counted once)."""
    total, end = 0.0, -float("inf")
    for a, b in sorted(spans):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def child(names: list[str], quick: bool, out_json: str) -> None:
    """One pass: build the figures in this process, recording JAX's compile events."""
    import logging

    from jax import monitoring

    from samflow import figures
    from samflow._x64 import prepare_process

    prepare_process()
    spans: dict[str, list] = {"trace": [], "lower": []}
    compiles: list[dict] = []
    pending: dict = {}
    ev_trace, ev_lower, ev_backend = ("/jax/core/compile/jaxpr_trace_duration",
                                      "/jax/core/compile/jaxpr_to_mlir_module_duration",
                                      "/jax/core/compile/backend_compile_duration")

    def on_span(event, start, end, **kw):
        if event == ev_trace:
            spans["trace"].append((start, end))
        elif event == ev_lower:
            spans["lower"].append((start, end))

    def on_duration(event, secs, **kw):
        if event == ev_backend:
            compiles.append(dict(name=str(kw.get("fun_name", "?")), s=secs, verdict=pending.pop("verdict", "uncached"),
                                 callbacks=pending.pop("callbacks", False), shapes=pending.pop("shapes", "")))

    class Seen(logging.Handler):
        def emit(self, record):
            msg = record.getMessage()
            if msg.startswith("Compiling ") and "with global shapes" in msg:
                pending["shapes"] = str(record.args[1])[:300] if record.args and len(record.args) > 1 else ""
            elif "Persistent compilation cache hit" in msg:
                pending["verdict"] = "hit"
            elif "PERSISTENT COMPILATION CACHE MISS" in msg:
                pending["verdict"] = "miss"
            elif "host callbacks" in msg:
                pending["callbacks"] = True

    for name in ("jax._src.compiler", "jax._src.interpreters.pxla"):
        lg = logging.getLogger(name)
        lg.setLevel(logging.DEBUG)
        lg.addHandler(Seen())
    monitoring.register_event_time_span_listener(on_span)
    monitoring.register_event_duration_secs_listener(on_duration)

    rows = []
    out_dir = tempfile.TemporaryDirectory(prefix="lever_figures_")  # the figures themselves are not kept
    out = out_dir.name
    order = [n for g in figures.GROUPS for n in g if n in names]
    for name in order:
        n_tr, n_lo, n_co = len(spans["trace"]), len(spans["lower"]), len(compiles)
        w0, c0 = time.perf_counter(), time.process_time()
        res = figures.FIGURES[name](out, quick=quick)
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
        mine = compiles[n_co:]
        rows.append(dict(
            name=name, wall=wall, cpu=cpu,
            trace=_union(spans["trace"][n_tr:]), lower=_union(spans["lower"][n_lo:]),
            compile=sum(c["s"] for c in mine if c["verdict"] != "hit"),
            load=sum(c["s"] for c in mine if c["verdict"] == "hit"),
            n_compiled=sum(c["verdict"] != "hit" for c in mine), n_hits=sum(c["verdict"] == "hit" for c in mine),
            n_callbacks=sum(c["callbacks"] for c in mine),
            checks=[bool(c.passed) for c in res.checks if c.passed is not None],
            programs=[c for c in mine if c["s"] >= MIN_PROGRAM_S],
        ))
        print(f"  {name}: {wall:.1f} s", file=sys.stderr, flush=True)
    out_dir.cleanup()
    Path(out_json).write_text(json.dumps(dict(rows=rows, load=os.getloadavg()[0])))


def _run_pass(label: str, names: list[str], quick: bool, cache: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT), SAMFLOW_COMPILATION_CACHE=str(cache))
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out_json = f.name
    load0 = os.getloadavg()[0]
    r0 = os.times()
    w0 = time.perf_counter()
    cmd = [sys.executable, __file__, "--child", out_json, "--only", ",".join(names)] + (["--quick"] if quick else [])
    subprocess.run(cmd, env=env, check=True, cwd=ROOT)
    wall = time.perf_counter() - w0
    r1 = os.times()
    res = json.loads(Path(out_json).read_text())
    os.unlink(out_json)
    res.update(label=label, process_wall=wall, process_cpu=(r1.children_user - r0.children_user)
               + (r1.children_system - r0.children_system), load0=load0, load1=os.getloadavg()[0])
    return res


def _print_pass(p: dict) -> None:
    print(f"\n== {p['label']} cache: process {p['process_wall']:.1f} s wall, {p['process_cpu']:.1f} CPU-s "
          f"(load {p['load0']:.1f} -> {p['load1']:.1f})")
    print(f"{'figure':<18} {'wall':>7} {'CPU':>7} {'trace':>7} {'lower':>7} {'XLA':>7} {'load':>6} "
          f"{'progs':>5} {'hits':>5} {'cb':>3} {'JAX%':>5}  checks")
    tot = {k: 0.0 for k in ("wall", "cpu", "trace", "lower", "compile", "load", "n_compiled", "n_hits", "n_callbacks")}
    n_pass = n_checks = 0
    for r in p["rows"]:
        jax_s = r["trace"] + r["lower"] + r["compile"] + r["load"]
        for k in tot:
            tot[k] += r[k]
        n_pass += sum(r["checks"])
        n_checks += len(r["checks"])
        print(f"{r['name']:<18} {r['wall']:7.1f} {r['cpu']:7.1f} {r['trace']:7.1f} {r['lower']:7.1f} {r['compile']:7.1f} "
              f"{r['load']:6.1f} {r['n_compiled']:5d} {r['n_hits']:5d} {r['n_callbacks']:3d} "
              f"{100 * jax_s / max(r['wall'], 1e-9):4.0f}%  {sum(r['checks'])}/{len(r['checks'])}")
    jax_s = tot["trace"] + tot["lower"] + tot["compile"] + tot["load"]
    print(f"{'total':<18} {tot['wall']:7.1f} {tot['cpu']:7.1f} {tot['trace']:7.1f} {tot['lower']:7.1f} "
          f"{tot['compile']:7.1f} {tot['load']:6.1f} {int(tot['n_compiled']):5d} {int(tot['n_hits']):5d} "
          f"{int(tot['n_callbacks']):3d} {100 * jax_s / max(tot['wall'], 1e-9):4.0f}%  {n_pass}/{n_checks}")
    print(f"programs with XLA compile or load >= {MIN_PROGRAM_S} s (name, s, verdict, shapes):")
    for r in p["rows"]:
        for c in r["programs"]:
            print(f"  {r['name']:<18} {c['name'][:40]:<40} {c['s']:6.1f} {c['verdict']:<8}"
                  f"{' CALLBACKS' if c['callbacks'] else ''} {c['shapes'][:150]}")


def main(argv: "list[str] | None" = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="the figures' [quick] versions")
    p.add_argument("--only", default="", help="comma list of figure names (default: all)")
    p.add_argument("--cache", default=None, help="cache folder (default: a fresh temporary one, so the first pass is cold)")
    p.add_argument("--passes", default="cold,warm", help="labels of the passes, one process each, same cache")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    from samflow.figures import FIGURES

    names = [n for n in args.only.split(",") if n] or list(FIGURES)
    if args.child:
        child(names, args.quick, args.child)
        return 0
    cache = Path(args.cache) if args.cache else Path(tempfile.mkdtemp(prefix="lever_figures_cache_"))
    print(f"cache folder {cache}; {len(names)} figures{' (quick)' if args.quick else ''}; one process per pass")
    passes = [_run_pass(label, names, args.quick, cache) for label in args.passes.split(",")]
    if not args.cache:
        shutil.rmtree(cache, ignore_errors=True)  # a temporary folder of this run only
    for ps in passes:
        _print_pass(ps)
    if len(passes) >= 2:
        a, b = passes[0], passes[-1]
        print(f"\n{a['label']} / {b['label']}: process wall {a['process_wall'] / b['process_wall']:.2f}x, "
              f"CPU {a['process_cpu'] / b['process_cpu']:.2f}x")
        for ra, rb in zip(a["rows"], b["rows"]):
            print(f"  {ra['name']:<18} wall {ra['wall']:6.1f} -> {rb['wall']:6.1f} s ({ra['wall'] / rb['wall']:.2f}x), "
                  f"CPU {ra['cpu']:6.1f} -> {rb['cpu']:6.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
