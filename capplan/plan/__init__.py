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

from capplan.plan.assemble import Plan, plan_workload
from capplan.plan.grid import COLUMNS, best, default_inference_gpus, default_trainer_gpus, sweep
from capplan.plan.inputs import Mode, PlanInputs
from capplan.plan.replica import ReplicaSetup, replica_setup
from capplan.plan.rollout import RolloutModel, RolloutTimes, shrinking_batch_decode_s, static_batching_waste
from capplan.plan.serving import serving_pct
from capplan.plan.sizing import DIMINISHING_RETURNS, MAX_GPUS, step_time_s
from capplan.plan.work import Prepared, StepWork, prepare, step_work

__all__ = [
    "COLUMNS",
    "DIMINISHING_RETURNS",
    "MAX_GPUS",
    "Mode",
    "Plan",
    "PlanInputs",
    "Prepared",
    "ReplicaSetup",
    "RolloutModel",
    "RolloutTimes",
    "StepWork",
    "best",
    "default_inference_gpus",
    "default_trainer_gpus",
    "plan_workload",
    "prepare",
    "replica_setup",
    "serving_pct",
    "shrinking_batch_decode_s",
    "static_batching_waste",
    "step_time_s",
    "step_work",
    "sweep",
]
