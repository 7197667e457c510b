"""Deprecated path (kept for one release): the L-layer diagonal network and its
hand-written gradient moved to `samflow.diagonal_net`; this module re-exports every
name (`from samflow.diagonal_net import beta, grad_loss, ...`). The new name says
what the module is, and no longer reads as a twin of `samflow.models` (the solver
for any differentiable model)."""

import warnings as _warnings

_warnings.warn("samflow.model is deprecated and will be removed in the release after 0.2: import from samflow.diagonal_net",
               DeprecationWarning, stacklevel=2)


from .diagonal_net import (  # noqa: F401
    __all__ as __all__,
    _init_shape_message as _init_shape_message,
    beta as beta,
    grad_loss as grad_loss,
    init_weights as init_weights,
    loss_value as loss_value,
    margins as margins,
    prod_excl as prod_excl,
    residual as residual,
)
