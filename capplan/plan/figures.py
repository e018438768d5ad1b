"""A sized plan's figures: static batching, rollout MFU/MBU, throughput, idle and staleness."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from capplan.plan.rollout import static_batching_waste

if TYPE_CHECKING:
    from capplan.plan.inputs import PlanInputs
    from capplan.plan.replica import ReplicaSetup
    from capplan.plan.rollout import RolloutModel, StaticRollout
    from capplan.plan.sizing import Split, SplitTimes, TrainerSide
    from capplan.plan.work import StepWork


@dataclass(frozen=True)
class StaticBatching:
    """What static batching (groups run until their longest member ends) would cost."""

    group_size: int
    """Sequences per static group: the decode batch, rounded [sequences]."""
    waste_fraction: float
    """Slot-steps wasted, ``1 - sum L / (B x sum group max L)`` [fraction]."""
    rollout_time_s: float
    """Rollout time with static groups [s]."""
    mean_tokens: float = 0.0
    """Mean sampled tokens of the conversations grouped [tokens]."""
    group_max_tokens: float = 0.0
    """Mean group maximum of sampled tokens [tokens]; ``waste = 1 - mean / group max``."""
    rollout: "StaticRollout | None" = None
    """The terms of ``rollout_time_s``."""


def static_batching(work: "StepWork", times: "SplitTimes", rollout: "RolloutModel") -> StaticBatching:
    """Static batching at a synchronised step's decode batch: the slot-steps it wastes and its
    rollout time (:meth:`capplan.plan.rollout.RolloutModel.static_rollout_s`, never shorter than
    the longest rollout)."""
    batch = times.sync_decode_batch_sequences or times.decode_batch_sequences
    group_size = max(1, int(round(batch)))
    if batch <= 0:
        return StaticBatching(group_size, 0.0, 0.0)
    lengths = work.sampled_per_conversation
    waste, group_max = static_batching_waste(lengths, group_size)
    grouped = lengths[: (lengths.size // group_size) * group_size] if lengths.size >= group_size else lengths
    static = rollout.static_rollout(times.replicas, batch)
    return StaticBatching(group_size, waste, static.time_s, float(grouped.mean()) if grouped.size else 0.0,
                          group_max if lengths.size >= group_size else float(lengths.max(initial=0.0)), static)


@dataclass(frozen=True)
class RolloutEfficiency:
    """How well the rollout uses its GPUs."""

    rollout_gpu_s: float
    """GPU-seconds of prefill, decode and scoring per step [GPU-s]."""
    mfu: float
    """Model-FLOPs utilisation of the rollout GPUs (unclipped) [fraction]."""
    mbu: float
    """Memory-bandwidth utilisation of the rollout GPUs (unclipped) [fraction]."""
    tokens_per_gpu_s: float
    """Sampled tokens per rollout GPU-second [tokens/GPU-s]."""
    prefill_gpu_s_by_class: dict[str, float]
    """Prefill GPU-seconds split by the class of the positions (prompt, action, tool) [GPU-s]."""


def rollout_efficiency(work: "StepWork", times: "SplitTimes", setup: "ReplicaSetup", inputs: "PlanInputs") -> RolloutEfficiency:
    """MFU, MBU and sampled tokens per GPU-second of the step's prefill, decode and scoring.

    ``MFU = FLOPs / (GPU-s / tp x peak)``, ``MBU = bytes / (GPU-s / tp x HBM bandwidth)``, with
    decode priced at the plan's batch and the mean context.
    """
    tp, hw = inputs.tp, inputs.hardware
    prefill, score = setup.prefill, setup.score
    batch = times.decode_batch_sequences
    decode_flops = decode_bytes = 0.0
    if batch > 0:
        cost = setup.replica.decode(batch, setup.decode_context_tokens)
        steps = work.decode_tokens / batch
        decode_flops, decode_bytes = steps * float(cost.flops), steps * float(cost.bytes)
    rollout_gpu_s = (prefill.replica_s + times.decode_replica_s + score.replica_s) * tp
    peak = hw.peak_flops(hw.compute_dtype(inputs.weight_dtype))
    bandwidth = hw.hbm_bandwidth_bytes_per_s
    flops = prefill.flops + decode_flops + score.flops
    mfu = flops * 1.0 / (rollout_gpu_s / tp * peak) if rollout_gpu_s else 0.0
    mbu = (prefill.bytes + decode_bytes + score.bytes) / (rollout_gpu_s / tp * bandwidth) if rollout_gpu_s else 0.0
    class_total = sum(work.prefill_by_class) or 1.0
    by_class = {
        name: prefill.replica_s * tp * positions / class_total
        for name, positions in zip(("prompt", "action", "tool"), work.prefill_by_class)
    }
    return RolloutEfficiency(
        rollout_gpu_s=rollout_gpu_s,
        mfu=mfu,
        mbu=mbu,
        tokens_per_gpu_s=work.sampled_tokens / rollout_gpu_s if rollout_gpu_s else 0.0,
        prefill_gpu_s_by_class=by_class,
    )


@dataclass(frozen=True)
class StepFigures:
    """Throughput, idle time, staleness and warnings of the step."""

    trained_tokens_per_s: float
    """Trained positions per second of wall time [tokens/s]."""
    trained_tokens_per_s_per_gpu: float
    """... per GPU of the plan (colocated: every GPU once) [tokens/s/GPU]."""
    trainer_record_tokens_per_s: float
    """Record positions the trainer forwards per second [tokens/s]."""
    trainer_idle_fraction: float
    """Share of the step the trainer neither trains nor pushes weights [fraction]."""
    inference_busy_fraction: float
    """Share of the step the replicas generate [fraction]."""
    stale_fraction: float
    """Trained trajectories generated by an older policy than the one they update (lag >= 1) [fraction]."""
    mean_policy_lag: float
    """Mean policy versions between generation and training [versions]."""
    node_ratio: float
    """Inference nodes per trainer node [ratio] (0 when colocated)."""
    recompute_fraction: float
    """Positions prefilled again after preemption or eviction, over all positions forwarded [fraction]."""
    warnings: tuple[str, ...]
    """What the plan warns about (KV thrash, a tail beyond the bound, a split far from balance)."""


RECOMPUTE_WARNING = 0.10
"""Recompute above this share of the forwarded positions is flagged as KV thrash [fraction]."""


def step_figures(
    work: "StepWork", times: "SplitTimes", split: "Split", trainer: "TrainerSide", setup: "ReplicaSetup", inputs: "PlanInputs",
    has_rollout: bool,
) -> StepFigures:
    """Trained tokens/s, idle fractions, staleness, the node ratio and the warnings of the split.

    Notes
    -----
    Staleness (async) comes from :meth:`capplan.plan.rollout.RolloutModel.async_period`: a
    trajectory's age at consumption is its group's latency plus the mean wait for an update,
    ``P / 2``; its lag is ``age / P`` updates on average, and it is stale (lag >= 1) with
    probability ``min(1, age / P)``.
    """

    step, trainer_time = times.step_time_s, times.trainer_time_s
    has_trainer = trainer.has_trainer
    mode = times.mode
    sync_s = times.weight_sync_s + times.overhead_s  # the trainer's share of a step besides training
    total_gpus = split.inference_gpus if mode == "colocated" else split.inference_gpus + split.trainer_gpus
    trained_per_s = work.trained_positions * times.trained_share / step if step > 0 else 0.0
    trainer_idle = 1 - (trainer_time + sync_s) / step if step > 0 and has_trainer else 0.0
    generating = min(times.generation_time_s, step) if has_rollout else 0.0
    stale, lag = times.stale_fraction, times.mean_policy_lag
    forwarded = work.prefill_tokens + work.decode_tokens + times.recompute_tokens + work.score_tokens
    recompute_fraction = times.recompute_tokens / forwarded if forwarded else 0.0
    inference_per_node, trainer_per_node = inputs.hardware.gpus_per_node, trainer.hardware.gpus_per_node
    ratio = 0.0
    if split.trainer_gpus and mode != "colocated":
        ratio = (split.inference_gpus / inference_per_node) / (split.trainer_gpus / trainer_per_node)
    warnings = plan_warnings(times, trainer, recompute_fraction, has_rollout, mode)
    return StepFigures(
        trained_tokens_per_s=trained_per_s,
        trained_tokens_per_s_per_gpu=trained_per_s / total_gpus if total_gpus else 0.0,
        trainer_record_tokens_per_s=work.record_positions / step if step > 0 and has_trainer else 0.0,
        trainer_idle_fraction=trainer_idle,
        inference_busy_fraction=generating / step if step > 0 else 0.0,
        stale_fraction=stale,
        mean_policy_lag=lag,
        node_ratio=ratio,
        recompute_fraction=recompute_fraction,
        warnings=warnings,
    )


def plan_warnings(times: "SplitTimes", trainer: "TrainerSide", recompute_fraction: float, has_rollout: bool, mode: str) -> tuple[str, ...]:
    """The plan's warnings: KV thrash, a longest rollout beyond the staleness bound, a split far from balance."""
    from capplan.plan.sizing import BALANCE_WARNING

    out = []
    if has_rollout and recompute_fraction > RECOMPUTE_WARNING:
        out.append(
            f"KV thrash: {recompute_fraction:.1%} of the forwarded positions are recomputed after preemption or eviction "
            f"(above {RECOMPUTE_WARNING:.0%}); give each replica more KV (--tp, fewer conversations per replica, "
            "kv_during_tool_wait: evict) or fewer steps in flight"
        )
    if not (has_rollout and trainer.has_trainer):
        return tuple(out)
    k = times.max_staleness
    if mode == "async" and k > 0 and times.tail_time_s > k * times.step_time_s:
        out.append(
            f"the longest rollout alone ({times.tail_time_s:,.0f} s) outlasts {k} trainer step(s) of {times.step_time_s:,.0f} s: "
            "it cannot finish within the staleness bound, so the tail sets the step; raise --max-staleness or cap the length"
        )
    if mode == "async" and times.replicas and times.bound_by in ("rollout production", "trainer"):
        generation = times.production_time_s
        busy = times.trainer_time_s + (times.weight_sync_s + times.overhead_s if mode == "async" else 0.0)
        if busy > 0 and generation > 0:
            ratio = generation / busy
            if ratio > BALANCE_WARNING:
                out.append(
                    f"split far from balance: generating a step takes {ratio:.1f}x the trainer's time; more inference GPUs "
                    "(or fewer trainer GPUs) would raise trained tokens/s per GPU"
                )
            elif ratio < 1 / BALANCE_WARNING:
                out.append(
                    f"split far from balance: the trainer takes {1 / ratio:.1f}x the time to generate a step; more trainer GPUs "
                    "(or fewer inference GPUs) would raise trained tokens/s per GPU"
                )
    return tuple(out)
