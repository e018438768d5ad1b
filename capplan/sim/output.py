"""A simulation's trajectory log: completed conversations as records of ``capplan ledger reconcile``'s format, as JSONL, streamed during the run or written after it.

Records come in order of end time (then conversation number). During a run
(:func:`capplan.sim.run.simulate` with ``trajectories=``) a :class:`TrajectoryStream` writes
each record as soon as nothing can change it or come before it: its trainer verdict is known
(or the run is over) and the simulated clock has passed its end. Only conversations ended and
not yet written are held, so memory follows the work in flight. After a run,
:func:`trajectory_records` rebuilds the same records from the result (drawing each chunk of
conversations again from its seed).
"""

from __future__ import annotations

import json
import math
from collections import OrderedDict
from heapq import heappop, heappush
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, TextIO

if TYPE_CHECKING:
    from array import array

    from capplan.sim.conversations import ConversationChunk, ConversationTable, Sequence
    from capplan.sim.result import SimResult
    from capplan.workload import Workload

REDRAWN_CONVERSATIONS = 65_536
"""Conversations of re-drawn chunks :func:`trajectory_records` keeps at a time (at least one chunk)."""


def _record(
    workload: "Workload",
    index: int,
    prompt_tokens: int,
    action_tokens: list[int],
    tool_tokens: list[int],
    tool_wait_s: list[float],
    invoked: list[bool],
    cache_hits: list[int],
    truncated: bool,
    policy_version: int,
    outcome: int,
    trainer_version: int,
    end_s: float,
) -> dict[str, Any]:
    """One ended conversation's record (both paths build records here)."""
    from capplan.records import trajectory_record
    from capplan.sim.conversations import OUTCOME_NAMES, turns_run

    turns = turns_run(invoked)
    extra: dict[str, Any] = {"outcome": OUTCOME_NAMES[outcome], "end_s": end_s, "simulated": True}
    if trainer_version >= 0:
        extra["trainer_version"] = trainer_version
    return trajectory_record(
        index,
        prompt_tokens,
        [(action_tokens[j], tool_tokens[j]) for j in range(turns)],
        cache_hits,
        loss_on=workload.training.loss_on,
        truncated=bool(truncated),
        drop_truncated=workload.training.drop_truncated,
        policy_version=policy_version,
        tool_wait_s=round(sum(tool_wait_s[:turns]), 6),
        logprob=0.0,
        extra=extra,
    )


def trajectory_records(result: "SimResult", workload: "Workload") -> Iterator[dict[str, Any]]:
    """Completed trajectories as records of ``capplan ledger reconcile``'s own format, by end time.

    Log-probs are placeholders (``0.0`` for every sampled position): the simulator models that a
    behaviour log-prob is stored, not its value. ``outcome`` (accepted, rejected_stale,
    rejected_filtered, rejected_surplus, unfinished = not yet ingested) and ``simulated`` are
    extra fields the reconciler ignores.

    The drawn turns are not kept after a conversation ends: each chunk of conversations is drawn
    again from its seed (the same draws), a few chunks at a time.
    """
    table = result.table
    if table is None:
        raise ValueError("this SimResult carries no conversation table (it was not made by simulate)")
    n = result.conversations["n"]
    order = sorted((t, i) for i, t in enumerate(table.end_s[:n]) if not math.isnan(t))
    chunks: OrderedDict[int, ConversationChunk] = OrderedDict()
    size = table.chunk_size
    for end_s, i in order:
        number, row = divmod(i, size)
        chunk = chunks.get(number)
        if chunk is None:
            chunk = chunks[number] = table.redraw(number)
            while len(chunks) > 1 and len(chunks) * size > REDRAWN_CONVERSATIONS:
                chunks.popitem(last=False)
        else:
            chunks.move_to_end(number)
        yield _record(
            workload, i, chunk.prompt_tokens[row], chunk.action_tokens[row], chunk.tool_tokens[row],
            chunk.tool_wait_s[row], chunk.invoked[row], table.hits_of(i), chunk.truncated[row],
            table.policy_version[i], table.outcome[i], table.trainer_version[i], end_s,
        )


def write_trajectories(result: "SimResult", workload: "Workload", path: str | Path, force: bool = False) -> Path:
    """Write :func:`trajectory_records` as JSONL, atomically (never over a file without ``force``).

    Raises
    ------
    OutputExistsError
        ``path`` exists and ``force`` is false.
    """
    from capplan.output import atomic_file

    dumps = json.JSONEncoder(separators=(",", ":")).encode
    with atomic_file(path, force) as fh:
        for record in trajectory_records(result, workload):
            fh.write(dumps(record) + "\n")
    return Path(path)


class TrajectoryStream:
    """Writes ended conversations' records to ``fh`` during a run, in the order of :func:`trajectory_records`.

    The simulation calls :meth:`ended` when a conversation ends and :meth:`flush` after the
    trainer may have judged conversations; :meth:`close` writes the rest when the run is over.
    """

    def __init__(self, fh: TextIO, workload: "Workload", table: "ConversationTable") -> None:
        self.fh = fh
        self.workload = workload
        self.table = table
        self.pending: list[tuple[float, int, Sequence]] = []
        """Heap of ended conversations not yet written: ``(end_s, number, sequence)``."""
        self.written = 0
        """Records written [count]."""
        self._dumps = json.JSONEncoder(separators=(",", ":")).encode

    def ended(self, seq: "Sequence") -> None:
        """``seq``'s conversation ended (its end time is set)."""
        heappush(self.pending, (seq.end_s, seq.index, seq))

    def flush(self, outcome: "array[int]", now_s: float) -> None:
        """Write every record whose verdict is known and that ended before ``now_s`` [s].

        Conversations ending later end at or after ``now_s``, so nothing written can be preceded
        by a record still to come.
        """
        from capplan.sim.conversations import OUTCOME_UNFINISHED

        pending = self.pending
        while pending and pending[0][0] < now_s and outcome[pending[0][1]] != OUTCOME_UNFINISHED:
            self._write(heappop(pending)[2])

    def close(self) -> None:
        """The run is over: write the remaining records (verdicts as they stand)."""
        pending = self.pending
        while pending:
            self._write(heappop(pending)[2])

    def _write(self, seq: "Sequence") -> None:
        table = self.table
        i = seq.index
        record = _record(
            self.workload, i, seq.prompt_tokens, seq.action_tokens, seq.tool_tokens, seq.tool_wait_s, seq.invoked,
            seq.cache_hits, seq.truncated, seq.policy_version, table.outcome[i], table.trainer_version[i], seq.end_s,
        )
        self.fh.write(self._dumps(record) + "\n")
        self.written += 1
