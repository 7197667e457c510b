"""samflow: an ODE simulator of SAM training dynamics on linear diagonal networks.

Implements the flows of "Minor First, Major Last: A Depth-Induced Implicit Bias of
Sharpness-Aware Minimization" (ICLR 2026); see docs/theory.md for the equations.
Importing samflow turns on float64 in JAX (`jax_enable_x64`): the flows need it.
"""

import jax

jax.config.update("jax_enable_x64", True)

from .data import Dataset, single_sample  # noqa: E402
from .flows import Method, perturbation, real_time_velocity, rescaled_velocity, unit_l2  # noqa: E402
from .losses import Exponential, Logistic, get_loss  # noqa: E402
from .model import beta, grad_loss, init_weights, loss_value, prod_excl, residual  # noqa: E402
from .solve import Clock, SolverSettings, Summary, Trajectory, solve, solve_cell, summarize  # noqa: E402
from .status import STATUS_MESSAGES, Status  # noqa: E402

__version__ = "0.1.0"

__all__ = [
    "Clock", "Dataset", "Exponential", "Logistic", "Method", "STATUS_MESSAGES",
    "SolverSettings", "Status", "Summary", "Trajectory", "beta", "get_loss", "grad_loss",
    "init_weights", "loss_value", "perturbation", "prod_excl", "real_time_velocity",
    "rescaled_velocity", "residual", "single_sample", "solve", "solve_cell", "summarize", "unit_l2",
]
