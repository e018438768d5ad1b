"""What a plan needs: :class:`PlanInputs` (validated), and the loaders of its policy and teacher."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from capplan.engine import EngineProfile
from capplan.errors import InputError
from capplan.hardware import HardwareProfile
from capplan.modelspec import ModelSpec
from capplan.options import Options
from capplan.units import MAX_GPUS, KVDtype, WeightDtype

if TYPE_CHECKING:
    from capplan.workload import Workload

Mode = Literal["auto", "colocated", "sync", "async"]
MODES: tuple[str, ...] = ("colocated", "sync", "async")
"""The step modes: ``colocated`` (generation, log-prob recompute, training and the weight reshard
in series on the same GPUs), ``sync`` (split GPUs, in series) and ``async`` (split GPUs,
overlapped, at most ``max_staleness`` policy versions apart)."""
WeightSync = Literal["auto", "nccl", "checkpoint-engine", "reshard"]


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
    FLAGS: ClassVar[dict[str, str]] = {"gpu_mem_util": "--gpu-mem-util", "trainer_mfu": "--trainer-mfu"}

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
    rollouts are in flight. K = 0 is synchronous."""
    async_ingest: Literal["groups", "batches"] = "groups"
    """Async: the trainer takes finished prompt ``groups`` in completion order and rejects those
    more than ``max_staleness`` versions old (AReaL's gate, OLMo 3, PipelineRL), or each step's
    dispatched ``batches`` whole, in order (a K-step-off pipeline: NeMo RL's async GRPO, verl's
    one-step-off, slime's train_async)."""
    inflight_updates: bool = True
    """Async: replicas load new weights at their next step boundary, keeping running sequences
    and their KV (off: they drain running invocations first)."""
    weight_sync: WeightSync = "auto"
    """How new weights reach the engines: ``nccl`` (split GPUs, NCCL reshard),
    ``checkpoint-engine`` (bucketed broadcast), ``reshard`` (colocated, same GPUs) or ``auto``
    (``reshard`` when colocated, else ``nccl``)."""
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


    @model_validator(mode="after")
    def _colocated(self) -> "PlanInputs":
        if self.mode == "colocated":
            if self.total_gpus is None:
                raise InputError("--mode colocated: needs --total-gpus (generation and training share those GPUs)")
            if self.inference_gpus is not None or self.trainer_gpus is not None:
                raise InputError("--mode colocated: give --total-gpus only (both sides use all of them)")
        return self

    def framework(self, workload: "Workload", mode: str = "sync") -> tuple[float, float]:
        """``(rollout_slowdown, step_overhead_s)`` in force in ``mode``: given, else the RL fit
        for a workload with both a rollout engine and a trainer, else ``(1, 0)``."""
        from capplan.trainer import RL_FRAMEWORK_FIT

        rl = workload.has_rollout and workload.has_trainer
        slowdown = self.rollout_slowdown if self.rollout_slowdown is not None else (RL_FRAMEWORK_FIT.rollout_slowdown if rl else 1.0)
        fitted = RL_FRAMEWORK_FIT.step_overhead_s if rl else 0.0
        overhead = self.step_overhead_s if self.step_overhead_s is not None else fitted
        return slowdown, overhead

    @property
    def sync_pattern(self) -> str:
        """The weight-sync pattern in force for ``mode`` (``auto``: reshard when colocated)."""
        if self.weight_sync != "auto":
            return self.weight_sync
        return "reshard" if self.mode == "colocated" else "nccl"


def load_policy(workload_ref: str, model_ref: str | None = None) -> "tuple[Workload, ModelSpec]":
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

    workload = load_workload(workload_ref)
    ref = model_ref or workload.model
    if ref is None:
        raise InputError(f"{workload_ref}: the workload names no model; add 'model:' to it or pass --model")
    return workload, load_model_spec(ref)


def load_teacher(workload: "Workload") -> "ModelSpec | None":
    """The workload's ``training.teacher_model`` (``None``: teacher scoring uses the policy)."""
    from capplan.modelspec import load_model_spec

    return load_model_spec(workload.training.teacher_model) if workload.training.teacher_model else None
