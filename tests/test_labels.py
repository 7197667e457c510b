"""`samflow._labels`: one mathtext and one plain-text name per method, the CNN's
optimizer names derived from them, and no second copy anywhere in the package."""

import ast
from pathlib import Path

import pytest

from samflow import _labels
from samflow.flows import METHOD_LABELS, Method

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "name, label, text",
    [
        (Method.L2, r"$\ell_2$-SAM", "l2-SAM"),
        ("l2", r"$\ell_2$-SAM", "l2-SAM"),
        ("linf", r"$\ell_\infty$-SAM", "linf-SAM"),
        ("sam_l2", r"$\ell_2$-SAM", "l2-SAM"),
        ("sam_linf", r"$\ell_\infty$-SAM", "linf-SAM"),
        ("gd", "GD", "GD"),
        ("usam", "USAM", "USAM"),
        ("adam", "adam", "adam"),  # not a method: shown as given
    ],
)
def test_method_labels(name, label, text):
    assert _labels.method_label(name) == label
    assert _labels.method_text(name) == text


def test_experiments_use_the_one_definition():
    from samflow.experiments import cnn, cnn_plots, cnn_study, cnn_study_plots, cnn_study_results

    assert cnn_plots.METHOD_LABELS is cnn_study_plots.LABELS is _labels.OPTIMIZER_LABELS
    assert cnn.METHOD_LABELS is cnn_study_results.METHOD_LABELS is cnn_study.METHOD_LABELS is _labels.OPTIMIZER_TEXT
    assert _labels.OPTIMIZER_LABELS == {"gd": "GD", "sam_l2": METHOD_LABELS[Method.L2], "sam_linf": METHOD_LABELS[Method.LINF]}
    assert set(_labels.METHOD_TEXT) == set(METHOD_LABELS) == set(Method)


def test_no_second_copy_of_a_label():
    """No string literal in the package other than the per-method table (_methods.py,
    where each method class holds its label; flows.METHOD_LABELS is built from it) and
    _labels.py is exactly a method label: a third copy would show up here."""
    labels = {v for v in [*METHOD_LABELS.values(), *_labels.METHOD_TEXT.values()] if v not in ("GD", "USAM")}
    hits = []
    for path in ROOT.joinpath("samflow").rglob("*.py"):
        if path.name in ("_methods.py", "_labels.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in labels:
                hits.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.value!r}")
    assert not hits, hits


def test_optimizer_names_are_the_cnn_configs():
    """The CNN optimizer names mapped here are exactly those a CNN config accepts."""
    import typing

    from samflow.experiments import cnn_config

    assert set(_labels.OPTIMIZER_METHODS) == set(typing.get_args(cnn_config.Method))
