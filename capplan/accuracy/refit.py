"""Refitting the bundled engine profiles on the validation corpus (a maintainer's tool).

``python -m capplan.accuracy.refit`` fits, for each profile in :data:`PROFILES`:

* the **memory terms** that differ across vLLM versions (the sampler's profiling peak, non-torch
  memory) on the start-up logs of that version range, and
* the **time terms** shared by an engine family on that family's serving rows,

using only the rows ``validation/split.yaml`` does not hold out, and writes
``engine_profiles/<name>.yaml`` with every fitted value's ``fitted_on`` row ids. Terms a profile
fixes from the engine's source code (default utilisation, batch limits, the budget rule) carry
their citation instead. ``capplan accuracy`` then reports the error on the held-out rows.

Three narrower fits work on the bundled profiles as they are: ``--unit fp8|fp4|weight-only``
fits one kernel class's efficiency on every engine's rows (:func:`fit_unit_efficiency`; with
``--write`` after the value is set in :data:`FEATURE_TIME_TERMS`, it and its ``fitted_on`` go
into every bundled profile), ``--hardware
FAMILY:CHIP`` fits one chip's overrides for one engine family (:func:`fit_hardware_override`),
and ``--terms FAMILY:TERM[,TERM...]`` refits some of a family's time terms, the others kept
(:func:`fit_family_terms`), and ``--memory PROFILE`` refits one vLLM profile's memory terms on its
start-up logs (:func:`fit_profile_memory`). The bundled profiles' last narrow fits, in order, are listed in
``docs/accuracy.md`` (how the profiles were fitted).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

KV_SOURCES = "validation/sources/kv_capacity.md"

FAMILY_TERMS = ["bandwidth_efficiency", "step_overhead_s", "per_sequence_s", "request_overhead_s"]
"""Terms a family with few rows (SGLang) fits on top of the vLLM fit; kernel efficiencies and
collectives are taken from vLLM's."""

BASE_FAMILY = "vllm"
"""The family fitted first; others start from its values."""

TIME_TERMS = [
    "bandwidth_efficiency", "gemm_efficiency", "gemm_half_tokens", "attention_efficiency", "moe_gemm_efficiency",
    "step_overhead_s", "per_sequence_s", "request_overhead_s", "interconnect_efficiency", "allreduce_latency_us",
]
"""Time terms fitted per engine family."""

MEMORY_TERMS = ["sampler_bytes_per_seq_vocab", "non_torch_gib_single", "non_torch_gib_nvlink", "non_torch_gib_pcie"]
"""Memory terms fitted per vLLM version range (those the start-up logs constrain)."""


FEATURE_TIME_TERMS: dict[str, float] = {
    "moe_load_imbalance": 1.36,
    "tbo_overlap_efficiency": 0.55,
    "fp4_gemm_efficiency": 0.442,
    "fp8_gemm_efficiency": 0.768,
    "weight_only_moe_efficiency": 0.535,
    "eager_s_per_layer": 0.00034,
    "alltoall_efficiency": 0.96,
    "host_link_efficiency": 0.823,
    "host_copy_latency_s": 3.54e-6,
    "kv_transfer_efficiency": 0.475,
}
"""Time terms of the engine features (expert parallelism, two-batch overlap, FP4 and FP8 GEMMs,
CPU KV offload, disaggregated KV transfer), set in every profile from the published ratios and
figures in :data:`FEATURE_SOURCES` (derived or fitted once, not refitted by :func:`refit`; the
unit efficiencies by :func:`fit_unit_efficiency`, ``python -m capplan.accuracy.refit --unit fp8``)."""

FEATURE_SOURCES: dict[str, str] = {
    "time.moe_load_imbalance": (
        "DERIVED from the LMSYS blog 2025-05-05 (lm-sys.github.io blog/2025-05-05-large-scale-ep.md @ 2db4e40), DeepSeek-V3 "
        "prefill on 4x8 H100, EP32, 16,384 tokens/device, 4,096-token inputs: 50,302 tok/s/node with EPLB on the real "
        "expert distribution vs 59,337 with 'simulated perfect EPLB'; 1.36 is the busiest-GPU load whose prediction "
        "(capplan.roofline, sglang terms) reproduces that 0.848 ratio (rows lmsys_ep_h100_prefill_4k and "
        "lmsys_ep_h100_prefill_4096_perfect_eplb). Taken for every engine: no other corpus measurement separates it."),
    "time.tbo_overlap_efficiency": (
        "DERIVED from the LMSYS blog 2025-05-05 @ 2db4e40: two-batch overlap 'achieves a 27% to 35% throughput increase "
        "compared to the vanilla setup, even when processing the same token count per device' (prefill); 0.55 is the "
        "hidden share at which capplan's prefill prediction (EP32, 16,384 tokens/device, 4,096-token inputs) gains 31%. "
        "Taken for every engine (vLLM's dual-batch overlap has no corpus measurement)."),
    "time.fp4_gemm_efficiency": (
        "FITTED by capplan.accuracy.refit.fit_unit_efficiency('fp4') (soft-L1 least squares on log ratios, outside the family "
        "fits, each row priced with its family's profile) on the 21 serving rows with FP4 weights on a chip with an FP4 unit that "
        "split.yaml does not hold out (TensorRT-LLM v1.0 NVFP4 B200 and GB200 rows); every profile takes the same value (the same "
        "CUTLASS/FlashInfer block-scaled FP4 kernels; no vLLM or SGLang FP4 row exists). Refitted (0.443 -> 0.471) after the trtllm "
        "profile took TensorRT-LLM's guaranteed_no_evict admission, and (0.471 -> 0.442, three rounds alternating with the "
        "trtllm family refit) after fixed-length bursts (TensorRT-LLM 0.14's QPS INF rows) were replayed and left the fits."),
    "time.eager_s_per_layer": (
        "vllm-project/vllm-omni issue #7960 (comment of 2026-09-22): Qwen2.5-Omni-7B's thinker (a 28-layer Qwen2.5-7B decoder) "
        "on one A800-80GB under vLLM 0.29, TPOT ~22-23 ms with enforce_eager: true against ~13 ms with CUDA graphs; "
        "(22.5 - 13) / 28 = 0.34 ms per layer. One measurement at batch 1; taken for every model, batch and chip (ASSUMPTION)."),
    "time.fp8_gemm_efficiency": (
        "FITTED by capplan.accuracy.refit.fit_unit_efficiency('fp8') (soft-L1 least squares on log ratios, outside the family "
        "fits, each row priced with its family's profile) on the 155 serving rows of every engine with FP8 weights on a chip "
        "with an FP8 unit that split.yaml does not hold out; every profile takes the same value. Refitted (0.798 -> 0.814) "
        "after the trtllm profile took TensorRT-LLM's guaranteed_no_evict admission, and (0.814 -> 0.768, three rounds alternating with the "
        "trtllm family refit) after fixed-length bursts (TensorRT-LLM 0.14's QPS INF rows) were replayed and left the fits."),
    "time.weight_only_moe_efficiency": (
        "FITTED by capplan.accuracy.refit.fit_unit_efficiency('weight-only') (soft-L1 least squares on log ratios, outside "
        "the family fits, each row priced with its family's profile) on the 11 serving rows whose routed experts run "
        "weight-only kernels that split.yaml does not hold out: gpt-oss-20b and gpt-oss-120b (MXFP4 experts) under vLLM on "
        "H100, where vLLM runs them as W4A16 MoE kernels (vllm/model_executor/layers/quantization/mxfp4.py: Hopper has no FP4 "
        "unit; mxfp4_w4a16_moe_quant_config, Triton matmul_ogs or Marlin). Held out: the 6 other such rows (gpt-oss-20b "
        "20K-token TTFT and throughput, gpt-oss-120b c4 throughput and TPOT). Every profile takes the same value (no SGLang "
        "or TensorRT-LLM weight-only MoE row exists)."),
    "time.alltoall_efficiency": (
        "DeepEP docs/legacy.md (deepseek-ai/DeepEP @ 0297fc8), low-latency dispatch at EP32 on H800 with one 400 Gb/s CX7 "
        "per GPU: 48 GB/s of ~50 GB/s."),
    "time.host_link_efficiency": (
        "FITTED by capplan.offload.fit_host_copy (t = latency + bytes / bandwidth, least squares on log rates) with "
        "time.host_copy_latency_s on validation/sources/host_copy_dma.csv: the vLLM blog 2026-01-08 ('Inside vLLM's New KV "
        "Offloading Connector'), Figure 4, H100 host-to-device DMA copies of 1000 blocks of 4 KiB-16 MiB; bandwidth 52.7 GB/s "
        "of PCIe Gen5 x16's 64 GB/s each way. Not fitted on corpus rows: the blog's Figure 1 and 2 rows test it."),
    "time.host_copy_latency_s": (
        "FITTED with time.host_link_efficiency (same fit, same file): 3.54 us a copy; every one of the 13 rates within 6%. "
        "The connector copies one physical block (block_size positions of every layer, contiguous since vLLM 0.12) per copy."),
    "time.kv_transfer_efficiency": (
        "kvcache-ai/Mooncake README: Transfer Engine 'delivers up to ... 190 GB/s of bandwidth in ... 8x400 Gbps RoCE "
        "networks' (40 GB of KV): 190 of 400 GB/s."),
}
"""Citation of every :data:`FEATURE_TIME_TERMS` value."""


@dataclass
class ProfileSpec:
    """How one bundled profile is made."""

    name: str
    engine: str
    version: str
    description: str
    family: str
    """Engine family whose serving rows fit the time terms."""
    memory: dict[str, Any] = field(default_factory=dict)
    """Memory terms fixed from the engine's code (not fitted)."""
    time: dict[str, Any] = field(default_factory=dict)
    """Time terms fixed from the engine's code (not fitted)."""
    sources: dict[str, str] = field(default_factory=dict)
    fit_memory: list[str] = field(default_factory=list)
    """Memory terms fitted on the start-up logs this profile reproduces."""


_VLLM_SOURCES = {
    "memory.block_size": "vLLM CacheConfig default block_size 16 on CUDA (vllm/config/cache.py)",
    "memory.max_num_seqs": "vLLM get_batch_defaults: 1024 on >= 70 GiB non-A100 GPUs for vllm serve, else 256 (docs/research/kv-engine-logs.md)",
    "memory.max_num_batched_tokens": "vLLM get_batch_defaults: 8192 on large GPUs, 2048 otherwise (docs/research/kv-engine-logs.md)",
    "memory.budget_rule": f"total x gpu_memory_utilization - weights - torch peak - non-torch (gpu_worker.determine_available_memory; {KV_SOURCES} section 1)",
    "time.chunked_prefill": "vLLM V1 schedules prompt chunks beside decodes within max_num_batched_tokens (chunked prefill always on in V1)",
}

VLLM_010_SAMPLER_SOURCE = (
    "vLLM V1 up to 0.11.0 runs FlashInfer's top-k/top-p sampler whenever FlashInfer is importable "
    f"(VLLM_USE_FLASHINFER_SAMPLER unset means on; {KV_SOURCES} section 2), but a pip install has no FlashInfer: PR #21959 "
    "(2025-07-30) made flashinfer-python the optional extra vllm[flashinfer] until PR #26443 (2025-10-08) made it a "
    "default dependency again; vLLM's Docker image installs it. The default is the pip install's PyTorch path; a log "
    "that says 'Using FlashInfer for top-p & top-k sampling' takes the FlashInfer term.")
"""Why the vllm-0.10 profile's sampler warm-up defaults to the PyTorch path."""

SGLANG_MIXED_CHUNK_SOURCE = (
    "SGLang ServerArgs enable_mixed_chunk: bool = False (python/sglang/srt/server_args.py, every release from 0.3 on; "
    "'--enable-mixed-chunk: Enabling mixing prefill and decode in a batch when using chunked prefill'): by default the "
    "scheduler runs a prefill batch of waiting prompts (up to chunked_prefill_size) whenever it can form one, and the "
    "running requests' decode batch waits for it.")
"""Why the sglang profile's prompt steps hold no decodes."""

TRTLLM_SCHEDULER_POLICY_SOURCE = (
    "TensorRT-LLM's default capacity scheduler policy: trtllm-bench throughput's --scheduler_policy defaults to "
    "guaranteed_no_evict (NVIDIA/TensorRT-LLM tensorrt_llm/bench/benchmark/throughput.py, click option default), and so "
    "does SchedulerConfig.capacity_scheduler_policy of the LLM API that trtllm-serve and NIM run (TensorRT-LLM docs, "
    "'Useful Runtime Options': 'GUARANTEED_NO_EVICT (default) ... to guarantee that a started request is never paused'); "
    "an admitted request reserves KV for its prompt and its whole output.")
"""Why the trtllm profile reserves a request's whole output at admission."""

SGLANG_CUDA_GRAPH_MAX_BS = 160
SGLANG_CUDA_GRAPH_SOURCE = (
    "SGLang ServerArgs.__post_init__ (PR #2268, merged 2024-11-29): cuda_graph_max_bs defaults to 160 on GPUs of 25 GB "
    "or more (8 below), until PR #10372 (merged 2025-09) tiers it by memory (H100/H200: 256 at TP < 4, 512 at TP >= 4; "
    "B200: 512); decode batches above it run without a CUDA graph. The profile takes the late-2024 value; for releases "
    "after PR #10372 set time.cuda_graph_max_batch to the tiered value.")
"""SGLang's largest CUDA-graph decode batch (see the source)."""

_TRTLLM_MEMORY: dict[str, Any] = {
    "budget_rule": "fraction_of_free", "gpu_memory_utilization": 0.9, "block_size": 32, "sampler_bytes_per_seq_vocab": 0.0,
    "max_num_seqs": {"large": 2048, "small": 2048}, "max_num_batched_tokens": {"large": 8192, "small": 8192},
}
_TRTLLM_TIME: dict[str, Any] = {"chunked_prefill": False, "capacity_scheduler_policy": "guaranteed_no_evict"}
_TRTLLM_SOURCES = {
    "time.capacity_scheduler_policy": TRTLLM_SCHEDULER_POLICY_SOURCE,
    "memory.budget_rule": f"KvCacheConfig.free_gpu_memory_fraction of the memory free after the model loads ({KV_SOURCES}, TensorRT-LLM)",
    "memory.gpu_memory_utilization": "free_gpu_memory_fraction default 0.9 (TensorRT-LLM KvCacheConfig docs)",
    "memory.block_size": "tokens_per_block default 32 (TensorRT-LLM KV cache docs)",
    "memory.max_num_seqs": "max_batch_size default 2048 (TensorRT-LLM build defaults)",
    "memory.sampler_bytes_per_seq_vocab": "TensorRT-LLM sizes the KV pool from the memory free after the engine loads; it runs no sampler warm-up (capplan assumption, consistent with its KV docs)",
    "memory.max_num_batched_tokens": "max_num_tokens default 8192 (TensorRT-LLM build defaults)",
    "time.chunked_prefill": "enable_chunked_context is off by default: a context is processed whole in one step",
}

TRTLLM_PRE_XQA_SOURCE = (
    "TensorRT-LLM blog 'New XQA-kernel provides 2.4x more Llama-70B throughput within the same latency budget' "
    "(NVIDIA/TensorRT-LLM docs/source/blogs/XQA-kernel.md @ 585c756, README news of 2024-01-30): XQA 'provides "
    "optimization for MQA and GQA during generation phase ... reducing data loading'; Llama-70B FP8 on one H200, "
    "128/2048, 1,227 tok/s/GPU without XQA against 2,941 with it (2.4x), 13,232 against 25,300 on 8 (1.9x). The "
    "2,941 figure is the one the Falcon-180B blog (docs/source/blogs/Falcon180B-H200.md, 'TensorRT-LLM v0.7a') "
    "publishes, so the 0.7 line has XQA and releases up to 0.6.1 decode GQA attention with the masked multi-head "
    "attention kernel, one query head per thread block. 1 prices no sharing of a group's K/V loads (not fitted); "
    "validation/sources/serving.md, 'TensorRT-LLM before XQA', gives the rows it moves."
)
"""Why the trtllm-0.6 profile reads a GQA group's K/V once per query head."""

PROFILES: list[ProfileSpec] = [
    ProfileSpec(
        "vllm-0.10", "vllm", "0.9-0.11.0", "vLLM V1 0.9 to 0.11.0: FlashInfer sampling, NCCL initialised inside the profiled budget up to 0.10.2.",
        "vllm", memory={"gpu_memory_utilization": 0.9, "sampler": "pytorch"},
        sources={**_VLLM_SOURCES, "memory.gpu_memory_utilization": f"default 0.9 up to 0.19 ({KV_SOURCES} section 1)",
                 "memory.sampler": VLLM_010_SAMPLER_SOURCE},
        fit_memory=[*MEMORY_TERMS, "flashinfer_sampler_bytes_per_seq_vocab"],
    ),
    ProfileSpec(
        "vllm-0.15", "vllm", "0.11.1-0.16", "vLLM V1 0.11.1 to 0.16: the sampler warm-up sorts whole rows in PyTorch; NCCL outside the budget.",
        "vllm", memory={"gpu_memory_utilization": 0.9},
        sources={**_VLLM_SOURCES, "memory.gpu_memory_utilization": f"default 0.9 up to 0.19 ({KV_SOURCES} section 1)"},
        fit_memory=MEMORY_TERMS,
    ),
    ProfileSpec(
        "vllm-0.19", "vllm", "0.17-0.19", "vLLM V1 0.17 to 0.19: in-place Triton sampler; CUDA-graph memory measured but not subtracted.",
        "vllm", memory={"gpu_memory_utilization": 0.9, "cudagraph_gib": 0.0},
        sources={**_VLLM_SOURCES, "memory.gpu_memory_utilization": f"default 0.9 up to 0.19 ({KV_SOURCES} section 1)",
                 "memory.cudagraph_gib": f"0.17.1-0.19 measure CUDA-graph memory but subtract it only with VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1 ({KV_SOURCES} section 1)"},
        fit_memory=["sampler_bytes_per_seq_vocab"],
    ),
    ProfileSpec(
        "vllm-latest", "vllm", "0.20 and later", "vLLM V1 0.20 and later: CUDA-graph memory subtracted by default; default utilisation 0.92.",
        "vllm", memory={"gpu_memory_utilization": 0.92, "cudagraph_gib": 0.52},
        sources={**_VLLM_SOURCES,
                 "memory.gpu_memory_utilization": f"PR #38284 raised the default to 0.92 in 0.20.0 ({KV_SOURCES} section 1)",
                 "memory.cudagraph_gib": f"subtracted by default from 0.20.0 (PR #38284); 0.52 GiB is the estimate a 0.21.0 log prints for Qwen3-8B with the default capture sizes (LMCache/LMCache#3430, RTX A5000; {KV_SOURCES} section 9), where a 0.19.1 log of the same model printed 2.35 GiB without subtracting it; the estimate varies with the model, the capture sizes and a drafter ('capplan calibrate' reads it from a log)"},
    ),
    ProfileSpec(
        "sglang", "sglang", "0.3-0.5", "SGLang: static memory fraction for weights and KV, chunked prefill.",
        "sglang", memory={"budget_rule": "static_fraction", "gpu_memory_utilization": 0.88, "block_size": 1,
                          "max_num_seqs": {"large": 1024, "small": 256}, "max_num_batched_tokens": {"large": 8192, "small": 2048}},
        time={"cuda_graph_max_batch": SGLANG_CUDA_GRAPH_MAX_BS, "mixed_prefill": False},
        sources={"time.cuda_graph_max_batch": SGLANG_CUDA_GRAPH_SOURCE, "time.mixed_prefill": SGLANG_MIXED_CHUNK_SOURCE,
                 "memory.budget_rule": f"rest = free after weights - total x (1 - mem_fraction_static) (ModelRunner.profile_max_num_token; {KV_SOURCES} section 6)",
                 "memory.gpu_memory_utilization": f"mem_fraction_static 0.88 at TP 1 in releases up to v0.4.x ({KV_SOURCES} section 6)",
                 "memory.block_size": "SGLang's token granularity is the page size, 1 by default",
                 "memory.max_num_batched_tokens": f"chunked_prefill_size 8192 on < 160 GiB cards of >= 60 GiB, 2048-4096 on smaller ({KV_SOURCES} section 6)",
                 "memory.max_num_seqs": "capplan assumption: SGLang sizes max_running_requests from the KV pool; the vLLM limits are used as a stand-in",
                 "time.chunked_prefill": "SGLang chunked prefill (chunked_prefill_size) is on by default"},
    ),
    ProfileSpec(
        "trtllm", "trtllm", "0.7-1.0", "TensorRT-LLM in-flight batching (trtllm-bench, Triton backend, NIM).",
        "trtllm", memory=_TRTLLM_MEMORY, time=_TRTLLM_TIME, sources=_TRTLLM_SOURCES,
    ),
    ProfileSpec(
        "trtllm-0.6", "trtllm", "0.5-0.6",
        "TensorRT-LLM 0.5 to 0.6: GQA decode attention reads each K/V head once per query head (before the XQA kernel).",
        "trtllm", memory=_TRTLLM_MEMORY, time={**_TRTLLM_TIME, "gqa_kv_reread": 1.0},
        sources={**_TRTLLM_SOURCES, "time.gqa_kv_reread": TRTLLM_PRE_XQA_SOURCE},
    ),
]
"""The bundled profiles and how each is made."""


def _prepare(rows: list[Any], engine: Any, kind: str) -> list[Any]:
    """Prepare ``rows`` at ``engine``; a serving row of a release with a profile of its own
    (:func:`~capplan.accuracy.report.time_profile_name`) keeps that profile's pinned time terms.
    A burst replayed by the simulator (:data:`~capplan.accuracy.predict.BURST`) is left out: no
    fit could move it, and ``fitted_on`` names only rows a fit saw."""
    from capplan.accuracy.predict import PINNED_TIME_TERMS, Unsupported, engine_family, prepare_kv, prepare_serving
    from capplan.accuracy.report import time_profile_name
    from capplan.errors import CapplanError

    fixed = {p.name: {t: p.time[t] for t in PINNED_TIME_TERMS if t in p.time} for p in PROFILES}
    out = []
    for r in rows:
        try:
            if kind == "serving":
                pinned = fixed.get(time_profile_name(r, engine_family(r.get("engine"))), {})
                row_engine = engine.model_copy(update={"time": engine.time.model_copy(update=pinned)}) if pinned else engine
                prepared = prepare_serving(r, row_engine)
                if prepared.replayed:
                    continue
                out.append(prepared)
            else:
                out.append(prepare_kv(r, engine))
        except (Unsupported, CapplanError):
            continue
    return out


def with_sampler_paths(engine: Any, paths: set[str]) -> Any:
    """``engine`` with a term for every sampler path in ``paths``: a path the profile has not
    measured starts from the PyTorch path's bytes per entry (the two priced alike until fitted)."""
    from capplan.engine import SAMPLER_TERMS

    m = engine.memory
    missing = {SAMPLER_TERMS[p]: m.sampler_bytes_per_seq_vocab for p in paths if getattr(m, SAMPLER_TERMS[p]) is None}
    return engine.model_copy(update={"memory": m.model_copy(update=missing)}) if missing else engine


def fit_memory_terms(engine: Any, prepared: list[Any], terms: list[str]) -> tuple[Any, dict[str, float]]:
    """Fit memory ``terms`` to KV rows by bounded least squares on log ratios."""
    import numpy as np
    from scipy.optimize import least_squares

    from capplan.engine import SAMPLER_TERMS

    bounds = {"sampler_bytes_per_seq_vocab": (0.0, 80.0), "flashinfer_sampler_bytes_per_seq_vocab": (0.0, 80.0),
              "non_torch_gib_single": (0.0, 2.0), "non_torch_gib_nvlink": (0.0, 4.0), "non_torch_gib_pcie": (0.0, 4.0)}
    # a term no row constrains (no TP > 1 row, no PCIe row, no row on that sampler path) keeps its value
    paths = {engine.memory.sampler_path(p.inputs.sampler) for p in prepared}
    engine = with_sampler_paths(engine, paths)
    usable = []
    for t in terms:
        if t in SAMPLER_TERMS.values() and not any(SAMPLER_TERMS[p] == t for p in paths):
            continue
        if t == "non_torch_gib_nvlink" and not any(p.inputs.tp > 1 and p.hw.intra_node_bandwidth_gbps >= 100 for p in prepared):
            continue
        if t == "non_torch_gib_pcie" and not any(p.inputs.tp > 1 and p.hw.intra_node_bandwidth_gbps < 100 for p in prepared):
            continue
        if t == "non_torch_gib_single" and not any(p.inputs.tp * p.inputs.pp == 1 for p in prepared):
            continue
        usable.append(t)
    usable = usable[: max(1, len(prepared) - 1)] if len(prepared) > 1 else usable[:1]
    if not prepared or not usable:
        return engine, {}
    lo = np.array([bounds[t][0] for t in usable])
    hi = np.array([bounds[t][1] for t in usable])
    x0 = np.clip([getattr(engine.memory, t) for t in usable], lo, hi)
    meas = np.array([p.row.measured for p in prepared])

    def make(x: Any) -> Any:
        return engine.model_copy(update={"memory": engine.memory.model_copy(update=dict(zip(usable, map(float, x))))})

    def res(x: Any) -> Any:
        e = make(x)
        return np.log(np.maximum([p.evaluate(e) for p in prepared], 1e-9) / meas)

    sol = least_squares(res, x0, bounds=(lo, hi), loss="soft_l1", f_scale=0.05)
    fitted = make(sol.x)
    return fitted, dict(zip(usable, map(float, sol.x)))


def family_fit_rows(rows: list[Any], family: str) -> list[Any]:
    """The serving rows that fit an engine family's time terms: not held out, run on that family,
    and exercising no feature the family fit leaves out (:func:`~capplan.accuracy.predict.fits_family_terms`)."""
    from capplan.accuracy.predict import engine_family, fits_family_terms

    return [r for r in rows if r.kind == "serving" and not r.held_out and engine_family(r.get("engine")) == family
            and fits_family_terms(r)]


def refit(folder: Path | None = None, write: bool = True) -> dict[str, Any]:
    """Fit every profile of :data:`PROFILES`; write them to ``engine_profiles/`` (``write``).

    The time terms and chip overrides start from the bundled profile's values, so a refit refines
    the last fit (after a change to the model or the corpus) rather than starting over: the fit's
    loss is not convex in the terms, and from the engine defaults the optimiser stops in a worse
    optimum (on the corpus of 2026-12-06, median error 11.7% against the bundled profiles' 9.8%).
    """
    from capplan.accuracy.corpus import load_corpus
    from capplan.accuracy.fit import fit_time_terms
    from capplan.accuracy.report import kv_profile_name
    from capplan.engine import CORPUS_FIT, ByGpuClass, EngineProfile, MemoryTerms, TimeTerms, load_engine

    corpus = load_corpus(folder)
    fit_rows = [r for r in corpus if not r.held_out]
    time_fits: dict[str, Any] = {}
    out: dict[str, Any] = {}
    for spec in PROFILES:
        mem = {k: (ByGpuClass(**v) if isinstance(v, dict) else v) for k, v in spec.memory.items()}
        bundled = load_engine(spec.name)
        # the time terms and chip overrides start from the bundled profile's (see the docstring)
        engine = EngineProfile(
            name=spec.name, engine=spec.engine, version=spec.version, description=spec.description,  # type: ignore[arg-type]
            memory=MemoryTerms(**mem), time=TimeTerms(**{**bundled.time.model_dump(), **FEATURE_TIME_TERMS, **spec.time}),
            calibration=CORPUS_FIT, sources={**FEATURE_SOURCES, **spec.sources},
        )
        # the feature terms are not refitted here: their rows stay as the last narrow fit wrote them
        fitted_on = {k: v for k, v in bundled.fitted_on.items() if k.removeprefix("time.") in FEATURE_TIME_TERMS}
        if spec.fit_memory:
            kv_rows = [r for r in fit_rows if r.kind == "kv" and kv_profile_name(r) == spec.name]
            prepared = _prepare(kv_rows, engine, "kv")
            engine, values = fit_memory_terms(engine, prepared, spec.fit_memory)
            for t in values:
                fitted_on[f"memory.{t}"] = [p.row.id for p in prepared]
        if spec.family not in time_fits:
            prepared = _prepare(family_fit_rows(fit_rows, spec.family), engine, "serving")
            terms = TIME_TERMS if len(prepared) >= 100 else FAMILY_TERMS
            own = {hw: o.set_terms() for hw, o in bundled.hardware.items()}  # the bundled chip overrides
            if spec.family != BASE_FAMILY and BASE_FAMILY in time_fits:
                base = time_fits[BASE_FAMILY].engine
                hardware, inherited = inherited_overrides(base, terms)
                own = {hw: {t: v for t, v in ts.items() if t in terms} for hw, ts in own.items()}  # of the terms it fits
                start = engine.model_copy(update={
                    "time": base.time.model_copy(update={**{t: getattr(engine.time, t) for t in terms}, **spec.time}),
                    "hardware": overrides_on_top(hardware, own),
                    "fitted_on": {**engine.fitted_on, **inherited, **override_rows(bundled, own)}})
            else:
                start = engine.model_copy(update={"hardware": bundled.hardware,
                                                  "fitted_on": {**engine.fitted_on, **override_rows(bundled, own)}})
            result = fit_time_terms(start, prepared, terms)
            result = _fit_hardware_overrides(result, prepared)
            time_fits[spec.family] = result
            print(f"{spec.family}: {len(prepared)} rows, median |error| {result.median_abs_error_before:.1%} -> "
                  f"{result.median_abs_error_after:.1%}", file=sys.stderr)
        result = time_fits[spec.family]
        fixed = set(spec.time)
        engine = engine.model_copy(update={"time": result.engine.time.model_copy(update={**FEATURE_TIME_TERMS, **spec.time}),
                                           "hardware": result.engine.hardware})
        fitted_on.update({k: v for k, v in result.engine.fitted_on.items() if k.startswith("hardware.")})
        # a term the family fit left alone keeps the base family's value, so it records the base's rows
        base_rows = time_fits[BASE_FAMILY].row_ids if BASE_FAMILY in time_fits else []
        for t in TIME_TERMS:
            if t in fixed:
                continue
            if t in result.terms:
                fitted_on[f"time.{t}"] = result.row_ids
            elif spec.family != BASE_FAMILY and base_rows:
                fitted_on[f"time.{t}"] = base_rows
        engine = engine.model_copy(update={"fitted_on": fitted_on})
        out[spec.name] = engine
        if write:
            write_profile(engine)
    return out


def inherited_overrides(base: Any, fitted: list[str]) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """The base family's hardware overrides of the time terms a family with few rows does not fit
    itself (``fitted``): it takes the base's kernel efficiencies and collectives, so it takes them
    chip by chip too (e.g. vLLM's all-reduce latency on H100 and its RCCL link efficiency on
    MI300X for SGLang, which has no fit row there). Returns the overrides (hardware -> terms) and
    their ``fitted_on`` entries, the base's rows."""
    from capplan.engine import TimeOverrides

    kept = {hw: {t: v for t, v in o.set_terms().items() if t not in fitted} for hw, o in base.hardware.items()}
    kept = {hw: ts for hw, ts in kept.items() if ts}
    return {hw: TimeOverrides(**ts) for hw, ts in kept.items()}, override_rows(base, kept)


def override_rows(engine: Any, terms: dict[str, dict[str, float]]) -> dict[str, list[str]]:
    """The ``fitted_on`` entries of ``engine``'s chip overrides of ``terms`` (hardware -> term ->
    value), those it records."""
    keys = (f"hardware.{hw}.{t}" for hw, ts in terms.items() for t in ts)
    return {k: engine.fitted_on[k] for k in keys if k in engine.fitted_on}


def overrides_on_top(inherited: dict[str, Any], own: dict[str, dict[str, float]]) -> dict[str, Any]:
    """The chip overrides a family inherits (:func:`inherited_overrides`) with its own per-chip
    terms (hardware -> term -> value) set on top."""
    from capplan.engine import TimeOverrides

    merged = dict(inherited)
    for hw, terms in own.items():
        if terms:
            merged[hw] = merged[hw].model_copy(update=terms) if hw in merged else TimeOverrides(**terms)
    return merged


def write_inherited_overrides(folder: Path | None = None) -> list[Path]:
    """Write into every bundled profile of the other families the base family's chip overrides of
    the time terms that family does not fit itself (:func:`inherited_overrides`), the family's own
    overrides kept on top; run after a narrow fit changes the base family's overrides (as
    :func:`refit` does in one go). A family's own terms are those whose ``fitted_on`` rows are not
    the base family's."""
    from capplan.engine import load_engine

    base = load_engine(next(p.name for p in PROFILES if p.family == BASE_FAMILY))
    paths = []
    for spec in PROFILES:
        if spec.family == BASE_FAMILY:
            continue
        engine = load_engine(spec.name)
        own = [t for t in TIME_TERMS if engine.fitted_on.get(f"time.{t}", []) != base.fitted_on.get(f"time.{t}", [])]
        hardware, inherited = inherited_overrides(base, own)
        if not hardware:
            continue
        merged = overrides_on_top(hardware, {hw: o.set_terms() for hw, o in engine.hardware.items()})
        fitted_on = {**engine.fitted_on, **inherited}
        paths.append(write_profile(engine.model_copy(update={"hardware": merged, "fitted_on": fitted_on}), folder))
    return paths


HARDWARE_MIN_ROWS = 15
"""A hardware profile gets its own overrides when at least this many fit rows run on it ..."""
HARDWARE_MIN_BIAS = 0.10
"""... and the family fit leaves them biased by more than this (median signed error)."""
HARDWARE_TERMS = ["bandwidth_efficiency", "gemm_efficiency"]
"""Terms a hardware override fits (a chip's kernels reach a different share of its peaks)."""
COLLECTIVE_TERMS = ["allreduce_latency_us", "interconnect_efficiency"]
"""Terms a hardware override also fits when most of the chip's rows run tensor-parallel: the
all-reduce a chip's collective library and links reach (vLLM's custom all-reduce over NVLink,
RCCL over Infinity Fabric) differs from chip to chip as much as its kernels do."""


def override_terms(prepared: list[Any]) -> list[str]:
    """The terms a hardware override fits on one chip's prepared rows: :data:`HARDWARE_TERMS`,
    and :data:`COLLECTIVE_TERMS` when at least half of the rows run tensor-parallel."""
    tensor_parallel = sum((p.server.pricer.inp.tp or 1) > 1 for p in prepared)
    return HARDWARE_TERMS + (COLLECTIVE_TERMS if 2 * tensor_parallel >= len(prepared) else [])


def _fit_hardware_overrides(result: Any, prepared: list[Any]) -> Any:
    """Fit :func:`override_terms` as overrides on every hardware the family fit leaves biased."""
    import math
    from statistics import median

    from capplan.accuracy.fit import FitResult, fit_time_terms

    by_hw: dict[str, list[int]] = {}
    for i, p in enumerate(prepared):
        by_hw.setdefault(p.server.pricer.hw.name, []).append(i)
    engine = result.engine
    for hw, idx in sorted(by_hw.items()):
        if len(idx) < HARDWARE_MIN_ROWS:
            continue
        bias = median(math.expm1(result.residuals_after[i]) for i in idx)
        if abs(bias) <= HARDWARE_MIN_BIAS:
            continue
        rows = [prepared[i] for i in idx]
        sub = fit_time_terms(engine, rows, override_terms(rows), hardware=hw)
        print(f"  {hw}: {len(idx)} rows biased {bias:+.1%}; override {sub.terms}", file=sys.stderr)
        engine = sub.engine
    if engine is result.engine:
        return result
    from capplan.accuracy.fit import _evaluate

    after = [math.log(max(_evaluate(p, engine), 1e-12) / p.row.measured) for p in prepared]
    return FitResult(engine, result.terms, result.residuals_before, after, result.row_ids)


def _rounded(v: Any) -> Any:
    """A float as a profile writes it: 6 decimals, or 6 significant digits below 1e-3 (microsecond terms)."""
    if not isinstance(v, float):
        return v
    return float(f"{v:.6g}") if 0 < abs(v) < 1e-3 else round(v, 6)


def write_profile(engine: Any, folder: Path | None = None) -> Path:
    """Write ``engine`` as ``<folder>/<name>.yaml`` (default: the bundled ``engine_profiles/``)."""
    import yaml

    from capplan.resources import bundled_dir

    folder = folder or bundled_dir("engine_profiles")
    data = engine.model_dump(mode="json")
    for section in ("memory", "time"):
        data[section] = {k: _rounded(v) for k, v in data[section].items()}
    data["hardware"] = {hw: {k: _rounded(v) for k, v in terms.items() if v is not None}
                        for hw, terms in data["hardware"].items()}
    header = (
        f"# {engine.name}: {engine.description}\n"
        "# Written by `python -m capplan.accuracy.refit`: terms in `fitted_on` were fitted on those corpus rows\n"
        "# (validation/*.csv, held-out rows excluded); the others carry a citation in `sources`.\n"
    )
    path = folder / f"{engine.name}.yaml"
    path.write_text(header + yaml.safe_dump(data, sort_keys=False, width=120), encoding="utf-8")
    return path


UNIT_TERMS = {"fp8": "fp8_gemm_efficiency", "fp4": "fp4_gemm_efficiency", "weight-only": "weight_only_moe_efficiency"}
"""The kernel-class multipliers :func:`fit_unit_efficiency` fits: GEMMs on an FP8 or FP4 tensor
unit, and routed experts on weight-only kernels."""


def fit_unit_efficiency(unit: str, folder: Path | None = None) -> tuple[float, list[str]]:
    """Fit the efficiency multiplier of one kernel class (:data:`UNIT_TERMS`:
    ``fp8_gemm_efficiency`` for ``"fp8"``, ``weight_only_moe_efficiency`` for ``"weight-only"``)
    on the serving rows of every engine whose weights run on that unit (whose routed experts run
    weight-only kernels), outside the family fits: each row priced with its family's bundled
    profile, one shared multiplier, soft-L1 least squares on log ratios, rows held out by
    ``validation/split.yaml`` left out, and so are bursts replayed by the simulator
    (:data:`~capplan.accuracy.predict.BURST`), which no time term of a fit moves.

    Returns
    -------
    (multiplier, fitted_on)
        The multiplier (3 significant digits) and the row ids it was fitted on.
    """
    import math
    import warnings

    import numpy as np
    from scipy.optimize import least_squares

    from capplan.accuracy.corpus import load_corpus
    from capplan.accuracy.predict import Unsupported, engine_family, prepare_serving
    from capplan.accuracy.report import default_engines
    from capplan.errors import CapplanError
    from capplan.roofline import weight_only_experts

    if unit not in UNIT_TERMS:
        raise ValueError(f"unknown unit {unit!r}: one of {', '.join(UNIT_TERMS)}")
    term = UNIT_TERMS[unit]
    engines = default_engines()
    cases = []
    for row in load_corpus(folder):
        if row.kind != "serving" or row.held_out:
            continue
        engine = engines[engine_family(row.get("engine"))]
        with warnings.catch_warnings():  # an fp8 row on an A100 runs on its 16-bit unit: not this unit's row
            warnings.simplefilter("ignore")
            try:
                prepared = prepare_serving(row, engine)
            except (Unsupported, CapplanError):
                continue
            if prepared.replayed:  # a burst: replayed by the simulator, no term of the fit moves it
                continue
            pricer = prepared.server.pricer
            resolved = pricer.inp.resolved(pricer.hw)
            weight_only = weight_only_experts(pricer.spec, pricer.hw, pricer.inp)
        if not weight_only if unit == "weight-only" else (resolved.gemm_dtype or resolved.weight_dtype) != unit:
            continue
        cases.append((prepared, engine))

    def residuals(x: "np.ndarray") -> "np.ndarray":
        out = []
        for prepared, engine in cases:
            trial = engine.model_copy(update={"time": engine.time.model_copy(update={term: float(x[0])})})
            try:
                value = prepared.evaluate(trial)
            except (Unsupported, CapplanError):
                value = prepared.row.measured
            out.append(math.log(value / prepared.row.measured))
        return np.array(out)

    sol = least_squares(residuals, [0.8], bounds=([0.2], [1.0]), loss="soft_l1", f_scale=0.2, diff_step=1e-3)
    return float(f"{sol.x[0]:.3g}"), [p.row.id for p, _ in cases]


def write_feature_terms(fitted_on: dict[str, list[str]] | None = None, folder: Path | None = None) -> list[Path]:
    """Write :data:`FEATURE_TIME_TERMS` and their :data:`FEATURE_SOURCES` into every bundled
    profile, every other term kept; ``fitted_on`` (term -> row ids) records the rows of a
    :func:`fit_unit_efficiency` just run."""
    from capplan.engine import load_engine

    paths = []
    for spec in PROFILES:
        engine = load_engine(spec.name)
        update = {
            "time": engine.time.model_copy(update={**FEATURE_TIME_TERMS, **spec.time}),
            "sources": {**engine.sources, **FEATURE_SOURCES},
            "fitted_on": {**engine.fitted_on, **{f"time.{t}": ids for t, ids in (fitted_on or {}).items()}},
        }
        paths.append(write_profile(engine.model_copy(update=update), folder))
    return paths


def _narrow_fit(family: str, terms: list[str] | None, hardware: str | None, folder: Path | None, write: bool) -> dict[str, Any]:
    """Fit ``terms`` of one engine family on the bundled profiles, on that family's fit rows
    (:func:`family_fit_rows`; those on ``hardware`` only, fitted as its overrides, when given;
    ``terms`` ``None``: :func:`override_terms`), and write them into every bundled profile of the
    family with their ``fitted_on`` row ids (``write``)."""
    from capplan.accuracy.corpus import load_corpus
    from capplan.accuracy.fit import fit_time_terms
    from capplan.engine import load_engine

    names = [p.name for p in PROFILES if p.family == family]
    if not names:
        raise ValueError(f"no bundled profile of family {family!r}")
    base = load_engine(names[0])
    rows = [r for r in family_fit_rows(load_corpus(folder), family) if hardware is None or r.get("hardware") == hardware]
    prepared = _prepare(rows, base, "serving")
    if not prepared:
        raise ValueError(f"no fit row of family {family!r}" + (f" on {hardware!r}" if hardware else ""))
    terms = override_terms(prepared) if terms is None else terms
    result = fit_time_terms(base, prepared, terms, hardware=hardware)
    if write:
        for name in names:
            engine = load_engine(name)
            if hardware is None:
                update: dict[str, Any] = {"time": engine.time.model_copy(update=result.terms)}
            else:
                update = {"hardware": {**engine.hardware, hardware: result.engine.hardware[hardware]}}
            prefix = f"hardware.{hardware}" if hardware else "time"
            update["fitted_on"] = {**engine.fitted_on, **{f"{prefix}.{t}": result.row_ids for t in terms}}
            write_profile(engine.model_copy(update=update))
        if family == BASE_FAMILY and hardware is not None:
            write_inherited_overrides(folder)
    return {"terms": result.terms, "rows": result.row_ids, "before": result.median_abs_error_before,
            "after": result.median_abs_error_after}


def fit_hardware_override(family: str, hardware: str, folder: Path | None = None, write: bool = True) -> dict[str, Any]:
    """Fit one chip's time-term overrides for an engine family on the bundled profiles, outside
    the family fit (which every other chip's rows keep as it is).

    The rows are the family's serving rows on ``hardware`` that take part in the family fit
    (:func:`capplan.accuracy.predict.fits_family_terms`) and that ``validation/split.yaml`` does
    not hold out (:func:`family_fit_rows`); the terms are :func:`override_terms`, as in the full
    refit. The override (with its ``fitted_on`` row ids) is
    written into every bundled profile of the family (``write``).

    Returns
    -------
    dict
        ``terms`` (fitted values), ``rows`` (ids), ``before`` / ``after`` (median absolute error
        on the rows).
    """
    return _narrow_fit(family, None, hardware, folder, write)


def fit_family_terms(family: str, terms: list[str], folder: Path | None = None, write: bool = True) -> dict[str, Any]:
    """Refit some of an engine family's time terms on the bundled profiles, the others (and every
    chip's overrides) kept: after a change to the model that one term absorbed (e.g. the wait
    for a step under way, which the request overhead had stood in for).

    The rows are the family's fit rows (:func:`family_fit_rows`); the fitted values (with their
    ``fitted_on`` row ids) are written into every bundled profile of the family (``write``).
    Returns what :func:`fit_hardware_override` returns; an unknown term raises
    :class:`~capplan.errors.InputError` (:func:`~capplan.accuracy.fit.fit_time_terms`).
    """
    return _narrow_fit(family, terms, None, folder, write)


def fit_profile_memory(name: str, folder: Path | None = None, write: bool = True) -> dict[str, Any]:
    """Refit one bundled vLLM profile's memory terms (its :class:`ProfileSpec` ``fit_memory``) on
    the start-up logs of the versions it reproduces, its time terms kept: after a change to the
    memory model or to the logs' stated settings (e.g. the sampler path a log names).

    The rows are the KV rows ``validation/split.yaml`` does not hold out whose version the profile
    covers (:func:`~capplan.accuracy.report.kv_profile_name`); the profile's fixed memory terms
    (``ProfileSpec.memory``) and their sources are set first. The fitted values, with their
    ``fitted_on`` row ids, are written into the profile (``write``).

    Returns
    -------
    dict
        ``terms`` (fitted values), ``rows`` (ids), ``before`` / ``after`` (mean absolute error
        on the rows).
    """
    from capplan.accuracy.corpus import load_corpus
    from capplan.accuracy.report import kv_profile_name
    from capplan.engine import load_engine

    spec = next((p for p in PROFILES if p.name == name), None)
    if spec is None or not spec.fit_memory:
        raise ValueError(f"no bundled profile {name!r} with fitted memory terms "
                         f"({', '.join(p.name for p in PROFILES if p.fit_memory)})")
    engine = load_engine(name)
    engine = engine.model_copy(update={"memory": engine.memory.model_copy(update=spec.memory),
                                       "sources": {**engine.sources, **spec.sources}})
    rows = [r for r in load_corpus(folder) if r.kind == "kv" and not r.held_out and kv_profile_name(r) == name]
    prepared = _prepare(rows, engine, "kv")
    if not prepared:
        raise ValueError(f"no start-up log row of {name!r}")
    engine = with_sampler_paths(engine, {engine.memory.sampler_path(p.inputs.sampler) for p in prepared})

    def mean_error(e: Any) -> float:
        return sum(abs(p.evaluate(e) / p.row.measured - 1.0) for p in prepared) / len(prepared)

    fitted, values = fit_memory_terms(engine, prepared, spec.fit_memory)
    ids = [p.row.id for p in prepared]
    fitted = fitted.model_copy(update={"fitted_on": {**fitted.fitted_on, **{f"memory.{t}": ids for t in values}}})
    if write:
        write_profile(fitted)
    return {"terms": values, "rows": ids, "before": mean_error(engine), "after": mean_error(fitted)}


def _narrow_fit_command(flag: str, run: Any, example: str) -> None:
    """``--terms`` / ``--hardware FAMILY:ARG``: run ``run(family, arg)`` and print its fit in one
    line, or exit with a one-line message (a missing argument, an unknown family, chip or term)."""
    from capplan.errors import CapplanError

    family, _, arg = (sys.argv[2] if len(sys.argv) > 2 else "").partition(":")
    if not family or not arg:
        sys.exit(f"{flag} {example}")
    try:
        out = run(family, arg)
    except (ValueError, CapplanError) as exc:
        sys.exit(f"{flag} {family}:{arg}: {exc}")
    print(f"{family} ({arg}): {out['terms']} fitted on {len(out['rows'])} rows; "
          f"median |error| {out['before']:.1%} -> {out['after']:.1%}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--unit"]:
        unit = sys.argv[2] if len(sys.argv) > 2 else ""
        if unit not in UNIT_TERMS:
            sys.exit(f"--unit {unit}: one of {', '.join(UNIT_TERMS)}")
        term = UNIT_TERMS[unit]
        value, ids = fit_unit_efficiency(unit)
        print(f"{term} {value} fitted on {len(ids)} rows: {ids}")
        if sys.argv[3:4] == ["--write"]:
            if value != FEATURE_TIME_TERMS[term]:
                sys.exit(f"--write: set FEATURE_TIME_TERMS[{term!r}] = {value} (and its FEATURE_SOURCES citation) first")
            for path in write_feature_terms({term: ids}):
                print(f"wrote {path}")
    elif sys.argv[1:2] == ["--terms"]:
        _narrow_fit_command("--terms", lambda f, a: fit_family_terms(f, a.split(",")),
                            "FAMILY:TERM[,TERM...], e.g. --terms vllm:request_overhead_s")
    elif sys.argv[1:2] == ["--hardware"]:
        _narrow_fit_command("--hardware", fit_hardware_override, "FAMILY:CHIP, e.g. --hardware vllm:mi300x")
    elif sys.argv[1:2] == ["--memory"]:
        try:
            out = fit_profile_memory(sys.argv[2] if len(sys.argv) > 2 else "")
        except ValueError as exc:
            sys.exit(f"--memory: {exc}")
        print(f"{sys.argv[2]}: {out['terms']} fitted on {len(out['rows'])} rows; "
              f"mean |error| {out['before']:.2%} -> {out['after']:.2%}")
    elif sys.argv[1:2] in (["-h"], ["--help"]):
        print(__doc__)
    elif sys.argv[1:]:
        sys.exit(f"{sys.argv[1]}: unknown argument (--unit, --terms, --hardware, --memory, --help; none: refit every profile)")
    else:
        refit()
