"""The simulator's conversation table: each drawn conversation's tokens and its simulated fate, as columns.

Conversations are drawn in chunks (:func:`chunk_drawer`) from
:func:`capplan.ledger.sample_conversations` and :func:`capplan.ledger.count_positions`, so the
simulator plays exactly the conversations ``capplan ledger`` counts. :class:`ConversationTable`
keeps them as a struct of arrays (one Python list per field, indexed by conversation): the
scheduler reads and updates single entries in its hot loop, where list indexing is the fastest
access CPython offers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    import numpy as np

    from capplan.workload import Workload

# Outcomes of a conversation (the trainer's verdict), stored as small ints in ``ConversationTable.outcome``.
OUTCOME_UNFINISHED = 0
"""Not (yet) ingested by the trainer."""
OUTCOME_ACCEPTED = 1
"""Trained on."""
OUTCOME_STALE = 2
"""Rejected: more than ``max_staleness`` policy versions old."""
OUTCOME_FILTERED = 3
"""Rejected: its group was filtered (``filtered_group_fraction``)."""
OUTCOME_SURPLUS = 4
"""Rejected: an oversampled group beyond the batch."""
OUTCOME_NAMES: tuple[str, ...] = ("unfinished", "accepted", "rejected_stale", "rejected_filtered", "rejected_surplus")
"""The name of each outcome, indexed by its code (the trajectory log's ``outcome`` field)."""


@dataclass(frozen=True)
class ConversationChunk:
    """One chunk of drawn conversations, as Python lists (one entry per conversation)."""

    prompt_tokens: list[int]
    """Prompt positions [tokens]."""
    action_tokens: list[list[int]]
    """Sampled positions of each turn [tokens]."""
    tool_tokens: list[list[int]]
    """Tool-observation positions after each turn [tokens]."""
    tool_wait_s: list[list[float]]
    """Tool wait after each turn [s]."""
    invoked: list[list[bool]]
    """Whether each turn's invocation ran."""
    tool_called: list[list[bool]]
    """Whether a tool call followed each turn."""
    input_positions: list[list[int]]
    """Input length of each invocation [positions]."""
    claimed_positions: list[list[int]]
    """Input positions of each invocation the ledger counts as a cache hit [positions]."""
    record_length: list[int]
    """Final context length [positions]."""
    truncated: list[bool]
    """Cut at ``max_context``."""
    sampled_tokens: list[int]
    """Sampled (policy) positions of the whole conversation [tokens]."""
    trained_tokens: list[int]
    """Positions the trainer puts loss on [tokens]."""
    group_filtered: list[bool]
    """Per prompt group: whether the group is filtered out."""
    max_record_length: int
    """Longest record in the chunk [positions] (for the KV fit check)."""
    shared_prompt: list[int]
    """Prompt positions a conversation finds computed by the first sample of its GRPO group
    (``cache.share_group_prompt``; 0 for a group's first sample) [positions]."""
    ledger: dict[str, "np.ndarray"]
    """The ledger's per-conversation counters (:func:`capplan.ledger.count_positions`)."""


def derive_seed(seed: int, *parts: int) -> int:
    """A 63-bit seed derived from ``seed`` and ``parts`` (independent streams per chunk and purpose)."""
    import numpy as np

    return int(np.random.SeedSequence([seed, *parts]).generate_state(1, np.uint64)[0] >> np.uint64(1))


def chunk_drawer(workload: "Workload", chunk_conversations: int, seed: int) -> Callable[[int], ConversationChunk]:
    """A function drawing chunk ``c`` of conversations with a seed derived from ``(seed, c)``.

    Each chunk holds a whole number of prompt groups (at least one), so the draw of chunk ``c``
    depends only on the seed and ``c``, never on how many chunks the run needed. Chunk 0 is drawn
    with the seed itself, so it holds exactly the conversations ``capplan ledger`` samples with
    ``--conversations`` equal to the chunk size.
    """
    import numpy as np

    from capplan.ledger import count_positions, sample_conversations, shares_prompt

    group_size = workload.volume.samples_per_prompt
    sharing = shares_prompt(workload)
    n = max(group_size, (chunk_conversations // group_size) * group_size)
    filtered_fraction = workload.training.filtered_group_fraction

    def draw(chunk: int) -> ConversationChunk:
        # chunk 0 is the ledger's own sample of n conversations (capplan ledger --conversations n)
        conv = sample_conversations(workload, n=n, seed=seed if chunk == 0 else derive_seed(seed, chunk, 0))
        counts, aux = count_positions(workload, conv)
        filtered = np.random.default_rng(derive_seed(seed, chunk, 1)).random(n // group_size) < filtered_fraction
        return ConversationChunk(
            prompt_tokens=conv.prompt.tolist(),
            action_tokens=conv.actions.tolist(),
            tool_tokens=conv.tools.tolist(),
            tool_wait_s=conv.waits_s.tolist(),
            invoked=conv.invoked.tolist(),
            tool_called=conv.tool_called.tolist(),
            input_positions=conv.inputs.tolist(),
            claimed_positions=np.minimum(aux["claimed"], conv.inputs).tolist(),
            record_length=conv.record_length.tolist(),
            truncated=conv.truncated.tolist(),
            sampled_tokens=conv.actions.sum(1).tolist(),
            trained_tokens=counts["trained"].sum(1).tolist(),
            group_filtered=filtered.tolist(),
            max_record_length=int(conv.record_length.max()),
            ledger=dict(counts),
            shared_prompt=np.where((np.arange(n) % group_size != 0) & sharing, conv.prompt, 0).tolist(),
        )

    return draw


class ConversationTable:
    """Every drawn conversation: its drawn tokens and its simulated state, one list per field.

    Lists grow in place as chunks are appended (:meth:`append`), so a reference to a column
    stays valid for the whole run.
    """

    def __init__(self) -> None:
        self.count = 0
        """Conversations drawn so far."""
        # drawn, per conversation (see ConversationChunk)
        self.prompt_tokens: list[int] = []
        self.action_tokens: list[list[int]] = []
        self.tool_tokens: list[list[int]] = []
        self.tool_wait_s: list[list[float]] = []
        self.invoked: list[list[bool]] = []
        self.tool_called: list[list[bool]] = []
        self.input_positions: list[list[int]] = []
        self.claimed_positions: list[list[int]] = []
        self.record_length: list[int] = []
        self.truncated: list[bool] = []
        self.sampled_tokens: list[int] = []
        self.trained_tokens: list[int] = []
        self.group_filtered: list[bool] = []
        """Per prompt group (conversation ``i`` is in group ``i // samples_per_prompt``)."""
        self.shared_prompt: list[int] = []
        """Prompt positions computed by the conversation's group leader (0 for a leader)."""
        self.ledger_chunks: list[dict[str, Any]] = []
        """The ledger's counters of each chunk."""
        # simulated, per conversation
        self.replica: list[int] = []
        """Replica serving the conversation (-1 before it starts)."""
        self.held_positions: list[int] = []
        """Positions whose KV the replica keeps while the conversation waits on a tool (0: none)."""
        self.policy_version: list[int] = []
        """Policy version of the replica when the first turn was admitted (-1 before)."""
        self.start_s: list[float] = []
        """Dispatch time [s] (NaN before)."""
        self.end_s: list[float] = []
        """Completion time [s] (NaN before)."""
        self.outcome: list[int] = []
        """One of the ``OUTCOME_*`` codes."""
        self.trainer_version: list[int] = []
        """Trainer version that accepted or rejected it (-1 before)."""
        self.prefill_forwarded: list[int] = []
        """Positions forwarded by prefill chunks, recomputation included [positions]."""
        self.recompute_forwarded: list[int] = []
        """Positions forwarded again after a preemption or a lost prefix [positions]."""
        self.decode_forwarded: list[int] = []
        """Positions forwarded by decode steps [positions]."""
        self.score_forwarded: list[int] = []
        """Positions a teacher forwarded to score the finished record [positions]."""
        self.cache_hits: list[list[int]] = []
        """Cached prefix each invocation actually found [positions]."""

    def append(self, chunk: ConversationChunk) -> None:
        """Add a chunk of drawn conversations, with their simulated state at its initial value."""
        n = len(chunk.prompt_tokens)
        self.prompt_tokens += chunk.prompt_tokens
        self.action_tokens += chunk.action_tokens
        self.tool_tokens += chunk.tool_tokens
        self.tool_wait_s += chunk.tool_wait_s
        self.invoked += chunk.invoked
        self.tool_called += chunk.tool_called
        self.input_positions += chunk.input_positions
        self.claimed_positions += chunk.claimed_positions
        self.record_length += chunk.record_length
        self.truncated += chunk.truncated
        self.sampled_tokens += chunk.sampled_tokens
        self.trained_tokens += chunk.trained_tokens
        self.group_filtered += chunk.group_filtered
        self.shared_prompt += chunk.shared_prompt
        self.ledger_chunks.append(chunk.ledger)
        self.replica += [-1] * n
        self.held_positions += [0] * n
        self.policy_version += [-1] * n
        self.start_s += [math.nan] * n
        self.end_s += [math.nan] * n
        self.outcome += [OUTCOME_UNFINISHED] * n
        self.trainer_version += [-1] * n
        self.prefill_forwarded += [0] * n
        self.recompute_forwarded += [0] * n
        self.decode_forwarded += [0] * n
        self.score_forwarded += [0] * n
        self.cache_hits += [[] for _ in range(n)]
        self.count += n
