"""Measurements shared by several figures: the staircase test and the dominant feature with ties."""

from __future__ import annotations

import numpy as np

from ..analysis import dominant_index, tied


# Codes of a dominant-feature map besides the features 1..d and 0 (collapsed): all
# |beta_j| tied, and no value. -2 is the blow-up's (`samflow.plots._common.BLOWN_UP`,
# set by `with_blow_up` when the map is drawn), so a tie is -3.
TIED, MISSING = -3, -1


def staircase_ok(seq: list[int], d: int) -> bool:
    """Whether a visited sequence is 'minor first, major last' (docs/theory.md s.3).

    Allowed: an optional initial step-down (just above the regime 1/2 edge the
    first dominant feature can fall, e.g. 2 -> 1, before the climb), then a strictly
    increasing climb that ends at the major feature d, e.g. [2, 1, 2, 3, 4, 5] or
    [3, 4, 5].
    """
    if not seq or seq[-1] != d:
        return False
    k = 0
    while k + 1 < len(seq) and seq[k + 1] < seq[k]:
        k += 1
    climb = seq[k:]
    return all(b > a for a, b in zip(climb, climb[1:]))


def _dominant_with_ties(beta) -> np.ndarray:
    dom = dominant_index(beta)
    return np.where(tied(beta, 1e-9) & (dom > 0), TIED, dom)


def _first_informative_dominant(beta) -> np.ndarray:
    dom = dominant_index(beta)
    info = (dom > 0) & ~tied(beta, 1e-9)
    first = np.argmax(info, axis=-1)
    out = np.take_along_axis(dom, first[..., None], -1)[..., 0]
    return np.where(info.any(axis=-1), out, 0)
