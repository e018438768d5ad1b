"""CPU KV offload (tiered KV): host-memory KV capacity, load time, and when a loaded prefix beats recomputing it.

An engine with a CPU tier (vLLM's OffloadingConnector, ``--kv_offloading_size``; LMCache; SGLang's
hierarchical cache) copies KV blocks to host DRAM and, when a later request starts with a prefix
held there, copies them back instead of recomputing them. Per GPU::

    host capacity  = offload_gib x 2^30 / b_gpu                                        [positions]
    load time      = P_hit x (b_gpu / (host_link x host_link_efficiency)
                              + host_copy_latency_s / block_size)                      [s]
    TTFT (hit)     = step_overhead + load + prefill(new positions after P_hit cached)
    TTFT (miss)    = prefill(P_hit + new positions)

with ``b_gpu`` the KV bytes per position on one GPU (:func:`capplan.kv.kv_bytes_per_token`), the
hardware profile's ``host_link_bandwidth_gbps`` (PCIe Gen5 x16: 64 GB/s each way; Grace
superchips: NVLink-C2C) and the engine profile's ``host_link_efficiency``, ``host_copy_latency_s``
and ``block_size``. The connector copies one physical block at a time (vLLM >= 0.12 keeps a
block's positions of every layer contiguous: ``block_size x b_gpu`` bytes, 2 MiB for
Llama-3.1-8B), and each copy pays a fixed latency before it streams: a small block (a small model,
or a large one split by tensor parallelism) loads well below the link's rate. The two terms are
fitted to the blog's copy micro-benchmark (:func:`fit_host_copy`,
``validation/sources/host_copy_dma.csv``). The load waits one
scheduler step (the connector loads asynchronously and the request is scheduled after it), so a
short prefix is faster to recompute; :func:`break_even_tokens` finds where loading starts to win.
A saturated engine's loads add to its compute rather than hide behind it (:func:`offload_throughput`):
the vLLM blog's 512-token prefill throughput at 0-100% CPU hits (2026-01-08, Figure 2) follows the
serial sum of its own end points within 8% at every hit rate; taking the slower of the two overshoots
by up to 2x.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from capplan.errors import InputError
from capplan.units import GIB

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

    from capplan.benchmark import Server


def _host_link(server: "Server") -> float:
    hw = server.pricer.hw
    if hw.host_link_bandwidth_gbps is None:
        raise InputError(
            f"{hw.name}: the hardware profile has no host_link_bandwidth_gbps (GPU-host bandwidth); add it, with its "
            "source, to price CPU KV offload"
        )
    t = server.pricer.inp.profile().time_on(hw.name)
    return hw.host_link_bandwidth_gbps * 1e9 * t.host_link_efficiency


def _copy_latency_per_position(server: "Server") -> float:
    """The fixed cost of a block copy shared by the block's positions [s/position]."""
    profile = server.pricer.inp.profile()
    return profile.time_on(server.pricer.hw.name).host_copy_latency_s / profile.memory.block_size


@dataclass(frozen=True)
class HostCopyFit:
    """A GPU-host copy as a fixed latency and a streaming rate: ``t(bytes) = latency_s + bytes / bandwidth``."""

    latency_s: float
    """Fixed cost of one copy [s]."""
    bandwidth_bytes_per_s: float
    """Streaming rate of a large copy [B/s] (decimal: GB/s x 1e9)."""
    max_rel_error: float
    """Largest relative error of the fitted rate over the points [fraction]."""

    def rate_bytes_per_s(self, block_bytes: float) -> float:
        """The rate a copy of ``block_bytes`` reaches [B/s]."""
        return block_bytes / (self.latency_s + block_bytes / self.bandwidth_bytes_per_s)


def fit_host_copy(block_bytes: "ArrayLike", rate_bytes_per_s: "ArrayLike") -> HostCopyFit:
    """Fit ``t(b) = latency + b / bandwidth`` to measured copy rates at several block sizes, by
    least squares on the log of the rates (each point counts for its relative error).

    Raises
    ------
    InputError
        Fewer than two points, unequal lengths, or a size or rate that is not > 0.

    >>> f = fit_host_copy([64 * 1024, 2 * 2**20], [14.45e9, 47.9e9])  # two points: solved exactly
    >>> round(f.latency_s * 1e6, 2), round(f.bandwidth_bytes_per_s / 1e9, 1), f.max_rel_error < 1e-9
    (3.27, 51.8, True)
    """
    import numpy as np
    from scipy.optimize import least_squares

    b = np.asarray(block_bytes, dtype=float)
    r = np.asarray(rate_bytes_per_s, dtype=float)
    if b.shape != r.shape or b.ndim != 1 or b.size < 2:
        raise InputError("host copy fit: give at least two (block size, rate) points of equal count")
    if not (np.all(b > 0) and np.all(r > 0)):
        raise InputError("host copy fit: block sizes and rates must be > 0")

    def residuals(x: "np.ndarray") -> "np.ndarray":
        latency, inv_bw = x[0] * 1e-6, x[1] * 1e-9
        return np.log(b / (latency + b * inv_bw)) - np.log(r)

    t = b / r  # a start from the smallest and the largest block
    i, j = int(np.argmin(b)), int(np.argmax(b))
    inv_bw0 = max((t[j] - t[i]) / (b[j] - b[i]), 1e-12) if b[j] > b[i] else 1.0 / r.max()
    start = [max(t[i] - b[i] * inv_bw0, 1e-9) * 1e6, inv_bw0 * 1e9]
    sol = least_squares(residuals, start, bounds=([0.0, 1e-6], [np.inf, np.inf]))
    latency, inv_bw = float(sol.x[0]) * 1e-6, float(sol.x[1]) * 1e-9
    fitted = b / (latency + b * inv_bw)
    return HostCopyFit(latency, 1.0 / inv_bw, float(np.max(np.abs(fitted / r - 1.0))))


def host_copy_points(path: Path | None = None) -> tuple[list[float], list[float]]:
    """Block sizes [B] and host-to-device rates [B/s] of the bundled copy micro-benchmark
    (``validation/sources/host_copy_dma.csv``: the vLLM blog's Figure 4, DMA series), or of ``path``."""
    import csv

    from capplan.resources import bundled_dir

    path = path or bundled_dir("validation") / "sources" / "host_copy_dma.csv"
    with open(path, newline="", encoding="utf-8") as f:
        rows = [r for r in csv.DictReader(f) if r["direction"] == "host_to_device"]
    return [float(r["block_kib"]) * 1024 for r in rows], [float(r["gb_per_s"]) * 1e9 for r in rows]


def _kv_bytes_per_gpu(server: "Server") -> float:
    from capplan.kv import kv_bytes_per_token

    inp = server.pricer.inp
    return kv_bytes_per_token(server.pricer.spec, inp.kv_dtype, inp.tp, 1, inp.kv_scale)[1]


def host_kv_capacity_tokens(server: "Server", offload_gib: float | None = None) -> int:
    """Positions the CPU tier holds for one GPU [positions].

    Parameters
    ----------
    offload_gib : float, optional
        Host memory given to KV per GPU [GiB] (vLLM ``--kv_offloading_size`` is per instance:
        divide by its GPUs). Default: the whole host DRAM share of one GPU
        (``host_mem_gb_per_node / gpus_per_node``), an upper bound.
    """
    hw = server.pricer.hw
    if offload_gib is None:
        if hw.host_mem_bytes_per_gpu is None:
            raise InputError(f"{hw.name}: no host_mem_gb_per_node in the hardware profile; give --offload-gib")
        size = hw.host_mem_bytes_per_gpu
    else:
        if not offload_gib > 0:
            raise InputError(f"--offload-gib {offload_gib}: must be > 0")
        size = offload_gib * GIB
    return int(size // _kv_bytes_per_gpu(server))


def kv_load_s(server: "Server", tokens: float) -> float:
    """Time to copy ``tokens`` positions of KV from host memory to one GPU [s].

    >>> from capplan.benchmark import server_for
    >>> from capplan.hardware import load_hardware
    >>> from capplan.modelspec import load_model_spec
    >>> s = server_for(load_model_spec("llama-3.1-8b"), load_hardware("h100-sxm"))
    >>> round(kv_load_s(s, 8192) * 1e3, 1)  # 1.07 GB over 64 GB/s x 0.823, and 512 copies of 3.54 us
    22.2
    """
    if tokens < 0:
        raise InputError(f"tokens {tokens}: must be >= 0")
    return tokens * (_kv_bytes_per_gpu(server) / _host_link(server) + _copy_latency_per_position(server))


@dataclass(frozen=True)
class OffloadHit:
    """One request whose prefix is in the CPU tier, against recomputing it (a JSON contract)."""

    prefix_tokens: float
    new_tokens: float
    load_s: float
    """Copying the prefix's KV to the GPU [s]."""
    ttft_hit_s: float
    """Step overhead + load + prefill of the new positions [s]."""
    ttft_recompute_s: float
    """Prefill of prefix and new positions [s]."""
    speedup: float
    """``ttft_recompute_s / ttft_hit_s`` [x]; > 1 when loading beats recomputation."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def offload_hit(server: "Server", prefix_tokens: float, new_tokens: float = 1.0) -> OffloadHit:
    """TTFT of one request (nothing else running) with its prefix loaded from the CPU tier
    against recomputing it (module notes). At least one position is always computed.

    >>> from capplan.benchmark import server_for
    >>> from capplan.hardware import load_hardware
    >>> from capplan.modelspec import load_model_spec
    >>> s = server_for(load_model_spec("llama-3.1-8b"), load_hardware("h100-sxm"))
    >>> round(offload_hit(s, 32768).speedup, 1)
    9.3
    """
    from capplan.roofline import causal_pairs

    if prefix_tokens < 0 or new_tokens < 1:
        raise InputError("offload: prefix tokens must be >= 0 and new tokens >= 1")
    P, n = float(prefix_tokens), float(new_tokens)
    pricer, M = server.pricer, max(int(server.max_num_batched_tokens), 1)
    W = pricer.window
    full = P + n
    recompute = pricer.chunked(full, float(causal_pairs(0, full)), float(causal_pairs(0, full, W)), 0.0, 1.0, 1.0, M)[0]
    chunk = pricer.chunked(n, float(causal_pairs(P, n)), float(causal_pairs(P, n, W)), P, 1.0, 1.0, M)[0]
    load = kv_load_s(server, P)
    overhead = float(pricer.decode(1.0, 0.0).overhead_s)
    hit = overhead + load + chunk
    o = server.request_overhead_s
    return OffloadHit(P, n, load, hit + o, recompute + o, (recompute + o) / (hit + o))


def break_even_tokens(server: "Server", new_tokens: float = 1.0, limit: int = 1_000_000) -> int:
    """Smallest cached prefix [positions] from which loading it from the CPU tier gives a lower
    TTFT than recomputing it; ``limit + 1`` when none up to ``limit`` does."""
    def wins(p: int) -> bool:
        return offload_hit(server, p, new_tokens).speedup > 1.0

    if wins(1):
        return 1
    if not wins(limit):
        return limit + 1
    lo, hi = 1, limit
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if not wins(mid) else (lo, mid)
    return hi


def offload_throughput(server: "Server", prompt_tokens: int, hit_rate: float) -> float:
    """Prefill-only requests per second of a saturated instance when ``hit_rate`` of them find their
    whole prompt (but the last position) in the CPU tier [requests/s].

    Misses are prefilled packed up to the token budget; hits compute one position after
    ``P - 1`` cached, many per step (up to ``max_num_seqs``); the copies add to the compute,
    ``1 / (compute per request + load per request)``: measured, they do not overlap it (the vLLM
    blog's 10,000 unique 512-token requests, prefix caching off on the GPU, Figure 2: the rate at
    0-100% hits follows the serial sum within 8%, where ``1 / max(...)`` is up to 2x too fast).
    """
    from capplan.roofline import causal_pairs

    if not 0 <= hit_rate <= 1 or prompt_tokens < 2:
        raise InputError("offload throughput: hit rate in [0, 1] and prompts of >= 2 positions")
    pricer, M = server.pricer, max(int(server.max_num_batched_tokens), 1)
    W = pricer.window
    P = float(prompt_tokens)
    per_step = max(1.0, math.floor(M / P))
    miss = pricer.chunked(P * per_step, float(causal_pairs(0, P)) * per_step, float(causal_pairs(0, P, W)) * per_step,
                          0.0, per_step, per_step, M)[0] / per_step
    b = float(min(server.max_num_seqs, M))
    hit_step = pricer.step(new_tokens=b, logits_tokens=b, attention_pairs=b * float(causal_pairs(P - 1, 1.0)),
                           kv_read_tokens=b * (P - 1), sequences=b,
                           window_attention_pairs=b * float(causal_pairs(P - 1, 1.0, W)), window_kv_read_tokens=b * min(P - 1, W - 1))
    hit = float(hit_step.step_time_s) / b
    compute = (1 - hit_rate) * miss + hit_rate * hit
    load = hit_rate * kv_load_s(server, P - 1)
    return 1.0 / (compute + load)


@dataclass(frozen=True)
class OffloadTier:
    """A replica's CPU KV tier as a plan uses it (a JSON contract: :meth:`as_dict`)."""

    host_kv_gib_per_gpu: float
    """Host memory per GPU given to the tier [GiB]."""
    capacity_tokens: int
    """Positions the tier holds; each GPU holds its share of every position, so this is the
    replica's too [positions]."""
    load_s_per_token: float
    """Time to copy one position's KV back to the GPUs, all of a replica's GPUs in parallel [s/position]."""
    break_even_tokens: int
    """Smallest cached prefix that loads faster than it recomputes, a request alone (:func:`break_even_tokens`) [positions]."""
    host_link_bandwidth_gbps: float
    """GPU-host link of the hardware profile, each way [GB/s]."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def offload_tier(server: "Server", offload_gib: float) -> OffloadTier:
    """The CPU tier of ``offload_gib`` GiB per GPU on ``server``: capacity, load time per position
    and the break-even prefix.

    Raises
    ------
    InputError
        ``offload_gib`` not > 0; a hardware profile without ``host_link_bandwidth_gbps``.

    >>> from capplan.benchmark import server_for
    >>> from capplan.hardware import load_hardware
    >>> from capplan.modelspec import load_model_spec
    >>> t = offload_tier(server_for(load_model_spec("llama-3.1-8b"), load_hardware("h100-sxm")), 100.0)
    >>> t.capacity_tokens, t.break_even_tokens  # 100 GiB at 128 KiB a position
    (819200, 463)
    """
    capacity = host_kv_capacity_tokens(server, offload_gib)
    hw = server.pricer.hw
    return OffloadTier(
        host_kv_gib_per_gpu=float(offload_gib), capacity_tokens=capacity, load_s_per_token=kv_load_s(server, 1.0),
        break_even_tokens=break_even_tokens(server), host_link_bandwidth_gbps=float(hw.host_link_bandwidth_gbps or 0.0),
    )
