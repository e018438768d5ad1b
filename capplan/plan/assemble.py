"""The plan of one workload: :func:`plan_workload` as a list of named steps, and :class:`Plan`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from capplan.plan.explain import plan_assumptions, plan_explanation
from capplan.plan.figures import rollout_efficiency, static_batching, step_figures
from capplan.plan.replica import replica_setup
from capplan.plan.sizing import StepModel, size_split, trainer_side
from capplan.plan.work import filter_factor, prepare

if TYPE_CHECKING:
    from capplan.plan.inputs import PlanInputs
    from capplan.plan.serving import ServingPlan
    from capplan.workload import Workload

TRAINER_SHARDING = "FSDP/ZeRO-3 (weights, gradients, optimizer state sharded over all trainer GPUs)"
"""How the trainer state is sharded (the plan's ``trainer_sharding``)."""


@dataclass
class Plan:
    """A capacity plan for one workload (JSON contract: :meth:`as_dict`)."""

    workload: str
    """Workload name."""
    method: str
    """Workload method (``outcome-rl``, ``serving``, ...)."""
    model: str
    """Policy model name."""
    hardware: str
    """Inference hardware profile name."""
    trainer_hardware: str
    """Trainer hardware profile name."""
    tp: int
    """Tensor-parallel degree of an inference replica [GPUs]."""
    kv_dtype: str
    """KV-cache dtype."""
    weight_dtype: str
    """Inference weight dtype."""
    mode: str
    """``sync`` or ``async``."""
    max_staleness: int
    """Async: policy versions a trajectory may lag [versions]."""
    kv: dict[str, Any]
    """The KV calculator's object for one replica (:meth:`capplan.kv.KVResult.as_dict`)."""
    concurrency: dict[str, Any]
    """The workload concurrency object (empty without a rollout engine)."""
    ledger_per_step: dict[str, dict[str, float]]
    """The ledger's per-step counters [positions]."""
    filter_factor: float
    """``1 / (1 - filtered_group_fraction)``."""
    conversations_per_step: float
    """Conversations generated per trained step, filtering included [conversations]."""
    decode_batch: float
    """Decode batch per replica [sequences]."""
    binding_constraint: str
    """What binds the decode batch (``memory``, ``max_num_seqs``, ``arrival of work``, ...)."""
    prefill_gpu_s: float
    """Prefill per trained step [GPU-s]."""
    prefill_gpu_s_by_class: dict[str, float]
    """Prefill split by token class (prompt, action, tool) [GPU-s]."""
    decode_gpu_s: float
    """Decode per trained step [GPU-s]."""
    score_gpu_s: float
    """Teacher scoring per trained step [GPU-s]."""
    rollout_tokens_per_s_per_gpu: float
    """Generated tokens per rollout GPU-second [tokens/GPU-s]."""
    mbu: float
    """Memory-bandwidth utilisation of the rollout work [fraction 0-1]."""
    mfu: float
    """Model-FLOPs utilisation of the rollout work [fraction 0-1]."""
    rollout_time_s: float
    """Rollout wall time of a synchronous step (serving: the percentile latency) [s]."""
    rollout_time_work_s: float
    """Total rollout work at full batch over the replicas [s]."""
    rollout_time_tail_s: float
    """The longest conversation's critical path at the shrinking batch [s]."""
    static_batching_waste: float
    """Slot-steps a static batch would waste [fraction 0-1]."""
    static_rollout_time_s: float
    """Rollout time with static batching [s]."""
    trainer_flops: float
    """Trainer FLOPs per trained step [FLOP]."""
    trainer_time_s: float
    """Trainer step time [s]."""
    trainer_gpus: int
    """Trainer GPUs [GPUs]."""
    trainer_gpus_min_memory: int
    """Fewest trainer GPUs that hold the sharded state [GPUs]."""
    trainer_sharding: str
    """The sharding assumed."""
    weight_sync_time_s: float
    """Weight push to the inference replicas [s]."""
    inference_gpus: int
    """Inference GPUs [GPUs]."""
    inference_replicas: int
    """Inference replicas of ``tp`` GPUs [replicas]."""
    step_time_s: float
    """Wall time of one trained step (serving: 1 s of traffic) [s]."""
    trained_tokens_per_s: float
    """Positions with loss per second [tokens/s]."""
    node_ratio: float
    """Inference nodes per trainer node [ratio]."""
    trainer_idle_fraction: float
    """Trainer idle time over the step [fraction 0-1]."""
    inference_idle_fraction: float
    """Inference idle time over the step [fraction 0-1]."""
    stale_fraction: float
    """Async: trajectories older than ``max_staleness`` at consumption [fraction 0-1]."""
    sizing: str
    """How the split was chosen, in words."""
    serving: dict[str, Any] | None = None
    """Always ``None``: a serving workload's plan is a :class:`~capplan.plan.serving.ServingPlan`."""
    engine_profile: str = ""
    """The engine profile that priced the inference replicas (memory and step-time terms)."""
    calibration: str = ""
    """Which calibration that profile's terms come from."""
    assumptions: list[str] = field(default_factory=list)
    """The assumptions behind the figures, as text."""
    explain: list[str] = field(default_factory=list)
    """Every formula with its numbers (``--explain``; not in the JSON contract)."""

    def as_dict(self) -> dict[str, Any]:
        """The JSON contract (units in the README): every field, ``explain`` excluded."""
        return {k: v for k, v in self.__dict__.items() if k != "explain"}


def plan_workload(workload: "Workload", inputs: "PlanInputs", conversations: int | None = None) -> "Plan | ServingPlan":
    """Plan ``workload`` on ``inputs`` (see :mod:`capplan.plan` for what is answered).

    A ``serving`` workload gets its fleet plan (:func:`~capplan.plan.serving.plan_serving`). For
    the others, the steps: sample the workload once (:func:`~capplan.plan.work.prepare`); price one replica
    (:func:`~capplan.plan.replica.replica_setup`); the trainer side
    (:func:`~capplan.plan.sizing.trainer_side`); size the split
    (:func:`~capplan.plan.sizing.size_split`) and time it; derive the figures
    (:mod:`capplan.plan.figures`) and the explanation (:mod:`capplan.plan.explain`).

    Parameters
    ----------
    conversations : int, optional
        Monte Carlo sample size [conversations]; default the workload's.

    Raises
    ------
    DoesNotFitError
        The policy (or teacher) does not fit a replica at ``tp``, or the trainer state fits no
        trainer size.
    InputError
        Inconsistent GPU counts (not a multiple of ``tp``; a total too small for both sides).
    """
    if workload.method == "serving":  # a serving fleet has a plan of its own
        from capplan.plan.serving import plan_serving

        return plan_serving(workload, inputs, conversations)
    from capplan.engine import default_engine

    engine = inputs.engine or default_engine()
    prepared = prepare(workload, inputs.model, conversations)
    work = prepared.work
    setup = replica_setup(
        workload, prepared, inputs.model, inputs.hardware, inputs.tp, inputs.kv_dtype, inputs.weight_dtype,
        inputs.gpu_mem_util, inputs.teacher, inputs.engine,
    )
    trainer = trainer_side(workload, inputs, prepared.trainer_flops)

    rollout = setup.rollout_model(work)
    model = StepModel(rollout, trainer, inputs.tp, inputs.mode, workload.has_rollout)
    split = size_split(inputs, model, work, workload.training.step_time_target_s, None)
    times = model.evaluate(split.inference_gpus, split.trainer_gpus)

    static = static_batching(work, times, setup)
    efficiency = rollout_efficiency(work, times, setup, inputs)
    figures = step_figures(work, times, split, trainer, setup, inputs, workload.has_rollout)
    explain = plan_explanation(workload, inputs, prepared, setup, trainer, None, times, split, static, figures)
    rollout_s, work_s, tail_s = times.rollout_time_s, times.work_time_s, times.tail_time_s
    tp = inputs.tp
    return Plan(
        workload=workload.name,
        method=workload.method,
        model=inputs.model.name,
        hardware=inputs.hardware.name,
        trainer_hardware=trainer.hardware.name,
        tp=tp,
        kv_dtype=inputs.kv_dtype,
        weight_dtype=inputs.weight_dtype,
        mode=inputs.mode,
        max_staleness=inputs.max_staleness,
        kv=setup.kv.as_dict(),
        concurrency=setup.concurrency.as_dict() if setup.concurrency else {},
        ledger_per_step=prepared.ledger.per_step,
        filter_factor=filter_factor(workload),
        conversations_per_step=work.conversations,
        decode_batch=times.decode_batch_sequences,
        binding_constraint=times.binding,
        prefill_gpu_s=setup.prefill.replica_s * tp,
        prefill_gpu_s_by_class=efficiency.prefill_gpu_s_by_class,
        decode_gpu_s=times.decode_replica_s * tp,
        score_gpu_s=setup.score.replica_s * tp,
        rollout_tokens_per_s_per_gpu=efficiency.tokens_per_gpu_s,
        mbu=min(efficiency.mbu, 1.0),
        mfu=min(efficiency.mfu, 1.0),
        rollout_time_s=rollout_s,
        rollout_time_work_s=work_s,
        rollout_time_tail_s=tail_s,
        static_batching_waste=static.waste_fraction,
        static_rollout_time_s=static.rollout_time_s,
        trainer_flops=trainer.flops,
        trainer_time_s=times.trainer_time_s,
        trainer_gpus=split.trainer_gpus,
        trainer_gpus_min_memory=trainer.min_gpus,
        trainer_sharding=TRAINER_SHARDING if trainer.has_trainer else "none",
        weight_sync_time_s=trainer.weight_sync_s,
        inference_gpus=split.inference_gpus,
        inference_replicas=split.inference_gpus // tp,
        step_time_s=times.step_time_s,
        trained_tokens_per_s=figures.trained_tokens_per_s,
        node_ratio=figures.node_ratio,
        trainer_idle_fraction=max(0.0, figures.trainer_idle_fraction),
        inference_idle_fraction=max(0.0, 1 - figures.inference_busy_fraction) if workload.has_rollout and trainer.has_trainer else 0.0,
        stale_fraction=figures.stale_fraction,
        sizing=split.sizing,
        serving=None,
        engine_profile=engine.name,
        calibration=engine.calibration,
        assumptions=plan_assumptions(trainer),
        explain=explain,
    )
