"""Every citation of docs/theory.md resolves: `theory.md#anchor` links name one of its headings
(GitHub's anchor rule) and `theory.md s.N` / `section N.M` name one of its numbered sections.
README.md stays a short front page (issue 28) whose links into the site resolve on GitHub."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
THEORY = ROOT / "docs" / "theory.md"
CITING = [ROOT / "README.md", *(ROOT / d for d in ("docs", "configs", "samflow", "scripts", "examples"))]
ANCHOR = re.compile(r"theory\.md#([A-Za-z0-9_.\-]+)")
SECTION = re.compile(r"theory\.md,? (?:s\.|sections? )(\d+(?:\.\d+)?)(?:-(\d+(?:\.\d+)?))?")


def github_anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces to '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _headings() -> list[str]:
    return [line.lstrip("#").strip() for line in THEORY.read_text().splitlines() if line.startswith("#")]


def _citing_files() -> list[Path]:
    files = []
    for p in CITING:
        files += [p] if p.is_file() else [f for f in p.rglob("*") if f.suffix in {".md", ".py", ".toml"}]
    return files


def test_github_anchor_rule():
    assert github_anchor("3. Rescaled flows (single sample)") == "3-rescaled-flows-single-sample"
    assert github_anchor("4.1 Zero gradient at the origin: the l2-SAM collapse") == (
        "41-zero-gradient-at-the-origin-the-l2-sam-collapse")


def test_every_theory_citation_resolves():
    anchors = {github_anchor(h) for h in _headings()}
    numbers = {m.group(1) for h in _headings() if (m := re.match(r"(\d+(?:\.\d+)?)\.? ", h))}
    bad, n_links, n_sections = [], 0, 0
    for f in _citing_files():
        text = f.read_text(errors="replace")
        for a in ANCHOR.findall(text):
            n_links += 1
            if a not in anchors:
                bad.append(f"{f.relative_to(ROOT)}: #{a}")
        for lo, hi in SECTION.findall(text):
            n_sections += 1
            bad += [f"{f.relative_to(ROOT)}: s.{n}" for n in (lo, hi) if n and n.rstrip(".") not in numbers]
    assert not bad, bad
    assert n_links >= 5 and n_sections >= 100  # not vacuous: the README's links, the modules' citations


def test_every_code_location_of_the_theory_table_exists():
    """docs/theory.md s.7 says where each formula lives: every `samflow/x.py`
    exists, and every `name` listed after it (up to the next path or ";") is
    defined there (a def, a class, an assignment or a re-export).
    The table went stale once, naming samflow/solve.py and figures.py after the
    restructuring had moved their functions."""
    text = THEORY.read_text()
    table = text[text.index("## 7. Where each formula lives in the code"):]
    rows = [line for line in table.splitlines() if line.startswith("| ") and "samflow/" in line]
    assert len(rows) >= 40
    missing = []
    for row in rows:
        cell = row.rstrip(" |").rsplit(" | ", 1)[-1]
        for path, names in re.findall(r"`(samflow/[\w/]+\.py)`:?((?:(?!`samflow/)[^;])*)", cell):
            f = ROOT / path
            if not f.is_file():
                missing.append(path)
                continue
            src = f.read_text()
            for name in re.findall(r"`([A-Za-z_]\w*)(?:\(|`)", names):
                # (a quoted name: re-exported on first use by the module's __getattr__)
                if not re.search(rf"^\s*(def|class) {name}\b|^\s*{name}\s*[:=]|\b{name} as {name}\b|\"{name}\"", src, re.M):
                    missing.append(f"{path}: {name}")
    assert not missing, f"docs/theory.md s.7 names code that is not there: {missing}"


README = ROOT / "README.md"
LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_readme_is_a_short_front_page():
    """At most 200 lines, none over 300 characters: the details live in docs/ (it had grown
    to 653 lines, 9 of them over 300 characters, before the site took them over)."""
    lines = README.read_text().splitlines()
    assert 40 <= len(lines) <= 200, len(lines)
    long = [i + 1 for i, line in enumerate(lines) if len(line) > 300]
    assert not long, f"README.md lines over 300 characters: {long}"


def test_readme_keeps_the_two_commands():
    """CI and users copy these two lines; they stay exactly as they were."""
    text = README.read_text()
    for command in (
        "python3 -m venv .venv && . .venv/bin/activate && pip install -e . && python -m samflow.sweep configs/default.toml",
        '. .venv/bin/activate && pip install -e ".[test]" && python -m pytest -q',
    ):
        assert f"\n{command}\n" in text, command


def test_readme_links_resolve_on_github():
    """Every relative link of README.md names a file of the repository and, with '#anchor', one
    of that file's headings by GitHub's rule; the links of "Find it fast" reach the answers the
    issue asks a new user to find within a minute."""
    links = LINK.findall(README.read_text())
    bad = []
    for link in links:
        if link.startswith(("http://", "https://")):
            continue
        path, _, anchor = link.partition("#")
        target = ROOT / path
        if not target.exists():
            bad.append(link)
        elif anchor:
            headings = [line.lstrip("#").strip() for line in target.read_text().splitlines()
                        if re.match(r"#{1,6} ", line)]
            if anchor not in {github_anchor(h) for h in headings}:
                bad.append(link)
    assert not bad, f"README.md links that do not resolve: {bad}"
    fast = README.read_text().split("## Find it fast", 1)[1].split("\n## ", 1)[0]
    assert {
        "docs/benchmarks.md#large-d-log-coordinates",     # a d = 50 chart, fast
        "docs/results.md#switch-times",                   # what switch_ok means
        "docs/running.md#interrupts-and-resume",          # how to resume
        "docs/getting-started.md#redraw-the-figures",     # how to redraw figures
        "docs/configs.md#every-key",                      # every config key
    } <= set(LINK.findall(fast))
    site = {p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md")}
    assert site - {"docs/index.md"} <= {link.partition("#")[0] for link in links}  # a way into every page


def test_every_status_is_in_the_status_tables():
    """docs/theory.md s.4 and docs/troubleshooting.md each list the statuses of a cell in a
    table; SURFACE (8) was missing from the theory's (issue 35): each table has one row per
    `samflow.Status`, with its value, and no other."""
    from samflow.status import Status

    theory = {(m.group(1), int(m.group(2))) for m in re.finditer(r"^\| `([A-Z_]+)` \| (\d+) \|", THEORY.read_text(), re.M)}
    assert theory == {(s.name, int(s)) for s in Status}, theory
    trouble = (ROOT / "docs" / "troubleshooting.md").read_text()
    rows = {(int(m.group(1)), m.group(2)) for m in re.finditer(r"^\| (\d+) ([a-z -]+?) \|", trouble, re.M)}
    assert {v for v, _ in rows} == {int(s) for s in Status}, rows
