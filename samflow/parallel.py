"""Deprecated path (kept for one release): the device sharding and the memory model
moved to `samflow.sweep._devices` and are re-exported by `samflow.sweep`
(`from samflow.sweep import use_cpu_cores`); this module re-exports every name."""

import warnings as _warnings

_warnings.warn("samflow.parallel is deprecated and will be removed in the release after 0.2: import from samflow.sweep",
               DeprecationWarning, stacklevel=2)

from .sweep import _devices as _devices

__all__ = _devices.__all__
# The very objects of samflow.sweep._devices (tests/test_sweep_package.py), listed
# once there rather than a second time here.
globals().update({name: getattr(_devices, name) for name in [*__all__, "AXIS", "IN_FLIGHT", "_gib"]})
