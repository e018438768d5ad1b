"""Deprecated alias of :mod:`capplan.sim` (the simulator's public API) and :mod:`capplan.plots` (its figures).

Kept so scripts that ``from capplan.simulate import simulate, SimConfig`` keep working: each name
is looked up on first use, with a :class:`DeprecationWarning`. Import from :mod:`capplan.sim`
instead.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

_HOMES = {
    "QUEUES": "capplan.sim",
    "SUMMARY_KEYS": "capplan.sim",
    "TIMELINE_KEYS": "capplan.sim",
    "SimConfig": "capplan.sim",
    "SimResult": "capplan.sim",
    "simulate": "capplan.sim",
    "sweep_staleness": "capplan.sim",
    "trajectory_records": "capplan.sim",
    "write_trajectories": "capplan.sim",
    "plot_sweep": "capplan.plots",
    "plot_timeline": "capplan.plots",
}
"""Where each name this module used to define lives now."""

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"capplan.simulate is deprecated: import {name} from {home}", DeprecationWarning, stacklevel=2
    )
    return getattr(importlib.import_module(home), name)
