"""Which command-line flags apply to which workload methods: a flag given for a workload whose method it does not apply to is an error naming both, never silently ignored."""

from __future__ import annotations

from enum import Enum
from typing import Any

import typer


class WeightSync(str, Enum):
    """``--weight-sync`` of plan and simulate (:data:`capplan.trainer.SYNC_PATTERNS` and ``auto``)."""

    auto = "auto"
    nccl = "nccl"
    checkpoint_engine = "checkpoint-engine"
    nixl = "nixl"
    reshard = "reshard"


RL_METHODS = frozenset({"distillation", "outcome-rl", "multi-turn-rl"})
"""Methods with both a rollout engine and a trainer."""

TRAINER_METHODS = frozenset({"sft", *RL_METHODS})
"""Methods with a trainer."""

ROLLOUT_METHODS = frozenset({"serving", *RL_METHODS})
"""Methods with an inference engine."""

PLAN_FLAGS: dict[str, tuple[frozenset[str], str]] = {
    "trainer_hardware": (TRAINER_METHODS, "a serving fleet has no trainer"),
    "trainer_gpus": (TRAINER_METHODS, "a serving fleet has no trainer"),
    "total_gpus": (TRAINER_METHODS, "it splits GPUs between inference and a trainer; size a serving fleet with --inference-gpus"),
    "mode": (RL_METHODS, "sync and async order rollout and training, and the workload does not have both"),
    "max_staleness": (RL_METHODS, "staleness bounds an asynchronous trainer's inputs, and the workload does not have both sides"),
    "async_ingest": (RL_METHODS, "it orders an asynchronous trainer's inputs, and the workload does not have both sides"),
    "inflight_updates": (RL_METHODS, "weight updates reach a rollout engine from a trainer, and the workload does not have both"),
    "weight_sync": (RL_METHODS, "weights are pushed from a trainer to rollout engines, and the workload does not have both"),
    "rollout_slowdown": (RL_METHODS, "it is the RL framework's slowdown of rollout engines, and the workload does not have both sides"),
    "step_overhead": (RL_METHODS, "it is the RL framework's time per trainer step, and the workload does not have both sides"),
    "trainer_mfu": (TRAINER_METHODS, "the workload has no trainer"),
    "max_grid_cells": (TRAINER_METHODS, "it bounds the splits --total-gpus evaluates"),
    "inference_gpus": (ROLLOUT_METHODS, "the workload has no inference engine"),
    "inference_replicas": (ROLLOUT_METHODS, "the workload has no inference engine"),
    "gpu_hour_price": (frozenset({"serving"}), "costs per token are planned for serving fleets"),
    **{name: (ROLLOUT_METHODS, "it is a setting of the inference engine, and the workload has none") for name in (
        "ep", "dp", "expert_dtype", "redundant_experts", "kv_scale", "two_batch_overlap", "alltoall_mode", "gemm_dtype",
        "spec_method", "spec_tokens", "acceptance_rate", "acceptance_length", "draft_model", "disaggregated", "kv_offload_gib",
    )},
    "acceptance_step": (RL_METHODS, "it reads an acceptance schedule at trainer steps, and the workload has no trainer"),
    "prefill_decode_ratio": (frozenset({"serving"}), "it sizes the pools of a serving fleet; RL rollouts report their ratio with "
                             "--disaggregated"),
}
"""``capplan plan``: parameter name -> (methods it applies to, why it does not apply to the others)."""

SWEEP_SERVING_ERROR = (
    "capplan sweep plans training and RL workloads (trained tokens per second); for a serving workload use capplan plan, once "
    "per setting: --tensor-parallel-size, --ep, --spec-tokens, and --disaggregated --prefill-decode-ratio 1,2,4 for the "
    "prefill:decode ratio"
)
"""Why ``capplan sweep`` refuses a serving workload, and what to use instead."""

SIMULATE_RL_FLAGS = (
    "trainer_hardware", "env_workers", "trainer_gpus", "mode", "max_staleness", "max_inflight_groups", "sampling", "oversample",
    "static_batching", "inflight_updates", "steps", "sweep_staleness", "trajectories", "timeline",
    "weight_sync", "trainer_mfu", "rollout_slowdown", "step_overhead",
)
"""``capplan simulate`` parameters that only a workload with a rollout engine and a trainer takes."""

SIMULATE_SERVING_FLAGS = ("requests", "request_rate", "trace", "records")
"""``capplan simulate`` parameters that only a serving workload takes."""


def given(ctx: typer.Context, names: Any) -> dict[str, str]:
    """The parameters among ``names`` the user gave on the command line (or in the environment),
    by parameter name -> the flag as spelled in ``--help`` (its first long form)."""
    out = {}
    params = {p.name: p for p in ctx.command.params}
    for name in names:
        source = ctx.get_parameter_source(name)
        if source is not None and source.name in ("COMMANDLINE", "ENVIRONMENT"):
            opts = [o for o in params[name].opts if o.startswith("--")] if name in params else []
            out[name] = opts[0] if opts else f"--{name.replace('_', '-')}"
    return out


def method_flag_error(workload: str, method: str, flags: dict[str, str], table: dict[str, tuple[frozenset[str], str]]) -> str | None:
    """The error for the first given flag that does not apply to ``method`` (``None`` if all do).

    >>> method_flag_error("chat-serving", "serving", {"mode": "--mode"}, PLAN_FLAGS)
    '--mode does not apply to chat-serving (method serving): sync and async order rollout and training, and the workload does not have both'
    """
    for name, flag in flags.items():
        if name in table and method not in table[name][0]:
            return f"{flag} does not apply to {workload} (method {method}): {table[name][1]}"
    return None


ASYNC_FLAGS = ("max_staleness", "async_ingest", "inflight_updates")
"""Parameters that shape an asynchronous trainer's inputs: they mean nothing when rollouts and
training alternate (``--mode sync`` or ``colocated``)."""


def mode_flag_error(mode: str, flags: dict[str, str], chooses_mode: bool = False, max_staleness: int | None = None) -> str | None:
    """The error for an asynchronous-only flag given with a step mode that has no asynchrony
    (``None`` when every given flag applies).

    ``mode`` is the ``--mode`` value; ``auto`` counts as ``sync`` unless ``chooses_mode`` (with
    ``--total-gpus`` the plan may pick ``async``). ``--mode async --max-staleness 0`` is refused
    too: a bound of 0 is synchronous training, which ``--mode sync`` plans.

    >>> mode_flag_error("sync", {"max_staleness": "--max-staleness"})
    '--max-staleness applies to --mode async; with --mode sync rollouts and training alternate, so there is no asynchrony for it to shape'
    >>> mode_flag_error("async", {"max_staleness": "--max-staleness"}, max_staleness=0)
    '--mode async --max-staleness 0 is synchronous training (no rollout may run ahead of the trainer): use --mode sync, or a bound of 1 or more'
    """
    effective = "sync" if mode == "auto" and not chooses_mode else mode
    if effective in ("sync", "colocated"):
        for name, flag in flags.items():
            if name in ASYNC_FLAGS:
                shown = f"--mode {mode}" + (" (sync without --total-gpus)" if mode == "auto" else "")
                return f"{flag} applies to --mode async; with {shown} rollouts and training alternate, so there is no asynchrony for it to shape"
    if mode == "async" and max_staleness == 0 and "max_staleness" in flags:
        return ("--mode async --max-staleness 0 is synchronous training (no rollout may run ahead of the trainer): "
                "use --mode sync, or a bound of 1 or more")
    return None
