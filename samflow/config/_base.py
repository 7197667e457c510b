"""The base of every config schema (sweep, CNN, figures, atlas): `ConfigModel`,
`ConfigError` and the list checks `increasing`, `distinct`, `field_check`."""

from __future__ import annotations

import re
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from .._util.checks import NarrowFloat, python_value


class ConfigError(ValueError):
    """A config file that cannot be used; `str(err)` is one line per problem."""


class ConfigModel(BaseModel):
    """Base of every config schema (sweep, CNN, figures): unknown keys and wrong
    types are refused, and so are non-finite numbers (nan, inf, -inf, which TOML
    allows) in every float field, nested lists, tuples and tables included, in
    this one place, so no key can be forgotten (`format_errors` reports them with
    `NON_FINITE_MESSAGE`, naming the key)."""

    model_config = ConfigDict(
        extra="forbid", strict=True, frozen=True, allow_inf_nan=False, use_attribute_docstrings=True
    )

    @model_validator(mode="before")
    @classmethod
    def _python_values(cls, data):
        # A config given from Python may hold numpy (or JAX) numbers: np.int64(2),
        # np.geomspace(...), np.float32(0.1). Integers, bools, float64 and arrays
        # become the Python values TOML gives; a float32 that is not the number it
        # prints as is refused, naming its key (strict mode took it as 0.10000000149).
        if not isinstance(data, dict):
            return data
        lines, out = [], {}
        for key, value in data.items():
            try:
                out[key] = python_value(value, str(key))
            except NarrowFloat as err:
                lines.append(str(err))
        if lines:
            raise ValueError("\n".join(lines))
        return out


_Strict = ConfigModel


#: The one rule for a name that becomes a folder (a run's `name`, a CNN task's `name`), said in its message.
NAME_RULE = (
    "use only ASCII letters a-z A-Z (spell a Greek letter out: alpha, rho), digits 0-9, '.', '_' and '-', "
    "not starting with '.' or '-'"
)
_FOLDER_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")


def check_name(v: str, what: str) -> str:
    """`v` when it is a plain folder name (`NAME_RULE`): ASCII only, so no
    invisible character (a zero-width space, a no-break space, a direction
    mark) can make two names that look alike, or a name that looks like
    another; no path separator, no '..', no hidden file.

    **Raises:** `ValueError`, one line: "not a plain folder name, got 'v'
    (`what`): use only ASCII letters ...", with `v` as its repr (an
    invisible character written as an escape, e.g. 'a\\u200bb').
    """
    if not _FOLDER_NAME.fullmatch(v):
        raise ValueError(f"not a plain folder name, got {v!r} ({what}): {NAME_RULE}")
    return v


class RunConfig(ConfigModel):
    """Base of the top-level config of each command (sweep, atlas, CNN, CNN study):
    `name` and `description`, and `run_folder`, the one rule for where a run writes.

    `name` is one plain folder name (`NAME_RULE`: ASCII letters, digits, '.',
    '_' and '-', not starting with '.' or '-') or empty (the config file's stem
    stands in). A name with a path in it was taken as given: an absolute one
    replaced output.dir (`name = "/tmp/x"` wrote to /tmp/x), and the CNN
    study's `--overwrite` removed `<output.dir>/<name>/runs` wherever that
    pointed; a zero-width space made a folder that looks like another.

    **Raises:** `ConfigError` at load, naming `name`, for anything else.
    """

    name: str = ""
    """The run's folder name: results go to `<output.dir>/<name>/`. One plain folder name (letters, digits,
    `.`, `_`, `-`, not starting with `.` or `-`); empty: the config file's name."""
    description: str = ""
    """Free text describing the run, stored with the results."""

    @field_validator("name")
    @classmethod
    def _plain_folder_name(cls, v: str) -> str:
        if v:
            check_name(v, "it names the run's folder under output.dir; leave it empty for the config file's name")
        return v

    def run_folder(self, output_dir: "str | Path", config_path: "str | Path") -> Path:
        """`<output_dir>/<name>`, or `<output_dir>/<config file stem>` when the name is empty.

        **Raises:** `ConfigError` (one line, naming `name`) when the name is empty and
        the file's stem is no plain folder name (`NAME_RULE`): a file `...toml` would
        write into `<output_dir>/..`.
        """
        if self.name:
            return Path(output_dir) / self.name
        stem = Path(config_path).stem
        if not _FOLDER_NAME.fullmatch(stem):
            raise ConfigError(f"{config_path}: name: empty, and the config file's name {stem!r} is no plain folder "
                              f"name; set name = \"...\" in the file ({NAME_RULE})")
        return Path(output_dir) / stem


NON_FINITE_MESSAGE = "non-finite value: give a finite number (nan and inf are not allowed)"


def increasing(what: str, empty: str | None = None) -> typing.Callable[[list], list]:
    """A check for `field_check`: the list must be strictly increasing (message
    "`what` must be strictly increasing, got [...]"); with `empty`, an empty list
    is refused with that message first. The check returns the list it was given."""

    def check(values: list) -> list:
        if empty is not None and not values:
            raise ValueError(empty)
        if any(b <= a for a, b in zip(values, values[1:])):
            raise ValueError(f"{what} must be strictly increasing, got {values}")
        return values

    return check


def distinct(message: str) -> typing.Callable[[list], list]:
    """A check for `field_check`: no entry may repeat; `message` is the error,
    with `{}` standing for the list."""

    def check(values: list) -> list:
        if len(set(values)) != len(values):
            raise ValueError(message.format(values))
        return values

    return check


def field_check(*fields: str, check: typing.Callable[[Any], Any]):
    """A pydantic field validator of `fields` running `check` (which raises
    `ValueError`) on every given value (None, an omitted optional key, passes);
    assign it to a class attribute of a `ConfigModel`:
    `_alphas = field_check("alphas", check=increasing("train.alphas"))`.
    The error names the field, as a validator written in the class does."""

    def validator(cls, v):
        if v is not None:
            check(v)
        return v

    return field_validator(*fields)(validator)
