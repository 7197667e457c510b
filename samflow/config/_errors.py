"""Errors of a config file as one line each (`format_errors`, `validate`) and the
TOML reader (`read_toml`)."""

from __future__ import annotations

import codecs
import difflib
import re
import tomllib
import types
import typing
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ValidationError

from ._base import NON_FINITE_MESSAGE, ConfigError


def _did_you_mean(loc: tuple, model: type[BaseModel]) -> "str | None":
    """The known key closest to an unknown key at `loc` of `model`, or None."""
    if not loc:
        return None
    cls: Any = model
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        field = getattr(cls, "model_fields", {}).get(part)
        if field is None:
            return None
        ann = field.annotation
        args = list(getattr(ann, "__args__", (ann,)))
        for a in list(args):
            args.extend(getattr(a, "__args__", ()))
        cls = next((a for a in args if isinstance(a, type) and issubclass(a, BaseModel)), None)
        if cls is None:
            return None
    close = difflib.get_close_matches(str(loc[-1]), list(cls.model_fields), n=1)
    return close[0] if close else None


_KEYED = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*(?:\.(?:[A-Za-z_][A-Za-z0-9_]*|[0-9]+))*)(:| =) ")
_UNION_NOISE = ("Input should be a valid list", "Input should be a valid dictionary")


def _unwrap(ann):
    """`ann` without Annotated and without an Optional's None (neither adds a
    location part to pydantic's errors)."""
    while True:
        origin, args = typing.get_origin(ann), typing.get_args(ann)
        if origin is Annotated:
            ann = args[0]
        elif origin in (typing.Union, types.UnionType) and type(None) in args and len(args) == 2:
            ann = next(a for a in args if a is not type(None))
        else:
            return ann


def _clean_loc(loc: tuple, model: type[BaseModel]) -> tuple:
    """The keys of an error location, without the union member tags pydantic puts
    in it (e.g. 'list[float]', 'GridAxis' in ('grid', 'alpha', 'GridAxis', 'start')).

    The location is followed through the schema, so a key that looks like a tag
    (data.X, or an unknown key '[]') is kept.
    """
    out, cur = [], model
    for part in loc:
        cur = _unwrap(cur) if cur is not None else None
        origin, args = typing.get_origin(cur), typing.get_args(cur)
        if origin in (typing.Union, types.UnionType) and isinstance(part, str):
            named = [a for a in args if getattr(a, "__name__", None) == part]
            cur = named[0] if named else next((a for a in args if typing.get_origin(_unwrap(a)) is not None), None)
            continue  # a member tag, not a key
        out.append(part)
        if isinstance(cur, type) and issubclass(cur, BaseModel) and isinstance(part, str):
            field = cur.model_fields.get(part)
            cur = field.annotation if field is not None else None
        elif origin in (list, tuple) and isinstance(part, int):
            cur = args[0] if origin is list else (args[part] if part < len(args) else None)
        elif origin is dict:
            cur = args[1]
        else:
            cur = None
    return tuple(out)


def format_errors(err: ValidationError, source: str, model: type[BaseModel]) -> str:
    """One line per problem of a pydantic `ValidationError` of `model`, each naming
    the file (`source`), the field, the bad value and what is allowed. A misspelled
    required key is one problem, said once: "method: unknown key (did you mean
    'methods'?, a required key that is missing); rename it", not also "methods:
    required key is missing"."""
    entries = []
    suggested: dict[str, int] = {}  # a key suggested for an unknown one -> that entry's index
    for e in err.errors(include_url=False):
        loc = _clean_loc(e["loc"], model)
        # A key with a line break or another unprintable character (TOML allows
        # any quoted key) is shown as its repr, so the message stays one line per error.
        where = ".".join(str(p) if str(p).isprintable() else repr(p) for p in loc) or "(top level)"
        if e["type"] == "extra_forbidden":
            close = _did_you_mean(loc, model)
            if close is not None:
                suggested[".".join(map(str, (*loc[:-1], close)))] = len(entries)
            hint = f" (did you mean '{close}'?)" if close else ""
            entries.append((where, f"unknown key{hint}; remove it or fix its spelling"))
            continue
        if e["type"] == "missing":
            entries.append((where, "required key is missing"))
            continue
        msg = e["msg"].removeprefix("Value error, ")
        value = e.get("input")
        if e["type"] == "finite_number":
            msg = NON_FINITE_MESSAGE
            if value == float("inf") and loc[-2:-1] == ("p",) and loc[:1] in (("lp",), ("p",)):
                msg += '; lp-SAM with p = inf is the method "linf": list "linf" in methods'
        elif e["type"] == "bool_type":
            msg = "must be true or false (TOML booleans, no quotes)"
        elif isinstance(value, str) and e["type"] in ("float_type", "int_type", "list_type", "float_parsing", "int_parsing"):
            msg += "; a number is written without quotes"
        if isinstance(value, dict) or isinstance(value, BaseModel):
            # A check between keys of a table: its lines name their own keys, as
            # "key: message" (the key becomes the location) or "key = value ..." (kept whole).
            for line in msg.splitlines():
                m = _KEYED.match(line)
                if m and m.group(2) == ":":
                    entries.append((".".join(p for p in (where if loc else "", m.group(1)) if p), line[m.end():]))
                elif m and not loc:
                    entries.append(("", line))
                else:
                    entries.append((where, line))
            continue
        # A validator's message may name its field and value itself ("grid.rho must be >= 0,
        # got -0.01"): say each once.
        msg = msg.removeprefix(where + " ") if loc else msg
        entries.append((where, msg if ", got " in msg or "(got " in msg else msg + f" (got {value!r})"))
    for i, (where, msg) in enumerate(entries):
        if msg == "required key is missing" and where in suggested:
            j = suggested[where]
            close = where.rsplit(".", 1)[-1]
            entries[j] = (entries[j][0], f"unknown key (did you mean '{close}'?, a required key that is missing); rename it")
            entries[i] = ("", "")
    entries = [e for e in entries if e != ("", "")]
    # A value that fits no member of a union (list | {start, stop, num}) reports
    # one line per member: keep the specific lines, merge the generic ones.
    out = []
    for where, msg in entries:
        if msg.startswith(_UNION_NOISE):
            if any(w.startswith(where + ".") or (w == where and not m.startswith(_UNION_NOISE)) for w, m in entries):
                continue
            generic = [m for w, m in entries if w == where and m.startswith(_UNION_NOISE)]
            if any(w == where and m.startswith("Input should be a valid number") for w, m in entries):
                msg = "must be a number or a list of numbers" + (msg[msg.index(";"):] if ";" in msg else "")
            elif len(generic) > 1:
                msg = "must be a list of numbers or a table {start, stop, num, scale}" + (
                    msg[msg.index(" (got"):] if " (got" in msg else ""
                )
        out.append(f"{source}: {where}: {msg}" if where else f"{source}: {msg}")
    return "\n".join(dict.fromkeys(out))


def validate(model: type[BaseModel], raw: dict, source: str = "config"):
    """Validate `raw` (a dict read from TOML) against the pydantic `model`.

    **Raises:** `ConfigError` listing every problem, one line each.
    """
    try:
        return model.model_validate(raw)
    except ValidationError as err:
        raise ConfigError(format_errors(err, source, model)) from None


def read_toml(path: "str | Path") -> dict:
    """Read a TOML file into a dict.

    **Raises:** `ConfigError` (one line) for a missing or unreadable file or invalid TOML.
    """
    path = Path(path)
    if path.is_dir():
        tomls = sorted(path.glob("*.toml"), key=lambda f: (f.name != "default.toml", f.name))
        raise ConfigError(
            f"{path}: is a folder; give the path of one .toml file"
            + (f" in it, e.g. {tomls[0]}" if tomls else " (see configs/)")
        )
    if not path.is_file():
        raise ConfigError(f"{path}: config file not found; give the path of a .toml file (see configs/)")
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise ConfigError(f"{path}: cannot read the file: {err}") from None
    return parse_toml(raw, path)


#: Byte-order marks of the encodings TOML does not allow (UTF-32 first: its LE mark starts with UTF-16's).
_WIDE_BOMS = (
    (codecs.BOM_UTF32_LE, "UTF-32"), (codecs.BOM_UTF32_BE, "UTF-32"),
    (codecs.BOM_UTF16_LE, "UTF-16"), (codecs.BOM_UTF16_BE, "UTF-16"),
)


def parse_toml(raw: bytes, path: "str | Path") -> dict:
    """The TOML document `raw` (the bytes of the file `path`) as a dict.

    A UTF-8 byte-order mark (which Windows editors write, and which `tomllib`
    reports as "Invalid statement (at line 1, column 1)") is dropped; a file in
    UTF-16 or UTF-32 (TOML is UTF-8) is refused in one line saying so.

    **Raises:** `ConfigError` (one line) for another encoding than UTF-8 or invalid TOML.
    """
    for bom, encoding in _WIDE_BOMS:
        if raw.startswith(bom):
            raise ConfigError(f"{path}: the file is {encoding} (it starts with a {encoding} byte-order mark); "
                              "TOML is UTF-8: save it as UTF-8")
    try:
        text = raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not UTF-8 (byte {err.start} is {raw[err.start:err.start + 1]!r}); "
                          "TOML is UTF-8: save the file as UTF-8") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path}: not valid TOML: {err}") from None
