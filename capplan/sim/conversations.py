"""The simulator's conversations: the drawn chunks, each in-flight conversation's state, and every conversation's fate as compact columns.

Conversations are drawn in chunks (:func:`chunk_drawer`) from
:func:`capplan.ledger.sample_conversations` and :func:`capplan.ledger.count_positions`, so the
simulator plays exactly the conversations ``capplan ledger`` counts. A conversation in flight is a
:class:`Sequence` (its drawn turns, its simulated state and its current invocation, as slots the
hot loop reads directly); when it ends, its final counters move to the
:class:`ConversationTable`'s columns (``array`` module: a few bytes per conversation), so memory
grows with the work in flight, not with the conversations simulated.
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass
from itertools import repeat
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

LEDGER_COUNTERS: tuple[str, ...] = ("prefill_forwarded", "cache_hit", "decode_forwarded", "sampled", "trained")
"""The ledger's counters the result compares with the engine's (kept per conversation)."""


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


class Sequence:
    """A conversation in flight: its drawn turns, its simulated state, and its current invocation.

    A conversation runs at most one invocation at a time (a turn, the recompute of a preempted
    turn, or a teacher's scoring forward), so one object per conversation carries both, and the
    invocation fields are reset for each new one (:meth:`start_turn`, :meth:`start_score`,
    :meth:`capplan.sim.scheduler.ReplicaScheduler.preempt` for a recompute). It lives from dispatch until the conversation ends (or, when the
    trajectory log is streamed, until its record is written); then its final counters go to the
    :class:`ConversationTable`'s compact columns.
    """

    __slots__ = (
        # the conversation (drawn)
        "index", "prompt_tokens", "action_tokens", "tool_tokens", "tool_wait_s", "invoked", "tool_called",
        "input_positions_of_turn", "claimed_positions_of_turn", "shared_prompt", "record_length", "truncated",
        # the conversation (simulated)
        "replica", "held_positions", "held_kv_bytes", "policy_version", "prefill_forwarded", "recompute_forwarded",
        "decode_forwarded", "score_forwarded", "cache_hits", "end_s",
        # its current invocation
        "turn", "uid", "input_positions", "claimed_positions", "prefill_remaining", "cached_positions", "decode_steps",
        "join_context", "join_step", "end_step", "epoch", "below_window", "kv_reserved_bytes", "computes_logits",
        "is_recompute", "is_first_turn", "is_score",
    )

    def __init__(self, index: int, chunk: "ConversationChunk", row: int) -> None:
        self.index = index
        """Conversation number (dispatch order)."""
        self.prompt_tokens: int = chunk.prompt_tokens[row]
        self.action_tokens: list[int] = chunk.action_tokens[row]
        self.tool_tokens: list[int] = chunk.tool_tokens[row]
        self.tool_wait_s: list[float] = chunk.tool_wait_s[row]
        self.invoked: list[bool] = chunk.invoked[row]
        self.tool_called: list[bool] = chunk.tool_called[row]
        self.input_positions_of_turn: list[int] = chunk.input_positions[row]
        self.claimed_positions_of_turn: list[int] = chunk.claimed_positions[row]
        self.shared_prompt: int = chunk.shared_prompt[row]
        """Prompt positions computed by the conversation's group leader (0 for a leader)."""
        self.record_length: int = chunk.record_length[row]
        self.truncated: bool = chunk.truncated[row]
        self.replica = -1
        """Replica serving the conversation."""
        self.held_positions = 0
        """Positions whose KV the replica keeps while the conversation waits on a tool (0: none)."""
        self.held_kv_bytes = 0.0
        """KV bytes of those positions [bytes] (valid while ``held_positions``)."""
        self.policy_version = -1
        """Policy version of the replica when the first turn was admitted (-1 before)."""
        self.prefill_forwarded = 0
        """Positions forwarded by prefill chunks, recomputation included [positions]."""
        self.recompute_forwarded = 0
        """Positions forwarded again after a preemption or a lost prefix [positions]."""
        self.decode_forwarded = 0
        """Positions forwarded by decode steps [positions]."""
        self.score_forwarded = 0
        """Positions a teacher forwarded to score the finished record [positions]."""
        self.cache_hits: list[int] = []
        """Cached prefix each invocation actually found [positions]."""
        self.end_s = math.nan
        """Completion time [s] (NaN before)."""
        # the current invocation
        self.turn = 0
        self.uid = 0
        """Creation order of the invocation (breaks ties between sequences, as a scheduler's request ids do)."""
        self.input_positions = 0
        """Input positions of the invocation (a recompute: the positions to rebuild)."""
        self.claimed_positions = 0
        """Input positions the ledger counts as a cache hit."""
        self.prefill_remaining = 0
        """Input positions not yet prefilled."""
        self.cached_positions = 0
        """Positions already in the KV cache while prefilling."""
        self.decode_steps = 0
        """Decode steps after the prefill (sampled tokens less the one the prefill yields)."""
        self.join_context = 0
        """Cached positions when the invocation joined the decoding batch."""
        self.join_step = 0
        """The replica's step count when it joined the decoding batch."""
        self.end_step = 0
        """The replica's step count at which it stops decoding."""
        self.epoch = 0
        """Bumped whenever the invocation leaves or joins the decoding batch (stale heap entries are
        skipped; it only grows, so entries of earlier invocations stay stale)."""
        self.below_window = True
        """Its context is still below the sliding window (sliding layers still grow)."""
        self.kv_reserved_bytes = 0.0
        """KV bytes reserved while prefilling."""
        self.computes_logits = True
        """The prefill ends with a sampled token (a recompute does not)."""
        self.is_recompute = False
        self.is_first_turn = True
        self.is_score = False
        """A teacher's forward over the finished record (logits at every position, no decode)."""

    def start_turn(self, turn: int, uid: int) -> None:
        """Make the current invocation turn ``turn``'s (created ``uid``-th).

        :meth:`capplan.sim.loop.Simulation.tool_done` has a copy inline (keep them the same).
        ``prefill_remaining`` and ``cached_positions`` are left as they are: admission sets both
        before anything reads them. A turn never follows a teacher's scoring (``is_score`` stays
        false).
        """
        self.turn = turn
        self.uid = uid
        self.input_positions = self.input_positions_of_turn[turn]
        self.claimed_positions = self.claimed_positions_of_turn[turn]
        sampled = self.action_tokens[turn]
        self.decode_steps = sampled - 1 if sampled > 1 else 0
        self.computes_logits = True
        self.is_recompute = False
        self.is_first_turn = turn == 0

    def start_score(self, uid: int) -> None:
        """Make the current invocation a teacher's forward over the finished record (created ``uid``-th)."""
        self.turn = -1
        self.uid = uid
        self.input_positions = self.prefill_remaining = self.record_length
        self.claimed_positions = 0
        self.cached_positions = 0
        self.decode_steps = 0
        self.computes_logits = True
        self.is_recompute = False
        self.is_first_turn = False
        self.is_score = True



def turns_run(invoked: "list[bool]") -> int:
    """Turns whose invocation ran (the leading run of ``invoked``) [count]."""
    return next((j for j, ran in enumerate(invoked) if not ran), len(invoked))


def _column(typecode: str) -> "array[Any]":
    return array(typecode)


class ConversationTable:
    """Every drawn conversation, as compact columns (the ``array`` module: a few bytes each, no
    Python object per conversation), and the chunks whose conversations are not all dispatched.

    The per-turn draws of a conversation live in its :class:`Sequence` while it is in flight and
    are dropped when it ends; :meth:`redraw` draws a chunk again (the draw depends only on the
    seed and the chunk number) for a trajectory log written after the run.
    """

    def __init__(self, draw: "Callable[[int], ConversationChunk] | None" = None) -> None:
        self.draw = draw
        """Draws chunk ``c`` (the simulation's drawer)."""
        self.count = 0
        """Conversations drawn so far."""
        self.chunk_size = 0
        """Conversations per chunk (every chunk has the same size)."""
        self.chunks: dict[int, ConversationChunk] = {}
        """Drawn chunks with conversations not yet dispatched, by chunk number."""
        self.chunks_drawn = 0
        """Chunks drawn so far [count]."""
        # drawn, per conversation (what the trainer and the result need)
        self.sampled_tokens = _column("i")
        self.trained_tokens = _column("i")
        self.record_length = _column("i")
        self.truncated = _column("b")
        self.group_filtered = _column("b")
        """Per prompt group (conversation ``i`` is in group ``i // samples_per_prompt``)."""
        self.ledger = {key: _column("q") for key in LEDGER_COUNTERS}
        """The ledger's counters of each conversation (:func:`capplan.ledger.count_positions`),
        three per conversation (prompt, action, tool) [positions]."""
        # simulated, per conversation
        self.policy_version = _column("i")
        """Policy version of the replica when the first turn was admitted (-1 before)."""
        self.start_s = _column("d")
        """Dispatch time [s] (NaN before)."""
        self.end_s = _column("d")
        """Completion time [s] (NaN before)."""
        self.outcome = _column("b")
        """One of the ``OUTCOME_*`` codes."""
        self.trainer_version = _column("i")
        """Trainer version that accepted or rejected it (-1 before)."""
        self.prefill_forwarded = _column("q")
        """Positions forwarded by prefill chunks, recomputation included [positions]."""
        self.recompute_forwarded = _column("q")
        """Positions forwarded again after a preemption or a lost prefix [positions]."""
        self.decode_forwarded = _column("q")
        """Positions forwarded by decode steps [positions]."""
        self.score_forwarded = _column("q")
        """Positions a teacher forwarded to score the finished record [positions]."""
        self.cache_hit_start = _column("q")
        """Offset of the conversation's cache hits in :attr:`cache_hits` (-1: not ended)."""
        self.cache_hit_count = _column("i")
        """Cache hits (invocations of turns) of the conversation [count]."""
        self.cache_hits = _column("i")
        """Cached prefix each invocation found, conversation after conversation in the order they
        ended [positions]."""

    def append(self, chunk: ConversationChunk) -> None:
        """Add a chunk of drawn conversations, with their simulated state at its initial value."""
        import numpy as np

        n = len(chunk.prompt_tokens)
        if not self.chunk_size:
            self.chunk_size = n
        self.chunks[self.chunks_drawn] = chunk
        self.chunks_drawn += 1
        for key, column in self.ledger.items():
            column.frombytes(np.ascontiguousarray(chunk.ledger[key], dtype=np.int64).tobytes())
        self.sampled_tokens.extend(chunk.sampled_tokens)
        self.trained_tokens.extend(chunk.trained_tokens)
        self.record_length.extend(chunk.record_length)
        self.truncated.extend(chunk.truncated)
        self.group_filtered.extend(chunk.group_filtered)
        self.policy_version.extend(repeat(-1, n))
        self.start_s.extend(repeat(math.nan, n))
        self.end_s.extend(repeat(math.nan, n))
        self.outcome.extend(repeat(OUTCOME_UNFINISHED, n))
        self.trainer_version.extend(repeat(-1, n))
        zeros = array("q", bytes(8 * n))
        self.prefill_forwarded.extend(zeros)
        self.recompute_forwarded.extend(zeros)
        self.decode_forwarded.extend(zeros)
        self.score_forwarded.extend(zeros)
        self.cache_hit_start.extend(repeat(-1, n))
        self.cache_hit_count.extend(repeat(0, n))
        self.count += n

    def sequence(self, index: int) -> Sequence:
        """The in-flight state of conversation ``index``, at dispatch (conversations are dispatched in order)."""
        size = self.chunk_size
        number, row = divmod(index, size)
        chunk = self.chunks[number]
        if row == size - 1:
            del self.chunks[number]  # its last conversation: the chunk's rows now live in their sequences
        return Sequence(index, chunk, row)

    def store(self, seq: Sequence) -> None:
        """Keep ``seq``'s final counters (and, once it ended, its cache hits) in the columns."""
        i = seq.index
        self.policy_version[i] = seq.policy_version
        self.prefill_forwarded[i] = seq.prefill_forwarded
        self.recompute_forwarded[i] = seq.recompute_forwarded
        self.decode_forwarded[i] = seq.decode_forwarded
        self.score_forwarded[i] = seq.score_forwarded
        self.end_s[i] = seq.end_s
        if seq.end_s == seq.end_s and self.cache_hit_start[i] < 0:
            self.cache_hit_start[i] = len(self.cache_hits)
            self.cache_hit_count[i] = len(seq.cache_hits)
            self.cache_hits.extend(seq.cache_hits)

    def hits_of(self, index: int) -> list[int]:
        """Cached prefix each invocation of ended conversation ``index`` found [positions]."""
        start = self.cache_hit_start[index]
        return self.cache_hits[start:start + self.cache_hit_count[index]].tolist()

    def redraw(self, number: int) -> ConversationChunk:
        """Draw chunk ``number`` again (the same conversations as during the run)."""
        if self.draw is None:
            raise ValueError("this conversation table has no drawer")
        return self.draw(number)
