"""The split search: the step time of an inference/trainer split, and how a missing count is sized."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from capplan.errors import DoesNotFitError, InputError

if TYPE_CHECKING:
    from capplan.hardware import HardwareProfile
    from capplan.plan.inputs import PlanInputs
    from capplan.plan.rollout import RolloutModel
    from capplan.plan.work import StepWork
    from capplan.workload import Workload

MAX_GPUS = 8192
"""Upper bound of the GPU counts searched when sizing a side [GPUs]."""
DIMINISHING_RETURNS = 0.25
"""When balance is out of reach, inference stops growing once the rollout is within this
fraction of its shortest possible value [fraction]."""


def step_time_s(mode: str, has_rollout: bool, has_trainer: bool, rollout: Any, work: Any, train: Any, sync: float) -> Any:
    """Wall time of one trained step [s] (vectorised).

    ``sync``: rollout, weight sync and training in series, ``rollout + sync + train``;
    ``async``: generation overlaps training, so the slower of producing a step's rollouts at
    full batch and consuming them, ``max(work, train + sync)``. Without a trainer it is the
    rollout; without a rollout engine, the trainer.

    Parameters
    ----------
    rollout, work, train : float or array
        Rollout time, rollout work at full batch and trainer time [s].
    sync : float
        Weight sync time [s].

    Examples
    --------
    >>> step_time_s("sync", True, True, rollout=100.0, work=80.0, train=30.0, sync=1.0)
    131.0
    >>> float(step_time_s("async", True, True, rollout=100.0, work=80.0, train=30.0, sync=1.0))
    80.0
    """
    import numpy as np

    if not has_rollout:
        return train
    if not has_trainer:
        return rollout
    if mode == "sync":
        return rollout + sync + train
    return np.maximum(work, train + sync)


@dataclass(frozen=True)
class TrainerSide:
    """The trainer's share of a step: its FLOPs, the GPUs that hold its state, and the weight sync."""

    has_trainer: bool
    """Whether a trainer consumes the records."""
    flops: float
    """FLOPs of one trainer step [FLOP]."""
    hardware: "HardwareProfile"
    """Trainer hardware profile."""
    mfu: float
    """Trainer model-FLOPs utilisation [fraction]."""
    min_gpus: int
    """Fewest trainer GPUs whose memory holds the sharded state (0 without a trainer) [GPUs]."""
    weight_sync_s: float
    """Time to push new weights to the inference replicas (0 without both sides) [s]."""

    def time_s(self, gpus: int) -> float:
        """Trainer step time on ``gpus`` GPUs [s] (0 without a trainer or GPUs)."""
        from capplan.trainer import trainer_step_time_s

        return trainer_step_time_s(self.flops, self.hardware, gpus, self.mfu) if self.has_trainer and gpus else 0.0


def trainer_side(workload: "Workload", inputs: "PlanInputs", trainer_flops: float) -> TrainerSide:
    """The trainer side of ``workload`` on ``inputs`` (see :mod:`capplan.trainer`).

    Raises
    ------
    DoesNotFitError
        The sharded training state fits no trainer size.
    """
    from capplan.trainer import MICRO_BATCH_TOKENS, TRAIN_MFU, min_trainer_gpus, weight_sync_time_s

    has_trainer = workload.has_trainer
    hardware = inputs.trainer_hardware or inputs.hardware
    return TrainerSide(
        has_trainer=has_trainer,
        flops=trainer_flops,
        hardware=hardware,
        mfu=inputs.trainer_mfu if inputs.trainer_mfu is not None else TRAIN_MFU,
        min_gpus=min_trainer_gpus(inputs.model, hardware, MICRO_BATCH_TOKENS) if has_trainer else 0,
        weight_sync_s=weight_sync_time_s(inputs.model, inputs.hardware, inputs.tp) if (has_trainer and workload.has_rollout) else 0.0,
    )


@dataclass(frozen=True)
class SplitTimes:
    """Rollout, trainer and step times of one inference/trainer split."""

    replicas: int
    """Inference replicas (0 without a rollout engine) [replicas]."""
    conversations_per_replica: float
    """Conversations each replica generates per step [conversations]."""
    decode_batch_sequences: float
    """Decode batch per replica [sequences]."""
    decode_replica_s: float
    """Replica-seconds of decode per step [replica-s]."""
    work_time_s: float
    """Rollout work at full batch over the replicas [s]."""
    tail_time_s: float
    """The longest conversation's critical path [s]."""
    rollout_time_s: float
    """``max(work_time_s, tail_time_s)`` [s]."""
    longest_sampled_tokens: float
    """Sampled tokens of the longest conversation [tokens]."""
    binding: str
    """What limits the decode batch (``arrival of work`` when replicas get fewer conversations than they could run)."""
    trainer_time_s: float
    """Trainer step time [s]."""
    step_time_s: float
    """Wall time of one trained step (:func:`step_time_s`) [s]."""


@dataclass(frozen=True)
class StepModel:
    """What the step time of a split depends on: the rollout model, the trainer and the mode."""

    rollout: "RolloutModel"
    """Rollout timing of the replica configuration."""
    trainer: TrainerSide
    """The trainer side."""
    tp: int
    """Tensor-parallel degree of a replica [GPUs]."""
    mode: str
    """``sync`` or ``async``."""
    has_rollout: bool
    """Whether the workload has a rollout engine."""

    def evaluate(self, inference_gpus: int, trainer_gpus: int) -> SplitTimes:
        """Rollout, trainer and step times of ``inference_gpus`` and ``trainer_gpus`` [GPUs]."""
        trainer_time = self.trainer.time_s(trainer_gpus)
        if not self.has_rollout:
            return SplitTimes(0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, self.rollout.binding, trainer_time, trainer_time)
        times = self.rollout.times(max(inference_gpus // self.tp, 1))
        rollout, work = times.rollout_time_s[0].item(), times.work_time_s[0].item()
        step = float(
            step_time_s(self.mode, self.has_rollout, self.trainer.has_trainer, rollout, work, trainer_time, self.trainer.weight_sync_s)
        )
        return SplitTimes(
            replicas=int(times.replicas[0].item()),
            conversations_per_replica=times.conversations_per_replica[0].item(),
            decode_batch_sequences=times.decode_batch_sequences[0].item(),
            decode_replica_s=times.decode_replica_s[0].item(),
            work_time_s=work,
            tail_time_s=times.tail_time_s[0].item(),
            rollout_time_s=rollout,
            longest_sampled_tokens=times.longest_sampled_tokens[0].item(),
            binding="arrival of work" if times.arrival_binds[0].item() else self.rollout.binding,
            trainer_time_s=trainer_time,
            step_time_s=step,
        )


@dataclass(frozen=True)
class Split:
    """The GPU counts of a plan and how they were chosen."""

    inference_gpus: int
    """Inference GPUs (0 without a rollout engine) [GPUs]."""
    trainer_gpus: int
    """Trainer GPUs (0 without a trainer) [GPUs]."""
    sizing: str
    """How the counts were chosen, in words (the plan's ``sizing``)."""


def smallest_satisfying(low: int, high: int, ok: Callable[[int], bool]) -> int:
    """Smallest integer in ``[low, high]`` with ``ok(x)`` true (``ok`` monotone), else ``high``.

    >>> smallest_satisfying(1, 100, lambda replicas: 120 / replicas <= 7)
    18
    """
    if ok(low):
        return low
    while high - low > 1:
        middle = (low + high) // 2
        if ok(middle):
            high = middle
        else:
            low = middle
    return high


def check_given_counts(inputs: "PlanInputs", trainer: TrainerSide) -> None:
    """Refuse given GPU counts that cannot host a replica or the trainer state.

    Raises
    ------
    InputError
        ``--inference-gpus`` or ``--total-gpus`` below ``--tp``, or inference GPUs not a
        multiple of it.
    DoesNotFitError
        ``--trainer-gpus`` too few to hold the sharded training state.
    """
    tp = inputs.tp
    for flag, gpus in (("--inference-gpus", inputs.inference_gpus), ("--total-gpus", inputs.total_gpus)):
        if gpus is not None and gpus < tp:
            raise InputError(f"{flag} {gpus}: fewer GPUs than one replica needs (--tp {tp})")
    if inputs.inference_gpus is not None and inputs.inference_gpus % tp:
        raise InputError(f"--inference-gpus {inputs.inference_gpus}: not a multiple of --tp {tp}")
    if trainer.has_trainer and inputs.trainer_gpus is not None and inputs.trainer_gpus < trainer.min_gpus:
        raise DoesNotFitError(
            f"--trainer-gpus {inputs.trainer_gpus}: {inputs.model.name}'s sharded training state needs at least "
            f"{trainer.min_gpus} {trainer.hardware.name} GPUs"
        )


def split_for_total_gpus(model: StepModel, total_gpus: int, trained_positions: float) -> tuple[int, int]:
    """The (inference, trainer) split of ``total_gpus`` that maximises trained tokens/s [GPUs].

    Inference takes whole replicas; the trainer at least its memory minimum. Ties go to more
    inference GPUs.

    Raises
    ------
    InputError
        ``total_gpus`` cannot hold one replica and the trainer state.
    """
    tp, trainer_min = model.tp, model.trainer.min_gpus
    splits = range(tp, total_gpus - trainer_min + 1, tp)
    if not splits:
        raise InputError(f"--total-gpus {total_gpus}: the trainer needs {trainer_min} GPUs and a replica {tp}; too few in total")
    scored = [(trained_positions / max(model.evaluate(gpus, total_gpus - gpus).step_time_s, 1e-12), gpus) for gpus in splits]
    inference = max(scored)[1]
    return inference, total_gpus - inference


def trainer_gpus_for(model: StepModel, step_time_target_s: float | None, inference_gpus: int | None) -> tuple[int, str]:
    """Trainer GPUs when none are given, and how they were sized, in words.

    The fewest that hold the state; or, with a step-time target, the fewest that meet it; or,
    with inference GPUs given, the fewest that train a step within the rollout work.
    """
    trainer = model.trainer
    gpus, sizing = trainer.min_gpus, "trainer sized by memory"
    if step_time_target_s is not None:
        gpus = smallest_satisfying(trainer.min_gpus, MAX_GPUS, lambda g: trainer.time_s(g) <= step_time_target_s)
        sizing = f"trainer sized for its {step_time_target_s:g} s step-time target"
    elif inference_gpus is not None and model.has_rollout:
        work_time = model.evaluate(inference_gpus, gpus).work_time_s
        gpus = smallest_satisfying(trainer.min_gpus, MAX_GPUS, lambda g: trainer.time_s(g) <= work_time)
        sizing = "trainer sized to keep up with the given inference GPUs"
    return gpus, sizing


def inference_gpus_for_balance(model: StepModel, trainer_gpus: int, max_replicas: int) -> tuple[int, str]:
    """Inference GPUs when none are given, and the clause that says how, in words.

    The fewest replicas whose rollout work keeps pace with a trainer step (plus the weight sync
    in async mode). When even ``max_replicas`` cannot, per-conversation latency floors the
    rollout: stop where one more replica shortens it by less than :data:`DIMINISHING_RETURNS`.
    """
    tp = model.tp
    goal = model.trainer.time_s(trainer_gpus) + (model.trainer.weight_sync_s if model.mode == "async" else 0.0)
    floor = model.evaluate(max_replicas * tp, trainer_gpus).work_time_s
    if floor <= goal:
        replicas = smallest_satisfying(1, max_replicas, lambda r: model.evaluate(r * tp, trainer_gpus).work_time_s <= goal)
        clause = "; inference sized so rollout production keeps pace with the trainer"
    else:
        limit = floor * (1 + DIMINISHING_RETURNS)
        replicas = smallest_satisfying(1, max_replicas, lambda r: model.evaluate(r * tp, trainer_gpus).work_time_s <= limit)
        clause = (
            f"; balance is out of reach (even one conversation per replica takes {floor:,.0f} s against a "
            f"{goal:,.0f} s trainer step): inference sized to within {DIMINISHING_RETURNS:.0%} of the shortest rollout"
        )
    gpus = replicas * tp
    if model.has_rollout and model.trainer.has_trainer and model.evaluate(gpus, trainer_gpus).tail_time_s > goal:
        clause += " (the longest rollout alone outlasts a trainer step: the tail binds)"
    return gpus, clause


def size_split(
    inputs: "PlanInputs", model: StepModel, work: "StepWork", step_time_target_s: float | None, serving_replicas: int | None
) -> Split:
    """The plan's GPU counts: given, the split of ``--total-gpus``, or sized side by side.

    Order: a ``--total-gpus`` split (both sides present); serving replicas (``serving_replicas``
    from :func:`capplan.plan.serving.size_serving`); the trainer (:func:`trainer_gpus_for`);
    inference for balance (:func:`inference_gpus_for_balance`).

    Raises
    ------
    InputError, DoesNotFitError
        From :func:`check_given_counts` and :func:`split_for_total_gpus`.
    """
    check_given_counts(inputs, model.trainer)
    has_trainer = model.trainer.has_trainer
    sizing = "given"
    inference, trainer = inputs.inference_gpus, inputs.trainer_gpus
    if not model.has_rollout:
        inference = 0
    if not has_trainer:
        trainer = 0
    if inputs.total_gpus is not None and has_trainer and model.has_rollout:
        inference, trainer = split_for_total_gpus(model, inputs.total_gpus, work.trained_positions)
        sizing = f"split of --total-gpus {inputs.total_gpus} that maximises trained tokens/s"
    if serving_replicas is not None and inference is None:
        inference = max(1, serving_replicas) * inputs.tp
        sizing = "replicas sized for the arrival rate and latency targets"
    if trainer is None:
        trainer, sizing = trainer_gpus_for(model, step_time_target_s, inference)
    if inference is None:
        # more replicas than conversations idle
        inference, clause = inference_gpus_for_balance(model, trainer, max(1, math.ceil(work.conversations)))
        sizing += clause
    return Split(inference, trainer, sizing)
