"""Per-cell outcome of a solve: a small enumeration with plain-sentence meanings."""

from __future__ import annotations

import enum

__all__ = ["Status", "STATUS_MESSAGES", "FAILED_STATUSES"]


class Status(enum.IntEnum):
    """How the solve of one cell ended. Stored as an int8 in result files."""

    FINISHED = 0
    COLLAPSED = 1
    SLID = 2
    BLEW_UP = 3
    MAX_STEPS = 4
    NONFINITE_INPUT = 5
    FAILED = 6
    CRITICAL = 7
    SURFACE = 8
    NONUNIQUE = 9

    @property
    def message(self) -> str:
        """A plain sentence saying what happened and what to do about it."""
        return STATUS_MESSAGES[self]


STATUS_MESSAGES = {
    Status.FINISHED: "Integrated to the final time.",
    Status.COLLAPSED: (
        "The weights reached 0 in finite time (the collapse of l2-SAM or lp-SAM, regime 1); "
        "`event_time` is the collapse time and the state is 0 from then on."
    ),
    Status.SLID: (
        "Integrated to the final time; some weights reached 0 and stayed there "
        "(Filippov sliding of the linf-SAM sign switch, or a column arriving at 0 under lp-SAM with p > 2); "
        "`slide_time` says which and when."
    ),
    Status.BLEW_UP: (
        "|beta| passed the blow-up threshold at `event_time` (finite-time blow-up of a "
        "rescaled flow, or growth past the float64 range); later saved values are NaN. "
        "Integrate in real time t to follow the cell further."
    ),
    Status.MAX_STEPS: (
        "The solver reached `max_steps` before the final time; `event_time` is where it "
        "stalled and later saved values are NaN. Increase `solver.max_steps` or loosen "
        "`solver.rtol`."
    ),
    Status.NONFINITE_INPUT: (
        "An input of this cell (alpha, rho or the data) was NaN or inf; nothing was integrated."
    ),
    Status.FAILED: (
        "The solver failed (step size underflow or a non-finite state); later saved values "
        "are NaN."
    ),
    Status.CRITICAL: (
        "The weights reached a critical point of the loss (grad L = 0) other than the "
        "depth >= 2 collapse to W = 0 (a nonzero critical point, or beta = 0 at depth 1), "
        "where the l2-SAM direction is undefined; the field points into it from every side, "
        "so they stay there from `event_time` on (Filippov solution)."
    ),
    Status.SURFACE: (
        "linf-SAM reached a third surface r_j(W) = 0 where its direction flips (multi-sample data) "
        "while sliding on two (or three at once; surfaces of columns of X that are not proportional: "
        "proportional columns are one surface), or two with no consistent continuation; or, under lp-SAM with p > 2, "
        "a column of W reached 0 as a whole from unequal layers (docs/theory.md s.4.3); "
        "samflow does not follow these: values after `event_time` are NaN."
    ),
    Status.NONUNIQUE: (
        "Integrated to the final time, but at `event_time` the continuation was not unique (linf-SAM on "
        "multi-sample data): weights at 0 (a whole column at even depth, or a weight repelled from both "
        "sides) could stay there or leave, and samflow held them there (the rule: stay at 0, a Filippov "
        "solution); or two switching surfaces r_j = 0 had several consistent continuations, and samflow "
        "took the one that keeps the most surfaces. It went on, so the values after `event_time` are one "
        "of the solutions (docs/theory.md s.4.3, \"Whole columns at 0\", \"Two surfaces at once\")."
    ),
}


#: The statuses of a cell that did not end normally (no valid value past its
#: `event_time`): everything but FINISHED, COLLAPSED, SLID, CRITICAL and NONUNIQUE.
FAILED_STATUSES = (Status.BLEW_UP, Status.MAX_STEPS, Status.NONFINITE_INPUT, Status.FAILED, Status.SURFACE)
