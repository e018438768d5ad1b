"""Serving-engine profiles: what an engine version adds on top of the chip's physics.

A hardware profile describes the chip (memory, bandwidth, peak FLOP/s, links). An engine
profile (``engine_profiles/*.yaml``, validated by :class:`EngineProfile`) describes what one
serving engine and version does with it:

* **memory terms** -- how it sizes the KV cache at start-up: the budget rule, the default
  ``gpu_memory_utilization`` and batch limits, the sampler's and the forward pass's profiling
  peak, non-torch memory (CUDA context, NCCL buffers) by parallelism, CUDA-graph memory, the
  paged block size;
* **time terms** -- how long an engine step takes beyond the roofline: the fraction of peak
  bandwidth and FLOP/s its kernels reach (GEMM efficiency grows with the tokens in the step),
  how compute and memory time overlap, the fixed host time per step and per sequence, the
  tensor-parallel all-reduce latency and bus efficiency, CUDA-graph batch padding, mixture-of-
  experts grouped-GEMM efficiency.

Every value carries its source: a citation, or the corpus rows it was fitted on
(``fitted_on``), so ``capplan accuracy`` can report the error of the fit on the rows that were
held out. Per-hardware differences of one engine (kernels that reach a different share of a
chip's bandwidth) are ``hardware`` overrides of the time terms.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from capplan import resources
from capplan.yamlio import load_model

BudgetRule = Literal["fraction_of_total", "fraction_of_free", "static_fraction"]

_STRICT = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class ByGpuClass(BaseModel):
    """A default that differs between large GPUs and the others (vLLM's rule)."""

    model_config = _STRICT

    large: int = Field(ge=1)
    """Value on large GPUs (at least ``MemoryTerms.large_gpu_min_gib`` and not excluded)."""
    small: int = Field(ge=1)
    """Value on the other GPUs."""


class MemoryTerms(BaseModel):
    """How the engine sizes its KV cache at start-up (all per GPU)."""

    model_config = _STRICT

    budget_rule: BudgetRule = "fraction_of_total"
    """``fraction_of_total`` (vLLM: total x utilisation - weights - activation peak - non-torch -
    graphs), ``fraction_of_free`` (TensorRT-LLM: (total - weights - activation peak - non-torch) x
    fraction), ``static_fraction`` (SGLang: total x fraction - weights)."""
    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1)
    """Default fraction the budget rule applies (vLLM ``--gpu-memory-utilization``, TensorRT-LLM
    ``free_gpu_memory_fraction``, SGLang ``mem_fraction_static``)."""
    block_size: int = Field(default=16, ge=1)
    """Paged-KV block size [tokens]."""
    max_num_seqs: ByGpuClass = ByGpuClass(large=1024, small=256)
    """Default scheduler limit on running sequences [sequences]."""
    max_num_batched_tokens: ByGpuClass = ByGpuClass(large=8192, small=2048)
    """Default scheduler token budget per step [tokens]."""
    large_gpu_min_gib: float = Field(default=70.0, ge=0)
    """GPUs with at least this much memory take the ``large`` defaults [GiB] ..."""
    large_gpu_excludes: list[str] = ["a100"]
    """... unless their profile name contains one of these strings."""
    sampler_bytes_per_seq_vocab: float = Field(default=38.6, ge=0)
    """Peak of the sampler warm-up per (sequence x vocabulary entry) [bytes], when it runs the
    PyTorch top-k/top-p path (vLLM sorts every row)."""
    flashinfer_sampler_bytes_per_seq_vocab: float | None = Field(default=None, ge=0)
    """The same peak when the warm-up runs FlashInfer's top-k/top-p kernels [bytes]; ``None``: not
    measured for this engine version (a FlashInfer sampler is then refused, not guessed)."""
    sampler: Literal["pytorch", "flashinfer"] = "pytorch"
    """The top-k/top-p path the engine's start-up warm-up takes when the user does not say (vLLM up
    to 0.11.0 takes FlashInfer's whenever FlashInfer is installed; which depends on the install)."""
    activation_bytes_per_element: float = Field(default=2.0, gt=0)
    """Bytes per activation element in the forward profiling pass [bytes]."""
    non_torch_gib_single: float = Field(default=0.15, ge=0)
    """Non-torch memory on one GPU (CUDA context, cuBLAS workspace) [GiB]."""
    non_torch_gib_nvlink: float = Field(default=0.55, ge=0)
    """Non-torch memory with tensor/pipeline parallelism over NVLink-class links (NCCL buffers) [GiB]."""
    non_torch_gib_pcie: float = Field(default=0.25, ge=0)
    """Non-torch memory with tensor/pipeline parallelism over PCIe [GiB]."""
    nvlink_min_gbps: float = Field(default=100.0, gt=0)
    """Intra-node bandwidth at or above which links count as NVLink-class [decimal GB/s]."""
    cudagraph_gib: float = Field(default=0.0, ge=0)
    """CUDA-graph memory charged to the KV budget [GiB]; 0 when graphs are captured after the KV
    cache is allocated (inside the headroom the utilisation leaves)."""

    def sampler_path(self, given: str | None = None) -> str:
        """The sampler warm-up's top-k/top-p path: ``given``, else the profile's default."""
        return given or self.sampler

    def sampler_bytes(self, given: str | None = None, profile: str = "the engine profile") -> float:
        """Peak bytes per (sequence x vocabulary entry) of the sampler warm-up on its path
        (:data:`SAMPLER_TERMS`); a path the profile has not measured raises
        :class:`~capplan.errors.InputError` naming ``profile``."""
        from capplan.errors import InputError

        path = self.sampler_path(given)
        if path not in SAMPLER_TERMS:
            raise InputError(f"sampler {path!r}: one of {', '.join(SAMPLER_TERMS)}")
        value = getattr(self, SAMPLER_TERMS[path])
        if value is None:
            raise InputError(f"sampler {path}: {profile} has no memory.{SAMPLER_TERMS[path]} (its {path} sampler peak is "
                             "not measured); use --sampler pytorch, --activation-gib, or --engine vllm-0.10 (vLLM <= 0.11.0)")
        return float(value)

    def is_large(self, hw_name: str, mem_total_gib: float) -> bool:
        """Whether a GPU takes the ``large`` defaults."""
        return mem_total_gib >= self.large_gpu_min_gib and not any(x in hw_name.lower() for x in self.large_gpu_excludes)


SAMPLER_TERMS = {"pytorch": "sampler_bytes_per_seq_vocab", "flashinfer": "flashinfer_sampler_bytes_per_seq_vocab"}
"""The memory term of each sampler warm-up path (:meth:`MemoryTerms.sampler_bytes`)."""

EAGER_S_PER_LAYER = 0.00034
"""Host time per decoder layer that eager mode adds to a step [s]: vllm-project/vllm-omni issue
#7960 (2026-09-22 comment), Qwen2.5-Omni-7B's thinker (a 28-layer Qwen2.5-7B decoder) on one
A800-80GB, vLLM 0.29: TPOT ~22-23 ms with ``enforce_eager: true`` against ~13 ms with CUDA
graphs (text and audio queries), (22.5 - 13) / 28 = 0.34 ms per layer. One measurement at batch 1
on one model; the term is a host cost per layer, so it is taken for every model, batch and chip
(ASSUMPTION)."""


class TimeTerms(BaseModel):
    """How long an engine step takes beyond the roofline's FLOPs and bytes.

    ``step = max(compute, memory) + communication + step_overhead_s + per_sequence_s x S``,
    compute at ``gemm_efficiency x T / (T + gemm_half_tokens)`` of peak for the weight GEMMs of a
    step of ``T`` tokens, memory at ``bandwidth_efficiency`` of peak bandwidth. Every term is
    affine in the step's work, so the simulator prices runs of steps in closed form with the
    same terms. Not modelled: partial overlap of compute and memory near the ridge, and
    CUDA-graph batch padding (decode batches are memory-bound, so padding changes little).
    """

    model_config = _STRICT

    bandwidth_efficiency: float = Field(default=0.8, gt=0, le=1)
    """Fraction [0-1] of datasheet HBM bandwidth that weight, KV and activation traffic reaches."""
    gemm_efficiency: float = Field(default=0.7, gt=0, le=1)
    """Fraction [0-1] of dense peak FLOP/s that large weight GEMMs reach."""
    gemm_half_tokens: float = Field(default=0.0, ge=0)
    """Tokens per step at which the weight GEMMs reach half of ``gemm_efficiency`` [tokens]; 0
    means a constant efficiency. A routed expert's GEMM counts its own positions, ``k / E`` of
    the step's over all data-parallel ranks (a grouped GEMM of small per-expert blocks)."""
    attention_efficiency: float = Field(default=0.7, gt=0, le=1)
    """Fraction [0-1] of dense 16-bit peak the attention products and LM head reach."""
    moe_gemm_efficiency: float = Field(default=1.0, gt=0, le=1)
    """Multiplier [0-1] on GEMM efficiency for the routed experts' grouped GEMMs."""
    fp4_gemm_efficiency: float = Field(default=1.0, gt=0, le=1)
    """Multiplier [0-1] on GEMM efficiency for GEMMs on an FP4 tensor unit (nvfp4/mxfp4 weights on
    Blackwell-class chips): block-scaled FP4 kernels reach a smaller share of their datasheet peak
    than FP8/BF16 ones; no effect on other units."""
    fp8_gemm_efficiency: float = Field(default=1.0, gt=0, le=1)
    """Multiplier [0-1] on GEMM efficiency for GEMMs on an FP8 tensor unit (fp8 weights on
    Hopper-, Ada- and Blackwell-class chips): scaled FP8 kernels reach a smaller share of their
    datasheet peak than 16-bit ones; no effect on other units (an A100 runs fp8 weights on its
    16-bit unit)."""
    weight_only_moe_efficiency: float = Field(default=1.0, gt=0, le=1)
    """Multiplier [0-1] on the GEMM and bandwidth efficiency of routed-expert GEMMs whose weights
    are narrower than the 16-bit tensor unit they run on (weight-only kernels that dequantise in
    the GEMM, e.g. vLLM's W4A16 MXFP4 MoE on Hopper for gpt-oss): they read the narrow weights
    and multiply at a smaller share of the bandwidth and FLOP/s than 16-bit grouped GEMMs; no
    effect on dense layers or on experts that run on their own unit."""
    gqa_kv_reread: float = Field(default=0.0, ge=0, le=1)
    """Share [0-1] of a grouped-query attention group's other query heads that read their shared
    K/V head from HBM again in a step's attention over cached positions. 0: each K/V head is read
    once per step for its whole group (FlashAttention, FlashInfer, TensorRT-LLM's XQA kernel); 1:
    once per query head, as a decode kernel that runs one query head per thread block without
    sharing the group's loads does (TensorRT-LLM's masked multi-head attention for GQA before the
    XQA kernel, releases up to 0.6): the cached-KV bytes of a step grow ``1 + (G - 1) x`` this,
    ``G`` = query heads per K/V head on a GPU. No effect on multi-head attention (``G = 1``) or on
    latent (MLA) attention. Prices every cached position a step reads; exact for engines whose
    prompt steps read none (no chunked prompts, no prefix reuse), as TensorRT-LLM's of that time."""
    step_overhead_s: float = Field(default=0.002, ge=0)
    """Fixed host time per engine step (scheduling, launch, sampling set-up) [s]."""
    enforce_eager: bool = False
    """Steps run in eager-mode PyTorch (vLLM ``--enforce-eager``): no CUDA graphs, so the host
    launches every kernel of every layer and each step takes ``eager_s_per_layer`` more per
    decoder layer; no CUDA-graph memory is reserved."""
    eager_s_per_layer: float = Field(default=EAGER_S_PER_LAYER, ge=0, le=1)
    """Host time an eager step adds per decoder layer over a CUDA-graph step [s] (used with
    ``enforce_eager``, and for steps beyond ``cuda_graph_max_batch``)."""
    cuda_graph_max_batch: int | None = Field(default=None, ge=1)
    """Largest decode batch the engine captures a CUDA graph for (SGLang ``--cuda-graph-max-bs``,
    vLLM ``max_cudagraph_capture_size``): a step with more sequences runs without a graph and pays
    ``eager_s_per_layer`` per decoder layer, as an eager step does; ``None``: every batch is
    captured (or the engine needs no graphs)."""
    per_sequence_s: float = Field(default=0.0, ge=0)
    """Host time per sequence in a step (scheduling, sampling, detokenisation) [s]."""
    request_overhead_s: float = Field(default=0.0, ge=0)
    """Fixed time a request spends outside engine steps before its first token (API server,
    tokenisation, admission, the first token's streaming) [s]; added to TTFT and latency."""
    interconnect_efficiency: float = Field(default=0.7, gt=0, le=1)
    """Fraction [0-1] of the per-GPU link bandwidth a tensor-parallel all-reduce reaches."""
    allreduce_latency_us: float = Field(default=10.0, ge=0)
    """Fixed latency of one all-reduce [microseconds]."""
    chunked_prefill: bool = True
    """Prompts are split into chunks of the token budget (vLLM V1, SGLang); ``false``: a prompt is
    prefilled whole in one step (TensorRT-LLM without ``enable_chunked_context``; ``mixed_prefill``
    says whether that step also advances the decodes)."""
    mixed_prefill: bool = True
    """Prompt positions share a step with the running decodes (vLLM V1, TensorRT-LLM's in-flight
    batching; SGLang with ``--enable-mixed-chunk``); ``false``: a step holds either prompt chunks
    (up to the whole token budget) or decodes, and the decodes wait while prompts are prefilled
    (SGLang's default)."""
    capacity_scheduler_policy: Literal["max_utilization", "guaranteed_no_evict"] = "max_utilization"
    """How a request is admitted against the KV cache (TensorRT-LLM's ``capacity_scheduler_policy``):
    ``max_utilization`` admits on the KV a request holds now and preempts a running request when
    the cache runs out (vLLM, SGLang); ``guaranteed_no_evict`` admits a request only when the cache
    can hold its prompt and its whole output, reserved up front, and never preempts (TensorRT-LLM's
    default): fewer requests run at once, and none is recomputed."""
    moe_load_imbalance: float = Field(default=1.0, ge=1, le=16)
    """Ratio [>= 1] of the busiest GPU's routed-expert tokens to the mean across an expert-parallel
    group (``ep > 1``), after the engine's expert load balancer (EPLB): the step waits for the
    busiest GPU, so it multiplies the routed experts' GEMM time and all-to-all volume. 1 is a
    perfect balance; no effect at ``ep = 1``."""
    alltoall_efficiency: float = Field(default=0.96, gt=0, le=1)
    """Fraction [0-1] of the per-GPU link bandwidth that expert-parallel dispatch and combine
    (all-to-all) reach; no effect at ``ep = 1``. Default: DeepEP's low-latency dispatch at EP32 on
    H800 with one 400 Gb/s CX7 NIC per GPU, 48 of ~50 GB/s (deepseek-ai/DeepEP docs/legacy.md,
    "Low-latency kernels with pure RDMA")."""
    tbo_overlap_efficiency: float = Field(default=1.0, ge=0, le=1)
    """Fraction [0-1] of the shorter of a step's compute-or-memory time and its expert-parallel
    all-to-all that two-batch overlap hides (1: the step takes the longer of the two); no effect
    without ``two_batch_overlap``."""
    host_link_efficiency: float = Field(default=0.823, gt=0, le=1)
    """Fraction [0-1] of the GPU-host link bandwidth (``host_link_bandwidth_gbps``) that a large KV
    offload copy streams at. Default: fitted with ``host_copy_latency_s`` to the copy rates of the
    vLLM blog's "Inside vLLM's New KV Offloading Connector" (2026-01-08), Figure 4 (H100,
    host-to-device DMA, 4 KiB-16 MiB blocks; ``validation/sources/host_copy_dma.csv``,
    :func:`capplan.offload.fit_host_copy`): 52.7 of PCIe Gen5 x16's 64 GB/s each way."""
    host_copy_latency_s: float = Field(default=3.54e-6, ge=0)
    """Fixed cost [s] of one KV offload copy, paid once per physical block (``block_size``
    positions of every layer) on top of streaming its bytes. Default: fitted with
    ``host_link_efficiency`` to the same Figure 4 (13 block sizes, every rate within 6%)."""
    kv_transfer_efficiency: float = Field(default=0.475, gt=0, le=1)
    """Fraction [0-1] of the network bandwidth that a disaggregated deployment's prefill-to-decode
    KV transfer reaches. Default: Mooncake Transfer Engine, "up to ... 190 GB/s of bandwidth in
    ... 8x400 Gbps RoCE networks" for 40 GB (kvcache-ai/Mooncake README), 190 of 400 GB/s."""

    @property
    def graph_limit(self) -> float:
        """Largest step (in sequences) run in a CUDA graph: ``cuda_graph_max_batch``, or ``inf``
        when every step is captured or steps run eagerly anyway."""
        if self.cuda_graph_max_batch is None or self.enforce_eager:
            return float("inf")
        return float(self.cuda_graph_max_batch)

    def schedule(self) -> dict[str, Any]:
        """The scheduler behaviour a :class:`capplan.benchmark.Server` takes from these terms."""
        return {"chunked_prefill": self.chunked_prefill, "request_overhead_s": self.request_overhead_s,
                "mixed_prefill": self.mixed_prefill, "capacity_scheduler_policy": self.capacity_scheduler_policy}


class TimeOverrides(BaseModel):
    """Time terms that differ on one hardware profile (``None`` keeps the engine's)."""

    model_config = _STRICT

    bandwidth_efficiency: float | None = Field(default=None, gt=0, le=1)
    """Override of ``TimeTerms.bandwidth_efficiency`` on this hardware."""
    gemm_efficiency: float | None = Field(default=None, gt=0, le=1)
    """Override of ``TimeTerms.gemm_efficiency`` on this hardware."""
    attention_efficiency: float | None = Field(default=None, gt=0, le=1)
    """Override of ``TimeTerms.attention_efficiency`` on this hardware."""
    step_overhead_s: float | None = Field(default=None, ge=0)
    """Override of ``TimeTerms.step_overhead_s`` on this hardware [s]."""
    allreduce_latency_us: float | None = Field(default=None, ge=0)
    """Override of ``TimeTerms.allreduce_latency_us`` on this hardware [us] (its collective library
    and links: vLLM's custom all-reduce over NVLink, RCCL over Infinity Fabric, NCCL over PCIe)."""
    interconnect_efficiency: float | None = Field(default=None, gt=0, le=1)
    """Override of ``TimeTerms.interconnect_efficiency`` on this hardware."""

    def set_terms(self) -> dict[str, float]:
        """The terms this hardware overrides (those not ``None``), by name."""
        return {k: v for k, v in self.model_dump().items() if v is not None}


CORPUS_FIT = "validation corpus fit"
"""The ``calibration`` of the profiles ``python -m capplan.accuracy.refit`` fits on the validation corpus."""


class EngineProfile(BaseModel):
    """One serving engine and version: memory terms, time terms, and where each came from."""

    model_config = _STRICT

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9.\-]*$")
    """Short lower-case identifier, e.g. ``vllm-0.19``; equals the file stem for bundled files."""
    engine: Literal["vllm", "sglang", "trtllm", "other"]
    """Engine family."""
    version: str = Field(min_length=1)
    """Engine version (or range) whose behaviour the profile reproduces."""
    description: str = ""
    """What the profile is for and how it was made."""
    memory: MemoryTerms = MemoryTerms()
    """Start-up KV sizing terms."""
    time: TimeTerms = TimeTerms()
    """Step-time terms."""
    hardware: dict[str, TimeOverrides] = {}
    """Per-hardware-profile overrides of the time terms, keyed by hardware profile name."""
    calibration: str = "defaults"
    """Which calibration the values come from: ``defaults``, the corpus fit (:data:`CORPUS_FIT`,
    with any settings a command adds after it), or a user's files."""

    @property
    def corpus_fitted(self) -> bool:
        """Whether the values are the validation corpus fit's (a bundled profile, or a copy of one,
        with or without a command's settings), not a user's calibration."""
        return self.calibration.startswith(CORPUS_FIT)
    fitted_on: dict[str, list[str]] = {}
    """Corpus row ids (or input files) each fitted term was fitted on, keyed by term name."""
    sources: dict[str, str] = {}
    """Citation per term that is not fitted (dotted keys: ``memory.block_size``)."""

    @model_validator(mode="after")
    def _check(self) -> "EngineProfile":
        known = {f"memory.{k}" for k in MemoryTerms.model_fields} | {f"time.{k}" for k in TimeTerms.model_fields}
        bad = sorted(k for k in [*self.sources, *self.fitted_on] if k not in known and not k.startswith("hardware."))
        if bad:
            raise ValueError(f"sources/fitted_on name unknown terms: {', '.join(bad)}")
        return self

    def time_on(self, hardware: str) -> TimeTerms:
        """The time terms on one hardware profile (its overrides applied)."""
        o = self.hardware.get(hardware)
        if o is None:
            return self.time
        return self.time.model_copy(update=o.set_terms())

    def with_settings(
        self,
        *,
        gpu_memory_utilization: float | None = None,
        block_size: int | None = None,
        max_num_seqs: int | None = None,
        max_num_batched_tokens: int | None = None,
        enforce_eager: bool | None = None,
        capacity_scheduler_policy: str | None = None,
    ) -> "EngineProfile":
        """This profile with vLLM engine arguments applied to its memory terms (on every GPU
        class), its ``calibration`` naming them; ``self`` when none is given. ``enforce_eager``
        sets the time term of that name and, when true, drops the CUDA-graph memory;
        ``capacity_scheduler_policy`` (``trtllm-bench --scheduler_policy``) sets the admission.

        Raises
        ------
        InputError
            A value out of range, naming the engine argument (``--max-num-seqs 0: ...``).
        """
        from pydantic import ValidationError

        from capplan.errors import InputError

        given = {
            "gpu_memory_utilization": gpu_memory_utilization, "block_size": block_size,
            "max_num_seqs": max_num_seqs, "max_num_batched_tokens": max_num_batched_tokens,
        }
        given = {k: v for k, v in given.items() if v is not None}
        if capacity_scheduler_policy is not None and capacity_scheduler_policy != self.time.capacity_scheduler_policy:
            policies = ("max_utilization", "guaranteed_no_evict")
            if capacity_scheduler_policy not in policies:
                raise InputError(f"--scheduler-policy {capacity_scheduler_policy}: one of {', '.join(policies)}")
            policy = self.model_copy(update={
                "time": self.time.model_copy(update={"capacity_scheduler_policy": capacity_scheduler_policy}),
                "calibration": f"{self.calibration}; --scheduler-policy {capacity_scheduler_policy}",
            })
            return policy.with_settings(**given, enforce_eager=enforce_eager)
        if enforce_eager and self.engine == "trtllm":
            raise InputError(f"--enforce-eager: engine profile {self.name} is TensorRT-LLM, which has no eager mode "
                             "(it is vLLM's --enforce-eager; SGLang's --disable-cuda-graph)")
        if enforce_eager is not None and enforce_eager != self.time.enforce_eager:
            eager = self.model_copy(update={
                "time": self.time.model_copy(update={"enforce_eager": enforce_eager}),
                "memory": self.memory.model_copy(update={"cudagraph_gib": 0.0}) if enforce_eager else self.memory,
                "calibration": f"{self.calibration}; --enforce-eager {str(enforce_eager).lower()}",
            })
            return eager.with_settings(**given) if given else eager
        if not given:
            return self
        memory = self.memory.model_dump()
        for key, value in given.items():
            memory[key] = {"large": value, "small": value} if key in ("max_num_seqs", "max_num_batched_tokens") else value
        note = ", ".join(f"--{k.replace('_', '-')} {v:g}" for k, v in given.items())
        try:
            return EngineProfile.model_validate({**self.model_dump(), "memory": memory, "calibration": f"{self.calibration}; {note}"})
        except ValidationError as exc:
            err = exc.errors(include_url=False)[0]
            key = next((str(p) for p in err["loc"] if str(p) in given), "")
            raise InputError(f"--{key.replace('_', '-')} {given.get(key)}: {err['msg'].lower()}") from None


DEFAULT_ENGINE = "vllm-0.19"
"""Engine profile used when none is named: vLLM 0.17-0.19, whose start-up arithmetic and step
times ``capplan accuracy`` reports against published measurements."""

ALIASES = {"vllm": DEFAULT_ENGINE}
"""Names that stand for a bundled profile (``--engine vllm`` is the default vLLM profile)."""


def load_engine(name_or_path: str | Path | None = None) -> EngineProfile:
    """Load a bundled engine profile by name (``vllm-0.19``) or any engine-profile YAML by path.

    Raises
    ------
    NotFoundError
        Unknown name (the message lists the bundled ones).
    InputError
        Invalid file (the message names the file, the field and the line).
    """
    name = name_or_path or DEFAULT_ENGINE
    path = resources.resolve("engine_profiles", ALIASES.get(str(name), name))
    return load_model(path, EngineProfile)


@functools.lru_cache(maxsize=1)
def default_engine() -> EngineProfile:
    """The default engine profile (:data:`DEFAULT_ENGINE`), loaded once."""
    return load_engine(DEFAULT_ENGINE)


def list_engines() -> list[str]:
    """Names of the bundled engine profiles."""
    return resources.bundled_names("engine_profiles")
