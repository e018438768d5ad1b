"""Predicted results of serving benchmarks, from an engine's step times.

Four scenarios cover how published serving numbers are measured:

* **static batch** -- ``batch`` requests start together (TensorRT-LLM's ``gptSessionBenchmark``,
  vLLM's ``benchmark_latency``): the prompts are prefilled, then ``output - 1`` decode steps run
  at that batch. End-to-end latency, TTFT and output tokens/s follow directly.
* **closed loop** -- ``concurrency`` clients each send a request and send the next when it ends
  (``vllm bench serve --max-concurrency``, NIM's concurrency tables).
* **offline** -- every request queued at once (``trtllm-bench throughput``, vLLM's throughput
  benchmark): the engine runs at the largest batch its limits allow.
* **open loop** -- requests arrive at ``rate`` per second (``--request-rate``): the number in the
  engine settles where arrivals balance completions (Little's law), and TTFT adds the wait for
  the scheduler.
* **open loop with queueing** -- the same arrivals with the distribution of the latencies, for
  requests of any length mix and Poisson or gamma arrivals (:func:`queueing_latency`, the
  replica's sustainable rate :func:`serving_capacity`): the prefill queue as a Markov chain over
  engine steps, TTFT, TPOT, ITL and latency percentiles. Serving plans use it
  (:mod:`capplan.plan.serving`; ``docs/serving.md``); :func:`open_loop` keeps the closed form of
  the means that the engine profiles' time terms were fitted through, and
  :func:`open_loop_latency` gives its percentiles.

**A bistable engine.** Steps that jump in price with the batch (past the engine's largest CUDA
graph, ``time.cuda_graph_max_batch``) can let the arrivals balance completions twice: at a batch
below the jump and at one above it, with an unstable balance between (at the jump, one more
request in flight slows every step, so many more stay in flight). Both open-loop models take
the upper balance: a burst of arrivals that carries the batch past the jump tips the engine
there, and it does not come back while the arrivals hold. This is the pessimistic reading, and
the one the published runs show: DataCrunch's SGLang runs of Llama-3.3-70B on 4 x H200 at 8
requests/s and of Llama-3.1-405B on 8 x H200 at 4 and 8 requests/s, which balance both ways in
the model, all ran above the jump (the 70B's ITL 71 ms; 72 ms above, 27 ms below).

The closed-loop model, in steady state with ``c`` requests in the engine, prompts of ``P`` and
outputs of ``O`` tokens, and a scheduler token budget ``M``: each request spends ``k`` steps
prefilling (``ceil(P / (M - b))`` chunks beside ``b`` decoding sequences) and ``O - 1`` decoding.
Over one request's lifetime the engine runs ``W = max(k + O - 1, c k)`` steps (more than one
request's own steps when the prefills of all ``c`` clients do not fit between its decodes);
``c k / W`` of them carry a prefill chunk. With ``t_d`` a decode step at batch
``b = c (O - 1) / W`` and ``t_m`` a mixed step::

    step = (c k / W) t_m + (1 - c k / W) t_d          ITL = step
    TTFT = (W - O + 1) t_m + wait + residual + request overhead
    E2E = TTFT + (O - 1) ITL                          output tokens/s = c O / E2E

where ``wait`` is the mean wait of an M/D/1 queue for the prefills of the other clients, at the
share of time the engine spends on them, and ``residual`` the wait for the step under way when
the request arrives, ``(1 - exp(-b_others)) E[T^2] / (2 E[T])`` (:func:`step_wait_s`; none for
requests already queued, which are admitted at a step's end; a Poisson arrival of :func:`open_loop`
finds the whole batch ``b``). When the clients' prefills do not
fit one per step between a request's decodes, steps carry several prompts' tokens up to the
budget (saturated). A prompt prefix in the prefix cache (``cached_tokens``) is attended to but
not prefilled: ``P`` above counts the rest. An engine that does not mix prompts into decode
steps (``Server.mixed_prefill`` false, SGLang's default) runs a prompt step alone, on the whole
budget ``M``, and the decodes wait: ``t_m`` is a prompt step plus the decode step after it, and a
request's own prompt steps (and the prefill queue) are priced as prompt steps alone.

All times are seconds; throughputs are per engine instance (``tp`` GPUs).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from capplan.errors import InputError

if TYPE_CHECKING:
    from capplan.roofline import StepPricer

BALANCE_GRID = 256
"""Points of the log grid on which :func:`open_loop` brackets the concurrencies where arrivals
balance completions (fine enough to see both balances of a bistable engine)."""

DECODE_POINTS = 8
"""Contexts at which a run of decode steps is priced (midpoint rule over the generation)."""


@dataclass(frozen=True)
class Server:
    """One engine instance (``tp`` GPUs) as a benchmark sees it."""

    pricer: "StepPricer"
    """Step prices of the model on the hardware at the engine's settings."""
    max_num_seqs: int
    """Scheduler limit on running sequences [sequences]."""
    max_num_batched_tokens: int
    """Scheduler token budget per step [tokens]."""
    kv_capacity_tokens: int
    """KV cache capacity of the instance [tokens]."""
    chunked_prefill: bool = True
    """Prompts are split into chunks of the token budget (vLLM V1, SGLang); otherwise a prompt is
    prefilled whole in one step."""
    request_overhead_s: float = 0.0
    """Fixed time per request outside engine steps, added to TTFT [s]."""
    mixed_prefill: bool = True
    """A step that carries prompt positions also advances the decoding batch (vLLM V1,
    TensorRT-LLM's in-flight batching); ``False``: a step holds prompts or decodes, and the
    decodes wait for the prompt steps (SGLang without ``--enable-mixed-chunk``, vLLM's V0)."""
    capacity_scheduler_policy: str = "max_utilization"
    """``max_utilization``: a request holds the KV it has written (vLLM, SGLang);
    ``guaranteed_no_evict``: it reserves its prompt and whole output when admitted (TensorRT-LLM's
    default), so the KV holds fewer requests (``EngineProfile`` ``time.capacity_scheduler_policy``)."""

    @property
    def reserves_output(self) -> bool:
        """An admitted request reserves the KV of its whole output (``guaranteed_no_evict``)."""
        return self.capacity_scheduler_policy == "guaranteed_no_evict"


@dataclass(frozen=True)
class BenchmarkResult:
    """What a serving benchmark reports, predicted (means over requests)."""

    scenario: str
    """``static_batch``, ``closed_loop``, ``offline`` or ``open_loop``."""
    concurrency: float
    """Requests in the engine on average [requests]."""
    decode_batch: float
    """Sequences decoding in an average step [sequences]."""
    ttft_s: float
    """Time to first token [s]."""
    itl_s: float
    """Inter-token latency (time per output token after the first) [s]."""
    e2e_latency_s: float
    """Request latency, first byte in to last token out [s]."""
    output_tokens_per_s: float
    """Output tokens per second of the instance [tokens/s]."""
    input_tokens_per_s: float
    """Prompt tokens per second of the instance [tokens/s]."""
    requests_per_s: float
    """Completed requests per second [requests/s]."""
    limited_by: str
    """What set the concurrency: ``clients``, ``max_num_seqs``, ``kv capacity``, ``arrival rate``
    or ``saturated`` (arrivals faster than the instance can serve)."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _decode_run_s(server: Server, batch: float, context: float, steps: float) -> float:
    """Time of ``steps`` decode steps at ``batch``, the context growing from ``context`` [s]."""
    if steps <= 0:
        return 0.0
    ctx = context + (np.arange(DECODE_POINTS) + 0.5) * steps / DECODE_POINTS
    return float(np.mean(server.pricer.decode(max(batch, 1.0), ctx).step_time_s)) * steps


def _cache_hit(prompt_tokens: float, cached_tokens: float) -> float:
    """Positions of a prompt found in the prefix cache: at most all but the last, which is always
    computed (its logits sample the first token) [positions]."""
    return min(float(cached_tokens), float(prompt_tokens) - 1.0) if cached_tokens else 0.0


def prefill_s(server: Server, prompt_tokens: float, batch: float = 1.0, cached_tokens: float = 0.0) -> float:
    """Time to prefill ``batch`` prompts of ``prompt_tokens`` with nothing else running [s]; the
    first ``cached_tokens`` of each are a prefix-cache hit (attended to, not recomputed)."""
    from capplan.roofline import causal_pairs

    C = _cache_hit(prompt_tokens, cached_tokens)
    new = prompt_tokens - C
    total = new * batch
    chunk = server.max_num_batched_tokens if server.chunked_prefill else total
    window = server.pricer.window
    pairs = float(causal_pairs(C, new)) * batch
    pairs_w = float(causal_pairs(C, new, window)) * batch
    return server.pricer.chunked(total, pairs, pairs_w, C * batch, batch, batch, max(int(chunk), 1))[0]


def static_batch(server: Server, batch: int, input_tokens: int, output_tokens: int) -> BenchmarkResult:
    """``batch`` requests started together: prefill, then ``output - 1`` decode steps.

    Examples
    --------
    >>> from capplan.hardware import load_hardware
    >>> from capplan.modelspec import load_model_spec
    >>> s = server_for(load_model_spec("llama-3.1-8b"), load_hardware("h100-sxm"))
    >>> r = static_batch(s, 1, 128, 129)
    >>> round(r.itl_s * 1e3, 1), round(r.output_tokens_per_s)  # one sequence: ~6.5 ms a token
    (6.5, 153)
    """
    _check(batch=batch, input_tokens=input_tokens, output_tokens=output_tokens)
    ttft = prefill_s(server, input_tokens, batch) + server.request_overhead_s
    decode = _decode_run_s(server, batch, input_tokens, output_tokens - 1)
    e2e = ttft + decode
    itl = decode / (output_tokens - 1) if output_tokens > 1 else 0.0
    return BenchmarkResult(
        scenario="static_batch", concurrency=float(batch), decode_batch=float(batch), ttft_s=ttft, itl_s=itl,
        e2e_latency_s=e2e, output_tokens_per_s=batch * output_tokens / e2e, input_tokens_per_s=batch * input_tokens / ttft,
        requests_per_s=batch / e2e, limited_by="clients",
    )


def _closed_loop_arrays(server: Server, concurrency: Any, input_tokens: float, output_tokens: float,
                        cached_tokens: float = 0.0) -> dict[str, np.ndarray]:
    """The closed-loop model (module notes), vectorised over ``concurrency``: ``ttft`` and ``e2e``
    in the engine, and ``step_residual``, how long a request that arrives during a step waits for
    it to end (not in the engine's batch yet, so outside ``e2e``). The first ``cached_tokens`` of
    every prompt are a prefix-cache hit: only the rest is prefilled, attending to them."""
    from capplan.roofline import causal_pairs

    c = np.atleast_1d(np.asarray(concurrency, dtype=float))
    C = _cache_hit(input_tokens, cached_tokens)
    P, O = float(input_tokens) - C, float(output_tokens)  # P: the positions a prompt prefills
    M = float(server.max_num_batched_tokens)
    from capplan.speculative import SpeculativePricer

    # speculative decoding with chunked prefill: steps counted in output tokens (see _Steps._speculative)
    spec = server.pricer if isinstance(server.pricer, SpeculativePricer) and server.chunked_prefill else None
    mixed = server.mixed_prefill
    decode_steps = O - 1.0
    own_steps = np.zeros_like(c)
    b = np.maximum(c - 1.0, 0.0)
    for _ in range(30):
        budget = _chunk_budget(server, spec, M, b, c, P)
        k = np.ceil(P / np.minimum(budget, P))  # steps of one prompt's own prefill
        own_steps = k + decode_steps
        packed = c * P / budget  # steps if every step's budget were filled with prompts
        window = np.maximum(own_steps, np.where(c * k <= own_steps, 0.0, packed))
        b_new = c * decode_steps / window
        done = np.all(np.abs(b_new - b) < 1e-6)
        b = b_new
        if done:
            break
    budget = _chunk_budget(server, spec, M, b, c, P)
    k = np.ceil(P / np.minimum(budget, P))
    one_at_a_time = c * k <= own_steps
    # prompt tokens in a step that carries prefill: one prompt's chunk, or (saturated) the whole
    # budget shared by several prompts; its attention pairs scale with the prompts it holds
    tokens = np.where(one_at_a_time, P / k, c * P / window)
    n_mixed = np.where(one_at_a_time, c * k, window)
    pairs = float(causal_pairs(C, P)) / P * tokens
    pairs_w = float(causal_pairs(C, P, server.pricer.window)) / P * tokens
    ctx = C + P + decode_steps / 2.0
    if decode_steps > 0:
        pts = C + P + (np.arange(DECODE_POINTS) + 0.5) * decode_steps / DECODE_POINTS
        t_d = np.mean(np.asarray(server.pricer.decode(np.maximum(b, 1.0)[:, None], pts[None, :]).step_time_s), axis=1)
    else:
        t_d = np.zeros_like(c)
    W = server.pricer.window
    if spec is not None:  # a verify step of b sequences carrying E x tokens prompt positions, per output token
        E = spec.tokens_per_step
        prompt = dict(logits_tokens=E * tokens / P, attention_pairs=E * pairs, kv_read_tokens=0.0 * tokens,
                      sequences=np.maximum(E * tokens / P, 1.0), window_attention_pairs=E * pairs_w, window_kv_read_tokens=0.0 * tokens)
        alone = np.asarray(spec.step(new_tokens=np.maximum(E * tokens, 1.0), **prompt).step_time_s, float)
        if mixed:
            t_m = np.where(b > 0, spec.step_with_decodes(np.maximum(b, 1.0), ctx, new_tokens=E * tokens, **prompt), alone) / E
            t_p = t_m
        else:  # a prompt step alone, then the verify step (t_d: already per output token)
            t_p = alone / E
            t_m = np.where(b > 0, t_p + t_d, t_p)
    elif not mixed:  # a prompt step holds prompts only; the decodes run in their own step after it
        t_p = np.asarray(server.pricer.step(
            new_tokens=np.maximum(tokens, 1.0), logits_tokens=tokens / P, attention_pairs=pairs,
            kv_read_tokens=C * tokens / P, sequences=np.maximum(tokens / P, 1.0),
            window_attention_pairs=pairs_w, window_kv_read_tokens=min(C, W - 1) * tokens / P,
        ).step_time_s, dtype=float)
        t_m = np.where(b > 0, t_p + t_d, t_p)  # a prompt step and the decode step that follows it
    else:
        t_m = np.asarray(server.pricer.step(
            new_tokens=b + tokens, logits_tokens=b + tokens / P, attention_pairs=b * (ctx + 1) + pairs,
            kv_read_tokens=b * ctx + C * tokens / P, sequences=b + np.maximum(tokens / P, 1.0),
            window_attention_pairs=b * min(ctx + 1, W) + pairs_w,
            window_kv_read_tokens=b * min(ctx, W - 1) + min(C, W - 1) * tokens / P,
        ).step_time_s, dtype=float)
        t_p = t_m
    mixed_share = np.minimum(1.0, n_mixed / window)
    step = np.where(b > 0, mixed_share * t_m + (1.0 - mixed_share) * t_d, t_m)
    # a new request finds the other clients' prefills under way: the engine spends a share rho of
    # its time on them, and the wait is an M/D/1 queue's, rho / (2 (1 - rho)) own prefills
    rho = np.clip((c - 1.0) / np.maximum(c, 1.0) * mixed_share * t_p / np.maximum(step, 1e-12), 0.0, 0.95)
    queue = np.where(one_at_a_time, rho / (2.0 * (1.0 - rho)) * k * t_p, 0.0)
    # its own prompt steps (one at a time: prompt steps back to back when they hold no decodes)
    own = np.where(one_at_a_time, t_p, t_m)
    ttft = (window - decode_steps) * own + queue + server.request_overhead_s
    e2e = ttft + decode_steps * step
    # a request that arrives while the engine runs a step waits for that step to end: the mean
    # residual of a renewal process, E[T^2] / (2 E[T]) (see step_wait_s for how often); without
    # mixing, each prompt step and the decode step after it are two steps
    if mixed:
        second = np.where(b > 0, mixed_share * t_m**2 + (1.0 - mixed_share) * t_d**2, t_m**2)
        residual = second / (2.0 * np.maximum(step, 1e-12))
    else:
        steps_per_decode = np.where(b > 0, 1.0 + mixed_share, 1.0)
        second = np.where(b > 0, mixed_share * t_p**2 + t_d**2, t_p**2) / steps_per_decode
        residual = second / (2.0 * np.maximum(step / steps_per_decode, 1e-12))
    return {"c": c, "b": b, "ttft": ttft, "itl": step, "e2e": e2e, "step_residual": residual}


def step_wait_s(arrays: dict[str, np.ndarray], others: Any) -> np.ndarray:
    """Mean wait of an arriving request for the step under way [s]: the engine is busy with
    probability ``1 - exp(-others)`` (the decoding requests it finds, a Poisson count), and a
    step under way has ``step_residual`` left (:func:`_closed_loop_arrays`)."""
    return -np.expm1(-np.asarray(others, float)) * arrays["step_residual"]


def _chunk_budget(server: Server, spec: Any, M: float, b: Any, c: Any, P: float) -> Any:
    """Prompt positions a step carries beside ``b`` decodes [positions]: ``M - b`` (``M`` the token
    budget), whole prompts without chunked prefill; speculatively, ``(M - b n) / E`` per output token
    (a verify step forwards ``n`` positions of each decoding sequence and yields ``E`` tokens)."""
    if spec is not None:
        if not server.mixed_prefill:
            return np.full_like(c, M / spec.tokens_per_step)
        return np.maximum(M - b * spec.positions_per_sequence, 1.0) / spec.tokens_per_step
    if not server.chunked_prefill:
        return np.full_like(c, max(P, M))
    return np.maximum(M - b, 1.0) if server.mixed_prefill else np.full_like(c, M)


ARRIVALS = ("clients", "poisson", "queued")
"""How requests reach a :func:`closed_loop` engine: sent by the other clients' peers (a client's
request finds the other clients' share of the batch decoding), Poisson arrivals (they find the
time-average batch), or already queued (admitted at a step's end, no step to wait for)."""


def closed_loop(server: Server, concurrency: float, input_tokens: int, output_tokens: int, limited_by: str = "clients",
                arrivals: str = "clients", cached_tokens: float = 0.0) -> BenchmarkResult:
    """``concurrency`` clients, each sending its next request when the last one ends (module notes).

    More clients than the engine can run at once (:func:`max_concurrency`) queue: the engine runs
    at its limit and the rest wait, ``wait = clients / throughput - E2E in the engine`` (Little's
    law), which is added to TTFT and latency. A request that arrives during a step waits for it
    to end (:func:`step_wait_s`), how often by ``arrivals`` (:data:`ARRIVALS`); queued requests
    (those, or ``arrivals="queued"``: every request sent at once) are admitted at a step's end.
    The first ``cached_tokens`` of every prompt are a prefix-cache hit (a shared system prompt).
    """
    _check(concurrency=concurrency, input_tokens=input_tokens, output_tokens=output_tokens)
    if arrivals not in ARRIVALS:
        raise InputError(f"arrivals {arrivals!r}: one of {', '.join(ARRIVALS)}")
    top, why = max_concurrency(server, input_tokens, output_tokens)
    running = min(float(concurrency), top)
    arrays = _closed_loop_arrays(server, running, input_tokens, output_tokens, cached_tokens)
    a = {k: float(v[0]) for k, v in arrays.items()}
    if arrivals != "queued" and concurrency <= top:
        others = arrays["b"] * ((running - 1.0) / running if arrivals == "clients" else 1.0)
        wait = float(step_wait_s(arrays, others)[0])
        a["ttft"] += wait
        a["e2e"] += wait
    e2e = a["e2e"]
    rps = running / e2e
    wait = max(0.0, concurrency / rps - e2e) if concurrency > top else 0.0
    return BenchmarkResult(
        scenario="closed_loop", concurrency=float(concurrency), decode_batch=a["b"], ttft_s=a["ttft"] + wait, itl_s=a["itl"],
        e2e_latency_s=e2e + wait, output_tokens_per_s=rps * output_tokens, input_tokens_per_s=rps * input_tokens,
        requests_per_s=rps, limited_by=why if concurrency > top else limited_by,
    )


def max_concurrency(server: Server, input_tokens: int, output_tokens: int) -> tuple[float, str]:
    """Requests an offline run keeps in the engine, and what limits it.

    ``min(max_num_seqs, KV capacity / (P + O / 2))``: in steady state a request holds its prompt
    and, on average, half its output; ``KV capacity / (P + O)`` when an admitted request reserves
    its whole output (``guaranteed_no_evict``).
    """
    by_kv = server.kv_capacity_tokens / (input_tokens + output_tokens / (1.0 if server.reserves_output else 2.0))
    if by_kv < server.max_num_seqs:
        return max(by_kv, 1.0), "kv capacity"
    return float(server.max_num_seqs), "max_num_seqs"


def offline(server: Server, input_tokens: int, output_tokens: int, cached_tokens: float = 0.0) -> BenchmarkResult:
    """Every request queued at once: the engine runs at its largest batch."""
    c, why = max_concurrency(server, input_tokens, output_tokens)
    r = closed_loop(server, c, input_tokens, output_tokens, limited_by=why, arrivals="queued", cached_tokens=cached_tokens)
    return BenchmarkResult(**{**r.as_dict(), "scenario": "offline"})


def open_loop(server: Server, rate: float, input_tokens: int, output_tokens: int, cached_tokens: float = 0.0,
              burstiness: float = 1.0) -> BenchmarkResult:
    """Requests arriving at ``rate`` per second, the gaps between them gamma-distributed with shape
    ``burstiness`` (``vllm bench serve --burstiness``: 1 is Poisson, ``inf`` a constant rate).

    The requests in the engine ``c`` solve ``c = rate x E2E(c)`` (Little's law, E2E from the
    closed-loop model at ``c``). TTFT adds the mean wait of a G/D/1 queue whose server is the
    engine at utilisation ``rho = rate / max rate``, by Kingman's formula with the gaps' squared
    coefficient of variation ``1 / burstiness`` and fixed-length prefills:
    ``rho / (2 (1 - rho)) / burstiness`` prefills (exact for Poisson arrivals, M/D/1; none at a
    constant rate, D/D/1), and the wait for the step under way (an arrival finds the whole batch
    decoding). Above the instance's largest rate the result is the offline one, marked ``saturated``.
    """
    _check(rate=rate, input_tokens=input_tokens, output_tokens=output_tokens)
    if not burstiness > 0:
        raise InputError(f"burstiness {burstiness}: must be > 0 (1 is Poisson, inf a constant rate)")
    top = offline(server, input_tokens, output_tokens, cached_tokens)
    if rate >= top.requests_per_s:
        return BenchmarkResult(**{**top.as_dict(), "scenario": "open_loop", "limited_by": "saturated"})
    # the concurrency where arrivals balance completions, c = rate x E2E(c): the highest stable
    # balance (the gap rate x E2E - c falls through zero), bracketed on a log grid, then refined
    # twice on finer grids between the bracketing points (vectorised). An engine whose steps jump
    # with the batch (a CUDA-graph limit) can balance twice, below the jump and above it; it is
    # taken above (module notes: a bistable engine)
    lo, hi = 1e-4, top.concurrency
    grid = np.geomspace(lo, hi, BALANCE_GRID)
    gap = rate * _closed_loop_arrays(server, grid, input_tokens, output_tokens, cached_tokens)["e2e"] - grid
    falls = np.nonzero((gap[:-1] > 0) & (gap[1:] <= 0))[0]
    if falls.size:
        lo, hi = grid[falls[-1]], grid[falls[-1] + 1]
    else:  # balanced from the smallest concurrency on
        lo, hi = grid[0] / 2, grid[0]
    for _ in range(2):
        grid = np.geomspace(lo, hi, 48)
        gap = rate * _closed_loop_arrays(server, grid, input_tokens, output_tokens, cached_tokens)["e2e"] - grid
        above = np.nonzero(gap <= 0)[0]
        i = int(above[0]) if above.size else grid.size - 1
        lo, hi = (grid[i - 1], grid[i]) if i > 0 else (grid[0] / 2, grid[0])
    r = closed_loop(server, hi, input_tokens, output_tokens, limited_by="arrival rate", arrivals="poisson", cached_tokens=cached_tokens)
    rho = rate / top.requests_per_s
    wait = rho / (2.0 * (1.0 - rho)) / burstiness * prefill_s(server, input_tokens, cached_tokens=cached_tokens)
    ttft = r.ttft_s + wait
    e2e = r.e2e_latency_s + wait
    return BenchmarkResult(**{**r.as_dict(), "scenario": "open_loop", "ttft_s": ttft, "e2e_latency_s": e2e,
                              "output_tokens_per_s": rate * output_tokens, "input_tokens_per_s": rate * input_tokens,
                              "requests_per_s": rate})


def server_for(
    spec: Any,
    hw: Any,
    tp: int = 1,
    weight_dtype: str = "bf16",
    kv_dtype: str = "bf16",
    engine: Any = None,
    max_num_seqs: int | None = None,
    max_num_batched_tokens: int | None = None,
    gpu_memory_utilization: float | None = None,
    **layout: Any,
) -> Server:
    """A :class:`Server` for ``spec`` on ``hw`` with an engine profile's defaults (KV capacity from
    :func:`capplan.kv.compute_kv`, scheduler limits and chunking from the profile).

    ``layout`` takes the feature settings of :class:`capplan.roofline.RooflineInputs` (``ep``,
    ``dp``, ``expert_dtype``, ``redundant_experts``, ``kv_scale``, ``gemm_dtype``,
    ``two_batch_overlap``); with data-parallel attention the server is **one** rank of ``tp``
    GPUs (its own scheduler and KV cache), every rank running the same steps.
    """
    from capplan.kv import KVInputs, compute_kv
    from capplan.roofline import RooflineInputs, StepPricer

    memory_keys = {"ep", "dp", "expert_dtype", "redundant_experts", "kv_scale"}
    kv = compute_kv(spec, hw, KVInputs(tp=tp, weight_dtype=weight_dtype, kv_dtype=kv_dtype, engine=engine,
                                       max_num_seqs=max_num_seqs, max_batched_tokens=max_num_batched_tokens,
                                       gpu_mem_util=gpu_memory_utilization,
                                       **{k: v for k, v in layout.items() if k in memory_keys}))
    pricer = StepPricer(spec, hw, RooflineInputs(tp=tp, weight_dtype=weight_dtype, kv_dtype=kv_dtype, engine=engine, **layout))
    t = engine.time_on(hw.name) if engine is not None else None
    return Server(pricer, kv.max_num_seqs, kv.max_batched_tokens, kv.kv_capacity_tokens, **(t.schedule() if t else {}))


def _check(**values: float) -> None:
    for name, v in values.items():
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
            raise InputError(f"{name.replace('_', '-')} {v}: must be a finite number > 0")


# --------------------------------------------------------------------------------------------- open loop with queueing

GRANULES_PER_STEP = 16
"""Resolution of the queueing model's prompt queue: about this many granules fill a step's prefill
budget (a mean prompt is a whole number of granules)."""

QUEUE_STEPS = 8
"""Steps of prefill backlog the queueing model holds (at least six mean prompts' and two of the
longest prompts' worth)."""

TAIL_MASS = 1e-4
"""More than this share of steps with the model's whole backlog queued means the prefill queue
does not settle: the replica is saturated by prefill."""

MAX_QUEUE_STATES = 192
"""Largest number of queue states (granules) of the model's chain."""

HEADROOM_SIGMAS = 3.0
"""Standard deviations of the decode batch kept below the batch limit (KV capacity or
``max_num_seqs``) for a rate to count as sustainable."""

TAGGED_REQUESTS = 20_000
"""Requests the latency percentiles are read from (drawn from the model's stationary state with a
fixed seed, so the same inputs give the same answer)."""

KV_WATERMARK = 0.01
"""Share of the KV capacity kept free when a request is admitted (vLLM's block manager keeps 1%)."""

FINE_GRID = 129
"""Prefill token counts a step is priced at (interpolated between)."""


@dataclass(frozen=True)
class RequestMix:
    """The lengths of the requests a replica serves: one entry per request of a sample."""

    prompt_tokens: np.ndarray
    """Prompt positions [positions] (>= 1)."""
    output_tokens: np.ndarray
    """Sampled tokens [tokens] (>= 1)."""
    cached_tokens: np.ndarray
    """Prompt positions served from the prefix cache [positions] (< prompt)."""
    shared_prefix_tokens: int = 0
    """A prefix all requests share, held once per replica when any request hits it [positions]."""

    @classmethod
    def fixed(cls, prompt_tokens: float, output_tokens: float, cached_tokens: float = 0.0) -> "RequestMix":
        """Every request alike."""
        return cls(np.array([float(prompt_tokens)]), np.array([float(output_tokens)]), np.array([float(cached_tokens)]))

    @property
    def new_tokens(self) -> np.ndarray:
        """Prompt positions each request prefills [positions]."""
        return np.maximum(np.asarray(self.prompt_tokens, float) - np.asarray(self.cached_tokens, float), 1.0)


@dataclass(frozen=True)
class Latency:
    """One latency's mean and percentiles [s] (``None`` when the replica is saturated)."""

    mean: float | None
    """Mean [s]."""
    percentiles: dict[str, float | None]
    """Percentile name (``p50``, ``p90``, ``p99``, ...) -> value [s]."""

    def at(self, percentile: float) -> float | None:
        """The value at ``percentile`` [s] (it must be one the model was asked for)."""
        return self.percentiles[pct_name(percentile)]

    def as_dict(self) -> dict[str, float | None]:
        return {"mean": self.mean, **self.percentiles}


def pct_name(percentile: float) -> str:
    """``95 -> 'p95'``, ``99.9 -> 'p99.9'``."""
    return f"p{percentile:g}"


@dataclass(frozen=True)
class QueueingResult:
    """One replica under open-loop arrivals: its batch, step time and latency distribution."""

    rate_per_s: float
    """Requests arriving at the replica per second [requests/s]."""
    burstiness: float
    """Gamma shape of the replica's inter-arrival gaps (1: Poisson)."""
    capacity_per_s: float | None
    """Largest sustainable request rate of the replica [requests/s] (see :func:`serving_capacity`;
    ``None`` when not computed)."""
    limited_by: str
    """What sets the capacity (or stops this rate): ``kv capacity``, ``max_num_seqs`` or
    ``prefill compute`` (empty when the capacity was not computed and the rate is sustainable)."""
    utilisation: float | None
    """``rate / capacity`` [fraction] (``None`` when the capacity was not computed)."""
    saturated: bool
    """The rate exceeds the capacity: queues grow without bound (latencies are ``None``)."""
    decode_batch: float
    """Mean sequences decoding in a step [sequences]."""
    batch_limit: float
    """The decode batch KV capacity and ``max_num_seqs`` allow [sequences]."""
    step_s: float
    """Mean time of a step in which the decoding batch advances (mean ITL) [s]."""
    prefill_step_share: float
    """Share of steps that carry prompt chunks [fraction]."""
    prefill_time_share: float
    """Share of step time spent on prompts [fraction]: with chunked prefill the steps' excess over a
    decode-only step, without it the prompt steps' time."""
    ttft_s: Latency
    """Time to first token, queueing and ``request_overhead_s`` included [s]."""
    tpot_s: Latency
    """Per-request time per output token after the first, ``(latency - TTFT) / (output - 1)`` [s]."""
    itl_s: Latency
    """Inter-token latency over all tokens (the step times a decoding sequence waits) [s]."""
    e2e_s: Latency
    """Request latency: TTFT + (output - 1) x TPOT [s]."""
    requests_per_s: float
    """Completed requests per second (the arrival rate below capacity) [requests/s]."""
    output_tokens_per_s: float
    """Output tokens per second [tokens/s]."""
    input_tokens_per_s: float
    """Prompt tokens per second (cached ones included) [tokens/s]."""


class _Mix:
    """Moments of a :class:`RequestMix` the model uses, computed once."""

    def __init__(self, mix: RequestMix) -> None:
        from capplan.roofline import causal_pairs

        P = np.atleast_1d(np.asarray(mix.prompt_tokens, float))
        O = np.atleast_1d(np.asarray(mix.output_tokens, float))
        C = np.atleast_1d(np.asarray(mix.cached_tokens, float))
        self.P, self.O, self.C = P, np.maximum(O, 1.0), np.minimum(C, P - 1.0)
        self.new = np.maximum(P - self.C, 1.0)
        self.mean_new = float(self.new.mean())
        self.long_new = float(np.percentile(self.new, 99.9))
        self.mean_prompt = float(P.mean())
        self.mean_out = float(self.O.mean())
        d = self.O - 1.0
        self.mean_decode = float(d.mean())
        w = d.sum()
        # the context of a decoding sequence, weighted by the steps it decodes
        self.decode_ctx = float((d * (P + d / 2.0)).sum() / w) if w > 0 else float(P.mean())
        self.kv_per_seq = float((d * (self.new + d / 2.0)).sum() / w) if w > 0 else self.mean_new
        # the same with the whole output reserved at admission (guaranteed_no_evict)
        self.kv_reserved_per_seq = float((d * (self.new + self.O)).sum() / w) if w > 0 else self.mean_new + self.mean_out
        self.pairs_per_token = float(np.mean(causal_pairs(self.C, self.new))) / self.mean_new
        self.cached_mean = float(self.C.mean())
        self.shared = float(mix.shared_prefix_tokens) if float(self.C.max()) > 0 else 0.0
        # Whitt's peakedness factor of an infinite-server queue: kappa = int G^c(x)^2 dx / E[S]
        s = np.sort(d)
        if s[-1] > 0:
            n = s.size
            surv = 1.0 - np.arange(n) / n  # G^c on [s_(i-1), s_(i)): (n - i) / n
            widths = np.diff(np.concatenate([[0.0], s]))
            self.kappa = float((surv**2 * widths).sum() / s.mean())
        else:
            self.kappa = 1.0


class _Steps:
    """Step times of one replica at decode batch ``b``, for any prefill token count in a step."""

    def __init__(self, server: Server, mix: _Mix, b: float) -> None:
        p = server.pricer
        self.chunked = server.chunked_prefill
        self.mixed = server.mixed_prefill
        """Whether a step with prompt positions also advances the decoding batch."""
        M = float(server.max_num_batched_tokens)
        from capplan.speculative import SpeculativePricer

        if isinstance(p, SpeculativePricer) and self.chunked:
            self._speculative(p, M, mix, b)
            return
        self.budget = max(M - b, 1.0) if self.chunked and self.mixed else M
        x = np.linspace(0.0, self.budget, FINE_GRID)
        prompts = x / mix.mean_new
        W = p.window
        ctx = mix.decode_ctx
        dec = b if self.mixed else 0.0
        pairs_w_tok = min(mix.pairs_per_token, W) if math.isfinite(W) else mix.pairs_per_token
        t = p.step(
            new_tokens=np.maximum(dec + x, 1.0), logits_tokens=dec + prompts,
            attention_pairs=dec * (ctx + 1) + x * mix.pairs_per_token,
            kv_read_tokens=dec * ctx + prompts * mix.cached_mean, sequences=dec + np.maximum(prompts, 1.0),
            window_attention_pairs=dec * min(ctx + 1, W) + x * pairs_w_tok,
            window_kv_read_tokens=dec * min(ctx, W - 1) + prompts * min(mix.cached_mean, W - 1),
        ).step_time_s
        t = np.asarray(t, float)
        self.decode_s = float(p.decode(max(b, 1.0), ctx).step_time_s)
        t[0] = self.decode_s
        self.x, self.t = x, t

    def _speculative(self, p: Any, M: float, mix: _Mix, b: float) -> None:
        """The steps of a replica decoding speculatively (:class:`capplan.speculative.SpeculativePricer`),
        counted in output tokens: a verify step of ``b`` sequences (``n`` positions each) and ``X``
        prompt positions yields ``E`` tokens per sequence, so the model's step is ``1/E`` of it
        and carries ``X / E`` prompt positions, at most ``(M - b n) / E``; an engine that does not
        mix runs the prompt positions alone, up to ``M / E``, and the verify steps apart."""
        n, E = p.positions_per_sequence, p.tokens_per_step
        self.budget = (max(M - b * n, 1.0) if self.mixed else M) / E
        x = np.linspace(0.0, self.budget, FINE_GRID)
        X = x * E  # prompt positions of the verify step
        prompts = X / mix.mean_new
        W = p.window
        pairs_w_tok = min(mix.pairs_per_token, W) if math.isfinite(W) else mix.pairs_per_token
        prompt_work = dict(
            logits_tokens=prompts, attention_pairs=X * mix.pairs_per_token, kv_read_tokens=prompts * mix.cached_mean,
            sequences=np.maximum(prompts, 1.0), window_attention_pairs=X * pairs_w_tok,
            window_kv_read_tokens=prompts * min(mix.cached_mean, W - 1),
        )
        if b > 0 and self.mixed:
            t = p.step_with_decodes(b, mix.decode_ctx, new_tokens=X, **prompt_work) / E
        else:  # nothing decodes, or prompt steps hold no decodes: prompt steps alone, counted in the same units
            t = np.asarray(p.step(new_tokens=np.maximum(X, 1.0), **prompt_work).step_time_s, float) / E
        self.decode_s = float(p.decode(max(b, 1.0), mix.decode_ctx).step_time_s)
        t[0] = self.decode_s
        self.x, self.t = x, np.asarray(t, float)

    def __call__(self, tokens: Any) -> Any:
        """Time of a step holding ``tokens`` prefill positions (and the decoding batch) [s]."""
        return np.interp(tokens, self.x, self.t)


def _count_pmf(rate: float, burstiness: float, window_s: np.ndarray, nmax: int) -> np.ndarray:
    """P(n arrivals in a window), n = 0..nmax, for each window [rows], of a stationary renewal
    process with gamma(``burstiness``) gaps at ``rate`` (Poisson for burstiness 1)."""
    w = np.atleast_1d(np.asarray(window_s, float))[:, None]
    n = np.arange(nmax + 1)[None, :]
    if burstiness == 1.0:
        mu = rate * w
        log_fact = np.concatenate([[0.0], np.cumsum(np.log(np.arange(1, nmax + 1)))])[None, :]
        return np.exp(n * np.log(np.maximum(mu, 1e-300)) - mu - log_fact)
    from scipy.special import gammainc
    # P(N >= n) = lambda int_0^w S(x) F_{n-1}(w - x) dx, S the gap survival, F_k the k-gap CDF
    k, theta = burstiness, 1.0 / (rate * burstiness)
    nodes = (np.arange(64) + 0.5) / 64.0
    x = w * nodes[None, :]  # (windows, 64)
    surv = 1.0 - gammainc(k, x / theta)
    ge = np.ones((w.shape[0], nmax + 2))
    for m in range(1, nmax + 2):
        cdf = 1.0 if m == 1 else gammainc(k * (m - 1), (w - x) / theta)
        ge[:, m] = rate * (surv * cdf).mean(axis=1) * w[:, 0]
    ge = np.clip(ge, 0.0, 1.0)
    ge = np.minimum.accumulate(ge, axis=1)
    return ge[:, :-1] - ge[:, 1:]


def stationary(T: np.ndarray) -> np.ndarray:
    """Stationary distribution of the row-stochastic matrix ``T`` (Grassmann-Taksar-Heyman).

    GTH elimination needs no subtraction, so it is accurate even for nearly decomposable chains,
    and it runs in numpy without a threaded LAPACK call (small systems, many calls).

    Examples
    --------
    >>> stationary(np.array([[0.5, 0.5], [0.25, 0.75]])).round(4).tolist()
    [0.3333, 0.6667]
    """
    p = np.array(T, dtype=float)
    n = p.shape[0]
    with np.errstate(all="ignore"):
        for k in range(n - 1, 0, -1):
            s = p[k, :k].sum()
            if s <= 1e-280:  # state k is (all but) never left downward: nothing to fold
                p[:k, k] = 0.0
                continue
            p[:k, k] /= s
            p[:k, :k] += np.outer(p[:k, k], p[k, :k])
        pi = np.zeros(n)
        pi[0] = 1.0
        for j in range(1, n):
            pi[j] = pi[:j] @ p[:j, j]
        total = pi.sum()
    if np.all(np.isfinite(pi)) and total > 0:
        return pi / total
    pi = np.full(n, 1.0 / n)  # degenerate input: power iteration
    for _ in range(5000):
        nxt = pi @ T
        if np.abs(nxt - pi).sum() < 1e-13:
            break
        pi = nxt
    return nxt / nxt.sum()


class _Chain:
    """The prefill queue as a Markov chain over steps: granules waiting at a step's start.

    A step serves ``min(queue, m)`` granules (its token budget) and lasts ``tau(served)``; the
    prompts arriving during it join the queue for the next step.
    """

    def __init__(self, steps: _Steps, mix: _Mix, rate: float, burstiness: float) -> None:
        budget = steps.budget
        backlog_steps = max(QUEUE_STEPS, math.ceil(6.0 * mix.mean_new / budget), math.ceil(2.0 * mix.long_new / budget))
        m = min(GRANULES_PER_STEP, max(4, MAX_QUEUE_STATES // backlog_steps))
        per_prompt = max(1, round(m * mix.mean_new / budget))  # a mean prompt is whole granules
        self.gtok = mix.mean_new / per_prompt
        if budget / self.gtok > 4 * GRANULES_PER_STEP:  # prompts far below a step's budget: granules of budget / m
            self.gtok, per_prompt = budget / m, 1
        m = max(1, int(round(budget / self.gtok)))
        if not steps.chunked:  # whole prompts only: a step takes as many mean prompts as fit, at least one
            m = max(per_prompt, (m // per_prompt) * per_prompt)
        G = m * backlog_steps
        self.m, self.G = m, G
        x = mix.new / self.gtok
        lo = np.floor(x).astype(int)
        frac = x - lo
        size = np.zeros(G + 2)
        np.add.at(size, np.minimum(lo, G + 1), 1.0 - frac)
        np.add.at(size, np.minimum(lo + 1, G + 1), frac)
        size /= size.sum()
        served = np.minimum(np.arange(G + 1), m)
        self.tau = steps(np.arange(m + 1) * self.gtok)
        nfft = 1 << int(math.ceil(math.log2(4 * (G + 2))))
        phi = np.fft.rfft(size, nfft)
        mean_arrivals = rate * self.tau
        nmax = int(max(8, np.max(mean_arrivals) + 12 * math.sqrt(np.max(mean_arrivals) / min(burstiness, 1.0)) + 8))
        if burstiness == 1.0:  # Poisson counts: the generating function in closed form
            gen = np.exp(mean_arrivals[:, None] * (phi[None, :] - 1.0))
        else:  # sum_n P(n arrivals) phi^n by Horner (no threaded BLAS call for a small product)
            counts = _count_pmf(rate, burstiness, self.tau, nmax)  # (m+1, nmax+1)
            gen = np.zeros((m + 1, phi.size), dtype=complex)
            for k in range(nmax, -1, -1):
                gen = gen * phi[None, :] + counts[:, k][:, None]
        arrive = np.fft.irfft(gen, nfft)[:, : G + 1]  # (m+1, G+1): granules arriving in a step
        arrive[arrive < 1e-14] = 0.0  # FFT round-off
        T = np.zeros((G + 1, G + 1))
        for q in range(G + 1):
            s = served[q]
            base = q - s
            T[q, base:] = arrive[s, : G + 1 - base]
            T[q, G] += max(0.0, 1.0 - T[q].sum())
        pi = stationary(T)
        self.T = T
        pi = np.clip(pi, 0.0, None)
        self.pi = pi / pi.sum()
        self.served = served
        self.step_tau = self.tau[served]
        self.tail = float(self.pi[G - m + 1 :].sum())

    @property
    def mean_step_s(self) -> float:
        return float(self.pi @ self.step_tau)

    def step_variance(self) -> tuple[float, float]:
        """Variance of a step's time [s^2] and the integrated autocorrelation time of the step
        times, ``1 + 2 sum_k rho_k`` [steps]."""
        dev = self.step_tau - self.mean_step_s
        var = float(self.pi @ dev**2)
        if var <= 0:
            return 0.0, 1.0
        T = self.T
        v = dev.copy()
        total = 0.0
        for _ in range(400):
            v = T @ v
            rho = float(self.pi @ (dev * v)) / var
            total += rho
            if abs(rho) < 1e-4:
                break
        return var, max(1.0 + 2.0 * total, 1.0)

    @property
    def prefill_share(self) -> float:
        return float(self.pi[1:].sum())


class _Operating:
    """The replica's operating point at one rate: decode batch, step times and the prefill chain."""

    def __init__(self, server: Server, mix: _Mix, rate: float, burstiness: float, b: float) -> None:
        self.b = b
        self.steps = _Steps(server, mix, b)
        self.chain = _Chain(self.steps, mix, rate, burstiness)
        if server.mixed_prefill:
            self.advance_s = self.chain.mean_step_s  # every step advances the decoding batch
        else:  # only decode steps do; prompt steps stall it
            self.advance_s = self.chain.mean_step_s / max(self.chain.pi[0], 1e-9)


def _operating_point(
    server: Server, mix: _Mix, rate: float, burstiness: float, b_cap: float, guess: float | None = None
) -> tuple[_Operating | None, float]:
    """Solve ``b = rate x E[O - 1] x (step time at b)`` (Little's law) for the decode batch.

    The right side grows with ``b``; the smallest root is found by Newton steps on
    ``f(b) = F(b) - b`` from below (``f > 0`` there), with the slope ``g = F'(b)`` (the loop gain)
    from a finite difference. When steps jump past the engine's CUDA-graph limit
    (:func:`graph_limit`) and the arrivals outrun the engine just above it, a second root lies
    above the jump (a bistable engine, module notes) and the batch is taken there: the same
    Newton steps from the first batch above the limit.

    Returns the operating point (``None`` when no batch below ``b_cap`` balances the arrivals)
    and the loop gain ``g`` at it.
    """
    def F(b: float) -> tuple[float, _Operating]:
        op = _Operating(server, mix, rate, burstiness, b)
        return rate * mix.mean_decode * op.advance_s, op

    b = 0.0 if guess is None else max(0.0, guess)
    Fb, op = F(b)
    if Fb < b:  # the guess lies above the root: restart from below
        b = 0.0
        Fb, op = F(b)
    gain = 0.0
    for _ in range(60):
        f = Fb - b
        if f <= 1e-4 * max(b, 1.0):
            break
        h = max(0.02 * b, 0.05)
        Fh, _ = F(b + h)
        gain = (Fh - Fb) / h
        if gain >= 1.0:  # F outgrows b here: step as far as the plain iteration would
            b_new = Fb
        else:
            b_new = b + f / (1.0 - gain)
        if b_new > b_cap:
            Fc, _ = F(b_cap)
            if Fc > b_cap:
                return None, 1.0
            b_new = 0.5 * (b + b_cap)
        b_next_F, op_next = F(b_new)
        if b_next_F < b_new:  # overshot the root: back to the plain iteration from b
            b_new = Fb
            b_next_F, op_next = F(b_new)
            if b_next_F < b_new:
                b, Fb, op = b_new, b_next_F, op_next
                break
        b, Fb, op = b_new, b_next_F, op_next
    limit = graph_limit(server)
    if b < limit + 1.0 < b_cap:
        above = limit + 1.0
        Fa, _ = F(above)
        if Fa > above:  # past the CUDA-graph jump the arrivals outrun the engine: it settles above it
            return _operating_point(server, mix, rate, burstiness, b_cap, guess=above)
    return op, float(min(max(gain, 0.0), 0.999))


def graph_limit(server: Server) -> float:
    """The largest decode batch the engine runs in a CUDA graph (``time.cuda_graph_max_batch``;
    ``inf`` when every batch is captured or the engine runs eagerly anyway)."""
    pricer = getattr(server.pricer, "target", server.pricer)  # a speculative replica's target
    return pricer.inp.profile().time_on(pricer.hw.name).graph_limit


def _batch_limit(server: Server, mix: _Mix) -> tuple[float, str]:
    """Decoding sequences the replica can hold: ``max_num_seqs`` or KV capacity over the KV a
    decoding request holds on average (its new prompt positions and half its output; its whole
    output when admission reserves it, ``guaranteed_no_evict``)."""
    per_seq = mix.kv_reserved_per_seq if server.reserves_output else mix.kv_per_seq
    by_kv = max(server.kv_capacity_tokens * (1.0 - KV_WATERMARK) - mix.shared, 0.0) / max(per_seq, 1.0)
    if by_kv < server.max_num_seqs:
        return max(by_kv, 1.0), "kv capacity"
    return float(server.max_num_seqs), "max_num_seqs"


def _sustainable(
    server: Server, mix: _Mix, rate: float, burstiness: float, guess: float | None = None, headroom: bool = True
) -> tuple[bool, str, _Operating | None, float]:
    """Whether ``rate`` is sustainable, and if not what stops it (see :func:`serving_capacity`).

    ``headroom=False`` (a measured run's rate, not a plan's) lets a ``max_num_seqs`` limit be
    touched: the mean batch must stay below it, and the requests that find every slot taken wait
    (:func:`_slot_wait`). So may a KV limit whose admission reserves the whole output
    (``guaranteed_no_evict``: a request waits, none is preempted); another KV limit keeps the
    headroom either way: past it the engine preempts and recomputes, which the model does not price."""
    limit, limit_name = _batch_limit(server, mix)
    op, gain = _operating_point(server, mix, rate, burstiness, 4.0 * limit + 64.0, guess)
    if op is None:
        return False, limit_name, None, 1.0
    if op.chain.tail > TAIL_MASS:
        return False, "prefill compute", op, gain
    waits = limit_name == "max_num_seqs" or server.reserves_output  # the limit queues arrivals, preempts none
    sigmas = 0.0 if not headroom and waits else HEADROOM_SIGMAS
    if op.b + sigmas * math.sqrt(max(_batch_variance(mix, op.b, burstiness, gain), 0.0)) > limit:
        return False, limit_name, op, gain
    return True, "", op, gain


def _batch_variance(mix: _Mix, b: float, burstiness: float, gain: float) -> float:
    """Variance of the decode batch around its mean ``b`` [sequences^2]: an infinite-server
    queue's, ``z b`` with Whitt's peakedness ``z = 1 + (c_a^2 - 1) kappa`` (``c_a^2 = 1 /
    burstiness``), amplified by the loop gain ``g`` of step times growing with the batch,
    ``/ (1 - g)`` (the linear-noise approximation of a birth-death process)."""
    return (1.0 + (1.0 / burstiness - 1.0) * mix.kappa) * b / (1.0 - gain)


def _slot_wait(b: float, variance: float, limit: float, residency_s: float, wait_scale: float) -> tuple[float, float]:
    """The wait of an arrival for a free slot when the batch may reach its limit.

    The requests in the engine form a many-server queue with ``limit`` slots, each held for
    ``residency_s``. In the Halfin-Whitt regime (a normal batch of mean ``b`` and the given
    variance, ``beta = (limit - b) / sigma``) an arrival waits with probability
    ``1 / (1 + beta Phi(beta) / phi(beta))`` (Halfin and Whitt 1981), and a waiting arrival's wait
    is exponential with mean ``wait_scale x residency_s / (limit - b)``: the M/M/c wait
    (``wait_scale`` 1) scaled by the heavy-traffic factor ``(c_a^2 + c_s^2) / 2`` of the arrival
    and residency variability and by the loop gain's ``1 / (1 - g)``.

    Returns the probability of waiting and the mean wait of one that waits [s]; ``(0, 0)`` when
    the batch limit is out of reach."""
    if not math.isfinite(limit) or b <= 0 or variance <= 0 or limit <= b:
        return 0.0, 0.0
    beta = (limit - b) / math.sqrt(variance)
    if beta > 8.0:  # below 1e-14
        return 0.0, 0.0
    phi = math.exp(-0.5 * beta * beta) / math.sqrt(2.0 * math.pi)
    big_phi = 0.5 * (1.0 + math.erf(beta / math.sqrt(2.0)))
    p_wait = 1.0 / (1.0 + beta * big_phi / phi)
    return p_wait, wait_scale * residency_s / (limit - b)


def _check_shape(burstiness: float) -> None:
    """The queueing model's arrivals: gamma gaps of a finite shape > 0. ``inf`` (a constant
    rate, which :func:`open_loop` takes) is refused: its per-step arrival counts are degenerate
    (two adjacent values), for which the stationary queue and the batch's fixed point are not
    reliable; a shape of 1000 gives the same counts to three digits."""
    if not 0 < burstiness < math.inf:
        raise InputError(f"burstiness {burstiness}: the queueing model takes a finite gamma shape > 0 "
                         "(1 is Poisson; a near-constant rate is a large shape, e.g. 1000)")


def serving_capacity(server: Server, mix: RequestMix, burstiness: float = 1.0) -> tuple[float, str]:
    """The largest request rate one replica sustains, and what limits it.

    A rate is sustainable when (1) the decode batch that balances it exists (Little's law with
    step times that grow with the batch), (2) the prefill queue settles (the step chain's
    stationary state holds less than :data:`TAIL_MASS` of its steps at its largest backlog), and (3) the batch stays :data:`HEADROOM_SIGMAS` standard deviations below the batch
    limit (KV capacity or ``max_num_seqs``). The batch's variance is ``z b / (1 - g)``: an
    infinite-server queue's (Whitt's peakedness ``z = 1 + (c_a^2 - 1) kappa``, ``c_a^2 = 1 /
    burstiness``), amplified by the loop gain ``g`` of step times growing with the batch (the
    linear-noise approximation of a birth-death process). Past that point a replica's batch runs
    into its KV limit and preempts, and the recomputation lowers its throughput further.

    Returns
    -------
    rate : float
        Requests per second [requests/s] (to 0.2%).
    limited_by : str
        ``kv capacity``, ``max_num_seqs`` or ``prefill compute``.
    """
    _check_shape(burstiness)
    m = _Mix(mix)
    # an upper bound: the offline batch at the limit, every step a decode step
    limit, _ = _batch_limit(server, m)
    top = limit / max(m.mean_decode * float(server.pricer.decode(limit, m.decode_ctx).step_time_s), 1e-9)
    top = max(top, 1.0 / max(prefill_s(server, m.mean_new), 1e-9))
    lo, hi = 0.0, top * 1.5
    why = "prefill compute"
    guess = None
    while True:  # make sure hi is unsustainable
        ok, reason, op, _ = _sustainable(server, m, hi, burstiness)
        if not ok:
            why = reason
            break
        lo, hi, guess = hi, hi * 2, op.b if op else None
    while hi - lo > 5e-3 * hi:
        mid = 0.5 * (lo + hi)
        ok, reason, op, _ = _sustainable(server, m, mid, burstiness, guess)
        if ok:
            lo, guess = mid, (op.b if op else guess)
        else:
            hi, why = mid, reason
    return lo, why


def queueing_latency(
    server: Server, rate: float, mix: RequestMix, burstiness: float = 1.0, percentiles: tuple[float, ...] = (50.0, 90.0, 99.0),
    capacity: tuple[float, str] | bool | None = True, headroom: bool = True, slot_burstiness: float | None = None,
) -> QueueingResult:
    """Latency distribution of one replica under open-loop arrivals at ``rate`` (the queueing model).

    Parameters
    ----------
    server : Server
        The replica.
    rate : float
        Requests arriving per second [requests/s].
    mix : RequestMix
        A sample of the requests' lengths.
    burstiness : float
        Gamma shape of the gaps between arrivals (1 is Poisson; a fleet's Poisson stream dealt
        round robin to ``R`` replicas gives each a shape of ``R``). Finite (:func:`_check_shape`):
        a constant rate is a large shape (1000, the workload's ``serving.burstiness`` maximum).
    percentiles : tuple of float
        Percentiles to report [percent].
    capacity : (float, str) or bool
        :func:`serving_capacity` of the same inputs if already known; ``True`` (default) to
        compute it, ``False`` to skip it (faster: only whether ``rate`` itself is sustainable).
    headroom : bool
        ``True`` (a plan): a rate counts as sustainable only with the decode batch
        :data:`HEADROOM_SIGMAS` below the batch limit. ``False`` (a measured run's rate): a
        ``max_num_seqs`` limit, or a KV limit whose admission reserves the whole output, may be
        touched as long as the mean batch stays below it.
    slot_burstiness : float, optional
        Gamma shape of the arrivals that wait for a free slot at the batch limit (:func:`_slot_wait`'s
        ``c_a^2 = 1 / shape``; ``inf`` a constant rate); ``burstiness`` when not given. A measured
        run's percentiles keep Poisson arrivals for the step chain, which stand in for the spread
        the model lacks, and give the slot wait the run's own arrivals
        (:func:`open_loop_latency`).

    Notes
    -----
    **Batch.** Little's law, ``b = rate x E[O - 1] x t``, with ``t`` the mean step time at batch
    ``b`` (every step advances every decoding sequence by one token), solved for ``b``.

    **Prefill queue.** Prompts wait in a first-come-first-served queue of tokens. Each step
    carries up to ``max_num_batched_tokens - b`` of them beside the decodes and lasts the step
    price of that mix; the prompts that arrive during a step join the queue for the next one.
    The queue at a step's start is a Markov chain (granules of ``budget / 16`` tokens, up to
    :data:`QUEUE_STEPS` steps of backlog); its stationary state gives the mean step time (and so
    the batch) and the backlog an arrival finds.

    **TTFT.** An arrival falls in a step with probability proportional to the step's length,
    waits for its end, for the backlog and the prompts that arrived before it in that step, then
    for the step that holds its last chunk; that step also carries the prompts that arrived
    after it in the same step (they are prefilled together). With no decoding sequence and no
    backlog (probability ``exp(-b)``), the replica is idle and starts the prompt at once. The
    percentiles are read from :data:`TAGGED_REQUESTS` arrivals drawn from this stationary state
    with a fixed seed; the engine's ``request_overhead_s`` is added, and so is the wait for a free
    slot of an arrival that finds the batch at its limit (:func:`_slot_wait`: the Halfin-Whitt
    many-server queue, negligible at the plan's headroom).

    **TPOT and ITL.** ITL is the step time a token waits: the chain's step times, each step
    weighted once. A request's TPOT is the mean over its ``O - 1`` steps: the mean step time, plus
    the batch's drift over its life (variance ``2/3`` of the batch's, times the step time's
    slope in the batch) and the step-to-step spread over ``O - 1`` steps (normal).
    """
    _check(rate=rate)
    _check_shape(burstiness)
    if slot_burstiness is not None and not slot_burstiness > 0:
        raise InputError(f"slot_burstiness {slot_burstiness}: must be > 0 (1 is Poisson, inf a constant rate)")
    m = _Mix(mix)
    if capacity is True:
        cap, why = serving_capacity(server, mix, burstiness)
    elif capacity is False or capacity is None:
        cap, why = None, ""
    else:
        cap, why = capacity
    limit, _ = _batch_limit(server, m)
    names = [pct_name(p) for p in percentiles]
    ok, reason, op, gain = _sustainable(server, m, rate, burstiness, headroom=headroom)
    if cap is None and not ok:
        why = reason
    if op is None or (cap is not None and rate > cap) or (cap is None and not ok):
        none = Latency(None, {k: None for k in names})
        top = cap if cap is not None else rate
        return QueueingResult(
            rate_per_s=rate, burstiness=burstiness, capacity_per_s=cap, limited_by=why,
            utilisation=(rate / cap if cap else math.inf) if cap is not None else None,
            saturated=True, decode_batch=limit, batch_limit=limit,
            step_s=float(server.pricer.decode(limit, m.decode_ctx).step_time_s), prefill_step_share=0.0, prefill_time_share=0.0,
            ttft_s=none, tpot_s=none, itl_s=none, e2e_s=none, requests_per_s=top, output_tokens_per_s=top * m.mean_out,
            input_tokens_per_s=top * m.mean_prompt,
        )
    chain, steps = op.chain, op.steps
    rng = np.random.default_rng(20240613)
    N = TAGGED_REQUESTS
    # the step an arrival falls in: length-biased, and where in it
    weights = chain.pi * chain.step_tau
    q = rng.choice(chain.G + 1, size=N, p=weights / weights.sum())
    tau_now = chain.step_tau[q]
    u = rng.random(N)
    backlog = (q - chain.served[q]) * chain.gtok
    idle = (q == 0) & (rng.random(N) < math.exp(-op.b))
    # prompts arriving in the same step before and after it (renewal gaps from the arrival)
    k_shape, theta = burstiness, 1.0 / (rate * burstiness)
    kmax = int(max(4, rate * float(tau_now.max()) * 3 + 10))
    before = _arrived_tokens(rng, m.new, k_shape, theta, u * tau_now, kmax)
    after = _arrived_tokens(rng, m.new, k_shape, theta, (1.0 - u) * tau_now, kmax)
    pick = rng.integers(0, m.new.size, size=N)
    own = m.new[pick]
    ahead = np.where(idle, 0.0, backlog + before)
    budget = chain.m * chain.gtok  # prompt tokens a step takes (whole prompts without chunking)
    full = steps(budget)
    residual = np.where(idle, 0.0, (1.0 - u) * tau_now)
    total = ahead + own
    j = np.maximum(np.ceil(total / budget - 1e-9), 1.0)
    # the last step: the request's remainder, and what queued behind it, up to the budget
    rem = total - (j - 1.0) * budget
    behind = np.where(j > 1, after + rate * (j - 1.0) * full * m.mean_new, np.where(idle, 0.0, after))
    last = steps(np.minimum(budget, rem + behind))
    ttft = residual + (j - 1.0) * full + last + server.request_overhead_s
    # TPOT: the mean step time, the batch's drift over a request's life, and the excess of its
    # steps over a decode-only step (correlated steps, so over O - 1 steps the variance shrinks
    # by the integrated autocorrelation time; skewed, so a gamma)
    d = m.O[pick] - 1.0
    peak = _batch_variance(m, op.b, burstiness, gain)
    h = max(0.02 * op.b, 0.05)
    up = _Operating(server, m, rate, burstiness, op.b + h)
    slope = (up.advance_s - op.advance_s) / h
    step_var, iat = chain.step_variance()
    excess = max(op.advance_s - steps.decode_s, 0.0)
    n_steps = np.maximum(d, 1.0)
    var = np.maximum(step_var * iat / n_steps, 1e-30)
    if excess > 0:
        noise = rng.gamma(excess**2 / var, var / excess) - excess
    else:
        noise = np.zeros(N)
    drift = slope * math.sqrt(peak * 2.0 / 3.0) * rng.standard_normal(N)
    tpot = np.maximum(op.advance_s + drift + noise, 0.5 * steps.decode_s)
    tpot = np.where(d > 0, tpot, 0.0)
    # a request that finds every slot of the batch limit taken waits for one (drawn last, so a
    # limit out of reach leaves the other draws as they were)
    residency = ttft.mean() + (d * tpot).mean()
    cs2 = float(np.var(m.O) / m.mean_out**2)  # the residency's spread, from the output lengths'
    ca2 = 1.0 / (burstiness if slot_burstiness is None else slot_burstiness)  # 0 at a constant rate
    scale = (ca2 + cs2) / 2.0 / (1.0 - gain)
    p_wait, mean_wait = _slot_wait(op.b, peak, limit, float(residency), scale)
    if p_wait > 0:
        ttft = ttft + np.where(rng.random(N) < p_wait, rng.exponential(mean_wait, N), 0.0)
    e2e = ttft + d * tpot
    ok_d = d > 0

    def lat(values: np.ndarray) -> Latency:
        return Latency(float(values.mean()), {k: float(np.percentile(values, p)) for k, p in zip(names, percentiles)})

    itl_values, itl_w = chain.step_tau, chain.pi
    order = np.argsort(itl_values)
    cum = np.cumsum(itl_w[order]) / itl_w.sum()
    itl = Latency(op.advance_s, {k: float(itl_values[order][min(int(np.searchsorted(cum, p / 100.0)), order.size - 1)])
                                 for k, p in zip(names, percentiles)})
    return QueueingResult(
        rate_per_s=rate, burstiness=burstiness, capacity_per_s=cap, limited_by=why,
        utilisation=rate / cap if cap is not None else None, saturated=False,
        decode_batch=op.b, batch_limit=limit, step_s=op.advance_s, prefill_step_share=chain.prefill_share,
        prefill_time_share=_prefill_time_share(chain, steps, server.mixed_prefill),
        ttft_s=lat(ttft), tpot_s=lat(tpot[ok_d]) if ok_d.any() else Latency(0.0, {k: 0.0 for k in names}), itl_s=itl, e2e_s=lat(e2e),
        requests_per_s=rate, output_tokens_per_s=rate * m.mean_out, input_tokens_per_s=rate * m.mean_prompt,
    )


def open_loop_latency(server: Server, rate: float, input_tokens: float, output_tokens: float,
                      percentiles: tuple[float, ...] = (50.0, 90.0, 99.0), cached_tokens: float = 0.0,
                      slot_burstiness: float = 1.0) -> QueueingResult:
    """Latency percentiles of requests of fixed lengths arriving at ``rate`` per second (Poisson),
    from the queueing model (:func:`queueing_latency`, the capacity search skipped).

    :func:`open_loop` gives the means a published benchmark reports; this gives its percentiles.
    A measured run's batch may touch ``max_num_seqs`` (no plan headroom, ``headroom=False``): the
    requests that find every slot taken wait for one, as the run's own arrivals make them
    (``slot_burstiness``: ``inf`` for a constant rate, where fixed lengths leave no wait).
    """
    _check(rate=rate, input_tokens=input_tokens, output_tokens=output_tokens)
    return queueing_latency(server, rate, RequestMix.fixed(input_tokens, output_tokens, cached_tokens), 1.0, percentiles,
                            capacity=False, headroom=False, slot_burstiness=slot_burstiness)


def _prefill_time_share(chain: _Chain, steps: _Steps, mixed: bool) -> float:
    """Share of step time spent on prompts (see :attr:`QueueingResult.prefill_time_share`): with
    prompts mixed into decode steps, the steps' excess over a decode step; otherwise the prompt
    steps' time."""
    total = chain.mean_step_s
    if total <= 0:
        return 0.0
    if mixed:
        return float(min(max(1.0 - steps.decode_s / total, 0.0), 1.0))
    return float((chain.pi[1:] * chain.step_tau[1:]).sum() / total)


def prefill_alone_s(server: Server, prompt_tokens: Any, cached_tokens: Any = 0.0) -> np.ndarray:
    """Time to prefill each prompt on an idle replica, in chunks of the token budget [s] (vectorised).

    ``prompt - cached`` positions are forwarded in ``ceil(new / budget)`` equal chunks (one step
    without chunked prefill); the cached positions are attended to but not recomputed.

    Examples
    --------
    >>> from capplan.hardware import load_hardware
    >>> from capplan.modelspec import load_model_spec
    >>> s = server_for(load_model_spec("llama-3.1-8b"), load_hardware("h100-sxm"))
    >>> a, b = prefill_alone_s(s, [1000.0, 1000.0], [0.0, 900.0])
    >>> round(float(a) * 1e3, 1), round(float(b) * 1e3, 1)  # a 900-token cached prefix leaves a 100-token prefill
    (17.9, 6.7)
    """
    from capplan.roofline import causal_pairs

    P = np.atleast_1d(np.asarray(prompt_tokens, float))
    C = np.minimum(np.broadcast_to(np.asarray(cached_tokens, float), P.shape), P - 1.0)
    new = np.maximum(P - C, 1.0)
    M = float(server.max_num_batched_tokens)
    k = np.ceil(new / M) if server.chunked_prefill else np.ones_like(new)
    W = server.pricer.window
    t = server.pricer.step(
        new_tokens=new / k, logits_tokens=1.0 / k, attention_pairs=causal_pairs(C, new) / k,
        kv_read_tokens=C + new * (k - 1.0) / (2.0 * k), sequences=np.ones_like(new),
        window_attention_pairs=causal_pairs(C, new, W) / k, window_kv_read_tokens=np.minimum(C + new * (k - 1.0) / (2.0 * k), W - 1),
    ).step_time_s
    return np.asarray(t, float) * k


def _arrived_tokens(rng: np.random.Generator, sizes: np.ndarray, shape: float, theta: float, window: np.ndarray, kmax: int) -> np.ndarray:
    """Prompt tokens arriving within ``window`` of an arrival (gaps gamma(shape, theta)), one draw per window."""
    gaps = rng.gamma(shape, theta, size=(window.size, kmax))
    count = (np.cumsum(gaps, axis=1) <= window[:, None]).sum(axis=1)
    draws = sizes[rng.integers(0, sizes.size, size=(window.size, kmax))]
    mask = np.arange(kmax)[None, :] < count[:, None]
    return (draws * mask).sum(axis=1)
