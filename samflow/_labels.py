"""How each method is named: on a figure (mathtext) and in plain text (logs, tables,
report lines), for the four flows and for the CNN experiments' optimizers.

The one mathtext definition is `samflow.flows.METHOD_LABELS` (keyed by `Method`);
the one plain-text definition is `METHOD_TEXT` here. The CNN experiments name
their optimizers "gd", "sam_l2", "sam_linf" (their configs and result files):
`OPTIMIZER_METHODS` maps those names to the flows' methods, and their labels are
derived from the two definitions, so a label changed once changes everywhere.
"""

from __future__ import annotations

from .flows import METHOD_LABELS, Method

__all__ = ["METHOD_LABELS", "METHOD_TEXT", "OPTIMIZER_METHODS", "OPTIMIZER_LABELS", "OPTIMIZER_TEXT",
           "method_label", "method_text"]

METHOD_TEXT = {Method.GD: "GD", Method.L2: "l2-SAM", Method.LINF: "linf-SAM", Method.USAM: "USAM"}

OPTIMIZER_METHODS = {"gd": Method.GD, "sam_l2": Method.L2, "sam_linf": Method.LINF}
OPTIMIZER_LABELS = {name: METHOD_LABELS[m] for name, m in OPTIMIZER_METHODS.items()}
OPTIMIZER_TEXT = {name: METHOD_TEXT[m] for name, m in OPTIMIZER_METHODS.items()}


def _method(name) -> Method | None:
    if isinstance(name, Method):
        return name
    name = str(name)
    if name in OPTIMIZER_METHODS:
        return OPTIMIZER_METHODS[name]
    try:
        return Method(name)
    except ValueError:
        return None


def _split_entry(name) -> "tuple[Method | None, str]":
    """A method and the rest of an entry of a sweep's flow axis: "lp p=3" ->
    (Method.LP, " p=3"), "discrete_lp p=3 eta=0.1" -> (None, ...): only a flow's
    own name before the first space is read; anything else is (None, name)."""
    if isinstance(name, Method):
        return name, ""
    head, sep, rest = str(name).partition(" ")
    m = _method(head)
    return (m, sep + rest) if m is not None else (None, str(name))


def method_label(name) -> str:
    """Mathtext label of a method for a figure, e.g. r"$\\ell_2$-SAM".

    **Arguments:** `name`: a `Method`, its value ("l2"), a CNN optimizer name
    ("sam_l2"), or an entry of a sweep's flow axis that starts with a flow's
    name ("lp p=3": r"$\\ell_p$-SAM p=3"). **Returns:** the label; a name that is
    none of these, as given.
    """
    m, rest = _split_entry(name)
    return str(name) if m is None else METHOD_LABELS[m] + rest


def method_text(name) -> str:
    """Plain-text label of a method (logs, tables, Markdown), e.g. "l2-SAM" or
    "lp-SAM p=3"; the same arguments as `method_label`."""
    m, rest = _split_entry(name)
    return str(name) if m is None else METHOD_TEXT[m] + rest
