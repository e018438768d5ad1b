"""The step of each mode, and the split search: how the GPUs are divided (or shared) and which mode runs.

* ``colocated``: generation on every GPU, then the trainer's passes (log-prob recompute,
  reference, forward + backward) on every GPU, then the weights re-laid out for the engines
  (``reshard``), in series: ``step = rollout + trainer + reshard``.
* ``sync``: split GPUs, the same three in series: ``step = rollout + trainer + sync``.
* ``async`` with staleness bound ``K``: split GPUs, overlapped. Up to ``K + 1`` steps of
  rollouts are in flight, so a step's rollouts must be generated within ``K + 1`` periods less
  the trainer's time: ``step = max(trainer + sync, production, (latency + trainer + sync) / (K + 1))``
  (the trainer, the replicas' throughput, or the staleness bound binds), ``latency`` the time
  from a step's dispatch to its last rollout (:class:`capplan.plan.rollout.RolloutTimes`).
  ``K = 0`` is ``sync``.

Sizing rules (:func:`size_split`): a trainer capplan sizes is never smaller than a sane
data-parallel layout (:func:`capplan.trainer.sane_trainer_gpus`: the memory minimum rounded up to
whole nodes); inference for balance takes the fewest replicas whose production keeps pace with
the trainer; ``--total-gpus`` tries every split (and, with ``--mode auto``, every mode) and keeps
the one with the most trained tokens/s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from capplan.errors import DoesNotFitError, InputError

if TYPE_CHECKING:
    from capplan.hardware import HardwareProfile
    from capplan.modelspec import ModelSpec
    from capplan.plan.inputs import PlanInputs
    from capplan.plan.rollout import RolloutModel
    from capplan.plan.work import StepWork
    from capplan.trainer import TrainerPasses
    from capplan.workload import Workload

MAX_GPUS = 8192
"""Upper bound of the GPU counts searched when sizing a side [GPUs]."""
DIMINISHING_RETURNS = 0.25
"""When balance is out of reach, inference stops growing once the rollout is within this
fraction of its shortest possible value [fraction]."""
BALANCE_WARNING = 2.0
"""A split whose generation and trainer times differ by more than this factor is flagged as far
from balance [ratio]."""


def step_time_s(
    mode: str, has_rollout: bool, has_trainer: bool, rollout: Any, production: Any, train: Any, sync: float, max_staleness: int = 0,
    latency: Any = None,
) -> Any:
    """Wall time of one trained step [s] (vectorised).

    ``colocated`` and ``sync``: ``rollout + train + sync``; ``async`` with bound ``K``:
    ``max(train + sync, production, (latency + train + sync) / (K + 1))``, which is the
    synchronous step at ``K = 0`` (``latency``, a step's rollouts from dispatch to the last, is
    the rollout when not given). Without a trainer it is the rollout; without a rollout
    engine, the trainer.

    Parameters
    ----------
    rollout, production, train : float or array
        Rollout time of a synchronised step, steady production time of one step's rollouts,
        and trainer time [s].
    sync : float
        Weight sync time [s].
    max_staleness : int
        ``K`` [policy versions].

    Examples
    --------
    >>> step_time_s("sync", True, True, rollout=100.0, production=80.0, train=30.0, sync=1.0)
    131.0
    >>> float(step_time_s("async", True, True, rollout=100.0, production=80.0, train=30.0, sync=1.0, max_staleness=1))
    80.0
    >>> float(step_time_s("async", True, True, rollout=100.0, production=40.0, train=30.0, sync=1.0, max_staleness=1))
    65.5
    >>> float(step_time_s("async", True, True, rollout=100.0, production=40.0, train=30.0, sync=1.0, max_staleness=0))
    131.0
    """
    import numpy as np

    if not has_rollout:
        return train
    if not has_trainer:
        return rollout
    serial = rollout + train + sync
    if mode != "async" or max_staleness <= 0:
        return serial
    chain = (rollout if latency is None else latency) + train + sync
    return np.maximum(np.maximum(train + sync, production), chain / (max_staleness + 1))


@dataclass(frozen=True)
class TrainerSide:
    """The trainer's share of a step: its FLOPs, MFU, the GPUs that hold its state, and the weight sync."""

    has_trainer: bool
    """Whether a trainer consumes the records."""
    flops: float
    """FLOPs of one trainer step [FLOP]."""
    hardware: "HardwareProfile"
    """Trainer hardware profile."""
    mfu: float
    """Trainer model-FLOPs utilisation [fraction]."""
    mfu_source: str
    """Where ``mfu`` comes from (``fitted`` or ``given``)."""
    min_gpus: int
    """Fewest trainer GPUs whose memory holds the sharded state (0 without a trainer) [GPUs]."""
    sane_gpus: int
    """Fewest trainer GPUs capplan sizes on its own: the memory minimum in whole nodes [GPUs]."""
    weight_sync_s: float
    """Time to push new weights to the inference replicas (0 without both sides) [s]."""
    sync_pattern: str
    """The weight-sync pattern (``nccl``, ``checkpoint-engine``, ``nixl``, ``reshard``)."""
    passes: "TrainerPasses"
    """The forward-equivalent passes of a step."""
    overhead_s: float = 0.0
    """Framework time per step outside the GPU phases, in series with training [s]."""

    def time_s(self, gpus: int) -> float:
        """Trainer step time on ``gpus`` GPUs [s] (0 without a trainer or GPUs)."""
        from capplan.trainer import trainer_step_time_s

        return trainer_step_time_s(self.flops, self.hardware, gpus, self.mfu) if self.has_trainer and gpus else 0.0

    def phases_s(self, gpus: int) -> dict[str, float]:
        """The trainer's time by pass on ``gpus`` GPUs: ``logprob_s``, ``reference_s``, ``training_s`` [s]."""
        total = self.time_s(gpus)
        count = self.passes.count or 1
        per_pass = total / count
        return {
            "logprob_s": per_pass * int(self.passes.recompute_logprobs),
            "reference_s": per_pass * int(self.passes.reference_forward),
            "training_s": per_pass * 3,
        }


def sync_time_s(inputs: "PlanInputs", pattern: str) -> float:
    """Time to push new 16-bit weights to the inference engines of ``inputs`` [s]: every GPU
    receives, all in parallel, what the pattern sends it under the replica's layout
    (:func:`capplan.trainer.weight_sync_time_s`, :func:`capplan.trainer.sync_bytes_per_gpu`)."""
    from capplan.trainer import weight_sync_time_s

    return weight_sync_time_s(inputs.model, inputs.tp, pattern, inputs.ep, inputs.data_parallel, inputs.redundant_experts)


def trainer_side(
    workload: "Workload", inputs: "PlanInputs", trainer_flops: float, passes: "TrainerPasses", mode: str, overhead_s: float = 0.0
) -> TrainerSide:
    """The trainer side of ``workload`` on ``inputs`` in ``mode`` (see :mod:`capplan.trainer`).

    Raises
    ------
    DoesNotFitError
        The sharded training state fits no trainer size.
    """
    from capplan.trainer import MICRO_BATCH_TOKENS, min_trainer_gpus, sane_trainer_gpus, trainer_mfu

    has_trainer = workload.has_trainer
    hardware = inputs.hardware if mode == "colocated" else (inputs.trainer_hardware or inputs.hardware)
    pattern = inputs.weight_sync if inputs.weight_sync != "auto" else ("reshard" if mode == "colocated" else "nccl")
    min_gpus = min_trainer_gpus(inputs.model, hardware, MICRO_BATCH_TOKENS) if has_trainer else 0
    mfu = inputs.trainer_mfu if inputs.trainer_mfu is not None else trainer_mfu(inputs.model, hardware)
    return TrainerSide(
        has_trainer=has_trainer,
        flops=trainer_flops,
        hardware=hardware,
        mfu=mfu,
        mfu_source="given" if inputs.trainer_mfu is not None else "fitted",
        min_gpus=min_gpus,
        sane_gpus=sane_trainer_gpus(min_gpus, hardware.gpus_per_node) if has_trainer else 0,
        weight_sync_s=sync_time_s(inputs, pattern) if (has_trainer and workload.has_rollout) else 0.0,
        sync_pattern=pattern,
        passes=passes,
        overhead_s=overhead_s if (has_trainer and workload.has_rollout) else 0.0,
    )


@dataclass(frozen=True)
class SplitTimes:
    """Rollout, trainer and step times of one split in one mode."""

    replicas: int
    """Inference replicas (0 without a rollout engine) [replicas]."""
    conversations_per_replica: float
    """Conversations each replica generates per step [conversations]."""
    decode_batch_sequences: float
    """Decode batch per replica [sequences]: a synchronised step's (colocated, sync), or the
    batch the replicas run at to deliver one step per period (async with ``K >= 1``,
    :meth:`capplan.plan.rollout.RolloutModel.async_period`)."""
    decode_replica_s: float
    """Replica-seconds of decode per step at ``decode_batch_sequences`` [replica-s]."""
    work_time_s: float
    """Rollout work of a synchronised step at full batch over the replicas [s]."""
    tail_time_s: float
    """The longest conversation's critical path [s]."""
    rollout_time_s: float
    """Wall time of a synchronised step's rollouts [s]."""
    longest_sampled_tokens: float
    """Sampled tokens of the longest conversation [tokens]."""
    binding: str
    """What limits the decode batch (``arrival of work`` when replicas get fewer conversations than they could run)."""
    trainer_time_s: float
    """Trainer step time (every pass) [s]."""
    step_time_s: float
    """Wall time of one trained step (:func:`step_time_s`) [s]."""
    mode: str = "sync"
    """``colocated``, ``sync`` or ``async``."""
    max_staleness: int = 0
    """Async bound ``K`` in force [versions]."""
    production_time_s: float = 0.0
    """Async: steady time to produce one step's rollouts [s]."""
    generation_time_s: float = 0.0
    """The step's generation phase: the rollout (colocated, sync) or the production (async) [s]."""
    recompute_tokens: float = 0.0
    """Positions prefilled again per step after preemption or eviction [positions]."""
    weight_sync_s: float = 0.0
    """Weight sync or reshard per step [s]."""
    bound_by: str = ""
    """What sets the step: ``serial`` (colocated, sync), or ``trainer``, ``rollout production``,
    ``staleness bound`` (async)."""
    trainer_phases_s: dict[str, float] | None = None
    """The trainer's time by pass [s]."""
    latency_time_s: float = 0.0
    """A step's rollouts from dispatch to the last (async: at the steady batch) [s]."""
    overhead_s: float = 0.0
    """Framework time per step outside the GPU phases [s]."""
    rejected_fraction: float = 0.0
    """Async: groups that finish more than ``K`` versions late and are rejected [fraction]."""
    stale_fraction: float = 0.0
    """Async: trained trajectories generated by an older policy (lag >= 1) [fraction]."""
    mean_policy_lag: float = 0.0
    """Async: mean policy versions between generation and training [versions]."""
    trained_share: float = 1.0
    """Async: trained positions per step over the workload's mean (stale rejections drop the
    slowest, longest groups) [ratio]."""
    loaded_tokens: float = 0.0
    """Positions loaded back from a CPU KV tier per step instead of recomputed [positions]."""
    sync_decode_batch_sequences: float = 0.0
    """Decode batch of a synchronised step, the batch ``rollout_time_s`` is priced at (the
    plan's batch in colocated and sync) [sequences]."""
    sync_decode_replica_s: float = 0.0
    """Replica-seconds of decode per step at that batch [replica-s]."""
    busiest_conversations: float = 0.0
    """Conversations on the busiest replica (prompt groups run whole on one) [conversations]."""
    fits_sequences: float = 0.0
    """Conversations of the busiest replica a synchronised step runs together [conversations]."""
    lost_replica_s: float = 0.0
    """Replica-seconds of a synchronised step prefilling again or loading back lost contexts [replica-s]."""
    period_fixed_s: float = 0.0
    """Async: a replica's time per period besides decode (prefill, scoring, lost contexts, weight load) [s]."""
    batch_cap_sequences: float = 0.0
    """Async: the largest batch the ``K + 1`` steps in flight fill [sequences]."""
    chain_s: float = 0.0
    """Async: the staleness bound's term of the step [s]."""
    stretch: float = 1.0
    """Async: ``P / (P - hold)``, a group's latency stretched by the replicas' weight-load holds [ratio]."""
    edge_s: float = 0.0
    """Async, nothing rejected: the slowest group's stretched latency over ``K + 1/2``, a floor of the step [s]."""
    slowest_latency_s: float = 0.0
    """Async, nothing rejected: the slowest group's stretched latency [s]."""


@dataclass(frozen=True)
class StepModel:
    """What the step time of a split depends on: the rollout model, the trainer and the mode."""

    rollout: "RolloutModel"
    """Rollout timing of the replica configuration (weight loads of the mode included)."""
    trainer: TrainerSide
    """The trainer side."""
    tp: int
    """Tensor-parallel degree of a replica [GPUs]."""
    mode: str
    """``colocated``, ``sync`` or ``async``."""
    has_rollout: bool
    """Whether the workload has a rollout engine."""
    max_staleness: int = 0
    """Async bound ``K`` [versions]."""
    batches: bool = False
    """Async: the trainer takes whole dispatched batches in order (else finished groups)."""
    instance_gpus: int = 0
    """GPUs of one instance, ``tp x dp`` (data-parallel ranks of ``tp`` GPUs, each a replica):
    inference GPU counts come in multiples of it; 0: ``tp``."""

    @property
    def unit(self) -> int:
        """GPUs inference counts come in: an instance [GPUs]."""
        return self.instance_gpus or self.tp

    def evaluate(self, inference_gpus: int, trainer_gpus: int) -> SplitTimes:
        """Rollout, trainer and step times of ``inference_gpus`` and ``trainer_gpus`` [GPUs]."""
        trainer_time = self.trainer.time_s(trainer_gpus)
        phases = self.trainer.phases_s(trainer_gpus)
        # the framework's per-step time is in series with the trainer (and, async, pauses the engines)
        sync_s = self.trainer.weight_sync_s + self.trainer.overhead_s
        if not self.has_rollout:
            return SplitTimes(0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, self.rollout.binding, trainer_time, trainer_time,
                              mode=self.mode, trainer_phases_s=phases, bound_by="trainer")
        import numpy as np

        k = self.max_staleness if self.mode == "async" else 0
        replicas = max(inference_gpus // self.tp, 1)
        times = self.rollout.times(replicas, in_flight_steps=k + 1)
        rollout, work = times.rollout_time_s[0].item(), times.work_time_s[0].item()
        production = times.production_time_s[0].item()
        steady = self.mode == "async" and k > 0 and self.trainer.has_trainer
        batch = times.decode_batch_sequences[0].item()
        bound = "serial"
        recompute = times.recompute_tokens[0].item()
        loaded = float(np.asarray(times.loaded_tokens).ravel()[0]) if np.ndim(times.loaded_tokens) else float(times.loaded_tokens)
        staleness = (0.0, 0.0, 0.0)
        trained_share = 1.0
        decode_s = times.decode_replica_s[0].item()
        period_terms = {}
        if steady:
            period = self.rollout.async_period([replicas], k + 1, trainer_time + sync_s, batches=self.batches)
            step = float(period.step_time_s[0, 0])
            batch = float(period.batch_sequences[0, 0])
            decode_s = float(np.asarray(self.rollout.decode_replica_s(batch)).ravel()[0])  # at the batch the replicas run at
            period_terms = {
                "period_fixed_s": float(period.fixed_s[0, 0]), "batch_cap_sequences": float(period.batch_cap_sequences[0, 0]),
                "chain_s": float(period.chain_s[0, 0]), "stretch": float(period.stretch[0, 0]),
                "edge_s": float(period.edge_s[0, 0]), "slowest_latency_s": float(period.edge_s[0, 0]) * (k + 0.5),
            }
            bound = str(period.bound_by[0, 0])
            staleness = (float(period.rejected_fraction[0, 0]), float(period.stale_fraction[0, 0]), float(period.mean_policy_lag[0, 0]))
            trained_share = float(period.trained_share[0, 0])
            recompute = times.steady_recompute_tokens[0].item()
            steady_loaded = times.steady_loaded_tokens
            loaded = float(np.asarray(steady_loaded).ravel()[0]) if np.ndim(steady_loaded) else float(steady_loaded)
        else:
            step = float(step_time_s(self.mode, self.has_rollout, self.trainer.has_trainer, rollout, production, trainer_time, sync_s, k))
        return SplitTimes(
            replicas=int(times.replicas[0].item()),
            conversations_per_replica=times.conversations_per_replica[0].item(),
            decode_batch_sequences=batch,
            decode_replica_s=decode_s,
            work_time_s=work,
            tail_time_s=times.tail_time_s[0].item(),
            rollout_time_s=rollout,
            longest_sampled_tokens=times.longest_sampled_tokens[0].item(),
            binding="arrival of work" if times.arrival_binds[0].item() else self.rollout.binding,
            trainer_time_s=trainer_time,
            step_time_s=step,
            mode=self.mode,
            max_staleness=k,
            production_time_s=production,
            generation_time_s=min(production, step) if steady else rollout,
            latency_time_s=float(period.latency_s[0, 0]) if steady else rollout,
            recompute_tokens=recompute,
            weight_sync_s=self.trainer.weight_sync_s if self.trainer.has_trainer else 0.0,
            overhead_s=self.trainer.overhead_s,
            rejected_fraction=staleness[0],
            stale_fraction=staleness[1],
            mean_policy_lag=staleness[2],
            trained_share=trained_share,
            bound_by=bound,
            trainer_phases_s=phases,
            loaded_tokens=loaded,
            sync_decode_batch_sequences=times.decode_batch_sequences[0].item(),
            sync_decode_replica_s=times.decode_replica_s[0].item(),
            busiest_conversations=float(np.asarray(times.busiest_conversations).ravel()[0]),
            fits_sequences=float(np.asarray(times.fits_sequences).ravel()[0]),
            lost_replica_s=float(np.asarray(times.lost_replica_s).ravel()[0]),
            **period_terms,
        )


@dataclass(frozen=True)
class Split:
    """The GPU counts of a plan, its mode, and how they were chosen."""

    inference_gpus: int
    """Inference GPUs (0 without a rollout engine; colocated: every GPU) [GPUs]."""
    trainer_gpus: int
    """Trainer GPUs (0 without a trainer; colocated: every GPU) [GPUs]."""
    sizing: str
    """How the counts were chosen, in words (the plan's ``sizing``)."""
    mode: str = "sync"
    """The mode the split runs in."""
    decided_by: str = ""
    """The constraint that decided the split, in a few words."""
    alternatives: tuple[dict[str, Any], ...] = ()
    """With ``--total-gpus``: the best split of each mode tried (mode, GPUs, step, trained tokens/s)."""


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
    tp, unit = inputs.tp, inputs.instance_gpus
    what = f"--tp {tp}" if unit == tp else f"an instance, --tp x --dp = {tp} x {unit // tp} = {unit}"
    for flag, gpus in (("--inference-gpus", inputs.inference_gpus), ("--total-gpus", inputs.total_gpus)):
        if gpus is not None and gpus < unit:
            raise InputError(f"{flag} {gpus}: fewer GPUs than one {'replica' if unit == tp else 'instance'} needs ({what})")
    if inputs.inference_gpus is not None and inputs.inference_gpus % unit:
        raise InputError(f"--inference-gpus {inputs.inference_gpus}: not a multiple of {what}")
    if trainer.has_trainer and inputs.trainer_gpus is not None and inputs.trainer_gpus < trainer.min_gpus:
        raise DoesNotFitError(
            f"--trainer-gpus {inputs.trainer_gpus}: {inputs.model.name}'s sharded training state needs at least "
            f"{trainer.min_gpus} {trainer.hardware.name} GPUs"
        )


def _trained_per_s(model: StepModel, inference: int, trainer: int, trained_positions: float) -> float:
    times = model.evaluate(inference, trainer)
    return trained_positions * times.trained_share / max(times.step_time_s, 1e-12)


def split_for_total_gpus(model: StepModel, total_gpus: int, trained_positions: float) -> tuple[int, int, str]:
    """The (inference, trainer) split of ``total_gpus`` that maximises trained tokens/s, and why [GPUs].

    Inference takes whole replicas. The trainer takes whole nodes beyond its memory minimum
    (:func:`capplan.trainer.sane_trainer_gpus`) when the total leaves room for that and one
    replica, else any count from the memory minimum up. Ties go to more inference GPUs.

    Raises
    ------
    InputError
        ``total_gpus`` cannot hold one replica and the trainer state.
    """
    tp, trainer = model.unit, model.trainer
    if model.mode == "colocated":
        if tp != model.tp and total_gpus % tp:  # engines run in whole instances of tp x dp GPUs
            if total_gpus < tp:
                raise InputError(f"--total-gpus {total_gpus}: fewer GPUs than one instance of {tp} needs")
            inference = total_gpus // tp * tp
            return inference, total_gpus, f"colocated: training on every GPU, generation on the {inference} of whole instances of {tp}"
        return total_gpus, total_gpus, "colocated: both phases on every GPU"
    node = trainer.hardware.gpus_per_node
    if total_gpus - trainer.sane_gpus >= tp:
        candidates = [g for g in range(trainer.sane_gpus, total_gpus - tp + 1, node)]
        rule = f"trainer in whole nodes of {node} from its sane minimum {trainer.sane_gpus}"
    else:
        candidates = list(range(trainer.min_gpus, total_gpus - tp + 1))
        rule = f"trainer from its memory minimum {trainer.min_gpus} (too few GPUs for whole nodes)"
    if not candidates:
        raise InputError(
            f"--total-gpus {total_gpus}: the trainer needs {trainer.min_gpus} GPUs and a "
            f"{'replica' if tp == model.tp else 'instance'} {tp}; too few in total"
        )
    scored = []
    for trainer_gpus in candidates:
        inference = ((total_gpus - trainer_gpus) // tp) * tp
        scored.append((_trained_per_s(model, inference, trainer_gpus, trained_positions), inference, trainer_gpus))
    best = max(scored)
    return best[1], best[2], rule


def trainer_gpus_for(model: StepModel, step_time_target_s: float | None, inference_gpus: int | None) -> tuple[int, str]:
    """Trainer GPUs when none are given, and how they were sized, in words.

    The sane minimum (the memory minimum in whole nodes); or, with a step-time target, the
    fewest whole nodes that meet it; or, with inference GPUs given, the fewest whole nodes whose
    step keeps up with the rollout production.
    """
    trainer = model.trainer
    node = trainer.hardware.gpus_per_node
    nodes = lambda g: max(trainer.sane_gpus, math.ceil(g / node) * node)  # noqa: E731
    gpus, sizing = trainer.sane_gpus, (
        f"trainer: its memory minimum ({trainer.min_gpus} GPUs) in whole nodes, a sane data-parallel layout"
    )
    if step_time_target_s is not None:
        gpus = nodes(smallest_satisfying(trainer.min_gpus, MAX_GPUS, lambda g: trainer.time_s(g) <= step_time_target_s))
        sizing = f"trainer sized in whole nodes for its {step_time_target_s:g} s step-time target"
    elif inference_gpus is not None and model.has_rollout:
        times = model.evaluate(inference_gpus, gpus)
        goal = times.production_time_s if model.mode == "async" else times.work_time_s
        sync = trainer.weight_sync_s + trainer.overhead_s if model.mode == "async" else 0.0
        gpus = nodes(smallest_satisfying(trainer.min_gpus, MAX_GPUS, lambda g: trainer.time_s(g) + sync <= goal))
        sizing = "trainer sized in whole nodes to keep up with the given inference GPUs"
    return gpus, sizing


def inference_gpus_for_balance(model: StepModel, trainer_gpus: int, max_replicas: int) -> tuple[int, str]:
    """Inference GPUs when none are given, and the clause that says how, in words.

    Sync and colocated: the fewest replicas whose rollout work keeps pace with a trainer step.
    Async: the fewest replicas whose step (:func:`StepModel.evaluate`) is the trainer's, so the
    trainer never waits. When even ``max_replicas`` cannot reach that (the tail, or the
    staleness bound on it, floors the step), stop where the step is within
    :data:`DIMINISHING_RETURNS` of its floor.
    """
    tp = model.unit  # GPUs of an instance; "replicas" below count instances
    is_async = model.mode == "async"
    trainer = model.trainer
    goal = trainer.time_s(trainer_gpus) + (trainer.weight_sync_s + trainer.overhead_s if is_async else 0.0)

    def produce(replicas: int) -> float:
        t = model.evaluate(replicas * tp, trainer_gpus)
        return t.step_time_s if is_async else t.work_time_s

    floor = produce(max_replicas)
    if floor <= goal * (1 + 1e-6):
        replicas = smallest_satisfying(1, max_replicas, lambda r: produce(r) <= goal * (1 + 1e-6))
        clause = "; inference sized so rollout production keeps pace with the trainer (balance)"
    else:
        limit = floor * (1 + DIMINISHING_RETURNS)
        replicas = smallest_satisfying(1, max_replicas, lambda r: produce(r) <= limit)
        what = "step" if is_async else "rollout"
        clause = (
            f"; balance is out of reach (with one conversation per replica the {what} still takes {floor:,.0f} s against a "
            f"{goal:,.0f} s trainer step): inference sized to within {DIMINISHING_RETURNS:.0%} of the shortest {what}"
        )
    gpus = replicas * tp
    if model.has_rollout and trainer.has_trainer and model.evaluate(gpus, trainer_gpus).tail_time_s > goal:
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
    sizing, decided = "given", "the given GPU counts"
    inference, trainer = inputs.inference_gpus, inputs.trainer_gpus
    if not model.has_rollout:
        inference = 0
    if not has_trainer:
        trainer = 0
    if inputs.total_gpus is not None and has_trainer and model.has_rollout:
        if inputs.trainer_gpus is not None and model.mode != "colocated":
            trainer, inference = inputs.trainer_gpus, ((inputs.total_gpus - inputs.trainer_gpus) // model.unit) * model.unit
            sizing, decided = "the rest of --total-gpus after the given trainer", "the given trainer GPUs"
        elif inputs.inference_gpus is not None and model.mode != "colocated":
            inference, trainer = inputs.inference_gpus, inputs.total_gpus - inputs.inference_gpus
            sizing, decided = "the rest of --total-gpus after the given inference GPUs", "the given inference GPUs"
        else:
            inference, trainer, rule = split_for_total_gpus(model, inputs.total_gpus, work.trained_positions)
            sizing = f"split of --total-gpus {inputs.total_gpus} that maximises trained tokens/s ({rule})"
            decided = "colocated: every GPU does both" if model.mode == "colocated" else "the most trained tokens/s"
        if trainer < model.trainer.min_gpus:
            raise DoesNotFitError(
                f"--total-gpus {inputs.total_gpus}: leaves {trainer} trainer GPUs; {inputs.model.name}'s sharded training "
                f"state needs at least {model.trainer.min_gpus}"
            )
    if serving_replicas is not None and inference is None:
        inference = max(1, serving_replicas) * inputs.tp
        sizing = decided = "replicas sized for the arrival rate and latency targets"
    if trainer is None:
        trainer, sizing = trainer_gpus_for(model, step_time_target_s, inference)
        decided = "the trainer's sane data-parallel minimum" if trainer == model.trainer.sane_gpus else "the trainer for balance"
    if inference is None:
        # more replicas than conversations idle
        ranks = max(model.unit // model.tp, 1)
        inference, clause = inference_gpus_for_balance(model, trainer, max(1, math.ceil(work.conversations / ranks)))
        sizing += clause
        decided += ", then inference for balance"
    return Split(inference, trainer, sizing, model.mode, decided)
