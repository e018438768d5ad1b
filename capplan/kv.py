"""KV-cache memory and concurrency: bytes per token, the per-GPU memory budget, capacity.

The KV formula for a standard decoder with grouped-query attention::

    M_KV = 2 x L x B x S x H_kv x d_h x b          [bytes]

(2 for K and V, ``L`` layers, ``B`` sequences, ``S`` cached positions, ``H_kv`` KV heads of width
``d_h``, ``b`` bytes per element). It is rewritten, not applied mechanically, for:

* tensor parallelism: each GPU holds ``max(1, H_kv / tp)`` KV heads (heads are replicated when
  ``tp`` exceeds the KV head count, as vLLM does);
* multi-head latent attention (DeepSeek-V3): one compressed latent of
  ``kv_lora_rank + qk_rope_head_dim`` elements per layer and token, no factor 2, *not* split
  across tensor-parallel ranks;
* sliding-window layers: a sequence holds at most ``window`` positions (plus one block);
* linear-attention / state-space layers: a constant per-sequence state, no per-token KV;
* pipeline parallelism: the layers of the fullest stage;
* quantised caches: ``b`` includes per-token-head scales with ``kv_scale="token_head"``
  (:func:`capplan.units.kv_element_bytes`).

Weights per GPU (:func:`weights_bytes_per_gpu`) follow the parallel layout: ``1/tp`` of the
decoder, and with data-parallel attention and expert parallelism (``ep = tp x dp``) the routed
experts over all ``tp x dp`` GPUs (``docs/features.md``).

The budget per GPU follows the arithmetic serving engines run at start-up (vLLM v1,
``gpu_worker.determine_available_memory``; see ``docs/kv.md``)::

    kv_budget = usable_mem x gpu_mem_util - weights - activation_peak - runtime_overhead - graph

and the capacity is rounded down to whole paged blocks::

    kv_capacity_blocks = floor(kv_budget / (block_size x kv_bytes_per_token_per_gpu))
    kv_capacity_tokens = kv_capacity_blocks x block_size

GiB are 2^30 bytes throughout.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from capplan.errors import DoesNotFitError, InputError
from pydantic import BaseModel, ConfigDict, Field, model_validator

from capplan.engine import EngineProfile, MemoryTerms
from capplan.options import Options
from capplan.units import (
    GIB,
    KV_DTYPE_BYTES,
    MAX_CONTEXT_TOKENS,
    MAX_GPUS,
    MAX_MEM_GIB,
    MAX_SEQUENCES,
    WEIGHT_DTYPE_BYTES,
    KVDtype,
    KVScale,
    WeightDtype,
    dtype_bytes,
    kv_element_bytes,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

    import numpy as np

    from capplan.hardware import HardwareProfile
    from capplan.modelspec import ModelSpec

__all__ = [
    "GIB", "KV_DTYPE_BYTES", "WEIGHT_DTYPE_BYTES", "KVLayout", "kv_layout", "kv_stage_layouts", "DEFAULTS",
    "default_max_num_batched_tokens", "default_max_num_seqs", "kv_budget_bytes", "KVInputs", "KVResult", "check_parallelism", "kv_bytes_per_token_per_layer", "kv_bytes_per_token",
    "kv_bytes_per_sequence_per_gpu", "weights_bytes_per_gpu", "activation_bytes_per_gpu", "runtime_overhead_bytes",
    "compute_kv", "KVGrid", "kv_grid", "check_expert_parallelism", "resolve_dp", "routed_expert_params",
    "routed_expert_bytes_per_gpu",
]


DEFAULTS = MemoryTerms()
"""Memory terms used without an engine profile (vLLM V1 0.10-0.11, fitted to the start-up logs in
``tests/data/engine_startup_logs.yaml``; see ``docs/kv.md``). The activation peak is the larger of
the forward pass over ``max_num_batched_tokens`` tokens (at the MLP of a dense layer the residual,
the layer input, the gate/up projection, its activation and the output coexist) and the sampler
warm-up over ``max_num_seqs`` sequences (about 38.6 bytes per sequence x vocabulary entry in these
versions)."""


def default_max_num_batched_tokens(hw: "HardwareProfile", terms: MemoryTerms = DEFAULTS) -> int:
    """The engine's default scheduler token budget on ``hw`` [tokens]."""
    large = terms.is_large(hw.name, hw.mem_total_gib)
    return terms.max_num_batched_tokens.large if large else terms.max_num_batched_tokens.small


def default_max_num_seqs(hw: "HardwareProfile", terms: MemoryTerms = DEFAULTS) -> int:
    """The engine's default limit on running sequences on ``hw`` [sequences]."""
    large = terms.is_large(hw.name, hw.mem_total_gib)
    return terms.max_num_seqs.large if large else terms.max_num_seqs.small


MAX_BLOCK_TOKENS = 4096
"""Largest ``--block-size`` taken [tokens]: engines page KV in 1-256-token blocks (vLLM's
``--block-size`` choices, SGLang's page size, TensorRT-LLM's ``tokens_per_block``), and vLLM
sizes a hybrid model's attention blocks up to about a thousand tokens to match its state pages;
a block longer than a whole request's context makes the block and token concurrency figures
disagree."""


class KVInputs(Options, BaseModel):
    """Everything the calculator needs besides the model and the hardware.

    Budget terms left ``None`` take their documented default model; give them to reproduce an
    engine's own start-up figures exactly.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    FLAGS: ClassVar[dict[str, str]] = {
        "tp": "--tp", "pp": "--pp", "kv_dtype": "--kv-dtype", "weight_dtype": "--weight-dtype",
        "gpu_mem_util": "--gpu-mem-util", "max_batched_tokens": "--max-batched-tokens",
        "expert_dtype": "--expert-dtype", "redundant_experts": "--redundant-experts", "kv_scale": "--kv-scale",
    }

    tp: int = Field(default=1, ge=1, le=MAX_GPUS)
    """Tensor-parallel degree [GPUs]: each GPU holds ``1/tp`` of the weights and KV heads."""
    pp: int = Field(default=1, ge=1, le=MAX_GPUS)
    """Pipeline-parallel degree [stages]: the fullest stage decides the budget."""
    kv_dtype: KVDtype = "bf16"
    """Dtype of the KV cache (vLLM ``--kv-cache-dtype``; ``auto`` is the model's, bf16)."""
    weight_dtype: WeightDtype = "bf16"
    """Dtype of the decoder's linear weights (embeddings, LM head and norms stay 16-bit)."""
    ep: int = Field(default=1, ge=1, le=MAX_GPUS)
    """Expert-parallel degree [GPUs]: 1 splits every routed expert across the instance's GPUs
    (tensor parallelism); ``tp x dp`` gives each GPU ``(experts + redundant_experts) / ep`` whole
    experts (vLLM ``--enable-expert-parallel``, SGLang ``--ep``). MoE models only."""
    dp: int | None = Field(default=None, ge=1, le=MAX_GPUS)
    """Data-parallel attention ranks [count]: each rank of ``tp`` GPUs runs attention on its own
    sequences and KV cache while the MoE layers span all ``tp x dp`` GPUs (SGLang
    ``--enable-dp-attention``, vLLM ``--data-parallel-size``). Default ``ep / tp`` when ``ep`` exceeds
    ``tp``, else 1."""
    expert_dtype: WeightDtype | None = None
    """Dtype of the routed experts' weights; default ``weight_dtype`` (gpt-oss ships mxfp4 experts
    beside bf16 attention; NVFP4 DeepSeek checkpoints quantise the experts to nvfp4)."""
    redundant_experts: int = Field(default=0, ge=0, le=MAX_GPUS)
    """Extra expert replicas an expert load balancer places (EPLB; DeepSeek serves 256 + 32)
    [count]; they add weights per GPU and make more ``ep`` degrees possible. Needs ``ep > 1``."""
    kv_scale: KVScale = "tensor"
    """Granularity of the KV quantisation scales: ``tensor`` (one per layer, vLLM's and
    TensorRT-LLM's fp8 cache: no per-token bytes) or ``token_head`` (one fp32 scale per token and
    head, ``4 / head_dim`` bytes more per element)."""
    context: int = Field(default=8192, ge=1, le=MAX_CONTEXT_TOKENS)
    """Tokens per sequence for concurrency figures [tokens]."""
    block_size: int | None = Field(default=None, ge=1, le=MAX_BLOCK_TOKENS)
    """Paged-attention block size [tokens]; default the engine profile's (vLLM 16)."""
    gpu_mem_util: float | None = Field(default=None, gt=0, le=1)
    """Fraction of GPU memory the engine may use (vLLM ``--gpu-memory-utilization``); default the
    engine profile's (vLLM 0.9)."""
    max_batched_tokens: int | None = Field(default=None, ge=1, le=MAX_CONTEXT_TOKENS)
    """Largest scheduled token batch, sizes the forward activation peak [tokens]; default
    vLLM's for the GPU class (8192 on >= 70 GiB non-A100 GPUs, else 2048)."""
    max_num_seqs: int | None = Field(default=None, ge=1, le=MAX_SEQUENCES)
    """Scheduler's max running sequences, sizes the sampler peak; default vLLM's for the GPU
    class (1024 on >= 70 GiB non-A100 GPUs, else 256)."""
    sampler: Literal["pytorch", "flashinfer"] | None = None
    """Top-k/top-p path of the sampler warm-up (vLLM logs "Using FlashInfer for top-p & top-k
    sampling" or "Falling back to the PyTorch-native implementation"); default the engine
    profile's."""
    usable_mem_gib: float | None = Field(default=None, gt=0, le=MAX_MEM_GIB)
    """Total device memory as the framework sees it [GiB]; default: the hardware profile's."""
    weights_gib: float | None = Field(default=None, ge=0, le=MAX_MEM_GIB)
    """Weights per GPU [GiB], to reproduce an engine log; default: counted from the model."""
    activation_gib: float | None = Field(default=None, ge=0, le=MAX_MEM_GIB)
    """Activation (profiling) peak per GPU [GiB]; default: the sampler or forward peak model."""
    runtime_overhead_gib: float | None = Field(default=None, ge=0, le=MAX_MEM_GIB)
    """Non-torch memory per GPU (CUDA context, NCCL buffers) [GiB]; default by parallelism."""
    graph_gib: float | None = Field(default=None, ge=0, le=MAX_MEM_GIB)
    """CUDA-graph memory charged to the KV budget [GiB]; default the engine profile's (0 when graphs
    are captured after the KV cache)."""
    engine: EngineProfile | None = None
    """Engine profile whose memory terms give every default above (its budget rule, batch limits,
    profiling peaks); ``None``: the default engine profile (``capplan.engine.DEFAULT_ENGINE``)."""

    @model_validator(mode="after")
    def _block_within_context(self) -> "KVInputs":
        check_kv_scale(self.kv_dtype, self.kv_scale)
        if self.block_size is not None and self.block_size > self.context:
            raise InputError(f"--block-size {self.block_size} is longer than --context {self.context}: every sequence "
                             "would hold a block it cannot fill (allowed: a block size up to the context)")
        return self


@dataclass(frozen=True)
class KVResult:
    """The calculator's answer for one configuration (a JSON contract; see the README)."""

    model: str
    hardware: str
    tp: int
    pp: int
    kv_dtype: str
    weight_dtype: str
    context: int
    block_size: int
    gpu_mem_util: float
    max_batched_tokens: int
    max_num_seqs: int
    usable_mem_gib: float
    kv_bytes_per_token: float
    kv_bytes_per_token_per_gpu: float
    kv_bytes_per_sequence_per_gpu: float
    weights_gib_per_gpu: float
    activation_gib_per_gpu: float
    runtime_overhead_gib_per_gpu: float
    graph_gib_per_gpu: float
    kv_budget_gib_per_gpu: float
    kv_capacity_tokens: int
    kv_capacity_blocks: int
    max_concurrency_x: float
    max_concurrent_sequences: int
    engine_profile: str = ""
    """The engine profile whose memory terms sized the budget."""
    calibration: str = ""
    """Which calibration that profile's terms come from."""
    ep: int = 1
    """Expert-parallel degree [GPUs]."""
    dp: int = 1
    """Data-parallel attention ranks [count]; the instance holds ``dp x`` the capacity above."""
    expert_dtype: str = ""
    """Dtype of the routed experts' weights (empty for dense models or when it is ``weight_dtype``)."""

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        # the parallel-layout keys appear only when a feature is in use, so the JSON contract of
        # every plain tensor-parallel configuration is unchanged
        for k, plain in (("ep", 1), ("dp", 1), ("expert_dtype", "")):
            if d[k] == plain:
                del d[k]
        return d


def _stage_layers(kinds: list[str], pp: int) -> list[list[str]]:
    """Split layer kinds into ``pp`` contiguous stages as evenly as possible (remainder first)."""
    n = len(kinds)
    base, extra = divmod(n, pp)
    out, start = [], 0
    for s in range(pp):
        size = base + (1 if s < extra else 0)
        out.append(kinds[start : start + size])
        start += size
    return out


def check_parallelism(spec: "ModelSpec", tp: int, pp: int = 1, where: "Mapping[str, str] | None" = None) -> None:
    """Reject tensor/pipeline degrees an engine cannot run, with the reason.

    Parameters
    ----------
    where : mapping, optional
        What set each degree, for the message: ``{"tp": ..., "pp": ...}`` (default the flags
        ``--tp`` and ``--pp``; a workload's ``engine:`` key when the file set it).

    Raises
    ------
    InputError
        ``tp`` must divide the attention heads; the KV heads must divide by ``tp`` or ``tp`` by
        them (then heads are replicated); ``pp`` may not exceed the layer count.
    """
    tp_at, pp_at = (where or {}).get("tp", "--tp"), (where or {}).get("pp", "--pp")
    if tp < 1 or pp < 1:
        raise InputError(f"{tp_at} and {pp_at} must be >= 1 (got tp={tp}, pp={pp})")
    H, Hkv = spec.num_attention_heads, spec.num_kv_heads
    if H % tp:
        ok = [t for t in (1, 2, 4, 8, 16, 32, 64) if H % t == 0]
        raise InputError(
            f"{tp_at} {tp}: {spec.name} has {H} attention heads, which {tp} does not divide "
            f"(tensor-parallel degrees that divide them: {', '.join(map(str, ok))})"
        )
    if spec.mla is None and Hkv % tp and tp % Hkv:
        raise InputError(
            f"{tp_at} {tp}: {spec.name} has {Hkv} KV heads; tp must divide them or be a multiple of them"
        )
    if pp > spec.num_layers:
        raise InputError(f"{pp_at} {pp}: {spec.name} has only {spec.num_layers} layers")


def resolve_dp(tp: int, ep: int, dp: int | None) -> int:
    """Data-parallel attention ranks: ``dp`` when given, else ``ep / tp`` when ``ep`` exceeds ``tp``
    (the experts span ``tp x dp`` GPUs), else 1.

    >>> resolve_dp(1, 16, None), resolve_dp(8, 8, None), resolve_dp(2, 1, 4)
    (16, 1, 4)
    """
    if dp is not None:
        return dp
    return ep // tp if ep > tp and ep % tp == 0 else 1


def check_expert_parallelism(
    spec: "ModelSpec", tp: int, dp: int, ep: int, redundant_experts: int = 0, *, expert_parallel: bool = False,
    where: "Mapping[str, str] | None" = None,
) -> None:
    """Reject expert/data-parallel layouts an engine cannot run, with the reason.

    Parameters
    ----------
    expert_parallel : bool
        Expert parallelism was asked for by name (vLLM's ``--enable-expert-parallel``, a
        workload's ``engine.enable_expert_parallel: true``), whatever degree ``ep`` it gives: a
        dense model refuses it even at ``ep = tp x dp = 1``.
    where : mapping, optional
        What set each value, for the message: ``{"ep": ..., "dp": ..., "redundant_experts": ...}``
        (default the flags ``--ep``, ``--dp`` and ``--redundant-experts``; a workload's
        ``engine:`` key when the file set it).

    Raises
    ------
    InputError
        ``ep > 1`` (or ``expert_parallel``) on a dense model; ``ep`` not 1 and not ``tp x dp`` (expert parallelism spans
        every GPU of the instance); ``experts + redundant_experts`` not divisible by ``ep``;
        data-parallel attention (``dp > 1``) on a MoE model without expert parallelism;
        redundant experts without expert parallelism.

    Examples
    --------
    >>> from capplan.modelspec import load_model_spec
    >>> check_expert_parallelism(load_model_spec("qwen3-30b-a3b"), tp=1, dp=3, ep=3)
    Traceback (most recent call last):
    ...
    capplan.errors.InputError: --ep 3: qwen3-30b-a3b has 128 routed experts per MoE layer, which 3 does not divide (expert-parallel degrees that divide 128: 1, 2, 4, 8, 16, 32, 64, 128); --redundant-experts R makes 128 + R experts to split
    """
    at = {"ep": "--ep", "dp": "--dp", "redundant_experts": "--redundant-experts", **(where or {})}
    flag = at["ep"] == "--ep"
    ep_at = f"--ep {ep}" if flag else f"{at['ep']} (ep = tp x dp = {ep})"
    m = spec.moe
    if (ep > 1 or expert_parallel) and m is None:
        fix = "give --ep 1" if flag else "set it to false, or remove it"
        raise InputError(f"{ep_at}: {spec.name} is a dense model; expert parallelism needs routed experts ({fix})")
    if redundant_experts and ep == 1:
        raise InputError(f"{at['redundant_experts']} {redundant_experts}: replicas are placed by expert parallelism; give --ep > 1")
    if m is None:
        return
    if ep > 1 and ep != tp * dp:
        raise InputError(
            f"{ep_at}: expert parallelism spans every GPU of the instance, --tp x --dp = {tp} x {dp} = {tp * dp}; "
            f"give --ep {tp * dp}, or --dp {ep // tp if ep % tp == 0 else '?'} with --tp {tp}, or --ep 1"
        )
    total = m.num_experts + redundant_experts
    if total % ep:
        ok = [d for d in range(1, total + 1) if total % d == 0]
        raise InputError(
            f"{ep_at}: {spec.name} has {m.num_experts} routed experts per MoE layer"
            f"{f' + {redundant_experts} redundant = {total}' if redundant_experts else ''}, which {ep} does not divide "
            f"(expert-parallel degrees that divide {total}: {', '.join(map(str, ok))}); --redundant-experts R makes "
            f"{m.num_experts} + R experts to split"
        )
    if ep > total:
        raise InputError(f"{ep_at}: more GPUs than the {total} experts of a MoE layer")
    if dp > 1 and ep == 1:
        raise InputError(
            f"{at['dp']} {dp}: data-parallel attention with a MoE model is modelled with expert parallelism over the "
            f"instance; give --ep {tp * dp}"
        )


def check_expert_dtype(spec: "ModelSpec", expert_dtype: str | None) -> None:
    """Refuse an expert dtype on a model without routed experts.

    Raises
    ------
    InputError
        ``--expert-dtype X: <model> is a dense model (no routed experts)``.
    """
    if expert_dtype is not None and spec.moe is None:
        raise InputError(f"--expert-dtype {expert_dtype}: {spec.name} is a dense model (no routed experts)")


def check_kv_scale(kv_dtype: str, kv_scale: str) -> None:
    """Refuse per-token quantisation scales on a 16-bit KV cache (it has no scales to size).

    >>> check_kv_scale("fp8", "token_head")
    >>> check_kv_scale("bf16", "token_head")
    Traceback (most recent call last):
    ...
    capplan.errors.InputError: --kv-scale token_head sizes the scales of a quantised KV cache (--kv-dtype fp8, int8 or int4), and the cache is bf16
    """
    from capplan.units import KV_DTYPE_BYTES

    if kv_scale != "tensor" and KV_DTYPE_BYTES.get(kv_dtype, 2) >= 2:
        raise InputError(f"--kv-scale {kv_scale} sizes the scales of a quantised KV cache (--kv-dtype fp8, int8 or int4), "
                         f"and the cache is {kv_dtype}")


def routed_expert_params(spec: "ModelSpec", layers: "list[int] | range | None" = None) -> int:
    """Weights of the routed experts of ``layers`` (default all) [parameters]: ``3 d d_e E`` per MoE
    layer (gate, up and down projections; shared experts and routers not included).

    >>> from capplan.modelspec import load_model_spec
    >>> round(routed_expert_params(load_model_spec("deepseek-v3")) / 1e9, 1)  # 58 MoE layers x 256 x 3 x 7168 x 2048
    653.9
    """
    m = spec.moe
    if m is None:
        return 0
    idx = range(spec.num_layers) if layers is None else layers
    return sum(3 * spec.hidden_size * m.expert_intermediate_size * m.num_experts for i in idx if spec.is_moe_layer(i))


def routed_expert_bytes_per_gpu(
    spec: "ModelSpec", weight_dtype: str = "bf16", tp: int = 1, *, ep: int = 1, dp: int = 1,
    expert_dtype: str | None = None, redundant_experts: int = 0,
) -> float:
    """Routed-expert weight bytes one GPU holds [bytes] (0 for a dense model).

    Notes
    -----
    ``W_routed x (E + R) / E / (tp x dp) x b_expert`` with expert parallelism (``ep = tp x dp``)
    or data-parallel attention, ``W_routed / tp x b_weight`` otherwise: the layout of
    :func:`weights_bytes_per_gpu`.

    Examples
    --------
    DeepSeek-V3's 653.9 B routed weights in fp8 over 16 GPUs (EP16) and with 32 replicas
    (256 + 32 experts):

    >>> from capplan.modelspec import load_model_spec
    >>> m = load_model_spec("deepseek-v3")
    >>> round(routed_expert_bytes_per_gpu(m, "fp8", 1, ep=16, dp=16) / 1e9, 2)
    40.87
    >>> round(routed_expert_bytes_per_gpu(m, "fp8", 1, ep=16, dp=16, redundant_experts=32) / 1e9, 2)
    45.98
    """
    if spec.moe is None:
        return 0.0
    check_expert_parallelism(spec, tp, dp, ep, redundant_experts)
    if ep == 1 and dp == 1 and not redundant_experts and expert_dtype in (None, weight_dtype):
        return routed_expert_params(spec) / tp * dtype_bytes(weight_dtype, WEIGHT_DTYPE_BYTES, "--weight-dtype")
    eb = dtype_bytes(expert_dtype or weight_dtype, WEIGHT_DTYPE_BYTES, "--expert-dtype")
    return routed_expert_params(spec) * (spec.moe.num_experts + redundant_experts) / spec.moe.num_experts / (tp * dp) * eb


def kv_bytes_per_token_per_layer(spec: "ModelSpec", kv_dtype: str, tp: int = 1, kv_scale: str = "tensor") -> float:
    """KV bytes one token adds to one attention layer on one GPU.

    Notes
    -----
    Standard attention: ``2 x max(1, H_kv / tp) x d_h x b``; MLA: ``(r_kv + d_rope) x b`` on every
    rank (the latent is not split across tensor-parallel ranks). ``b`` includes the scale bytes
    with ``kv_scale="token_head"`` (:func:`capplan.units.kv_element_bytes`; the MLA latent counts
    as one head).

    Examples
    --------
    >>> from capplan.modelspec import load_model_spec
    >>> kv_bytes_per_token_per_layer(load_model_spec("llama-3.1-8b"), "bf16")  # 2 * 8 * 128 * 2
    4096.0
    >>> kv_bytes_per_token_per_layer(load_model_spec("deepseek-v3"), "bf16", tp=8)  # (512 + 64) * 2
    1152.0
    """
    if spec.mla is not None:
        width = spec.mla.kv_lora_rank + spec.mla.qk_rope_head_dim
        return float(width * kv_element_bytes(kv_dtype, width, kv_scale))
    b = kv_element_bytes(kv_dtype, spec.head_dim, kv_scale)
    heads = max(1, spec.num_kv_heads // tp)
    return float(2 * heads * spec.head_dim * b)


@dataclass(frozen=True)
class KVLayout:
    """KV bytes one GPU holds, by attention-layer kind: the one home of the KV formula.

    Every path that needs KV bytes (the scalar calculator, the vectorised grid, the roofline's
    step prices, the simulator's occupancy) reads them from here, so they cannot disagree.
    Counts are of the layers on one pipeline stage (all layers at ``pp = 1``).
    """

    bytes_per_token_per_layer: float
    """KV bytes one position adds to one softmax-attention layer on one GPU [bytes]."""
    full_layers: int
    """Full (global) attention layers [count]."""
    sliding_layers: int
    """Sliding-window attention layers [count]."""
    linear_layers: int
    """Linear-attention / state-space layers [count]: a fixed state per sequence, no per-token KV."""
    window_tokens: float
    """Sliding-window width [positions] (``inf`` without a window)."""
    state_elements_per_layer: float
    """Recurrent state of one linear layer for one sequence, whole model [elements]."""
    tp: int
    """Tensor-parallel degree the state is split over."""

    @property
    def full_bytes_per_token(self) -> float:
        """KV bytes per cached position over the full-attention layers [bytes/position]."""
        return self.full_layers * self.bytes_per_token_per_layer

    @property
    def window_bytes_per_token(self) -> float:
        """KV bytes per cached position over the sliding-window layers [bytes/position]."""
        return self.sliding_layers * self.bytes_per_token_per_layer

    @property
    def bytes_per_token(self) -> float:
        """KV bytes per position over every softmax-attention layer [bytes/position] (a token in
        the window costs the same on a sliding layer as on a full one)."""
        return (self.full_layers + self.sliding_layers) * self.bytes_per_token_per_layer

    @property
    def state_bytes_per_sequence(self) -> float:
        """Linear-attention state of one sequence, 16-bit [bytes]."""
        return self.linear_layers * self.state_elements_per_layer / self.tp * 2

    def sequence_bytes(self, context: Any, block_size: int) -> Any:
        """Bytes one sequence of ``context`` positions holds in whole paged blocks [bytes].

        Full layers hold ``ceil(S / block) x block`` positions; sliding layers
        ``min(ceil(S / block), ceil(W / block) + 1) x block`` (the window plus the block being
        filled); linear layers their fixed state. ``context`` may be a numpy array.
        """
        if isinstance(context, (int, float)):  # the scalar path stays free of numpy (start-up time)
            blocks: Any = float(math.ceil(context / block_size))
            window_blocks: Any = blocks
            if math.isfinite(self.window_tokens):
                window_blocks = min(blocks, float(math.ceil(self.window_tokens / block_size) + 1))
        else:
            import numpy as np

            blocks = np.ceil(np.asarray(context, dtype=float) / block_size)
            window_blocks = blocks
            if math.isfinite(self.window_tokens):
                window_blocks = np.minimum(blocks, math.ceil(self.window_tokens / block_size) + 1)
        out = (
            self.full_layers * blocks * block_size * self.bytes_per_token_per_layer
            + self.sliding_layers * window_blocks * block_size * self.bytes_per_token_per_layer
            + self.state_bytes_per_sequence
        )
        return float(out) if isinstance(out, float) else out

    def held_bytes(self, positions: float) -> float:
        """Bytes a sequence with ``positions`` cached positions holds, without block rounding
        [bytes]: full layers every position, sliding layers at most ``W - 1`` (the window less
        the position being computed), plus the linear state."""
        w = self.window_tokens - 1.0
        return self.full_bytes_per_token * positions + self.window_bytes_per_token * min(positions, w) + self.state_bytes_per_sequence


def kv_stage_layouts(spec: "ModelSpec", kv_dtype: str = "bf16", tp: int = 1, pp: int = 1, kv_scale: str = "tensor") -> list[KVLayout]:
    """The :class:`KVLayout` of each of ``pp`` pipeline stages (contiguous, remainder first)."""
    per_layer = kv_bytes_per_token_per_layer(spec, kv_dtype, tp, kv_scale)
    state = spec.linear_attention.state_elements_per_layer if spec.linear_attention is not None else 0.0
    return [
        KVLayout(
            bytes_per_token_per_layer=per_layer,
            full_layers=stage.count("full"),
            sliding_layers=stage.count("sliding"),
            linear_layers=stage.count("linear"),
            window_tokens=spec.window_tokens,
            state_elements_per_layer=float(state),
            tp=tp,
        )
        for stage in _stage_layers(spec.layer_kinds(), pp)
    ]


def kv_layout(spec: "ModelSpec", kv_dtype: str = "bf16", tp: int = 1, kv_scale: str = "tensor") -> KVLayout:
    """The :class:`KVLayout` of the whole model on one tensor-parallel rank (no pipeline split).

    Examples
    --------
    >>> from capplan.modelspec import load_model_spec
    >>> lay = kv_layout(load_model_spec("gemma-2-9b"))  # 21 full + 21 sliding layers, 8 KV heads of 256
    >>> lay.full_bytes_per_token, lay.window_bytes_per_token, lay.window_tokens
    (172032.0, 172032.0, 4096.0)
    """
    return kv_stage_layouts(spec, kv_dtype, tp, 1, kv_scale)[0]


def kv_bytes_per_token(spec: "ModelSpec", kv_dtype: str = "bf16", tp: int = 1, pp: int = 1, kv_scale: str = "tensor") -> tuple[float, float]:
    """KV bytes one token adds, whole model and on the fullest GPU.

    Both count every softmax-attention layer (full and sliding: a token in the window costs the
    same); linear-attention layers hold a per-sequence state instead.

    Returns
    -------
    (whole_model, per_gpu) : tuple of float
        [bytes per token]

    Examples
    --------
    The teaching model (L=32, 8 KV heads, d_h=128, BF16): 2 x 32 x 8 x 128 x 2 = 131,072.

    >>> from capplan.modelspec import load_model_spec
    >>> kv_bytes_per_token(load_model_spec("llama-3.1-8b"))
    (131072.0, 131072.0)
    >>> kv_bytes_per_token(load_model_spec("llama-3.1-70b"), tp=4)  # 80 layers, 8 heads / 4
    (327680.0, 81920.0)
    """
    whole = kv_layout(spec, kv_dtype, 1, kv_scale).bytes_per_token
    per_gpu = max(lay.bytes_per_token for lay in kv_stage_layouts(spec, kv_dtype, tp, pp, kv_scale))
    return whole, per_gpu


def kv_bytes_per_sequence_per_gpu(
    spec: "ModelSpec", context: int, kv_dtype: str = "bf16", tp: int = 1, pp: int = 1, block_size: int = 16,
    kv_scale: str = "tensor",
) -> float:
    """Bytes one sequence of ``context`` tokens holds on the fullest GPU, in whole blocks
    (:meth:`KVLayout.sequence_bytes` of the fullest pipeline stage)."""
    return max(lay.sequence_bytes(context, block_size) for lay in kv_stage_layouts(spec, kv_dtype, tp, pp, kv_scale))


def weights_bytes_per_gpu(
    spec: "ModelSpec", weight_dtype: str = "bf16", tp: int = 1, pp: int = 1, *, ep: int = 1, dp: int = 1,
    expert_dtype: str | None = None, redundant_experts: int = 0,
) -> float:
    """Weight bytes on the fullest GPU.

    Notes
    -----
    Decoder linear layers are split ``1/tp`` (experts too, by tensor or expert parallelism)
    and quantised to ``weight_dtype``; norms are replicated; the embedding and the LM head are
    vocabulary-parallel (``1/tp``), 16-bit, on the first and last pipeline stage (once if
    tied and ``pp == 1``). When ``tp`` exceeds the KV heads, each rank keeps a whole copy of one
    KV head's k/v projections.

    With data-parallel attention (``dp`` ranks of ``tp`` GPUs) everything but the routed experts
    is replicated per rank and split ``1/tp``; the routed experts are split over all ``G = tp x dp``
    GPUs, whole experts with expert parallelism (``ep = G``: ``(E + R) / ep`` of them per GPU, ``R``
    redundant replicas) or every expert ``1/G`` without, in ``expert_dtype``::

        W_gpu = W(tp) + W_routed_stage x ((E + R) / E / G x b_expert - b_weight / tp)

    so expert parallelism never holds more expert bytes per GPU than ``1/tp`` of them.

    Examples
    --------
    Llama-3.1-8B in bf16 on one GPU: 8,030,261,248 parameters x 2 bytes = 14.96 GiB

    >>> from capplan.modelspec import load_model_spec
    >>> round(weights_bytes_per_gpu(load_model_spec("llama-3.1-8b")) / 2**30, 2)
    14.96
    """
    wb = dtype_bytes(weight_dtype, WEIGHT_DTYPE_BYTES, "--weight-dtype")
    d = spec.hidden_size
    norms = spec.norm_params_per_layer()
    kinds = spec.layer_kinds()
    replicated_kv = 0
    if spec.mla is None and tp > spec.num_kv_heads:
        # each rank holds one full KV head instead of num_kv_heads / tp of one
        replicated_kv = 2 * d * spec.head_dim * (1 - spec.num_kv_heads / tp)
    emb = spec.vocab_size * d
    stages = _stage_layers(list(range(spec.num_layers)), pp)  # type: ignore[arg-type]
    best = 0.0
    for s, layers in enumerate(stages):
        linear = sum(spec.layer_params(i) - norms for i in layers)
        total = linear / tp * wb + len(layers) * (norms * 2 + replicated_kv * wb)
        if s == 0:
            total += emb / tp * 2
        if s == len(stages) - 1:
            total += d * 2  # final norm
            if not spec.tie_word_embeddings or pp > 1:
                total += emb / tp * 2
        if spec.moe is not None and (ep != 1 or dp != 1 or redundant_experts or (expert_dtype not in (None, weight_dtype))):
            eb = dtype_bytes(expert_dtype or weight_dtype, WEIGHT_DTYPE_BYTES, "--expert-dtype")
            share = (spec.moe.num_experts + redundant_experts) / spec.moe.num_experts / (tp * dp)
            total += routed_expert_params(spec, layers) * (share * eb - wb / tp)
        best = max(best, total)
    del kinds
    return best


def activation_bytes_per_gpu(
    spec: "ModelSpec", max_batched_tokens: int, max_num_seqs: int, tp: int = 1, defaults: MemoryTerms = DEFAULTS,
    sampler: str | None = None, profile: str = "the engine profile",
) -> float:
    """Default model of the start-up profiling's activation peak on one GPU [bytes].

    Notes
    -----
    The larger of the forward pass and the sampler warm-up::

        forward = T x (3 d + mlp / tp) x 2,   mlp = 3 d_ff (dense) or 3 k d_e + 3 S d_s (MoE)
        sampler = 38.6 x max_num_seqs x V

    (38.6 bytes per entry: the PyTorch top-k/top-p path; ``sampler`` ``"flashinfer"`` takes the
    profile's ``flashinfer_sampler_bytes_per_seq_vocab``, ``None`` the profile's ``sampler``:
    :meth:`capplan.engine.MemoryTerms.sampler_bytes`, whose error names ``profile``.)

    Examples
    --------
    Llama-3.1-8B at 20,000 batched tokens, 256 sequences: the forward pass,
    20000 x (3 x 4096 + 3 x 14336) x 2 = 2.06 GiB (vLLM logged 2.07 GiB, ``docs/kv.md``):

    >>> from capplan.modelspec import load_model_spec
    >>> round(activation_bytes_per_gpu(load_model_spec("llama-3.1-8b"), 20000, 256) / 2**30, 2)
    2.06

    At vLLM's H100 defaults (8,192 tokens, 1,024 sequences) the sampler dominates:
    38.6 x 1024 x 128256 = 4.72 GiB (logged 4.76 GiB).

    >>> round(activation_bytes_per_gpu(load_model_spec("llama-3.1-8b"), 8192, 1024) / 2**30, 2)
    4.72
    """
    d = spec.hidden_size
    m = spec.moe
    if m is not None:
        mlp = 3 * m.experts_per_token * m.expert_intermediate_size
        if m.num_shared_experts:
            mlp += 3 * m.num_shared_experts * m.shared_width
    else:
        mlp = 3 * spec.intermediate_size
    forward = max_batched_tokens * (3 * d + mlp / tp) * defaults.activation_bytes_per_element
    sampler = defaults.sampler_bytes(sampler, profile) * max_num_seqs * spec.vocab_size
    return max(forward, sampler)


def runtime_overhead_bytes(hw: "HardwareProfile", tp: int, pp: int, defaults: MemoryTerms = DEFAULTS) -> float:
    """Default non-torch memory per GPU [bytes].

    0.15 GiB on one GPU; with tensor or pipeline parallelism 0.55 GiB over NVLink-class links and
    0.25 GiB over PCIe (NCCL buffers), as logged by vLLM V1 (``docs/research/kv-engine-logs.md``).
    """
    if tp * pp == 1:
        return defaults.non_torch_gib_single * GIB
    if hw.intra_node_bandwidth_gbps >= defaults.nvlink_min_gbps:
        return defaults.non_torch_gib_nvlink * GIB
    return defaults.non_torch_gib_pcie * GIB


def kv_budget_bytes(rule: str, total: float, fraction: float, weights: float, activation: float, non_torch: float, graph: float) -> float:
    """The KV budget of one GPU under an engine's budget rule [bytes].

    ``fraction_of_total`` (vLLM): ``total x fraction - weights - activation - non_torch - graph``;
    ``fraction_of_free`` (TensorRT-LLM): ``(total - weights - activation - non_torch - graph) x
    fraction``; ``static_fraction`` (SGLang): ``total x fraction - weights``, the rest of memory
    being the headroom for everything else.
    """
    if rule == "fraction_of_free":
        return (total - weights - activation - non_torch - graph) * fraction
    if rule == "static_fraction":
        return total * fraction - weights
    return total * fraction - weights - activation - non_torch - graph


def compute_kv(spec: "ModelSpec", hw: "HardwareProfile", inp: KVInputs) -> KVResult:
    """The budget breakdown, KV bytes per token, capacity and concurrency of one configuration.

    Raises
    ------
    InputError
        Impossible parallel degree or dtype.
    DoesNotFitError
        The fixed memory (weights, activations, overhead) exceeds the usable memory; the message
        gives the numbers and the smallest tensor-parallel degree that fits.

    Examples
    --------
    The teaching case, 8 sequences of 8,192 tokens of a 32-layer, 8-KV-head, d_h=128 BF16
    model: 8 x 8192 x 131,072 bytes = 8 GiB.

    >>> from capplan.hardware import load_hardware
    >>> from capplan.modelspec import load_model_spec
    >>> r = compute_kv(load_model_spec("llama-3.1-8b"), load_hardware("h100-sxm"), KVInputs(context=8192))
    >>> 8 * r.kv_bytes_per_sequence_per_gpu == 8 * 2**30
    True
    """
    key = _fixed_key(spec, hw, inp)
    hit = _KV_FIXED.get(key) if key is not None else None
    if hit is not None and hit[0] is spec and hit[1] is hw:
        return _kv_result(spec, hw, inp, hit[2])
    fixed = _kv_fixed(spec, hw, inp)
    if key is not None:
        while len(_KV_FIXED) >= _KV_FIXED_MAX:
            del _KV_FIXED[next(iter(_KV_FIXED))]  # the oldest entry
        _KV_FIXED[key] = (spec, hw, fixed)
    return _kv_result(spec, hw, inp, fixed)


_KV_FIXED: dict[Any, tuple[Any, Any, "_KVFixed"]] = {}
_KV_FIXED_MAX = 256
_CONTEXT_FIELD = list(KVInputs.model_fields).index("context")


def _fixed_key(spec: "ModelSpec", hw: "HardwareProfile", inp: KVInputs) -> Any:
    """What :func:`_kv_fixed` depends on: the objects' identities and every input but the
    context (``None`` when an input is unhashable, e.g. an engine profile object)."""
    values = tuple(inp.__dict__.values())  # the fields, in declaration order
    rest = values[:_CONTEXT_FIELD] + values[_CONTEXT_FIELD + 1:]
    try:
        hash(rest)
    except TypeError:
        return None
    return (id(spec), id(hw), rest)


@dataclass(frozen=True)
class _KVFixed:
    """The part of :func:`compute_kv` that does not depend on the context (cached per configuration)."""

    engine: Any
    block: int
    whole: float
    per_gpu: float
    usable: float
    weights: float
    mbt: int
    seqs: int
    util: float
    act: float
    over: float
    graph: float
    budget: float
    layouts: list[Any]
    dp: int


def _kv_fixed(spec: "ModelSpec", hw: "HardwareProfile", inp: KVInputs) -> _KVFixed:
    check_parallelism(spec, inp.tp, inp.pp)
    dp = resolve_dp(inp.tp, inp.ep, inp.dp)
    check_expert_parallelism(spec, inp.tp, dp, inp.ep, inp.redundant_experts)
    check_expert_dtype(spec, inp.expert_dtype)
    from capplan.engine import default_engine

    engine = inp.engine or default_engine()
    block = inp.block_size if inp.block_size is not None else engine.memory.block_size
    whole, per_gpu = kv_bytes_per_token(spec, inp.kv_dtype, inp.tp, inp.pp, inp.kv_scale)
    usable = inp.usable_mem_gib if inp.usable_mem_gib is not None else hw.mem_total_gib
    weights = (
        inp.weights_gib * GIB
        if inp.weights_gib is not None
        else weights_bytes_per_gpu(spec, inp.weight_dtype, inp.tp, inp.pp, ep=inp.ep, dp=dp,
                                   expert_dtype=inp.expert_dtype, redundant_experts=inp.redundant_experts)
    )
    terms = engine.memory
    mbt = inp.max_batched_tokens if inp.max_batched_tokens is not None else default_max_num_batched_tokens(hw, terms)
    seqs = inp.max_num_seqs if inp.max_num_seqs is not None else default_max_num_seqs(hw, terms)
    util = inp.gpu_mem_util if inp.gpu_mem_util is not None else terms.gpu_memory_utilization
    act = (
        inp.activation_gib * GIB
        if inp.activation_gib is not None
        else activation_bytes_per_gpu(spec, mbt, seqs, inp.tp, terms, inp.sampler, f"engine profile {engine.name}")
    )
    over = (
        inp.runtime_overhead_gib * GIB
        if inp.runtime_overhead_gib is not None
        else runtime_overhead_bytes(hw, inp.tp * dp, inp.pp, terms)
    )
    graph = (inp.graph_gib if inp.graph_gib is not None else terms.cudagraph_gib) * GIB
    budget = kv_budget_bytes(terms.budget_rule, usable * GIB, util, weights, act, over, graph)
    layouts = kv_stage_layouts(spec, inp.kv_dtype, inp.tp, inp.pp, inp.kv_scale)
    return _KVFixed(engine, block, whole, per_gpu, usable, weights, mbt, seqs, util, act, over, graph, budget, layouts, dp)


def fast_init(cls: Any, **values: Any) -> Any:
    """A frozen dataclass instance from all its fields, without the per-field ``__setattr__`` of
    its generated ``__init__`` (the scalar paths build one per call)."""
    out = object.__new__(cls)
    out.__dict__.update(values)
    return out


def _kv_result(spec: "ModelSpec", hw: "HardwareProfile", inp: KVInputs, fixed: _KVFixed) -> KVResult:
    """:func:`compute_kv` from its context-free part and the context."""
    engine, block, whole, per_gpu, usable = fixed.engine, fixed.block, fixed.whole, fixed.per_gpu, fixed.usable
    weights, mbt, seqs, util, act, over = fixed.weights, fixed.mbt, fixed.seqs, fixed.util, fixed.act, fixed.over
    graph, budget, dp = fixed.graph, fixed.budget, fixed.dp
    seq_bytes = max(lay.sequence_bytes(inp.context, block) for lay in fixed.layouts)  # kv_bytes_per_sequence_per_gpu
    if budget <= 0:
        _raise_does_not_fit(spec, hw, inp, usable, util, weights, act, over, graph, budget, seq_bytes)
    blocks = int(budget // (block * per_gpu)) if per_gpu > 0 else 0
    tokens = blocks * block
    return fast_init(
        KVResult,
        model=spec.name,
        hardware=hw.name,
        tp=inp.tp,
        pp=inp.pp,
        kv_dtype=inp.kv_dtype,
        weight_dtype=inp.weight_dtype,
        context=inp.context,
        block_size=block,
        gpu_mem_util=util,
        max_batched_tokens=mbt,
        max_num_seqs=seqs,
        usable_mem_gib=usable,
        kv_bytes_per_token=whole,
        kv_bytes_per_token_per_gpu=per_gpu,
        kv_bytes_per_sequence_per_gpu=seq_bytes,
        weights_gib_per_gpu=weights / GIB,
        activation_gib_per_gpu=act / GIB,
        runtime_overhead_gib_per_gpu=over / GIB,
        graph_gib_per_gpu=graph / GIB,
        kv_budget_gib_per_gpu=budget / GIB,
        kv_capacity_tokens=tokens,
        kv_capacity_blocks=blocks,
        max_concurrency_x=tokens / inp.context,
        max_concurrent_sequences=int(budget // seq_bytes),
        engine_profile=engine.name,
        calibration=engine.calibration,
        ep=inp.ep,
        dp=dp,
        expert_dtype=inp.expert_dtype if spec.moe is not None and inp.expert_dtype not in (None, inp.weight_dtype) else "",
    )


def smallest_fitting_tp(spec: "ModelSpec", hw: "HardwareProfile", inp: KVInputs) -> int | None:
    """The smallest tensor-parallel degree above ``inp.tp`` (2, 4, ... 64) at which at least one
    sequence of ``inp.context`` tokens fits in the KV budget; ``None`` when none does."""
    for tp in (2, 4, 8, 16, 32, 64):
        if tp <= inp.tp:
            continue
        try:
            r = compute_kv(spec, hw, inp.replace(tp=tp, weights_gib=None, ep=1 if inp.ep == 1 else tp * (inp.dp or 1), dp=inp.dp))
        except (DoesNotFitError, InputError):
            continue
        if r.max_concurrent_sequences >= 1:
            return tp
    return None


def _raise_does_not_fit(
    spec: "ModelSpec",
    hw: "HardwareProfile",
    inp: KVInputs,
    usable: float,
    util: float,
    weights: float,
    act: float,
    over: float,
    graph: float,
    budget: float,
    seq_bytes: float,
) -> None:
    tp = smallest_fitting_tp(spec, hw, inp)
    suggestion = f"; --tp {tp} fits one sequence of {inp.context:,} tokens" if tp else ""
    raise DoesNotFitError(
        f"{spec.name} on {hw.name} (tp={inp.tp}, pp={inp.pp}): weights, activations and overhead exceed "
        "the memory budget: "
        f"{usable:.2f} GiB x {util:g} = {usable * util:.2f} GiB usable, "
        f"weights {weights / GIB:.2f} + activations {act / GIB:.2f} + overhead {over / GIB:.2f}"
        f"{f' + graphs {graph / GIB:.2f}' if graph else ''} GiB leaves {budget / GIB:.2f} GiB for KV"
        f"{suggestion or '; no tensor-parallel degree up to 64 fits'}"
    )


@dataclass(frozen=True)
class KVGrid:
    """Vectorised results over models x hardware x tp x kv dtype x context.

    Every array has shape ``(M, H, T, D, C)`` (or broadcasts to it); combinations an engine
    cannot run (tp not dividing the heads) or that do not fit hold ``fits == False`` and zeros.
    """

    models: list[str]
    hardware: list[str]
    tps: list[int]
    kv_dtypes: list[str]
    contexts: "np.ndarray"
    kv_budget_gib_per_gpu: "np.ndarray"
    kv_bytes_per_token_per_gpu: "np.ndarray"
    kv_capacity_tokens: "np.ndarray"
    max_concurrency_x: "np.ndarray"
    max_concurrent_sequences: "np.ndarray"
    fits: "np.ndarray"

    @property
    def size(self) -> int:
        return int(self.max_concurrent_sequences.size)


def kv_grid(
    specs: list["ModelSpec"],
    hardware: list["HardwareProfile"],
    tps: list[int],
    kv_dtypes: list[str],
    contexts: "np.ndarray | list[int]",
    weight_dtype: str = "bf16",
    gpu_mem_util: float = DEFAULTS.gpu_memory_utilization,
    block_size: int = 16,
) -> KVGrid:
    """Evaluate :func:`compute_kv`'s default model over a full grid at once (numpy broadcasting).

    The per-(model, tp, hardware) terms (weights, activation, overhead) are computed once each;
    everything that varies with dtype and context is array arithmetic, so a million combinations
    take well under a second (``benchmarks/bench_kv.py``). Values agree with :func:`compute_kv`
    on every cell (tested).
    """
    import numpy as np

    ctx = np.asarray(contexts, dtype=np.int64)
    M, H, T, D = len(specs), len(hardware), len(tps), len(kv_dtypes)
    usable = np.array([h.mem_total_gib for h in hardware]) * GIB * gpu_mem_util  # (H,)
    fixed = np.zeros((M, H, T))
    valid = np.ones((M, 1, T), dtype=bool)
    per_token = np.zeros((M, 1, T, D, 1))  # KV bytes per token per GPU
    seq_bytes = np.zeros((M, 1, T, D, len(ctx)))  # bytes of one sequence at each context
    for d in kv_dtypes:
        dtype_bytes(d, KV_DTYPE_BYTES, "--kv-dtype")
    for m, spec in enumerate(specs):
        for t, tp in enumerate(tps):
            try:
                check_parallelism(spec, tp)
            except InputError:
                valid[m, 0, t] = False
                continue
            for k, d in enumerate(kv_dtypes):
                layout = kv_layout(spec, d, tp)
                per_token[m, 0, t, k, 0] = layout.bytes_per_token
                seq_bytes[m, 0, t, k, :] = layout.sequence_bytes(ctx, block_size)
            w = weights_bytes_per_gpu(spec, weight_dtype, tp)
            for h, hw in enumerate(hardware):
                act = activation_bytes_per_gpu(spec, default_max_num_batched_tokens(hw), default_max_num_seqs(hw), tp)
                fixed[m, h, t] = w + act + runtime_overhead_bytes(hw, tp, 1)
    budget = usable[None, :, None] - fixed  # (M, H, T)
    budget5 = budget[..., None, None]  # (M, H, T, 1, 1)
    fits = (budget5 > 0) & valid[..., None, None] & (per_token > 0)
    safe_pt = np.where(per_token > 0, per_token, 1.0)
    blocks = np.where(fits, np.floor(budget5 / (block_size * safe_pt)), 0)
    tokens = blocks * block_size
    seqs = np.where(fits, np.floor(budget5 / np.where(seq_bytes > 0, seq_bytes, 1.0)), 0)
    return KVGrid(
        models=[s.name for s in specs],
        hardware=[h.name for h in hardware],
        tps=list(tps),
        kv_dtypes=list(kv_dtypes),
        contexts=ctx,
        kv_budget_gib_per_gpu=np.broadcast_to(budget5 / GIB, seqs.shape),
        kv_bytes_per_token_per_gpu=np.broadcast_to(per_token, seqs.shape),
        kv_capacity_tokens=np.broadcast_to(tokens, seqs.shape),
        max_concurrency_x=np.where(fits, tokens / ctx, 0.0),
        max_concurrent_sequences=seqs,
        fits=np.broadcast_to(fits, seqs.shape),
    )
