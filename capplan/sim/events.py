"""The simulator's event queue: the kinds of event and the time-ordered heaps shared by every part.

An event is a tuple ``(time_s, tiebreak, kind, a, b)``. ``tiebreak`` counts pushes, so events
at the same time pop in the order they were pushed and the tuples never compare further.

The end of a replica's run of steps, the most frequent event by far, goes to a heap of its own,
``(time_s, tiebreak, scheduler, epoch)``, a few entries per replica (a run cut short leaves its
first end behind, skipped as stale: cheaper than re-sorting the heap); the loop pops whichever
heap holds the earlier ``(time_s, tiebreak)``, so the order is that of one heap, and each pop
sifts through a short heap instead of one holding every tool call in flight.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Any

EVENT_RUN_END = 0
"""A replica's run of engine steps ended (``a`` = the replica's scheduler, ``b`` = the run's epoch); in :attr:`EventQueue.runs`."""
EVENT_TOOL_DONE = 1
"""A tool call finished (``a`` = the conversation's sequence, ``b`` = turn)."""
EVENT_TRAIN_DONE = 2
"""The trainer finished an update."""
EVENT_SYNC_DONE = 3
"""The trainer finished pushing weights."""
EVENT_WEIGHTS_LOADED = 4
"""A replica finished loading new weights (``a`` = replica)."""
EVENT_SAMPLE = 5
"""Take a time-series sample."""


class EventQueue:
    """The heaps of pending events and their shared push counter.

    Hot paths push with ``heapq.heappush(queue.heap, (t, next(queue.tiebreak), kind, a, b))``
    (or ``queue.runs``, ``(t, next(queue.tiebreak), scheduler, epoch)``) on local aliases;
    :meth:`push` is the same for the rest.
    """

    __slots__ = ("heap", "runs", "tiebreak")

    def __init__(self) -> None:
        self.heap: list[tuple[float, int, int, Any, int]] = []
        """Every event but the ends of runs."""
        self.runs: list[tuple[float, int, Any, int]] = []
        """Ends of replicas' runs of steps: ``(time_s, tiebreak, scheduler, epoch)`` (the
        :class:`~capplan.sim.scheduler.ReplicaScheduler` itself, so the loop needs no look-up)."""
        self.tiebreak = itertools.count(1)

    def push(self, time_s: float, kind: int, a: Any = 0, b: int = 0) -> None:
        """Schedule an event of ``kind`` at ``time_s`` [s]."""
        if kind == EVENT_RUN_END:
            heapq.heappush(self.runs, (time_s, next(self.tiebreak), a, b))
        else:
            heapq.heappush(self.heap, (time_s, next(self.tiebreak), kind, a, b))

    def __len__(self) -> int:
        """Pending events, stale ends of runs included [count]."""
        return len(self.heap) + len(self.runs)
