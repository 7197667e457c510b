"""mkdocs hook: MathJax served with the site, so that its mathematics renders offline.

The equations of the pages (docs/theory.md above all) are written as `$...$` and
`$$...$$`; pymdownx.arithmatex (generic mode) wraps them in `.arithmatex` elements, and
MathJax typesets those in the browser (docs/javascripts/mathjax-config.js). MathJax itself
is not fetched from a CDN nor committed here: it comes from the docs extra of pyproject.toml,
django-static-mathjax, a wheel that holds MathJax 3.2.2's built files (it needs no Django to
be read from disk). This hook adds the files the site uses to the build, under
`javascripts/mathjax/`: the TeX-to-HTML component, the TeX extensions it loads on demand,
its woff2 fonts, the menu and accessibility components it loads when a reader turns them
on (with the English speech rules), and MathJax's license.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

DEST = "javascripts/mathjax"
# Relative to MathJax's es5/ folder: a file, or a folder taken whole.
WANTED = ("tex-chtml.js", "input/tex/extensions", "output/chtml/fonts/woff-v2", "ui", "a11y",
          "sre/mathmaps/base.json", "sre/mathmaps/en.json")


def mathjax_root() -> Path:
    """MathJax's distribution folder (the one holding es5/ and LICENSE) in the installed wheel."""
    spec = importlib.util.find_spec("mathjax")
    root = Path(next(iter(spec.submodule_search_locations))) / "static" / "mathjax" if spec and spec.submodule_search_locations else None
    if root is None or not (root / "es5" / "tex-chtml.js").is_file():
        raise PluginError('MathJax is not installed (the docs render their equations with it, served with the site): '
                          'pip install -e ".[docs]" brings it (the django-static-mathjax wheel)')
    return root


def on_files(files: Files, config) -> Files:
    root = mathjax_root()
    es5 = root / "es5"
    paths = [root / "LICENSE"]
    for name in WANTED:
        p = es5 / name
        if not p.exists():
            raise PluginError(f"the installed MathJax has no es5/{name} (expected MathJax 3.2.x from django-static-mathjax)")
        paths += sorted(q for q in p.rglob("*") if q.is_file()) if p.is_dir() else [p]
    for p in paths:
        rel = p.relative_to(es5).as_posix() if p.is_relative_to(es5) else p.name
        files.append(File.generated(config, f"{DEST}/{rel}", abs_src_path=str(p)))
    return files
