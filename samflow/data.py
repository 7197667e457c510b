"""Deprecated path (kept for one release): the `Dataset` type, `single_sample` and
`load_dataset` moved to `samflow.datasets`, next to `save_dataset` and the
generators, so that one module answers "what is a data set, and how to make, load
and save one"; this module re-exports its names."""

import warnings as _warnings

_warnings.warn("samflow.data is deprecated and will be removed in the release after 0.2: import from samflow.datasets",
               DeprecationWarning, stacklevel=2)


from .datasets import (  # noqa: F401
    Dataset as Dataset,
    load_dataset as load_dataset,
    single_sample as single_sample,
)

__all__ = ["Dataset", "load_dataset", "single_sample"]
