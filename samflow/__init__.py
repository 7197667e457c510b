"""samflow: an ODE simulator of SAM training dynamics on linear diagonal networks.

Implements the flows of "Minor First, Major Last: A Depth-Induced Implicit Bias of
Sharpness-Aware Minimization" (ICLR 2026); see docs/theory.md for the equations.
Importing samflow changes no setting of JAX or matplotlib. The flows need float64:
the solvers (`solve`, `samflow.sweep.solve_grid`, ...) compute in a local float64
context when the program has not turned it on (`samflow._util.x64`); the command lines
turn it on for their process.
"""

from ._util.startup import command_start as _command_start, paused_gc as _paused_gc

# `python -m samflow.<command>` imports this package first: a Ctrl-C during these
# imports (JAX, diffrax) is the command's one line and exit 130, not a traceback; the
# garbage collector waits until they are done (`paused_gc`).
with _command_start(), _paused_gc():
    from .datasets import Dataset, single_sample
    from .flows import Method, perturbation, real_time_velocity, rescaled_velocity, unit_l2, velocity
    from .losses import Exponential, Logistic, get_loss
    from .diagonal_net import beta, grad_loss, init_weights, loss_value, prod_excl, residual
    from .solver import Clock, SolverSettings, Summary, Trajectory, solve, solve_cell, summarize
    from .status import STATUS_MESSAGES, Status

del _command_start, _paused_gc

__version__ = "0.3.0"

__all__ = [
    "Clock", "Dataset", "Exponential", "Logistic", "Method", "STATUS_MESSAGES",
    "SolverSettings", "Status", "Summary", "Trajectory", "beta", "get_loss", "grad_loss",
    "init_weights", "loss_value", "perturbation", "prod_excl", "real_time_velocity",
    "rescaled_velocity", "residual", "single_sample", "solve", "solve_cell", "summarize", "unit_l2",
    "velocity",
]
