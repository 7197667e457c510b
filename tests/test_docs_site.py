"""The documentation site builds (`mkdocs build --strict`: a broken link or anchor, a missing
page or snippet, a docstring that does not render fails), and its config reference, generated
from the pydantic schemas by docs/_hooks/config_reference.py, has a meaning for every key.
The built site is then opened page by page in headless Chromium (test_site_in_a_browser;
skipped where Chromium is not installed): titles, typeset equations, images and search."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from html.parser import HTMLParser
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urljoin

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _hook():
    spec = importlib.util.spec_from_file_location("config_reference", ROOT / "docs" / "_hooks" / "config_reference.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _schemas(hook) -> list[tuple[str, type]]:
    """(key prefix, schema) of every table of every documented config."""
    return [t for entries in hook.roots().values() for _, model in entries for t in hook.tables(model)]


#: TeX commands that are no English words: seen without their backslash, a script that wrote
#: the page ate it ("\\nabla" written through a Python string became a line break and "abla").
_TEX_WORDS = ("nabla", "frac", "mathrm", "mathcal", "cdot", "varepsilon", "odot", "qquad", "infty")


def test_no_tex_command_lost_its_backslash():
    """docs/*.md hold no control characters but line breaks, and no TeX command name outside
    code without its backslash: the browser test cannot see one (MathJax typesets "abla u_j"
    as letters). docs/theory.md s.4.3 had "$n_\\pm = " at a line's end and "abla u_j" on the next."""
    bad = []
    for page in sorted((ROOT / "docs").rglob("*.md")):
        text = page.read_text()
        bad += [f"{page.name}: control character {ord(ch):#x}" for ch in set(re.findall(r"[\x00-\x09\x0b-\x1f]", text))]
        prose = re.sub(r"```.*?```", "", text, flags=re.S)
        prose = re.sub(r"`[^`\n]*`", "", prose)
        for m in re.finditer(r"(?<![\\A-Za-z])(" + "|".join(_TEX_WORDS) + r"|abla)(?![A-Za-z])", prose):
            bad.append(f"{page.name}: {prose[max(0, m.start() - 40):m.end() + 20]!r}")
    assert not bad, bad


def test_every_config_field_has_a_description():
    hook = _hook()
    missing = [f"{m.__module__}.{m.__name__}.{name}" for _, m in _schemas(hook)
               for name, f in m.model_fields.items() if not (f.description or "").strip()]
    assert not missing, f"config fields without a description (add a docstring under the field): {missing}"


def test_the_reference_reaches_every_config_schema():
    """A new schema (a table of some config) must be reachable from the documented roots,
    or its keys would be missing from the site."""
    import importlib
    import pkgutil

    import samflow
    from samflow.config import ConfigModel

    # Every schema of the package, whatever this worker imported before (and none that a test defines).
    for info in pkgutil.walk_packages(samflow.__path__, "samflow."):
        if not info.name.endswith("__main__"):
            importlib.import_module(info.name)
    hook = _hook()
    reached = {m for _, m in _schemas(hook)}
    bases = {b for m in reached for b in m.__mro__}
    every, todo = set(), [ConfigModel]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub not in every:
                every.add(sub)
                todo.append(sub)
    assert len(reached) >= 40  # the sweep, atlas, CNN, CNN study and figure schemas
    every = {m for m in every if m.__module__.startswith("samflow.")}
    own = {m for m in every if set(m.model_fields) - set().union(*(b.model_fields for b in m.__bases__ if hasattr(b, "model_fields")))}
    assert not {f"{m.__module__}.{m.__name__}" for m in own - reached - bases}


def test_reference_rows_carry_type_default_range_and_meaning():
    from samflow._engine.settings import SETTING_BOUNDS

    text = _hook().render("sweep")
    rows = {line.split(" | ")[0].strip("| `"): line for line in text.splitlines() if line.startswith("| `")}
    assert rows["depth"].split(" | ")[1:4] == ["`int`", "`2`", ">= 1, <= 64"]
    assert rows["methods"].split(" | ")[2:4] == ["**required**", "length >= 1"]
    assert "`\"linear\"` / `\"log\"`" in rows["solver.coords"] and "log\\|W\\|" in rows["solver.coords"]
    lo = SETTING_BOUNDS["rtol"]
    assert f"> {lo['gt']:g}" in rows["solver.rtol"] and f"< {lo['lt']:g}" in rows["solver.rtol"]
    assert rows["grid.alpha.num"].split(" | ")[2] == "**required**"  # a table under a key: its own rows
    assert rows["output.plot_rho"].split(" | ")[2] == "unset"
    assert "switch event" in rows["output.switch_times"]
    figures = _hook().render("figures")
    assert "### `common.toml`" in figures and "### `regime_chart.toml`" in figures
    assert "| `rows.depth` |" in figures  # a list of tables, [[rows]]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The site built as CI builds it: `mkdocs build --strict` into a fresh folder (once a module)."""
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("mkdocstrings") is None:
        pytest.skip('mkdocs is not installed: pip install -e ".[docs]" (CI installs it)')
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1",
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    out = tmp_path_factory.mktemp("docs") / "site"
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"), "-d", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    return proc, out


def test_site_builds_strict(site):
    proc, out = site
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    configs = (out / "configs" / "index.html").read_text()
    assert "solver.coords" in configs and "integrate x = log|W|" in configs  # the generated reference
    api = {p: (out / "reference" / p / "index.html").read_text() for p in ("solvers", "sweeps")}
    assert 'id="samflow.solver.solve"' in api["solvers"] and 'id="samflow.sweep.solve_grid"' in api["sweeps"]
    examples = (out / "examples" / "index.html").read_text()
    assert "collapsed to 0 at t = 14.17" in examples  # a recorded output, included
    # Two pages of one URL (figures.md and figures/index.md were both figures/index.html): the
    # later overwrites the earlier without a warning, even with --strict.
    urls = [path for _, path in _nav_pages()]
    assert len(set(urls)) == len(urls), sorted(u for u in set(urls) if urls.count(u) > 1)


# --- The built site in a real browser (issue 35: the mathematics showed as raw LaTeX) ---------
# Headless Chromium (Debian's `chromium`; .ci/run installs it) opens every page of the nav
# from a local server, with MathJax served by the site itself (no network here), and a probe
# that the test server adds to each page reports what only a browser knows: the equations
# MathJax typeset, the images' decoded sizes, script errors and the search box's results.

CHROMIUM = next((path for name in ("chromium", "chromium-browser", "google-chrome", "chrome")
                 if (path := shutil.which(name))), None)

# Added to the <head> of every HTML page the test server sends (the built files are not
# changed). After the page's load event and MathJax's first typesetting it writes its
# findings as JSON into <script id="__probe">, which --dump-dom then prints. Waits are
# fetches of /__wait (answered 100 ms later, real time), not timers: Chromium's virtual time
# stands still while a request is pending, so the search worker gets real time to index.
PROBE = r"""<script>(function () {
  var out = {errors: []};
  window.addEventListener("error", function (e) { out.errors.push(String(e.message || e)); });
  window.addEventListener("unhandledrejection", function (e) { out.errors.push("unhandled rejection: " + e.reason); });
  function wait() { return fetch("/__wait", {cache: "no-store"}); }
  window.addEventListener("load", async function () {
    var mj = window.MathJax;
    out.mathjax = !!(mj && mj.startup && mj.startup.promise);
    if (out.mathjax) { try { await mj.startup.promise; } catch (e) { out.errors.push("MathJax: " + e); } }
    out.arithmatex = document.querySelectorAll(".arithmatex").length;
    out.typeset = document.querySelectorAll(".arithmatex mjx-container").length;
    out.merror = document.querySelectorAll("mjx-merror").length;
    out.images = Array.from(document.images).map(function (i) { return [i.getAttribute("src"), i.complete, i.naturalWidth]; });
    var q = new URLSearchParams(location.search).get("probe-search");
    if (q) {
      var input = document.querySelector("input.md-search__input");
      input.focus();
      input.value = q;
      input.dispatchEvent(new KeyboardEvent("keyup", {key: q.slice(-1)}));
      for (var k = 0; k < 300 && !document.querySelector(".md-search-result__item"); k++) await wait();
      // then a moment for the results' equations to be typeset (docs/javascripts/mathjax-config.js)
      for (var k = 0; k < 50 && /\\\(|\\\[/.test(document.querySelector(".md-search-result").innerText); k++) await wait();
      out.search_math = document.querySelectorAll(".md-search-result mjx-container").length;
      out.search_merror = document.querySelectorAll(".md-search-result mjx-merror").length;
      out.search = Array.from(document.querySelectorAll(".md-search-result__item a")).map(function (a) { return a.getAttribute("href"); });
      var meta = document.querySelector(".md-search-result__meta");
      out.search_meta = meta ? meta.textContent.trim() : null;
    }
    var s = document.createElement("script");
    s.type = "application/json";
    s.id = "__probe";
    s.textContent = JSON.stringify(out);
    document.body.appendChild(s);
  });
})();</script>"""


def _nav_pages() -> list[tuple[str, str]]:
    """(title, URL path) of every page of mkdocs.yml's nav, in order (use_directory_urls)."""
    import yaml

    pages = []

    def walk(items):
        for item in items:
            for title, target in item.items():
                if isinstance(target, list):
                    walk(target)
                else:
                    stem = target[:-len(".md")]
                    path = "" if stem == "index" else stem[:-len("index")] if stem.endswith("/index") else stem + "/"
                    pages.append((title, path))

    walk(yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"])
    return pages


class _Dom(HTMLParser):
    """The title and the text a reader sees (not code, scripts, styles nor MathJax's
    assistive MathML) of a dumped page, and its probe's JSON."""

    HIDDEN = {"code", "pre", "script", "style", "textarea", "mjx-assistive-mml", "svg"}
    VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}

    def __init__(self):
        super().__init__()
        self.title, self.text, self.probe = "", [], None
        self._stack: list[str] = []
        self._probe: list[str] | None = None  # the probe's JSON while it is read

    def handle_starttag(self, tag, attrs):
        if tag in self.VOID:
            return
        self._stack.append(tag)
        if tag == "script" and ("id", "__probe") in attrs:
            self._probe = []

    def handle_endtag(self, tag):
        if tag == "script" and self._probe is not None:
            self.probe, self._probe = json.loads("".join(self._probe)), None
        if tag in self._stack:
            while self._stack.pop() != tag:
                pass

    def handle_data(self, data):
        if self._probe is not None:
            self._probe.append(data)
        elif self._stack and self._stack[-1] == "title":
            self.title += data
        elif not self.HIDDEN.intersection(self._stack):
            self.text.append(data)


@pytest.fixture(scope="module")
def served(request):
    """The built site on 127.0.0.1 (a free port), each HTML page with the probe in its head;
    yields (base URL, the (path, status) of every request served)."""
    if CHROMIUM is None:
        pytest.skip("Chromium is not installed (apt-get install chromium; .ci/run installs it as root)")
    proc, out = request.getfixturevalue("site")  # built only where the browser test runs
    if proc.returncode != 0:
        pytest.fail("the site did not build (see test_site_builds_strict)")
    served = []

    class Handler(SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(out), **kwargs)

        def do_GET(self):
            path = self.path.split("?")[0]
            if path == "/__wait":
                time.sleep(0.1)
                self.send_response(204)
                self.end_headers()
                return
            file = Path(self.translate_path(path))
            file = file / "index.html" if file.is_dir() and path.endswith("/") else file
            if file.suffix == ".html" and file.is_file():
                body = file.read_text().replace("<head>", "<head>" + PROBE, 1).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            super().do_GET()

        def log_request(self, code="-", size="-"):
            served.append((self.path, int(getattr(code, "value", code))))

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", served
    finally:
        server.shutdown()
        server.server_close()


def _open(url: str, profile: Path) -> tuple[_Dom, str]:
    """The page's DOM after its scripts ran (and the probe reported), as headless Chromium dumps it."""
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
           "--disable-extensions", "--disable-background-networking", f"--user-data-dir={profile}",
           "--virtual-time-budget=120000", "--dump-dom", url]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    dom = _Dom()
    dom.feed(proc.stdout)
    return dom, proc.stdout if proc.stdout.strip() else proc.stderr[-3000:]


def test_site_in_a_browser(served, site, tmp_path):
    """Every page of the nav loads in headless Chromium with its title, no script error and no
    request that failed; its equations are typeset by MathJax (no `$$`, `\\(`, `\\[` or `$...$`
    left in the text a reader sees, no MathJax error); every image loads (served 200 and
    decoded, naturalWidth > 0); and the search box finds "collapse"."""
    from concurrent.futures import ThreadPoolExecutor

    base, served_log = served
    pages = _nav_pages()
    assert len(pages) >= 20 and ("Theory", "theory/") in pages
    urls = [base + path + ("?probe-search=collapse" if path == "" else "") for _, path in pages]
    with ThreadPoolExecutor(2) as pool:
        doms = list(pool.map(lambda iu: _open(iu[1], tmp_path / f"profile{iu[0]}"), enumerate(urls)))

    status = dict(served_log)
    raw_math = re.compile(r"\$\$|\\\(|\\\[|\$(?=\S)[^$\n]{1,200}(?<=\S)\$")
    for (title, path), (dom, raw) in zip(pages, doms):
        where = f"page {path or '/'} ({title})"
        assert status.get("/" + path + ("?probe-search=collapse" if path == "" else "")) == 200, where
        assert dom.probe is not None, f"{where}: no probe report in the dumped DOM (did the page load?): {raw[-2000:]}"
        assert dom.title.strip() == (f"{title} - samflow" if path else "samflow"), f"{where}: title {dom.title!r}"
        text = " ".join(" ".join(dom.text).split())
        assert len(text) > 200, f"{where}: almost no text: {text!r}"
        probe = dom.probe
        assert probe["mathjax"], f"{where}: MathJax did not load"
        assert not probe["errors"], f"{where}: script errors {probe['errors']}"
        assert probe["typeset"] == probe["arithmatex"], f"{where}: {probe['arithmatex']} equations, {probe['typeset']} typeset"
        assert probe["merror"] == 0, f"{where}: {probe['merror']} equations MathJax could not read (mjx-merror)"
        left = [text[max(0, m.start() - 60):m.end() + 60] for m in raw_math.finditer(text)]
        assert not left, f"{where}: raw TeX in the text a reader sees: {left[:5]}"
        for src, complete, width in probe["images"]:
            url = urljoin("/" + path, src)
            assert status.get(url) == 200, f"{where}: image {src} -> {url} served {status.get(url)}"
            assert complete and width > 0, f"{where}: image {src} did not decode (naturalWidth {width})"

    theory = doms[pages.index(("Theory", "theory/"))][0].probe
    assert theory["arithmatex"] >= 400 and theory["typeset"] == theory["arithmatex"]  # docs/theory.md's equations
    assert sum(len(dom.probe["images"]) for dom, _ in doms) >= 5
    failed = sorted({(p, c) for p, c in served_log if c >= 400})
    assert not failed, f"requests that failed: {failed[:20]}"
    assert any(p.startswith("/javascripts/mathjax/output/chtml/fonts/woff-v2/") for p, _ in served_log)  # its fonts, from the site

    home = doms[0][0].probe
    assert home["search"], f"the search box found nothing for 'collapse': {home.get('search_meta')!r}"
    assert any("/theory/" in h for h in home["search"]), home["search"]
    assert home["search_math"] > 0 and home["search_merror"] == 0, home  # the results' equations typeset
    index = json.loads((site[1] / "search" / "search_index.json").read_text())
    assert any("collapse" in d["text"].lower() for d in index["docs"])
