"""Serving plans: the fewest replicas that meet a serving workload's arrival rate and latency targets at a percentile, queueing included, and what they cost.

A serving workload describes one request (a prompt and one sampled answer), the fleet's arrival
rate and process, latency targets at a percentile, a shared prefix and a GPU-hour price (the
``serving:`` block, :class:`capplan.workload.Serving`). Its plan is not a trained step: it is a
fleet of ``R`` replicas of ``tp`` GPUs, each an engine instance (:class:`capplan.benchmark.Server`)
that gets every ``R``-th request (round robin).

For each candidate ``R`` the queueing model (:func:`capplan.benchmark.queueing_latency`) gives a
replica's decode batch, utilisation and the distributions of TTFT, TPOT, ITL and latency at
``rate / R`` requests per second. A fleet's Poisson stream dealt round robin reaches each
replica with gamma(``R``) gaps (gamma(``R k``) for gamma(``k``) arrivals), which the model uses.
The plan is the smallest ``R`` whose replicas run at most at ``serving.max_utilisation`` of their
capacity and meet every target; the binding constraint is whichever fails at ``R - 1``.

Targets no fleet can meet are named with the reason (the target is below what one request takes
on an idle replica); the plan then sizes for the other limits and says ``targets_met: false``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from capplan.errors import InputError
from capplan.plan.features import feature_assumptions

if TYPE_CHECKING:
    from capplan.benchmark import QueueingResult, RequestMix, Server
    from capplan.plan.inputs import PlanInputs
    from capplan.workload import Workload

REPORTED_PERCENTILES: tuple[float, ...] = (50.0, 90.0, 99.0)
"""Percentiles every serving latency is reported at, besides the workload's own [percent]."""

MAX_REPLICAS = 100_000
"""Most replicas the plan searches [replicas]."""

DEFAULT_PERCENTILE = 95.0
"""The percentile targets apply to when the workload names none (the ``serving`` block's default)."""


def serving_pct(workload: "Workload") -> float:
    """The percentile a serving workload's targets apply to (95 without a ``serving`` block)."""
    return workload.serving.percentile if workload.serving else DEFAULT_PERCENTILE


def check_serving_workload(workload: "Workload") -> None:
    """Refuse a workload the serving plan and simulator cannot express.

    Raises
    ------
    InputError
        Not method ``serving``, no arrival rate, or a conversation of more than one turn.
    """
    if workload.method != "serving":
        raise InputError(f"workload {workload.name}: method {workload.method} is not serving")
    if workload.serving is None:
        raise InputError(f"workload {workload.name}: a serving plan needs a serving block with arrival_rate_per_s")
    if workload.conversation.max_turns != 1:
        raise InputError(
            f"workload {workload.name}: conversation: a serving workload describes one request (one turn), "
            f"got {workload.conversation.max_turns}; give a chat's history as prompt_tokens and its reuse as "
            "serving.shared_prefix_tokens"
        )


def serving_mix(workload: "Workload", n: int | None = None, seed: int | None = None) -> "RequestMix":
    """A sample of the workload's requests: prompt and output lengths, prefix-cache hits.

    Parameters
    ----------
    n : int, optional
        Requests sampled [requests]; default ``sampling.conversations`` (one for a fixed workload).
    seed : int, optional
        Default ``sampling.seed``.
    """
    import numpy as np

    from capplan.benchmark import RequestMix
    from capplan.ledger import sample_conversations, shared_prefix_hits

    check_serving_workload(workload)
    conv = sample_conversations(workload, n=n, seed=seed)
    prompt = np.maximum(conv.prompt, 1)
    output = np.maximum(conv.actions[:, 0], 1)
    s = workload.serving
    cached = shared_prefix_hits(prompt, s.shared_prefix_tokens, s.prefix_hit_rate) if s else np.zeros_like(prompt)
    return RequestMix(prompt.astype(float), output.astype(float), cached.astype(float), s.shared_prefix_tokens if s else 0)


@dataclass(frozen=True)
class ServingPlan:
    """A fleet for a serving workload (the JSON contract: :meth:`as_dict`)."""

    workload: str
    """Workload name."""
    method: str
    """``serving``."""
    model: str
    """Model name."""
    hardware: str
    """Hardware profile name."""
    tp: int
    """GPUs per replica (tensor parallel) [GPUs]."""
    kv_dtype: str
    """KV-cache dtype."""
    weight_dtype: str
    """Weight dtype."""
    engine_profile: str
    """Engine profile that priced the steps and sized the KV budget."""
    calibration: str
    """Which calibration that profile's terms come from."""
    arrival_rate_per_s: float
    """Requests per second arriving at the fleet [requests/s]."""
    arrival_process: str
    """``poisson`` or ``gamma``."""
    burstiness: float
    """Gamma shape of the fleet's gaps between requests (1: Poisson)."""
    percentile: float
    """Percentile the targets apply to [percent]."""
    sizing: str
    """How the replica count was chosen, in words."""
    replicas: int
    """Replicas of ``tp`` GPUs [replicas]."""
    gpus: int
    """GPUs of the fleet: ``replicas x tp`` [GPUs]."""
    per_replica_rate_per_s: float
    """Requests per second each replica gets [requests/s]."""
    replica_burstiness: float
    """Gamma shape of a replica's gaps between requests (round robin over ``R`` replicas: ``R x burstiness``)."""
    capacity_per_replica_per_s: float
    """Largest request rate a replica sustains [requests/s] (:func:`capplan.benchmark.serving_capacity`)."""
    capacity_limited_by: str
    """What sets that capacity: ``kv memory``, ``max_num_seqs`` or ``prefill compute``."""
    utilisation: float
    """Per-replica rate over its capacity [fraction 0-1]."""
    max_utilisation: float
    """The highest utilisation the plan allows (``serving.max_utilisation``) [fraction 0-1]."""
    binding_constraint: str
    """What sets the replica count: ``kv memory``, ``max_num_seqs``, ``prefill compute`` (the
    utilisation limit), ``ttft target``, ``tpot target``, ``none`` (one replica meets everything) or
    ``given`` (``--inference-gpus``)."""
    decode_batch: float
    """Mean sequences decoding on a replica [sequences]."""
    batch_limit: float
    """Decoding sequences a replica can hold (KV capacity, shared prefix once, or ``max_num_seqs``) [sequences]."""
    kv_capacity_tokens: int
    """KV capacity of a replica [positions]."""
    max_num_seqs: int
    """Scheduler cap on running sequences per replica [sequences]."""
    max_num_batched_tokens: int
    """Scheduler token budget per step [positions]."""
    step_s: float
    """Mean step time a decoding sequence waits per token (mean ITL) [s]."""
    prefill_time_share: float
    """Share of a replica's step time spent on prompts [fraction 0-1] (splits the cost between input and output tokens)."""
    ttft_s: dict[str, float | None]
    """Time to first token, queueing included: ``mean``, ``p50``, ``p90``, ``p99`` and the target percentile [s]."""
    tpot_s: dict[str, float | None]
    """Time per output token after the first, per request [s] (same keys)."""
    itl_s: dict[str, float | None]
    """Inter-token latency over all tokens [s] (same keys)."""
    e2e_s: dict[str, float | None]
    """Request latency, first byte in to last token out [s] (same keys)."""
    ttft_target_s: float | None
    """TTFT target at ``percentile`` [s]."""
    tpot_target_s: float | None
    """TPOT target at ``percentile`` [s]."""
    ttft_met: bool
    """TTFT at ``percentile`` is within its target (true without a target)."""
    tpot_met: bool
    """TPOT at ``percentile`` is within its target (true without a target)."""
    utilisation_met: bool
    """Utilisation is within ``max_utilisation``."""
    targets_met: bool
    """Every target and the utilisation limit are met."""
    reasons: list[str]
    """Why a target is not met, one sentence each (empty when every target is met)."""
    ttft_floor_s: float
    """TTFT at ``percentile`` on an idle replica: the lowest TTFT target any fleet can meet [s]."""
    tpot_floor_s: float
    """TPOT at ``percentile`` of a lone sequence: the lowest TPOT target any fleet can meet [s]."""
    output_tokens_per_s_per_gpu: float
    """Output tokens per second per GPU at the planned load [tokens/s/GPU]."""
    input_tokens_per_s_per_gpu: float
    """Prompt tokens per second per GPU at the planned load (cached ones included) [tokens/s/GPU]."""
    prompt_tokens_mean: float
    """Mean prompt length [tokens]."""
    output_tokens_mean: float
    """Mean output length [tokens]."""
    shared_prefix_tokens: int
    """Shared prefix of the prompts [tokens]."""
    prefix_hit_rate: float
    """Share of requests that reuse it [fraction 0-1]."""
    cached_prompt_fraction: float
    """Share of prompt positions served from the prefix cache [fraction 0-1]."""
    price_usd_per_gpu_hour: float | None
    """GPU-hour price the costs use [USD/GPU-hour] (``None``: no price known)."""
    price_source: str
    """Where the price comes from (``--gpu-hour-price``, the workload, or the hardware profile and its source)."""
    fleet_cost_usd_per_hour: float | None
    """``gpus x price`` [USD/hour]."""
    cost_usd_per_million_output_tokens: float | None
    """Fleet cost of the decode share of step time per million output tokens [USD/1M tokens]."""
    cost_usd_per_million_input_tokens: float | None
    """Fleet cost of the prefill share of step time per million prompt tokens [USD/1M tokens]."""
    assumptions: list[str] = field(default_factory=list)
    """The assumptions behind the figures, as text."""
    warnings: list[str] = field(default_factory=list)
    """Where the plan leaves what capplan models (:func:`front_end_warning`), one sentence each."""
    explain: list[str] = field(default_factory=list)
    """Every formula with its numbers (``--explain``; not in the JSON contract)."""
    ep: int = 1
    """Expert-parallel degree of an instance [GPUs] (in the JSON only with expert or data parallelism)."""
    dp: int = 1
    """Data-parallel ranks of an instance; each rank is one of the ``replicas`` (its own requests,
    sequences and KV) [count] (in the JSON only with expert or data parallelism)."""
    instances: int = 0
    """Instances of ``tp x dp`` GPUs, ``replicas / dp`` [instances] (in the JSON only with expert or
    data parallelism)."""
    weights_gib_per_gpu: float | None = None
    """Weights one GPU holds under the expert/data-parallel layout [GiB] (as ``capplan kv``; in the
    JSON only with expert or data parallelism)."""
    speculative: dict[str, Any] | None = None
    """Speculative decoding: setting, tokens per verify step, decode step with and without it at
    the plan's batch, the drafter's memory (in the JSON only when on)."""
    disaggregated: dict[str, Any] | None = None
    """``--disaggregated``: prefill and decode pools meeting the targets by the mean, aggregated
    instances meeting them by the mean, and pools at given prefill:decode ratios
    (:func:`capplan.plan.features.serving_pools`; in the JSON only when asked)."""
    kv_offload: dict[str, Any] | None = None
    """A CPU KV tier: capacity and the prefix from which a load beats recomputation (reported, not
    used by the latency model; in the JSON only with a tier)."""

    def as_dict(self) -> dict[str, Any]:
        """The JSON object: every field but ``explain``; the engine features' keys only when one is in use."""
        plain = self.ep == 1 and self.dp == 1
        return {k: v for k, v in self.__dict__.items()
                if k != "explain" and not (k in FEATURE_KEYS and (v is None or (plain and k in LAYOUT_KEYS)))}


LAYOUT_KEYS = frozenset({"ep", "dp", "instances"})
# weights_gib_per_gpu is None (so absent) unless the layout is in use
FEATURE_KEYS = LAYOUT_KEYS | {"weights_gib_per_gpu", "speculative", "disaggregated", "kv_offload"}
"""Serving-plan keys of the engine features: absent from the JSON while the feature is off."""


FRONT_END_BOUND_REQUESTS_PER_S = 30.4
"""The lowest request rate a published server completed while capplan prices its GPU work at
three times that or more, which points at its HTTP front end (request parsing, chat template,
tokenization, detokenization, streaming), which capplan does not price [requests/s]: vLLM
0.11.0's chat endpoint completed 1,000 requests of 128 prompt and 4 output tokens, all sent at
once, at 30.4 requests/s with Qwen3-32B on one H100, whose GPU work capplan prices at 101
requests/s (GPUStack performance lab; corpus row
``vllm0110-gpustack-h100x1-qwen3-32b-tp1-rand128-4-inf-out-tput``). The lab's other such bursts:
Qwen3-14B 44 (GPU work 237), DeepSeek-R1 on 8 x H200 45 (413), Qwen3-235B-A22B on 8 x H100 111
(464) and gpt-oss-20b 213 (496) under vLLM 0.11, 128-156 under SGLang 0.5 (docs/accuracy.md,
"Where the model is still wrong")."""


def front_end_warning(per_server_rate_per_s: float) -> str | None:
    """The warning for a server (an instance of ``tp x dp`` GPUs behind one front end) planned past
    :data:`FRONT_END_BOUND_REQUESTS_PER_S`, else ``None``.

    >>> front_end_warning(10.0) is None
    True
    >>> front_end_warning(120.0).startswith("120 requests/s per server")
    True
    """
    if per_server_rate_per_s <= FRONT_END_BOUND_REQUESTS_PER_S:
        return None
    return (f"{per_server_rate_per_s:,.4g} requests/s per server: capplan prices the GPU work only, and published servers "
            f"have completed short requests at {FRONT_END_BOUND_REQUESTS_PER_S:g} requests/s where their GPU work allowed three "
            "times that (vLLM 0.11's chat endpoint), which points at the HTTP front end; measure the front end at this rate or "
            "plan more replicas")


def _kv_name(limited_by: str) -> str:
    """The benchmark's limit names as the plan reports them."""
    return "kv memory" if limited_by == "kv capacity" else limited_by


def plan_serving(
    workload: "Workload", inputs: "PlanInputs", conversations: int | None = None, gpu_hour_price: float | None = None
) -> ServingPlan:
    """Plan the fleet of a serving workload (see the module notes).

    Parameters
    ----------
    workload : Workload
        A ``serving`` workload with a ``serving`` block.
    inputs : PlanInputs
        Hardware, model, ``tp``, dtypes, engine profile; ``inference_gpus`` evaluates that fleet
        instead of sizing one.
    conversations : int, optional
        Requests sampled for the length distributions [requests]; default the workload's.
    gpu_hour_price : float, optional
        Overrides the workload's and the hardware profile's GPU-hour price [USD/GPU-hour].

    Raises
    ------
    InputError
        Not a serving workload; ``inference_gpus`` not a multiple of ``tp``; a request longer
        than a replica's KV capacity.
    DoesNotFitError
        The model does not fit a replica at ``tp``.
    """
    import numpy as np

    from capplan.benchmark import queueing_latency, server_for, serving_capacity
    from capplan.engine import default_engine

    check_serving_workload(workload)
    s = workload.serving
    assert s is not None
    engine = inputs.engine or default_engine()
    hw, spec, tp = inputs.hardware, inputs.model, inputs.tp
    server = server_for(spec, hw, tp=tp, weight_dtype=inputs.weight_dtype, kv_dtype=inputs.kv_dtype, engine=engine,
                        gpu_memory_utilization=inputs.gpu_mem_util, **inputs.layout())
    memory = None
    if inputs.speculative is not None:
        server, memory = _speculative_server(server, inputs, engine)
    unit = inputs.data_parallel  # replicas (data-parallel ranks) of an instance
    mix = serving_mix(workload, conversations)
    longest = float(np.max(mix.prompt_tokens - mix.cached_tokens + mix.output_tokens))
    if longest + mix.shared_prefix_tokens > server.kv_capacity_tokens:
        raise InputError(
            f"workload {workload.name}: its longest request ({longest:,.0f} tokens) does not fit one replica's KV cache "
            f"({server.kv_capacity_tokens:,} tokens on {hw.name}, tp {tp}); raise --tp or cap conversation.max_context"
        )
    lam, burst, pct = s.arrival_rate_per_s, (s.burstiness if s.arrival_process == "gamma" else 1.0), s.percentile
    percentiles = tuple(sorted(set(REPORTED_PERCENTILES) | {pct}))
    ttft_floor, tpot_floor, floor_prompt, floor_ctx = _floors(server, mix, pct)

    capacities: dict[float, tuple[float, str]] = {}
    results: dict[int, "QueueingResult"] = {}

    def evaluate(replicas: int) -> "QueueingResult":
        if replicas not in results:
            k = burst * replicas
            if k not in capacities:
                capacities[k] = serving_capacity(server, mix, k)
            results[replicas] = queueing_latency(server, lam / replicas, mix, k, percentiles, capacities[k])
        return results[replicas]

    reachable = {
        "ttft target": s.ttft_target_s is None or s.ttft_target_s >= ttft_floor,
        "tpot target": s.tpot_target_s is None or s.tpot_target_s >= tpot_floor,
    }

    def failing(q: "QueueingResult", only_reachable: bool = True) -> list[str]:
        out = []
        if q.saturated or q.utilisation > s.max_utilisation:
            out.append("utilisation")
        t = q.ttft_s.at(pct)
        if s.ttft_target_s is not None and (t is None or t > s.ttft_target_s) and (reachable["ttft target"] or not only_reachable):
            out.append("ttft target")
        t = q.tpot_s.at(pct)
        if s.tpot_target_s is not None and (t is None or t > s.tpot_target_s) and (reachable["tpot target"] or not only_reachable):
            out.append("tpot target")
        return out

    if inputs.inference_gpus is not None:
        if inputs.inference_gpus % (tp * unit):
            what = f"--tp {tp}" if unit == 1 else f"an instance, --tp x --dp = {tp} x {unit} = {tp * unit}"
            raise InputError(f"--inference-gpus {inputs.inference_gpus}: not a multiple of {what}")
        replicas = inputs.inference_gpus // tp
        sizing = f"given: {inputs.inference_gpus} GPUs (--inference-gpus) = {replicas} replica(s) of tp {tp}"
        if unit > 1:
            sizing += f" = {replicas // unit} instance(s) of tp x dp = {tp} x {unit}"
        binding = "given"
    else:
        every = "every target" if all(reachable.values()) else "every other limit"  # a target below the floor is unmet at any size
        replicas, binding, sizing = _search(evaluate, failing, lam, s.max_utilisation, capacities, server, mix, burst, unit, every)
    q = evaluate(replicas)
    fails = failing(q, only_reachable=False)
    reasons = _reasons(q, fails, s, pct, replicas, tp, hw.name, ttft_floor, tpot_floor, floor_prompt, floor_ctx, reachable,
                       server.request_overhead_s)
    if inputs.inference_gpus is None:
        binding, sizing = _unreachable_sizing(binding, sizing, fails, reachable)
    gpus = replicas * tp
    price, source = _price(gpu_hour_price, s.price_usd_per_gpu_hour, hw)
    share = _prefill_share(q)
    out_mean, in_mean = float(np.mean(mix.output_tokens)), float(np.mean(mix.prompt_tokens))
    fleet_cost = price * gpus if price is not None else None
    cost_out = cost_in = None
    if fleet_cost is not None:
        cost_out = fleet_cost * (1.0 - share) / (lam * out_mean * 3600.0) * 1e6
        cost_in = fleet_cost * share / (lam * in_mean * 3600.0) * 1e6
    cached_fraction = float(np.sum(mix.cached_tokens) / np.sum(mix.prompt_tokens))
    front_end = front_end_warning(lam * unit / replicas)
    plan = ServingPlan(
        workload=workload.name, method=workload.method, model=spec.name, hardware=hw.name, tp=tp, kv_dtype=inputs.kv_dtype,
        weight_dtype=inputs.weight_dtype, engine_profile=engine.name, calibration=engine.calibration,
        arrival_rate_per_s=lam, arrival_process=s.arrival_process, burstiness=burst, percentile=pct, sizing=sizing,
        replicas=replicas, gpus=gpus, per_replica_rate_per_s=lam / replicas, replica_burstiness=q.burstiness,
        capacity_per_replica_per_s=q.capacity_per_s, capacity_limited_by=_kv_name(q.limited_by), utilisation=q.utilisation,
        max_utilisation=s.max_utilisation, binding_constraint=binding, decode_batch=q.decode_batch, batch_limit=q.batch_limit,
        kv_capacity_tokens=server.kv_capacity_tokens, max_num_seqs=server.max_num_seqs,
        max_num_batched_tokens=server.max_num_batched_tokens, step_s=q.step_s, prefill_time_share=share,
        ttft_s=q.ttft_s.as_dict(), tpot_s=q.tpot_s.as_dict(), itl_s=q.itl_s.as_dict(), e2e_s=q.e2e_s.as_dict(),
        ttft_target_s=s.ttft_target_s, tpot_target_s=s.tpot_target_s, ttft_met="ttft target" not in fails,
        tpot_met="tpot target" not in fails, utilisation_met="utilisation" not in fails, targets_met=not fails, reasons=reasons,
        ttft_floor_s=ttft_floor, tpot_floor_s=tpot_floor, output_tokens_per_s_per_gpu=lam * out_mean / gpus,
        input_tokens_per_s_per_gpu=lam * in_mean / gpus, prompt_tokens_mean=in_mean, output_tokens_mean=out_mean,
        shared_prefix_tokens=s.shared_prefix_tokens, prefix_hit_rate=s.prefix_hit_rate, cached_prompt_fraction=cached_fraction,
        price_usd_per_gpu_hour=price, price_source=source, fleet_cost_usd_per_hour=fleet_cost,
        cost_usd_per_million_output_tokens=cost_out, cost_usd_per_million_input_tokens=cost_in,
        assumptions=_assumptions(engine, hw.name, s) + feature_assumptions(inputs),
        warnings=[front_end] if front_end else [],
    )
    plan = _with_features(plan, workload, inputs, server, memory, mix, q)
    plan = _with_explanation(plan, q, server, mix)
    if plan.speculative or plan.kv_offload:
        from dataclasses import replace

        from capplan.plan.features import feature_explain

        plan = replace(plan, explain=plan.explain + feature_explain(plan.speculative, plan.kv_offload))
    return plan


def _speculative_server(server: "Server", inputs: "PlanInputs", engine: Any) -> "tuple[Server, Any]":
    """``server`` decoding speculatively (:class:`capplan.speculative.SpeculativePricer`), its KV
    capacity shared with the drafter (:func:`capplan.speculative.spec_memory`)."""
    from dataclasses import replace

    from capplan.kv import KVInputs, compute_kv
    from capplan.speculative import SpeculativePricer, spec_memory

    assert inputs.speculative is not None
    kv = compute_kv(inputs.model, inputs.hardware, KVInputs(
        tp=inputs.tp, weight_dtype=inputs.weight_dtype, kv_dtype=inputs.kv_dtype, engine=engine, gpu_mem_util=inputs.gpu_mem_util,
        **inputs.layout(memory_only=True)))
    memory = spec_memory(inputs.model, kv, inputs.speculative)
    pricer = SpeculativePricer.build(inputs.model, inputs.hardware, server.pricer.inp, inputs.speculative)
    return replace(server, pricer=pricer, kv_capacity_tokens=memory.kv_capacity_tokens), memory


def _with_features(plan: ServingPlan, workload: "Workload", inputs: "PlanInputs", server: "Server", memory: Any,
                   mix: "RequestMix", q: "QueueingResult") -> ServingPlan:
    """The plan with the objects of the engine features in use (:mod:`capplan.plan.features`)."""
    from dataclasses import replace

    from capplan.plan.features import layout_figures, serving_pools, speculative_figures

    update: dict[str, Any] = {}
    layout = layout_figures(inputs, plan.gpus)
    if layout:
        from capplan.kv import KVInputs, compute_kv

        kv = compute_kv(inputs.model, inputs.hardware, KVInputs(
            tp=inputs.tp, weight_dtype=inputs.weight_dtype, kv_dtype=inputs.kv_dtype, engine=inputs.engine,
            gpu_mem_util=inputs.gpu_mem_util, **inputs.layout(memory_only=True)))
        update.update(ep=layout["ep"], dp=layout["dp"], instances=layout["inference_instances"],
                      weights_gib_per_gpu=kv.weights_gib_per_gpu)
    if inputs.speculative is not None:
        import numpy as np

        # the context of a decoding sequence, weighted by the steps it decodes (as the queueing model prices it)
        d = np.maximum(np.asarray(mix.output_tokens, float), 1.0) - 1.0
        prompt = np.asarray(mix.prompt_tokens, float)
        context = float((d * (prompt + d / 2.0)).sum() / d.sum()) if d.sum() > 0 else float(prompt.mean())
        update["speculative"] = speculative_figures(server.pricer, memory, inputs, q.decode_batch, context)
    if inputs.kv_offload_gib is not None:
        from capplan.offload import offload_tier

        plain = replace(server, pricer=server.pricer.target) if hasattr(server.pricer, "target") else server  # a load is not a decode
        update["kv_offload"] = {**offload_tier(plain, inputs.kv_offload_gib).as_dict(), "used_by_latency_model": False}
    if inputs.disaggregated:
        update["disaggregated"] = serving_pools(workload, inputs, server, mix, plan.gpus)
    return replace(plan, **update) if update else plan


def _search(evaluate, failing, lam: float, max_util: float, capacities: dict, server: "Server", mix: "RequestMix",
            burst: float, unit: int = 1, every: str = "every target") -> tuple[int, str, str]:  # noqa: ANN001
    """The smallest replica count with nothing failing (``failing`` is monotone in it), the
    binding constraint and a sentence on how it was chosen.

    The search starts from the count the utilisation limit needs (a replica's capacity grows a
    little with the count, its arrivals being more regular), walks a few counts down or up, and
    bisects when the answer is further away. With ``unit`` replicas to an instance (data-parallel
    ranks) it counts whole instances.
    """
    from capplan.benchmark import serving_capacity

    if unit > 1:
        count, binding, sizing = _search(lambda n: evaluate(n * unit), failing, lam / unit, max_util, capacities, server, mix,
                                         burst * unit, every=every)
        sizing = sizing.replace("one replica meets", "one instance meets").replace("replica(s)", "instance(s)")
        return count * unit, binding, sizing + f" (instances of {unit} data-parallel replicas)"

    def capacity(k: float) -> float:
        if k not in capacities:
            capacities[k] = serving_capacity(server, mix, k)
        return capacities[k][0]

    guess = max(1, math.ceil(lam / (max_util * capacity(burst))))
    guess = max(1, math.ceil(lam / (max_util * capacity(burst * guess))))
    if failing(evaluate(guess)):
        lo, hi = guess, guess + 1
        for _ in range(3):  # a few steps up, then doubling
            if not failing(evaluate(hi)):
                break
            lo, hi = hi, hi + 1
        else:
            while failing(evaluate(hi)):
                if hi >= MAX_REPLICAS:
                    why = ", ".join(failing(evaluate(hi)))
                    return hi, why, f"no fleet of up to {MAX_REPLICAS:,} replicas meets: {why}"
                lo, hi = hi, min(2 * hi, MAX_REPLICAS)
    else:
        lo, hi = guess - 1, guess
        for _ in range(3):  # a few steps down, then bisection from 0
            if lo < 1 or failing(evaluate(lo)):
                break
            lo, hi = lo - 1, lo
        else:
            lo = 0
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if failing(evaluate(mid)):
            lo = mid
        else:
            hi = mid
    if hi == 1:
        return 1, "none", f"one replica meets {every}"
    why = failing(evaluate(hi - 1))
    first = why[0] if why else "none"
    binding = _kv_name(evaluate(hi - 1).limited_by) if first == "utilisation" else first
    reason = {
        "utilisation": f"the utilisation limit: {hi - 1} replica(s) would each run above the planned maximum of their capacity",
        "ttft target": f"the TTFT target: {hi - 1} replica(s) would miss it",
        "tpot target": f"the TPOT target: {hi - 1} replica(s) would miss it",
    }.get(first, "")
    return hi, binding, f"the fewest replicas meeting {every}; one fewer fails {reason}"


def _unreachable_sizing(binding: str, sizing: str, fails: list[str], reachable: dict[str, bool]) -> tuple[str, str]:
    """The binding constraint and sizing sentence once targets no fleet meets are counted.

    The search sizes for the reachable limits only (its sentence says "every other limit"); a
    target below what one request takes on an idle replica is then what binds (it is unmet at any
    size), and the sentence says which (the full reason, the error line's text, is in ``reasons``).
    """
    unreachable = [name for name in fails if not reachable.get(name, True)]
    if not unreachable:
        return binding, sizing
    why = {"ttft target": "the TTFT target is below one prompt's prefill on an idle replica",
           "tpot target": "the TPOT target is below one decode step of a lone sequence"}
    unmet = "; ".join(why.get(name, name) for name in unreachable)
    return unreachable[0], f"{sizing}; unmet at any size: {unmet} (see reasons)"


def _floors(server: "Server", mix: "RequestMix", pct: float) -> tuple[float, float, float, float]:
    """TTFT at ``pct`` on an idle replica, TPOT at ``pct`` of a lone sequence, and the prompt
    length and decode context those are priced at [s, s, positions, positions]."""
    import numpy as np

    from capplan.benchmark import prefill_alone_s

    new = np.asarray(mix.prompt_tokens, float) - np.asarray(mix.cached_tokens, float)
    ttft = prefill_alone_s(server, np.asarray(mix.prompt_tokens, float), np.asarray(mix.cached_tokens, float)) + server.request_overhead_s
    ttft_p = float(np.percentile(ttft, pct))
    prompt_p = float(np.percentile(new, pct))
    ctx = np.asarray(mix.prompt_tokens, float) + np.asarray(mix.output_tokens, float) / 2.0
    tpot = np.asarray(server.pricer.decode(1.0, ctx).step_time_s, float)
    has_decode = np.asarray(mix.output_tokens) > 1
    tpot_p = float(np.percentile(tpot[has_decode], pct)) if has_decode.any() else 0.0
    ctx_p = float(np.percentile(ctx, pct))
    return ttft_p, tpot_p, prompt_p, ctx_p


def _reasons(q: "QueueingResult", fails: list[str], s: Any, pct: float, replicas: int, tp: int, hw: str, ttft_floor: float,
             tpot_floor: float, floor_prompt: float, floor_ctx: float, reachable: dict[str, bool], overhead: float) -> list[str]:
    """One sentence per failing target."""
    out = []
    where = f"on {hw} (tp {tp})"
    for name in fails:
        if name == "ttft target":
            if not reachable[name]:
                out.append(
                    f"TTFT target {s.ttft_target_s * 1e3:,.0f} ms is below one {floor_prompt:,.0f}-token prefill at "
                    f"{ttft_floor * 1e3:,.0f} ms {where}, the engine's {overhead * 1e3:,.0f} ms request overhead included: "
                    f"the p{pct:g} prompt takes that long on an idle replica"
                )
            else:
                got = q.ttft_s.at(pct)
                out.append(f"TTFT p{pct:g} is {_ms(got)} with {replicas} replica(s), above the {s.ttft_target_s * 1e3:,.0f} ms target")
        elif name == "tpot target":
            if not reachable[name]:
                out.append(
                    f"TPOT target {s.tpot_target_s * 1e3:,.1f} ms is below one decode step of a lone sequence at "
                    f"{tpot_floor * 1e3:,.1f} ms {where} (p{pct:g} context {floor_ctx:,.0f} tokens)"
                )
            else:
                got = q.tpot_s.at(pct)
                out.append(f"TPOT p{pct:g} is {_ms(got)} with {replicas} replica(s), above the {s.tpot_target_s * 1e3:,.1f} ms target")
        elif name == "utilisation":
            out.append(
                f"each of {replicas} replica(s) gets {q.rate_per_s:,.3g} req/s, {q.utilisation:.0%} of its {q.capacity_per_s:,.3g} req/s "
                f"capacity ({_kv_name(q.limited_by)}), above the {s.max_utilisation:.0%} limit"
                + ("; latencies grow without bound" if q.saturated else "")
            )
    return out


def _ms(value: float | None) -> str:
    return "unbounded (saturated)" if value is None else f"{value * 1e3:,.1f} ms"


def _price(flag: float | None, workload_price: float | None, hw: Any) -> tuple[float | None, str]:
    """The GPU-hour price in force and where it comes from: the flag, the workload, the hardware profile."""
    if flag is not None:
        return flag, "--gpu-hour-price"
    if workload_price is not None:
        return workload_price, "serving.price_usd_per_gpu_hour of the workload"
    if hw.price_usd_per_gpu_hour is not None:
        return hw.price_usd_per_gpu_hour, f"hardware profile {hw.name} (its sources.price_usd_per_gpu_hour names the price list and date)"
    return None, f"no price: hardware profile {hw.name} has none; give --gpu-hour-price"


def _prefill_share(q: "QueueingResult") -> float:
    return q.prefill_time_share if q.prefill_time_share == q.prefill_time_share else 0.0


def _assumptions(engine: Any, hw: str, s: Any) -> list[str]:
    out = [
        f"steps priced by engine profile {engine.name} ({engine.calibration})",
        "requests are dealt to the replicas round robin (a Poisson stream reaches each of R replicas with gamma(R) gaps)",
        "each replica batches continuously with chunked prefill (whole prompts when the engine profile has no chunking); "
        "an admission leaves 1% of the KV cache free"
        + ("; a request reserves the KV of its prompt and whole output when admitted (guaranteed_no_evict)"
           if engine.time_on(hw).capacity_scheduler_policy == "guaranteed_no_evict" else ""),
        "latency percentiles come from the queueing model of capplan.benchmark (validated against capplan simulate)",
        "cost per token splits the fleet's cost by the share of step time spent on prompts and on decoding; idle capacity is paid for",
    ]
    if s.shared_prefix_tokens:
        out.append(
            f"a {s.shared_prefix_tokens:,}-token shared prefix is found in the replica's prefix cache by {s.prefix_hit_rate:.0%} of requests "
            "and held once per replica"
        )
    return out


def _with_explanation(plan: ServingPlan, q: "QueueingResult", server: "Server", mix: "RequestMix") -> ServingPlan:
    """The plan with its ``explain`` lines: every figure's formula with its numbers."""
    from dataclasses import replace

    import numpy as np

    pct = plan.percentile
    key = f"p{pct:g}"
    d = float(np.mean(np.asarray(mix.output_tokens) - 1.0))
    lines = [
        f"per replica: {plan.arrival_rate_per_s:g} req/s / {plan.replicas} replica(s) = {plan.per_replica_rate_per_s:,.4g} req/s, "
        f"gaps gamma({plan.replica_burstiness:g}) (round robin of {'Poisson' if plan.burstiness == 1 else f'gamma({plan.burstiness:g})'} arrivals)",
        f"batch limit = min(max_num_seqs {server.max_num_seqs:,}, (KV {server.kv_capacity_tokens:,} x 0.99 - shared prefix "
        f"{plan.shared_prefix_tokens if plan.cached_prompt_fraction > 0 else 0:,}) / KV per decoding request"
        f"{' (prompt and whole output, reserved at admission: guaranteed_no_evict)' if server.reserves_output else ''}) "
        f"= {plan.batch_limit:,.1f} sequences",
        f"capacity = largest rate with the batch + 3 sd below the limit and the prefill queue settling = {plan.capacity_per_replica_per_s:,.4g} req/s "
        f"({plan.capacity_limited_by}); utilisation = {plan.per_replica_rate_per_s:,.4g} / {plan.capacity_per_replica_per_s:,.4g} = {plan.utilisation:.1%} "
        f"(limit {plan.max_utilisation:.0%})",
    ]
    if not q.saturated:
        lines += [
            f"decode batch b = rate x E[output - 1] x mean step = {plan.per_replica_rate_per_s:,.4g} x {d:,.1f} x {plan.step_s * 1e3:,.2f} ms "
            f"= {plan.decode_batch:,.1f} sequences",
            f"TTFT {key} = wait for the step in progress + prompt backlog + the step with the last chunk + request overhead "
            f"{server.request_overhead_s * 1e3:,.1f} ms = {_ms(plan.ttft_s.get(key))} (idle-replica floor {plan.ttft_floor_s * 1e3:,.1f} ms)",
            f"TPOT {key} = mean step {plan.step_s * 1e3:,.2f} ms + the spread of a request's steps and of the batch over its life = "
            f"{_ms(plan.tpot_s.get(key))} (lone-sequence floor {plan.tpot_floor_s * 1e3:,.2f} ms)",
            f"latency {key} = TTFT + (output - 1) x TPOT = {plan.e2e_s.get(key):,.2f} s",
        ]
    lines.append(f"replicas = {plan.replicas} ({plan.sizing}); GPUs = {plan.replicas} x tp {plan.tp} = {plan.gpus}")
    if plan.price_usd_per_gpu_hour is not None and plan.cost_usd_per_million_output_tokens is not None:
        lines.append(
            f"cost per 1M output tokens = ${plan.price_usd_per_gpu_hour:g} x {plan.gpus} GPUs x (1 - prefill share "
            f"{plan.prefill_time_share:.3f}) / ({plan.arrival_rate_per_s:g} req/s x {plan.output_tokens_mean:,.1f} tokens x 3,600 s) x 1e6 "
            f"= ${plan.cost_usd_per_million_output_tokens:,.4f}; per 1M input tokens, the prefill share over "
            f"{plan.prompt_tokens_mean:,.1f} prompt tokens a request = ${plan.cost_usd_per_million_input_tokens:,.4f}"
        )
    return replace(plan, explain=lines)
