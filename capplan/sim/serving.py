"""The serving simulator (``capplan simulate`` on a ``serving`` workload): requests arriving at replicas that batch them continuously.

Requests arrive as a Poisson or gamma process at the workload's rate, or are replayed from a
trace (:func:`read_trace`), and are dealt to the replicas in turn (round robin). Each replica is
simulated on its own, step by step, as vLLM's V1 scheduler runs it:

* every step carries one position of each decoding sequence and, in what is left of the token
  budget (``max_num_batched_tokens``), chunks of prompts: first the prompts already admitted
  and partly prefilled, then new ones from the waiting queue, first come first served, while
  fewer than ``max_num_seqs`` sequences run and the KV capacity holds their whole prompt;
* a request's first token comes with the end of the step that holds its last prompt chunk
  (its TTFT adds the engine profile's ``request_overhead_s``); it then decodes one position per
  step until its output is complete;
* a step is priced from its mix by the engine profile's step costs
  (:func:`capplan.sim.stepcost.step_coefficients`, probed from the roofline model); a run of
  pure decode steps with an unchanged batch is advanced in one jump, in closed form
  (:func:`capplan.sim.stepcost.run_time`), to the next arrival, completion or KV exhaustion;
* when the decoding batch's KV growth does not fit, the most recently admitted decoding request
  is preempted: its KV is freed and it is recomputed (prefilled again) when readmitted
  (admission leaves :data:`capplan.benchmark.KV_WATERMARK` of the capacity free, so a request
  just admitted is not preempted at the next step);
* a request whose prompt starts with the workload's shared prefix and hits the prefix cache
  (``serving.prefix_hit_rate``) prefills only the rest (all but the prompt's last position can
  be reused); the prefix's KV is held once per replica.

Without chunked prefill (an engine profile with ``chunked_prefill: false``) prompts are
prefilled whole, one or more to a step. An engine that does not mix prompts into decode steps
(``mixed_prefill: false``: SGLang's default, vLLM's V0 scheduler) runs a step of prompt chunks
(up to the whole token budget) whenever prompts wait, and the decoding batch waits for it.
An engine that reserves a request's whole output when admitting it
(``capacity_scheduler_policy: guaranteed_no_evict``, TensorRT-LLM's default) admits a request only
while the KV holds its prompt and output beside what the running requests have reserved, and so
never preempts.

Sliding-window layers are priced with the batch's summed context capped at ``batch x window``
(exact when every context is on the same side of the window).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from heapq import heappop, heappush
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from capplan.benchmark import KV_WATERMARK
from capplan.engine import EngineProfile
from capplan.errors import InputError
from capplan.options import Options
from capplan.sim.config import EngineFeatures
from capplan.units import MAX_CONTEXT_TOKENS, MAX_GPUS, MAX_SEQUENCES, KVDtype, WeightDtype

if TYPE_CHECKING:
    from capplan.benchmark import RequestMix, Server
    from capplan.hardware import HardwareProfile
    from capplan.modelspec import ModelSpec
    from capplan.sim.stepcost import StepCoefficients
    from capplan.workload import Workload

PERCENTILES: tuple[float, ...] = (50.0, 90.0, 99.0)
"""Percentiles every latency is reported at [percent]."""

TRACE_FORMATS: dict[str, tuple[tuple[str, ...], float | None, str, str]] = {
    "capplan": (("arrival_s",), 1.0, "input_tokens", "output_tokens"),
    "mooncake": (("timestamp",), 1e-3, "input_length", "output_length"),
    "burstgpt": (("Timestamp",), 1.0, "Request tokens", "Response tokens"),
    "azure": (("TIMESTAMP",), None, "ContextTokens", "GeneratedTokens"),
}
"""Trace layouts :func:`read_trace` recognises by their column names: the time column, its unit
in seconds (``None``: date-time text), the prompt-length and the output-length columns.

* ``capplan``: ``arrival_s, input_tokens, output_tokens`` (what ``--records`` writes, so a
  simulated run can be replayed);
* ``mooncake``: the Mooncake / AIPerf ``mooncake_trace`` JSONL (``timestamp`` in milliseconds,
  ``input_length``, ``output_length``; ``hash_ids`` are not used);
* ``burstgpt``: BurstGPT's CSV (``Timestamp`` in seconds, ``Request tokens``, ``Response tokens``);
* ``azure``: the Azure LLM inference traces (``TIMESTAMP`` date-times, ``ContextTokens``,
  ``GeneratedTokens``).
"""


# --------------------------------------------------------------------------------------------- traffic


@dataclass(frozen=True)
class Traffic:
    """The requests of a run, in arrival order (arrays of one entry per request)."""

    arrival_s: np.ndarray
    """Arrival time of each request [s], non-decreasing."""
    prompt_tokens: np.ndarray
    """Prompt length [positions] (>= 1)."""
    output_tokens: np.ndarray
    """Sampled tokens [tokens] (>= 1)."""
    cached_tokens: np.ndarray
    """Prompt positions served from the prefix cache [positions] (< prompt)."""
    source: str
    """Where the requests come from, in words."""

    @property
    def n(self) -> int:
        return int(self.arrival_s.shape[0])


def arrival_gaps(rate_per_s: float, n: int, burstiness: float, rng: np.random.Generator) -> np.ndarray:
    """Gaps between ``n`` consecutive arrivals [s]: gamma of shape ``burstiness`` and mean ``1 / rate``.

    Shape 1 is the exponential (a Poisson process); the squared coefficient of variation of the
    gaps is ``1 / burstiness``, as in ``vllm bench serve --burstiness``.
    """
    return rng.gamma(burstiness, 1.0 / (rate_per_s * burstiness), size=n)


def workload_traffic(workload: "Workload", n: int, seed: int | None = None, rate_per_s: float | None = None) -> Traffic:
    """``n`` requests of a serving workload: lengths from its conversation, arrivals from its ``serving`` block.

    Raises
    ------
    InputError
        The workload is not a serving workload with an arrival rate, or has more than one turn.
    """
    from capplan.ledger import sample_conversations, shared_prefix_hits
    from capplan.plan.serving import check_serving_workload

    check_serving_workload(workload)
    serving = workload.serving
    rate = rate_per_s if rate_per_s is not None else (serving.arrival_rate_per_s if serving else None)
    if rate is None:
        raise InputError(f"workload {workload.name}: give serving.arrival_rate_per_s (or --request-rate) to simulate arrivals")
    s = workload.sampling.seed if seed is None else seed
    conv = sample_conversations(workload, n=n, seed=s)
    prompt = np.maximum(conv.prompt, 1)
    output = np.maximum(conv.actions[:, 0], 1)
    rng = np.random.default_rng([s, 1])
    burst = serving.burstiness if serving else 1.0
    arrival = np.cumsum(arrival_gaps(rate, n, burst, rng))
    cached = shared_prefix_hits(prompt, serving.shared_prefix_tokens, serving.prefix_hit_rate) if serving else np.zeros(n, np.int64)
    process = "Poisson" if burst == 1.0 else f"gamma (burstiness {burst:g})"
    return Traffic(arrival, prompt.astype(np.int64), output.astype(np.int64), cached, f"{process} arrivals at {rate:g} req/s")


def sglang_random_lengths(num_prompts: int, random_input_len: int, random_output_len: int,
                          random_range_ratio: float = 0.0, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """The prompt and output lengths ``sglang.bench_serving --dataset-name random`` sends, in order.

    ``sample_random_requests`` (``python/sglang/bench_serving.py``) draws ``num_prompts`` prompt
    lengths uniform on ``[max(int(random_input_len x random_range_ratio), 1), random_input_len]``,
    then as many output lengths on ``[int(random_output_len x random_range_ratio),
    random_output_len]``, from NumPy's legacy generator, which the script seeds with ``--seed``
    (default 1) before sampling. The same arguments give the same lengths: with the defaults,
    10 requests of ``--random-input-len 1000 --random-output-len 1000`` hold 6,101 prompt and
    4,210 output tokens, the totals the SGLang Cookbook's runs print.
    """
    rng = np.random.RandomState(seed)
    prompt = rng.randint(max(int(random_input_len * random_range_ratio), 1), random_input_len + 1, size=num_prompts)
    output = rng.randint(int(random_output_len * random_range_ratio), random_output_len + 1, size=num_prompts)
    return prompt.astype(np.int64), output.astype(np.int64)


def client_arrivals(finish_s: np.ndarray, clients: int) -> np.ndarray:
    """When each request is sent by ``clients`` clients that send the requests in order, each the
    next when its last one ends (``--max-concurrency``): the first ``clients`` at 0, every later
    one when the earliest of the requests in flight completes (``finish_s``, one per request)."""
    free = [0.0] * max(1, clients)
    out = np.empty(finish_s.shape[0])
    for k, f in enumerate(finish_s.tolist()):
        out[k] = heappop(free)
        heappush(free, max(f, out[k]))
    return out


CLIENT_ROUNDS = 200
"""Most replays :func:`replay_clients` runs before it gives up on the arrivals settling."""


def replay_clients(engine: ServingEngine, clients: int, prompt: np.ndarray, output: np.ndarray,
                   cached: np.ndarray) -> tuple[np.ndarray, ReplicaRun]:
    """A closed-loop run of the requests, ``clients`` at a time (:func:`client_arrivals`), through
    :func:`simulate_replica`; returns the arrivals and the run.

    When each request is sent depends on when earlier ones complete, which depends on the
    arrivals: the run is replayed from every request at 0 with the arrivals its completions give,
    until they stop moving (by less than a nanosecond); the SGLang Cookbook's runs (10 requests at
    one client, 80 at 16) settle in 10-31 replays.

    Raises
    ------
    InputError
        The arrivals do not settle within :data:`CLIENT_ROUNDS` replays.
    """
    arrivals = np.zeros(prompt.shape[0])
    for _ in range(CLIENT_ROUNDS):
        run = simulate_replica(engine, arrivals, prompt, output, cached)
        settled = client_arrivals(run.finish_s, clients)
        if np.allclose(settled, arrivals, rtol=0.0, atol=1e-9):
            return arrivals, run
        arrivals = settled
    raise InputError(f"a closed-loop run of {prompt.shape[0]:,} requests at {clients:,} clients: the arrivals did not settle "
                     f"in {CLIENT_ROUNDS} replays")


def context_limit(workload: "Workload", spec: "ModelSpec") -> tuple[int, str]:
    """The positions one request may span, and what sets it: the workload's
    ``conversation.max_context`` (capped by ``--max-model-len``) or the model's
    ``max_position_embeddings``, the smaller."""
    limits = [(spec.max_position_embeddings, f"{spec.name}'s max_position_embeddings")]
    if workload.conversation.max_context is not None:
        limits.append((workload.conversation.max_context, f"{workload.name}'s conversation.max_context (or --max-model-len)"))
    return min(limits)


def within_context(traffic: Traffic, limit: tuple[int, str]) -> Traffic:
    """``traffic`` with each response cut where prompt and output reach ``limit``'s positions (an
    engine's ``max_model_len``: a response that would pass it is truncated there, as drawn requests
    are); a prompt that alone fills the limit is refused, as an engine refuses it.

    Raises
    ------
    InputError
        A prompt of at least ``limit`` positions.
    """
    positions, what = limit
    long = traffic.prompt_tokens >= positions
    if long.any():
        i = int(np.argmax(long))
        raise InputError(f"{traffic.source}: a request at {traffic.arrival_s[i]:,.3f} s has a {int(traffic.prompt_tokens[i]):,}-token "
                         f"prompt, and {what} is {positions:,} positions: an engine refuses it (raise the limit or drop the request)")
    room = positions - traffic.prompt_tokens
    cut = traffic.output_tokens > room
    if not cut.any():
        return traffic
    return Traffic(traffic.arrival_s, traffic.prompt_tokens, np.minimum(traffic.output_tokens, room), traffic.cached_tokens,
                   f"{traffic.source}; {int(cut.sum()):,} response(s) cut at {what}, {positions:,} positions")


def read_trace(path: str | Path, shared_prefix_tokens: int = 0, prefix_hit_rate: float = 0.0) -> Traffic:
    """Requests replayed from a trace file (CSV or JSONL) in one of :data:`TRACE_FORMATS`.

    Times are shifted so the first request arrives at 0 and the rows are sorted by time.

    Raises
    ------
    InputError
        The file cannot be read, has none of the recognised column sets, or holds a length
        below 1 or a time that is not a number.
    """
    import pandas as pd

    from capplan.ledger import shared_prefix_hits

    p = Path(path)
    try:
        if p.suffix.lower() in (".jsonl", ".json"):
            frame = pd.read_json(p, lines=True)
        else:
            frame = pd.read_csv(p)
    except (OSError, ValueError) as exc:
        raise InputError(f"--trace {p}: cannot read it as {'JSONL' if p.suffix.lower() in ('.jsonl', '.json') else 'CSV'} ({exc})") from None
    columns = set(frame.columns)
    for name, (times, unit, inp, out) in TRACE_FORMATS.items():
        if times[0] in columns and inp in columns and out in columns:
            break
    else:
        known = "; ".join(f"{k}: {t[0]}, {i}, {o}" for k, (t, _, i, o) in TRACE_FORMATS.items())
        raise InputError(f"--trace {p}: no recognised columns (found {', '.join(map(str, frame.columns[:8]))}); give one of {known}")
    if frame.empty:
        raise InputError(f"--trace {p}: no requests")
    if unit is None:
        stamps = pd.to_datetime(frame[times[0]], format="mixed", errors="coerce")
        if stamps.isna().any():
            raise InputError(f"--trace {p}: {times[0]} row {int(stamps.isna().argmax()) + 1} is not a date-time")
        t = (stamps - stamps.min()).dt.total_seconds().to_numpy(dtype=float)
    else:
        t = pd.to_numeric(frame[times[0]], errors="coerce").to_numpy(dtype=float) * unit
        if not np.all(np.isfinite(t)):
            raise InputError(f"--trace {p}: {times[0]} row {int(np.argmin(np.isfinite(t))) + 1} is not a number")
    lengths = []
    for col in (inp, out):
        v = pd.to_numeric(frame[col], errors="coerce").to_numpy(dtype=float)
        bad = ~np.isfinite(v) | (v < 1)
        if bad.any():
            raise InputError(f"--trace {p}: {col} row {int(bad.argmax()) + 1} is {frame[col].iloc[int(bad.argmax())].item()!r} (allowed: a count >= 1)")
        lengths.append(np.rint(v).astype(np.int64))
    order = np.argsort(t, kind="stable")
    t = t[order] - t[order][0]
    prompt, output = lengths[0][order], lengths[1][order]
    cached = shared_prefix_hits(prompt, shared_prefix_tokens, prefix_hit_rate)
    return Traffic(t, prompt, output, cached, f"trace {p.name} ({name} format, {len(t):,} requests over {t[-1]:,.0f} s)")


# --------------------------------------------------------------------------------------------- engine


@dataclass(frozen=True)
class ServingEngine:
    """One replica's constants: step prices, scheduler limits and KV capacity."""

    coeffs: "StepCoefficients"
    """Step-price coefficients of the replica."""
    max_num_seqs: int
    """Scheduler cap on running sequences [sequences]."""
    max_batched_tokens: int
    """Scheduler token budget per step [positions]."""
    kv_capacity_tokens: int
    """KV capacity of the replica [positions]."""
    chunked_prefill: bool
    """Prompts are split into chunks of the token budget."""
    request_overhead_s: float
    """Host time per request outside engine steps, added to TTFT [s]."""
    mixed_prefill: bool = True
    """A step with prompt chunks also advances the decoding batch."""
    capacity_scheduler_policy: str = "max_utilization"
    """``guaranteed_no_evict``: admission reserves a request's whole output (no preemption)."""


def serving_engine(server: "Server") -> ServingEngine:
    """The simulator's constants for a :class:`capplan.benchmark.Server` (the closed form's replica)."""
    from capplan.sim.stepcost import step_coefficients

    p = server.pricer
    return ServingEngine(
        coeffs=step_coefficients(p.spec, p.hw, p.inp),
        max_num_seqs=server.max_num_seqs,
        max_batched_tokens=server.max_num_batched_tokens,
        kv_capacity_tokens=server.kv_capacity_tokens,
        chunked_prefill=server.chunked_prefill,
        request_overhead_s=server.request_overhead_s,
        mixed_prefill=server.mixed_prefill,
        capacity_scheduler_policy=server.capacity_scheduler_policy,
    )


# --------------------------------------------------------------------------------------------- one replica


@dataclass
class ReplicaRun:
    """What one replica did: per-request times and a few counters."""

    ttft_s: np.ndarray
    """Time to first token of each request [s] (overhead included)."""
    finish_s: np.ndarray
    """Time the last token of each request came out, since the run's start [s]."""
    busy_s: float = 0.0
    """Time the replica spent stepping [s]."""
    steps: int = 0
    """Engine steps run."""
    preemptions: int = 0
    """Decoding requests preempted for KV (and recomputed)."""
    recomputed_tokens: int = 0
    """Positions prefilled again after a preemption."""
    sequence_s: float = 0.0
    """Sum over steps of decoding sequences x step time [sequence-s] (mean batch = this / busy)."""
    itl_s: list[float] = field(default_factory=list)
    """Step times a decoding sequence waited for a token (one entry per step or run of steps) [s]."""
    itl_weight: list[float] = field(default_factory=list)
    """Tokens each ``itl_s`` entry stands for (decoding sequences x steps)."""


def simulate_replica(engine: ServingEngine, arrival_s: np.ndarray, prompt: np.ndarray, output: np.ndarray,
                     cached: np.ndarray, shared_prefix_tokens: int = 0) -> ReplicaRun:
    """Run one replica over its requests (see the module notes for the scheduler).

    Parameters
    ----------
    engine : ServingEngine
        The replica's constants.
    arrival_s : ndarray
        Arrival times [s], non-decreasing.
    prompt, output, cached : ndarray
        Prompt positions, sampled tokens and prompt positions served from the prefix cache.
    shared_prefix_tokens : int
        The shared prefix, whose KV the replica holds once when any request hits it [positions].

    Returns
    -------
    ReplicaRun

    Raises
    ------
    InputError
        A request whose prompt alone exceeds the replica's KV capacity.
    """
    from capplan.roofline import causal_pairs_one
    from capplan.sim.stepcost import run_time, steps_within

    n = int(arrival_s.shape[0])
    arr = arrival_s.tolist()
    P = prompt.tolist()
    O = output.tolist()
    C = cached.tolist()
    ttft = [0.0] * n
    finish = [0.0] * n
    run = ReplicaRun(np.zeros(0), np.zeros(0))
    if n == 0:
        run.ttft_s, run.finish_s = np.zeros(0), np.zeros(0)
        return run
    co = engine.coeffs
    budget_total = engine.max_batched_tokens
    max_seqs = engine.max_num_seqs
    chunked = engine.chunked_prefill
    mixed = engine.mixed_prefill
    overhead = engine.request_overhead_s
    W = co.window
    windowed = W < 1e18 and (co.c_pair_w > 0 or co.m_read_w > 0)
    Wl = W - 1.0
    cap = engine.kv_capacity_tokens
    reserve = KV_WATERMARK * cap  # KV an admission leaves free for the running batch's growth
    no_evict = engine.capacity_scheduler_policy == "guaranteed_no_evict"
    promised = 0  # guaranteed_no_evict: KV the admitted requests have reserved and not written yet
    kv_used = shared_prefix_tokens if (shared_prefix_tokens and max(C) > 0) else 0
    if max(pp - cc for pp, cc in zip(P, C)) + kv_used > cap:
        worst = max(range(n), key=lambda j: P[j] - C[j])
        raise InputError(
            f"a {P[worst]:,}-token prompt needs more KV than the replica holds ({cap - kv_used:,} positions free); "
            "raise --tp or shorten the prompts"
        )

    # constants of a decode step (folded per-sequence coefficients)
    d_c0, d_cs = co.decode_compute_base, co.decode_compute_per_sequence
    d_m0, d_ms = co.decode_memory_base, co.decode_memory_per_sequence
    d_f0, d_fs = co.decode_fixed_base, co.decode_fixed_per_sequence
    graph_max, graphless = co.graph_max_seqs, co.graphless_s
    c_pair, c_pair_w, m_read, m_read_w = co.c_pair, co.c_pair_w, co.m_read, co.m_read_w
    routed, q = co.m_routed, co.q
    a2a_switch = co.a2a_switch
    step_time = co.step_time

    waiting: deque = deque()  # records [idx, positions to prefill, positions in KV, first pass, decode steps left]
    prefilling: deque = deque()  # the same records, admitted and partly prefilled
    heap: list = []  # (end step, join order, idx) of decoding requests; stale entries are skipped
    joined: dict = {}  # idx -> (context offset, KV held at join, join step, join order, end step)
    order = 0
    b = 0  # decoding sequences
    off_sum = 0  # sum of context offsets: the batch's summed context is off_sum + b x step
    step = 0  # decode steps run (a sequence's context grows by one per step)
    t = 0.0
    i = 0  # next arrival
    busy = seq_s = 0.0
    preempt = recomputed = 0
    itl, itl_w = run.itl_s, run.itl_weight
    remaining = n

    while remaining:
        while i < n and arr[i] <= t:  # arrivals up to now join the waiting queue
            waiting.append([i, P[i] - C[i], C[i], True, O[i] - 1])
            i += 1
        while b and kv_used + b > cap:  # the next step's KV growth does not fit: preempt the newest
            j, (off, held, jstep, _o, end) = max(joined.items(), key=lambda e: e[1][3])
            del joined[j]
            ctx = off + step
            b -= 1
            off_sum -= off
            kv_used -= held + (step - jstep)
            waiting.appendleft([j, ctx, 0, False, end - step])
            if no_evict:  # (not reached while reservations hold) its reservation goes with it
                promised -= end - step
            preempt += 1
            recomputed += ctx
        nrun = b + len(prefilling)
        if no_evict:  # the prompt and the whole output beside every admitted request's reservation
            admit = bool(waiting) and nrun < max_seqs and waiting[0][1] + waiting[0][4] <= cap - kv_used - promised - reserve
        else:
            admit = bool(waiting) and nrun < max_seqs and waiting[0][1] <= cap - kv_used - b - reserve
        budget = (budget_total - b) if mixed else budget_total
        if not (prefilling or admit) or budget <= 0:
            if b == 0:
                t = arr[i]  # idle until the next arrival
                continue
            # a run of pure decode steps: to the next completion, KV exhaustion, or an arrival that can start
            while heap[0][2] not in joined or joined[heap[0][2]][3] != heap[0][1]:
                heappop(heap)
            k = heap[0][0] - step
            fit = (cap - kv_used) // b
            if fit < k:
                k = fit
            ctx_sum = off_sum + b * step
            if windowed:
                read_w = min(ctx_sum, b * Wl)
                pairs_w = min(ctx_sum + b, b * W)
                grow_w = b if ctx_sum < b * Wl else 0
            else:
                read_w = pairs_w = 0.0
                grow_w = 0
            compute_0 = d_c0 + d_cs * b + c_pair * (ctx_sum + b) + c_pair_w * pairs_w
            memory_0 = d_m0 + d_ms * b + m_read * ctx_sum + m_read_w * read_w
            if routed:
                memory_0 += routed * (1.0 - q**b)
            compute_g = c_pair * b + c_pair_w * grow_w
            memory_g = m_read * b + m_read_w * grow_w
            fixed = d_f0 + d_fs * b
            if b > graph_max:  # a step without a CUDA graph
                fixed += graphless
            if b > a2a_switch:
                fixed += co.k_a2a * b
            line = (compute_0, compute_g, memory_0, memory_g, fixed)
            if i < n and not waiting and nrun < max_seqs and k > 1:
                kk = steps_within(line, k, arr[i] - t)
                if kk < k:
                    k = kk if kk > 0 else 1
            last = k - 1
            if (compute_0 >= memory_0) == (compute_0 + compute_g * last >= memory_0 + memory_g * last):
                s0, g = (compute_0, compute_g) if compute_0 >= memory_0 else (memory_0, memory_g)
                dt = k * (s0 + fixed) + g * k * last * 0.5
            else:
                dt = run_time(line, k)
            t += dt
            busy += dt
            seq_s += b * dt
            itl.append(dt / k)
            itl_w.append(b * k)
            step += k
            kv_used += b * k
            if no_evict:
                promised -= b * k
        else:
            # one step of prompt chunks: partial prefills first, then admissions, first come first served
            chunks = []
            for rec in prefilling:
                if budget <= 0:
                    break
                nchunk = rec[1] if rec[1] <= budget else budget
                chunks.append((rec, nchunk))
                budget -= nchunk
            while budget > 0 and waiting and b + len(prefilling) < max_seqs:
                rec = waiting[0]
                need = rec[1]
                room = cap - kv_used - (promised + rec[4] if no_evict else b) - reserve
                if need > room or (not chunked and need > budget and chunks):
                    break
                waiting.popleft()
                prefilling.append(rec)
                kv_used += need
                if no_evict:
                    promised += rec[4]
                nchunk = need if (need <= budget or not chunked) else budget
                chunks.append((rec, nchunk))
                budget -= nchunk
            new = logits = 0
            pairs = pairs_wc = read = read_wc = 0.0
            for rec, nchunk in chunks:
                done = rec[2]
                new += nchunk
                if nchunk == rec[1] and rec[3]:
                    logits += 1
                pairs += causal_pairs_one(done, nchunk)
                read += done
                if windowed:
                    pairs_wc += causal_pairs_one(done, nchunk, W)
                    read_wc += done if done < Wl else Wl
            decoders = b if mixed else 0  # without mixing a prompt step holds no decodes
            if decoders:
                ctx_sum = off_sum + b * step
                new += b
                logits += b
                pairs += ctx_sum + b
                read += ctx_sum
                if windowed:
                    pairs_wc += min(ctx_sum + b, b * W)
                    read_wc += min(ctx_sum, b * Wl)
            dt = step_time(new, logits, pairs, pairs_wc, read, read_wc, decoders + len(chunks))
            t += dt
            busy += dt
            seq_s += b * dt  # decoding sequences resident (stalled by a prompt step without mixing)
            if decoders:
                itl.append(dt)
                itl_w.append(b)
                step += 1
                kv_used += b
                if no_evict:
                    promised -= b
            for rec, nchunk in chunks:
                rec[1] -= nchunk
                rec[2] += nchunk
                if rec[1]:
                    continue
                prefilling.remove(rec)
                j = rec[0]
                if rec[3]:
                    ttft[j] = t - arr[j] + overhead
                held = rec[2] - (C[j] if rec[3] else 0)
                left = rec[4]
                if left <= 0:
                    finish[j] = t + overhead
                    kv_used -= held
                    remaining -= 1
                    continue
                order += 1
                joined[j] = (rec[2] - step, held, step, order, step + left)
                off_sum += rec[2] - step
                b += 1
                heappush(heap, (step + left, order, j))
        while heap and heap[0][0] <= step:  # requests whose last decode step has run
            end, o, j = heappop(heap)
            rec = joined.get(j)
            if rec is None or rec[3] != o:
                continue
            del joined[j]
            off, held, jstep = rec[0], rec[1], rec[2]
            b -= 1
            off_sum -= off
            kv_used -= held + (step - jstep)
            finish[j] = t + overhead
            remaining -= 1
    run.ttft_s = np.asarray(ttft)
    run.finish_s = np.asarray(finish)
    run.busy_s = busy
    run.sequence_s = seq_s
    run.steps = step
    run.preemptions = preempt
    run.recomputed_tokens = recomputed
    return run


def replay_mix(server: "Server", mix: "RequestMix", rate: float, requests: int, rng: np.random.Generator,
               shared_prefix_tokens: int = 0) -> tuple[ReplicaRun, np.ndarray, np.ndarray]:
    """One replica of ``server`` under Poisson arrivals at ``rate`` of ``requests`` requests
    drawn from ``mix`` (uniformly, then the gaps, from ``rng``): how the queueing model is
    checked against the simulator.

    Returns the run, the arrival times [s] and each request's output tokens."""
    idx = rng.integers(0, mix.prompt_tokens.size, requests)
    arrivals = np.cumsum(rng.exponential(1.0 / rate, requests))
    output = mix.output_tokens[idx].astype(np.int64)
    run = simulate_replica(serving_engine(server), arrivals, mix.prompt_tokens[idx].astype(np.int64), output,
                           mix.cached_tokens[idx].astype(np.int64), shared_prefix_tokens)
    return run, arrivals, output


# --------------------------------------------------------------------------------------------- a fleet


class ServingSimConfig(EngineFeatures, Options, BaseModel):
    """How to run a serving simulation (everything besides the workload and the hardware)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, arbitrary_types_allowed=True)
    FLAGS: ClassVar[dict[str, str]] = {"inference_replicas": "--inference-replicas", "request_rate_per_s": "--request-rate"}

    tp: int = Field(default=1, ge=1, le=MAX_GPUS)
    """Tensor-parallel degree of each replica [GPUs]."""
    inference_replicas: int = Field(default=1, ge=1, le=MAX_GPUS)
    """Replicas the requests are dealt to, round robin [count]."""
    requests: int = Field(default=20_000, ge=1, le=50_000_000)
    """Requests to simulate (drawn from the workload; a trace replays all of its own) [requests]."""
    request_rate_per_s: float | None = Field(default=None, gt=0, le=1e7)
    """Arrival rate of the fleet [requests/s]; default ``serving.arrival_rate_per_s``."""
    seed: int | None = Field(default=None, ge=0, le=2**63 - 1)
    """Seed of the lengths and arrival draws; default ``sampling.seed`` of the workload."""
    kv_dtype: KVDtype = "bf16"
    """KV-cache element type (bf16, fp16, fp8, int8 or int4)."""
    weight_dtype: WeightDtype = "bf16"
    """Weight element type (bf16, fp16, fp8, int8 or int4)."""
    gpu_mem_util: float | None = Field(default=None, gt=0, le=1)
    """Fraction of each GPU's memory the engine may use [fraction]; default the engine profile's."""
    max_num_seqs: int | None = Field(default=None, ge=1, le=MAX_SEQUENCES)
    """Scheduler cap on running sequences per replica; default the engine profile's for the GPU class."""
    max_batched_tokens: int | None = Field(default=None, ge=1, le=MAX_CONTEXT_TOKENS)
    """Scheduler token budget per step; default the engine profile's for the GPU class."""
    engine: EngineProfile | None = None
    """Engine profile of the replicas (memory and step-time terms); ``None``: the default one."""


SERVING_SUMMARY_KEYS: tuple[str, ...] = (
    "requests",
    "simulated_s",
    "requests_per_s",
    "output_tokens_per_s",
    "input_tokens_per_s",
    "goodput_requests_per_s",
    "slo_attainment",
    "replica_busy_fraction",
    "mean_decode_batch",
    "preemptions",
    "recomputed_tokens",
    "engine_steps",
)
"""Scalar figures of a serving simulation, in order (the JSON contract; units in ``docs/serving.md``)."""

RECORD_COLUMNS: tuple[str, ...] = (
    "request", "replica", "arrival_s", "input_tokens", "cached_tokens", "output_tokens", "ttft_s", "tpot_s", "e2e_s", "met_slo",
)
"""Columns of the per-request records (``--records``): the first six replay as a ``capplan`` trace."""


@dataclass
class ServingSimResult:
    """What a serving simulation measured (the JSON contract: :meth:`as_dict`; per-request
    records in :attr:`records`)."""

    workload: str
    model: str
    hardware: str
    engine_profile: str
    calibration: str
    traffic: str
    """Where the requests came from, in words."""
    config: dict[str, Any]
    """The run's settings."""
    setup: dict[str, Any]
    """Per-replica constants: KV capacity, scheduler limits."""
    percentiles: list[float]
    """Percentiles the latencies are reported at [percent]."""
    summary: dict[str, float]
    """:data:`SERVING_SUMMARY_KEYS`."""
    latency: dict[str, dict[str, float]]
    """``ttft_s``, ``tpot_s``, ``itl_s``, ``e2e_s`` -> ``mean`` and ``p50``... [s]."""
    targets: dict[str, Any]
    """The workload's targets, their percentile, and whether the run met each."""
    records: dict[str, np.ndarray] = field(repr=False, default_factory=dict)
    """Per-request columns (:data:`RECORD_COLUMNS`)."""

    def as_dict(self) -> dict[str, Any]:
        """The JSON contract: everything but the per-request records."""
        return {
            "workload": self.workload, "model": self.model, "hardware": self.hardware, "engine_profile": self.engine_profile,
            "calibration": self.calibration, "traffic": self.traffic, "config": self.config, "setup": self.setup,
            "percentiles": self.percentiles, "summary": self.summary, "latency": self.latency, "targets": self.targets,
        }


def simulate_serving(
    workload: "Workload", hw: "HardwareProfile", config: ServingSimConfig, model: str | None = None, trace: str | Path | None = None
) -> ServingSimResult:
    """Simulate a serving workload on ``config.inference_replicas`` replicas (see the module notes).

    Parameters
    ----------
    workload : Workload
        A ``serving`` workload (one request per conversation).
    hw : HardwareProfile
        The replicas' hardware.
    config : ServingSimConfig
        Replicas, request count, seed and engine settings.
    model : str, optional
        Model preset or path; default the workload's.
    trace : path, optional
        Replay this trace (:func:`read_trace`) instead of drawing requests.

    Raises
    ------
    InputError
        Not a serving workload; no model; a prompt larger than a replica's KV cache.
    DoesNotFitError
        The model does not fit a replica at ``tp``.
    """
    from capplan.benchmark import server_for
    from capplan.engine import default_engine
    from capplan.modelspec import load_model_spec
    from capplan.plan.serving import check_serving_workload

    check_serving_workload(workload)
    ref = model or workload.model
    if ref is None:
        raise InputError(f"workload {workload.name}: the workload names no model; add 'model:' to it or pass --model")
    spec = load_model_spec(ref)
    config.check_model(spec)
    engine = config.engine or default_engine()
    server = server_for(spec, hw, tp=config.tp, weight_dtype=config.weight_dtype, kv_dtype=config.kv_dtype, engine=engine,
                        max_num_seqs=config.max_num_seqs, max_num_batched_tokens=config.max_batched_tokens,
                        gpu_memory_utilization=config.gpu_mem_util, **config.layout())
    eng = serving_engine(server)
    s = workload.serving
    shared = s.shared_prefix_tokens if s else 0
    if trace is not None:
        traffic = within_context(read_trace(trace, shared, s.prefix_hit_rate if s else 0.0), context_limit(workload, spec))
    else:
        traffic = workload_traffic(workload, config.requests, config.seed, config.request_rate_per_s)
    R = config.inference_replicas
    n = traffic.n
    ttft = np.zeros(n)
    finish = np.zeros(n)
    replica = np.arange(n) % R
    busy = seq_s = 0.0
    steps = preempt = recomputed = 0
    itl: list[float] = []
    itl_w: list[float] = []
    for r in range(R):
        idx = np.nonzero(replica == r)[0]
        run = simulate_replica(eng, traffic.arrival_s[idx], traffic.prompt_tokens[idx], traffic.output_tokens[idx],
                               traffic.cached_tokens[idx], shared)
        ttft[idx], finish[idx] = run.ttft_s, run.finish_s
        busy += run.busy_s
        seq_s += run.sequence_s
        steps += run.steps
        preempt += run.preemptions
        recomputed += run.recomputed_tokens
        itl += run.itl_s
        itl_w += run.itl_weight
    out = traffic.output_tokens
    e2e = finish - traffic.arrival_s
    tpot = np.where(out > 1, (e2e - ttft) / np.maximum(out - 1, 1), 0.0)
    pct = s.percentile if s else 95.0
    percentiles = sorted(set(PERCENTILES) | {pct})
    ttft_target = s.ttft_target_s if s else None
    tpot_target = s.tpot_target_s if s else None
    met = np.ones(n, dtype=bool)
    if ttft_target is not None:
        met &= ttft <= ttft_target
    if tpot_target is not None:
        met &= (tpot <= tpot_target) | (out <= 1)
    duration = float(finish.max()) if n else 0.0

    def lat(values: np.ndarray, weights: np.ndarray | None = None) -> dict[str, float]:
        if values.size == 0:
            return {"mean": 0.0, **{f"p{p:g}": 0.0 for p in percentiles}}
        if weights is None:
            return {"mean": float(values.mean()), **{f"p{p:g}": float(np.percentile(values, p)) for p in percentiles}}
        order = np.argsort(values)
        v, w = values[order], weights[order]
        cum = np.cumsum(w) / w.sum()
        return {"mean": float((v * w).sum() / w.sum()),
                **{f"p{p:g}": float(v[min(int(np.searchsorted(cum, p / 100.0)), v.size - 1)]) for p in percentiles}}

    decoded = out > 1
    latency = {
        "ttft_s": lat(ttft),
        "tpot_s": lat(tpot[decoded]),
        "itl_s": lat(np.asarray(itl), np.asarray(itl_w, dtype=float)) if itl else lat(np.zeros(0)),
        "e2e_s": lat(e2e),
    }
    key = f"p{pct:g}"
    targets = {
        "percentile": pct,
        "ttft_target_s": ttft_target,
        "tpot_target_s": tpot_target,
        "ttft_met": ttft_target is None or latency["ttft_s"][key] <= ttft_target,
        "tpot_met": tpot_target is None or latency["tpot_s"][key] <= tpot_target,
    }
    summary = {
        "requests": n,
        "simulated_s": duration,
        "requests_per_s": n / duration if duration else 0.0,
        "output_tokens_per_s": float(out.sum()) / duration if duration else 0.0,
        "input_tokens_per_s": float(traffic.prompt_tokens.sum()) / duration if duration else 0.0,
        "goodput_requests_per_s": float(met.sum()) / duration if duration else 0.0,
        "slo_attainment": float(met.mean()) if n else 0.0,
        "replica_busy_fraction": busy / (R * duration) if duration else 0.0,
        "mean_decode_batch": seq_s / busy if busy else 0.0,
        "preemptions": preempt,
        "recomputed_tokens": recomputed,
        "engine_steps": steps,
    }
    records = {
        "request": np.arange(n), "replica": replica, "arrival_s": traffic.arrival_s, "input_tokens": traffic.prompt_tokens,
        "cached_tokens": traffic.cached_tokens, "output_tokens": out, "ttft_s": ttft, "tpot_s": tpot, "e2e_s": e2e, "met_slo": met,
    }
    cfg = {
        "tp": config.tp, "inference_replicas": R, "requests": n, "seed": workload.sampling.seed if config.seed is None else config.seed,
        "kv_dtype": config.kv_dtype, "weight_dtype": config.weight_dtype, "routing": "round robin", **config.layout(),
    }
    setup = {
        "kv_capacity_tokens": eng.kv_capacity_tokens, "max_num_seqs": eng.max_num_seqs, "max_num_batched_tokens": eng.max_batched_tokens,
        "chunked_prefill": eng.chunked_prefill, "mixed_prefill": eng.mixed_prefill, "request_overhead_s": eng.request_overhead_s,
    }
    return ServingSimResult(
        workload=workload.name, model=spec.name, hardware=hw.name, engine_profile=engine.name, calibration=engine.calibration,
        traffic=traffic.source, config=cfg, setup=setup, percentiles=percentiles, summary=summary, latency=latency,
        targets=targets, records=records,
    )


def write_records(result: ServingSimResult, path: str | Path, force: bool = False) -> Path:
    """Write the per-request records as CSV (``.csv``) or JSONL (any other suffix), atomically.

    Raises
    ------
    OutputExistsError
        The file exists and ``force`` is false.
    """
    import json

    from capplan.output import to_csv, write_atomic

    rec = result.records
    cols = [rec[c].tolist() for c in RECORD_COLUMNS]
    rows = zip(*cols)
    p = Path(path)
    if p.suffix.lower() == ".csv":
        text = to_csv(list(RECORD_COLUMNS), rows)
    else:
        text = "".join(json.dumps(dict(zip(RECORD_COLUMNS, row))) + "\n" for row in rows)
    return write_atomic(p, text, force=force)
