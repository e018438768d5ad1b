"""The simulator's event loop: conversations from dispatch to their last turn, tool calls on environment workers, time-series samples.

The model, in the order a conversation meets it:

1. **Task queue.** The :class:`~capplan.sim.controller.Controller` dispatches prompt groups;
   a group goes to the replica with the fewest conversations, and each conversation stays there
   for its whole life (so the group's samples can share the prompt's prefix cache).
2. **Inference queue.** Each replica's :class:`~capplan.sim.scheduler.ReplicaScheduler` admits,
   prefills and decodes under its token budget, ``max_num_seqs`` and KV capacity.
3. **KV.** A conversation waiting on a tool keeps its KV (``retain``) or frees it (``evict``).
   Retained KV behaves as an engine's prefix cache does: it stays resident until an admission
   or a decode step needs the room, then the longest-waiting conversation's KV is evicted first
   (before any running sequence is preempted), and its next turn recomputes the prefix it lost.
4. **Environment queue.** A tool call takes an environment worker (``env_workers``, unlimited
   by default) for the conversation's drawn wait; the next turn then joins the replica's
   waiting queue, reusing the prefix the workload's cache policy allows.
5. **Teacher scoring.** With ``training.teacher_scoring`` the finished record is forwarded once
   more on the same replica (logits at every position, nothing sampled), as the plan prices it;
   the conversation is done when that forward is.
6. **Trainer.** See :mod:`capplan.sim.controller`.
"""

from __future__ import annotations

import gc
import itertools
from collections import deque
from functools import partial
from heapq import heappop, heappush
from typing import TYPE_CHECKING, Any, Callable

from capplan.errors import DoesNotFitError, InputError
from capplan.sim.controller import Controller
from capplan.sim.conversations import ConversationTable
from capplan.sim.events import (
    EVENT_SAMPLE,
    EVENT_SYNC_DONE,
    EVENT_TOOL_DONE,
    EVENT_TRAIN_DONE,
    EVENT_WEIGHTS_LOADED,
    EventQueue,
)
from capplan.sim.scheduler import ReplicaScheduler

if TYPE_CHECKING:
    from capplan.sim.config import RunOptions
    from capplan.sim.conversations import ConversationChunk, Sequence
    from capplan.sim.output import TrajectoryStream
    from capplan.sim.setup import EngineSetup
    from capplan.workload import Workload

MAX_SAMPLES = 1000
"""Time-series samples kept: between this and twice this many (the interval doubles)."""


class Simulation:
    """The whole simulated system and its event loop (see the module docstring)."""

    def __init__(
        self,
        workload: "Workload",
        setup: "EngineSetup",
        options: "RunOptions",
        draw: Callable[[int], "ConversationChunk"],
        progress: Callable[[int, int], None] | None = None,
    ) -> None:
        self.setup = setup
        self.options = options
        self.draw = draw
        self.kv_capacity_bytes = setup.kv_capacity_bytes
        self.retain_during_tools = workload.cache.kv_during_tool_wait == "retain"
        self.teacher_scores = workload.teacher_scores
        """A teacher forwards each finished record on the conversation's replica before it is done."""
        self.drop_truncated = workload.training.drop_truncated
        self.events = EventQueue()
        self.table = ConversationTable(draw)
        self.live: dict[int, Sequence] = {}
        """Conversations dispatched and not yet ended, by number."""
        self.stream: TrajectoryStream | None = None
        """Where ended conversations' records go as soon as they are final (``--trajectories``), or ``None``."""
        self.next_uid = partial(next, itertools.count(1))
        """Creation order of invocations (ties between sequences break on it)."""
        self.replicas = [
            ReplicaScheduler(i, setup, options, self.events, self.next_uid, self.invocation_done)
            for i in range(options.replicas)
        ]
        self.controller = Controller(
            workload, setup, options, self.table, self.events, self.replicas, self.start_conversations, progress
        )
        self.now = 0.0
        """Time of the last event handled [s] (set when the loop ends)."""
        # environment workers
        self.env_workers = options.env_workers
        """Environment workers [count] (``None``: one per tool call)."""
        self.env_busy = 0
        """Tool calls executing [count]."""
        self.env_queue: deque[tuple[Sequence, int]] = deque()
        """Tool calls ``(sequence, turn)`` waiting for a worker."""
        # time series
        self.sample_interval_s = 0.05
        self.samples: list[tuple[Any, ...]] = []
        """One tuple per sample, in the order of :data:`capplan.sim.result.TIMELINE_KEYS`."""
        self.kv_samples: list[float] = []
        """KV occupancy of every replica at every sample [fraction]."""

    # ------------------------------------------------------------------ conversations

    def ensure_drawn(self, count: int) -> None:
        """Draw conversations until at least ``count`` exist.

        Raises
        ------
        DoesNotFitError
            A drawn conversation's KV does not fit a replica.
        """
        table = self.table
        while table.count < count:
            chunk = self.draw(table.chunks_drawn)
            table.append(chunk)
            longest = chunk.max_record_length
            need = self.setup.kv_layout.held_bytes(longest)
            if need > self.kv_capacity_bytes:
                raise DoesNotFitError(
                    f"a conversation of {longest:,} positions needs {need / 2**30:.2f} GiB of KV per GPU but a "
                    f"replica holds {self.kv_capacity_bytes / 2**30:.2f} GiB: raise --tp, or lower max_context"
                )

    def least_loaded_replica(self) -> ReplicaScheduler:
        best = self.replicas[0]
        for replica in self.replicas:
            if replica.assigned_conversations < best.assigned_conversations:
                best = replica
        return best

    def start_conversations(self, first: int, stop: int, t: float) -> None:
        """Start conversations ``first .. stop - 1`` (one prompt group) at ``t`` on the least loaded replica."""
        self.ensure_drawn(stop)
        table = self.table
        live = self.live
        next_uid = self.next_uid
        touched: list[ReplicaScheduler] = []
        replica = self.least_loaded_replica()  # a group's samples share one replica (and its prefix cache)
        for i in range(first, stop):
            seq = table.sequence(i)
            live[i] = seq
            seq.replica = replica.index
            replica.assigned_conversations += 1
            table.start_s[i] = t
            seq.start_turn(0, next_uid())
            replica.waiting.append(seq)
            replica.new_conversations_waiting += 1
            if replica not in touched:
                touched.append(replica)
        for replica in touched:
            replica.wake(t)

    def invocation_done(self, replica: ReplicaScheduler, seq: "Sequence", context: int, t: float) -> None:
        """``seq``'s invocation produced its last token at ``t`` with ``context`` positions cached: call its
        tool, have a teacher score the finished record, or end."""
        turn = seq.turn
        if seq.is_score:
            self.conversation_done(replica, seq, t)
        elif seq.tool_called[turn]:
            if self.retain_during_tools:
                replica.retain(seq, context)
            # start_tool_call(seq, turn, t), inline
            workers = self.env_workers
            if workers is None or self.env_busy < workers:
                self.env_busy += 1
                events = self.events
                heappush(events.heap, (t + seq.tool_wait_s[turn], next(events.tiebreak), EVENT_TOOL_DONE, seq, turn))
            else:
                self.env_queue.append((seq, turn))
        else:
            self.finish_or_score(replica, seq, t)

    def finish_or_score(self, replica: ReplicaScheduler, seq: "Sequence", t: float) -> None:
        """The conversation's last turn ended: queue the teacher's forward of its record, or end it."""
        if self.teacher_scores and not (self.drop_truncated and seq.truncated):
            seq.start_score(self.next_uid())
            replica.waiting.append(seq)
            replica.wake(t)
        else:
            self.conversation_done(replica, seq, t)

    def conversation_done(self, replica: ReplicaScheduler, seq: "Sequence", t: float) -> None:
        replica.conversation_done(seq, t)
        seq.end_s = t
        i = seq.index
        del self.live[i]
        self.table.store(seq)
        if self.stream is not None:
            self.stream.ended(seq)
        self.controller.conversation_done(i, t)
        if self.stream is not None:
            self.stream.flush(self.table.outcome, t)

    # ------------------------------------------------------------------ environment workers

    def start_tool_call(self, seq: "Sequence", turn: int, t: float) -> None:
        workers = self.env_workers
        if workers is None or self.env_busy < workers:
            self.env_busy += 1
            self.events.push(t + seq.tool_wait_s[turn], EVENT_TOOL_DONE, seq, turn)
        else:
            self.env_queue.append((seq, turn))

    def tool_done(self, seq: "Sequence", turn: int, t: float) -> None:
        """A tool call ended at ``t``: free its worker, then queue the next turn (or end the conversation)."""
        self.env_busy -= 1
        if self.env_queue:
            queued, queued_turn = self.env_queue.popleft()
            self.env_busy += 1
            self.events.push(t + queued.tool_wait_s[queued_turn], EVENT_TOOL_DONE, queued, queued_turn)
        replica = self.replicas[seq.replica]
        invoked = seq.invoked
        turn += 1
        if turn < len(invoked) and invoked[turn]:
            # seq.start_turn(turn, self.next_uid()), inline
            seq.turn = turn
            seq.uid = self.next_uid()
            seq.input_positions = seq.input_positions_of_turn[turn]
            seq.claimed_positions = seq.claimed_positions_of_turn[turn]
            sampled = seq.action_tokens[turn]
            seq.decode_steps = sampled - 1 if sampled > 1 else 0
            seq.computes_logits = True
            seq.is_recompute = False
            seq.is_first_turn = False
            replica.waiting.append(seq)
            # wake it if idle, or if the new turn could be admitted at the next step boundary
            if not replica.busy or (
                not replica.draining
                and replica.decoding + len(replica.prefilling) < replica.max_num_seqs
                and not (replica.static_batching and (replica.decoding or replica.prefilling))
            ):
                replica.wake(t)
        else:
            self.finish_or_score(replica, seq, t)

    # ------------------------------------------------------------------ time series

    def sample(self, t: float) -> None:
        """Record the queues, batch, KV occupancy and trainer state at ``t``."""
        replicas = self.replicas
        batch = running = new_waiting = waiting = 0
        kv = 0.0
        capacity = self.kv_capacity_bytes
        kv_samples = self.kv_samples
        for replica in replicas:
            replica_running = replica.decoding + len(replica.prefilling)
            occupancy = replica.kv_used_at(t) / capacity
            kv_samples.append(occupancy)
            if replica.busy:
                batch += replica_running
            kv += occupancy
            running += replica_running
            new_waiting += replica.new_conversations_waiting
            waiting += len(replica.waiting)
        n = len(replicas)
        waiting -= new_waiting
        controller = self.controller
        self.samples.append(
            (t, batch / n, kv / n, new_waiting, waiting, running, len(self.env_queue), self.env_busy,
             len(controller.ready_groups) * controller.group_size, controller.state, controller.version,
             controller.completed, controller.accepted)
        )
        if len(self.samples) >= 2 * MAX_SAMPLES:
            self.samples = self.samples[::2]
            self.kv_samples = self._every_other_sample(self.kv_samples)
            self.sample_interval_s *= 2
        self.events.push(t + self.sample_interval_s, EVENT_SAMPLE)

    def _every_other_sample(self, per_replica: list[float]) -> list[float]:
        """Keep every other sample of a per-replica series (all replicas of a kept sample)."""
        n = len(self.replicas)
        out: list[float] = []
        for sample in range(0, len(per_replica) // n, 2):
            out += per_replica[sample * n:(sample + 1) * n]
        return out

    # ------------------------------------------------------------------ main loop

    def run(self) -> None:
        """Run until the last update ends, with the cyclic garbage collector paused.

        The loop makes no reference cycles (its objects are freed by reference counting), but it
        allocates containers by the million (drawn turns, heap entries), and each batch of them
        would trigger a collector pass over every live object, the drawn conversations included:
        a few percent of the run for nothing collected. The collector's state is restored after.

        Raises
        ------
        InputError
            No event is left before the last update (nothing can run).
        """
        collecting = gc.isenabled()
        gc.disable()
        try:
            self._run()
        finally:
            if collecting:
                gc.enable()

    def _run(self) -> None:
        controller = self.controller
        self.events.push(0.0, EVENT_SAMPLE)
        controller.gate(0.0)
        heap = self.events.heap
        runs = self.events.runs
        replicas = self.replicas
        tool_done = self.tool_done
        t = 0.0
        replica: ReplicaScheduler
        while runs or heap:  # until the last update sets the horizon (a TRAIN_DONE event)
            if runs and (not heap or runs[0] < heap[0]):
                t, _, replica, epoch = heappop(runs)
                if epoch == replica.run_epoch and replica.busy:
                    replica.finish_run(t)
                continue
            t, _, kind, a, b = heappop(heap)
            if kind == EVENT_TOOL_DONE:
                tool_done(a, b, t)
            elif kind == EVENT_SAMPLE:
                if heap or runs:
                    self.sample(t)
            elif kind == EVENT_TRAIN_DONE:
                controller.training_done(t)
                if controller.horizon is not None:
                    break
            elif kind == EVENT_SYNC_DONE:
                controller.sync_done(t)
                if self.stream is not None:
                    self.stream.flush(self.table.outcome, t)
            elif kind == EVENT_WEIGHTS_LOADED:
                replicas[a].finish_weight_load(t)
        self.now = t
        for replica in replicas:
            replica.credit_unfinished_decodes()
        for seq in self.live.values():
            self.table.store(seq)
        if controller.horizon is None:
            raise InputError(
                f"the simulation stalled at t = {self.now:,.1f} s after {controller.version} of "
                f"{self.options.steps} updates: no event left (nothing can run)"
            )
