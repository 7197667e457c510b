"""mkdocs hook: the config reference, generated from the pydantic schemas at build time.

A line `<!-- config-reference: NAME -->` in a page is replaced by the tables of the
config NAME (a key of `ROOTS`): every key with its type, default, allowed range and
meaning, read from the schema (`model_fields`: the annotation, the default, the
constraints and the field's description, its attribute docstring), so the page
cannot drift from what the loaders accept. tests/test_docs_site.py checks that every
field of every config schema has a description and that `ROOTS` reaches every schema.
"""

from __future__ import annotations

import importlib
import inspect
import re
import sys
import types
import typing
from pathlib import Path
from typing import Annotated, Any, Literal

import annotated_types as at
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

# The repository's samflow, whatever is installed (mkdocstrings reads it from here too: paths ["."]).
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

MARKER = re.compile(r"^<!-- config-reference: ([\w-]+) -->$", re.M)


def _model(path: str) -> type[BaseModel]:
    module, name = path.split(":")
    return getattr(importlib.import_module(module), name)


def roots() -> dict[str, list[tuple[str, type[BaseModel]]]]:
    """Each documented config: a list of (file or title, top-level schema)."""
    from samflow.figures import FIGURE_CONFIGS  # every file of configs/figures/, common.toml included

    return {
        "sweep": [("", _model("samflow.config:SweepConfig"))],
        "atlas": [("", _model("samflow.atlas._config:AtlasConfig"))],
        "cnn": [("", _model("samflow.experiments.cnn_config:CnnConfig"))],
        "cnn-study": [("", _model("samflow.experiments.cnn_study_config:StudyConfig"))],
        "figures": [(f"{name}.toml", model) for name, model in FIGURE_CONFIGS.items()],
    }


def _is_model(tp: Any) -> bool:
    return inspect.isclass(tp) and issubclass(tp, BaseModel)


def _strip(tp: Any) -> Any:
    """The type without its Annotated metadata."""
    while typing.get_origin(tp) is Annotated:
        tp = typing.get_args(tp)[0]
    return tp


def _union_args(tp: Any) -> tuple:
    tp = _strip(tp)
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return typing.get_args(tp)
    return (tp,)


def type_text(tp: Any) -> str:
    """A reader's name for a field's type: `float`, `list of float`, `"log" / "linear"`, `table`."""
    args = [a for a in _union_args(tp) if a is not type(None)]
    if len(args) > 1:
        return " or ".join(type_text(a) for a in args)
    tp = _strip(args[0])
    origin = typing.get_origin(tp)
    if origin is Literal:
        return " / ".join(f'`"{v}"`' if isinstance(v, str) else f"`{v}`" for v in typing.get_args(tp))
    if origin in (list, tuple):
        inner = [a for a in typing.get_args(tp) if a is not Ellipsis]
        return "list of " + (type_text(inner[0]) if inner else "values")
    if origin is dict:
        return "table of " + type_text(typing.get_args(tp)[1])
    if _is_model(tp):
        return "table"
    return f"`{getattr(tp, '__name__', str(tp))}`"


_BOUNDS = ((at.Ge, "ge", ">="), (at.Gt, "gt", ">"), (at.Le, "le", "<="), (at.Lt, "lt", "<"))


def _constraints(metadata) -> list[str]:
    out = []
    for m in metadata:
        for cls, attr, sym in _BOUNDS:
            if isinstance(m, cls):
                v = getattr(m, attr)
                out.append(f"{sym} {v:g}" if isinstance(v, float) else f"{sym} {v:_}")
        if isinstance(m, at.MinLen) and m.min_length:
            out.append(f"length >= {m.min_length}")
        if isinstance(m, at.MaxLen):
            out.append(f"length <= {m.max_length}")
        if hasattr(m, "metadata") and not isinstance(m, type):  # a FieldInfo inside Annotated
            out += _constraints(m.metadata)
    return out


def _annotated_metadata(tp: Any) -> list:
    meta = []
    while typing.get_origin(tp) is Annotated:
        meta += list(tp.__metadata__)
        tp = typing.get_args(tp)[0]
    return meta


def range_text(field) -> str:
    """The constraints of a field (and of its entries, for a list), e.g. `>= 1, <= 64`."""
    parts = _constraints(field.metadata)
    for arg in _union_args(field.annotation):
        parts += _constraints(_annotated_metadata(arg))
        arg = _strip(arg)
        if typing.get_origin(arg) in (list, tuple):
            for inner in typing.get_args(arg):
                each = _constraints(_annotated_metadata(inner))
                if each:
                    parts.append("each " + ", ".join(each))
    return ", ".join(dict.fromkeys(parts))


def _toml(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return f'"{v}"'
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml(x) for x in v) + "]"
    if isinstance(v, BaseModel):
        return "(table defaults)"
    return str(v)


def default_text(field) -> str:
    if field.default_factory is not None:
        return f"`{_toml(field.default_factory())}`"
    if field.default is PydanticUndefined:
        return "**required**"
    if field.default is None:
        return "unset"
    return f"`{_toml(field.default)}`"


def _cell(text: str) -> str:
    """One table cell: one line, `|` escaped, and `<`, `>` outside code spans written as
    entities (`f = <v, U x>` would otherwise be read as an HTML tag and vanish)."""
    parts = " ".join(text.split()).replace("|", "\\|").split("`")
    parts[::2] = [p.replace("<", "&lt;").replace(">", "&gt;") for p in parts[::2]]
    return "`".join(parts)


def nested(field) -> list[tuple[type[BaseModel], bool]]:
    """The schemas a field's value may be (a table, or a list of tables: `[[key]]`)."""
    out = []
    for arg in _union_args(field.annotation):
        arg = _strip(arg)
        if _is_model(arg):
            out.append((arg, False))
        elif typing.get_origin(arg) in (list, tuple, dict):
            out += [(_strip(a), True) for a in typing.get_args(arg) if _is_model(_strip(a))]
    return out


def tables(model: type[BaseModel], prefix: str = "") -> list[tuple[str, type[BaseModel]]]:
    """(key prefix, schema) of a schema and of every table below it, depth first."""
    out = [(prefix, model)]
    for name, field in model.model_fields.items():
        for sub, many in nested(field):
            out += tables(sub, f"{prefix}{name}[]." if many else f"{prefix}{name}.")
    return out


def render_table(model: type[BaseModel], prefix: str, level: int) -> str:
    key = prefix.rstrip(".")
    if key.endswith("[]"):
        title = f"`[[{key[:-2]}]]`"
    else:
        title = f"`[{key}]`" if key else "top level"
    doc = inspect.cleandoc(model.__doc__ or "").split("\n\n")[0]
    lines = [f"{'#' * level} {title}", ""]
    if doc and not doc.startswith("A base class") and model.__doc__ is not BaseModel.__doc__:
        lines += [_cell(doc), ""]
    lines += ["| key | type | default | range | meaning |", "|---|---|---|---|---|"]
    for name, field in model.model_fields.items():
        lines.append(
            f"| `{prefix.replace('[]', '')}{name}` | {type_text(field.annotation)} | {default_text(field)} | "
            f"{range_text(field) or '-'} | {_cell(field.description or '')} |"
        )
    return "\n".join(lines) + "\n"


def render(name: str) -> str:
    parts = []
    for title, model in roots()[name]:
        level = 3
        if title:
            parts.append(f"### `{title}`\n")
            level = 4
        for prefix, sub in tables(model):
            parts.append(render_table(sub, prefix, level))
    return "\n".join(parts)


def on_page_markdown(markdown: str, page, config, files) -> str:
    return MARKER.sub(lambda m: render(m.group(1)), markdown)
