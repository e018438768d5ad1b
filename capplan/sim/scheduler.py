"""One inference replica's scheduler: admission, chunked prefill, decode runs, KV accounting, preemption and eviction.

Each engine step runs under a token budget (``max_batched_tokens``) and ``max_num_seqs``:
every decoding sequence forwards one position, and the rest of the budget goes to prefill
chunks, continuing partial prefills first, then admitting from the waiting queue (first come,
first served) while the KV capacity allows. A step with prefill chunks is priced from its
actual mix (:class:`capplan.sim.stepcost.StepCoefficients`); runs of decode steps with an
unchanged batch are advanced in one jump (:func:`capplan.sim.stepcost.run_time`).

KV is held in bytes per GPU: full-attention layers grow with the context, sliding-window layers
stop at the window, linear-attention layers hold a fixed state. An admitted invocation reserves
the KV of its whole input; decoding grows it one position per step. When a step's growth does
not fit, retained KV (conversations waiting on a tool) is evicted first, oldest first, then the
most recently joined decoding sequence is preempted: its KV is freed and it is recomputed
(prefilled again) when readmitted. With a CPU KV tier (:mod:`capplan.sim.speculative`) the
evicted prefixes and preempted contexts are loaded back from host memory instead, and with
speculative decoding a decode step is priced per output token.

This is the simulator's hot loop: an invocation is its conversation's
:class:`~capplan.sim.conversations.Sequence` (slots read directly, no table look-ups), methods
alias attributes to well-named locals, small helpers (KV bytes of a sequence, causal pairs, the
step price) are written inline with the operation order of their homes (so the same bits), and
the per-step work stays in :meth:`ReplicaScheduler.plan` and :meth:`ReplicaScheduler.finish_run`.
"""

from __future__ import annotations

from collections import deque
from heapq import heappop, heappush
from math import ceil, sqrt
from typing import TYPE_CHECKING, Callable

from capplan.errors import DoesNotFitError
from capplan.sim.events import EVENT_WEIGHTS_LOADED
from capplan.sim.setup import held_bytes_function
from capplan.sim.stepcost import run_time, steps_within

if TYPE_CHECKING:
    from capplan.sim.config import RunOptions
    from capplan.sim.conversations import Sequence
    from capplan.sim.events import EventQueue
    from capplan.sim.setup import EngineSetup
    from capplan.sim.speculative import SpecRun
    from capplan.sim.stepcost import DecodeLine

_NO_CHUNKS: list = []  # shared empty chunk list (never mutated)


class ReplicaScheduler:
    """One inference replica: its queues, its KV, its current run of steps, and its weights."""

    __slots__ = (
        # constants
        "index", "coeffs", "window", "window_limit", "kv_full_bytes", "kv_window_bytes", "kv_state_bytes",
        "kv_capacity_bytes", "held_bytes", "held_limit", "max_batched_tokens", "max_num_seqs", "static_batching",
        "inflight_updates", "weight_sync_s", "decode_compute_base", "decode_compute_per_sequence", "decode_memory_base",
        "decode_memory_per_sequence", "decode_fixed_base", "decode_fixed_per_sequence", "window_terms", "sliding", "step_constants", "a2a_switch",
        "k_a2a", "graph_max_seqs", "graphless_s",
        # engine features: speculative decoding and the CPU KV tier (capplan.sim.speculative)
        "spec", "spec_tokens", "budget_per_decoder", "offload", "tier", "tier_used", "pending_load_s", "mixed_prefill",
        # shared with the rest of the simulation
        "events", "runs", "tiebreak", "uids", "on_invocation_done",
        # queues and KV
        "waiting", "prefilling", "decode_ends", "window_crossings", "decoding", "decoding_below_window",
        "decoding_cached", "decoding_cached_below_window", "kv_prefill_bytes", "kv_retained_bytes",
        "retained", "assigned_conversations", "new_conversations_waiting",
        # the current run
        "busy", "run_epoch", "run_start_s", "run_steps", "run_chunks", "run_line", "run_spec", "run_time_s",
        # weights
        "policy_version", "target_version", "loading_version", "draining", "loading_weights", "stopped", "pending_hold_s",
        "gated",
        # counters
        "steps_done", "prompt_steps", "busy_s", "sequence_s", "forwarded_tokens", "preemptions", "evictions",
        "tier_stores", "tier_loads", "tier_loaded_tokens", "tier_load_s",
    )

    def __init__(
        self,
        index: int,
        setup: "EngineSetup",
        options: "RunOptions",
        events: "EventQueue",
        uids: "Callable[[], int]",
        on_invocation_done: "Callable[[ReplicaScheduler, Sequence, int, float], None]",
    ) -> None:
        coeffs = setup.coeffs
        layout = setup.kv_layout
        self.index = index
        self.coeffs = coeffs
        self.window = coeffs.window
        """Sliding-window width [positions] (a huge finite number without a window)."""
        self.window_limit = coeffs.window - 1.0
        """Cached positions at which a sliding layer stops growing [positions]."""
        self.kv_full_bytes = layout.full_bytes_per_token
        """KV bytes per cached position on full-attention layers [bytes/position]."""
        self.kv_window_bytes = layout.window_bytes_per_token
        """KV bytes per cached position on sliding-window layers [bytes/position]."""
        self.kv_state_bytes = layout.state_bytes_per_sequence
        """Linear-attention state per sequence [bytes]."""
        self.kv_capacity_bytes = setup.kv_capacity_bytes
        self.held_bytes = held_bytes_function(layout)
        """KV bytes of one sequence with the given cached positions [bytes]."""
        self.held_limit = layout.window_tokens - 1.0
        """The window limit :attr:`held_bytes` uses, for its inline copies [positions]."""
        self.max_batched_tokens = setup.max_batched_tokens
        self.max_num_seqs = setup.max_num_seqs
        self.static_batching = options.static_batching
        self.inflight_updates = options.inflight_updates
        self.weight_sync_s = setup.replica_pause_s
        self.decode_compute_base = coeffs.decode_compute_base
        self.decode_compute_per_sequence = coeffs.decode_compute_per_sequence
        self.decode_memory_base = coeffs.decode_memory_base
        self.decode_memory_per_sequence = coeffs.decode_memory_per_sequence
        self.decode_fixed_base = coeffs.decode_fixed_base
        self.decode_fixed_per_sequence = coeffs.decode_fixed_per_sequence
        self.window_terms = bool(coeffs.c_pair_w or coeffs.m_read_w)
        """A decode step's price has sliding-window terms (without them they are exactly 0.0, and
        a sum of non-negative terms is the same without them: :meth:`plan` skips them)."""
        self.sliding = bool(self.kv_window_bytes or self.window_terms)
        """The model has a sliding window, and the decoding sequences below it are tracked. Without
        one nothing is: a joining sequence is marked as not below it, and the below-window counters
        stay 0 (they only ever meet exact zeros then: no window KV bytes, no window price terms)."""
        self.step_constants = (
            coeffs.c_0, coeffs.c_new, coeffs.c_logit, coeffs.c_pair, coeffs.c_pair_w,
            coeffs.m_0, coeffs.m_new, coeffs.m_logit, coeffs.m_read, coeffs.m_read_w, coeffs.m_seq, coeffs.m_head,
            coeffs.m_routed, coeffs.q, coeffs.overhead, coeffs.k_0, coeffs.k_new, coeffs.h_seq, coeffs.k_head,
            coeffs.k_logit,
        )
        """The coefficients :meth:`StepCoefficients.step_time` reads, in one tuple for its inline copy."""
        self.a2a_switch = coeffs.a2a_switch
        self.graph_max_seqs = coeffs.graph_max_seqs
        """Largest step the engine runs in a CUDA graph [sequences]; above it a step pays ``graphless_s``."""
        self.graphless_s = coeffs.graphless_s
        """Positions above which the expert-parallel all-to-all costs ``k_a2a`` more per position (never, without it)."""
        self.k_a2a = coeffs.k_a2a
        self.spec = setup.spec
        """Speculative decoding (``None``: plain decoding): decode steps priced per output token."""
        self.spec_tokens = setup.spec.tokens_at(0) if setup.spec is not None else 1.0
        """Mean tokens a verify step yields with the replica's weights ``E`` [tokens]."""
        self.budget_per_decoder = setup.spec.positions if setup.spec is not None else 1
        """Positions of the token budget a decoding sequence takes per step [positions]."""
        self.mixed_prefill = setup.mixed_prefill
        """A step with prompt chunks also advances the decoding batch; else it holds the chunks
        alone (the whole token budget) and the decoding batch waits (SGLang's default)."""
        self.offload = setup.offload if setup.offload is not None and setup.offload.loads_win else None
        """The CPU KV tier (``None``: none, or loading would be slower than prefilling)."""
        self.tier: dict[Sequence, int] = {}
        """Conversations whose lost context the tier holds (an evicted prefix, a preempted sequence's context) -> its
        positions, least recently stored first."""
        self.tier_used = 0
        """Positions the tier holds [positions]."""
        self.pending_load_s = 0.0
        """Tier loads of the invocations admitted for the next step, charged with it [s]."""
        self.tier_stores = 0
        """Lost contexts stored in the tier [count]."""
        self.tier_loads = 0
        """Contexts loaded back from the tier [count]."""
        self.tier_loaded_tokens = 0
        """Positions loaded back from the tier [positions]."""
        self.tier_load_s = 0.0
        """Time charged for the loads [s]."""
        self.events = events.heap
        self.runs = events.runs
        """The heap of run ends (:attr:`capplan.sim.events.EventQueue.runs`)."""
        self.tiebreak = events.tiebreak
        self.uids = uids
        self.on_invocation_done = on_invocation_done
        self.waiting: deque[Sequence] = deque()
        """Invocations waiting for admission (new turns and recomputes)."""
        self.prefilling: deque[Sequence] = deque()
        """Admitted invocations still prefilling, in admission order."""
        self.decode_ends: list[tuple[int, int, Sequence, int]] = []
        """Heap of decoding sequences by the step at which they end: ``(end_step, uid, sequence, epoch)``."""
        self.window_crossings: list[tuple[int, int, Sequence, int]] = []
        """Heap of decoding sequences by the step at which their context reaches the window."""
        self.decoding = 0
        """Decoding sequences [sequences]."""
        self.decoding_below_window = 0
        """Decoding sequences whose context is below the sliding window [sequences]."""
        self.decoding_cached = 0
        """Cached positions of the decoding sequences, summed [positions]."""
        self.decoding_cached_below_window = 0
        """... of those below the sliding window [positions]."""
        self.kv_prefill_bytes = 0.0
        """KV bytes reserved by prefilling invocations [bytes]."""
        self.kv_retained_bytes = 0.0
        """KV bytes of conversations waiting on a tool (evictable) [bytes]."""
        self.retained: dict[Sequence, None] = {}
        """Conversations whose KV is retained, oldest first (an ordered set)."""
        self.assigned_conversations = 0
        """Conversations living on this replica [count]."""
        self.new_conversations_waiting = 0
        """First turns in the waiting queue [count]."""
        self.busy = False
        """A run of steps is in progress."""
        self.run_epoch = 0
        """Bumped when a run is (re)scheduled (stale run-end events are skipped)."""
        self.run_start_s = 0.0
        self.run_steps = 0
        """Steps in the current run."""
        self.run_chunks: list[tuple[Sequence, int]] = _NO_CHUNKS
        """Prefill chunks ``(sequence, positions)`` of the current step (a run with chunks is one step);
        :meth:`finish_run` puts back the empty list, so a decode run need not."""
        self.run_line: "DecodeLine" = (0.0, 0.0, 0.0, 0.0, 0.0)
        """Price line of the current decode run."""
        self.run_spec: "SpecRun | None" = None
        """The current run's speculative price (set instead of ``run_line`` when it is a speculative run; on a replica
        without speculative decoding it stays ``None``, so plain decode runs do not reset it)."""
        self.run_time_s = 0.0
        """Duration of the current run [s]."""
        self.policy_version = 0
        """Policy version of the weights the replica runs."""
        self.target_version = 0
        """Newest policy version it should load."""
        self.loading_version = 0
        """Version being loaded while ``loading_weights``."""
        self.draining = False
        """Finishing running invocations before loading new weights (no admissions)."""
        self.loading_weights = False
        """Paused for a weight load."""
        self.stopped = False
        """The simulation reached its horizon: plan nothing more."""
        self.pending_hold_s = 0.0
        """A pause to take at the next step boundary (the framework's per-update time) [s]."""
        self.gated = False
        """Planning must look at the weights or the horizon first: a load in progress, the horizon
        reached, a hold to take, or newer weights to load (:meth:`regate` keeps it; one flag, so
        that the common plan reads one slot instead of five)."""
        self.steps_done = 0
        """Engine steps taken (the replica's step clock) [steps]."""
        self.prompt_steps = 0
        """Steps of prompt chunks alone, the decoding batch waiting (not on the step clock:
        an engine that does not mix, :attr:`mixed_prefill`) [steps]."""
        self.busy_s = 0.0
        """Time spent stepping [s]."""
        self.sequence_s = 0.0
        """Running sequences integrated over stepping time [sequence x s]."""
        self.forwarded_tokens = 0
        """Positions forwarded [positions]."""
        self.preemptions = 0
        self.evictions = 0
        """Retained-KV evictions [count]."""

    # ------------------------------------------------------------------ KV

    def kv_used_bytes(self) -> float:
        """KV bytes in use on the replica's fullest GPU [bytes]."""
        decoding, below = self.decoding, self.decoding_below_window
        return (
            self.kv_prefill_bytes
            + self.kv_retained_bytes
            + self.kv_full_bytes * self.decoding_cached
            + self.kv_window_bytes * (
                self.decoding_cached_below_window + self.window_limit * (decoding - below)
                if decoding > below else self.decoding_cached_below_window
            )
            + self.kv_state_bytes * decoding
        )

    def evict_retained(self, keep: "Sequence | None") -> bool:
        """Free the oldest retained conversation's KV (never ``keep``'s); False when none is left."""
        for seq in self.retained:
            if seq is not keep:
                del self.retained[seq]
                self.kv_retained_bytes -= seq.held_kv_bytes
                if self.offload is not None:
                    self._store_in_tier(seq, seq.held_positions)
                seq.held_positions = 0
                self.evictions += 1
                return True
        return False

    def _store_in_tier(self, seq: "Sequence", positions: int) -> None:
        """Keep ``seq``'s lost context of ``positions`` in the CPU tier, dropping the least
        recently stored prefixes while it does not fit (a prefix larger than the tier is not kept)."""
        capacity = self.offload.capacity_tokens  # type: ignore[union-attr]
        if positions <= 0 or positions > capacity:
            return
        tier = self.tier
        while self.tier_used + positions > capacity:
            oldest = next(iter(tier))
            self.tier_used -= tier.pop(oldest)
        tier[seq] = positions
        self.tier_used += positions
        self.tier_stores += 1

    def _load_recompute(self, inv: "Sequence") -> None:
        """Admit a preempted sequence's recompute with the context the tier holds loaded back
        (its last position, at least, is computed)."""
        stored = self.tier.pop(inv)
        self.tier_used -= stored
        loaded = stored if stored < inv.prefill_remaining else inv.prefill_remaining - 1
        if loaded <= 0:
            return
        inv.cached_positions += loaded
        inv.prefill_remaining -= loaded
        inv.recompute_forwarded -= loaded
        load_s = loaded * self.offload.load_s_per_token  # type: ignore[union-attr]
        self.pending_load_s += load_s
        self.tier_load_s += load_s
        self.tier_loads += 1
        self.tier_loaded_tokens += loaded

    def retain(self, seq: "Sequence", positions: int) -> None:
        """Keep ``positions`` of ``seq``'s KV while it waits on a tool."""
        seq.held_positions = positions
        # held_bytes(positions), inline (without a sliding window its window term is exactly 0.0)
        window = self.kv_window_bytes
        if window:
            limit = self.held_limit
            held = self.kv_full_bytes * positions + window * (positions if positions < limit else limit) + self.kv_state_bytes
        else:
            held = self.kv_full_bytes * positions + self.kv_state_bytes
        seq.held_kv_bytes = held
        self.kv_retained_bytes += held
        self.retained[seq] = None

    def conversation_done(self, seq: "Sequence", t: float) -> None:
        """``seq``'s conversation ended: free its retained KV (and use the room) and unassign it."""
        if seq.held_positions:
            self.kv_retained_bytes -= seq.held_kv_bytes
            del self.retained[seq]
            seq.held_positions = 0
            if self.waiting:
                self.wake(t)
        if self.tier and seq in self.tier:
            self.tier_used -= self.tier.pop(seq)
        self.assigned_conversations -= 1

    # ------------------------------------------------------------------ the decoding batch

    def leave_decode(self, inv: "Sequence") -> int:
        """Take ``inv`` out of the decoding batch; returns its cached positions."""
        steps_done = self.steps_done
        context = inv.join_context + steps_done - inv.join_step
        self.decoding -= 1
        self.decoding_cached -= context
        if inv.below_window:
            self.decoding_below_window -= 1
            self.decoding_cached_below_window -= context
        inv.epoch += 1
        inv.decode_forwarded += steps_done - inv.join_step
        return context

    def _retire_window_crossings(self) -> None:
        """Sequences whose context reached the window stop growing on sliding layers."""
        crossings = self.window_crossings
        steps = self.steps_done
        while crossings and crossings[0][0] <= steps:
            _, _, inv, epoch = heappop(crossings)
            if epoch == inv.epoch and inv.below_window:
                inv.below_window = False
                self.decoding_below_window -= 1
                self.decoding_cached_below_window -= inv.join_context + steps - inv.join_step

    def preempt(self) -> None:
        """Free the most recently joined decoding sequence; it will be recomputed.

        vLLM's V1 scheduler under first-come-first-served preempts the last request of its
        running list (``self.running.pop()`` in ``vllm/v1/core/sched/scheduler.py``,
        vllm-project/vllm @ 00024d314514900f361ad072af6931e403b7f589) and admits no waiting
        request in a step that preempted.
        """
        victim = None
        for _, _, inv, epoch in self.decode_ends:
            if epoch == inv.epoch and (victim is None or (inv.join_step, inv.uid) > (victim.join_step, victim.uid)):
                victim = inv
        assert victim is not None
        context = self.leave_decode(victim)
        remaining = victim.end_step - self.steps_done
        # the same sequence becomes its recompute (a new invocation of the same turn)
        victim.uid = self.uids()
        victim.is_recompute = True
        victim.is_first_turn = False
        victim.input_positions = context
        victim.prefill_remaining = context
        victim.cached_positions = 0
        victim.decode_steps = remaining
        victim.computes_logits = False
        self.waiting.appendleft(victim)
        self.preemptions += 1
        victim.recompute_forwarded += context
        if self.offload is not None:  # its KV goes to the CPU tier, to be loaded back when readmitted
            if victim in self.tier:
                self.tier_used -= self.tier.pop(victim)
            self._store_in_tier(victim, context - 1)

    def _free_kv_for_growth(self, used: float, growth: float) -> tuple[float, float, bool]:
        """Evict retained KV, then preempt, until the decode batch's next step fits.

        Returns the KV in use and the growth per step afterwards [bytes], and whether a
        sequence was preempted.
        """
        preempted = False
        capacity = self.kv_capacity_bytes
        while self.decoding and used + growth > capacity:
            if not self.evict_retained(None):
                self.preempt()
                preempted = True
                growth = self.kv_full_bytes * self.decoding + self.kv_window_bytes * self.decoding_below_window
            used = self.kv_used_bytes()
        return used, growth, preempted

    # ------------------------------------------------------------------ planning steps

    def wake(self, t: float) -> None:
        """New work (or new weights) arrived: plan now if idle, else end the run at the next step boundary.

        A tool call ending during a decode run lands here (about one per turn), so the common
        case of :func:`~capplan.sim.stepcost.steps_within` (one line dominates the whole run) and
        :func:`~capplan.sim.stepcost.run_time` are written inline, in their operation order.
        """
        if self.loading_weights:
            return
        if not self.busy:
            self.plan(t)
            return
        max_steps = self.run_steps
        if self.run_chunks or max_steps <= 1:
            return
        spec_run = self.run_spec
        elapsed = t - self.run_start_s
        if spec_run is not None:
            steps = spec_run.steps_within(max_steps, elapsed)
            if steps >= max_steps:
                return
            run_s = spec_run.time(steps)
        else:
            line = self.run_line
            compute_0, compute_growth, memory_0, memory_growth, fixed = line
            # step counts also as floats (exact), for float-only products (as in plan)
            max_f = max_steps + 0.0
            last = max_f - 1.0
            if elapsed > 0.0 and (compute_0 >= memory_0) == (compute_0 + compute_growth * last >= memory_0 + memory_growth * last):
                # steps_within(line, max_steps, elapsed), one line dominating
                if compute_0 >= memory_0:
                    start, growth = compute_0, compute_growth
                else:
                    start, growth = memory_0, memory_growth
                start += fixed
                if max_f * start + growth * max_f * last * 0.5 <= elapsed:
                    return  # the run ends at or after t anyway
                # _solve(start, growth, elapsed)
                b = start - 0.5 * growth
                if growth <= 0.0:
                    solved = elapsed / start
                else:
                    root = sqrt(b * b + 2.0 * growth * elapsed)
                    solved = 2.0 * elapsed / (b + root) if b > 0.0 else (-b + root) / growth
                steps = ceil(solved - 1e-9)
                if steps > max_steps:
                    steps = max_steps
                if steps < 0:
                    steps = 0
                k = steps + 0.0
                while steps < max_steps and k * start + growth * k * (k - 1.0) * 0.5 < elapsed:
                    steps += 1
                    k += 1.0
                while steps > 0 and (k - 1.0) * start + growth * (k - 1.0) * (k - 2.0) * 0.5 >= elapsed:
                    steps -= 1
                    k -= 1.0
            else:
                steps = steps_within(line, max_steps, elapsed)
            if steps >= max_steps:
                return
            # run_time(line, steps): its two arithmetic series (an empty one adds 0.0)
            if steps <= 0:
                run_s = 0.0
            else:
                steps_f = steps + 0.0
                gap_0, gap_growth = compute_0 - memory_0, compute_growth - memory_growth
                if gap_growth == 0.0:
                    if gap_0 >= 0.0:
                        run_s = steps_f * compute_0 + compute_growth * steps_f * (steps_f - 1.0) * 0.5 + fixed * steps_f
                    else:
                        run_s = steps_f * memory_0 + memory_growth * steps_f * (steps_f - 1.0) * 0.5 + fixed * steps_f
                else:
                    switch = ceil(-gap_0 / gap_growth)
                    if switch > steps:
                        switch = steps
                    if switch < 0:
                        switch = 0
                    if gap_growth > 0.0:  # memory first, compute from ``switch`` on
                        start_1, growth_1, start_2, growth_2 = memory_0, memory_growth, compute_0, compute_growth
                    else:
                        start_1, growth_1, start_2, growth_2 = compute_0, compute_growth, memory_0, memory_growth
                    switch_f = switch + 0.0
                    n = steps_f - switch_f
                    run_s = (
                        (switch_f * start_1 + growth_1 * switch_f * (switch_f - 1.0) * 0.5 if switch > 0 else 0.0)
                        + (n * start_2 + growth_2 * n * (switch_f + steps_f - 1.0) * 0.5 if n > 0.0 else 0.0)
                        + fixed * steps_f
                    )
        self.run_steps = steps
        self.run_time_s = run_s
        self.run_epoch = epoch = self.run_epoch + 1
        heappush(self.runs, (self.run_start_s + run_s, next(self.tiebreak), self, epoch))

    def plan(self, t: float) -> None:
        """Build the next step (or run of decode steps) at step boundary ``t`` [s].

        A step with prefill chunks is priced from its mix (:meth:`StepCoefficients.step_time`,
        with :func:`capplan.roofline.causal_pairs_one` for the chunks' attention pairs); else the
        decoding batch runs until a sequence ends, crosses the window, or KV runs out, priced as
        a :data:`~capplan.sim.stepcost.DecodeLine`. Those helpers are written inline here, in
        their own operation order (so the same bits): this is the simulator's hottest code.
        """
        if self.gated:
            if self.loading_weights or self.stopped:
                return
            if self.pending_hold_s > 0.0:  # the framework's per-update time: no step runs
                self.loading_weights = True  # (still gated)
                self.loading_version = self.policy_version
                self.busy = False
                heappush(self.events, (t + self.pending_hold_s, next(self.tiebreak), EVENT_WEIGHTS_LOADED, self.index, 0))
                self.pending_hold_s = 0.0
                return
            if self.target_version > self.policy_version:  # new weights
                if self.inflight_updates or (not self.decoding and not self.prefilling):
                    self.start_weight_load(t)
                    return
                self.draining = True
        steps_done = self.steps_done
        crossings = self.window_crossings
        if crossings and crossings[0][0] <= steps_done:
            self._retire_window_crossings()
        # the decode batch's next step must fit
        full_bytes, window_bytes = self.kv_full_bytes, self.kv_window_bytes
        decoding = self.decoding
        below = self.decoding_below_window
        cached = self.decoding_cached
        growth = full_bytes * decoding
        used = self.kv_prefill_bytes + self.kv_retained_bytes + full_bytes * cached + self.kv_state_bytes * decoding
        if window_bytes:  # (without a window both terms are exactly 0.0)
            growth += window_bytes * below
            used += window_bytes * (self.decoding_cached_below_window + self.window_limit * (decoding - below))
        capacity = self.kv_capacity_bytes
        preempted = False
        if decoding and used + growth > capacity:
            used, growth, preempted = self._free_kv_for_growth(used, growth)
            decoding = self.decoding
            below = self.decoding_below_window
            cached = self.decoding_cached
        # prefill chunks: continuing prefills first, then admissions
        budget = self.max_batched_tokens - decoding * self.budget_per_decoder if self.mixed_prefill else self.max_batched_tokens
        if budget > 0 and (self.prefilling or self.waiting):
            left = self._start_step_with_prefill(budget, used, growth, preempted, t)
            if left is None:
                return  # a step with prefill chunks is scheduled
            used = left
        if not decoding:
            self.busy = False
            self.run_chunks = _NO_CHUNKS
            if self.draining and not self.prefilling:
                self.start_weight_load(t)
            return
        # a run of pure decode steps: until a sequence ends, crosses the window, or KV runs out
        ends = self.decode_ends
        head = ends[0]
        while head[3] != head[2].epoch:
            heappop(ends)
            head = ends[0]
        steps = head[0] - steps_done
        if crossings:
            while crossings and crossings[0][3] != crossings[0][2].epoch:
                heappop(crossings)
            if crossings:
                to_crossing = crossings[0][0] - steps_done + 1
                if to_crossing < steps:
                    steps = to_crossing
        # KV for ``steps`` more steps; the floor division only where the room may be short (a
        # margin of two steps covers its rounding, so the outcome is the floor division's)
        if growth > 0.0 and capacity - used < growth * (steps + 2):
            fitting = int((capacity - used) // growth)
            if fitting < steps:
                steps = fitting
        if steps < 1:
            steps = 1
        if self.spec is not None:
            self._start_spec_run(steps, t)
            return
        coeffs = self.coeffs
        c_pair, m_read = coeffs.c_pair, coeffs.m_read
        # the counts as floats (exact: integers far below 2**53), so that the products below are
        # float-only, which CPython computes faster than mixed int-float ones, with the same values
        decoding_f = decoding + 0.0
        cached_f = cached + 0.0
        steps_f = steps + 0.0
        if self.window_terms:
            cached_below = self.decoding_cached_below_window
            above = decoding - below
            if above:
                pairs_window = cached_below + below + self.window * above
                read_window = cached_below + self.window_limit * above
            else:
                pairs_window = float(cached_below + below)
                read_window = float(cached_below)
            c_pair_w, m_read_w = coeffs.c_pair_w, coeffs.m_read_w
            compute_0 = self.decode_compute_base + self.decode_compute_per_sequence * decoding_f + c_pair * (cached_f + decoding_f) + c_pair_w * pairs_window
            memory_0 = self.decode_memory_base + self.decode_memory_per_sequence * decoding_f + m_read * cached_f + m_read_w * read_window
            compute_growth = c_pair * decoding_f + c_pair_w * below
            memory_growth = m_read * decoding_f + m_read_w * below
        else:  # the same sums without their terms that are exactly 0.0
            compute_0 = self.decode_compute_base + self.decode_compute_per_sequence * decoding_f + c_pair * (cached_f + decoding_f)
            memory_0 = self.decode_memory_base + self.decode_memory_per_sequence * decoding_f + m_read * cached_f
            compute_growth = c_pair * decoding_f
            memory_growth = m_read * decoding_f
        if coeffs.m_routed:
            memory_0 += coeffs.m_routed * (1.0 - coeffs.q**decoding)
        fixed = self.decode_fixed_base + self.decode_fixed_per_sequence * decoding_f
        if self.k_a2a and decoding > self.a2a_switch:  # (it adds exactly 0.0 without expert parallelism)
            fixed += self.k_a2a * decoding
        if decoding > self.graph_max_seqs:  # a step without a CUDA graph
            fixed += self.graphless_s
        self.run_line = line = (compute_0, compute_growth, memory_0, memory_growth, fixed)
        self.busy = True
        self.run_steps = steps
        self.run_start_s = t
        # run_time(line, steps), with the common case (one line dominates throughout) inline
        last = steps_f - 1.0
        if (compute_0 >= memory_0) == (compute_0 + compute_growth * last >= memory_0 + memory_growth * last):
            if compute_0 >= memory_0:
                run_s = steps_f * (compute_0 + fixed) + compute_growth * steps_f * last * 0.5
            else:
                run_s = steps_f * (memory_0 + fixed) + memory_growth * steps_f * last * 0.5
        else:
            run_s = run_time(line, steps)
        self.run_time_s = run_s
        self.run_epoch = epoch = self.run_epoch + 1
        heappush(self.runs, (t + run_s, next(self.tiebreak), self, epoch))

    def _start_spec_run(self, steps: int, t: float) -> None:
        """Schedule a run of ``steps`` speculative decode steps (output tokens), priced per output
        token (:class:`capplan.sim.speculative.SpecRun`)."""
        from capplan.sim.speculative import spec_run

        run = spec_run(self.spec, self.coeffs, self.spec_tokens, self.decoding, self.decoding_below_window,  # type: ignore[arg-type]
                       self.decoding_cached, self.decoding_cached_below_window)
        self.run_spec = run
        self.busy = True
        self.run_steps = steps
        self.run_chunks = _NO_CHUNKS
        self.run_start_s = t
        self.run_time_s = run_s = run.time(steps)
        self.run_epoch = epoch = self.run_epoch + 1
        heappush(self.runs, (t + run_s, next(self.tiebreak), self, epoch))

    def _spec_step_terms(self) -> tuple[int, int, float, float, float]:
        """What a verify step adds to a mixed step's work over a plain decode step of the same
        batch: ``(new, logits, pairs, pairs_window, 0)`` (``n - 1`` more positions per sequence)."""
        n = self.spec.positions  # type: ignore[union-attr]
        decoding, below = self.decoding, self.decoding_below_window
        extra_pairs_each = n * (n + 1) * 0.5 - 1.0
        pairs = (n - 1) * self.decoding_cached + decoding * extra_pairs_each
        pairs_window = 0.0
        if self.kv_window_bytes:
            pairs_window = (n - 1) * self.decoding_cached_below_window + below * extra_pairs_each
            pairs_window += (n - 1) * self.window * (decoding - below)
        return decoding * (n - 1), decoding * (n - 1), pairs, pairs_window, 0.0

    def _spec_step_price(self, step_s: float) -> float:
        """A mixed step's price from its verify step with the chunks ``step_s`` [s]: plus the drafts,
        less ``(1 - 1 / E)`` of the pure verify step and drafts (module notes of :mod:`capplan.sim.speculative`)."""
        from capplan.sim.speculative import spec_run

        run = spec_run(self.spec, self.coeffs, self.spec_tokens, self.decoding, self.decoding_below_window,  # type: ignore[arg-type]
                       self.decoding_cached, self.decoding_cached_below_window)
        draft = self.spec.draft_s(run.draft, 0, 1)  # type: ignore[union-attr]
        pure = run_time(run.verify, 1) + draft
        return step_s + draft - (1.0 - 1.0 / self.spec_tokens) * pure

    def _start_step_with_prefill(self, budget: int, used: float, growth: float, preempted: bool, t: float) -> float | None:
        """Take the next step's prefill chunks within ``budget`` [positions] and schedule the step.

        Continuing prefills come first; then, unless the step preempted (as vLLM: no admission in
        a step that preempted), the replica drains or batches statically, invocations are admitted
        from the head of the waiting queue while KV, ``max_num_seqs`` and the budget allow, each
        with its first chunk. A step with chunks is priced with the decoding batch
        (:meth:`StepCoefficients.step_time` and :func:`capplan.roofline.causal_pairs_one`, written
        inline in the same operation order) and its end scheduled.

        Returns ``None`` when a step was scheduled, else the KV in use [bytes] (admissions change
        it without a chunk only under static batching, with no budget left).

        Raises
        ------
        DoesNotFitError
            An invocation alone does not fit an idle replica's KV.
        """
        decoding = self.decoding
        prefilling = self.prefilling
        chunks: list[tuple[Sequence, int]] = []
        for inv in prefilling:
            n = inv.prefill_remaining if inv.prefill_remaining < budget else budget
            chunks.append((inv, n))
            budget -= n
            if budget <= 0:
                break
        waiting = self.waiting
        static = self.static_batching
        max_num_seqs = self.max_num_seqs
        if (
            budget > 0
            and not preempted
            and waiting
            and not self.draining
            and decoding + len(prefilling) < max_num_seqs
            and not (static and (decoding or prefilling))
        ):
            # admit from the head of the waiting queue
            capacity = self.kv_capacity_bytes
            full, state = self.kv_full_bytes, self.kv_state_bytes
            offload = self.offload
            while waiting and (budget > 0 or static) and decoding + len(prefilling) < max_num_seqs:
                inv = waiting[0]
                positions = inv.input_positions
                if self.sliding:
                    limit = self.held_limit
                    reserved = full * positions + self.kv_window_bytes * (positions if positions < limit else limit) + state  # held_bytes
                else:  # the same sum without its window term (exactly 0.0)
                    reserved = full * positions + state
                fresh = not (inv.is_recompute or inv.is_score)  # a turn: it may reuse a prefix
                held_positions = inv.held_positions if fresh else 0
                need = reserved - inv.held_kv_bytes if held_positions else reserved
                if used + need + growth > capacity:
                    own = inv.held_kv_bytes if inv.held_positions and not inv.is_recompute else 0.0
                    if used - (self.kv_retained_bytes - own) + need + growth > capacity:
                        if decoding or prefilling:
                            break  # wait for running sequences to free KV
                        raise DoesNotFitError(
                            f"an invocation of {inv.input_positions:,} positions does not fit a replica's KV "
                            f"({capacity / 2**30:.2f} GiB per GPU); raise --tp"
                        )
                    while used + need + growth > capacity and self.evict_retained(inv):
                        used = self.kv_used_bytes()
                waiting.popleft()
                # admit: reserve its KV and start its prefill, reusing the prefix it still holds
                inv.kv_reserved_bytes = reserved
                if fresh:
                    first = inv.is_first_turn
                    held = inv.shared_prompt if first else held_positions  # a first turn: the group's first sample computed the prompt
                    claim = inv.claimed_positions
                    hit = claim if claim <= held else held
                    if offload is not None and inv in self.tier:  # the evicted prefix comes back from the CPU tier
                        stored = self.tier.pop(inv)
                        self.tier_used -= stored
                        loaded = (claim if claim <= stored else stored) - hit
                        if loaded > 0:
                            hit += loaded
                            load_s = loaded * offload.load_s_per_token
                            self.pending_load_s += load_s
                            self.tier_load_s += load_s
                            self.tier_loads += 1
                            self.tier_loaded_tokens += loaded
                    if held_positions:
                        self.kv_retained_bytes -= inv.held_kv_bytes
                        del self.retained[inv]
                        inv.held_positions = 0
                    if claim > hit:
                        inv.recompute_forwarded += claim - hit
                    inv.cached_positions = hit
                    inv.prefill_remaining = remaining = positions - hit
                    self.kv_prefill_bytes += reserved
                    inv.cache_hits.append(hit)
                    if first:
                        self.new_conversations_waiting -= 1
                        inv.policy_version = self.policy_version
                else:
                    self.kv_prefill_bytes += reserved
                    if offload is not None and inv.is_recompute and inv in self.tier:  # a preempted context comes back from the CPU tier
                        self._load_recompute(inv)
                    remaining = inv.prefill_remaining
                prefilling.append(inv)
                used += need
                if budget > 0:
                    n = remaining if remaining < budget else budget
                    chunks.append((inv, n))
                    budget -= n
        if not chunks:
            return used
        # price the step (its decodes only if the engine mixes them in; else they wait for it)
        if not self.mixed_prefill:
            decoding = 0
        below = self.decoding_below_window if decoding else 0
        cached_below = self.decoding_cached_below_window if decoding else 0
        new = decoding
        logits = decoding
        decoding_cached = self.decoding_cached if decoding else 0
        pairs = float(decoding_cached + decoding)
        read = decoding_cached
        if self.kv_window_bytes:
            window = self.window
            window_limit = self.window_limit
            if decoding > below:
                pairs_window = cached_below + below + window * (decoding - below)
                read_window = cached_below + window_limit * (decoding - below)
            else:
                pairs_window = float(cached_below + below)
                read_window = float(cached_below)
            for inv, n in chunks:
                cached = inv.cached_positions
                new += n
                if inv.is_score:
                    logits += n
                elif n == inv.prefill_remaining and inv.computes_logits:
                    logits += 1
                pairs += n * cached + n * (n + 1) * 0.5  # causal_pairs_one(cached, n)
                # causal_pairs_one(cached, n, window)
                top = cached + n if cached + n < window else window
                below_edge = top - cached if top > cached else 0
                pairs_window += below_edge * (cached + 1 + top) * 0.5 + (n - below_edge) * window
                read += cached
                read_window += cached if cached < window_limit else window_limit
        else:
            pairs_window = read_window = 0.0
            for inv, n in chunks:
                cached = inv.cached_positions
                new += n
                if inv.is_score:
                    logits += n
                elif n == inv.prefill_remaining and inv.computes_logits:
                    logits += 1
                pairs += n * cached + n * (n + 1) * 0.5  # causal_pairs_one(cached, n)
                read += cached
        seqs = decoding + len(chunks)
        if self.spec is not None and decoding:
            more_new, more_logits, more_pairs, more_pairs_window, _ = self._spec_step_terms()
            new += more_new
            logits += more_logits
            pairs += more_pairs
            pairs_window += more_pairs_window
        # StepCoefficients.step_time(new, logits, pairs, pairs_window, read, read_window, seqs), inline
        (c_0, c_new, c_logit, c_pair, c_pair_w, m_0, m_new, m_logit, m_read, m_read_w, m_seq, m_head, m_routed, q,
         overhead, k_0, k_new, h_seq, k_head, k_logit) = self.step_constants
        # the counts as floats (exact), for float-only products (as in plan)
        new_f, logits_f, seqs_f = new + 0.0, logits + 0.0, seqs + 0.0
        if self.kv_window_bytes:
            c = c_0 + c_new * new_f + c_logit * logits_f + c_pair * pairs + c_pair_w * pairs_window
            m = m_0 + m_new * new_f + m_logit * logits_f + m_read * read + m_read_w * read_window + m_seq * seqs_f
        else:  # the same sums without the window terms (pairs_window and read_window are 0.0)
            c = c_0 + c_new * new_f + c_logit * logits_f + c_pair * pairs
            m = m_0 + m_new * new_f + m_logit * logits_f + m_read * read + m_seq * seqs_f
        if logits > 0:
            m += m_head
        if m_routed:
            m += m_routed * (1.0 - q**new)
        f = overhead + k_0 + k_new * new_f + h_seq * seqs_f
        if logits > 0:
            f += k_head + k_logit * logits_f
        if self.k_a2a and new > self.a2a_switch:
            f += self.k_a2a * new
        if seqs > self.graph_max_seqs:
            f += self.graphless_s
        step_s = (c if c > m else m) + f
        if self.spec is not None and decoding:
            step_s = self._spec_step_price(step_s)
        if self.pending_load_s:
            step_s += self.pending_load_s
            self.pending_load_s = 0.0
        self.busy = True
        self.run_steps = 1 if self.mixed_prefill else 0  # decode steps the run advances
        self.run_chunks = chunks
        self.run_start_s = t
        self.run_time_s = step_s
        self.run_epoch = epoch = self.run_epoch + 1
        heappush(self.runs, (t + step_s, next(self.tiebreak), self, epoch))
        return None

    def finish_run(self, t: float) -> None:
        """The current run of ``run_steps`` steps ended at ``t`` [s]: advance the batch, finish invocations, plan the next.

        Finishing an invocation calls back into the simulation, which may plan this replica
        again before the loop over ended sequences is over (a new group, a teacher's forward):
        state is read from the replica after each callback, never kept in locals across one.
        """
        steps = self.run_steps
        decoding = self.decoding
        run_time_s = self.run_time_s
        self.busy = False
        self.busy_s += run_time_s
        self.steps_done = steps_done = self.steps_done + steps
        tokens = decoding * steps
        self.decoding_cached += tokens
        if self.sliding:
            self.decoding_cached_below_window += self.decoding_below_window * steps
        chunks = self.run_chunks
        if chunks:
            if not steps:
                self.prompt_steps += 1
            self.sequence_s += (decoding + len(chunks)) * run_time_s
            for inv, n in chunks:
                inv.prefill_remaining -= n
                inv.cached_positions += n
                tokens += n
                if inv.is_score:
                    inv.score_forwarded += n
                else:
                    inv.prefill_forwarded += n
            self.run_chunks = _NO_CHUNKS
            prefilling = self.prefilling
            while prefilling and prefilling[0].prefill_remaining == 0:
                inv = prefilling.popleft()
                self.kv_prefill_bytes -= inv.kv_reserved_bytes
                if inv.decode_steps > 0:
                    # join the decoding batch with its input cached
                    context = inv.input_positions
                    inv.join_context = context
                    inv.join_step = steps_done
                    inv.end_step = end_step = steps_done + inv.decode_steps
                    inv.epoch = epoch = inv.epoch + 1
                    self.decoding += 1
                    self.decoding_cached += context
                    if self.sliding and context < self.window_limit:
                        inv.below_window = True
                        self.decoding_below_window += 1
                        self.decoding_cached_below_window += context
                        if self.kv_window_bytes:
                            heappush(self.window_crossings, (steps_done + int(self.window_limit) - context, inv.uid, inv, epoch))
                    else:
                        inv.below_window = False
                    heappush(self.decode_ends, (end_step, inv.uid, inv, epoch))
                else:
                    # one sampled token (or none): the invocation ends with its prefill
                    self.on_invocation_done(self, inv, inv.input_positions, t)
        else:
            self.sequence_s += decoding * run_time_s
        self.forwarded_tokens += tokens
        ends = self.decode_ends
        if ends and ends[0][0] <= steps_done:
            on_invocation_done = self.on_invocation_done
            while True:
                _, _, inv, epoch = heappop(ends)
                if epoch == inv.epoch:
                    # leave_decode(inv), inline
                    joined = inv.join_step
                    context = inv.join_context + steps_done - joined
                    self.decoding -= 1
                    self.decoding_cached -= context
                    if inv.below_window:
                        self.decoding_below_window -= 1
                        self.decoding_cached_below_window -= context
                    inv.epoch = epoch + 1
                    inv.decode_forwarded += steps_done - joined
                    on_invocation_done(self, inv, context, t)
                if not ends or ends[0][0] > steps_done:
                    break
        self.plan(t)

    # ------------------------------------------------------------------ weights

    def regate(self) -> None:
        """Recompute :attr:`gated` after a change of the weights' state or of the horizon."""
        self.gated = (
            self.loading_weights or self.stopped or self.pending_hold_s > 0.0 or self.target_version > self.policy_version
        )

    def start_weight_load(self, t: float) -> None:
        """Pause to load the target weights (for the weight push time)."""
        self.loading_weights = True
        self.gated = True
        self.draining = False
        self.loading_version = self.target_version
        self.busy = False
        heappush(self.events, (t + self.weight_sync_s, next(self.tiebreak), EVENT_WEIGHTS_LOADED, self.index, 0))

    def hold(self, duration_s: float, t: float) -> None:
        """Pause for ``duration_s`` [s] from the next step boundary (now, if idle)."""
        self.pending_hold_s += duration_s
        self.regate()
        self.wake(t)

    def adopt_version(self, version: int) -> None:
        """Decode with the weights of policy version ``version`` from now on (a synchronous push):
        the drafter's acceptance follows them (:meth:`SpecCosts.tokens_at`)."""
        self.policy_version = self.target_version = version
        if self.spec is not None:
            self.spec_tokens = self.spec.tokens_at(version)

    def finish_weight_load(self, t: float) -> None:
        """The weights are loaded (or a hold is over): resume at ``t`` [s]."""
        self.loading_weights = False
        self.policy_version = self.loading_version
        self.regate()
        if self.spec is not None:
            self.spec_tokens = self.spec.tokens_at(self.policy_version)
        self.plan(t)

    # ------------------------------------------------------------------ reporting

    def kv_used_at(self, t: float) -> float:
        """KV in use at ``t`` [bytes], interpolating the steps of a decode run in progress."""
        used = self.kv_used_bytes()
        if self.busy and not self.run_chunks and self.run_steps > 1 and self.run_time_s > 0:
            # steps of the current run done by t (a sample, not an event)
            done = int(self.run_steps * (t - self.run_start_s) / self.run_time_s)
            used += done * (self.kv_full_bytes * self.decoding + self.kv_window_bytes * self.decoding_below_window)
        return used

    def busy_until(self, horizon_s: float) -> tuple[float, float]:
        """Stepping time and running sequences x time up to ``horizon_s`` [s, sequence x s].

        A run in progress at the horizon counts as busy up to the horizon.
        """
        busy_s, sequence_s = self.busy_s, self.sequence_s
        if self.busy:
            part = min(horizon_s - self.run_start_s, self.run_time_s)
            busy_s += part
            sequence_s += (self.decoding + len(self.run_chunks)) * part
        return busy_s, sequence_s

    def credit_unfinished_decodes(self) -> None:
        """Credit sequences still decoding (at the horizon) with the decode steps they have done."""
        for _, _, inv, epoch in self.decode_ends:
            if epoch == inv.epoch:
                inv.decode_forwarded += self.steps_done - inv.join_step
