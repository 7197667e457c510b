"""Where a test run's XLA compilation goes: a pytest plugin that logs every compilation, and its summary.

The default suite spends most of its time compiling (docs/benchmarks.md, "Issue 34, third
round"). This plugin wraps `jax._src.compiler.compile_or_get_cached` in every pytest process
(the xdist workers too) and appends one JSON line per compilation to
`$SAMFLOW_COMPILE_LOG/<pid>.jsonl`: the test (`PYTEST_CURRENT_TEST`), the program's name, a
fingerprint of its StableHLO (sha1 of the text without debug locations, 16 hex digits), its
lines and the seconds XLA took. Child processes that a test starts (the command-line tests)
are not logged. Then `summarize` prints the totals, the seconds spent compiling a program
another test or worker had compiled already, and the files and programs that compile most.

    SAMFLOW_COMPILE_LOG=/tmp/compiles PYTHONPATH=scripts python -m pytest -q -p compile_log
    python scripts/compile_log.py /tmp/compiles          # the summary
    python scripts/compile_log.py /tmp/compiles --top 40

Reads jax's private compiler module: written for jax 0.10.x (`compile_or_get_cached(backend,
computation, ...)` with `computation` an MLIR module); elsewhere the plugin warns and logs nothing.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import os
import sys
import time
import warnings
from pathlib import Path


def pytest_configure(config):  # pragma: no cover - runs inside pytest processes
    out = os.environ.get("SAMFLOW_COMPILE_LOG")
    if not out:
        warnings.warn("compile_log: set SAMFLOW_COMPILE_LOG to a folder; nothing is logged")
        return
    try:
        from jax._src import compiler
    except ImportError:
        warnings.warn("compile_log: this jax has no jax._src.compiler; nothing is logged")
        return
    try:
        Path(out).mkdir(parents=True, exist_ok=True)
    except OSError as e:
        warnings.warn(f"compile_log: SAMFLOW_COMPILE_LOG={out} is not a folder it can write ({e}); nothing is logged")
        return
    original = compiler.compile_or_get_cached
    log = Path(out) / f"{os.getpid()}.jsonl"

    def logged(backend, computation, *args, **kwargs):
        text = computation.operation.get_asm(enable_debug_info=False)
        start = time.perf_counter()
        result = original(backend, computation, *args, **kwargs)
        seconds = time.perf_counter() - start
        row = dict(test=os.environ.get("PYTEST_CURRENT_TEST", ""),
                   name=str(computation.operation.attributes["sym_name"]).strip('"'),
                   fingerprint=hashlib.sha1(text.encode()).hexdigest()[:16], lines=text.count("\n"), seconds=seconds)
        with open(log, "a") as f:
            f.write(json.dumps(row) + "\n")
        return result

    compiler.compile_or_get_cached = logged


def summarize(folder: Path, top: int = 20) -> str:
    """The report of a folder of logs (what `main` prints)."""
    rows, bad = [], 0
    for f in sorted(folder.glob("*.jsonl")):
        for line in f.read_text().splitlines():
            try:
                row = json.loads(line)
                float(row["seconds"]), int(row["lines"]), str(row["fingerprint"]), str(row["test"]), str(row["name"])
            except (ValueError, KeyError, TypeError):
                bad += line.strip() != ""  # a line cut short by a killed worker, or not this plugin's
                continue
            rows.append(row)
    if not rows:
        return f"no compilations logged in {folder}" + (f" ({bad} unreadable lines)" if bad else "")
    total = sum(r["seconds"] for r in rows)
    by_program = collections.defaultdict(list)
    for r in rows:
        by_program[r["fingerprint"]].append(r)
    again = sum(r["seconds"] for rs in by_program.values() for r in rs[1:])
    big = [r for r in rows if r["seconds"] > 1.0]
    lines = [
        f"{len(rows)} compilations in {len({f.stem for f in folder.glob('*.jsonl')})} processes: {total:.0f} s of XLA compilation",
        f"{len(by_program)} distinct programs; compiling one again (another test or worker had it) cost {again:.0f} s",
        f"{len(big)} compilations over 1 s: {sum(r['seconds'] for r in big):.0f} s",
    ] + ([f"{bad} unreadable lines left out"] if bad else []) + [
        "",
        "by test file (s, compilations):",
    ]
    per_file, count = collections.Counter(), collections.Counter()
    for r in rows:
        key = r["test"].split("::")[0] or "(outside a test)"
        per_file[key] += r["seconds"]
        count[key] += 1
    lines += [f"  {s:7.1f} {count[k]:5d}  {k}" for k, s in per_file.most_common(top)]
    lines += ["", "largest compilations (s, lines of StableHLO, program, test):"]
    lines += [f"  {r['seconds']:6.2f} {r['lines']:7d}  {r['name']}  {r['test'].removesuffix(' (call)')}"
              for r in sorted(rows, key=lambda r: -r["seconds"])[:top]]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path, help="the folder of $SAMFLOW_COMPILE_LOG")
    ap.add_argument("--top", type=int, default=20, help="rows per table (default 20)")
    args = ap.parse_args(argv)
    if not args.folder.is_dir():
        print(f"error: {args.folder} is not a folder of compile logs", file=sys.stderr)
        return 2
    try:
        print(summarize(args.folder, args.top))
    except BrokenPipeError:  # `| head`: the reader has what it wanted
        sys.stderr.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
