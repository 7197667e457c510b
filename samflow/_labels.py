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

METHOD_TEXT = {Method.GD: "GD", Method.L2: "l2-SAM", Method.LINF: "linf-SAM", Method.USAM: "USAM", Method.LP: "lp-SAM"}

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


def _p_text(p) -> str:
    return f"{float(p):g}"


def method_label(name, p=None) -> str:
    """Mathtext label of a method for a figure, e.g. r"$\\ell_2$-SAM".

    **Arguments:** `name`: a `Method`, its value ("l2") or a CNN optimizer name
    ("sam_l2"); `p`: lp-SAM's exponent (r"$\\ell_p$-SAM ($p=3$)"), ignored for
    the other methods. **Returns:** the label; a name that is none of these, as given.
    """
    m = _method(name)
    if m is Method.LP and p is not None:
        return f"{METHOD_LABELS[m]} ($p={_p_text(p)}$)"
    return str(name) if m is None else METHOD_LABELS[m]


def method_text(name, p=None) -> str:
    """Plain-text label of a method (logs, tables, Markdown), e.g. "l2-SAM",
    "lp-SAM (p=3)" for "lp" with `p` = 3; the same arguments as `method_label`."""
    m = _method(name)
    if m is Method.LP and p is not None:
        return f"{METHOD_TEXT[m]} (p={_p_text(p)})"
    return str(name) if m is None else METHOD_TEXT[m]
