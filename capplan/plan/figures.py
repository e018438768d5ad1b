"""A sized plan's figures: static batching, rollout MFU/MBU, throughput, idle and staleness."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from capplan.plan.rollout import static_batching_waste

if TYPE_CHECKING:
    from capplan.plan.inputs import PlanInputs
    from capplan.plan.replica import ReplicaSetup
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


def static_batching(work: "StepWork", times: "SplitTimes", setup: "ReplicaSetup") -> StaticBatching:
    """Static batching at the plan's decode batch: ``ceil(n / B)`` groups of the mean group maximum, plus prefill."""
    batch = times.decode_batch_sequences
    group_size = max(1, int(round(batch)))
    if batch <= 0:
        return StaticBatching(group_size, 0.0, 0.0)
    waste, group_max = static_batching_waste(work.sampled_per_conversation, group_size)
    rollout = (
        math.ceil(times.conversations_per_replica / group_size) * group_max * float(setup.decode_step_s(max(1.0, round(batch))))
        + setup.prefill.replica_s / times.replicas
    )
    return StaticBatching(group_size, waste, rollout)


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
    """Throughput, idle time and staleness of the step."""

    trained_tokens_per_s: float
    """Trained positions per second of wall time [tokens/s]."""
    trainer_idle_fraction: float
    """``1 - (train [+ sync in async]) / step`` (unclipped) [fraction]."""
    inference_busy_fraction: float
    """Rollout work at full batch over the step [fraction]."""
    stale_fraction: float
    """Async: trajectories whose generation spans more than ``max_staleness`` steps [fraction]."""
    node_ratio: float
    """Inference nodes per trainer node [ratio]."""


def step_figures(
    work: "StepWork", times: "SplitTimes", split: "Split", trainer: "TrainerSide", setup: "ReplicaSetup", inputs: "PlanInputs",
    has_rollout: bool,
) -> StepFigures:
    """Trained tokens/s, idle fractions, the stale fraction (async) and the node ratio of the split."""
    step, trainer_time = times.step_time_s, times.trainer_time_s
    has_trainer = trainer.has_trainer
    if inputs.mode == "sync":
        trainer_idle = 1 - trainer_time / step if step > 0 and has_trainer else 0.0
    else:
        trainer_idle = 1 - (trainer_time + trainer.weight_sync_s) / step if step > 0 and has_trainer else 0.0
    stale = 0.0
    if inputs.mode == "async" and has_rollout and has_trainer and step > 0:
        # a trajectory generated over d seconds is consumed about d / step policy versions later
        batch = times.decode_batch_sequences
        durations = work.sampled_per_conversation * float(setup.decode_step_s(max(batch, 1.0))) + work.wait_per_conversation
        stale = float((durations / step > inputs.max_staleness).mean())
    inference_per_node, trainer_per_node = inputs.hardware.gpus_per_node, trainer.hardware.gpus_per_node
    return StepFigures(
        trained_tokens_per_s=work.trained_positions / step if step > 0 else 0.0,
        trainer_idle_fraction=trainer_idle,
        inference_busy_fraction=times.work_time_s / step if step > 0 else 0.0,
        stale_fraction=stale,
        node_ratio=(split.inference_gpus / inference_per_node) / (split.trainer_gpus / trainer_per_node) if split.trainer_gpus else 0.0,
    )
