"""The simulated controller and trainer: dispatch of prompt groups under the mode's gate, ingestion, rejections, updates and weight pushes.

The controller dispatches prompt groups (``samples_per_prompt`` conversations each) when the
mode allows: ``sync`` and ``colocated`` dispatch one batch per policy version and pause
generation while the trainer updates and pushes (colocated: reshards) weights; ``async`` keeps dispatching while
``dispatched - rejected <= (K + version + 1) x prompts_per_step`` groups (AReaL's staleness
gate, ``K`` = ``max_staleness``), or, given ``max_inflight_groups``, while fewer groups than
that are generating. Finished groups are filtered (``filtered_group_fraction``) and queued; the
trainer ingests them in completion order, rejects those more than ``K`` versions old (async),
trains on ``prompts_per_step`` groups, and pushes the weights. Replicas take the new weights by
draining (finish running invocations, then load) or, with in-flight updates, at their next step
boundary.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Callable

from capplan.sim.conversations import (
    OUTCOME_ACCEPTED,
    OUTCOME_FILTERED,
    OUTCOME_STALE,
    OUTCOME_SURPLUS,
)
from capplan.sim.events import EVENT_SYNC_DONE, EVENT_TRAIN_DONE

if TYPE_CHECKING:
    from capplan.sim.config import RunOptions
    from capplan.sim.conversations import ConversationTable
    from capplan.sim.events import EventQueue
    from capplan.sim.scheduler import ReplicaScheduler
    from capplan.sim.setup import EngineSetup
    from capplan.workload import Workload

TRAINER_WAITING = 0
"""Trainer state: waiting for data (the timeline's ``trainer_state`` value)."""
TRAINER_TRAINING = 1
"""Trainer state: training on a batch."""
TRAINER_PUSHING = 2
"""Trainer state: pushing new weights to the replicas."""


class Controller:
    """Dispatches prompt groups, ingests finished ones, and runs the trainer's updates."""

    def __init__(
        self,
        workload: "Workload",
        setup: "EngineSetup",
        options: "RunOptions",
        table: "ConversationTable",
        events: "EventQueue",
        replicas: "list[ReplicaScheduler]",
        start_group: Callable[[int, int, float], None],
        progress: Callable[[int, int], None] | None = None,
    ) -> None:
        self.setup = setup
        self.options = options
        self.table = table
        self.events = events
        self.replicas = replicas
        self.start_group = start_group
        """Starts conversations ``[first, stop)`` at ``t``: ``start_group(first, stop, t)``."""
        self.progress = progress
        self.drop_truncated = workload.training.drop_truncated
        self.group_size = workload.volume.samples_per_prompt
        self.prompts_per_step = workload.volume.prompts_per_step
        self.max_staleness = options.max_staleness
        self.oversampling = options.sampling == "oversample"
        # groups (group g holds conversations g * group_size ... (g + 1) * group_size - 1)
        self.group_finished: list[int] = []
        """Finished conversations of each group [count]."""
        self.group_policy_version: list[int] = []
        """Oldest policy version among each group's conversations (-1 before any finished)."""
        self.group_round: list[int] = []
        """Update round an oversampled group was dispatched for (-1 with active sampling)."""
        self.groups_dispatched = 0
        self.groups_rejected = 0
        self.groups_finished = 0
        # the trainer
        self.version = 0
        """Updates done = the newest policy version."""
        self.state = TRAINER_WAITING
        self.ready_groups: deque[int] = deque()
        """Finished, unfiltered groups waiting for the trainer, in completion order."""
        self.batch: list[int] = []
        """Groups accepted into the next update."""
        self.round_finished: dict[int, int] = {}
        """Finished groups of each oversampled round."""
        self.round_groups: dict[int, list[int]] = {}
        self.rounds_dispatched = 0
        self.train_s = 0.0
        """Time spent training [s]."""
        self.sync_s = 0.0
        """Time spent pushing weights [s]."""
        self.update_log: list[dict[str, float]] = []
        self.horizon: float | None = None
        """End of the last update [s], once reached."""
        # counters
        self.started = 0
        self.completed = 0
        self.completed_tokens = 0
        self.accepted = 0
        self.accepted_tokens = 0
        self.trained_tokens = 0
        self.rejected = {OUTCOME_STALE: 0, OUTCOME_FILTERED: 0, OUTCOME_SURPLUS: 0}
        """Rejected conversations by outcome [count]."""
        self.lags: dict[int, int] = {}
        """Conversations ingested, by policy lag [versions -> count]."""
        self.accepted_lags: list[int] = []
        self.update_lags: list[list[int]] = []
        """Policy lag of each conversation trained on, per update [versions]."""

    # ------------------------------------------------------------------ dispatch

    def dispatch_group(self, t: float, round_index: int = -1) -> None:
        group = self.groups_dispatched
        self.groups_dispatched += 1
        self.group_finished.append(0)
        self.group_policy_version.append(-1)
        self.group_round.append(round_index)
        if round_index >= 0:
            self.round_groups.setdefault(round_index, []).append(group)
        size = self.group_size
        self.started += size
        self.start_group(group * size, group * size + size, t)

    def gate(self, t: float) -> None:
        """Dispatch what the mode allows."""
        if self.horizon is not None:
            return
        options = self.options
        sync = options.mode != "async"  # sync and colocated: one batch per policy version
        if sync and self.state != TRAINER_WAITING:
            return
        if self.oversampling:
            while self.rounds_dispatched <= self.version + self.max_staleness and self.rounds_dispatched < options.steps:
                round_index = self.rounds_dispatched
                self.rounds_dispatched += 1
                self.round_finished[round_index] = 0
                for _ in range(options.groups_per_round):
                    self.dispatch_group(t, round_index)
            return
        cap = options.max_inflight_groups
        if cap is not None and not sync:
            while self.groups_dispatched - self.groups_finished < cap:
                self.dispatch_group(t)
            return
        limit = (self.max_staleness + self.version + 1) * self.prompts_per_step
        while self.groups_dispatched - self.groups_rejected < limit:
            self.dispatch_group(t)

    # ------------------------------------------------------------------ finished conversations and groups

    def conversation_done(self, conversation: int, t: float) -> None:
        table = self.table
        self.completed += 1
        self.completed_tokens += table.sampled_tokens[conversation]
        group = conversation // self.group_size
        self.group_finished[group] += 1
        version = table.policy_version[conversation]
        if self.group_policy_version[group] < 0 or version < self.group_policy_version[group]:
            self.group_policy_version[group] = version
        if self.group_finished[group] == self.group_size:
            self.group_done(group, t)

    def group_done(self, group: int, t: float) -> None:
        self.groups_finished += 1
        if self.oversampling:
            self.round_finished[self.group_round[group]] += 1
        elif self.table.group_filtered[group]:
            self.reject(group, OUTCOME_FILTERED)
            self.gate(t)
        else:
            self.ready_groups.append(group)
        if self.options.max_inflight_groups is not None:
            self.gate(t)
        self.try_training(t)

    def reject(self, group: int, outcome: int) -> None:
        size = self.group_size
        table = self.table
        for i in range(group * size, group * size + size):
            table.outcome[i] = outcome
            table.trainer_version[i] = self.version
        self.rejected[outcome] += size
        self.groups_rejected += 1

    def _count_lag(self, lag: int, conversations: int) -> None:
        self.lags[lag] = self.lags.get(lag, 0) + conversations

    # ------------------------------------------------------------------ the trainer

    def try_training(self, t: float) -> None:
        """Start an update if the trainer is free and a full batch is ready."""
        if self.state != TRAINER_WAITING or self.horizon is not None:
            return
        size, version, staleness = self.group_size, self.version, self.max_staleness
        prompts = self.prompts_per_step
        if self.oversampling:
            if self.round_finished.get(version, -1) != self.options.groups_per_round:
                return
            batch: list[int] = []
            for group in self.round_groups.pop(version):
                if self.table.group_filtered[group]:
                    self.reject(group, OUTCOME_FILTERED)
                elif version - self.group_policy_version[group] > staleness:
                    self.reject(group, OUTCOME_STALE)
                    self._count_lag(version - self.group_policy_version[group], size)
                elif len(batch) < prompts:
                    batch.append(group)
                else:
                    self.reject(group, OUTCOME_SURPLUS)
            self.batch = batch
        else:
            ready = self.ready_groups
            while ready and len(self.batch) < prompts:
                group = ready.popleft()
                lag = version - self.group_policy_version[group]
                if lag > staleness:
                    self.reject(group, OUTCOME_STALE)
                    self._count_lag(lag, size)
                    self.gate(t)
                else:
                    self.batch.append(group)
            if len(self.batch) < prompts:
                return
        self.start_training(t)

    def start_training(self, t: float) -> None:
        import numpy as np

        table = self.table
        size, version = self.group_size, self.version
        lengths = []
        accepted = len(self.batch) * size
        trained_before = self.trained_tokens
        batch_lags: list[int] = []
        self.update_lags.append(batch_lags)
        for group in self.batch:
            lag = version - self.group_policy_version[group]
            self._count_lag(lag, size)
            for i in range(group * size, group * size + size):
                table.outcome[i] = OUTCOME_ACCEPTED
                table.trainer_version[i] = version
                self.accepted += 1
                self.accepted_tokens += table.sampled_tokens[i]
                self.trained_tokens += table.trained_tokens[i]
                self.accepted_lags.append(lag)
                batch_lags.append(lag)
                if not (table.truncated[i] and self.drop_truncated):
                    lengths.append(table.record_length[i])
        self.batch = []
        train_s = self.setup.trainer_time(np.asarray(lengths, dtype=float)) if lengths else 0.0
        if self.options.mode == "async" and self.setup.step_overhead_s > 0:
            # the framework's per-update time (in train_s) holds generation too
            for replica in self.replicas:
                replica.hold(self.setup.step_overhead_s, t)
        self.state = TRAINER_TRAINING
        self.train_s += train_s
        self.update_log.append(
            {"version": version, "start_s": t, "train_s": train_s, "accepted_trajectories": accepted,
             "trained_records": len(lengths), "trained_tokens": self.trained_tokens - trained_before}
        )
        self.events.push(t + train_s, EVENT_TRAIN_DONE)

    def training_done(self, t: float) -> None:
        """An update finished at ``t``: the last one sets the horizon, the others push weights."""
        self.version += 1
        if self.progress is not None:
            self.progress(self.version, self.options.steps)
        if self.version >= self.options.steps:
            self.horizon = t
            for replica in self.replicas:
                replica.stopped = True
                replica.regate()
            return
        self.state = TRAINER_PUSHING
        self.sync_s += self.setup.weight_sync_s
        self.events.push(t + self.setup.weight_sync_s, EVENT_SYNC_DONE)
        if self.options.mode == "async":
            for replica in self.replicas:
                replica.target_version = self.version
                replica.regate()
                replica.wake(t)

    def sync_done(self, t: float) -> None:
        """The weight push finished at ``t``."""
        self.state = TRAINER_WAITING
        if self.options.mode != "async":
            for replica in self.replicas:
                replica.adopt_version(self.version)
                replica.regate()
        self.gate(t)
        self.try_training(t)
