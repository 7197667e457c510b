"""One-line argument checks that modules of every layer share (it imports nothing
of samflow, so the lowest modules can use it)."""

from __future__ import annotations

import os
import sys
import warnings

import numpy as np

__all__ = ["check_count", "float64_array", "narrow_float", "python_value"]


def check_count(value, name: str, least: int = 1) -> int:
    """`value` as an `int` >= `least`, for a count or a size (a depth, d, k, ...).

    **Raises:** `ValueError`, one line: "`name` must be an integer >= `least`,
    got `value!r`", for a value below `least`, a non-integer (2.0, "3") or a bool
    (True == 1 is a flag passed for a count, not a count).
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < least:
        raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")
    return int(value)


def narrow_float(x) -> "tuple[str, float] | None":
    """The first value of a float narrower than float64 (float32, float16: a
    numpy or JAX scalar or array) that is not the number it prints as, as
    (printed, its float64 value): np.float32(0.1) prints as 0.1 but is
    0.10000000149011612. None when every value is that number (np.float32(0.5),
    np.float32(10.0)), for float64 and for anything else (ints, lists, ...).

    A float32 in a config or an argument stands for the decimal it prints as;
    widened to float64 it is another number, and `ds.sel(rho=0.1)` or a
    comparison with 0.1 then misses it.
    """
    dtype = getattr(x, "dtype", None)
    if dtype is None or getattr(dtype, "kind", None) != "f" or dtype == np.float64:
        return None
    a = np.asarray(x)
    for v in np.unique(a[np.isfinite(a)]):
        printed = str(v)
        if float(printed) != float(v):
            return printed, float(v)
    return None


class NarrowFloat(ValueError):
    """A float32 (or narrower) value that float64 would turn into another number (`python_value`)."""


def python_value(v, key: str = "value"):
    """`v` with every numpy or JAX number in it (scalars, arrays, inside lists,
    tuples and dicts) made the Python value a config schema takes: a numpy
    integer an `int`, a bool a `bool`, a float64 a `float`, an array a (nested)
    list of those; anything else unchanged. `key` names `v` in an error (a
    dict's keys and a list's entries of dicts are added to it: "tasks.0.alphas").

    **Raises:** `NarrowFloat` (a `ValueError`), one line "`key`: a float32 value:
    0.1 in float32 is 0.10000000149011612 in float64, not 0.1; give float64
    numbers ...", for a float32 or float16 value that is not the number it
    prints as (`narrow_float`).
    """
    if isinstance(v, dict):
        return {k: python_value(x, f"{key}.{k}") for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return type(v)(python_value(x, f"{key}.{i}" if isinstance(x, dict) else key) for i, x in enumerate(v))
    if isinstance(v, (str, bytes)) or not hasattr(v, "dtype") or not hasattr(v, "__array__"):
        return v
    if getattr(v.dtype, "kind", None) not in ("b", "i", "u", "f"):
        return v
    found = narrow_float(v)
    if found is not None:
        printed, wide = found
        what = f"a {v.dtype} array" if np.ndim(v) else f"a {v.dtype} value"
        raise NarrowFloat(
            f"{key}: {what}: {printed} in {v.dtype} is {wide!r} in float64, not {printed}; give float64 numbers "
            "(Python floats, or numpy's default float64: .astype(np.float64) keeps the error)"
        )
    return np.asarray(v).tolist()


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # samflow/


def warn_caller(message: str) -> None:
    """`warnings.warn(message)` (a `UserWarning`) shown at the first frame of the
    call stack outside samflow: the user's line that passed the value."""
    frame, level = sys._getframe(1), 2
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE + os.sep):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, UserWarning, stacklevel=level)


def float64_array(x, name: str) -> np.ndarray:
    """`x` (a number, a list, a numpy or JAX array) as a float64 numpy array; a
    float32 (or float16) value that is not the number it prints as is widened
    with a `UserWarning` naming `name` and the number it became
    ("rho: 0.1 in float32 is 0.10000000149011612 in float64, the number used;
    pass float64 ... for 0.1 itself"), not silently.

    **Raises:** `TypeError` or `ValueError` where numpy cannot make the array.
    """
    a = np.asarray(x)
    found = narrow_float(a)
    if found is not None:
        printed, wide = found
        warn_caller(
            f"{name}: {printed} in {a.dtype} is {wide!r} in float64, the number used; pass float64 "
            f"(a Python float, np.float64, or an array made in float64) for {printed} itself"
        )
    return a.astype(np.float64)
