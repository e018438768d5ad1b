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

The closed-loop model, in steady state with ``c`` requests in the engine, prompts of ``P`` and
outputs of ``O`` tokens, and a scheduler token budget ``M``: each request spends ``k`` steps
prefilling (``ceil(P / (M - b))`` chunks beside ``b`` decoding sequences) and ``O - 1`` decoding.
Over one request's lifetime the engine runs ``W = max(k + O - 1, c k)`` steps (more than one
request's own steps when the prefills of all ``c`` clients do not fit between its decodes);
``c k / W`` of them carry a prefill chunk. With ``t_d`` a decode step at batch
``b = c (O - 1) / W`` and ``t_m`` a mixed step::

    step = (c k / W) t_m + (1 - c k / W) t_d          ITL = step
    TTFT = (W - O + 1) t_m + wait + request overhead  E2E = TTFT + (O - 1) ITL
    output tokens/s = c O / E2E

where ``wait`` is the mean wait of an M/D/1 queue for the prefills of the other clients, at the
share of time the engine spends on them. When the clients' prefills do not fit one per step
between a request's decodes, steps carry several prompts' tokens up to the budget (saturated).

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
    """Prompts are split into chunks that share steps with decodes (vLLM V1); otherwise a
    prompt is prefilled whole in one step."""
    request_overhead_s: float = 0.0
    """Fixed time per request outside engine steps, added to TTFT [s]."""


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


def prefill_s(server: Server, prompt_tokens: float, batch: float = 1.0) -> float:
    """Time to prefill ``batch`` prompts of ``prompt_tokens`` with nothing else running [s]."""
    total = prompt_tokens * batch
    chunk = server.max_num_batched_tokens if server.chunked_prefill else total
    from capplan.roofline import causal_pairs

    window = server.pricer.window
    pairs = float(causal_pairs(0, prompt_tokens)) * batch
    pairs_w = float(causal_pairs(0, prompt_tokens, window)) * batch
    return server.pricer.chunked(total, pairs, pairs_w, 0.0, batch, batch, max(int(chunk), 1))[0]


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


def _closed_loop_arrays(server: Server, concurrency: Any, input_tokens: float, output_tokens: float) -> dict[str, np.ndarray]:
    """The closed-loop model (module notes), vectorised over ``concurrency``."""
    from capplan.roofline import causal_pairs

    c = np.atleast_1d(np.asarray(concurrency, dtype=float))
    P, O = float(input_tokens), float(output_tokens)
    M = float(server.max_num_batched_tokens)
    decode_steps = O - 1.0
    own_steps = np.zeros_like(c)
    b = np.maximum(c - 1.0, 0.0)
    for _ in range(30):
        budget = np.maximum(M - b, 1.0) if server.chunked_prefill else np.full_like(c, max(P, M))
        k = np.ceil(P / np.minimum(budget, P))  # steps of one prompt's own prefill
        own_steps = k + decode_steps
        packed = c * P / budget  # steps if every step's budget were filled with prompts
        window = np.maximum(own_steps, np.where(c * k <= own_steps, 0.0, packed))
        b_new = c * decode_steps / window
        done = np.all(np.abs(b_new - b) < 1e-6)
        b = b_new
        if done:
            break
    budget = np.maximum(M - b, 1.0) if server.chunked_prefill else np.full_like(c, max(P, M))
    k = np.ceil(P / np.minimum(budget, P))
    one_at_a_time = c * k <= own_steps
    # prompt tokens in a step that carries prefill: one prompt's chunk, or (saturated) the whole
    # budget shared by several prompts; its attention pairs scale with the prompts it holds
    tokens = np.where(one_at_a_time, P / k, c * P / window)
    n_mixed = np.where(one_at_a_time, c * k, window)
    pairs = float(causal_pairs(0, P)) / P * tokens
    pairs_w = float(causal_pairs(0, P, server.pricer.window)) / P * tokens
    ctx = P + decode_steps / 2.0
    if decode_steps > 0:
        pts = P + (np.arange(DECODE_POINTS) + 0.5) * decode_steps / DECODE_POINTS
        t_d = np.mean(np.asarray(server.pricer.decode(np.maximum(b, 1.0)[:, None], pts[None, :]).step_time_s), axis=1)
    else:
        t_d = np.zeros_like(c)
    W = server.pricer.window
    t_m = np.asarray(server.pricer.step(
        new_tokens=b + tokens, logits_tokens=b + tokens / P, attention_pairs=b * (ctx + 1) + pairs,
        kv_read_tokens=b * ctx, sequences=b + np.maximum(tokens / P, 1.0),
        window_attention_pairs=b * min(ctx + 1, W) + pairs_w, window_kv_read_tokens=b * min(ctx, W - 1),
    ).step_time_s, dtype=float)
    mixed_share = np.minimum(1.0, n_mixed / window)
    step = np.where(b > 0, mixed_share * t_m + (1.0 - mixed_share) * t_d, t_m)
    # a new request finds the other clients' prefills under way: the engine spends a share rho of
    # its time on them, and the wait is an M/D/1 queue's, rho / (2 (1 - rho)) own prefills
    rho = np.clip((c - 1.0) / np.maximum(c, 1.0) * mixed_share * t_m / np.maximum(step, 1e-12), 0.0, 0.95)
    queue = np.where(one_at_a_time, rho / (2.0 * (1.0 - rho)) * k * t_m, 0.0)
    ttft = (window - decode_steps) * t_m + queue + server.request_overhead_s
    e2e = ttft + decode_steps * step
    return {"c": c, "b": b, "ttft": ttft, "itl": step, "e2e": e2e}


def closed_loop(server: Server, concurrency: float, input_tokens: int, output_tokens: int, limited_by: str = "clients") -> BenchmarkResult:
    """``concurrency`` clients, each sending its next request when the last one ends (module notes).

    More clients than the engine can run at once (:func:`max_concurrency`) queue: the engine runs
    at its limit and the rest wait, ``wait = clients / throughput - E2E in the engine`` (Little's
    law), which is added to TTFT and latency.
    """
    _check(concurrency=concurrency, input_tokens=input_tokens, output_tokens=output_tokens)
    top, why = max_concurrency(server, input_tokens, output_tokens)
    running = min(float(concurrency), top)
    a = {k: float(v[0]) for k, v in _closed_loop_arrays(server, running, input_tokens, output_tokens).items()}
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
    and, on average, half its output.
    """
    by_kv = server.kv_capacity_tokens / (input_tokens + output_tokens / 2.0)
    if by_kv < server.max_num_seqs:
        return max(by_kv, 1.0), "kv capacity"
    return float(server.max_num_seqs), "max_num_seqs"


def offline(server: Server, input_tokens: int, output_tokens: int) -> BenchmarkResult:
    """Every request queued at once: the engine runs at its largest batch."""
    c, why = max_concurrency(server, input_tokens, output_tokens)
    r = closed_loop(server, c, input_tokens, output_tokens, limited_by=why)
    return BenchmarkResult(**{**r.as_dict(), "scenario": "offline"})


def open_loop(server: Server, rate: float, input_tokens: int, output_tokens: int) -> BenchmarkResult:
    """Requests arriving at ``rate`` per second (Poisson).

    The requests in the engine ``c`` solve ``c = rate x E2E(c)`` (Little's law, E2E from the
    closed-loop model at ``c``). TTFT adds the mean wait of an M/D/1 queue whose server is the
    engine at utilisation ``rho = rate / max rate``: ``rho / (2 (1 - rho))`` prefills. Above the
    instance's largest rate the result is the offline one, marked ``saturated``.
    """
    _check(rate=rate, input_tokens=input_tokens, output_tokens=output_tokens)
    top = offline(server, input_tokens, output_tokens)
    if rate >= top.requests_per_s:
        return BenchmarkResult(**{**top.as_dict(), "scenario": "open_loop", "limited_by": "saturated"})
    # the concurrency where arrivals balance completions, c = rate x E2E(c): on a log grid, then
    # refined once on a finer grid between the bracketing points (vectorised)
    lo, hi = 1e-4, top.concurrency
    for _ in range(3):
        grid = np.geomspace(lo, hi, 48)
        gap = rate * _closed_loop_arrays(server, grid, input_tokens, output_tokens)["e2e"] - grid
        above = np.nonzero(gap <= 0)[0]
        i = int(above[0]) if above.size else grid.size - 1
        lo, hi = (grid[i - 1], grid[i]) if i > 0 else (grid[0] / 2, grid[0])
    r = closed_loop(server, hi, input_tokens, output_tokens, limited_by="arrival rate")
    rho = rate / top.requests_per_s
    wait = rho / (2.0 * (1.0 - rho)) * prefill_s(server, input_tokens)
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
    return Server(pricer, kv.max_num_seqs, kv.max_batched_tokens, kv.kv_capacity_tokens,
                  t.chunked_prefill if t else True, t.request_overhead_s if t else 0.0)


def _check(**values: float) -> None:
    for name, v in values.items():
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
            raise InputError(f"{name.replace('_', '-')} {v}: must be a finite number > 0")
