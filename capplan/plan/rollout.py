"""The rollout model: a step's rollout time on R replicas, its shrinking-batch tail, static batching."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    import numpy as np

    from capplan.plan.work import StepWork

_TAIL_POINTS = 256
"""Quantile grid used for the tail's survival profile [points]."""


def shrinking_batch_decode_s(
    lengths: "np.ndarray", conversations_per_replica: Any, batch: Any, step_time: Callable[[Any], Any]
) -> tuple[Any, Any]:
    """Decode time of the longest conversation as the batch shrinks, and the step's max length.

    With ``n`` conversations started together on a replica whose decode batch is capped at
    ``B``, the number still decoding at token ``k`` is ``min(B, n S(k))`` where ``S`` is the
    survival function of the per-conversation sampled tokens. The longest conversation (the
    ``1 - 1/(n + 1)`` quantile, ``L_max``) decodes ``L_max`` steps; summing the step time at the
    batch in force::

        T_tail = sum_{k=1..L_max} t(min(B, n S(k)))

    evaluated on a grid of ``_TAIL_POINTS`` token positions. Vectorised: ``n`` and ``B`` may be
    arrays of the same shape (one entry per replica count).

    Parameters
    ----------
    lengths : array
        Sampled tokens per conversation from the Monte Carlo sample [tokens].
    conversations_per_replica : float or array
        ``n`` [conversations].
    batch : float or array
        Decode batch cap ``B`` [sequences].
    step_time : callable
        ``t(batch_array) -> seconds`` (vectorised).

    Returns
    -------
    (T_tail, L_max)
        [s], [tokens]; floats for scalar inputs, else arrays.
    """
    import numpy as np

    scalar = np.ndim(conversations_per_replica) == 0 and np.ndim(batch) == 0
    per_replica = np.maximum(np.atleast_1d(np.asarray(conversations_per_replica, dtype=float)), 1.0)
    batch_cap = np.broadcast_to(np.atleast_1d(np.asarray(batch, dtype=float)), per_replica.shape)
    sorted_lengths = np.sort(np.asarray(lengths, dtype=float))
    if sorted_lengths.size == 0 or sorted_lengths[-1] <= 0:
        zero = np.zeros(per_replica.shape)
        return (0.0, 0.0) if scalar else (zero, zero)
    if sorted_lengths.size > 1:
        longest = np.quantile(sorted_lengths, 1.0 - 1.0 / (per_replica + 1))
    else:
        longest = np.full(per_replica.shape, sorted_lengths[0])
    fractions = np.linspace(0.0, 1.0, _TAIL_POINTS + 1)
    positions = longest[:, None] * fractions[None, :]
    midpoints = (positions[:, :-1] + positions[:, 1:]) / 2
    survival = 1.0 - np.searchsorted(sorted_lengths, midpoints.ravel(), side="left").reshape(midpoints.shape) / sorted_lengths.size
    active = np.clip(np.minimum(batch_cap[:, None], per_replica[:, None] * survival), 1.0, None)
    tail = (np.diff(positions, axis=1) * np.asarray(step_time(active)).reshape(active.shape)).sum(1)
    if scalar:
        return float(tail[0]), float(longest[0])
    return tail, longest


@dataclass(frozen=True)
class RolloutTimes:
    """Rollout timing of one step for each replica count (arrays of one shape)."""

    replicas: "np.ndarray"
    """Inference replicas [replicas] (at least 1)."""
    conversations_per_replica: "np.ndarray"
    """Conversations each replica generates per step [conversations]."""
    decode_batch_sequences: "np.ndarray"
    """Decode batch at full load, ``max(1, min(B, n))`` (0 without a rollout engine) [sequences]."""
    decode_replica_s: "np.ndarray"
    """Replica-seconds of decode per step [replica-s]."""
    work_time_s: "np.ndarray"
    """All prefill, decode and scoring work at full batch, divided over the replicas [s]."""
    tail_time_s: "np.ndarray"
    """The longest conversation's critical path at the shrinking batch, tool waits included [s]."""
    rollout_time_s: "np.ndarray"
    """``max(work_time_s, tail_time_s)`` [s]."""
    arrival_binds: "np.ndarray"
    """Whether a replica is given fewer conversations than its batch cap (``arrival of work``)."""
    longest_sampled_tokens: "np.ndarray"
    """Sampled tokens of the step's longest conversation, ``L_max`` [tokens]."""


@dataclass(frozen=True)
class RolloutModel:
    """Rollout timing of one replica configuration, vectorised over the replica count.

    Built by :meth:`capplan.plan.replica.ReplicaSetup.rollout_model`; :meth:`times` is what
    both :func:`capplan.plan.plan_workload` and the sweep evaluate, so a plan and a sweep row
    agree.
    """

    work: "StepWork"
    """The step's work."""
    max_decode_batch: float
    """Decode batch allowed by memory / the scheduler (0 without a rollout engine) [sequences]."""
    binding: str
    """What caps ``max_decode_batch``."""
    prefill_replica_s: float
    """Replica-seconds of prefill per step [replica-s]."""
    score_replica_s: float
    """Replica-seconds of teacher scoring per step [replica-s]."""
    decode_step_s: Callable[[Any], Any]
    """``t(batch) -> seconds``: decode step time at the step's mean context (vectorised)."""

    def times(self, replicas: Any) -> RolloutTimes:
        """Per-replica batch, decode replica-seconds, work time, tail and rollout time [s].

        ``t_work = (prefill + decode + scoring replica-seconds) / R`` with decode at
        ``b = max(1, min(B, n))``, ``n = conversations / R``; the tail is the longest
        conversation's critical path: its sampled tokens at the mean step time of the shrinking
        batch plus its tool waits (the ``1 - 1/(n+1)`` quantile); rollout = max of the two.

        Parameters
        ----------
        replicas : int or array of int
            Inference replicas ``R`` [replicas].
        """
        import numpy as np

        replicas = np.maximum(np.atleast_1d(np.asarray(replicas, dtype=float)), 1.0)
        per_replica = self.work.conversations / replicas
        if not self.max_decode_batch:
            zeros = np.zeros(replicas.shape)
            work_time = (self.prefill_replica_s + self.score_replica_s) / replicas
            return RolloutTimes(
                replicas=replicas, conversations_per_replica=per_replica, decode_batch_sequences=zeros,
                decode_replica_s=zeros, work_time_s=work_time, tail_time_s=zeros, rollout_time_s=work_time,
                arrival_binds=np.zeros(replicas.shape, bool), longest_sampled_tokens=zeros,
            )
        batch = np.maximum(1.0, np.minimum(self.max_decode_batch, per_replica))
        step_at_batch = np.asarray(self.decode_step_s(batch), dtype=float)
        decode_s = self.work.decode_tokens / batch * step_at_batch
        work_time = (self.prefill_replica_s + decode_s + self.score_replica_s) / replicas
        tail, longest = shrinking_batch_decode_s(self.work.sampled_per_conversation, per_replica, batch, self.decode_step_s)
        mean_step = np.where(longest > 0, tail / np.where(longest > 0, longest, 1.0), 0.0)
        quantile = 1.0 - 1.0 / (per_replica + 1.0)
        sampled = self.work.sampled_per_conversation
        waits = self.work.wait_per_conversation
        if sampled.size <= 1:
            critical_path = mean_step * (sampled.max(initial=0.0)) + waits.max(initial=0.0)
        elif not waits.any():
            critical_path = mean_step * np.quantile(sampled, quantile)
        else:
            critical_path = np.array([np.quantile(sampled * step + waits, q) for step, q in zip(mean_step, quantile)])
        return RolloutTimes(
            replicas=replicas, conversations_per_replica=per_replica, decode_batch_sequences=batch,
            decode_replica_s=decode_s, work_time_s=work_time, tail_time_s=critical_path,
            rollout_time_s=np.maximum(work_time, critical_path), arrival_binds=per_replica < self.max_decode_batch,
            longest_sampled_tokens=longest,
        )


def static_batching_waste(lengths: "np.ndarray", batch: int) -> tuple[float, float]:
    """Fraction of slot-steps a static batch wastes, and the mean group maximum.

    Conversations are taken in sample order in groups of ``batch``; a static group runs until its
    longest member ends, so ``waste = 1 - sum L / (batch x sum_groups max L)``. With the seed's
    mean of 14,628 and max of 32,768 tokens and large groups this tends to
    ``1 - 14628 / 32768 = 55%`` (the seed rounds to 54%).

    Parameters
    ----------
    lengths : array
        Sampled tokens per conversation [tokens].
    batch : int
        Static batch size [sequences].

    Returns
    -------
    (waste, group_max)
        [fraction of slot-steps], [tokens].
    """
    import numpy as np

    lengths = np.asarray(lengths, dtype=float)
    group_size = max(1, int(batch))
    groups_count = lengths.size // group_size
    if groups_count == 0:
        if lengths.size and lengths.max() > 0:
            return 1.0 - lengths.mean() / lengths.max(), float(lengths.max())
        return 0.0, float(lengths.max() if lengths.size else 0)
    groups = lengths[: groups_count * group_size].reshape(groups_count, group_size)
    group_max = groups.max(1)
    total = groups.sum()
    if group_max.sum() == 0:
        return 0.0, 0.0
    return float(1.0 - total / (group_size * group_max.sum())), float(group_max.mean())
