"""The discrete-event simulator of rollout and training (``capplan simulate``): its public API.

* :mod:`capplan.sim.run`: :func:`simulate` and :func:`sweep_staleness`;
* :mod:`capplan.sim.grid`: :func:`simulate_grid`, a grid of settings as one task per point;
* :mod:`capplan.sim.config`: :class:`SimConfig` and its validation;
* :mod:`capplan.sim.setup`: engine constants from the KV calculator, roofline and trainer;
* :mod:`capplan.sim.stepcost`: engine-step prices as coefficients probed from the roofline model;
* :mod:`capplan.sim.conversations`: the drawn conversations, each one in flight as a
  :class:`~capplan.sim.conversations.Sequence`, and every one's fate as compact columns;
* :mod:`capplan.sim.scheduler`: one replica's admission, prefill, decode, KV and preemption;
* :mod:`capplan.sim.controller`: dispatch, the trainer, rejections and weight pushes;
* :mod:`capplan.sim.loop`: the event loop, tool calls and time-series samples;
* :mod:`capplan.sim.result`: :class:`SimResult`, the JSON contract;
* :mod:`capplan.sim.output`: the trajectory log (JSONL), streamed during the run or written after it;
* :mod:`capplan.sim.serving`: the serving simulator (a serving workload's requests on replicas).

Figures are in :mod:`capplan.plots`. The event loop's modules (``events``, ``stepcost``,
``conversations``, ``scheduler``, ``controller``, ``loop``) can be compiled with mypyc
(``CAPPLAN_COMPILE=1``, see ``setup.py``); they run as plain Python otherwise, with identical
results.
"""

import importlib
from typing import Any

_HOMES = {
    "SimConfig": "capplan.sim.config",
    "GRID_AXES": "capplan.sim.grid",
    "SimGrid": "capplan.sim.grid",
    "simulate_grid": "capplan.sim.grid",
    "trajectory_records": "capplan.sim.output",
    "write_trajectories": "capplan.sim.output",
    "QUEUES": "capplan.sim.result",
    "SUMMARY_KEYS": "capplan.sim.result",
    "TIMELINE_KEYS": "capplan.sim.result",
    "SimResult": "capplan.sim.result",
    "simulate": "capplan.sim.run",
    "sweep_staleness": "capplan.sim.run",
}
"""Where each public name lives; imported on first use (locating a submodule for ``--help`` text
must not import pydantic)."""

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value
