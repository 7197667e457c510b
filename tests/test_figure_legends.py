"""The regime legend shared by the regime chart and the USAM ablation
(`samflow.figures._draw._regime_handles`)."""

import numpy as np
from matplotlib.colors import to_rgba

from samflow.figures._draw import _regime_handles
from samflow.plots import MISSING_COLOR, REGIME_COLORS, no_value_label
from samflow.status import Status


def test_regime_handles_labels_and_colours():
    h = _regime_handles()
    assert [p.get_label() for p in h] == ["undetermined", "regime 1: collapse", "regime 2: minor first, major last",
                                          "regime 3: major first"]
    assert [p.get_facecolor() for p in h] == [to_rgba(c) for c in REGIME_COLORS]


def test_regime_handles_add_the_no_value_patch_only_when_cells_miss():
    chart = _regime_handles(np.array([], int), undetermined=" (not at $d$ by the horizon)")
    assert len(chart) == 4 and chart[0].get_label() == "undetermined (not at $d$ by the horizon)"
    missing = [int(Status.BLEW_UP)]
    h = _regime_handles(missing, missing_prefix="bottom: ")
    assert len(h) == 5
    assert h[-1].get_label() == "bottom: " + no_value_label(missing)
    assert h[-1].get_facecolor() == to_rgba(MISSING_COLOR)
