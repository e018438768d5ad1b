"""The simulator's event queue: the kinds of event and one time-ordered heap shared by every part.

An event is a tuple ``(time_s, tiebreak, kind, a, b)``. ``tiebreak`` counts pushes, so events
at the same time pop in the order they were pushed and the tuples never compare further.
"""

from __future__ import annotations

import heapq
import itertools

EVENT_RUN_END = 0
"""A replica's run of engine steps ended (``a`` = replica, ``b`` = the run's epoch)."""
EVENT_TOOL_DONE = 1
"""A tool call finished (``a`` = conversation, ``b`` = turn)."""
EVENT_TRAIN_DONE = 2
"""The trainer finished an update."""
EVENT_SYNC_DONE = 3
"""The trainer finished pushing weights."""
EVENT_WEIGHTS_LOADED = 4
"""A replica finished loading new weights (``a`` = replica)."""
EVENT_SAMPLE = 5
"""Take a time-series sample."""


class EventQueue:
    """The heap of pending events and its push counter.

    Hot paths push with ``heapq.heappush(queue.heap, (t, next(queue.tiebreak), kind, a, b))``
    on local aliases; :meth:`push` is the same for the rest.
    """

    __slots__ = ("heap", "tiebreak")

    def __init__(self) -> None:
        self.heap: list[tuple[float, int, int, int, int]] = []
        self.tiebreak = itertools.count(1)

    def push(self, time_s: float, kind: int, a: int = 0, b: int = 0) -> None:
        """Schedule an event of ``kind`` at ``time_s`` [s]."""
        heapq.heappush(self.heap, (time_s, next(self.tiebreak), kind, a, b))
