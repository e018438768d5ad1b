"""The discrete-event simulator of rollout and training (``capplan simulate``): its public API.

* :mod:`capplan.sim.run`: :func:`simulate` and :func:`sweep_staleness`;
* :mod:`capplan.sim.config`: :class:`SimConfig` and its validation;
* :mod:`capplan.sim.setup`: engine constants from the KV calculator, roofline and trainer;
* :mod:`capplan.sim.stepcost`: engine-step prices as coefficients probed from the roofline model;
* :mod:`capplan.sim.conversations`: the drawn conversations and their simulated state;
* :mod:`capplan.sim.scheduler`: one replica's admission, prefill, decode, KV and preemption;
* :mod:`capplan.sim.controller`: dispatch, the trainer, rejections and weight pushes;
* :mod:`capplan.sim.loop`: the event loop, tool calls and time-series samples;
* :mod:`capplan.sim.result`: :class:`SimResult`, the JSON contract;
* :mod:`capplan.sim.output`: the trajectory log (JSONL);
* :mod:`capplan.sim.serving`: the serving simulator (a serving workload's requests on replicas).

Figures are in :mod:`capplan.plots`.
"""

from capplan.sim.config import SimConfig
from capplan.sim.output import trajectory_records, write_trajectories
from capplan.sim.result import QUEUES, SUMMARY_KEYS, TIMELINE_KEYS, SimResult
from capplan.sim.run import simulate, sweep_staleness

__all__ = [
    "QUEUES",
    "SUMMARY_KEYS",
    "TIMELINE_KEYS",
    "SimConfig",
    "SimResult",
    "simulate",
    "sweep_staleness",
    "trajectory_records",
    "write_trajectories",
]
