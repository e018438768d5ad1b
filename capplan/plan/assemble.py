"""The capacity plan of one workload: :func:`plan_workload` as a short list of named steps, and its result :class:`Plan`."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from capplan.plan.explain import plan_assumptions, plan_explanation
from capplan.plan.figures import rollout_efficiency, static_batching, step_figures
from capplan.plan.replica import replica_setup
from capplan.plan.serving import operating_times, size_serving
from capplan.plan.sizing import StepModel, size_split, trainer_side
from capplan.plan.work import filter_factor, prepare

if TYPE_CHECKING:
    from capplan.plan.inputs import PlanInputs
    from capplan.workload import Workload

TRAINER_SHARDING = "FSDP/ZeRO-3 (weights, gradients, optimizer state sharded over all trainer GPUs)"
"""How the trainer state is sharded (the plan's ``trainer_sharding``)."""


@dataclass
class Plan:
    """A capacity plan for one workload (JSON contract: :meth:`as_dict`)."""

    workload: str
    method: str
    model: str
    hardware: str
    trainer_hardware: str
    tp: int
    kv_dtype: str
    weight_dtype: str
    mode: str
    max_staleness: int
    kv: dict[str, Any]
    concurrency: dict[str, Any]
    ledger_per_step: dict[str, dict[str, float]]
    filter_factor: float
    conversations_per_step: float
    decode_batch: float
    binding_constraint: str
    prefill_gpu_s: float
    prefill_gpu_s_by_class: dict[str, float]
    decode_gpu_s: float
    score_gpu_s: float
    rollout_tokens_per_s_per_gpu: float
    mbu: float
    mfu: float
    rollout_time_s: float
    rollout_time_work_s: float
    rollout_time_tail_s: float
    static_batching_waste: float
    static_rollout_time_s: float
    trainer_flops: float
    trainer_time_s: float
    trainer_gpus: int
    trainer_gpus_min_memory: int
    trainer_sharding: str
    weight_sync_time_s: float
    inference_gpus: int
    inference_replicas: int
    step_time_s: float
    trained_tokens_per_s: float
    node_ratio: float
    trainer_idle_fraction: float
    inference_idle_fraction: float
    stale_fraction: float
    sizing: str
    serving: dict[str, Any] | None = None
    assumptions: list[str] = field(default_factory=list)
    explain: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """The JSON contract (units in the README): every field, ``explain`` excluded."""
        return {k: v for k, v in self.__dict__.items() if k != "explain"}


def plan_workload(workload: "Workload", inputs: "PlanInputs", conversations: int | None = None) -> Plan:
    """Plan ``workload`` on ``inputs`` (see :mod:`capplan.plan` for what is answered).

    The steps: sample the workload once (:func:`~capplan.plan.work.prepare`); price one replica
    (:func:`~capplan.plan.replica.replica_setup`); the trainer side
    (:func:`~capplan.plan.sizing.trainer_side`); serving replicas
    (:func:`~capplan.plan.serving.size_serving`); size the split
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
    prepared = prepare(workload, inputs.model, conversations)
    work = prepared.work
    setup = replica_setup(
        workload, prepared, inputs.model, inputs.hardware, inputs.tp, inputs.kv_dtype, inputs.weight_dtype,
        inputs.gpu_mem_util, inputs.teacher,
    )
    trainer = trainer_side(workload, inputs, prepared.trainer_flops)
    serving = size_serving(workload, setup, work, prepared.sample) if workload.method == "serving" else None

    rollout = setup.rollout_model(work)
    if serving is not None:  # serving caps the batch
        rollout = replace(rollout, max_decode_batch=max(1.0, serving.batch_per_replica), binding=serving.binding_constraint)
    model = StepModel(rollout, trainer, inputs.tp, inputs.mode, workload.has_rollout)
    split = size_split(inputs, model, work, workload.training.step_time_target_s, serving.replicas if serving else None)
    times = model.evaluate(split.inference_gpus, split.trainer_gpus)
    if serving is not None:
        times = operating_times(times, serving, setup, work)

    static = static_batching(work, times, setup)
    efficiency = rollout_efficiency(work, times, setup, inputs)
    figures = step_figures(work, times, split, trainer, setup, inputs, workload.has_rollout)
    explain = plan_explanation(workload, inputs, prepared, setup, trainer, serving, times, split, static, figures)

    # a served request's latency at the percentile, not a synchronous step
    rollout_s, work_s, tail_s = (serving.latency_s, 0.0, serving.latency_s) if serving else (
        times.rollout_time_s, times.work_time_s, times.tail_time_s
    )
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
        trainer_gpus=split.trainer_gpus or 0,
        trainer_gpus_min_memory=trainer.min_gpus,
        trainer_sharding=TRAINER_SHARDING if trainer.has_trainer else "none",
        weight_sync_time_s=trainer.weight_sync_s,
        inference_gpus=split.inference_gpus or 0,
        inference_replicas=(split.inference_gpus or 0) // tp,
        step_time_s=1.0 if serving else times.step_time_s,
        trained_tokens_per_s=figures.trained_tokens_per_s,
        node_ratio=figures.node_ratio,
        trainer_idle_fraction=max(0.0, figures.trainer_idle_fraction),
        inference_idle_fraction=max(0.0, 1 - figures.inference_busy_fraction) if workload.has_rollout and trainer.has_trainer else 0.0,
        stale_fraction=figures.stale_fraction,
        sizing=split.sizing,
        serving=serving.as_dict() if serving else None,
        assumptions=plan_assumptions(trainer),
        explain=explain,
    )
