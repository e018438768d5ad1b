"""The per-token-class ledger: which positions were recorded, sampled, forwarded, hit, trained, scored.

Counters (each split by token class ``prompt`` / ``action`` / ``tool`` and ``total``):

``recorded``
    Positions in the final trajectory record.
``sampled``
    Positions chosen by the policy (model actions). Zero for ``sft``: its actions come from a
    dataset, no rollout engine runs in the update loop.
``prefill_forwarded``
    Input positions processed by prefill, over every invocation, replays counted, cache hits
    excluded.
``cache_hit``
    Input positions served from a reused, previously computed prefix. A position counts as a hit
    only if an earlier invocation actually computed it: knowing its token ID is not enough (the
    last token sampled in a turn is never forwarded before that request ends). The samples of a
    GRPO group share their prompt when the engine caches prefixes (``cache.share_group_prompt``):
    the group's first sample prefills it and the others count all but its last position as a hit
    (the last is forwarded again for the first token's logits, as vLLM does on a full prefix hit), so
    the prompt is prefilled once per group, plus one position per other sample. A serving
    workload's shared prefix (``serving.shared_prefix_tokens``) was computed by an earlier
    request: it is a hit for the share ``serving.prefix_hit_rate`` of requests
    (:func:`shared_prefix_hits`).
``decode_forwarded``
    Positions forwarded by decode steps: every sampled token but the last of each invocation
    (the first sampled token comes from the prefill's logits).
``trained``
    Positions that carry loss (the classes in ``training.loss_on``; none of a truncated
    conversation when ``training.drop_truncated``).
``scored``
    Positions forwarded by a teacher or reference model to score known tokens (the whole record,
    once per scorer, causally; nothing is sampled).

Waiting is not work: tool-wait time is reported per conversation and never enters a forwarded
counter.

A workload whose counts are all fixed is computed exactly, in integers, from one conversation. A
workload with distributions is estimated by a seeded, vectorised Monte Carlo over
``sampling.conversations`` conversations: per-conversation means and p50/p95, and per-step totals
(mean x prompts x samples).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from capplan.workload import TOKEN_CLASSES, Workload

if TYPE_CHECKING:
    import numpy as np

COUNTERS: tuple[str, ...] = (
    "recorded",
    "sampled",
    "prefill_forwarded",
    "cache_hit",
    "decode_forwarded",
    "trained",
    "scored",
)
"""Ledger counter names, in display order (a JSON contract)."""

CLASSES_AND_TOTAL: tuple[str, ...] = (*TOKEN_CLASSES, "total")

TRAINED_SIDE: tuple[str, ...] = ("trained", "scored")
"""Counters of the trained conversations only: a filtered group is generated (recorded, sampled,
forwarded) but neither scored nor trained."""


def generated_per_trained(workload: "Workload") -> float:
    """Conversations generated per trained one: ``1 / (1 - training.filtered_group_fraction)`` (1
    without filtering or a trainer)."""
    return 1.0 / (1.0 - workload.training.filtered_group_fraction)

#: Stand-in for "no context limit" that keeps int64 arithmetic safe.
_NO_LIMIT = 2**40


@dataclass(frozen=True)
class Check:
    """One reconciliation identity and whether it holds."""

    name: str
    ok: bool
    detail: str

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "ok": self.ok, "detail": self.detail}


@dataclass(frozen=True)
class Conversations:
    """Sampled conversations as arrays: ``n`` conversations x ``T`` turns (int64 token counts).

    Counts are after truncation at ``max_context``; turns that never ran have zero counts and
    ``invoked`` False.
    """

    prompt: "np.ndarray"  # (n,) prompt positions in the record
    actions: "np.ndarray"  # (n, T) sampled positions per turn
    tools: "np.ndarray"  # (n, T) tool-observation positions after each turn
    waits_s: "np.ndarray"  # (n, T) tool wait after each turn [s]
    invoked: "np.ndarray"  # (n, T) bool: the turn's invocation ran
    tool_called: "np.ndarray"  # (n, T) bool: a tool call followed the turn
    inputs: "np.ndarray"  # (n, T) input length of each invocation [positions]
    truncated: "np.ndarray"  # (n,) bool: cut at max_context
    record_length: "np.ndarray"  # (n,) final context length, computed independently of the class sums

    @property
    def n(self) -> int:
        return int(self.prompt.shape[0])


def ledger_sample_size(workload: Workload, conversations: int | None = None) -> int:
    """Conversations a ledger samples: one for a fixed workload, one GRPO group when its samples
    share the prompt's prefill, else ``conversations`` (default ``sampling.conversations``)."""
    if workload.conversation.is_fixed():
        return workload.volume.samples_per_prompt if shares_prompt(workload) else 1
    return conversations or workload.sampling.conversations


def shares_prompt(workload: Workload) -> bool:
    """Whether the samples of a group share the prompt's prefill (a rollout engine, groups of more than one)."""
    return workload.has_rollout and workload.cache.shares_group_prompt and workload.volume.samples_per_prompt > 1


def sample_conversations(workload: Workload, n: int | None = None, seed: int | None = None) -> Conversations:
    """Draw ``n`` conversations of ``workload`` (one, exactly, when every count is fixed).

    Parameters
    ----------
    workload : Workload
        The validated workload.
    n : int, optional
        Number of conversations [conversations]; default ``sampling.conversations``, or 1 for a
        fixed workload.
    seed : int, optional
        Seed of ``numpy.random.default_rng``; default ``sampling.seed``.

    Notes
    -----
    Conversations come in GRPO groups of ``samples_per_prompt`` (conversation ``i`` belongs to
    group ``i // samples_per_prompt``); the samples of a group share one prompt draw.

    Truncation at ``max_context`` ``M``: a turn cannot start once the context holds ``M``
    positions; an action that would pass ``M`` is cut there and ends the conversation; a tool
    observation is clipped to fit. An action longer than ``max_response_tokens`` is cut there and
    ends the conversation. Any of these marks the conversation truncated.
    """
    import numpy as np

    conv = workload.conversation
    fixed = conv.is_fixed()
    if n is None:
        n = ledger_sample_size(workload)
    rng = np.random.default_rng(workload.sampling.seed if seed is None else seed)
    group = workload.volume.samples_per_prompt
    turns = conv.turn_list()
    T = len(turns)

    def draw(dist: Any) -> "np.ndarray":
        if dist is None:
            return np.zeros(n, dtype=np.int64)
        return np.rint(dist.sample(rng, n)).astype(np.int64)

    def draw_n(dist: Any, count: int) -> "np.ndarray":
        return np.rint(dist.sample(rng, count)).astype(np.int64)

    def draw_s(dist: Any) -> "np.ndarray":
        return np.zeros(n) if dist is None else dist.sample(rng, n)

    # the samples of a group answer the same prompt: one draw per group
    prompt = np.repeat(draw_n(conv.prompt_tokens, -(-n // group)), group)[:n] if group > 1 else draw(conv.prompt_tokens)
    if conv.num_turns is not None:
        planned_turns = np.maximum(draw(conv.num_turns), 1)
    else:
        planned_turns = np.full(n, T, dtype=np.int64)
    limit = conv.max_context if conv.max_context is not None else _NO_LIMIT
    gen_limit = conv.max_response_tokens if conv.max_response_tokens is not None else _NO_LIMIT

    actions = np.zeros((n, T), dtype=np.int64)
    tools = np.zeros((n, T), dtype=np.int64)
    waits = np.zeros((n, T))
    invoked = np.zeros((n, T), dtype=bool)
    tool_called = np.zeros((n, T), dtype=bool)
    inputs = np.zeros((n, T), dtype=np.int64)

    truncated = prompt > limit
    ctx = np.minimum(prompt, limit)
    prompt = ctx.copy()
    alive = ~truncated
    for j, turn in enumerate(turns):
        a_raw, o_raw, w_raw = draw(turn.action_tokens), draw(turn.tool_tokens), draw_s(turn.tool_wait_s)
        start = alive & (j < planned_turns)
        blocked = start & (ctx >= limit)
        truncated |= blocked
        alive &= ~blocked
        start &= ~blocked
        a = np.where(start, np.minimum(a_raw, gen_limit), 0)
        cut = start & ((ctx + a > limit) | (a_raw > gen_limit))
        a = np.where(ctx + a > limit, limit - ctx, a)
        truncated |= cut
        alive &= ~cut
        inputs[:, j] = np.where(start, ctx, 0)
        ctx = ctx + a
        called = start & ~cut & turn.has_tool & (j < planned_turns - 1 if conv.num_turns is not None else True)
        o = np.where(called, np.minimum(o_raw, limit - ctx), 0)
        ocut = called & (ctx + o_raw > limit)
        truncated |= ocut
        alive &= ~ocut
        ctx = ctx + o
        actions[:, j], tools[:, j], invoked[:, j], tool_called[:, j] = a, o, start, called
        waits[:, j] = np.where(called, w_raw, 0.0)
    return Conversations(prompt, actions, tools, waits, invoked, tool_called, inputs, truncated, ctx)


@dataclass(frozen=True)
class Ledger:
    """The ledger of one workload: counters per conversation and per step, with checks.

    ``per_conversation`` and ``per_step`` map counter -> class (``prompt``, ``action``, ``tool``,
    ``total``) -> positions. They are integers when ``exact`` (every count fixed), else means.
    """

    workload: str
    method: str
    exact: bool
    conversations_sampled: int
    conversations_per_step: int
    """Conversations one trained step trains on (``prompts_per_step x samples_per_prompt``)."""
    conversations_generated_per_step: float
    """Conversations generated per trained step: more when ``training.filtered_group_fraction``
    drops groups after generation (:func:`generated_per_trained`)."""
    per_conversation: dict[str, dict[str, float]]
    per_step: dict[str, dict[str, float]]
    per_conversation_p50: dict[str, dict[str, float]]
    per_conversation_p95: dict[str, dict[str, float]]
    conversation_stats: dict[str, float]
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when every check holds."""
        return all(c.ok for c in self.checks)

    def as_dict(self) -> dict[str, Any]:
        """The JSON contract: ``workload``, ``per_conversation``, ``per_step``, ``checks`` and more."""
        return {
            "workload": self.workload,
            "method": self.method,
            "exact": self.exact,
            "conversations_sampled": self.conversations_sampled,
            "conversations_per_step": self.conversations_per_step,
            "conversations_generated_per_step": self.conversations_generated_per_step,
            "per_conversation": self.per_conversation,
            "per_step": self.per_step,
            "per_conversation_p50": self.per_conversation_p50,
            "per_conversation_p95": self.per_conversation_p95,
            "conversation_stats": self.conversation_stats,
            "checks": [c.as_dict() for c in self.checks],
        }


def _overlap_by_class(conv: Conversations, hits: "np.ndarray", j: int) -> "np.ndarray":
    """Split the first ``hits`` positions of turn ``j``'s input into (prompt, action, tool) counts.

    Turn ``j``'s input is the prompt followed by ``a_0, o_0, ..., a_{j-1}, o_{j-1}``.
    """
    import numpy as np

    out = np.zeros((conv.n, 3), dtype=np.int64)
    start = np.zeros(conv.n, dtype=np.int64)
    segments = [(0, conv.prompt)]
    for k in range(j):
        segments += [(1, conv.actions[:, k]), (2, conv.tools[:, k])]
    for cls, length in segments:
        out[:, cls] += np.clip(hits - start, 0, length)
        start = start + length
    return out


def shared_prefix_hits(prompt_tokens: "np.ndarray", shared_prefix_tokens: int, hit_rate: float) -> "np.ndarray":
    """Prompt positions each request reuses from a prefix all requests share [positions].

    Request ``i`` hits when ``floor((i + 1) h) > floor(i h)`` (``h`` the hit rate): exactly
    ``floor(n h)`` of the first ``n`` requests hit, evenly spread, without a random draw. A hit
    reuses ``min(shared prefix, prompt - 1)`` positions: the prompt's last position is always
    computed, since its logits give the first token.

    Examples
    --------
    >>> import numpy as np
    >>> shared_prefix_hits(np.array([100, 100, 100, 100]), 60, 0.5).tolist()
    [0, 60, 0, 60]
    >>> shared_prefix_hits(np.array([40, 100]), 60, 1.0).tolist()
    [39, 60]
    """
    import numpy as np

    n = prompt_tokens.shape[0]
    if shared_prefix_tokens <= 0 or hit_rate <= 0:
        return np.zeros(n, dtype=np.int64)
    i = np.arange(n, dtype=np.float64)
    hit = np.floor((i + 1) * hit_rate + 1e-9) > np.floor(i * hit_rate + 1e-9)
    reuse = np.minimum(shared_prefix_tokens, np.maximum(prompt_tokens - 1, 0))
    return np.where(hit, reuse, 0).astype(np.int64)


def count_positions(workload: Workload, conv: Conversations) -> tuple[dict[str, "np.ndarray"], dict[str, Any]]:
    """Per-conversation counters and the raw quantities the checks compare them with.

    Returns
    -------
    counts : dict
        counter name -> int64 array of shape (n, 3): positions per conversation for the
        classes (prompt, action, tool).
    aux : dict
        ``inputs`` (n,) sum of invocation input lengths; ``computed`` (n, T) positions earlier
        invocations computed before each turn; ``claimed`` (n, T) reuse claimed per turn;
        ``invocations`` (n,); ``invocations_with_output`` (n,); ``kept`` (n,) bool.
    """
    import numpy as np

    n, T = conv.actions.shape
    rollout = workload.has_rollout
    reuse = workload.cache.reuse
    group = workload.volume.samples_per_prompt
    # a GRPO group's first sample prefills the shared prompt; the others find it computed
    sibling = (np.arange(n) % group != 0) if shares_prompt(workload) else np.zeros(n, dtype=bool)
    evict = workload.cache.kv_during_tool_wait == "evict"
    zeros3 = np.zeros((n, 3), dtype=np.int64)

    recorded = np.stack([conv.prompt, conv.actions.sum(1), conv.tools.sum(1)], axis=1)
    sampled = zeros3.copy()
    prefill, hit, decode = zeros3.copy(), zeros3.copy(), zeros3.copy()
    computed = np.zeros((n, T), dtype=np.int64)
    claimed = np.zeros((n, T), dtype=np.int64)
    invoked = conv.invoked if rollout else np.zeros_like(conv.invoked)
    if rollout:
        sampled[:, 1] = conv.actions.sum(1)
        cum_a = np.zeros(n, dtype=np.int64)  # actions before turn j
        cum_o = np.zeros(n, dtype=np.int64)  # tool observations before turn j
        auto_hit = zeros3.copy()  # class split of what earlier invocations computed
        for j in range(T):
            act = invoked[:, j]
            if j > 0:
                prev = conv.inputs[:, j - 1] + np.maximum(conv.actions[:, j - 1] - 1, 0)
                keep_kv = ~conv.tool_called[:, j - 1] if evict else np.ones(n, dtype=bool)
                live = invoked[:, j - 1] & keep_kv
                computed[:, j] = np.where(live, prev, 0)
                # turn j-1 computed its whole input (prompt, a_<j-1, o_<j-1) plus all but its last action
                auto_hit = np.where(
                    live[:, None],
                    np.stack(
                        [conv.prompt, cum_a - conv.actions[:, j - 1] + np.maximum(conv.actions[:, j - 1] - 1, 0),
                         cum_o - conv.tools[:, j - 1]],
                        axis=1,
                    ),
                    0,
                )
            whole = np.stack([conv.prompt, cum_a, cum_o], axis=1)
            if j == 0:  # a sibling reuses all but the prompt's last position, which is forwarded for its logits
                shared = np.maximum(conv.prompt - 1, 0)
                computed[:, 0] = np.where(sibling, shared, 0)
                auto_hit = np.where(sibling[:, None], np.stack([shared, 0 * cum_a, 0 * cum_o], axis=1), 0)
            if reuse == "auto":
                claim = computed[:, j]
                h = auto_hit
            elif reuse == "explicit":
                assert workload.cache.reused_prefix_tokens is not None
                claim = np.full(n, workload.cache.reused_prefix_tokens[j], dtype=np.int64)
                if j == 0:
                    claim = np.maximum(claim, computed[:, 0])
                h = _overlap_by_class(conv, np.minimum(claim, conv.inputs[:, j]), j)
            else:
                claim = np.zeros(n, dtype=np.int64)
                h = zeros3
            claim = np.where(act, claim, 0)
            claimed[:, j] = claim
            h = np.where(act[:, None], h, 0)
            hit += h
            prefill += np.where(act[:, None], whole - h, 0)
            decode[:, 1] += np.where(act, np.maximum(conv.actions[:, j] - 1, 0), 0)
            cum_a = cum_a + conv.actions[:, j]
            cum_o = cum_o + conv.tools[:, j]

    if workload.serving is not None and workload.serving.shared_prefix_tokens and rollout:
        shared = shared_prefix_hits(
            np.where(invoked[:, 0], conv.inputs[:, 0], 0), workload.serving.shared_prefix_tokens, workload.serving.prefix_hit_rate
        )
        hit[:, 0] += shared
        prefill[:, 0] -= shared
        claimed[:, 0] += shared  # reused by the first invocation, computed by an earlier request
        computed[:, 0] += shared

    kept = ~(conv.truncated & workload.training.drop_truncated)
    loss = np.array([c in workload.training.loss_on for c in TOKEN_CLASSES])
    trained = recorded * loss[None, :] * kept[:, None] * int(workload.has_trainer)
    scored = recorded * kept[:, None] * workload.scorers

    counts = {
        "recorded": recorded,
        "sampled": sampled,
        "prefill_forwarded": prefill,
        "cache_hit": hit,
        "decode_forwarded": decode,
        "trained": trained,
        "scored": scored,
    }
    aux = {
        "inputs": np.where(invoked, conv.inputs, 0).sum(1),
        "computed": computed,
        "claimed": claimed,
        "input_per_turn": np.where(invoked, conv.inputs, 0),
        "invocations": invoked.sum(1),
        "invocations_with_output": (invoked & (conv.actions > 0)).sum(1),
        "kept": kept,
        "record_length": conv.record_length,
    }
    return counts, aux


def run_checks(workload: Workload, totals: dict[str, "np.ndarray"], aux: dict[str, Any]) -> list[Check]:
    """Reconciliation identities over summed counters (``totals``: counter -> (3,) int64).

    Each identity compares a counter with a quantity computed another way, so a ledger (or a log
    reconciled against one) that breaks it is caught.
    """
    import numpy as np

    def tot(name: str) -> int:
        return int(totals[name].sum())

    checks: list[Check] = []
    rec = totals["recorded"]
    record_len = int(aux["record_length"].sum())
    checks.append(
        Check(
            "recorded_total_is_sum_of_classes",
            tot("recorded") == record_len,
            f"prompt {rec[0]:,} + action {rec[1]:,} + tool {rec[2]:,} = {tot('recorded'):,}; record length {record_len:,}",
        )
    )
    if workload.has_rollout:
        ok = int(totals["sampled"][1]) == int(rec[1]) and int(totals["sampled"][0] + totals["sampled"][2]) == 0
        detail = f"sampled {tot('sampled'):,} = recorded actions {rec[1]:,}"
    else:
        ok = tot("sampled") == 0
        detail = f"sampled {tot('sampled')} = 0: {workload.method} has no rollout engine in its update loop"
    checks.append(Check("sampled_equals_recorded_actions", ok, detail))

    inputs = int(aux["inputs"].sum())
    fwd = tot("prefill_forwarded") + tot("cache_hit")
    checks.append(
        Check(
            "prefill_plus_cache_hit_equals_inputs",
            fwd == inputs,
            f"prefill_forwarded {tot('prefill_forwarded'):,} + cache_hit {tot('cache_hit'):,} = {fwd:,}; "
            f"sum of invocation inputs {inputs:,}",
        )
    )

    claimed, computed, per_turn = aux["claimed"], aux["computed"], aux["input_per_turn"]
    unbacked = claimed > computed
    if unbacked.any():
        i, j = map(int, np.argwhere(unbacked)[0])
        frac = unbacked.any(1).mean()
        detail = (
            f"turn {j + 1} claims {claimed[i, j]} reused positions but earlier invocations computed only "
            f"{computed[i, j]} (the last sampled token of a turn is never forwarded)"
        )
        if claimed.shape[0] > 1:
            detail += f"; {frac:.1%} of sampled conversations affected"
        checks.append(Check("cache_hits_backed_by_computed_prefix", False, detail))
    else:
        checks.append(
            Check(
                "cache_hits_backed_by_computed_prefix",
                True,
                f"cache_hit {tot('cache_hit'):,} <= positions computed by earlier invocations",
            )
        )
    over = claimed > per_turn
    if workload.cache.reuse == "explicit":
        if over.any():
            i, j = map(int, np.argwhere(over)[0])
            checks.append(
                Check(
                    "reuse_within_input",
                    False,
                    f"turn {j + 1} claims {claimed[i, j]} reused positions but its input has only {per_turn[i, j]}",
                )
            )
        else:
            checks.append(Check("reuse_within_input", True, "every claimed reuse fits in its turn's input"))

    tr = totals["trained"]
    loss = [c in workload.training.loss_on for c in TOKEN_CLASSES]
    bad = [
        c
        for k, c in enumerate(TOKEN_CLASSES)
        if (loss[k] and tr[k] > rec[k]) or (not loss[k] and tr[k] != 0)
    ]
    checks.append(
        Check(
            "trained_within_loss_classes",
            not bad,
            f"trained {tot('trained'):,} within recorded positions of {'/'.join(workload.training.loss_on)}"
            if not bad
            else f"trained positions outside the recorded loss classes in: {', '.join(bad)}",
        )
    )

    dec = totals["decode_forwarded"]
    with_output = int(aux["invocations_with_output"].sum())
    expected = int(totals["sampled"][1]) - with_output
    checks.append(
        Check(
            "decode_forwarded_matches_sampled",
            int(dec[1]) == expected and int(dec[0] + dec[2]) == 0,
            f"decode_forwarded {tot('decode_forwarded'):,} = sampled {int(totals['sampled'][1]):,} - "
            f"{with_output:,} invocations (each invocation's last sampled token is never forwarded)",
        )
    )

    kept_rec = int(aux["kept_recorded"])
    checks.append(
        Check(
            "scored_equals_record_per_scorer",
            tot("scored") == workload.scorers * kept_rec,
            f"scored {tot('scored'):,} = {workload.scorers} scorer(s) x {kept_rec:,} recorded positions kept",
        )
    )
    return checks


def _by_class(arr: "np.ndarray", exact: bool) -> dict[str, float]:
    vals = [*arr.tolist(), arr.sum().item()]
    if exact:
        return {c: int(v) for c, v in zip(CLASSES_AND_TOTAL, vals)}
    return {c: float(v) for c, v in zip(CLASSES_AND_TOTAL, vals)}


def compute_ledger(workload: Workload, conversations: int | None = None, seed: int | None = None) -> Ledger:
    """Compute the ledger of ``workload``.

    Parameters
    ----------
    workload : Workload
        The validated workload.
    conversations : int, optional
        Monte Carlo sample size [conversations] (ignored for a fixed workload, which is exact).
    seed : int, optional
        Overrides ``sampling.seed``.

    Returns
    -------
    Ledger

    Examples
    --------
    The replay example: 12 prompt tokens, two turns of 4 actions, 5 tool tokens between them,
    each turn a fresh request with no reuse:

    >>> from capplan.workload import load_workload
    >>> led = compute_ledger(load_workload("seed-replay"))
    >>> led.per_conversation["prefill_forwarded"]["total"], led.per_conversation["recorded"]["total"]
    (33, 25)
    """
    conv = sample_conversations(workload, n=ledger_sample_size(workload, conversations), seed=seed)
    return ledger_from_conversations(workload, conv, *count_positions(workload, conv))


def ledger_from_conversations(
    workload: Workload, conv: Conversations, counts: dict[str, "np.ndarray"], aux: dict[str, Any]
) -> Ledger:
    """Summarise per-conversation counts (from :func:`count_positions`) into a :class:`Ledger`.

    Exact (integers) when the workload is fixed and ``conv`` holds its one conversation.
    """
    import numpy as np

    exact = workload.conversation.is_fixed() and conv.n == 1
    n = conv.n
    totals = {k: v.sum(0) for k, v in counts.items()}
    aux["kept_recorded"] = int(counts["recorded"][aux["kept"]].sum())
    checks = run_checks(workload, totals, aux)

    N = workload.volume.conversations_per_step
    factor = generated_per_trained(workload)
    generated = N if factor == 1.0 else N * factor  # an exact ledger stays in integers without filtering

    def step_counts(per_conv: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        return {k: {c: v * (N if k in TRAINED_SIDE else generated) for c, v in d.items()} for k, d in per_conv.items()}

    if exact:
        per_conv = {k: _by_class(v[0], True) for k, v in counts.items()}
        p50 = p95 = per_conv
        per_step = step_counts(per_conv)
    else:
        per_conv = {k: _by_class(v.mean(0), False) for k, v in counts.items()}
        per_step = step_counts(per_conv)

        def pct(q: float) -> dict[str, dict[str, float]]:
            out = {}
            for k, v in counts.items():
                cols = np.concatenate([v, v.sum(1, keepdims=True)], axis=1)
                out[k] = {c: float(x) for c, x in zip(CLASSES_AND_TOTAL, np.percentile(cols, q, axis=0))}
            return out

        p50, p95 = pct(50), pct(95)

    waits = conv.waits_s.sum(1)
    stats = {
        "invocations": float(aux["invocations"].mean()),
        "tool_calls": float((conv.tool_called.sum(1) if workload.has_rollout else np.zeros(n)).mean()),
        "tool_wait_s": float(waits.mean()) if workload.has_rollout else 0.0,
        "tool_wait_s_p95": float(np.percentile(waits, 95)) if workload.has_rollout else 0.0,
        "truncated_fraction": float(conv.truncated.mean()),
        "record_length_p50": float(np.percentile(conv.record_length, 50)),
        "record_length_p95": float(np.percentile(conv.record_length, 95)),
        "record_length_max": int(conv.record_length.max()),
    }
    if exact:
        stats = {k: (int(v) if float(v).is_integer() and k != "tool_wait_s" else v) for k, v in stats.items()}
    return Ledger(
        workload=workload.name,
        method=workload.method,
        exact=exact,
        conversations_sampled=n,
        conversations_per_step=N,
        conversations_generated_per_step=generated,
        per_conversation=per_conv,
        per_step=per_step,
        per_conversation_p50=p50,
        per_conversation_p95=p95,
        conversation_stats=stats,
        checks=checks,
    )
