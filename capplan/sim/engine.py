"""The discrete-event core of ``capplan simulate``: replicas, tools, trainer, one event heap.

Everything here is internal; :mod:`capplan.simulate` is the public face. The model, in the
order a conversation meets it:

1. **Task queue.** The controller dispatches prompt groups (``samples_per_prompt``
   conversations each) when the mode allows: ``sync`` dispatches one batch per policy version
   and pauses generation while the trainer updates and pushes weights; ``async`` keeps
   dispatching while ``dispatched - rejected <= (K + version + 1) x prompts_per_step`` groups
   (AReaL's staleness gate, ``K`` = ``max_staleness``), or, given ``max_inflight_groups``, while
   fewer groups than that are generating. Each conversation stays on the replica
   it was given (least loaded) for its whole life.
2. **Inference queue.** Each replica runs engine steps under a token budget
   (``max_batched_tokens``) and ``max_num_seqs``: every decoding sequence forwards one
   position, and the rest of the budget goes to prefill chunks, continuing partial prefills
   first, then admitting from the waiting queue (first come, first served) while the KV
   capacity allows. A step is priced from its actual mix (:mod:`capplan.sim.stepcost`); runs of
   decode steps with an unchanged batch are advanced in one jump (closed-form sums).
3. **KV.** Held in bytes per GPU: full-attention layers grow with the context, sliding-window
   layers stop at the window, linear-attention layers hold a fixed state. An admitted
   invocation reserves the KV of its whole input; decoding grows it one position per step.
   When a step's growth does not fit, the most recently joined decoding sequence is preempted:
   its KV is freed and it is recomputed (prefilled again) when readmitted. A conversation
   waiting on a tool keeps its KV (``retain``) or frees it (``evict``). Retained KV behaves as
   an engine's prefix cache does: it stays resident until an admission or a decode step needs the
   room, then the longest-waiting conversation's KV is evicted first (before any running
   sequence is preempted), and its next turn recomputes the prefix it lost.
4. **Environment queue.** A tool call takes an environment worker (``env_workers``, unlimited
   by default) for the conversation's drawn wait; the next turn then joins the replica's
   waiting queue, reusing the prefix the workload's cache policy allows.
5. **Trainer.** Finished groups are filtered (``filtered_group_fraction``) and queued; the
   trainer ingests them in completion order, rejects those more than ``K`` versions old
   (async), trains on ``prompts_per_step`` groups, and pushes the weights. Replicas take the
   new weights by draining (finish running invocations, then load) or, with in-flight
   updates, at their next step boundary.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from capplan.errors import DoesNotFitError, InputError

if TYPE_CHECKING:
    import numpy as np

    from capplan.sim.stepcost import StepCoefficients
    from capplan.workload import Workload

# event kinds
_EV_RUN = 0  # a replica's run of steps ended (a = replica, b = epoch)
_EV_TOOL = 1  # a tool call finished (a = conversation, b = turn)
_EV_TRAIN = 2  # the trainer finished an update
_EV_SYNC = 3  # the trainer finished pushing weights
_EV_PAUSE = 4  # a replica finished loading new weights (a = replica)
_EV_SAMPLE = 5  # time-series sample

# conversation outcomes
OUT_NONE, OUT_ACCEPTED, OUT_STALE, OUT_FILTERED, OUT_SURPLUS = 0, 1, 2, 3, 4
OUTCOME_NAMES = {OUT_NONE: "unfinished", OUT_ACCEPTED: "accepted", OUT_STALE: "rejected_stale",
                 OUT_FILTERED: "rejected_filtered", OUT_SURPLUS: "rejected_surplus"}

#: Time-series samples kept: between this and twice this many (the interval doubles).
MAX_SAMPLES = 1000


@dataclass(frozen=True)
class EngineSetup:
    """Per-replica constants the core needs (built by :mod:`capplan.simulate`)."""

    coeffs: "StepCoefficients"
    kv_capacity_bytes: float
    """KV budget of one replica's fullest GPU [bytes]."""
    kv_full_bytes: float
    """KV bytes per cached position on full-attention layers, one GPU [bytes/position]."""
    kv_window_bytes: float
    """KV bytes per cached position on sliding-window layers, one GPU [bytes/position]."""
    kv_state_bytes: float
    """Linear-attention state per sequence, one GPU [bytes]."""
    max_num_seqs: int
    max_batched_tokens: int
    weight_sync_s: float
    """Time to push new weights to the replicas [s]."""
    trainer_time: Callable[["np.ndarray"], float]
    """Trainer step time for records of the given lengths [s]."""


@dataclass(frozen=True)
class EngineOptions:
    """Run options (validated by :mod:`capplan.simulate`)."""

    replicas: int = 1
    env_workers: int | None = None
    mode: str = "sync"
    max_staleness: int = 1
    sampling: str = "active"
    oversample: float = 1.0
    static_batching: bool = False
    inflight_updates: bool = False
    steps: int = 10
    seed: int = 0
    max_inflight_groups: int | None = None


_NO_CHUNKS: list = []  # shared empty chunk list (never mutated)


class _Seq:
    """One invocation (or a preempted invocation's recompute) on a replica."""

    __slots__ = ("conv", "turn", "uid", "inp", "claim", "prefill_left", "cached", "dec", "ctx0", "join",
                 "end", "epoch", "lo", "kv_res", "logits", "recompute", "new")

    def __init__(self, conv: int, turn: int, uid: int) -> None:
        self.conv = conv
        self.turn = turn
        self.uid = uid
        self.inp = 0  # input positions of the invocation (recompute: positions to rebuild)
        self.claim = 0  # positions the ledger counts as a cache hit
        self.prefill_left = 0
        self.cached = 0
        self.dec = 0  # decode steps after the prefill
        self.ctx0 = 0
        self.join = 0
        self.end = 0
        self.epoch = 0
        self.lo = True
        self.kv_res = 0.0
        self.logits = True
        self.recompute = False
        self.new = turn == 0


class _Replica:
    __slots__ = (
        "idx", "waiting", "prefilling", "dec", "cross", "B", "B_lo", "S", "S_lo", "kv_fixed", "kv_ret", "steps",
        "retained", "assigned", "busy", "epoch", "t0", "k", "chunks", "line", "dt", "version", "target",
        "draining", "paused", "busy_s", "batch_s", "tokens", "nsteps", "n_new_waiting", "pause_target",
    )

    def __init__(self, idx: int) -> None:
        self.idx = idx
        self.waiting: deque[_Seq] = deque()
        self.prefilling: deque[_Seq] = deque()
        self.dec: list[tuple[int, int, _Seq, int]] = []  # (end step, uid, seq, epoch)
        self.cross: list[tuple[int, int, _Seq, int]] = []  # (step where context reaches the window, ...)
        self.B = 0
        self.B_lo = 0
        self.S = 0  # sum of cached positions of decoding sequences
        self.S_lo = 0  # ... of those below the sliding window
        self.kv_fixed = 0.0  # KV bytes reserved by prefilling invocations
        self.kv_ret = 0.0  # KV bytes of conversations waiting on a tool (evictable)
        self.steps = 0
        self.retained: dict[int, None] = {}
        self.assigned = 0
        self.busy = False
        self.epoch = 0
        self.t0 = 0.0
        self.k = 0
        self.chunks: list[tuple[_Seq, int]] = []
        self.line = (0.0, 0.0, 0.0, 0.0, 0.0)  # compute c0, cg, memory m0, mg, fixed
        self.dt = 0.0
        self.version = 0
        self.target = 0
        self.pause_target = 0
        self.draining = False
        self.paused = False
        self.busy_s = 0.0
        self.batch_s = 0.0
        self.tokens = 0
        self.nsteps = 0
        self.n_new_waiting = 0


def _line_sum(a: float, g: float, p: int, q: int) -> float:
    """``sum_{i=p}^{q-1} (a + g i)``."""
    n = q - p
    return n * a + g * n * (p + q - 1) * 0.5 if n > 0 else 0.0


def run_time(line: tuple[float, float, float, float, float], k: int) -> float:
    """Time of ``k`` decode steps whose compute and memory times grow linearly [s].

    ``step_i = max(c0 + cg i, m0 + mg i) + fixed``; the two lines cross at most once.
    """
    c0, cg, m0, mg, fx = line
    if k <= 0:
        return 0.0
    d0, dg = c0 - m0, cg - mg
    if dg == 0.0:
        a, g = (c0, cg) if d0 >= 0 else (m0, mg)
        return _line_sum(a, g, 0, k) + fx * k
    j = -d0 / dg  # compute - memory changes sign at i = j
    s = max(0, min(k, math.ceil(j)))
    if dg > 0:  # memory first, compute from s on
        return _line_sum(m0, mg, 0, s) + _line_sum(c0, cg, s, k) + fx * k
    return _line_sum(c0, cg, 0, s) + _line_sum(m0, mg, s, k) + fx * k


def _split(line: tuple[float, float, float, float, float], k: int) -> tuple[int, float, float, float, float]:
    """``(s, a1, g1, a2, g2)``: steps ``i < s`` follow line 1, the rest line 2 (``fixed`` excluded)."""
    c0, cg, m0, mg, _ = line
    d0, dg = c0 - m0, cg - mg
    if dg == 0.0:
        a, g = (c0, cg) if d0 >= 0 else (m0, mg)
        return k, a, g, a, g
    s = max(0, min(k, math.ceil(-d0 / dg)))
    if dg > 0:
        return s, m0, mg, c0, cg
    return s, c0, cg, m0, mg


def _solve(a: float, g: float, dt: float) -> float:
    """Real ``m`` with ``m a + g m (m - 1) / 2 = dt`` (``a > 0``, ``g >= 0``)."""
    b = a - 0.5 * g
    if g <= 0.0:
        return dt / a
    return 2.0 * dt / (b + math.sqrt(b * b + 2.0 * g * dt)) if b > 0 else (-b + math.sqrt(b * b + 2.0 * g * dt)) / g


def steps_within(line: tuple[float, float, float, float, float], k_max: int, dt: float) -> int:
    """Smallest ``k`` (0..k_max) with ``run_time(line, k) >= dt``: the step boundary at or after ``dt``.

    Solved in closed form on each linear piece (a quadratic in ``k``), then checked exactly.
    """
    if dt <= 0.0:
        return 0
    c0, cg, m0, mg, fx = line
    if (c0 >= m0) == (c0 + cg * (k_max - 1) >= m0 + mg * (k_max - 1)):
        # one line dominates the whole run: T(k) = k (a + fx) + g k (k - 1) / 2
        a, g = (c0, cg) if c0 >= m0 else (m0, mg)
        a += fx
        if k_max * a + g * k_max * (k_max - 1) * 0.5 <= dt:
            return k_max
        k = max(0, min(k_max, math.ceil(_solve(a, g, dt) - 1e-9)))
        while k < k_max and k * a + g * k * (k - 1) * 0.5 < dt:
            k += 1
        while k > 0 and (k - 1) * a + g * (k - 1) * (k - 2) * 0.5 >= dt:
            k -= 1
        return k
    if run_time(line, k_max) <= dt:
        return k_max
    s, a1, g1, a2, g2 = _split(line, k_max)
    t_s = _line_sum(a1, g1, 0, s) + fx * s
    if dt <= t_s:
        k = math.ceil(_solve(a1 + fx, g1, dt) - 1e-9)
    else:
        k = s + math.ceil(_solve(a2 + g2 * s + fx, g2, dt - t_s) - 1e-9)
    k = max(0, min(k_max, k))
    while k < k_max and run_time(line, k) < dt:
        k += 1
    while k > 0 and run_time(line, k - 1) >= dt:
        k -= 1
    return k


def _causal_pairs(C: int, n: int, W: float) -> float:
    """Attention pairs of ``n`` positions after ``C`` cached, capped at window ``W``."""
    top = C + n if C + n < W else W
    n1 = top - C if top > C else 0
    return n1 * (C + 1 + top) * 0.5 + (n - n1) * W


class Core:
    """The simulation state and its event loop (see the module docstring)."""

    def __init__(
        self,
        workload: "Workload",
        setup: EngineSetup,
        opts: EngineOptions,
        draw: Callable[[int], dict[str, Any]],
        progress: Callable[[int, int], None] | None = None,
    ) -> None:
        self.w = workload
        self.setup = setup
        self.o = opts
        self.draw = draw
        self.progress = progress
        c = setup.coeffs
        self.c = c
        self.W = c.window
        self.Wm = c.window - 1.0  # cached positions at which a sliding layer stops growing
        self.fb = setup.kv_full_bytes
        self.wb = setup.kv_window_bytes
        self.ls = setup.kv_state_bytes
        self.cap = setup.kv_capacity_bytes
        self.M = setup.max_batched_tokens
        self.max_seqs = setup.max_num_seqs
        self.G = workload.volume.samples_per_prompt
        self.P = workload.volume.prompts_per_step
        self.retain = workload.cache.kv_during_tool_wait == "retain"
        self.K = opts.max_staleness if opts.mode == "async" else 0
        self.R = max(1, math.ceil(opts.oversample * self.P - 1e-9)) if opts.sampling == "oversample" else self.P
        # a decode step of batch B: compute = cB x B + c_pair x pairs + ..., memory = m0 + mB x B + ...
        self._cB = c.c_new + c.c_logit
        self._m0 = c.m_0 + c.m_head
        self._mB = c.m_new + c.m_logit + c.m_seq
        self._f0 = c.overhead + c.k_0 + c.k_head
        self._fB = c.k_new + c.k_logit
        self.reps = [_Replica(i) for i in range(opts.replicas)]
        self.heap: list[tuple[float, int, int, int, int]] = []
        self.seqno = 0
        self.uid = 0
        self.t = 0.0
        # conversations (grown chunk by chunk)
        self.n_drawn = 0
        self.prompt: list[int] = []
        self.actions: list[list[int]] = []
        self.tools: list[list[int]] = []
        self.waits: list[list[float]] = []
        self.invoked: list[list[bool]] = []
        self.called: list[list[bool]] = []
        self.inputs: list[list[int]] = []
        self.claims: list[list[int]] = []
        self.record_length: list[int] = []
        self.truncated: list[bool] = []
        self.sampled: list[int] = []
        self.trained: list[int] = []
        self.filtered: list[bool] = []  # per group
        self.ledger_chunks: list[dict[str, Any]] = []
        # per-conversation simulation state
        self.c_rep: list[int] = []
        self.c_held: list[int] = []  # retained positions
        self.c_vmin: list[int] = []
        self.c_start: list[float] = []
        self.c_end: list[float] = []
        self.c_outcome: list[int] = []
        self.c_tv: list[int] = []  # trainer version that ingested it
        self.c_prefill: list[int] = []  # positions forwarded by prefill chunks (recompute included)
        self.c_recompute: list[int] = []
        self.c_decode: list[int] = []
        self.c_hits: list[list[int]] = []  # actual cached prefix per invocation
        # groups
        self.g_done: list[int] = []
        self.g_vmin: list[int] = []
        self.g_round: list[int] = []
        self.next_group = 0
        self.rejected_groups = 0
        self.groups_completed = 0
        # environment
        self.env_busy = 0
        self.env_queue: deque[tuple[int, int]] = deque()
        # trainer
        self.version = 0  # updates done = newest policy version
        self.trainer = "idle"
        self.result_q: deque[int] = deque()
        self.batch: list[int] = []
        self.round_done: dict[int, int] = {}
        self.round_groups: dict[int, list[int]] = {}
        self.next_round = 0
        self.train_s = 0.0
        self.sync_s = 0.0
        self.trainer_since = 0.0
        self.update_log: list[dict[str, float]] = []
        self.horizon: float | None = None
        # counters
        self.started = 0
        self.completed = 0
        self.completed_tokens = 0
        self.accepted = 0
        self.accepted_tokens = 0
        self.trained_tokens = 0
        self.rejected = {OUT_STALE: 0, OUT_FILTERED: 0, OUT_SURPLUS: 0}
        self.preemptions = 0
        self.evictions = 0
        self.lags: dict[int, int] = {}
        self.accepted_lags: list[int] = []
        # time series
        self.dt_sample = 0.05
        self.samples: list[tuple[Any, ...]] = []
        self.kv_samples: list[float] = []

    # ------------------------------------------------------------------ infrastructure

    def push(self, t: float, kind: int, a: int = 0, b: int = 0) -> None:
        self.seqno += 1
        heapq.heappush(self.heap, (t, self.seqno, kind, a, b))

    def ensure(self, n: int) -> None:
        """Draw conversations until at least ``n`` exist."""
        while self.n_drawn < n:
            d = self.draw(len(self.ledger_chunks))
            k = len(d["prompt"])
            self.prompt += d["prompt"]
            self.actions += d["actions"]
            self.tools += d["tools"]
            self.waits += d["waits"]
            self.invoked += d["invoked"]
            self.called += d["called"]
            self.inputs += d["inputs"]
            self.claims += d["claims"]
            self.record_length += d["record_length"]
            self.truncated += d["truncated"]
            self.sampled += d["sampled"]
            self.trained += d["trained"]
            self.filtered += d["filtered"]
            self.ledger_chunks.append(d["ledger"])
            self.c_rep += [-1] * k
            self.c_held += [0] * k
            self.c_vmin += [-1] * k
            self.c_start += [math.nan] * k
            self.c_end += [math.nan] * k
            self.c_outcome += [OUT_NONE] * k
            self.c_tv += [-1] * k
            self.c_prefill += [0] * k
            self.c_recompute += [0] * k
            self.c_decode += [0] * k
            self.c_hits += [[] for _ in range(k)]
            self.n_drawn += k
            kmax = d["kv_max_positions"]
            if self.kvb(kmax) > self.cap:
                raise DoesNotFitError(
                    f"a conversation of {kmax:,} positions needs {self.kvb(kmax) / 2**30:.2f} GiB of KV per GPU but a "
                    f"replica holds {self.cap / 2**30:.2f} GiB: raise --tp, or lower max_context"
                )

    def kvb(self, c: float) -> float:
        """KV bytes of one sequence with ``c`` cached positions, on one GPU."""
        return self.fb * c + self.wb * (c if c < self.Wm else self.Wm) + self.ls

    def kv_used(self, r: _Replica) -> float:
        return (
            r.kv_fixed
            + r.kv_ret
            + self.fb * r.S
            + self.wb * (r.S_lo + self.Wm * (r.B - r.B_lo) if r.B > r.B_lo else r.S_lo)
            + self.ls * r.B
        )

    # ------------------------------------------------------------------ replicas

    def replica_for_new(self) -> _Replica:
        best = self.reps[0]
        for r in self.reps:
            if r.assigned < best.assigned:
                best = r
        return best

    def poke(self, r: _Replica, t: float) -> None:
        """New work (or new weights) for ``r``: plan now if idle, else end its run at the next step."""
        if r.paused:
            return
        if not r.busy:
            self.plan(r, t)
            return
        if r.chunks or r.k <= 1:
            return
        k2 = steps_within(r.line, r.k, t - r.t0)
        if k2 < r.k:
            r.k = k2
            r.dt = run_time(r.line, k2)
            r.epoch += 1
            self.push(r.t0 + r.dt, _EV_RUN, r.idx, r.epoch)

    def can_admit(self, r: _Replica) -> bool:
        return not r.draining and r.B + len(r.prefilling) < self.max_seqs and not (
            self.o.static_batching and (r.B or r.prefilling)
        )

    def join_decode(self, r: _Replica, s: _Seq, ctx: int) -> None:
        s.ctx0 = ctx
        s.join = r.steps
        s.end = r.steps + s.dec
        s.epoch += 1
        r.B += 1
        r.S += ctx
        if ctx < self.Wm:
            s.lo = True
            r.B_lo += 1
            r.S_lo += ctx
            if self.wb:
                heapq.heappush(r.cross, (s.join + int(self.Wm) - ctx, s.uid, s, s.epoch))
        else:
            s.lo = False
        heapq.heappush(r.dec, (s.end, s.uid, s, s.epoch))

    def leave_decode(self, r: _Replica, s: _Seq) -> int:
        c = s.ctx0 + r.steps - s.join
        r.B -= 1
        r.S -= c
        if s.lo:
            r.B_lo -= 1
            r.S_lo -= c
        s.epoch += 1
        self.c_decode[s.conv] += r.steps - s.join
        return c

    def preempt(self, r: _Replica) -> None:
        """Free the most recently joined decoding sequence; it will be recomputed.

        vLLM's V1 scheduler under first-come-first-served preempts the last request of its
        running list (``self.running.pop()`` in ``vllm/v1/core/sched/scheduler.py``,
        vllm-project/vllm @ 00024d314514900f361ad072af6931e403b7f589) and admits no waiting
        request in a step that preempted.
        """
        victim = None
        for end, uid, s, ep in r.dec:
            if ep == s.epoch and (victim is None or (s.join, s.uid) > (victim.join, victim.uid)):
                victim = s
        assert victim is not None
        c = self.leave_decode(r, victim)
        rest = victim.end - r.steps
        s = _Seq(victim.conv, victim.turn, self._uid())
        s.recompute = True
        s.new = False
        s.inp = c
        s.prefill_left = c
        s.cached = 0
        s.dec = rest
        s.logits = False
        r.waiting.appendleft(s)
        self.preemptions += 1
        self.c_recompute[victim.conv] += c

    def _uid(self) -> int:
        self.uid += 1
        return self.uid

    def evict_retained(self, r: _Replica, keep: int) -> bool:
        """Free the oldest retained conversation's KV (not ``keep``); False when none is left."""
        for i in r.retained:
            if i != keep:
                del r.retained[i]
                r.kv_ret -= self.kvb(self.c_held[i])
                self.c_held[i] = 0
                self.evictions += 1
                return True
        return False

    def admit_need(self, r: _Replica, s: _Seq) -> float:
        """Extra KV bytes admitting ``s`` takes (its retained prefix is already held)."""
        if s.recompute:
            return self.kvb(s.inp)
        held = self.c_held[s.conv]
        return self.kvb(s.inp) - (self.kvb(held) if held else 0.0)

    def admit(self, r: _Replica, s: _Seq, t: float) -> None:
        i = s.conv
        if s.recompute:
            s.kv_res = self.kvb(s.inp)
            r.kv_fixed += s.kv_res
        else:
            held = self.c_held[i]
            claim = s.claim
            hit = claim if claim <= held else held
            if held:
                r.kv_ret -= self.kvb(held)
                del r.retained[i]
                self.c_held[i] = 0
            if claim > hit:
                self.c_recompute[i] += claim - hit
            s.cached = hit
            s.prefill_left = s.inp - hit
            s.kv_res = self.kvb(s.inp)
            r.kv_fixed += s.kv_res
            self.c_hits[i].append(hit)
            if s.new:
                r.n_new_waiting -= 1
                self.c_vmin[i] = r.version
        r.prefilling.append(s)

    def plan(self, r: _Replica, t: float) -> None:  # noqa: C901 (the scheduler, one pass)
        """Build ``r``'s next step (or run of decode steps) at step boundary ``t``."""
        if r.paused or self.horizon is not None:
            return
        # new weights
        if r.target > r.version:
            if self.o.inflight_updates or (not r.B and not r.prefilling):
                r.paused = True
                r.draining = False
                r.pause_target = r.target
                r.busy = False
                self.push(t + self.setup.weight_sync_s, _EV_PAUSE, r.idx, 0)
                return
            r.draining = True
        c = self.c
        Wm = self.Wm
        # sequences whose context reached the window stop growing on sliding layers
        cross = r.cross
        while cross and cross[0][0] <= r.steps:
            _, _, s, ep = heapq.heappop(cross)
            if ep == s.epoch and s.lo:
                s.lo = False
                r.B_lo -= 1
                r.S_lo -= s.ctx0 + r.steps - s.join
        # decode growth must fit
        fb, wb = self.fb, self.wb
        growth = fb * r.B + wb * r.B_lo
        used = r.kv_fixed + r.kv_ret + fb * r.S + self.ls * r.B
        if wb:
            used += wb * (r.S_lo + Wm * (r.B - r.B_lo))
        preempted = False
        while r.B and used + growth > self.cap:
            if not self.evict_retained(r, -1):
                self.preempt(r)
                preempted = True
                growth = fb * r.B + wb * r.B_lo
            used = self.kv_used(r)
        B = r.B
        budget = self.M - B
        chunks: list[tuple[_Seq, int]] = []
        if budget > 0:
            for s in r.prefilling:
                n = s.prefill_left if s.prefill_left < budget else budget
                chunks.append((s, n))
                budget -= n
                if budget <= 0:
                    break
            if (
                budget > 0
                and not preempted  # as vLLM: no admission in a step that preempted
                and r.waiting
                and not r.draining
                and B + len(r.prefilling) < self.max_seqs
                and not (self.o.static_batching and (B or r.prefilling))
            ):
                static = self.o.static_batching
                while r.waiting and (budget > 0 or static) and B + len(r.prefilling) < self.max_seqs:
                    s = r.waiting[0]
                    need = self.admit_need(r, s)
                    if used + need + growth > self.cap:
                        own = self.kvb(self.c_held[s.conv]) if self.c_held[s.conv] and not s.recompute else 0.0
                        if used - (r.kv_ret - own) + need + growth > self.cap:
                            if B or r.prefilling:
                                break  # wait for running sequences to free KV
                            raise DoesNotFitError(
                                f"an invocation of {s.inp:,} positions does not fit a replica's KV "
                                f"({self.cap / 2**30:.2f} GiB per GPU); raise --tp"
                            )
                        while used + need + growth > self.cap and self.evict_retained(r, s.conv):
                            used = self.kv_used(r)
                    r.waiting.popleft()
                    self.admit(r, s, t)
                    used += need
                    if budget > 0:
                        n = s.prefill_left if s.prefill_left < budget else budget
                        chunks.append((s, n))
                        budget -= n
        if chunks:
            new = B
            logits = B
            pairs = r.S + B
            read = r.S
            if self.wb:
                W = self.W
                pairs_w = r.S_lo + r.B_lo + W * (B - r.B_lo) if B > r.B_lo else r.S_lo + r.B_lo
                read_w = r.S_lo + Wm * (B - r.B_lo) if B > r.B_lo else r.S_lo
                for s, n in chunks:
                    C = s.cached
                    new += n
                    if n == s.prefill_left and s.logits:
                        logits += 1
                    pairs += n * C + n * (n + 1) * 0.5
                    pairs_w += _causal_pairs(C, n, W)
                    read += C
                    read_w += C if C < Wm else Wm
            else:
                pairs_w = read_w = 0.0
                for s, n in chunks:
                    C = s.cached
                    new += n
                    if n == s.prefill_left and s.logits:
                        logits += 1
                    pairs += n * C + n * (n + 1) * 0.5
                    read += C
            dt = c.step_time(new, logits, pairs, pairs_w, read, read_w, B + len(chunks))
            r.busy = True
            r.k = 1
            r.chunks = chunks
            r.t0 = t
            r.dt = dt
            r.epoch += 1
            self.seqno += 1
            heapq.heappush(self.heap, (t + dt, self.seqno, _EV_RUN, r.idx, r.epoch))
            return
        if not B:
            r.busy = False
            r.chunks = _NO_CHUNKS
            if r.draining and not r.prefilling:
                self.plan_pause(r, t)
            return
        # a run of pure decode steps: until a sequence ends, crosses the window, or KV runs out
        dec = r.dec
        while dec[0][3] != dec[0][2].epoch:
            heapq.heappop(dec)
        k = dec[0][0] - r.steps
        while cross and cross[0][3] != cross[0][2].epoch:
            heapq.heappop(cross)
        if cross:
            kc = cross[0][0] - r.steps + 1
            if kc < k:
                k = kc
        kk = int((self.cap - used) // growth) if growth > 0 else k
        if kk < k:
            k = kk
        if k < 1:
            k = 1
        B_lo, S, S_lo = r.B_lo, r.S, r.S_lo
        hi = B - B_lo
        if hi:
            pw0 = S_lo + B_lo + self.W * hi
            rw0 = S_lo + Wm * hi
        else:
            pw0 = S_lo + B_lo
            rw0 = S_lo
        c0 = self._cB * B + c.c_pair * (S + B) + c.c_pair_w * pw0
        m0 = self._m0 + self._mB * B + c.m_read * S + c.m_read_w * rw0
        if c.m_routed:
            m0 += c.m_routed * (1.0 - c.q**B)
        cg = c.c_pair * B + c.c_pair_w * B_lo
        mg = c.m_read * B + c.m_read_w * B_lo
        fx = self._f0 + self._fB * B
        line = (c0, cg, m0, mg, fx)
        r.line = line
        r.busy = True
        r.k = k
        r.chunks = _NO_CHUNKS
        r.t0 = t
        # run_time(line, k), with the common case (one line dominates throughout) inline
        if (c0 >= m0) == (c0 + cg * (k - 1) >= m0 + mg * (k - 1)):
            a0, g0 = (c0, cg) if c0 >= m0 else (m0, mg)
            dt = k * (a0 + fx) + g0 * k * (k - 1) * 0.5
        else:
            dt = run_time(line, k)
        r.dt = dt
        r.epoch += 1
        self.seqno += 1
        heapq.heappush(self.heap, (t + dt, self.seqno, _EV_RUN, r.idx, r.epoch))

    def plan_pause(self, r: _Replica, t: float) -> None:
        r.paused = True
        r.draining = False
        r.pause_target = r.target
        self.push(t + self.setup.weight_sync_s, _EV_PAUSE, r.idx, 0)

    def on_run(self, r: _Replica, t: float) -> None:
        """``r`` finished its run of ``r.k`` steps at ``t``."""
        k = r.k
        B = r.B
        r.busy = False
        r.busy_s += r.dt
        r.nsteps += k
        r.steps += k
        r.S += B * k
        r.S_lo += r.B_lo * k
        tokens = B * k
        if r.chunks:
            r.batch_s += (B + len(r.chunks)) * r.dt
            pre = r.prefilling
            for s, n in r.chunks:
                s.prefill_left -= n
                s.cached += n
                tokens += n
                self.c_prefill[s.conv] += n
            r.chunks = _NO_CHUNKS
            while pre and pre[0].prefill_left == 0:
                s = pre.popleft()
                r.kv_fixed -= s.kv_res
                if s.dec > 0:
                    self.join_decode(r, s, s.inp)
                else:
                    # one sampled token (or none): the invocation ends with its prefill
                    self.turn_done(r, s, s.inp, t)
        else:
            r.batch_s += B * r.dt
        r.tokens += tokens
        dec = r.dec
        while dec and dec[0][0] <= r.steps:
            _, _, s, ep = heapq.heappop(dec)
            if ep != s.epoch:
                continue
            c = self.leave_decode(r, s)
            self.turn_done(r, s, c, t)
        self.plan(r, t)

    # ------------------------------------------------------------------ conversations

    def new_request(self, i: int, j: int) -> _Seq:
        s = _Seq(i, j, self._uid())
        s.inp = self.inputs[i][j]
        s.claim = self.claims[i][j]
        a = self.actions[i][j]
        s.dec = a - 1 if a > 1 else 0
        return s

    def turn_done(self, r: _Replica, s: _Seq, ctx: int, t: float) -> None:
        """Invocation ``s`` produced its last token; ``ctx`` positions are cached."""
        i, j = s.conv, s.turn
        if self.called[i][j]:
            if self.retain:
                self.c_held[i] = ctx
                r.kv_ret += self.kvb(ctx)
                r.retained[i] = None
            self.tool_call(i, j, t)
        else:
            self.conv_done(r, i, t)

    def tool_call(self, i: int, j: int, t: float) -> None:
        E = self.o.env_workers
        if E is None or self.env_busy < E:
            self.env_busy += 1
            self.push(t + self.waits[i][j], _EV_TOOL, i, j)
        else:
            self.env_queue.append((i, j))

    def on_tool(self, i: int, j: int, t: float) -> None:
        self.env_busy -= 1
        if self.env_queue:
            a, b = self.env_queue.popleft()
            self.env_busy += 1
            self.push(t + self.waits[a][b], _EV_TOOL, a, b)
        r = self.reps[self.c_rep[i]]
        inv = self.invoked[i]
        if j + 1 < len(inv) and inv[j + 1]:
            r.waiting.append(self.new_request(i, j + 1))
            if self.can_admit(r) or not r.busy:
                self.poke(r, t)
        else:
            self.conv_done(r, i, t)

    def conv_done(self, r: _Replica, i: int, t: float) -> None:
        held = self.c_held[i]
        if held:
            r.kv_ret -= self.kvb(held)
            del r.retained[i]
            self.c_held[i] = 0
            if r.waiting:
                self.poke(r, t)
        r.assigned -= 1
        self.c_end[i] = t
        self.completed += 1
        self.completed_tokens += self.sampled[i]
        g = i // self.G
        self.g_done[g] += 1
        v = self.c_vmin[i]
        if self.g_vmin[g] < 0 or v < self.g_vmin[g]:
            self.g_vmin[g] = v
        if self.g_done[g] == self.G:
            self.group_done(g, t)

    # ------------------------------------------------------------------ controller and trainer

    def dispatch_group(self, t: float, rnd: int = -1) -> None:
        g = self.next_group
        self.next_group += 1
        G = self.G
        self.ensure((g + 1) * G)
        self.g_done.append(0)
        self.g_vmin.append(-1)
        self.g_round.append(rnd)
        if rnd >= 0:
            self.round_groups.setdefault(rnd, []).append(g)
        touched = []
        for i in range(g * G, g * G + G):
            r = self.replica_for_new()
            self.c_rep[i] = r.idx
            r.assigned += 1
            self.c_start[i] = t
            r.waiting.append(self.new_request(i, 0))
            r.n_new_waiting += 1
            self.started += 1
            if r not in touched:
                touched.append(r)
        for r in touched:
            self.poke(r, t)

    def gate(self, t: float) -> None:
        """Dispatch what the mode allows."""
        if self.horizon is not None:
            return
        sync = self.o.mode == "sync"
        if sync and self.trainer != "idle":
            return
        if self.o.sampling == "oversample":
            while self.next_round <= self.version + self.K and self.next_round < self.o.steps:
                rnd = self.next_round
                self.next_round += 1
                self.round_done[rnd] = 0
                for _ in range(self.R):
                    self.dispatch_group(t, rnd)
            return
        cap = self.o.max_inflight_groups
        if cap is not None and not sync:
            while self.next_group - self.groups_completed < cap:
                self.dispatch_group(t)
            return
        limit = (self.K + self.version + 1) * self.P
        while self.next_group - self.rejected_groups < limit:
            self.dispatch_group(t)

    def reject(self, g: int, why: int, t: float) -> None:
        G = self.G
        for i in range(g * G, g * G + G):
            self.c_outcome[i] = why
            self.c_tv[i] = self.version
        self.rejected[why] += G
        self.rejected_groups += 1

    def group_done(self, g: int, t: float) -> None:
        self.groups_completed += 1
        if self.o.sampling == "oversample":
            rnd = self.g_round[g]
            self.round_done[rnd] += 1
        elif self.filtered[g]:
            self.reject(g, OUT_FILTERED, t)
            self.gate(t)
        else:
            self.result_q.append(g)
        if self.o.max_inflight_groups is not None:
            self.gate(t)
        self.trainer_try(t)

    def trainer_try(self, t: float) -> None:
        if self.trainer != "idle" or self.horizon is not None:
            return
        P, G, u = self.P, self.G, self.version
        if self.o.sampling == "oversample":
            if self.round_done.get(u, -1) != self.R:
                return
            groups = self.round_groups.pop(u)
            batch = []
            for g in groups:
                if self.filtered[g]:
                    self.reject(g, OUT_FILTERED, t)
                elif u - self.g_vmin[g] > self.K:
                    self.reject(g, OUT_STALE, t)
                    self._lag(u - self.g_vmin[g], G)
                elif len(batch) < P:
                    batch.append(g)
                else:
                    self.reject(g, OUT_SURPLUS, t)
            self.batch = batch
        else:
            q = self.result_q
            while q and len(self.batch) < P:
                g = q.popleft()
                lag = u - self.g_vmin[g]
                if lag > self.K:
                    self.reject(g, OUT_STALE, t)
                    self._lag(lag, G)
                    self.gate(t)
                else:
                    self.batch.append(g)
            if len(self.batch) < P:
                return
        self.start_training(t)

    def _lag(self, lag: int, n: int) -> None:
        self.lags[lag] = self.lags.get(lag, 0) + n

    def start_training(self, t: float) -> None:
        import numpy as np

        G, u = self.G, self.version
        lengths = []
        n_acc = len(self.batch) * G
        for g in self.batch:
            lag = u - self.g_vmin[g]
            self._lag(lag, G)
            for i in range(g * G, g * G + G):
                self.c_outcome[i] = OUT_ACCEPTED
                self.c_tv[i] = u
                self.accepted += 1
                self.accepted_tokens += self.sampled[i]
                self.trained_tokens += self.trained[i]
                self.accepted_lags.append(lag)
                if not (self.truncated[i] and self.w.training.drop_truncated):
                    lengths.append(self.record_length[i])
        self.batch = []
        dt = self.setup.trainer_time(np.asarray(lengths, dtype=float)) if lengths else 0.0
        self.trainer = "train"
        self.trainer_since = t
        self.train_s += dt
        self.update_log.append(
            {"version": u, "start_s": t, "train_s": dt, "accepted_trajectories": n_acc, "trained_records": len(lengths)}
        )
        self.push(t + dt, _EV_TRAIN)

    def on_train(self, t: float) -> None:
        self.version += 1
        if self.progress is not None:
            self.progress(self.version, self.o.steps)
        if self.version >= self.o.steps:
            self.horizon = t
            return
        self.trainer = "sync"
        self.sync_s += self.setup.weight_sync_s
        self.push(t + self.setup.weight_sync_s, _EV_SYNC)
        if self.o.mode == "async":
            for r in self.reps:
                r.target = self.version
                self.poke(r, t)

    def on_sync(self, t: float) -> None:
        self.trainer = "idle"
        if self.o.mode == "sync":
            for r in self.reps:
                r.version = r.target = self.version
        self.gate(t)
        self.trainer_try(t)

    def on_pause(self, r: _Replica, t: float) -> None:
        r.paused = False
        r.version = r.pause_target
        self.plan(r, t)

    # ------------------------------------------------------------------ time series

    def sample(self, t: float) -> None:
        reps = self.reps
        batch = 0
        kv = 0.0
        for r in reps:
            b = r.B + len(r.prefilling)
            used = self.kv_used(r)
            if r.busy and not r.chunks and r.k > 1 and r.dt > 0:
                # steps of the current run done by t, interpolated (a sample, not an event)
                done = int(r.k * (t - r.t0) / r.dt)
                used += done * (self.fb * r.B + self.wb * r.B_lo)
            occ = used / self.cap
            self.kv_samples.append(occ)
            batch += b if r.busy else 0
            kv += occ
        n = len(reps)
        new_waiting = sum(r.n_new_waiting for r in reps)
        waiting = sum(len(r.waiting) for r in reps) - new_waiting
        running = sum(r.B + len(r.prefilling) for r in reps)
        env_wait = len(self.env_queue)
        env_run = self.env_busy
        result = len(self.result_q) * self.G
        state = {"idle": 0, "train": 1, "sync": 2}[self.trainer]
        self.samples.append(
            (t, batch / n, kv / n, new_waiting, waiting, running, env_wait, env_run, result, state,
             self.version, self.completed, self.accepted)
        )
        if len(self.samples) >= 2 * MAX_SAMPLES:
            self.samples = self.samples[::2]
            self.kv_samples = self.kv_samples_decimate()
            self.dt_sample *= 2
        self.push(t + self.dt_sample, _EV_SAMPLE)

    def kv_samples_decimate(self) -> list[float]:
        n = len(self.reps)
        out: list[float] = []
        ks = self.kv_samples
        for s in range(0, len(ks) // n, 2):
            out += ks[s * n:(s + 1) * n]
        return out

    def finish(self) -> None:
        """Credit sequences still decoding at the horizon with the decode steps they have done."""
        for r in self.reps:
            for _, _, s, ep in r.dec:
                if ep == s.epoch:
                    self.c_decode[s.conv] += r.steps - s.join

    # ------------------------------------------------------------------ main loop

    def run(self) -> None:
        self.push(0.0, _EV_SAMPLE)
        self.gate(0.0)
        heap = self.heap
        reps = self.reps
        pop = heapq.heappop
        while heap and self.horizon is None:
            t, _, kind, a, b = pop(heap)
            self.t = t
            if kind == _EV_RUN:
                r = reps[a]
                if b == r.epoch and r.busy:
                    self.on_run(r, t)
            elif kind == _EV_TOOL:
                self.on_tool(a, b, t)
            elif kind == _EV_SAMPLE:
                if len(heap) > 0:
                    self.sample(t)
            elif kind == _EV_TRAIN:
                self.on_train(t)
            elif kind == _EV_SYNC:
                self.on_sync(t)
            elif kind == _EV_PAUSE:
                self.on_pause(reps[a], t)
        self.finish()
        if self.horizon is None:
            raise InputError(
                f"the simulation stalled at t = {self.t:,.1f} s after {self.version} of {self.o.steps} updates: "
                "no event left (nothing can run)"
            )
