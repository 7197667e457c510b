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


def _split_entry(name, p) -> "tuple[Method | None, float | None, str]":
    """A method, its exponent and the rest of a name: a `Method` or a method's
    name as it is; an entry of a sweep's flow axis that starts with a flow's name
    and a space, split there ("lp p=3" -> (Method.LP, 3.0, ""); "l2 x" -> (Method.L2,
    None, " x")); (None, p, name) for anything else (e.g. "discrete_lp p=3")."""
    m = _method(name)
    if m is not None:
        return m, p, ""
    head, sep, rest = str(name).partition(" ")
    m = _method(head) if sep else None
    if m is None:
        return None, p, str(name)
    if m is Method.LP and rest.startswith("p=") and p is None:
        value, _, rest = rest[2:].partition(" ")
        try:
            p, rest = float(value), (" " + rest if rest else "")
        except ValueError:
            return None, None, str(name)
        return m, p, rest
    return m, p, sep + rest


def method_label(name, p=None) -> str:
    """Mathtext label of a method for a figure, e.g. r"$\\ell_2$-SAM".

    **Arguments:** `name`: a `Method`, its value ("l2"), a CNN optimizer name
    ("sam_l2"), or an entry of a sweep's flow axis that starts with a flow's
    name ("lp p=3": r"$\\ell_p$-SAM ($p=3$)"); `p`: lp-SAM's exponent
    (r"$\\ell_p$-SAM ($p=3$)"), ignored for the other methods. **Returns:** the
    label; a name that is none of these, as given.
    """
    m, p, rest = _split_entry(name, p)
    if m is Method.LP and p is not None:
        return f"{METHOD_LABELS[m]} ($p={_p_text(p)}$)" + rest
    return str(name) if m is None else METHOD_LABELS[m] + rest


def method_text(name, p=None) -> str:
    """Plain-text label of a method (logs, tables, Markdown), e.g. "l2-SAM",
    "lp-SAM (p=3)" for "lp" with `p` = 3 or the flow-axis entry "lp p=3"; the
    same arguments as `method_label`."""
    m, p, rest = _split_entry(name, p)
    if m is Method.LP and p is not None:
        return f"{METHOD_TEXT[m]} (p={_p_text(p)})" + rest
    return str(name) if m is None else METHOD_TEXT[m] + rest
