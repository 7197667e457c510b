"""One-line argument checks that modules of every layer share (it imports nothing
of samflow, so the lowest modules can use it)."""

from __future__ import annotations

import numpy as np

__all__ = ["check_count"]


def check_count(value, name: str, least: int = 1) -> int:
    """`value` as an `int` >= `least`, for a count or a size (a depth, d, k, ...).

    **Raises:** `ValueError`, one line: "`name` must be an integer >= `least`,
    got `value!r`", for a value below `least`, a non-integer (2.0, "3") or a bool
    (True == 1 is a flag passed for a count, not a count).
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < least:
        raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")
    return int(value)
