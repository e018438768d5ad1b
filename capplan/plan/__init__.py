"""The capacity plan: where the ledger, the KV calculator, the roofline and the trainer meet.

For one workload on an inference hardware profile (and a trainer profile), a plan answers:

* **Concurrency**: KV capacity per replica, resident / runnable conversations, and which limit
  binds the decode batch: ``memory`` (KV capacity), ``max_num_seqs`` (the scheduler), or
  ``arrival of work`` (a replica is given fewer conversations per step than it could run).
* **Costs of one step**: GPU-seconds of prefill (per invocation: the ledger's
  prefill-forwarded positions after their cached prefix), of decode (at the batch the
  concurrency limit allows) and of teacher scoring; effective tokens/s, MBU and MFU.
* **Tail**: a synchronous step ends when its longest rollout ends. The rollout time is the
  larger of the total work at full batch and the longest conversation's critical path, whose
  decode runs at the *shrinking* batch of the tail; the slot-steps a static batch would waste.
* **Filtering**: dropping a fraction ``f`` of prompt groups multiplies rollout work per trained
  step by ``1 / (1 - f)``.
* **Trainer**: training FLOPs, the fewest GPUs that hold the sharded state, step time, weight
  sync (:mod:`capplan.trainer`).
* **Split**: evaluates given GPU counts, or sizes the missing side for balance, and reports the
  inference-to-trainer node ratio for sync or async (bounded staleness) operation.
* **Serving** (method ``serving``): a fleet plan of its own (:class:`~capplan.plan.serving.ServingPlan`):
  the fewest replicas that meet the arrival rate and the TTFT/TPOT targets at a percentile,
  queueing included, the binding constraint, and the cost per million tokens.

Every figure's formula, with its numbers, is recorded in :attr:`Plan.explain`.

The steps, one module each, in the order :func:`plan_workload` runs them:

* :mod:`~capplan.plan.inputs`: :class:`PlanInputs`, validated;
* :mod:`~capplan.plan.work`: sample the workload once, the work of one trained step;
* :mod:`~capplan.plan.replica`: one replica's KV, concurrency and step prices;
* :mod:`~capplan.plan.rollout`: the rollout model (work, shrinking-batch tail, static batching);
* :mod:`~capplan.plan.serving`: a serving workload's fleet, its latency percentiles and costs;
* :mod:`~capplan.plan.sizing`: step time of a split, and the split search;
* :mod:`~capplan.plan.figures`: throughput, utilisation, idle and staleness figures;
* :mod:`~capplan.plan.explain`: the formulas with their numbers;
* :mod:`~capplan.plan.assemble`: :func:`plan_workload` and its result :class:`Plan`;
* :mod:`~capplan.plan.grid`: :func:`sweep`, every combination at once.
"""

import importlib
from typing import Any

_HOMES = {
    "Plan": "capplan.plan.assemble",
    "plan_workload": "capplan.plan.assemble",
    "COLUMNS": "capplan.plan.grid",
    "best": "capplan.plan.grid",
    "default_inference_gpus": "capplan.plan.grid",
    "default_trainer_gpus": "capplan.plan.grid",
    "sweep": "capplan.plan.grid",
    "MODES": "capplan.plan.inputs",
    "Mode": "capplan.plan.inputs",
    "PlanInputs": "capplan.plan.inputs",
    "ReplicaSetup": "capplan.plan.replica",
    "replica_setup": "capplan.plan.replica",
    "AsyncPeriod": "capplan.plan.rollout",
    "RolloutModel": "capplan.plan.rollout",
    "RolloutTimes": "capplan.plan.rollout",
    "shrinking_batch_decode_s": "capplan.plan.rollout",
    "static_batching_waste": "capplan.plan.rollout",
    "serving_pct": "capplan.plan.serving",
    "DIMINISHING_RETURNS": "capplan.plan.sizing",
    "MAX_GPUS": "capplan.plan.sizing",
    "step_time_s": "capplan.plan.sizing",
    "Prepared": "capplan.plan.work",
    "StepWork": "capplan.plan.work",
    "prepare": "capplan.plan.work",
    "step_work": "capplan.plan.work",
}
"""Where each public name lives; imported on first use, so locating a submodule (for ``--help``
text) does not import numpy or pydantic."""

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value
