"""Serving: the replicas that meet an arrival rate and TTFT/TPOT targets, and their operating batch."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from capplan.ledger import Conversations
    from capplan.plan.replica import ReplicaSetup
    from capplan.plan.sizing import SplitTimes
    from capplan.plan.work import StepWork
    from capplan.workload import Workload

DEFAULT_PERCENTILE = 95.0
"""The percentile latency targets apply to when the workload sets none."""


def serving_pct(workload: "Workload") -> float:
    """The percentile a serving workload's targets apply to (95 without targets)."""
    return workload.serving.percentile if workload.serving else DEFAULT_PERCENTILE


@dataclass(frozen=True)
class ServingPlan:
    """Replicas for a serving workload (the plan's ``serving`` JSON object: :meth:`as_dict`)."""

    arrival_rate_per_s: float | None
    """Requests arriving per second (``None`` without serving targets) [requests/s]."""
    percentile: float
    """The percentile the targets and the latency apply to [percent]."""
    batch_per_replica: float
    """Largest decode batch the limits allow [sequences]."""
    operating_batch_per_replica: float
    """Smallest batch at which a replica keeps up with its arrivals [sequences]."""
    per_replica_requests_per_s: float
    """Requests one replica serves per second at ``batch_per_replica`` [requests/s]."""
    ttft_s: float
    """Time to first token of the percentile prompt [s]."""
    tpot_s: float
    """Time per output token at the operating batch [s]."""
    feasible: bool
    """Whether the targets can be met at this tp."""
    replicas: int
    """Replicas needed for the arrival rate [replicas]."""
    binding_constraint: str
    """The limit that sets the batch: ``kv memory``, ``max_num_seqs``, ``tpot target`` or ``ttft target``."""
    latency_s: float
    """A request's latency at the percentile: TTFT + sampled tokens x TPOT [s]."""
    batch_limits: dict[str, float]
    """Each batch limit by name [sequences] (for the explanation; not in the JSON object)."""
    prefill_s_per_request: float
    """Prefill time of one request [s] (for the explanation)."""
    sampled_tokens_mean: float
    """Mean sampled tokens of a request [tokens] (for the explanation)."""
    prompt_tokens_at_percentile: float
    """The percentile prompt length TTFT is priced at [positions] (for the explanation)."""

    def as_dict(self) -> dict[str, Any]:
        """The JSON object (the first eleven fields, in order)."""
        return {
            "arrival_rate_per_s": self.arrival_rate_per_s,
            "percentile": self.percentile,
            "batch_per_replica": self.batch_per_replica,
            "operating_batch_per_replica": self.operating_batch_per_replica,
            "per_replica_requests_per_s": self.per_replica_requests_per_s,
            "ttft_s": self.ttft_s,
            "tpot_s": self.tpot_s,
            "feasible": self.feasible,
            "replicas": self.replicas,
            "binding_constraint": self.binding_constraint,
            "latency_s": self.latency_s,
        }


def size_serving(workload: "Workload", setup: "ReplicaSetup", work: "StepWork", sample: "Conversations") -> ServingPlan:
    """Replicas that meet a serving workload's arrival rate and latency targets.

    Notes
    -----
    The batch per replica is the smallest of the KV-memory limit, ``max_num_seqs`` and the
    largest batch whose decode step meets the TPOT target. A replica then serves
    ``1 / (prefill + L x t(B) / B)`` requests per second (``L`` the mean sampled tokens), and
    ``replicas = ceil(arrival rate / that)``. It operates at the smallest batch ``b`` whose
    utilisation ``lambda_r x (prefill + L x t(b) / b)`` is at most 1; TPOT is ``t(b)``.
    """
    import numpy as np

    targets = workload.serving
    kv, concurrency = setup.kv, setup.concurrency
    sampled_mean = float(work.sampled_per_conversation.mean())
    prompt_tokens = float(np.percentile(sample.prompt, targets.percentile if targets else 95)) if sample.n > 1 else float(sample.prompt[0])
    batches = np.arange(1, kv.max_num_seqs + 1, dtype=float)
    step_s = np.asarray(setup.replica.decode(batches, setup.decode_context_tokens).step_time_s)
    kv_batch = max(1.0, min(concurrency.runnable_sequences if concurrency else 1.0, kv.max_num_seqs))
    limits = {"kv memory": kv_batch, "max_num_seqs": float(kv.max_num_seqs)}
    if targets and targets.tpot_target_s:
        meeting = batches[step_s <= targets.tpot_target_s]
        limits["tpot target"] = float(meeting.max()) if meeting.size else 0.0
    binding = min(limits, key=lambda name: limits[name])
    batch = limits[binding]
    ttft = float(setup.replica.prefill(max(prompt_tokens, 1.0)).step_time_s)
    feasible = batch >= 1 and (not targets or not targets.ttft_target_s or ttft <= targets.ttft_target_s)
    if targets and targets.ttft_target_s and ttft > targets.ttft_target_s:
        binding = "ttft target"
    prefill_per_request = setup.prefill.replica_s / work.conversations if work.conversations else 0.0
    tpot = float(np.interp(max(batch, 1.0), batches, step_s))
    per_replica_rps = 1.0 / (prefill_per_request + sampled_mean * tpot / max(batch, 1.0)) if batch >= 1 else 0.0
    replicas = math.ceil(targets.arrival_rate_per_s / per_replica_rps) if (targets and per_replica_rps > 0 and feasible) else 0
    operating = batch
    if replicas:
        rate_per_replica = targets.arrival_rate_per_s / replicas
        utilisation = rate_per_replica * (prefill_per_request + sampled_mean * step_s / batches)
        keeping_up = batches[(utilisation <= 1.0) & (batches <= batch)]
        operating = float(keeping_up.min()) if keeping_up.size else batch
        tpot = float(np.interp(operating, batches, step_s))
    latency = ttft + float(np.percentile(work.sampled_per_conversation, serving_pct(workload))) * tpot
    return ServingPlan(
        arrival_rate_per_s=targets.arrival_rate_per_s if targets else None,
        percentile=targets.percentile if targets else DEFAULT_PERCENTILE,
        batch_per_replica=float(batch),
        operating_batch_per_replica=float(operating),
        per_replica_requests_per_s=float(per_replica_rps),
        ttft_s=ttft,
        tpot_s=tpot,
        feasible=bool(feasible),
        replicas=replicas if targets else 1,
        binding_constraint=binding,
        latency_s=latency,
        batch_limits=limits,
        prefill_s_per_request=prefill_per_request,
        sampled_tokens_mean=sampled_mean,
        prompt_tokens_at_percentile=prompt_tokens,
    )


def operating_times(times: "SplitTimes", serving: ServingPlan, setup: "ReplicaSetup", work: "StepWork") -> "SplitTimes":
    """``times`` for one second of traffic at the operating batch (Little's law), not a synchronous burst."""
    batch = max(1.0, serving.operating_batch_per_replica)
    decode_s = float(work.decode_tokens / batch * setup.decode_step_s(batch))
    return replace(
        times,
        decode_batch_sequences=batch,
        decode_replica_s=decode_s,
        work_time_s=(setup.prefill.replica_s + decode_s + setup.score.replica_s) / times.replicas,
        binding=serving.binding_constraint,
    )
