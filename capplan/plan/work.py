"""The work of one trained step (prefill, decode, scoring, training) from one sample of the workload."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

    from capplan.ledger import Conversations, Ledger
    from capplan.modelspec import ModelSpec
    from capplan.trainer import TrainerPasses
    from capplan.workload import Workload


@dataclass(frozen=True)
class StepWork:
    """The work of one step of rollouts (before dividing among replicas), from the sample."""

    conversations: float
    """Conversations generated per trained step, filtering included [conversations]."""
    prefill_tokens: float
    """Prefill-forwarded positions after each invocation's reused prefix [positions]."""
    prefill_pairs: float
    """Causal attention pairs of the prefill [pairs]."""
    prefill_pairs_window: float
    """Causal attention pairs of the prefill on sliding-window layers [pairs]."""
    prefill_kv_read: float
    """Cached positions the prefill attends to (the reused prefixes) [positions]."""
    invocations: float
    """Engine invocations (prefills) [invocations]."""
    prefill_by_class: tuple[float, float, float]
    """Prefill-forwarded positions by class (prompt, action, tool) [positions]."""
    decode_tokens: float
    """Decode-forwarded positions (every sampled token but each invocation's last) [positions]."""
    sampled_tokens: float
    """Sampled tokens [tokens]."""
    decode_context_mean: float
    """Mean cached context of a decode step [positions]."""
    score_tokens: float
    """Positions a teacher forwards to score the kept records [positions]."""
    score_pairs: float
    """Causal attention pairs of the teacher's forward [pairs]."""
    score_pairs_window: float
    """Causal attention pairs of the teacher's forward on sliding-window layers [pairs]."""
    trained_positions: float
    """Positions the trainer trains on per step [positions]."""
    record_lengths_kept: "np.ndarray"
    """Lengths of the sampled records the trainer keeps [positions]."""
    sampled_per_conversation: "np.ndarray"
    """Sampled tokens per conversation, for the tail [tokens]."""
    wait_per_conversation: "np.ndarray"
    """Tool wait per conversation [s]."""
    prefill_per_conversation: "np.ndarray"
    """Prefill-forwarded positions per conversation [positions]."""
    turn_sampled: "np.ndarray"
    """Sampled tokens of every invocation that ran, flattened [tokens]."""
    reused_across_turns: float = 0.0
    """Positions each conversation reuses from its own earlier turns, per conversation (the
    prefixes a tool wait can lose to eviction) [positions]."""
    record_positions: float = 0.0
    """Positions of the records the trainer forwards per step (prompt, actions and tool
    observations of the kept records) [positions]."""
    invocations_per_conversation: float = 1.0
    """Mean engine invocations (turns) per conversation [invocations]."""
    conversations_trained: float = 0.0
    """Conversations the trainer trains on per step, ``prompts x samples`` [conversations]."""
    trained_per_conversation: "np.ndarray | None" = None
    """Positions the trainer trains on per sampled conversation [positions]."""
    score_per_conversation: "np.ndarray | None" = None
    """Positions a teacher forwards to score each sampled conversation (0 when not scored) [positions]."""
    tail_context: tuple[float, float] = (0.0, 1.0)
    """``(c0, g)``: a conversation that has sampled ``k`` tokens holds about ``c0 + g k`` positions
    (``c0`` the mean first input, ``g`` record positions after the input per sampled token)."""


def step_work(
    workload: "Workload", spec: "ModelSpec", sample: "Conversations", counts: dict[str, Any], aux: dict[str, Any]
) -> StepWork:
    """Turn sampled conversations into the work of one trained step.

    Per invocation ``j`` with input ``I``, reused prefix ``h`` and ``a`` sampled tokens::

        prefill tokens  = I - h,   pairs = causal_pairs(h, I - h)   (windowed on sliding layers)
        decode tokens   = a - 1,   sum of decode contexts = (a - 1) I + (a - 1)(a - 2) / 2

    Means over the sample are scaled by ``prompts x samples / (1 - filtered_group_fraction)``
    (conversations generated per trained step); trained positions by ``prompts x samples``. For
    a ``serving`` workload with an arrival rate the "step" is one second of traffic.

    Parameters
    ----------
    sample : Conversations
        The sampled conversations (:func:`capplan.ledger.sample_conversations`).
    counts, aux : dict
        Their position counters (:func:`capplan.ledger.count_positions`).
    """
    import numpy as np

    from capplan.roofline import causal_pairs

    window = spec.window_tokens
    invoked = sample.invoked if workload.has_rollout else np.zeros_like(sample.invoked)
    input_tokens = np.where(invoked, sample.inputs, 0).astype(float)
    reused_tokens = np.minimum(aux["claimed"], sample.inputs).astype(float) * invoked
    sampled = np.where(invoked, sample.actions, 0).astype(float)
    new_tokens = input_tokens - reused_tokens
    pairs = np.where(invoked, causal_pairs(reused_tokens, new_tokens), 0.0)
    pairs_window = np.where(invoked, causal_pairs(reused_tokens, new_tokens, window), 0.0) if math.isfinite(window) else pairs
    decode_tokens = np.maximum(sampled - 1, 0)
    # decode step k (1..a-1) finds I + k - 1 positions cached
    decode_context = decode_tokens * input_tokens + decode_tokens * (decode_tokens - 1) / 2
    sample_size = sample.n
    filtered = workload.training.filtered_group_fraction
    trained_conversations = workload.volume.conversations_per_step
    if workload.method == "serving" and workload.serving is not None:
        trained_conversations = workload.serving.arrival_rate_per_s  # a serving "step" is one second of traffic
    generated = trained_conversations / (1 - filtered)
    scale = generated / sample_size
    kept = aux["kept"]
    record_lengths = sample.record_length.astype(float)
    teacher = int(workload.teacher_scores)
    score_lengths = record_lengths[kept] if teacher else np.zeros(0)
    prefill_by_class = counts["prefill_forwarded"].sum(0).astype(float) * scale
    decode_total = float(decode_tokens.sum())
    across_turns = reused_tokens.copy()
    across_turns[:, 0] = 0.0  # turn 1 reuses only a sibling's prompt (group sharing), never its own past
    return StepWork(
        conversations=generated,
        prefill_tokens=float(new_tokens.sum()) * scale,
        prefill_pairs=float(pairs.sum()) * scale,
        prefill_pairs_window=float(pairs_window.sum()) * scale,
        prefill_kv_read=float(reused_tokens.sum()) * scale,
        invocations=float(invoked.sum()) * scale,
        prefill_by_class=(float(prefill_by_class[0]), float(prefill_by_class[1]), float(prefill_by_class[2])),
        decode_tokens=decode_total * scale,
        sampled_tokens=float(sampled.sum()) * scale,
        decode_context_mean=float(decode_context.sum() / decode_total) if decode_total else 0.0,
        score_tokens=float(score_lengths.sum()) * scale,
        score_pairs=float(causal_pairs(0, score_lengths).sum()) * scale if teacher else 0.0,
        score_pairs_window=float(causal_pairs(0, score_lengths, window).sum()) * scale if teacher else 0.0,
        trained_positions=float(counts["trained"].sum()) * trained_conversations / sample_size,
        record_lengths_kept=record_lengths[kept],
        sampled_per_conversation=sampled.sum(1),
        wait_per_conversation=sample.waits_s.sum(1) if workload.has_rollout else np.zeros(sample_size),
        prefill_per_conversation=new_tokens.sum(1),
        turn_sampled=sampled[invoked & (sampled > 0)],
        reused_across_turns=float(across_turns.sum()) / sample_size,
        record_positions=float(record_lengths[kept].sum()) * trained_conversations / sample_size,
        invocations_per_conversation=float(invoked.sum()) / sample_size,
        conversations_trained=float(trained_conversations),
        tail_context=_tail_context(sample, sampled),
        score_per_conversation=np.where(kept, record_lengths, 0.0) * teacher,
        trained_per_conversation=counts["trained"].sum(1).astype(float),
    )


def _tail_context(sample: "Conversations", sampled: "np.ndarray") -> tuple[float, float]:
    """``(c0, g)`` of :attr:`StepWork.tail_context` from the sample."""
    first_input = sample.inputs[:, 0].astype(float)
    total_sampled = sampled.sum(1)
    grown = sample.record_length.astype(float) - first_input
    g = float(grown.sum() / total_sampled.sum()) if total_sampled.sum() > 0 else 1.0
    return float(first_input.mean()), max(g, 1.0)


def filter_factor(workload: "Workload") -> float:
    """How much filtering multiplies rollout work per trained step: ``1 / (1 - filtered_group_fraction)``
    (:func:`capplan.ledger.generated_per_trained`)."""
    from capplan.ledger import generated_per_trained

    return generated_per_trained(workload)


@dataclass(frozen=True)
class Prepared:
    """A workload's sampled conversations and what follows from them alone (model-dependent work)."""

    sample: "Conversations"
    """The sampled conversations."""
    counts: dict[str, Any]
    """Their position counters (:func:`capplan.ledger.count_positions`)."""
    aux: dict[str, Any]
    """The counters' raw quantities (reuse claimed, records kept)."""
    ledger: "Ledger"
    """The ledger of the same sample."""
    work: StepWork
    """The work of one trained step."""
    forward_flops_per_conversation: float
    """One forward pass over a conversation's kept record, averaged over the sample [FLOP]."""
    trainer_passes: "TrainerPasses"
    """Forward-equivalent passes of a trainer step (:func:`capplan.trainer.trainer_passes`)."""
    trainer_flops: float
    """FLOPs of one trainer step (0 without a trainer) [FLOP]."""


def prepare(workload: "Workload", spec: "ModelSpec", conversations: int | None = None) -> Prepared:
    """Sample ``workload`` once and derive its step work and trainer FLOPs for ``spec``.

    Parameters
    ----------
    conversations : int, optional
        Monte Carlo sample size [conversations]; default the workload's (one for a fixed
        workload, exactly).

    Notes
    -----
    ``trainer FLOPs = passes x forward FLOPs per conversation x prompts x samples``, where the
    passes count log-prob recomputation only with a rollout engine
    (:func:`capplan.trainer.trainer_passes`).

    Raises
    ------
    InputError
        A workload with a rollout engine whose every prompt fills ``conversation.max_context``
        (no turn can start, nothing is generated).
    """
    from capplan.ledger import count_positions, ledger_from_conversations, ledger_sample_size, sample_conversations
    from capplan.trainer import forward_flops, trainer_passes

    size = ledger_sample_size(workload, conversations)
    sample = sample_conversations(workload, n=size)
    if workload.has_rollout and not sample.invoked.any():
        from capplan.errors import InputError

        limit = workload.conversation.max_context
        raise InputError(
            f"workload {workload.name}: no conversation can start a turn, every sampled prompt filling conversation.max_context "
            f"({limit:,} tokens) so nothing is generated; raise max_context (or --max-model-len) above the prompt lengths"
        )
    counts, aux = count_positions(workload, sample)
    ledger = ledger_from_conversations(workload, sample, counts, aux)
    work = step_work(workload, spec, sample, counts, aux)
    per_conversation = forward_flops(spec, work.record_lengths_kept) / max(sample.n, 1)
    training = workload.training
    passes = trainer_passes(training.recompute_logprobs, training.reference_forward, has_rollout=workload.has_rollout)
    flops = passes.count * per_conversation * workload.volume.conversations_per_step if workload.has_trainer else 0.0
    return Prepared(sample, counts, aux, ledger, work, per_conversation, passes, flops)
