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
    from capplan.offload import OffloadTier
    from capplan.roofline import StepCost
    from capplan.speculative import SpecInputs, SpecMemory, SpeculativePricer
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
    """Step prices of one inference replica (roofline, vectorised).

    With data-parallel attention a replica is one rank of ``tp`` GPUs (its own sequences and KV),
    every rank of the instance running the same steps (``layout``: the expert-parallel options of
    :class:`capplan.roofline.RooflineInputs`). With ``speculative`` a decode step is priced per
    output token (:class:`capplan.speculative.SpeculativePricer`).
    """

    def __init__(
        self, spec: "ModelSpec", hw: "HardwareProfile", tp: int, kv_dtype: str, weight_dtype: str, engine: "EngineProfile | None" = None,
        time_scale: float = 1.0, layout: "dict[str, Any] | None" = None, speculative: "SpecInputs | None" = None,
    ):
        from capplan.roofline import RooflineInputs

        self.spec, self.hw, self.tp = spec, hw, tp
        self.roofline_inputs = RooflineInputs(tp=tp, weight_dtype=weight_dtype, kv_dtype=kv_dtype, engine=engine, **(layout or {}))
        self.time_scale = time_scale
        """Multiplies every step time (an RL framework's rollout slowdown; 1 for the engine as profiled)."""
        self.speculative: "SpeculativePricer | None" = None
        """The speculative pricer of decode steps (``None``: plain decoding)."""
        if speculative is not None:
            from capplan.speculative import SpeculativePricer

            self.speculative = SpeculativePricer.build(spec, hw, self.roofline_inputs, speculative)

    @property
    def positions_per_sequence(self) -> float:
        """Scheduler tokens a decoding sequence takes per step: 1, or the positions a verify step forwards."""
        return self.speculative.positions_per_sequence if self.speculative is not None else 1.0

    def _scaled(self, cost: "StepCost") -> "StepCost":
        from dataclasses import replace

        return cost if self.time_scale == 1.0 else replace(cost, step_time_s=cost.step_time_s * self.time_scale)

    def decode(self, batch: Any, context_tokens: Any) -> "StepCost":
        """One decode step of ``batch`` sequences [sequences] at ``context_tokens`` cached [positions]
        (speculatively: the price of one output token)."""
        if self.speculative is not None:
            import numpy as np

            return self._scaled(self.speculative.decode(batch, np.maximum(context_tokens, 0.0)))
        from capplan.roofline import decode_step

        return self._scaled(decode_step(self.spec, self.hw, self.roofline_inputs, batch, max(context_tokens, 0.0)))

    def prefill(self, prompt_tokens: float) -> "StepCost":
        """One prefill of a single ``prompt_tokens``-position prompt [positions]."""
        from capplan.roofline import prefill_step

        return self._scaled(prefill_step(self.spec, self.hw, self.roofline_inputs, prompt_tokens))

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
        return PhaseCost(steps * float(cost.step_time_s) * self.time_scale, steps * float(cost.flops), steps * float(cost.bytes))


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
    kv_rules: "KVRules | None" = None
    """What the rollout model needs of the KV (``None`` without a rollout engine)."""
    speculative: "SpecMemory | None" = None
    """The drafter's share of the KV budget (``None``: plain decoding); ``kv`` holds the capacity with it."""
    offload: "OffloadTier | None" = None
    """The CPU KV tier (``None``: none)."""

    def decode_step_s(self, batch: Any) -> Any:
        """Decode step time at ``batch`` [sequences] and the mean context [s] (vectorised)."""
        return self.replica.decode(batch, self.decode_context_tokens).step_time_s

    def decode_step_at(self, batch: Any, context_tokens: Any) -> Any:
        """Decode step time at ``batch`` [sequences] and ``context_tokens`` cached each [positions] [s] (vectorised)."""
        from capplan.roofline import decode_step

        import numpy as np

        replica = self.replica
        if replica.speculative is not None:
            return replica.speculative.decode(batch, np.maximum(context_tokens, 0.0)).step_time_s * replica.time_scale
        cost = decode_step(replica.spec, replica.hw, replica.roofline_inputs, batch, np.maximum(context_tokens, 0.0))
        return cost.step_time_s * replica.time_scale

    def rollout_model(self, work: "StepWork", weight_load_s: float = 0.0, inflight_updates: bool = True) -> RolloutModel:
        """The rollout model of ``work`` on this replica configuration.

        Parameters
        ----------
        weight_load_s : float
            Async: a replica's pause to load new weights per update [s].
        inflight_updates : bool
            Async: load at a step boundary (True) or drain running invocations first.
        """
        rules = self.kv_rules
        extra: dict[str, Any] = {}
        if rules is not None:
            extra = {
                "sequence_cap": rules.sequence_cap,
                "resident_kv": rules.resident_kv,
                "sync_resident_kv": rules.sync_resident_kv,
                "decode_share": rules.decode_share,
                "recompute_s_per_token": rules.recompute_s_per_token,
                "peak_context_tokens": rules.peak_context_tokens,
                "held_context_tokens": rules.held_context_tokens,
                "retained_fraction": rules.retained_fraction,
                "reused_tokens_per_conversation": work.reused_across_turns,
                "group_size": rules.group_size,
            }
            if self.offload is not None:
                extra["offload_tokens"] = float(self.offload.capacity_tokens)
                extra["load_s_per_token"] = self.offload.load_s_per_token  # a copy over the host link, not an engine step
        return RolloutModel(
            work=work,
            max_decode_batch=self.max_decode_batch,
            binding=self.binding,
            prefill_replica_s=self.prefill.replica_s,
            score_replica_s=self.score.replica_s,
            decode_step_s=self.decode_step_s,
            decode_step_at=self.decode_step_at,
            weight_load_s=weight_load_s,
            inflight_updates=inflight_updates,
            **extra,
        )


@dataclass(frozen=True)
class KVRules:
    """The KV figures of one replica the rollout model's rules need (:class:`capplan.plan.rollout.RolloutModel`)."""

    sequence_cap: float
    """``min(max_num_seqs, max_num_batched_tokens / n)``, ``n`` the positions a decoding sequence
    forwards per step (1, or a verify step's) [sequences]."""
    resident_kv: float
    """Conversations whose KV fits at once in steady state, ``C / E[held]`` [conversations]."""
    sync_resident_kv: float
    """Conversations of a synchronised batch whose KV fits at its peak [conversations]."""
    decode_share: float
    """Decode time over lifetime of a conversation [fraction]."""
    recompute_s_per_token: float
    """Replica-seconds per position prefilled again [replica-s/position]."""
    peak_context_tokens: float
    """Mean context at a synchronised batch's KV peak [positions]."""
    held_context_tokens: float
    """Mean context of a decoding sequence [positions]."""
    retained_fraction: float
    """Share of resident KV held during tool waits [fraction]."""
    group_size: int = 1
    """Samples per prompt group (placed together on a replica)."""


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
    time_scale: float = 1.0,
    shared: "SharedSample | None" = None,
    layout: "dict[str, Any] | None" = None,
    speculative: "SpecInputs | None" = None,
    kv_offload_gib: float | None = None,
) -> ReplicaSetup:
    """KV capacity, concurrency and per-step prefill/scoring costs of one replica configuration.

    The KV budget is sized for the sample's p99 record; prefill and scoring run in chunks of the
    scheduler's token budget (``max_num_batched_tokens``). ``time_scale`` multiplies every step
    time (an RL framework's rollout slowdown, :class:`capplan.trainer.RLFrameworkFit`).

    ``shared`` (:func:`shared_sample`) carries what depends on the workload alone, computed once
    for many configurations (a sweep); the result is the same.

    Parameters
    ----------
    layout : dict, optional
        Expert/data-parallel, quantisation and overlap options of
        :class:`capplan.roofline.RooflineInputs` (:meth:`capplan.plan.inputs.PlanInputs.layout`):
        the replica is one data-parallel rank of ``tp`` GPUs, its weights and steps those of the layout.
    speculative : SpecInputs, optional
        Decode speculatively: decode steps are priced per output token
        (:class:`capplan.speculative.SpeculativePricer`), a decoding sequence takes ``n`` positions of
        the scheduler's token budget, and the drafter's weights and KV come out of the KV budget
        (:func:`capplan.speculative.spec_memory`).
    kv_offload_gib : float, optional
        A CPU KV tier of this many GiB per GPU [GiB] (:func:`capplan.offload.offload_tier`): lost
        contexts are loaded back from it instead of recomputed when that is faster.

    Raises
    ------
    DoesNotFitError, InputError
        From :func:`capplan.kv.compute_kv` (the model does not fit at ``tp``; impossible ``tp``
        or expert-parallel layout).
    """
    from capplan.concurrency import workload_concurrency
    from capplan.kv import KVInputs, compute_kv
    from capplan.plan.inputs import MEMORY_LAYOUT_KEYS

    sample, work = prepared.sample, prepared.work
    if shared is None:
        shared = shared_sample(workload, prepared)
    context = shared.context_tokens
    layout = layout or {}
    memory_layout = {k: v for k, v in layout.items() if k in MEMORY_LAYOUT_KEYS}
    kv = compute_kv(
        spec, hw,
        KVInputs(tp=tp, kv_dtype=kv_dtype, weight_dtype=weight_dtype, context=max(context, 1), gpu_mem_util=gpu_mem_util, engine=engine,
                 **memory_layout),
    )
    replica = Replica(spec, hw, tp, kv_dtype, weight_dtype, engine, time_scale, layout, speculative)
    drafter = None
    if speculative is not None:
        kv, drafter = _with_drafter(spec, kv, speculative)
    if workload.has_rollout and kv.max_concurrent_sequences < 1:
        from capplan.errors import DoesNotFitError

        raise DoesNotFitError(
            f"{spec.name} on {hw.name} (tp={tp}): the KV budget ({kv.kv_budget_gib_per_gpu:.2f} GiB per GPU, "
            f"{kv.kv_capacity_tokens:,} tokens in blocks of {kv.block_size:,}"
            f"{f', the {speculative.method} drafter sharing it' if speculative is not None else ''}) cannot hold one "
            f"{max(context, 1):,}-token record (the workload's p99); raise --tensor-parallel-size, lower --block-size or shorten the records"
        )
    decode_context = work.decode_context_mean
    # a decoding sequence takes one position of the scheduler's budget, n when a verify step forwards n
    budget_sequences = kv.max_batched_tokens if speculative is None else int(kv.max_batched_tokens // replica.positions_per_sequence)

    concurrency = None
    if workload.has_rollout:
        concurrency = workload_concurrency(
            spec, hw, kv, workload, max_num_seqs=kv.max_num_seqs,
            step_time=lambda batch, _context: float(replica.decode(batch, decode_context).step_time_s),
            max_batched_tokens=budget_sequences, sample=shared.concurrency_sample,
        )
    chunk = kv.max_batched_tokens
    prefill = replica.chunked(
        work.prefill_tokens, work.prefill_pairs, work.prefill_pairs_window, work.prefill_kv_read, work.invocations, work.invocations, chunk
    )
    score = NO_COST
    if work.score_tokens > 0:
        scorer = Replica(teacher or spec, hw, tp, kv_dtype, weight_dtype, engine, time_scale, layout if teacher is None else None)
        sequences = float(work.record_lengths_kept.size) * workload.volume.conversations_per_step / max(sample.n, 1)
        score = scorer.chunked(work.score_tokens, work.score_pairs, work.score_pairs_window, 0.0, sequences, work.score_tokens, chunk)
    rules = None
    if concurrency is not None:
        max_decode_batch, binding = float(concurrency.runnable_sequences), concurrency.binding
        rules = kv_rules(spec, kv, concurrency, sample, workload, replica, decode_context, budget_sequences)
    else:
        max_decode_batch, binding = 0.0, "no rollout engine"
    offload = None
    if kv_offload_gib is not None and workload.has_rollout:
        offload = _offload_tier(replica, kv, engine, kv_offload_gib)
    return ReplicaSetup(kv, concurrency, replica, decode_context, max_decode_batch, binding, prefill, score, rules, drafter, offload)


def _with_drafter(spec: "ModelSpec", kv: "KVResult", speculative: "SpecInputs") -> "tuple[KVResult, SpecMemory]":
    """``kv`` with the drafter's weights and KV taken out of its budget (:func:`capplan.speculative.spec_memory`):
    the capacity counts positions of the target and the drafter together."""
    from dataclasses import replace

    from capplan.speculative import spec_memory

    mem = spec_memory(spec, kv, speculative)
    cap = mem.kv_capacity_tokens
    scale = cap / kv.kv_capacity_tokens if kv.kv_capacity_tokens else 0.0
    return replace(
        kv, kv_capacity_tokens=cap, kv_capacity_blocks=cap // kv.block_size, max_concurrency_x=cap / kv.context,
        max_concurrent_sequences=int(kv.max_concurrent_sequences * scale),
    ), mem


def _offload_tier(replica: Replica, kv: "KVResult", engine: "EngineProfile | None", gib: float) -> "OffloadTier":
    """The replica's CPU KV tier (:func:`capplan.offload.offload_tier`) on a server of its own step prices."""
    from capplan.benchmark import Server
    from capplan.engine import default_engine
    from capplan.offload import offload_tier
    from capplan.roofline import step_pricer

    t = (engine or default_engine()).time_on(replica.hw.name)
    server = Server(step_pricer(replica.spec, replica.hw, replica.roofline_inputs), kv.max_num_seqs, kv.max_batched_tokens,
                    kv.kv_capacity_tokens, **t.schedule())
    return offload_tier(server, gib)


def kv_rules(
    spec: "ModelSpec", kv: "KVResult", concurrency: "WorkloadConcurrency", sample: Any, workload: "Workload",
    replica: Replica, decode_context: float, budget_sequences: int | None = None,
) -> KVRules:
    """The rollout model's KV figures of one replica (see :class:`KVRules`)."""
    import numpy as np

    from capplan.plan.rollout import synchronised_peak

    layers = spec.layer_kind_counts()
    attention = layers["full"] + layers["sliding"]
    share_sliding = layers["sliding"] / attention if attention else 0.0
    capacity = float(kv.kv_capacity_tokens)
    resident_kv = float(concurrency.memory_resident_conversations)
    decode_share = (
        float(concurrency.runnable_sequences / concurrency.resident_conversations) if concurrency.resident_conversations else 1.0
    )
    held_context = float(decode_context)
    single = bool((sample.invoked.sum(1) <= 1).all())
    if single:
        inputs = np.where(sample.invoked[:, 0], sample.inputs[:, 0], 0)
        peak, peak_context = synchronised_peak(inputs, sample.actions[:, 0], share_sliding, spec.window_tokens)
        sync_resident = capacity / peak if peak > 0 else resident_kv
    else:
        sync_resident, peak_context = resident_kv, held_context
    from capplan.roofline import causal_pairs

    context = max(held_context, 1.0)
    pairs, pairs_window = float(causal_pairs(0, context)), float(causal_pairs(0, context, spec.window_tokens))
    per_token = replica.chunked(context, pairs, pairs_window, 0.0, 1.0, 0.0, kv.max_batched_tokens).replica_s / context
    return KVRules(
        sequence_cap=float(min(kv.max_num_seqs, kv.max_batched_tokens if budget_sequences is None else budget_sequences)),
        resident_kv=resident_kv,
        sync_resident_kv=float(min(sync_resident, resident_kv)) if not single else float(sync_resident),
        decode_share=min(1.0, max(decode_share, 1e-6)),
        recompute_s_per_token=per_token,
        peak_context_tokens=float(peak_context),
        held_context_tokens=held_context,
        retained_fraction=float(concurrency.retained_kv_fraction) if workload.cache.kv_during_tool_wait == "retain" else 0.0,
        group_size=workload.volume.samples_per_prompt,
    )
