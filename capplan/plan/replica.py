"""One inference replica: KV capacity, concurrency, and the prices of its decode/prefill/scoring."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from capplan.plan.rollout import RolloutModel

if TYPE_CHECKING:
    from capplan.concurrency import WorkloadConcurrency
    from capplan.engine import EngineProfile
    from capplan.hardware import HardwareProfile
    from capplan.kv import KVResult
    from capplan.ledger import Conversations
    from capplan.modelspec import ModelSpec
    from capplan.plan.work import Prepared, StepWork
    from capplan.roofline import StepCost
    from capplan.workload import Workload


@dataclass(frozen=True)
class PhaseCost:
    """Replica-seconds, FLOPs and bytes of one phase of a step's work (prefill or teacher scoring)."""

    replica_s: float
    """Time the phase occupies one replica [replica-s]."""
    flops: float
    """FLOPs on one GPU of the replica [FLOP]."""
    bytes: float
    """HBM bytes moved on one GPU of the replica [bytes]."""


NO_COST = PhaseCost(0.0, 0.0, 0.0)
"""The cost of a phase with no work."""


class Replica:
    """Step prices of one inference replica (roofline, vectorised)."""

    def __init__(
        self, spec: "ModelSpec", hw: "HardwareProfile", tp: int, kv_dtype: str, weight_dtype: str, engine: "EngineProfile | None" = None
    ):
        from capplan.roofline import RooflineInputs

        self.spec, self.hw, self.tp = spec, hw, tp
        self.roofline_inputs = RooflineInputs(tp=tp, weight_dtype=weight_dtype, kv_dtype=kv_dtype, engine=engine)

    def decode(self, batch: Any, context_tokens: float) -> "StepCost":
        """One decode step of ``batch`` sequences [sequences] at ``context_tokens`` cached [positions]."""
        from capplan.roofline import decode_step

        return decode_step(self.spec, self.hw, self.roofline_inputs, batch, max(context_tokens, 0.0))

    def prefill(self, prompt_tokens: float) -> "StepCost":
        """One prefill of a single ``prompt_tokens``-position prompt [positions]."""
        from capplan.roofline import prefill_step

        return prefill_step(self.spec, self.hw, self.roofline_inputs, prompt_tokens)

    def chunked(
        self, tokens: float, pairs: float, pairs_window: float, kv_read: float, sequences: float, logits: float, chunk_tokens: int
    ) -> PhaseCost:
        """Time, FLOPs and bytes of ``tokens`` prefill/score positions in steps of ``chunk_tokens``.

        Parameters
        ----------
        tokens : float
            Positions forwarded [positions].
        pairs, pairs_window : float
            Causal attention pairs, all and on sliding-window layers [pairs].
        kv_read : float
            Cached positions attended to [positions].
        sequences : float
            Sequences the positions belong to [sequences].
        logits : float
            Positions whose logits are computed [positions].
        chunk_tokens : int
            Scheduler token budget of one step [positions].
        """
        from capplan.roofline import engine_step

        if tokens <= 0:
            return NO_COST
        steps = max(1, math.ceil(tokens / chunk_tokens))
        cost = engine_step(
            self.spec,
            self.hw,
            self.roofline_inputs,
            new_tokens=tokens / steps,
            logits_tokens=logits / steps,
            attention_pairs=pairs / steps,
            kv_read_tokens=kv_read / steps,
            sequences=max(sequences / steps, 1.0),
            window_attention_pairs=pairs_window / steps,
            window_kv_read_tokens=kv_read / steps,
        )
        return PhaseCost(steps * float(cost.step_time_s), steps * float(cost.flops), steps * float(cost.bytes))


@dataclass(frozen=True)
class ReplicaSetup:
    """One inference replica configuration: KV, concurrency, decode step time and step costs."""

    kv: "KVResult"
    """KV budget and capacity of the replica."""
    concurrency: "WorkloadConcurrency | None"
    """Resident and runnable conversations (``None`` without a rollout engine)."""
    replica: Replica
    """The replica's step prices."""
    decode_context_tokens: float
    """Mean cached context of a decode step [positions]."""
    max_decode_batch: float
    """Decode batch memory and the scheduler allow (0 without a rollout engine) [sequences]."""
    binding: str
    """What caps ``max_decode_batch``: ``memory``, ``max_num_seqs``, ... or ``no rollout engine``."""
    prefill: PhaseCost
    """The step's prefill on one replica."""
    score: PhaseCost
    """The step's teacher scoring on one replica."""

    def decode_step_s(self, batch: Any) -> Any:
        """Decode step time at ``batch`` [sequences] and the mean context [s] (vectorised)."""
        return self.replica.decode(batch, self.decode_context_tokens).step_time_s

    def rollout_model(self, work: "StepWork") -> RolloutModel:
        """The rollout model of ``work`` on this replica configuration."""
        return RolloutModel(
            work=work,
            max_decode_batch=self.max_decode_batch,
            binding=self.binding,
            prefill_replica_s=self.prefill.replica_s,
            score_replica_s=self.score.replica_s,
            decode_step_s=self.decode_step_s,
        )


@dataclass(frozen=True)
class SharedSample:
    """What a replica configuration's set-up takes from the workload's samples alone."""

    context_tokens: int
    """The sample's p99 record length, the context the KV budget is sized for [positions]."""
    concurrency_sample: "Conversations | None"
    """The sample :func:`capplan.concurrency.workload_concurrency` uses (``None`` without a rollout)."""


def shared_sample(workload: "Workload", prepared: "Prepared") -> SharedSample:
    """Draw once what every replica configuration of ``workload`` shares (see :func:`replica_setup`)."""
    import numpy as np

    from capplan.concurrency import concurrency_sample

    sample = prepared.sample
    context = int(np.percentile(sample.record_length, 99)) if sample.n > 1 else int(sample.record_length.max())
    return SharedSample(context, concurrency_sample(workload) if workload.has_rollout else None)


def replica_setup(
    workload: "Workload",
    prepared: "Prepared",
    spec: "ModelSpec",
    hw: "HardwareProfile",
    tp: int,
    kv_dtype: str = "bf16",
    weight_dtype: str = "bf16",
    gpu_mem_util: float | None = None,
    teacher: "ModelSpec | None" = None,
    engine: "EngineProfile | None" = None,
    shared: "SharedSample | None" = None,
) -> ReplicaSetup:
    """KV capacity, concurrency and per-step prefill/scoring costs of one replica configuration.

    The KV budget is sized for the sample's p99 record; prefill and scoring run in chunks of the
    scheduler's token budget (``max_num_batched_tokens``).

    ``shared`` (:func:`shared_sample`) carries what depends on the workload alone, computed once
    for many configurations (a sweep); the result is the same.

    Raises
    ------
    DoesNotFitError, InputError
        From :func:`capplan.kv.compute_kv` (the model does not fit at ``tp``; impossible ``tp``).
    """
    from capplan.concurrency import workload_concurrency
    from capplan.kv import KVInputs, compute_kv

    sample, work = prepared.sample, prepared.work
    if shared is None:
        shared = shared_sample(workload, prepared)
    context = shared.context_tokens
    kv = compute_kv(
        spec, hw,
        KVInputs(tp=tp, kv_dtype=kv_dtype, weight_dtype=weight_dtype, context=max(context, 1), gpu_mem_util=gpu_mem_util, engine=engine),
    )
    replica = Replica(spec, hw, tp, kv_dtype, weight_dtype, engine)
    decode_context = work.decode_context_mean

    concurrency = None
    if workload.has_rollout:
        concurrency = workload_concurrency(
            spec, hw, kv, workload, max_num_seqs=kv.max_num_seqs,
            step_time=lambda batch, _context: float(replica.decode(batch, decode_context).step_time_s),
            max_batched_tokens=kv.max_batched_tokens, sample=shared.concurrency_sample,
        )
    chunk = kv.max_batched_tokens
    prefill = replica.chunked(
        work.prefill_tokens, work.prefill_pairs, work.prefill_pairs_window, work.prefill_kv_read, work.invocations, work.invocations, chunk
    )
    score = NO_COST
    if work.score_tokens > 0:
        scorer = Replica(teacher or spec, hw, tp, kv_dtype, weight_dtype, engine)
        sequences = float(work.record_lengths_kept.size) * workload.volume.conversations_per_step / max(sample.n, 1)
        score = scorer.chunked(work.score_tokens, work.score_pairs, work.score_pairs_window, 0.0, sequences, work.score_tokens, chunk)
    if concurrency is not None:
        max_decode_batch, binding = float(concurrency.runnable_sequences), concurrency.binding
    else:
        max_decode_batch, binding = 0.0, "no rollout engine"
    return ReplicaSetup(kv, concurrency, replica, decode_context, max_decode_batch, binding, prefill, score)
