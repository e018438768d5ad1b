"""The trajectory-record format of ``capplan ledger reconcile``: one builder for every writer.

A record describes one finished conversation position by position (see ``docs/reconcile.md``)::

    {"id": 7, "counts": {"prompt": 3, "action": 2, "tool": 1}, "origin": "ppp" "aa" "t",
     "loss_mask": "000110", "turns": [[3, 5]], "cached_tokens": [0], "prefill_tokens": [3],
     "logprobs": [0.0, 0.0], "policy_version": 0, "stop_reason": "stop", "tool_wait_s": 1.5}

``origin`` tags every position ``p`` (prompt), ``a`` (action: sampled) or ``t`` (tool
observation); ``turns`` are the ``[start, end)`` spans of each invocation's sampled tokens;
``cached_tokens`` and ``prefill_tokens`` are, per invocation, the input positions reused from
the prefix cache and those forwarded. The plan (:func:`capplan.reconcile.plan_records`), the
simulator and the benchmarks' generator all build records here, so they agree on the format.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

TOKEN_LETTERS = {"prompt": "p", "action": "a", "tool": "t"}
"""The ``origin`` letter of each token class."""


def trajectory_record(
    record_id: Any,
    prompt_tokens: int,
    turns: Sequence[tuple[int, int]],
    cached_tokens: Sequence[int],
    *,
    loss_on: Iterable[str],
    truncated: bool,
    drop_truncated: bool,
    policy_version: int,
    tool_wait_s: float,
    logprob: float | None = 0.0,
    rollout: bool = True,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One record of a conversation, in the canonical key order.

    Parameters
    ----------
    record_id
        The record's ``id``.
    prompt_tokens : int
        Prompt positions [tokens].
    turns : sequence of (int, int)
        ``(action_tokens, tool_tokens)`` of each invocation, in order [tokens].
    cached_tokens : sequence of int
        Input positions of each invocation served from the prefix cache [tokens].
    loss_on : iterable of {"prompt", "action", "tool"}
        Token classes the trainer puts loss on.
    truncated : bool
        The conversation hit its length limit (``stop_reason`` ``length``).
    drop_truncated : bool
        A truncated conversation carries no loss.
    policy_version : int
        Policy version that generated it.
    tool_wait_s : float
        Total time waiting on tools [s].
    logprob : float or None
        Placeholder behaviour log-prob written for every sampled position; ``None`` omits the
        ``logprobs`` field.
    rollout : bool
        Whether an engine generated the record (``turns``, ``cached_tokens``,
        ``prefill_tokens`` and ``logprobs`` are written only then).
    extra : dict, optional
        Further fields appended after the standard ones (the reconciler ignores unknown ones).

    Examples
    --------
    >>> r = trajectory_record(0, 3, [(2, 1)], [0], loss_on=["action"], truncated=False,
    ...                       drop_truncated=True, policy_version=0, tool_wait_s=1.5)
    >>> r["origin"], r["loss_mask"], r["turns"], r["prefill_tokens"]
    ('pppaat', '000110', [[3, 5]], [3])
    """
    parts = ["p" * prompt_tokens]
    spans: list[list[int]] = []
    pos = prompt_tokens
    for a, t in turns:
        spans.append([pos, pos + a])
        parts.append("a" * a)
        parts.append("t" * t)
        pos += a + t
    origin = "".join(parts)
    keep = set() if (truncated and drop_truncated) else {TOKEN_LETTERS[c] for c in loss_on}
    loss = "".join("1" if ch in keep else "0" for ch in origin) if keep else "0" * len(origin)
    sampled = origin.count("a")
    rec: dict[str, Any] = {
        "id": record_id,
        "counts": {"prompt": prompt_tokens, "action": sampled, "tool": origin.count("t")},
        "origin": origin,
        "loss_mask": loss,
    }
    if rollout:
        rec["turns"] = spans
        rec["cached_tokens"] = list(cached_tokens)
        rec["prefill_tokens"] = [s - h for (s, _), h in zip(spans, cached_tokens)]
        if logprob is not None:
            rec["logprobs"] = [logprob] * sampled
    rec["policy_version"] = policy_version
    rec["stop_reason"] = "length" if truncated else "stop"
    rec["tool_wait_s"] = tool_wait_s
    if extra:
        rec.update(extra)
    return rec
