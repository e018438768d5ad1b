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
    """KV capacity, decode batch, decode and prefill GPU-seconds, rollout time, static batching, scoring.

    Every line is built from the values the plan's table shows (``times``: :class:`SplitTimes`),
    so its substituted numbers reproduce its result.
    """
    kv, concurrency, rules = setup.kv, setup.concurrency, setup.kv_rules
    batch, context = times.decode_batch_sequences, setup.decode_context_tokens
    prefill_s, decode_s, score_s = setup.prefill.replica_s, times.decode_replica_s, setup.score.replica_s
    chunk = kv.max_batched_tokens
    decode_ms = float(setup.decode_step_s(max(batch, 1))) * 1e3
    chunks = math.ceil(work.prefill_tokens / chunk) if work.prefill_tokens else 0
    steady = times.mode == "async" and times.max_staleness > 0 and times.batch_cap_sequences > 0
    sync_batch = times.sync_decode_batch_sequences
    lines = [
        f"KV capacity per replica = {kv.kv_budget_gib_per_gpu:.2f} GiB per GPU x {tp} GPUs / {kv.kv_bytes_per_token:,.0f} B per token, "
        f"in whole blocks of {kv.block_size} = {kv.kv_capacity_tokens:,} tokens",
    ]
    if concurrency is not None and rules is not None:
        share = rules.decode_share
        lines.append(
            f"decode batch{' of a synchronised step' if steady else ''} = max(1, min(scheduler cap {rules.sequence_cap:,.0f}, "
            f"decode share {share:.3f} x min(conversations on the busiest replica {times.busiest_conversations:,.1f}, "
            f"KV room at the batch's peak {rules.sync_resident_kv:,.1f}))) = {sync_batch:,.2f} -> binding: {times.binding} "
            f"(conversations per replica {times.conversations_per_replica:,.1f} x decode share {share:.3f} against "
            f"{setup.max_decode_batch:,.1f} runnable by memory in steady state)"
        )
    if steady:
        per_replica = work.decode_tokens / max(times.replicas, 1)
        lhs = per_replica * decode_ms / 1e3 / batch
        rhs = times.step_time_s * (1 - times.rejected_fraction) - times.period_fixed_s
        lines.append(
            f"decode batch (async, K {times.max_staleness}: the smallest on a grid that delivers one step's decode per period, "
            f"at most the {times.batch_cap_sequences:,.2f} the K + 1 steps in flight fill) = {batch:,.2f}: "
            f"{per_replica:,.0f} decode positions per replica x {decode_ms:.2f} ms / {batch:,.2f} = {lhs:,.1f} s <= "
            f"period {times.step_time_s:,.1f} x (1 - rejected {times.rejected_fraction:.3f}) - prefill, scoring and weight load "
            f"{times.period_fixed_s:,.2f} = {rhs:,.1f} s"
        )
    lines += [
        f"decode step at batch {batch:,.2f}, mean context {context:,.0f} = {decode_ms:.2f} ms (roofline)",
        f"decode GPU-s = {work.decode_tokens:,.0f} decode positions / {batch:,.2f} per step x {decode_ms:.2f} ms x tp {tp} "
        f"= {decode_s * tp:,.1f}",
        f"prefill GPU-s = {work.prefill_tokens:,.0f} positions in {chunks:,} chunks of <= {chunk:,} x tp {tp} = {prefill_s * tp:,.1f}",
    ]
    sync_decode = times.sync_decode_replica_s
    at = f" at the synchronised batch {sync_batch:,.2f}" if steady else ""
    lines += [
        f"rollout work at full batch W = (prefill {prefill_s:,.2f} + decode{at} {sync_decode:,.1f} + scoring {score_s:,.2f} + "
        f"lost contexts {times.lost_replica_s:,.2f} replica-s) / {times.replicas} replicas x busiest {times.busiest_conversations:,.1f} "
        f"/ mean {times.conversations_per_replica:,.1f} conversations per replica = {times.work_time_s:,.1f} s",
        f"rollout time{' of a synchronised step' if steady else ''} = max(W {times.work_time_s:,.1f}, (1 - running together "
        f"{times.fits_sequences:,.2f} / busiest {times.busiest_conversations:,.2f}) x W + longest conversation at the shrinking batch "
        f"{times.tail_time_s:,.1f}) = {times.rollout_time_s:,.1f} s",
        f"static batching waste = 1 - mean L {static.mean_tokens:,.0f} / mean group max L {static.group_max_tokens:,.0f} = "
        f"{static.waste_fraction:.1%} (groups of {static.group_size}, a synchronised step's batch)",
    ]
    if static.rollout is not None and static.rollout.waves:
        r = static.rollout
        lines.append(
            f"static-batching rollout time = prefill {r.prefill_s:,.2f} + (waves {r.waves} - 1) x group max {r.group_max_tokens:,.0f} "
            f"tokens x {r.step_s * 1e3:.2f} ms + longest conversation with its {static.group_size} slots held {r.last_s:,.1f} = "
            f"{static.rollout_time_s:,.1f} s"
        )
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
    from capplan.trainer import SYNC_RECEIVES_TEXT, WEIGHT_SYNC_FITS, sync_bytes_per_gpu

    mfu_note = "fitted on validation/trainer.csv" if trainer.mfu_source == "fitted" else "given"
    lines = [
        f"trainer time = {trainer.flops:.3g} FLOP / ({split.trainer_gpus} GPUs x {peak_tflops:,.0f} TFLOP/s x MFU {trainer.mfu:.3f} "
        f"({mfu_note})) = {trainer_time:,.1f} s",
        f"trainer GPUs holding the state = {trainer.min_gpus} ({TRAIN_BYTES_PER_PARAM:g} B/param x {params_billion:,.1f}B params, "
        f"sharded); sane data-parallel minimum = {trainer.sane_gpus} (whole nodes)",
    ]
    if has_rollout:
        fit = WEIGHT_SYNC_FITS[trainer.sync_pattern]
        sent = sync_bytes_per_gpu(spec, inputs.tp, fit.receives, 2.0, inputs.ep, inputs.data_parallel, inputs.redundant_experts)
        lines.append(
            f"weight sync ({trainer.sync_pattern}) = {fit.latency_s:g} s + {sent / 1e9:,.2f} GB into each engine GPU "
            f"({SYNC_RECEIVES_TEXT[fit.receives]}, 2 B/param) / {fit.bandwidth_bytes_per_s / 1e9:.3g} GB/s = {sync_s:,.2f} s"
        )
    mode = times.mode
    framework = times.overhead_s
    if mode in ("sync", "colocated") or times.max_staleness == 0:
        label = mode if mode != "async" else "async (K 0) step, serial,"
        lines.append(
            f"{label} step = rollout {times.rollout_time_s:,.1f} + train {trainer_time:,.1f} + sync {sync_s:,.2f} + framework "
            f"{framework:,.2f} = {step:,.1f} s; trainer idle = 1 - (train + sync + framework) / step = {figures.trainer_idle_fraction:.1%}"
        )
    else:
        k = times.max_staleness
        r = times.rejected_fraction
        if inputs.async_ingest == "batches":
            bound = (f"(synchronised rollout {times.rollout_time_s:,.1f} x stretch {times.stretch:.3f} + train + sync + framework) "
                     f"/ (K + 1) {k + 1}")
        else:
            bound = (f"mean group latency {times.latency_time_s / times.stretch:,.1f} x stretch {times.stretch:.3f} / "
                     f"((K + 1) {k + 1} x (1 - rejected {r:.3f}) - 0.5)")
            if times.edge_s:
                bound += (f", slowest group latency {times.slowest_latency_s / times.stretch:,.1f} x stretch {times.stretch:.3f} / "
                          f"(K + 1/2) {k + 0.5:g} (a shorter period would reject it)")
        largest = max(trainer_time + sync_s + framework, times.production_time_s / max(1.0 - r, 1e-12), times.chain_s, times.edge_s)
        above = (f" (the shortest period that rejects no group: the replicas' batch moves in steps, so it sits "
                 f"{step / largest - 1:.1%} above the largest term)") if step > largest * 1.0005 else ""
        lines.append(
            f"async step = max(train {trainer_time:,.1f} + sync {sync_s:,.2f} + framework {framework:,.2f}, production "
            f"{times.production_time_s:,.1f} / (1 - rejected {r:.3f}), staleness bound {bound}) = {step:,.1f} s{above}, set by the "
            f"{times.bound_by}; stretch = P / (P - weight load and framework hold); stale (lag >= 1) {figures.stale_fraction:.1%}, "
            f"mean lag {figures.mean_policy_lag:.2f}"
        )
        lines.append(
            f"generation = production at the steady batch {times.production_time_s:,.1f} s; inference idle = 1 - "
            f"{times.production_time_s:,.1f} / {step:,.1f} = {max(0.0, 1 - figures.inference_busy_fraction):.1%} (the replicas' "
            f"spare throughput: they run at batch {times.decode_batch_sequences:,.2f}, the smallest that keeps pace with the "
            f"period, each decoding {times.decode_replica_s / max(times.replicas, 1):,.1f} s of it)"
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
