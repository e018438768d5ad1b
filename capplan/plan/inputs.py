"""What a plan needs: :class:`PlanInputs` (validated), and the loaders of its policy and teacher."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from capplan.engine import EngineProfile
from capplan.errors import InputError
from capplan.hardware import HardwareProfile
from capplan.modelspec import ModelSpec
from capplan.options import Options
from capplan.speculative import SpecInputs
from capplan.units import MAX_GPUS, KVDtype, KVScale, WeightDtype

if TYPE_CHECKING:
    from capplan.workload import Speculative, Workload

Mode = Literal["auto", "colocated", "sync", "async"]
MODES: tuple[str, ...] = ("colocated", "sync", "async")
"""The step modes: ``colocated`` (generation, log-prob recompute, training and the weight reshard
in series on the same GPUs), ``sync`` (split GPUs, in series) and ``async`` (split GPUs,
overlapped, at most ``max_staleness`` policy versions apart)."""
WeightSync = Literal["auto", "nccl", "checkpoint-engine", "nixl", "reshard"]
MEMORY_LAYOUT_KEYS = frozenset({"ep", "dp", "expert_dtype", "redundant_experts", "kv_scale"})
"""Feature options that change the KV budget (:class:`capplan.kv.KVInputs` takes them); the
others change step prices only."""


def check_mode(mode: str, allow_auto: bool = False) -> None:
    """Refuse a step mode other than :data:`MODES`, naming ``--mode`` and the allowed values.

    Raises
    ------
    InputError
        ``--mode X: allowed colocated, sync, async``.
    """
    allowed = (("auto",) if allow_auto else ()) + MODES
    if mode not in allowed:
        raise InputError(f"--mode {mode}: allowed {', '.join(allowed)}")


class PlanInputs(Options, BaseModel):
    """What a plan needs besides the workload; ``None`` fields are sized or defaulted.

    Raises
    ------
    InputError
        On construction, for a value out of range; the one-line message names the flag
        (``--tp 0: must be >= 1``). Whether GPU counts suit ``tp`` and the trainer is checked
        when the split is sized (:func:`capplan.plan.sizing.check_given_counts`).

    Examples
    --------
    >>> from capplan.hardware import load_hardware
    >>> from capplan.modelspec import load_model_spec
    >>> h100, llama = load_hardware("h100-sxm"), load_model_spec("llama-3.1-8b")
    >>> PlanInputs(hardware=h100, model=llama, tp=2, trainer_gpus=8).mode
    'auto'
    >>> PlanInputs(hardware=h100, model=llama, tp=0)
    Traceback (most recent call last):
    capplan.errors.InputError: --tp 0: must be in [1, 1,000,000]
    >>> PlanInputs(hardware=h100, model=llama, trainer_gpus=0)
    Traceback (most recent call last):
    capplan.errors.InputError: --trainer-gpus 0: must be in [1, 1,000,000]
    >>> PlanInputs(hardware=h100, model=llama, mode="overlap")
    Traceback (most recent call last):
    capplan.errors.InputError: --mode overlap: unknown value (allowed: auto, colocated, sync, async)
    >>> PlanInputs(hardware=h100, model=llama, mode="colocated")
    Traceback (most recent call last):
    capplan.errors.InputError: --mode colocated: needs --total-gpus (generation and training share those GPUs)
    >>> PlanInputs(hardware=h100, model=llama, mode="async", max_staleness=-1)
    Traceback (most recent call last):
    capplan.errors.InputError: --max-staleness -1: must be in [0, 1,000,000]
    >>> PlanInputs(hardware=h100, model=llama, gpu_mem_util=1.2)
    Traceback (most recent call last):
    capplan.errors.InputError: --gpu-mem-util 1.2: must be in (0, 1]
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, arbitrary_types_allowed=True)
    FLAGS: ClassVar[dict[str, str]] = {
        "gpu_mem_util": "--gpu-mem-util", "trainer_mfu": "--trainer-mfu", "ep": "--ep", "dp": "--dp", "expert_dtype": "--expert-dtype",
        "redundant_experts": "--redundant-experts", "kv_scale": "--kv-scale", "alltoall_mode": "--alltoall-mode",
        "gemm_dtype": "--gemm-dtype", "kv_offload_gib": "--kv-offload-gib", "prefill_decode_ratios": "--prefill-decode-ratio",
        "acceptance_step": "--acceptance-step",
    }

    hardware: HardwareProfile
    """Inference hardware profile."""
    model: ModelSpec
    """The policy model."""
    trainer_hardware: HardwareProfile | None = None
    """Trainer hardware profile (default: ``hardware``)."""
    teacher: ModelSpec | None = None
    """Teacher model for teacher scoring (default: the policy)."""
    tp: int = Field(default=1, ge=1, le=MAX_GPUS)
    """Tensor-parallel degree of an inference replica [GPUs]."""
    kv_dtype: KVDtype = "bf16"
    """KV-cache dtype."""
    weight_dtype: WeightDtype = "bf16"
    """Inference weight dtype."""
    trainer_gpus: int | None = Field(default=None, ge=1, le=MAX_GPUS)
    """Trainer GPUs [GPUs]; ``None``: sized."""
    inference_gpus: int | None = Field(default=None, ge=1, le=MAX_GPUS)
    """Inference GPUs [GPUs]; ``None``: sized."""
    total_gpus: int | None = Field(default=None, ge=1, le=MAX_GPUS)
    """Fixed total [GPUs]: choose the split (and, with ``--mode auto``, the mode) that maximises
    trained tokens/s; colocated runs on all of them."""
    mode: Mode = "auto"
    """``colocated`` (generation and training time-share the GPUs, in series), ``sync`` (split
    GPUs, in series), ``async`` (split GPUs, overlapped, staleness bounded by ``max_staleness``)
    or ``auto``: with ``--total-gpus`` the mode that maximises trained tokens/s, else ``sync``."""
    max_staleness: int = Field(default=1, ge=0, le=1_000_000)
    """Async: the most policy versions a trajectory may lag the trainer (K); up to K + 1 steps of
    rollouts are in flight. K = 0 is synchronous training (plan it with ``--mode sync``); the
    async-only flags are refused in sync and colocated modes."""
    async_ingest: Literal["groups", "batches"] = "groups"
    """Async: the trainer takes finished prompt ``groups`` in completion order and rejects those
    more than ``max_staleness`` versions old (AReaL's gate, OLMo 3, PipelineRL), or each step's
    dispatched ``batches`` whole, in order (a K-step-off pipeline: NeMo RL's async GRPO, verl's
    one-step-off, slime's train_async)."""
    inflight_updates: bool = True
    """Async: replicas load new weights at their next step boundary, keeping running sequences
    and their KV (off: they drain running invocations first)."""
    weight_sync: WeightSync = "auto"
    """How new weights reach the engines: ``nccl`` (split GPUs, NCCL reshard: each GPU its shard),
    ``checkpoint-engine`` (MoonshotAI's bucketed broadcast: each GPU receives the whole model),
    ``nixl`` (NeMo RL's NIXL refit: dense weights whole, each GPU's slice of the experts),
    ``reshard`` (colocated, same GPUs) or ``auto`` (``reshard`` when colocated, else ``nccl``)."""
    gpu_mem_util: float | None = Field(default=None, gt=0, le=1)
    """Fraction of each inference GPU's memory the engine may use [fraction 0-1]; ``None``: the
    engine profile's default."""
    trainer_mfu: float | None = Field(default=None, gt=0, le=1)
    """Trainer model-FLOPs utilisation [fraction 0-1]; ``None``: the fitted function of the model
    and the trainer GPU (:func:`capplan.trainer.trainer_mfu`)."""
    engine: EngineProfile | None = None
    """Engine profile of the inference replicas (memory and step-time terms); ``None``: the
    default engine profile."""
    rollout_slowdown: float | None = Field(default=None, ge=1, le=100)
    """RL workloads: engine steps in the RL framework take this many times a serving benchmark's
    [ratio]; ``None``: the fit on published RL steps (:data:`capplan.trainer.RL_FRAMEWORK_FIT`),
    1 for the engine profile as is."""
    step_overhead_s: float | None = Field(default=None, ge=0, le=1e6)
    """RL workloads: wall time per trainer step outside the GPU phases (the driver's per-step
    work; colocated, also handing the GPUs between engines and trainer) [s]; ``None``: the fit on
    published RL steps."""
    ep: int = Field(default=1, ge=1, le=MAX_GPUS)
    """Expert-parallel degree of an instance [GPUs]: 1, or ``tp x dp`` (every GPU of the instance
    holds whole experts; :class:`capplan.kv.KVInputs`). MoE models only."""
    dp: int | None = Field(default=None, ge=1, le=MAX_GPUS)
    """Data-parallel ranks of an instance [count]: each rank of ``tp`` GPUs runs its own sequences
    and KV cache (a plan's replica is one rank), so an instance is ``tp x dp`` GPUs and GPU counts
    come in whole instances. Default ``ep / tp`` when ``ep`` exceeds ``tp``, else 1."""
    expert_dtype: WeightDtype | None = None
    """Dtype of the routed experts' weights; ``None``: ``weight_dtype``."""
    redundant_experts: int = Field(default=0, ge=0, le=MAX_GPUS)
    """Extra expert replicas of an expert load balancer [count]; needs ``ep > 1``."""
    kv_scale: KVScale = "tensor"
    """Granularity of the KV quantisation scales (``tensor`` or ``token_head``)."""
    two_batch_overlap: bool = False
    """Each engine step runs as two micro-batches, one's all-to-all hidden behind the other's compute."""
    alltoall_mode: Literal["auto", "low_latency", "normal"] = "auto"
    """Expert-parallel all-to-all kernels (:class:`capplan.roofline.RooflineInputs`)."""
    gemm_dtype: WeightDtype | None = None
    """Tensor unit the weight GEMMs run on; ``None``: ``weight_dtype``'s (``bf16`` prices weight-only
    FP4/INT4 kernels on a chip without that unit)."""
    speculative: SpecInputs | None = None
    """Speculative decoding of the inference engine; ``None``: plain decoding."""
    speculative_source: str = ""
    """Where the speculative setting's acceptance comes from, as the plan states it (a flag, the
    workload's ``speculative`` block, its ``acceptance_by_step`` at a trainer step)."""
    acceptance_step: int | None = Field(default=None, ge=0, le=100_000_000)
    """RL workloads: the trainer step whose acceptance rate the workload's
    ``speculative.acceptance_by_step`` gave ``speculative`` (stated in the plan); ``None``: a
    constant or given acceptance."""
    disaggregated: bool = False
    """Serving: also size separate prefill and decode pools (:func:`capplan.disagg.size_pools`)
    beside the aggregated fleet. RL: report the prefill instances per decode instance that keep
    decoders fed (:func:`capplan.disagg.rollout_pool_ratio`); the step is still planned on
    aggregated replicas."""
    prefill_decode_ratios: tuple[float, ...] = ()
    """Serving with ``disaggregated``: prefill-to-decode GPU ratios at which to also size both
    pools (the smallest pools of that ratio meeting the targets by the mean)."""
    kv_offload_gib: float | None = Field(default=None, gt=0, le=1_000_000)
    """Host memory per GPU given to a CPU KV tier [GiB]: KV that does not fit on the GPU (retained
    prefixes during tool waits, preempted sequences) is loaded back from it instead of recomputed
    when that is faster; ``None``: no CPU tier."""

    @model_validator(mode="after")
    def _features(self) -> "PlanInputs":
        from capplan.kv import check_expert_dtype, check_expert_parallelism, check_kv_scale, resolve_dp
        from capplan.roofline import check_step_settings

        check_expert_parallelism(self.model, self.tp, resolve_dp(self.tp, self.ep, self.dp), self.ep, self.redundant_experts)
        check_expert_dtype(self.model, self.expert_dtype)
        check_kv_scale(self.kv_dtype, self.kv_scale)
        check_step_settings(self.ep, self.weight_dtype, self.gemm_dtype, self.two_batch_overlap, self.alltoall_mode)
        if any(not (r > 0 and r <= 1000) for r in self.prefill_decode_ratios):
            bad = next(r for r in self.prefill_decode_ratios if not (r > 0 and r <= 1000))
            raise InputError(f"--prefill-decode-ratio {bad:g}: a ratio of prefill to decode GPUs must be in (0, 1,000]")
        if self.prefill_decode_ratios and not self.disaggregated:
            raise InputError("--prefill-decode-ratio sizes disaggregated pools: give --disaggregated too")
        return self

    @property
    def data_parallel(self) -> int:
        """Data-parallel ranks of an instance (``dp`` resolved) [count]."""
        from capplan.kv import resolve_dp

        return resolve_dp(self.tp, self.ep, self.dp)

    @property
    def instance_gpus(self) -> int:
        """GPUs of one instance, ``tp x dp`` [GPUs]: GPU counts come in multiples of it."""
        return self.tp * self.data_parallel

    def layout(self, memory_only: bool = False) -> dict[str, Any]:
        """The feature options that differ from their defaults, as keyword arguments of
        :class:`capplan.roofline.RooflineInputs` (``memory_only``: of :class:`capplan.kv.KVInputs`),
        so a plain plan builds exactly the option objects it always did."""
        out: dict[str, Any] = {}
        for key, plain in (("ep", 1), ("dp", None), ("expert_dtype", None), ("redundant_experts", 0), ("kv_scale", "tensor"),
                           ("two_batch_overlap", False), ("alltoall_mode", "auto"), ("gemm_dtype", None)):
            value = getattr(self, key)
            if value != plain and (not memory_only or key in MEMORY_LAYOUT_KEYS):
                out[key] = value
        return out


    @model_validator(mode="after")
    def _colocated(self) -> "PlanInputs":
        if self.mode == "colocated":
            if self.total_gpus is None:
                raise InputError("--mode colocated: needs --total-gpus (generation and training share those GPUs)")
            if self.inference_gpus is not None or self.trainer_gpus is not None:
                raise InputError("--mode colocated: give --total-gpus only (both sides use all of them)")
        if self.mode == "colocated" and self.weight_sync not in ("auto", "reshard"):
            raise InputError(f"--weight-sync {self.weight_sync} pushes weights from trainer GPUs to separate inference GPUs, and "
                             "--mode colocated reshards them on the same GPUs: give --weight-sync reshard (or auto), or a split --mode")
        if self.weight_sync == "reshard" and self.mode != "colocated":
            raise InputError(f"--weight-sync reshard is the colocated update (the same GPUs reshard in place), and --mode is "
                             f"{self.mode}: give --mode colocated, or nccl / checkpoint-engine / nixl for split GPUs")
        return self

    def framework(self, workload: "Workload", mode: str = "sync") -> tuple[float, float]:
        """``(rollout_slowdown, step_overhead_s)`` in force in ``mode``: given, else the RL fit
        for a workload with both a rollout engine and a trainer, else ``(1, 0)``."""
        from capplan.trainer import RL_FRAMEWORK_FIT

        rl = workload.has_rollout and workload.has_trainer
        slowdown = self.rollout_slowdown if self.rollout_slowdown is not None else (RL_FRAMEWORK_FIT.slowdown_on(self.hardware.name) if rl else 1.0)
        fitted = RL_FRAMEWORK_FIT.step_overhead_s if rl else 0.0
        overhead = self.step_overhead_s if self.step_overhead_s is not None else fitted
        return slowdown, overhead

    @property
    def sync_pattern(self) -> str:
        """The weight-sync pattern in force for ``mode`` (``auto``: reshard when colocated)."""
        if self.weight_sync != "auto":
            return self.weight_sync
        return "reshard" if self.mode == "colocated" else "nccl"


def load_policy(workload_ref: str, model_ref: str | None = None, draft_model_given: bool = False) -> "tuple[Workload, ModelSpec]":
    """Load a workload (bundled name or file) and its policy model: ``model_ref``, else the workload's.

    Raises
    ------
    InputError
        The workload names no model and ``model_ref`` is ``None``; or either file is invalid.
    NotFoundError
        An unknown workload or model name.
    """
    from capplan.modelspec import load_model_spec
    from capplan.workload import load_workload

    workload = load_workload(workload_ref, model_given=model_ref is not None, draft_model_given=draft_model_given)
    ref = model_ref or workload.model
    if ref is None:
        raise InputError(f"{workload_ref}: the workload names no model; add 'model:' to it or pass --model")
    return workload, load_model_spec(ref)


def load_teacher(workload: "Workload") -> "ModelSpec | None":
    """The workload's ``training.teacher_model`` (``None``: teacher scoring uses the policy)."""
    from capplan.modelspec import load_model_spec

    return load_model_spec(workload.training.teacher_model) if workload.training.teacher_model else None


def speculative_setting(
    block: "Speculative | None", method: str | None = None, tokens: int | None = None, acceptance_rate: float | None = None,
    acceptance_length: float | None = None, draft_model: str | None = None, step: int | None = None,
) -> tuple[SpecInputs | None, str]:
    """The speculative-decoding setting of a plan and where its acceptance comes from.

    Each value given (a ``--spec-*`` flag) wins over the workload's ``speculative:`` block; the
    block supplies the rest. ``method`` ``none`` turns the block off. An acceptance schedule
    (``acceptance_by_step``) is read at trainer step ``step`` (default 0, the start of the run).

    Returns
    -------
    (setting, source)
        ``None`` and ``""`` for plain decoding.

    Raises
    ------
    InputError
        A ``--spec-*`` value without a method (no flag, no block); ``--acceptance-step`` without an
        acceptance schedule in force; an invalid setting (:class:`capplan.speculative.SpecInputs`).

    Examples
    --------
    >>> from capplan.workload import Speculative
    >>> b = Speculative(method="eagle3", num_speculative_tokens=3, acceptance_by_step=[
    ...     {"step": 0, "acceptance_rate": 0.8}, {"step": 200, "acceptance_rate": 0.6}])
    >>> s, source = speculative_setting(b, step=100)
    >>> round(s.acceptance_rate, 3), source
    (0.7, "the workload's speculative.acceptance_by_step at trainer step 100")
    >>> speculative_setting(b, acceptance_rate=0.5)[1]
    '--acceptance-rate'
    """
    given = {"--spec-tokens": tokens, "--acceptance-rate": acceptance_rate, "--acceptance-length": acceptance_length,
             "--draft-model": draft_model}
    if method == "none":
        extra = [k for k, v in given.items() if v is not None]
        if extra:
            raise InputError(f"{extra[0]} with --spec-method none: speculative decoding is off; drop one")
        if step is not None:
            raise InputError("--acceptance-step with --spec-method none: speculative decoding is off; drop one")
        return None, ""
    if method is None and block is None:
        extra = [k for k, v in given.items() if v is not None]
        if extra:
            raise InputError(f"{extra[0]} needs --spec-method (or a speculative: block in the workload)")
        if step is not None:
            raise InputError("--acceptance-step reads the workload's speculative.acceptance_by_step; the workload has no speculative: block")
        return None, ""
    same = block is not None and (method is None or method == block.method)
    chosen_method = method or (block.method if block else None)
    k = tokens if tokens is not None else (block.num_speculative_tokens if block is not None else None)
    if k is None:
        raise InputError(f"--spec-method {chosen_method} needs --spec-tokens (tokens drafted per verify step, >= 1)")
    draft = draft_model if draft_model is not None else (block.draft_model if same and block is not None else None)
    rate, length, source = acceptance_rate, acceptance_length, ""
    if rate is not None or length is not None:
        source = "--acceptance-rate" if rate is not None else "--acceptance-length"
        if step is not None:
            raise InputError(f"--acceptance-step reads the workload's acceptance schedule, but {source} gives the acceptance; drop one")
    elif block is not None and block.acceptance_rate is not None:
        rate, source = block.acceptance_rate, "the workload's speculative.acceptance_rate"
    elif block is not None and block.acceptance_by_step is not None:
        at = 0 if step is None else step
        rate = block.acceptance_at(at)
        source = f"the workload's speculative.acceptance_by_step at trainer step {at}"
    elif step is not None:
        raise InputError("--acceptance-step reads the workload's speculative.acceptance_by_step, which it does not have")
    return SpecInputs(method=chosen_method, num_speculative_tokens=k, acceptance_rate=rate,  # type: ignore[arg-type]
                      acceptance_length=length, draft_model=draft), source
