"""How to run a simulation: :class:`SimConfig` (the user's options, validated) and :class:`RunOptions` (resolved for the engine)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from capplan.engine import EngineProfile
from capplan.errors import InputError
from capplan.options import Options
from capplan.speculative import SpecInputs
from capplan.units import MAX_CONTEXT_TOKENS, MAX_GPUS, MAX_SEQUENCES, KVDtype, WeightDtype

if TYPE_CHECKING:
    from capplan.workload import Workload


MAX_SIM_REPLICAS = 10_000
"""Most inference replicas one simulation plays (each replica's steps are events of their own:
10,000 replicas take about a minute for two steps); a larger fleet is sized by ``capplan plan``."""

class EngineFeatures(BaseModel):
    """The engine features a simulated replica runs with: expert and data parallelism, quantised
    experts and KV scales, the all-to-all kernels (as :class:`capplan.roofline.RooflineInputs`).

    With data-parallel attention a replica is **one rank** of ``tp`` GPUs (its own scheduler and KV
    cache), as ``capplan plan`` counts it; every rank of an instance is priced with its share of
    the all-to-all and the MoE layers' view of all ``dp`` ranks' positions.
    """

    ep: int = Field(default=1, ge=1, le=MAX_GPUS)
    """Expert-parallel degree [GPUs]: 1 or ``tp x dp`` (:class:`capplan.kv.KVInputs`)."""
    dp: int | None = Field(default=None, ge=1, le=MAX_GPUS)
    """Data-parallel attention ranks per instance [count]; default ``ep / tp`` when ``ep`` exceeds ``tp``, else 1."""
    expert_dtype: WeightDtype | None = None
    """Dtype of the routed experts' weights; default ``weight_dtype``."""
    redundant_experts: int = Field(default=0, ge=0, le=MAX_GPUS)
    """Extra expert replicas of an expert load balancer [count]; needs ``ep > 1``."""
    kv_scale: Literal["tensor", "token_head"] = "tensor"
    """KV quantisation-scale granularity (:class:`capplan.kv.KVInputs`)."""
    alltoall_mode: Literal["auto", "low_latency", "normal"] = "auto"
    """Expert-parallel all-to-all kernels (:class:`capplan.roofline.RooflineInputs`)."""
    gemm_dtype: WeightDtype | None = None
    """Tensor unit of the weight GEMMs; default ``weight_dtype`` (:class:`capplan.roofline.RooflineInputs`)."""

    def layout(self, roofline: bool = True) -> dict[str, Any]:
        """The settings that differ from their defaults, as keywords of :class:`capplan.roofline.RooflineInputs`
        (``roofline``) or :class:`capplan.kv.KVInputs` (not): a plain replica builds exactly the inputs it always did."""
        out: dict[str, Any] = {}
        for key, plain in (("ep", 1), ("dp", None), ("expert_dtype", None), ("redundant_experts", 0), ("kv_scale", "tensor"),
                           ("alltoall_mode", "auto"), ("gemm_dtype", None)):
            value = getattr(self, key)
            if value != plain and (roofline or key not in ("alltoall_mode", "gemm_dtype")):
                out[key] = value
        return out

    def check_model(self, spec: Any) -> None:
        """Refuse settings ``spec`` cannot take (as :class:`capplan.plan.PlanInputs`).

        Raises
        ------
        InputError
            ``expert_dtype`` on a dense model; an expert-parallel layout the model's experts do
            not allow (:func:`capplan.kv.check_expert_parallelism`).
        """
        from capplan.kv import check_expert_dtype, check_expert_parallelism

        check_expert_parallelism(spec, getattr(self, "tp", 1), self.data_parallel, self.ep, self.redundant_experts)
        check_expert_dtype(spec, self.expert_dtype)

    @model_validator(mode="after")
    def _whole_instances(self) -> "EngineFeatures":
        from capplan.kv import check_kv_scale
        from capplan.roofline import check_step_settings

        check_instances(getattr(self, "inference_replicas", 1), getattr(self, "tp", 1), self.data_parallel)
        check_kv_scale(getattr(self, "kv_dtype", "bf16"), self.kv_scale)
        check_step_settings(self.ep, getattr(self, "weight_dtype", "bf16"), self.gemm_dtype, alltoall_mode=self.alltoall_mode)
        return self

    @property
    def data_parallel(self) -> int:
        """Data-parallel attention ranks per instance [count] (:func:`capplan.kv.resolve_dp`)."""
        from capplan.kv import resolve_dp

        return resolve_dp(getattr(self, "tp", 1), self.ep, self.dp)


class SimConfig(EngineFeatures, Options, BaseModel):
    """How to run a simulation (everything besides the workload and the hardware).

    Raises
    ------
    InputError
        On construction, for a value out of range or options that do not go together; the
        one-line message names the flag.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, arbitrary_types_allowed=True)
    FLAGS: ClassVar[dict[str, str]] = {"chunk_conversations": "chunk_conversations", "trainer_mfu": "--trainer-mfu",
                                       "kv_offload_gib": "--kv-offload-gib"}

    tp: int = Field(default=1, ge=1, le=MAX_GPUS)
    """Tensor-parallel degree of each inference replica [GPUs]."""
    inference_replicas: int = Field(default=1, ge=1, le=MAX_SIM_REPLICAS)
    """Inference engine replicas [count]."""
    env_workers: int | None = Field(default=None, ge=1, le=MAX_SEQUENCES)
    """Environment workers executing tool calls; ``None`` = one per call (no queueing)."""
    trainer_gpus: int | None = Field(default=None, ge=1, le=MAX_GPUS)
    """Trainer GPUs; ``None`` = the sane data-parallel minimum
    (:func:`capplan.trainer.sane_trainer_gpus`), or enough for ``training.step_time_target_s``;
    colocated: every inference GPU."""
    mode: Literal["colocated", "sync", "async"] = "sync"
    """``colocated``: generation, then training on the same GPUs, then the weight reshard, in
    series. ``sync``: split GPUs; generation pauses while the trainer updates and pushes
    weights. ``async``: generation continues; trajectories more than ``max_staleness`` versions
    old are rejected."""
    max_staleness: int = Field(default=1, ge=0, le=1_000_000)
    """Async freshness bound K [policy versions]."""
    sampling: Literal["active", "oversample"] = "active"
    """``active``: the batch is filled continuously from finished groups, filtered groups are
    replaced. ``oversample``: each update dispatches ``oversample x prompts_per_step`` groups and
    trains on the unfiltered ones (at most ``prompts_per_step``)."""
    oversample: float | None = Field(default=None, ge=1, le=1000)
    """Groups dispatched per update / prompts per step with ``sampling='oversample'``; default
    ``1 / (1 - filtered_group_fraction)``."""
    static_batching: bool = False
    """Admit a new batch only when the previous one has finished (for comparison)."""
    inflight_updates: bool | None = None
    """Async: replicas load new weights at their next step boundary, keeping running sequences
    and their KV, instead of draining their running invocations first (default: on in async)."""
    weight_sync: Literal["auto", "nccl", "checkpoint-engine", "nixl", "reshard"] = "auto"
    """Weight-sync pattern (:data:`capplan.trainer.WEIGHT_SYNC_FITS`); ``auto``: ``reshard`` when
    colocated, else ``nccl``."""
    trainer_mfu: float | None = Field(default=None, gt=0, le=1)
    """Trainer MFU [fraction]; default the fitted function (:func:`capplan.trainer.trainer_mfu`)."""
    rollout_slowdown: float | None = Field(default=None, ge=1, le=100)
    """Engine step time in the RL framework over the engine profile's [ratio]; default the fit
    on published RL steps (:data:`capplan.trainer.RL_FRAMEWORK_FIT`)."""
    step_overhead_s: float | None = Field(default=None, ge=0, le=1e6)
    """Framework time per trainer step outside the GPU phases [s]; default the fit on published
    RL steps."""
    steps: int = Field(default=10, ge=1, le=1_000_000)
    """Trainer updates to simulate; the run ends when the last one finishes."""
    seed: int | None = Field(default=None, ge=0, le=2**63 - 1)
    """Seed of every random draw; default ``sampling.seed`` of the workload."""
    kv_dtype: KVDtype = "bf16"
    """KV-cache element type (bf16, fp16, fp8, int8 or int4)."""
    weight_dtype: WeightDtype = "bf16"
    """Weight element type of the inference replicas (bf16, fp16, fp8, int8 or int4)."""
    gpu_mem_util: float | None = Field(default=None, gt=0, le=1)
    """Fraction of each GPU's memory the inference engine may use [fraction]; default the engine
    profile's."""
    max_num_seqs: int | None = Field(default=None, ge=1, le=MAX_SEQUENCES)
    """Scheduler cap on running sequences per replica; default the engine profile's for the GPU class."""
    max_batched_tokens: int | None = Field(default=None, ge=1, le=MAX_CONTEXT_TOKENS)
    """Scheduler token budget per step; default the engine profile's for the GPU class."""
    max_inflight_groups: int | None = Field(default=None, ge=1, le=MAX_SEQUENCES)
    """Async: keep at most this many prompt groups generating, whatever their age; default
    AReaL's staleness gate, ``dispatched - rejected <= (K + version + 1) x prompts_per_step``
    groups, which ties production to the bound."""
    chunk_conversations: int = Field(default=8192, ge=1, le=10_000_000)
    """Conversations drawn at a time (the draw of chunk ``c`` depends only on the seed and ``c``)."""
    engine: EngineProfile | None = None
    """Engine profile of the inference replicas (memory and step-time terms); ``None``: the
    default engine profile."""
    speculative: SpecInputs | None = None
    """Decode speculatively (:class:`capplan.speculative.SpecInputs`): a decode step is priced per
    output token, (verify step + drafts) / tokens per verify step, and the drafter's weights and
    KV share the KV budget, as ``capplan plan`` prices it (:mod:`capplan.sim.speculative`);
    ``None``: plain decoding."""
    acceptance_by_step: tuple[tuple[float, float], ...] | None = None
    """``(trainer step, per-token acceptance)`` points of a workload's
    ``speculative.acceptance_by_step``: each replica decodes at the acceptance of the trainer
    step its weights belong to (interpolated, flat beyond the ends); ``None``: the acceptance
    of ``speculative``."""
    kv_offload_gib: float | None = Field(default=None, gt=0, le=1_000_000)
    """Host memory per GPU given to a CPU KV tier [GiB]: evicted retained prefixes and preempted
    contexts are kept there and loaded back over the host link instead of recomputed, when
    loading is faster
    (:mod:`capplan.sim.speculative`); ``None``: no tier."""

    @model_validator(mode="after")
    def _together(self) -> "SimConfig":
        if self.acceptance_by_step is not None and self.speculative is None:
            raise ValueError("an acceptance schedule needs speculative decoding (--spec-method or a speculative: block)")
        if self.inflight_updates and self.mode != "async":
            raise ValueError("--inflight-updates needs --mode async (a synchronous update has nothing in flight)")
        if self.mode == "colocated" and self.trainer_gpus is not None:
            raise ValueError("--trainer-gpus: colocated training uses every inference GPU (give --inference-replicas)")
        if self.max_inflight_groups is not None and (self.mode != "async" or self.sampling != "active"):
            raise ValueError("--max-inflight-groups needs --mode async and --sampling active")
        if self.oversample is not None and self.sampling != "oversample":
            raise ValueError("--oversample needs --sampling oversample (active sampling refills each batch as groups finish)")
        if self.mode == "colocated" and self.weight_sync not in ("auto", "reshard"):
            raise ValueError(f"--weight-sync {self.weight_sync} pushes weights from trainer GPUs to separate inference GPUs, and "
                             "--mode colocated reshards them on the same GPUs: give --weight-sync reshard (or auto), or a split --mode")
        if self.weight_sync == "reshard" and self.mode != "colocated":
            raise ValueError("--weight-sync reshard is the colocated update (the same GPUs reshard in place); split GPUs push "
                             "weights with nccl, checkpoint-engine or nixl")
        return self

    def validate(self, workload: "Workload") -> None:
        """Check the options against the workload (the values themselves were checked on construction).

        Raises
        ------
        InputError
            A workload without a rollout engine or a trainer.
        """
        if not workload.has_rollout or not workload.has_trainer:
            raise InputError(
                f"workload {workload.name}: method {workload.method} has "
                f"{'no rollout engine' if not workload.has_rollout else 'no trainer'}; simulate needs both "
                "(distillation, outcome-rl or multi-turn-rl)"
            )


def check_instances(replicas: int, tp: int, dp: int) -> None:
    """Refuse replicas (data-parallel ranks) that are not whole instances of ``dp`` ranks.

    Raises
    ------
    ValueError
        ``replicas`` is not a multiple of ``dp`` (the message names --inference-replicas).
    """
    if dp > 1 and replicas % dp:
        raise ValueError(f"--inference-replicas {replicas}: not a multiple of an instance's {dp} data-parallel ranks "
                         f"(an instance is --tp x --dp = {tp} x {dp} = {tp * dp} GPUs, each rank one replica)")


@dataclass(frozen=True)
class RunOptions:
    """The options the event loop runs with, defaults resolved against the workload."""

    replicas: int
    """Inference engine replicas [count]."""
    env_workers: int | None
    """Environment workers; ``None`` = one per call."""
    mode: str
    """``colocated``, ``sync`` or ``async``."""
    max_staleness: int
    """Freshness bound K in force [policy versions]: ``SimConfig.max_staleness`` in async mode, 0 in sync."""
    sampling: str
    """``active`` or ``oversample``."""
    oversample: float
    """Groups dispatched per update / prompts per step (oversample sampling)."""
    groups_per_round: int
    """Prompt groups dispatched per update: ``ceil(oversample x prompts_per_step)`` when
    oversampling, else ``prompts_per_step``."""
    static_batching: bool
    """Admit a new batch only when the previous one has finished."""
    inflight_updates: bool
    """Async: load new weights at the next step boundary instead of draining."""
    steps: int
    """Trainer updates to simulate."""
    seed: int
    """Seed of every random draw."""
    max_inflight_groups: int | None
    """Async: cap on prompt groups generating; ``None`` = the staleness gate."""
    chunk_conversations: int
    """Conversations drawn at a time."""


def run_options(config: SimConfig, workload: "Workload") -> RunOptions:
    """Resolve ``config``'s defaults (seed, oversampling factor, staleness in force) against ``workload``."""
    seed = workload.sampling.seed if config.seed is None else config.seed
    filtered = workload.training.filtered_group_fraction
    oversample = config.oversample if config.oversample is not None else 1.0 / (1.0 - filtered)
    prompts = workload.volume.prompts_per_step
    groups_per_round = max(1, math.ceil(oversample * prompts - 1e-9)) if config.sampling == "oversample" else prompts
    return RunOptions(
        replicas=config.inference_replicas,
        env_workers=config.env_workers,
        mode=config.mode,
        max_staleness=config.max_staleness if config.mode == "async" else 0,
        sampling=config.sampling,
        oversample=oversample,
        groups_per_round=groups_per_round,
        static_batching=config.static_batching,
        inflight_updates=config.mode == "async" and config.inflight_updates is not False,
        steps=config.steps,
        seed=seed,
        max_inflight_groups=config.max_inflight_groups,
        chunk_conversations=config.chunk_conversations,
    )
