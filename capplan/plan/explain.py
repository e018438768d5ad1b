"""The plan's formulas with their numbers substituted (``--explain``), and its assumptions."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from capplan.plan.figures import StaticBatching, StepFigures
    from capplan.plan.inputs import PlanInputs
    from capplan.plan.replica import ReplicaSetup
    from capplan.plan.serving import ServingPlan
    from capplan.plan.sizing import Split, SplitTimes, TrainerSide
    from capplan.plan.work import Prepared, StepWork
    from capplan.workload import Workload


def conversations_line(workload: "Workload", work: "StepWork") -> str:
    """Conversations generated per trained step, filtering included."""
    trained = workload.volume.conversations_per_step
    filtered = workload.training.filtered_group_fraction
    return (
        f"conversations generated per trained step = prompts x samples / (1 - filtered) = {trained:,} / (1 - {filtered:g}) "
        f"= {work.conversations:,.1f}"
    )


def trainer_flops_line(workload: "Workload", prepared: "Prepared") -> str:
    """Trainer FLOPs: passes x forward FLOPs per conversation x conversations."""
    passes = prepared.trainer_passes
    return (
        f"trainer FLOPs = {passes.count} passes ({passes.description}) x {prepared.forward_flops_per_conversation:.3g} "
        f"FLOP per conversation x {workload.volume.conversations_per_step:,} = {prepared.trainer_flops:.3g}"
    )


def rollout_lines(work: "StepWork", setup: "ReplicaSetup", times: "SplitTimes", static: "StaticBatching", tp: int) -> list[str]:
    """KV capacity, decode batch, decode and prefill GPU-seconds, rollout time, static batching, scoring."""
    kv, concurrency = setup.kv, setup.concurrency
    batch, context = times.decode_batch_sequences, setup.decode_context_tokens
    prefill_s, decode_s, score_s = setup.prefill.replica_s, times.decode_replica_s, setup.score.replica_s
    chunk = kv.max_batched_tokens
    decode_ms = float(setup.decode_step_s(max(batch, 1))) * 1e3
    chunks = math.ceil(work.prefill_tokens / chunk) if work.prefill_tokens else 0
    lines = [
        f"KV capacity per replica = {kv.kv_capacity_tokens:,} tokens ({kv.kv_budget_gib_per_gpu:.2f} GiB per GPU x {tp} GPUs "
        f"/ {kv.kv_bytes_per_token:,.0f} B per token)",
        f"decode batch = min(runnable by memory {concurrency.runnable_sequences:,.1f}, max_num_seqs {kv.max_num_seqs}, "
        f"conversations per replica {times.conversations_per_replica:,.1f}) = {batch:,.1f} -> binding: {times.binding}"
        if concurrency
        else "",
        f"decode step at batch {batch:,.1f}, mean context {context:,.0f} = {decode_ms:.2f} ms (roofline)",
        f"decode GPU-s = {work.decode_tokens:,.0f} decode positions / {batch:,.1f} per step x {decode_ms:.2f} ms x tp {tp} "
        f"= {decode_s * tp:,.1f}",
        f"prefill GPU-s = {work.prefill_tokens:,.0f} positions in {chunks:,} chunks of <= {chunk:,} x tp {tp} = {prefill_s * tp:,.1f}",
        f"rollout time = max(work {prefill_s + decode_s + score_s:,.1f} replica-s / {times.replicas} replicas = "
        f"{times.work_time_s:,.1f} s, longest conversation at the shrinking batch {times.tail_time_s:,.1f} s) = "
        f"{times.rollout_time_s:,.1f} s",
        f"static batching waste = 1 - sum L / (B x sum group max L) = {static.waste_fraction:.1%} (groups of {static.group_size})",
    ]
    if score_s:
        lines.append(f"score GPU-s = {work.score_tokens:,.0f} teacher-scored positions x tp {tp} = {score_s * tp:,.1f}")
    return lines


def trainer_lines(
    inputs: "PlanInputs", trainer: "TrainerSide", times: "SplitTimes", split: "Split", figures: "StepFigures", has_rollout: bool
) -> list[str]:
    """Trainer time and GPUs, weight sync, the step in sync or async mode, and the node ratio."""
    from capplan.trainer import TRAIN_BYTES_PER_PARAM

    spec, hw = inputs.model, inputs.hardware
    params_billion = spec.total_params() / 1e9
    trainer_time, sync_s, step = times.trainer_time_s, trainer.weight_sync_s, times.step_time_s
    peak_tflops = trainer.hardware.peak_flops("bf16") / 1e12
    from capplan.trainer import WEIGHT_SYNC_FITS

    mfu_note = "fitted on validation/trainer.csv" if trainer.mfu_source == "fitted" else "given"
    lines = [
        f"trainer time = {trainer.flops:.3g} FLOP / ({split.trainer_gpus} GPUs x {peak_tflops:,.0f} TFLOP/s x MFU {trainer.mfu:.3f} "
        f"({mfu_note})) = {trainer_time:,.1f} s",
        f"trainer GPUs holding the state = {trainer.min_gpus} ({TRAIN_BYTES_PER_PARAM:g} B/param x {params_billion:,.1f}B params, "
        f"sharded); sane data-parallel minimum = {trainer.sane_gpus} (whole nodes)",
    ]
    if has_rollout:
        fit = WEIGHT_SYNC_FITS[trainer.sync_pattern]
        lines.append(
            f"weight sync ({trainer.sync_pattern}) = {fit.latency_s:g} s + 2 B x {params_billion:,.1f}B params / (tp {inputs.tp} x "
            f"{fit.bandwidth_bytes_per_s / 1e9:.3g} GB/s) = {sync_s:,.2f} s"
        )
    mode = times.mode
    if mode in ("sync", "colocated") or times.max_staleness == 0:
        lines.append(
            f"{mode} step = rollout {times.rollout_time_s:,.1f} + train {trainer_time:,.1f} + sync {sync_s:,.2f} = {step:,.1f} s; "
            f"trainer idle = 1 - (train + sync)/step = {figures.trainer_idle_fraction:.1%}"
        )
    else:
        k = times.max_staleness
        lines.append(
            f"async step = max(train {trainer_time:,.1f} + sync {sync_s:,.2f}, production {times.production_time_s:,.1f}, "
            f"(rollout {times.rollout_time_s:,.1f} + train + sync) / (K + 1 = {k + 1})) = {step:,.1f} s, set by the "
            f"{times.bound_by}; stale (lag >= 1) {figures.stale_fraction:.1%}, mean lag {figures.mean_policy_lag:.2f}"
        )
    if mode != "colocated":
        lines.append(
            f"node ratio = ({split.inference_gpus} / {hw.gpus_per_node}) / ({split.trainer_gpus} / {trainer.hardware.gpus_per_node}) "
            f"= {figures.node_ratio:,.2f} inference nodes per trainer node"
        )
    return lines


def filter_line(workload: "Workload") -> str:
    """How filtering multiplies rollout work (empty without filtering)."""
    from capplan.plan.work import filter_factor

    filtered = workload.training.filtered_group_fraction
    if not filtered:
        return ""
    return f"filtering drops {filtered:.0%} of groups: rollout work per trained step x {filter_factor(workload):.3g}"


def plan_explanation(
    workload: "Workload",
    inputs: "PlanInputs",
    prepared: "Prepared",
    setup: "ReplicaSetup",
    trainer: "TrainerSide",
    serving: "ServingPlan | None",
    times: "SplitTimes",
    split: "Split",
    static: "StaticBatching",
    figures: "StepFigures",
) -> list[str]:
    """Every explain line of a plan, in order: work, trainer FLOPs, serving, rollout, trainer, filtering."""
    lines = [conversations_line(workload, prepared.work)]
    if trainer.has_trainer:
        lines.append(trainer_flops_line(workload, prepared))
    if workload.has_rollout:
        lines += rollout_lines(prepared.work, setup, times, static, inputs.tp)
    if trainer.has_trainer:
        lines += trainer_lines(inputs, trainer, times, split, figures, workload.has_rollout)
    lines.append(filter_line(workload))
    return [line for line in lines if line]


def plan_assumptions(trainer: "TrainerSide") -> list[str]:
    """The assumptions a plan states (trainer sharding and MFU; how steps are priced)."""
    from capplan.trainer import MICRO_BATCH_TOKENS, TRAIN_BYTES_PER_PARAM

    assumptions = []
    if trainer.has_trainer:
        source = "fitted on the BF16 rows of validation/trainer.csv" if trainer.mfu_source == "fitted" else "given"
        assumptions.append(
            f"trainer: FSDP/ZeRO-3 sharding of {TRAIN_BYTES_PER_PARAM:g} B/param AdamW state over all trainer GPUs, full activation "
            f"checkpointing, {MICRO_BATCH_TOKENS:,}-token micro-batches; MFU {trainer.mfu:.3f} of dense bf16 peak ({source})"
        )
    assumptions.append(
        "prefill and decode priced as separate roofline steps (prefill in chunks of the scheduler token budget); "
        "efficiencies and host times from the engine profile (fitted to published measurements; capplan accuracy)"
    )
    return assumptions
