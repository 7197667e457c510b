"""The base of every config schema (sweep, CNN, figures, atlas): `ConfigModel`,
`ConfigError` and the list checks `increasing`, `distinct`, `field_check`."""

from __future__ import annotations

import typing
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator


class ConfigError(ValueError):
    """A config file that cannot be used; `str(err)` is one line per problem."""


class ConfigModel(BaseModel):
    """Base of every config schema (sweep, CNN, figures): unknown keys and wrong
    types are refused, and so are non-finite numbers (nan, inf, -inf, which TOML
    allows) in every float field, nested lists, tuples and tables included, in
    this one place, so no key can be forgotten (`format_errors` reports them with
    `NON_FINITE_MESSAGE`, naming the key)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)


_Strict = ConfigModel
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
