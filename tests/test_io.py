"""The one atomic writer (samflow._util.io): a file is replaced whole or not at all."""

from __future__ import annotations

import os
import stat

import pytest

from samflow._util.io import atomic_path, atomic_write_bytes, atomic_write_text


def test_write_replaces_whole_with_normal_permissions(tmp_path):
    p = tmp_path / "r.txt"
    p.write_text("old")
    umask = os.umask(0o022)
    try:
        atomic_write_text("new", p)
    finally:
        os.umask(umask)
    assert p.read_text() == "new"
    assert stat.S_IMODE(p.stat().st_mode) == 0o644  # not mkstemp's 0600
    assert sorted(x.name for x in tmp_path.iterdir()) == ["r.txt"]


def test_a_failure_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    p = tmp_path / "r.nc"
    atomic_write_bytes(b"complete", p)
    with pytest.raises(KeyboardInterrupt):
        with atomic_path(p) as tmp:
            with open(tmp, "wb") as fh:
                fh.write(b"half")
            raise KeyboardInterrupt  # an interrupt mid-write
    assert p.read_bytes() == b"complete"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["r.nc"]


def test_savefig_gives_the_bytes_of_a_direct_save_and_nothing_on_failure(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from samflow._util.io import atomic_savefig

    fig, ax = plt.subplots(figsize=(2, 2))
    ax.plot([0, 1], [1, 0])
    direct, atomic = tmp_path / "direct", tmp_path / "atomic"
    direct.mkdir()
    atomic.mkdir()
    fig.savefig(direct / "f.png", dpi=50)
    assert atomic_savefig(fig, atomic / "f.png", dpi=50) == atomic / "f.png"
    assert (atomic / "f.png").read_bytes() == (direct / "f.png").read_bytes()
    atomic_savefig(fig, atomic / "f.pdf")
    assert (atomic / "f.pdf").read_bytes()[:5] == b"%PDF-"

    def broken(target, **kw):  # writes half a file, then fails (Ctrl-C)
        target.write(b"\x89PNG half")  # drawn into memory first: the disk is touched once it is whole
        raise KeyboardInterrupt

    fig.savefig = broken
    with pytest.raises(KeyboardInterrupt):
        atomic_savefig(fig, atomic / "g.png")
    assert sorted(x.name for x in atomic.iterdir()) == ["f.pdf", "f.png"]
    plt.close(fig)


def test_a_figure_laid_out_by_tight_layout_is_drawn_once_per_file_with_the_same_bytes(tmp_path, monkeypatch):
    # savefig laid out a tight_layout figure again (a draw of its own) for every file: the
    # sweep's figures were drawn five times for a PNG and a PDF, four of them the same layout.
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.figure import Figure

    from samflow._util.io import figure_bytes
    from samflow.plots._common import save_png_pdf

    def figure():
        fig, axes = plt.subplots(2, 2, figsize=(4, 3))
        for k, ax in enumerate(axes.flat):
            ax.plot([1, 10, 100], [k, 1, 2])
            ax.set_xscale("log")
            ax.set_title(f"panel {k}")
            ax.twinx().plot([1, 100], [0, 1])
        fig.tight_layout()
        return fig

    monkeypatch.setenv("SOURCE_DATE_EPOCH", "0")  # a PDF without the date it was made
    fig = figure()
    fig.set_dpi(50)
    fig.draw_without_rendering()
    direct = figure_bytes(fig, "png", dpi=50)  # savefig as it is, its layout pass included
    draws = []
    monkeypatch.setattr(Figure, "draw", lambda self, r, _draw=Figure.draw: draws.append(1) or _draw(self, r))
    assert figure_bytes(fig, "png", laid_out=True, dpi=50) == direct
    assert len(draws) == 1 and fig.get_layout_engine() is not None  # the engine is put back
    plt.close(fig)

    draws.clear()
    save_png_pdf(fig := figure(), tmp_path / "f.png", dpi=40)  # the measure, the PNG, the PDF's pass and the PDF
    assert len(draws) == 4
    monkeypatch.setattr(Figure, "draw", Figure.draw.__defaults__[0])
    plt.close(fig)
    (tmp_path / "ref").mkdir()
    fig = figure()
    fig.savefig(tmp_path / "ref" / "f.png", dpi=40, bbox_inches="tight")
    fig.savefig(tmp_path / "ref" / "f.pdf", bbox_inches="tight")
    plt.close(fig)
    assert (tmp_path / "f.png").read_bytes() == (tmp_path / "ref" / "f.png").read_bytes()
    assert (tmp_path / "f.pdf").read_bytes()[:5] == b"%PDF-"


def test_no_module_writes_a_result_file_in_place():
    """Every file the package writes goes through samflow._util.io (its docstring's
    promise): a direct savefig / write_text / write_bytes / to_netcdf on a target
    path elsewhere leaves a half-written file when a run is interrupted. Writing
    to the temporary name of `atomic_path` is the allowed form."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "samflow"
    bad = []
    for path in sorted(root.rglob("*.py")):
        if path.relative_to(root).as_posix() == "_util/io.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr in ("savefig", "write_text", "write_bytes", "to_netcdf"):
                first = node.args[0] if node.args else None
                if not (isinstance(first, ast.Name) and first.id == "tmp"):
                    bad.append(f"{path.relative_to(root.parent)}:{node.lineno} .{node.func.attr}")
    assert not bad, "write through samflow._util.io (atomic_savefig / atomic_write_text / atomic_path): " + ", ".join(bad)
