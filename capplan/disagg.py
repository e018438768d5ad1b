"""Disaggregated prefill and decode: the KV transfer between pools and the pool sizes that meet TTFT and TPOT.

A disaggregated deployment runs prompts on *prefill* instances and generation on *decode*
instances; each finished prompt's KV cache is sent from a prefill GPU to the decode GPUs that
continue it (SGLang PD disaggregation with Mooncake/NIXL, vLLM's KV connectors, Dynamo). Each
pool is sized on its own:

* **prefill** -- an instance prefills at most ``mu`` prompts per second (prompts packed up to the
  token budget, :func:`prefill_capacity`). Arrivals at ``lambda`` per second spread over ``n_p``
  instances load each at ``rho = lambda / (n_p mu)``; a prompt waits as in an M/D/1 queue,
  ``rho / (2 (1 - rho)) / mu``, then takes its own prefill time ``s`` and the transfer ``x``::

      TTFT = s + x + rho / (2 (1 - rho)) / mu  <=  target   =>   rho <= 2 y / (1 + 2 y),  y = (target - s - x) mu

* **decode** -- an instance decodes a batch ``B`` whose step time meets the TPOT target at the
  mean context ``P + O / 2`` (and fits the KV cache and ``max_num_seqs``, :func:`decode_capacity`);
  it finishes ``B / (O t_step)`` requests per second.

``n_p = lambda / (rho mu)`` and ``n_d = lambda O t_step / B`` give the prefill:decode GPU ratio
(:func:`size_pools`). An RL rollout with long prompts keeps its decoders fed when the prefill
pool completes prompts as fast as the decode pool finishes them (:func:`rollout_pool_ratio`).
The KV transfer (:func:`kv_transfer_s`) moves the prompt's KV, per decode GPU, over the
network (``kv_transfer_efficiency`` of the engine profile) or NVLink when both pools share a
node. Targets here are met by the mean; percentile targets need ``capplan simulate``.

All times are seconds; an *instance* is one engine (``tp`` GPUs, or one data-parallel rank).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Literal

from capplan.errors import InputError

if TYPE_CHECKING:
    from capplan.benchmark import Server
    from capplan.hardware import HardwareProfile
    from capplan.modelspec import ModelSpec

Link = Literal["network", "nvlink"]


def kv_transfer_s(
    spec: "ModelSpec", hw: "HardwareProfile", prompt_tokens: float, kv_dtype: str = "bf16", decode_tp: int = 1,
    link: Link = "network", engine: Any = None, kv_scale: str = "tensor",
) -> float:
    """Time to send one prompt's KV cache from the prefill pool to a decode instance [s].

    Parameters
    ----------
    prompt_tokens : float
        Prompt positions whose KV is sent [positions].
    decode_tp : int
        Tensor-parallel degree of the decode instance: each of its GPUs receives its own share
        (``kv_bytes_per_token_per_gpu``, the whole latent for MLA) over its own link, in parallel.
    link : {"network", "nvlink"}
        ``network``: the per-GPU NIC (``inter_node_bandwidth_gbps``), pools on different nodes;
        ``nvlink``: both pools in one NVLink domain (``intra_node_bandwidth_gbps``).

    Notes
    -----
    ``x = P b_gpu / (link x kv_transfer_efficiency) + allreduce_latency`` with the engine
    profile's terms (the fixed latency taken equal to one collective's).

    Examples
    --------
    Llama-3.1-8B, 4,096-token prompt, bf16 KV (128 KiB a token), one 400 Gb/s NIC at 47.5 %:
    536.9 MB / 23.75 GB/s = 22.6 ms.

    >>> from capplan.hardware import load_hardware
    >>> from capplan.modelspec import load_model_spec
    >>> round(kv_transfer_s(load_model_spec("llama-3.1-8b"), load_hardware("h100-sxm"), 4096) * 1e3, 1)
    22.6
    """
    from capplan.engine import default_engine
    from capplan.kv import kv_bytes_per_token

    if prompt_tokens < 0:
        raise InputError(f"prompt tokens {prompt_tokens}: must be >= 0")
    if link not in ("network", "nvlink"):
        raise InputError(f"--kv-transfer-link {link}: allowed: network, nvlink")
    eng = engine or default_engine()
    t = eng.time_on(hw.name)
    _, per_gpu = kv_bytes_per_token(spec, kv_dtype, decode_tp, 1, kv_scale)
    bw = hw.inter_node_bandwidth_bytes_per_s if link == "network" else hw.intra_node_bandwidth_bytes_per_s
    return prompt_tokens * per_gpu / (bw * t.kv_transfer_efficiency) + t.allreduce_latency_us * 1e-6


@dataclass(frozen=True)
class PrefillCapacity:
    """What one prefill instance can do with prompts of one length."""

    prompt_s: float
    """One prompt prefilled alone [s]."""
    prompts_per_s: float
    """Prompts per second at saturation, packed up to the token budget [prompts/s]."""
    input_tokens_per_s: float
    """Prompt positions per second at saturation [tokens/s]."""


def prefill_capacity(server: "Server", prompt_tokens: float) -> PrefillCapacity:
    """A prefill instance's service time and saturated throughput for ``prompt_tokens`` prompts.

    At saturation each step carries ``max(1, budget / P)`` prompts (chunked when a prompt exceeds
    the budget); the request overhead is paid per prompt but overlaps other prompts' steps, so it
    is in ``prompt_s`` and not in the saturated rate.
    """
    from capplan.benchmark import prefill_s

    if prompt_tokens < 1:
        raise InputError(f"prompt tokens {prompt_tokens}: must be >= 1")
    P = float(prompt_tokens)
    one = prefill_s(server, P, 1.0) + server.request_overhead_s
    batch = max(1.0, math.floor(server.max_num_batched_tokens / P))
    packed = prefill_s(server, P, batch) / batch
    return PrefillCapacity(prompt_s=one, prompts_per_s=1.0 / packed, input_tokens_per_s=P / packed)


@dataclass(frozen=True)
class DecodeCapacity:
    """What one decode instance can do under a TPOT target."""

    batch: float
    """Sequences decoding together [sequences]."""
    step_s: float
    """Decode step at that batch and the mean context = TPOT [s]."""
    output_tokens_per_s: float
    """``batch / step_s`` [tokens/s]."""
    requests_per_s: float
    """``batch / (output_tokens x step_s)`` [requests/s]."""
    limited_by: str
    """``tpot target``, ``kv capacity`` or ``max_num_seqs``."""


def decode_capacity(server: "Server", prompt_tokens: float, output_tokens: float, tpot_target_s: float | None = None) -> DecodeCapacity:
    """The largest decode batch of an instance that meets ``tpot_target_s`` (``None``: no target)
    at the mean context ``P + O / 2``, within its KV capacity and ``max_num_seqs``.

    The step time grows with the batch, so the largest batch meeting the target is found by
    bisection over whole sequences.
    """
    if output_tokens < 1 or prompt_tokens < 0:
        raise InputError("decode pool: output tokens must be >= 1 and prompt tokens >= 0")
    ctx = float(prompt_tokens) + float(output_tokens) / 2.0
    by_kv = server.kv_capacity_tokens / (prompt_tokens + output_tokens / 2.0)
    top, why = (by_kv, "kv capacity") if by_kv < server.max_num_seqs else (float(server.max_num_seqs), "max_num_seqs")
    top = max(1.0, math.floor(top))

    def step(b: float) -> float:
        return float(server.pricer.decode(b, ctx).step_time_s)

    b = top
    if tpot_target_s is not None and step(top) > tpot_target_s:
        why = "tpot target"
        if step(1.0) > tpot_target_s:
            raise InputError(
                f"TPOT target {tpot_target_s * 1e3:g} ms: one sequence alone decodes in {step(1.0) * 1e3:.2f} ms "
                "on this instance; raise the target or use more GPUs per instance"
            )
        lo, hi = 1.0, top
        while hi - lo > 1:
            mid = math.floor((lo + hi) / 2)
            lo, hi = (mid, hi) if step(mid) <= tpot_target_s else (lo, mid)
        b = lo
    t = step(b)
    return DecodeCapacity(batch=b, step_s=t, output_tokens_per_s=b / t, requests_per_s=b / (output_tokens * t), limited_by=why)


@dataclass(frozen=True)
class PoolPlan:
    """Prefill and decode pools for one arrival rate and latency targets (a JSON contract)."""

    arrival_rate_per_s: float
    prefill_instances: float
    """Prefill instances needed (fractional) [count]."""
    decode_instances: float
    """Decode instances needed (fractional) [count]."""
    prefill_gpus: int
    """``ceil(prefill_instances) x prefill GPUs per instance`` [GPUs]."""
    decode_gpus: int
    """``ceil(decode_instances) x decode GPUs per instance`` [GPUs]."""
    prefill_to_decode_gpu_ratio: float
    """``prefill_gpus / decode_gpus``."""
    prefill_utilisation: float
    """Load ``rho`` of each prefill instance at the TTFT target [0-1]."""
    ttft_s: float
    """Mean TTFT: wait + prefill + KV transfer [s]."""
    tpot_s: float
    """Decode step time at the chosen batch [s]."""
    kv_transfer_s: float
    """One prompt's KV transfer [s]."""
    decode_batch: float
    """Sequences per decode instance [sequences]."""
    decode_limited_by: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def size_pools(
    prefill: "Server", decode: "Server", arrival_rate_per_s: float, prompt_tokens: float, output_tokens: float,
    ttft_target_s: float | None, tpot_target_s: float | None, transfer_s: float = 0.0,
    prefill_gpus_per_instance: int = 1, decode_gpus_per_instance: int = 1,
) -> PoolPlan:
    """Prefill and decode instances that serve ``arrival_rate_per_s`` within the targets (module notes).

    Raises
    ------
    InputError
        A target no pool size can meet (a prompt alone, plus its transfer, exceeds the TTFT target;
        one sequence alone exceeds the TPOT target).
    """
    if not arrival_rate_per_s > 0:
        raise InputError(f"arrival rate {arrival_rate_per_s}: must be > 0")
    cap = prefill_capacity(prefill, prompt_tokens)
    if ttft_target_s is None:
        rho = 0.9  # no target: run the prefill pool at 90 % load (stated in the output)
    else:
        y = (ttft_target_s - cap.prompt_s - transfer_s) * cap.prompts_per_s
        if y <= 0:
            raise InputError(
                f"TTFT target {ttft_target_s * 1e3:g} ms: one {prompt_tokens:g}-token prompt takes "
                f"{cap.prompt_s * 1e3:.1f} ms to prefill plus {transfer_s * 1e3:.1f} ms of KV transfer; raise the target "
                "or give the prefill pool more GPUs per instance"
            )
        rho = min(2 * y / (1 + 2 * y), 0.99)
    n_p = arrival_rate_per_s / (rho * cap.prompts_per_s)
    wait = rho / (2 * (1 - rho)) / cap.prompts_per_s
    d = decode_capacity(decode, prompt_tokens, output_tokens, tpot_target_s)
    n_d = arrival_rate_per_s / d.requests_per_s
    pg = math.ceil(n_p - 1e-9) * prefill_gpus_per_instance
    dg = math.ceil(n_d - 1e-9) * decode_gpus_per_instance
    return PoolPlan(
        arrival_rate_per_s=arrival_rate_per_s, prefill_instances=n_p, decode_instances=n_d, prefill_gpus=pg,
        decode_gpus=dg, prefill_to_decode_gpu_ratio=pg / dg, prefill_utilisation=rho,
        ttft_s=cap.prompt_s + transfer_s + wait, tpot_s=d.step_s, kv_transfer_s=transfer_s, decode_batch=d.batch,
        decode_limited_by=d.limited_by,
    )


def rollout_pool_ratio(prefill: "Server", decode: "Server", prompt_tokens: float, output_tokens: float) -> float:
    """Prefill instances per decode instance that keep a decode pool running at its full batch
    (RL rollouts: no latency target, decoders must not starve) [ratio].

    ``decode requests/s at full batch / prefill prompts/s at saturation``.

    >>> from capplan.benchmark import server_for
    >>> from capplan.hardware import load_hardware
    >>> from capplan.modelspec import load_model_spec
    >>> s = server_for(load_model_spec("llama-3.1-8b"), load_hardware("h100-sxm"))
    >>> round(rollout_pool_ratio(s, s, 8192, 512), 2)  # agentic: long prompts, short turns
    0.57
    """
    return decode_capacity(decode, prompt_tokens, output_tokens).requests_per_s / prefill_capacity(prefill, prompt_tokens).prompts_per_s


@dataclass(frozen=True)
class Comparison:
    """Disaggregated pools against aggregated instances serving the same traffic (a JSON contract)."""

    disaggregated: PoolPlan
    aggregated_instances: int
    """Aggregated instances (prefill and decode on the same GPUs) that meet both targets by the
    mean [count]; 0 when none up to the search limit does."""
    aggregated_gpus: int
    aggregated_ttft_s: float
    aggregated_tpot_s: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def compare_aggregated(
    aggregated: "Server", plan: PoolPlan, prompt_tokens: int, output_tokens: int,
    ttft_target_s: float | None, tpot_target_s: float | None, gpus_per_instance: int = 1, max_instances: int = 4096,
) -> Comparison:
    """The smallest number of aggregated instances whose open-loop means meet the targets at the
    plan's arrival rate, beside the disaggregated plan (:func:`capplan.benchmark.open_loop`)."""
    from capplan.benchmark import open_loop

    lam = plan.arrival_rate_per_s

    def ok(n: int) -> tuple[bool, Any]:
        r = open_loop(aggregated, lam / n, prompt_tokens, output_tokens)
        good = r.limited_by != "saturated" and (ttft_target_s is None or r.ttft_s <= ttft_target_s) and (
            tpot_target_s is None or r.itl_s <= tpot_target_s)
        return good, r

    lo, hi = 0, 1
    while hi <= max_instances and not ok(hi)[0]:
        lo, hi = hi, hi * 2
    if hi > max_instances:
        return Comparison(plan, 0, 0, math.inf, math.inf)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid)[0] else (mid, hi)
    r = ok(hi)[1]
    return Comparison(plan, hi, hi * gpus_per_instance, r.ttft_s, r.itl_s)


def decode_at_rate(server: "Server", rate_per_s: float, prompt_tokens: float, output_tokens: float) -> DecodeCapacity:
    """A decode instance receiving ``rate_per_s`` requests per second: the batch that balances
    them (Little's law, ``B = rate x O x t(B)`` at the mean context ``P + O / 2``) and its step.

    Raises
    ------
    InputError
        The rate is above what the instance sustains at its largest batch (KV or ``max_num_seqs``).
    """
    top = decode_capacity(server, prompt_tokens, output_tokens)
    if rate_per_s > top.requests_per_s * (1 + 1e-9):
        raise InputError(
            f"decode pool: {rate_per_s:.4g} requests/s per instance is above the {top.requests_per_s:.4g} it sustains ({top.limited_by})"
        )
    ctx = float(prompt_tokens) + float(output_tokens) / 2.0

    def step(b: float) -> float:
        return float(server.pricer.decode(max(b, 1.0), ctx).step_time_s)

    lo, hi = 0.0, top.batch
    for _ in range(60):  # the smallest root of B - rate O t(B): B - rate O t(B) rises through it
        mid = (lo + hi) / 2
        if mid - rate_per_s * output_tokens * step(mid) < 0:
            lo = mid
        else:
            hi = mid
    b = hi
    t = step(b)
    return DecodeCapacity(batch=b, step_s=t, output_tokens_per_s=max(b, 1.0) / t, requests_per_s=rate_per_s, limited_by="arrival rate")


def pools_at_ratio(
    prefill: "Server", decode: "Server", arrival_rate_per_s: float, prompt_tokens: float, output_tokens: float,
    ratio: float, ttft_target_s: float | None, tpot_target_s: float | None, transfer_s: float = 0.0,
    prefill_gpus_per_instance: int = 1, decode_gpus_per_instance: int = 1,
) -> PoolPlan:
    """The smallest pools whose prefill-to-decode GPU ratio is at least ``ratio`` (whole instances)
    and which meet the targets by the mean, with the TTFT and TPOT they then reach.

    Notes
    -----
    :func:`size_pools` gives the instances each target needs, ``n_p`` and ``n_d``. With ``g_p``,
    ``g_d`` GPUs per instance, the decode pool takes ``i_d = max(ceil(n_d), ceil(ceil(n_p) g_p /
    (ratio g_d)))`` instances and the prefill pool ``i_p = ceil(ratio i_d g_d / g_p)``; the prefill
    pool then runs at ``rho = lambda / (i_p mu)`` (TTFT as in :func:`size_pools`) and a decode
    instance at the batch that balances ``lambda / i_d`` (:func:`decode_at_rate`).

    Raises
    ------
    InputError
        ``ratio`` not > 0; a target no pool size meets (:func:`size_pools`).
    """
    if not ratio > 0:
        raise InputError(f"--prefill-decode-ratio {ratio}: must be > 0")
    need = size_pools(prefill, decode, arrival_rate_per_s, prompt_tokens, output_tokens, ttft_target_s, tpot_target_s, transfer_s,
                      prefill_gpus_per_instance, decode_gpus_per_instance)
    n_p, n_d = math.ceil(need.prefill_instances - 1e-9), math.ceil(need.decode_instances - 1e-9)
    gp, gd = prefill_gpus_per_instance, decode_gpus_per_instance
    i_d = max(n_d, math.ceil(n_p * gp / (ratio * gd) - 1e-9))
    i_p = max(n_p, math.ceil(ratio * i_d * gd / gp - 1e-9))
    cap = prefill_capacity(prefill, prompt_tokens)
    rho = arrival_rate_per_s / (i_p * cap.prompts_per_s)
    d = decode_at_rate(decode, arrival_rate_per_s / i_d, prompt_tokens, output_tokens)
    return PoolPlan(
        arrival_rate_per_s=arrival_rate_per_s, prefill_instances=float(i_p), decode_instances=float(i_d),
        prefill_gpus=i_p * gp, decode_gpus=i_d * gd, prefill_to_decode_gpu_ratio=i_p * gp / (i_d * gd), prefill_utilisation=rho,
        ttft_s=cap.prompt_s + transfer_s + rho / (2 * (1 - rho)) / cap.prompts_per_s, tpot_s=d.step_s, kv_transfer_s=transfer_s,
        decode_batch=d.batch, decode_limited_by="prefill:decode ratio" if i_d > n_d else need.decode_limited_by,
    )
