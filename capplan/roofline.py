"""Roofline cost of one engine step: FLOPs, bytes moved from HBM, and the time they take.

An inference engine runs its model in *steps*: one forward pass over every position scheduled
together (a decode token per running sequence, a chunk of prompt, a whole record to score).
This module prices one step on one tensor-parallel (TP) rank of a hardware profile::

    compute_time = ((F_gemm + h f_token + F_routed (1/e_moe - 1)) / R_gemm + F_16 / (R_16 a)) / g
    memory_time  = bytes / (hbm_bandwidth x bandwidth_efficiency)
    step_time    = max(compute_time, memory_time) + comm_time + step_overhead + per_sequence x S

``F_gemm`` are the FLOPs of the decoder's weight matrices, run on the tensor unit of the weight
dtype (``R_gemm = peak_flops(weight_dtype)``: fp8 weights use the fp8 unit where the hardware has
one); ``F_16`` are the attention score/value products and the LM head, run in 16-bit
(``R_16 = peak_flops("bf16")``). ``comm_time`` prices the tensor-parallel all-reduces (not
overlapped with compute). The efficiencies and host times are an **engine profile's** time terms
(:mod:`capplan.engine`, fitted to published measurements): ``g`` the GEMM efficiency, reached at
large steps (a step of ``T`` tokens reaches ``g T / (T + h)``, which is ``h`` extra tokens' worth
of GEMM work at ``g``), ``a`` the attention efficiency relative to ``g``, ``e_moe`` the grouped
-GEMM efficiency of routed experts, and a per-step and per-sequence host time. A routed expert's
GEMM holds only its share of the step, ``T dp k / E`` positions (``k`` of ``E`` experts per
token, from all ``dp`` attention ranks), so it reaches ``g T_e / (T_e + h)``: ``h E / (k dp)``
tokens' worth of routed work extra, where a dense GEMM of the step has ``h``. A step runs
without CUDA graphs when the engine is eager (``enforce_eager``) or holds more sequences than
its largest graph (``cuda_graph_max_batch``); it then adds ``eager_s_per_layer`` per decoder
layer to its host time. Any field of :class:`RooflineInputs` given explicitly overrides the
profile.

All counts are **per GPU** (one TP rank): FLOPs and bytes of the whole model divided across
ranks where the engine splits them (weights, heads, experts), not where it replicates them
(multi-head latent attention's KV latent, norms). At ``tp=1`` they are the whole model's.

Counting rules (each is explained, with alternatives, in ``docs/roofline.md``):

* **FLOPs.** 2 per weight per forwarded position for every decoder-layer weight a position passes
  through (attention or mixer projections, the dense MLP, the router, the ``k`` routed experts and
  the shared experts of MoE layers); the LM head (``2 V d``) only for positions whose logits are
  needed; attention ``4 H h`` per (query, key) pair and layer (scores and values), with causal
  pairs (a P-position prefill costs ``P (P + 1) / 2`` pairs, not ``P^2``) capped at the window
  on sliding-window layers; multi-head latent attention in the absorbed (latent) form,
  ``2 H (2 r_kv + r_rope)`` per pair; linear-attention layers ``4 x state`` per position.
* **Bytes.** Weights read once per step (the input embedding only as gathered rows; the LM head
  only when logits are computed; for MoE the expected number of distinct routed experts the
  step's tokens touch, ``E (1 - (1 - k/E)^T)``, under uniform independent routing); the KV cache
  of every cached position attended to; the KV of every new position written; activations as
  one 16-bit read of each GEMM's input and one write of its output; linear-attention states read
  and written once per sequence.
* **Communication.** ``2 L + 1`` ring all-reduces of the step's hidden states (after each
  attention and MLP block, and after the vocabulary-parallel embedding) and a gather of the
  logits, over NVLink/Infinity Fabric when ``tp <= gpus_per_node``, else over the network.
* **Expert parallelism** (``ep = tp x dp``; ``docs/features.md``). The work arguments are one
  data-parallel rank's; the MoE layers see all ``dp`` ranks' tokens, so the distinct experts are
  ``E (1 - (1 - k/E)^(dp T))`` of the GPU's ``(E + R) / ep``. Each MoE layer adds a dispatch and a
  combine of ``k`` copies of the rank's hidden states per GPU (DeepEP low-latency kernels over the
  NIC, or normal kernels with one copy per remote node), the busiest GPU's share
  (``moe_load_imbalance``) also scaling the routed GEMMs. Two-batch overlap reads the weights
  once per micro-batch and hides ``tbo_overlap_efficiency x min(compute or memory, all-to-all)``.
* **Quantised experts and FP4.** ``expert_dtype`` sets the routed experts' bytes and tensor unit;
  an FP4 unit runs at ``fp4_gemm_efficiency`` of the engine's GEMM efficiency, an FP8 unit at
  ``fp8_gemm_efficiency``. Experts narrower than the 16-bit unit they run on (weight-only
  kernels, e.g. MXFP4 on Hopper with ``--gemm-dtype bf16``) reach ``weight_only_moe_efficiency``
  of the GEMM and bandwidth efficiency on their FLOPs and the bytes of the experts they touch.

The byte sizes of quantised weights and KV come from :mod:`capplan.kv`
(``WEIGHT_DTYPE_BYTES``, ``KV_DTYPE_BYTES``), and the resident weights per GPU from
:func:`capplan.kv.weights_bytes_per_gpu`, so memory planning and step pricing agree.

Examples
--------
>>> from capplan.hardware import load_hardware
>>> from capplan.modelspec import load_model_spec
>>> spec, h100 = load_model_spec("llama-3.1-8b"), load_hardware("h100-sxm")
>>> s = decode_step(spec, h100, RooflineInputs(), batch=1, context=2047)
>>> s.bound, round(s.step_time_s * 1e3, 2), round(s.arithmetic_intensity, 2)
('memory', 6.61, 1.05)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Literal, Sequence, Union

import numpy as np

from capplan.errors import InputError
from pydantic import BaseModel, ConfigDict, Field, model_validator

from capplan.engine import EngineProfile
from capplan.kv import (
    check_expert_parallelism,
    check_kv_scale,
    check_parallelism,
    fast_init,
    kv_layout,
    resolve_dp,
    routed_expert_params,
    weights_bytes_per_gpu,
)
from capplan.options import Options
from capplan.units import MAX_GPUS, WEIGHT_DTYPE_BYTES, KVDtype, KVScale, WeightDtype

if TYPE_CHECKING:
    from capplan.engine import TimeTerms
    from capplan.hardware import HardwareProfile
    from capplan.modelspec import ModelSpec

ArrayLike = Union[float, int, Sequence[float], np.ndarray]
Kind = Literal["decode", "prefill", "score", "mixed"]

KINDS: tuple[str, ...] = ("decode", "prefill", "score", "mixed")
"""Work kinds a step can be built from (see :func:`step_for_kind`)."""

ACTIVATION_BYTES = 2
"""Bytes per activation element: hidden states, GEMM outputs and logits move in 16-bit."""

ATTENTION_DTYPE = "bf16"
"""Tensor unit the attention products and the LM head run on (16-bit inputs, FP32 accumulate),
whatever the weight and KV dtypes: engines dequantise fp8/int8 KV to 16-bit in the kernel and
keep the LM head unquantised."""

LOW_LATENCY_MAX_TOKENS = 256
"""Positions per GPU up to which ``alltoall_mode="auto"`` uses the low-latency kernels: DeepEP
recommends its low-latency buffers for decode batches "less than 256" tokens per rank
(deepseek-ai/DeepEP docs/legacy.md, "Example use in inference decoding")."""

CRITICAL_BATCH_LIMIT = 2**24
"""Largest decode batch :func:`critical_decode_batch` searches [sequences]; beyond it the result
is ``inf`` (decode never turns compute-bound at that context)."""


class _EngineAssumptions:
    """An engine profile's time terms under the names of the hardware ``assumptions`` block."""

    def __init__(self, t: "TimeTerms") -> None:
        self.compute_efficiency = t.gemm_efficiency
        self.bandwidth_efficiency = t.bandwidth_efficiency
        self.interconnect_efficiency = t.interconnect_efficiency
        self.allreduce_latency_us = t.allreduce_latency_us
        self.step_overhead_s = t.step_overhead_s


def check_step_settings(
    ep: int, weight_dtype: str, gemm_dtype: str | None = None, two_batch_overlap: bool = False, alltoall_mode: str = "auto"
) -> None:
    """Refuse step settings that describe no engine: two-batch overlap or an all-to-all kernel
    without expert parallelism (there is no all-to-all), and GEMMs on a tensor unit narrower than
    the weights (a bf16 checkpoint does not multiply on FP8 or FP4 units; an FP8 one is
    ``--weight-dtype fp8``).

    >>> check_step_settings(1, "nvfp4", gemm_dtype="bf16")  # a weight-only (W4A16) kernel
    >>> check_step_settings(1, "bf16", two_batch_overlap=True)
    Traceback (most recent call last):
    ...
    capplan.errors.InputError: --two-batch-overlap overlaps the all-to-all of expert-parallel MoE layers: it needs --ep > 1
    """
    if two_batch_overlap and ep <= 1:
        raise InputError("--two-batch-overlap overlaps the all-to-all of expert-parallel MoE layers: it needs --ep > 1")
    if alltoall_mode != "auto" and ep <= 1:
        raise InputError(f"--alltoall-mode {alltoall_mode} picks the kernels of the expert-parallel all-to-all: it needs --ep > 1")
    if gemm_dtype is not None and WEIGHT_DTYPE_BYTES[gemm_dtype] < WEIGHT_DTYPE_BYTES[weight_dtype]:
        raise InputError(f"--gemm-dtype {gemm_dtype} is narrower than the {weight_dtype} weights: GEMMs run on a unit at least as "
                         f"wide as the weights (bf16 for weight-only kernels); {gemm_dtype} weights are --weight-dtype {gemm_dtype}")


class RooflineInputs(Options, BaseModel):
    """Everything a step price needs besides the model, the hardware and the work.

    Efficiency, latency and overhead fields left ``None`` take the engine profile's time terms
    (the default engine profile when ``engine`` is ``None``).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    tp: int = Field(default=1, ge=1, le=MAX_GPUS)
    """Tensor-parallel degree [GPUs]; must divide the attention heads (see
    :func:`capplan.kv.check_parallelism`)."""
    weight_dtype: WeightDtype = "bf16"
    """Dtype of the decoder's linear weights: bf16, fp16, fp8, int8 or int4 (embeddings, LM head
    and norms stay 16-bit, as in :data:`capplan.units.WEIGHT_DTYPE_BYTES`)."""
    kv_dtype: KVDtype = "bf16"
    """Dtype of the KV cache: bf16, fp16, fp8, int8 or int4."""
    gemm_dtype: WeightDtype | None = None
    """Tensor unit the weight GEMMs run on; ``None`` = ``weight_dtype`` (falling back as
    :data:`capplan.hardware.FALLBACK` when the hardware has no unit for it, with a warning for fp8
    and int8; nvfp4/mxfp4 without an FP4 unit are refused unless this is given). Give ``bf16`` for
    weight-only kernels (W4A16 AWQ/GPTQ/Marlin FP4, W8A16) on any hardware."""
    ep: int = Field(default=1, ge=1, le=MAX_GPUS)
    """Expert-parallel degree [GPUs]: 1 or ``tp x dp`` (see :class:`capplan.kv.KVInputs`); with
    ``ep > 1`` each MoE layer adds a dispatch and a combine all-to-all."""
    dp: int | None = Field(default=None, ge=1, le=MAX_GPUS)
    """Data-parallel attention ranks [count]; the step's work arguments are **one rank's**, and every
    rank runs the same step (the MoE layers see ``dp x`` its tokens). Default ``ep / tp`` when ``ep``
    exceeds ``tp``, else 1."""
    expert_dtype: WeightDtype | None = None
    """Dtype of the routed experts' weights (their bytes, and the tensor unit of their GEMMs);
    default ``weight_dtype``."""
    redundant_experts: int = Field(default=0, ge=0, le=MAX_GPUS)
    """Extra expert replicas of an expert load balancer (EPLB) [count]; needs ``ep > 1``."""
    kv_scale: KVScale = "tensor"
    """KV quantisation-scale granularity: ``tensor`` or ``token_head`` (see :class:`capplan.kv.KVInputs`)."""
    alltoall_mode: Literal["auto", "low_latency", "normal"] = "auto"
    """Expert-parallel all-to-all kernels (DeepEP): ``low_latency`` sends each of a token's ``k``
    copies to its GPU directly over the network; ``normal`` sends one copy per destination node
    over the network and fans out over NVLink; ``auto`` picks ``low_latency`` for steps of at most
    :data:`LOW_LATENCY_MAX_TOKENS` positions per GPU (decode) and ``normal`` above (prefill)."""
    two_batch_overlap: bool = False
    """The engine runs each step as two micro-batches and overlaps one's expert-parallel all-to-all
    with the other's compute (SGLang ``--enable-two-batch-overlap``, vLLM dual-batch overlap): the
    step hides ``tbo_overlap_efficiency x min(compute or memory, all-to-all)`` of their sum, and
    reads the weights once per micro-batch."""
    compute_efficiency: float | None = Field(default=None, gt=0, le=1)
    """Fraction [0-1] of dense peak FLOP/s the step's GEMMs and attention reach."""
    bandwidth_efficiency: float | None = Field(default=None, gt=0, le=1)
    """Fraction [0-1] of datasheet HBM bandwidth the step's reads and writes reach."""
    interconnect_efficiency: float | None = Field(default=None, gt=0, le=1)
    """Fraction [0-1] of the per-GPU link bandwidth a collective reaches (bus bandwidth)."""
    allreduce_latency_us: float | None = Field(default=None, ge=0, le=1e6)
    """Fixed latency of one collective [microseconds]."""
    step_overhead_s: float | None = Field(default=None, ge=0, le=3600)
    """Fixed host-side time per step [s]: scheduling, sampling, kernel launches."""
    engine: EngineProfile | None = None
    """Engine profile whose time terms price the step (its per-hardware overrides applied);
    ``None``: the default engine profile. Fields given above override it."""

    @model_validator(mode="after")
    def _settings(self) -> "RooflineInputs":
        check_kv_scale(self.kv_dtype, self.kv_scale)
        check_step_settings(self.ep, self.weight_dtype, self.gemm_dtype, self.two_batch_overlap, self.alltoall_mode)
        return self

    def profile(self) -> EngineProfile:
        """The engine profile in force (the default one when none is given)."""
        from capplan.engine import default_engine

        return self.engine or default_engine()

    def resolved(self, hw: "HardwareProfile") -> "RooflineInputs":
        """A copy with every ``None`` replaced by the engine profile's time terms on ``hw`` and
        ``gemm_dtype`` resolved."""
        a = _EngineAssumptions(self.profile().time_on(hw.name))
        return self.model_copy(
            update=dict(
                gemm_dtype=hw.gemm_unit(self.weight_dtype, self.gemm_dtype),
                compute_efficiency=a.compute_efficiency if self.compute_efficiency is None else self.compute_efficiency,
                bandwidth_efficiency=a.bandwidth_efficiency if self.bandwidth_efficiency is None else self.bandwidth_efficiency,
                interconnect_efficiency=(
                    a.interconnect_efficiency if self.interconnect_efficiency is None else self.interconnect_efficiency
                ),
                allreduce_latency_us=a.allreduce_latency_us if self.allreduce_latency_us is None else self.allreduce_latency_us,
                step_overhead_s=a.step_overhead_s if self.step_overhead_s is None else self.step_overhead_s,
            )
        )


@dataclass(frozen=True)
class StepCost:
    """Price of one engine step on one GPU (tensor-parallel rank).

    Every field is a float (scalar inputs) or a numpy array of the broadcast input shape;
    ``bound`` is ``"compute"`` / ``"memory"`` or an array of them.
    """

    flops: Any
    """FLOPs of the step on one GPU [FLOP] = ``gemm_flops + attention_flops + lm_head_flops``."""
    bytes: Any
    """Bytes moved between HBM and the chip on one GPU [bytes] = weights + KV read + KV written
    + activations."""
    compute_time_s: Any
    """``(gemm_flops / R_gemm + (attention_flops + lm_head_flops) / R_16) / compute_efficiency`` [s]."""
    memory_time_s: Any
    """``bytes / (hbm_bandwidth x bandwidth_efficiency)`` [s]."""
    comm_time_s: Any
    """Tensor-parallel collectives [s]; 0 at ``tp=1``."""
    step_time_s: Any
    """``max(compute_time_s, memory_time_s) + comm_time_s + step_overhead_s`` [s]."""
    arithmetic_intensity: Any
    """``flops / bytes`` [FLOP/byte]."""
    bound: Any
    """``"compute"`` when ``compute_time_s >= memory_time_s``, else ``"memory"``."""
    mfu: Any
    """Model FLOP/s utilisation [0-1] = ``(gemm_flops / R_gemm + other_flops / R_16) / step_time_s``
    (FLOPs over the datasheet peak; one dtype gives the usual ``flops / (peak x step_time)``)."""
    mbu: Any
    """Memory bandwidth utilisation [0-1] = ``bytes / (hbm_bandwidth x step_time_s)``."""
    gemm_flops: Any
    """Decoder weight-matrix FLOPs [FLOP]."""
    attention_flops: Any
    """Attention score/value (and linear-attention state) FLOPs [FLOP]."""
    lm_head_flops: Any
    """LM-head FLOPs [FLOP]: ``2 V d / tp`` per position whose logits are computed."""
    weight_bytes: Any
    """Weights read [bytes]."""
    kv_read_bytes: Any
    """KV cache (and linear-attention state) read [bytes]."""
    kv_write_bytes: Any
    """KV cache (and linear-attention state) written [bytes]."""
    activation_bytes: Any
    """Activations read and written [bytes]."""
    overhead_s: Any
    """The fixed per-step overhead included in ``step_time_s`` [s]."""
    alltoall_time_s: Any = 0.0
    """Expert-parallel dispatch and combine of every MoE layer [s] (0 at ``ep = 1``); the part not
    hidden by two-batch overlap is included in ``comm_time_s``."""

    def as_dict(self) -> dict[str, Any]:
        """Fields as a dict (arrays stay arrays)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


# ---------------------------------------------------------------------------------------------
# Per-model, per-TP constants
# ---------------------------------------------------------------------------------------------


def _moe_layout(spec: "ModelSpec", weight_dtype: str, ep: int, dp: int, expert_dtype: str | None, redundant: int) -> bool:
    """Whether the routed experts are laid out other than split ``1/tp`` in ``weight_dtype``."""
    return spec.moe is not None and (ep != 1 or dp != 1 or redundant != 0 or expert_dtype not in (None, weight_dtype))


def gqa_group(spec: "ModelSpec", tp: int = 1) -> float:
    """Query heads that share one K/V head on a GPU at tensor-parallel degree ``tp`` (a K/V head
    replicated across ranks serves each rank's query heads); 1 for multi-head and latent (MLA)
    attention, whose latent vector is read once per position. The factor a decode kernel that
    reads K/V once per query head multiplies the cached-KV bytes by
    (:attr:`~capplan.engine.TimeTerms.gqa_kv_reread`).

    >>> from capplan.modelspec import load_model_spec
    >>> [gqa_group(load_model_spec("llama-3.1-70b"), tp) for tp in (1, 8, 16)]
    [8.0, 8.0, 4.0]
    """
    if spec.mla is not None or not spec.num_kv_heads:
        return 1.0
    return float(spec.num_attention_heads / max(spec.num_kv_heads, tp))


def kv_reads_per_step(group: Any, reread: Any) -> Any:
    """How many times a step's attention reads each cached K/V head: ``1 + (G - 1) x reread``,
    ``G`` query heads sharing it on a GPU (:func:`gqa_group`) and ``reread`` the engine's
    :attr:`~capplan.engine.TimeTerms.gqa_kv_reread` (scalars or arrays).

    >>> kv_reads_per_step(8.0, 0.0), kv_reads_per_step(8.0, 1.0), kv_reads_per_step(1.0, 1.0)
    (1.0, 8.0, 1.0)
    """
    return 1.0 + (group - 1.0) * reread


def _terms(
    spec: "ModelSpec", weight_dtype: str, kv_dtype: str, tp: int, ep: int = 1, dp: int = 1,
    expert_dtype: str | None = None, redundant: int = 0, kv_scale: str = "tensor",
) -> dict[str, float]:
    """Per-GPU constants of ``spec`` at tensor-parallel degree ``tp`` (see the module notes); with
    ``dp`` data-parallel attention ranks and ``ep``-way expert parallelism."""
    check_parallelism(spec, tp)
    check_expert_parallelism(spec, tp, dp, ep, redundant)
    d, V, L = spec.hidden_size, spec.vocab_size, spec.num_layers
    H, Hkv, h = spec.num_attention_heads, spec.num_kv_heads, spec.head_dim
    kv = kv_layout(spec, kv_dtype, tp, kv_scale)
    n_full, n_slide, n_lin = kv.full_layers, kv.sliding_layers, kv.linear_layers
    wb = WEIGHT_DTYPE_BYTES[weight_dtype]
    m = spec.moe
    n_moe = sum(spec.is_moe_layer(i) for i in range(L))
    expert = 3 * d * m.expert_intermediate_size if m else 0
    routed_total = n_moe * (m.num_experts if m else 0) * expert
    gemm_active = sum(spec.mixer_params(i) + spec.active_mlp_params(i) for i in range(L))

    # attention FLOPs per (query, key) pair and layer, and activation elements per token and layer
    if spec.mla is not None:
        a = spec.mla
        attn_pair = 2 * H * (2 * a.kv_lora_rank + a.qk_rope_head_dim)
        if a.q_lora_rank is None:
            q_act = d + H * (a.qk_nope_head_dim + a.qk_rope_head_dim) / tp
        else:
            q_act = d + 2 * a.q_lora_rank + H * (a.qk_nope_head_dim + a.qk_rope_head_dim) / tp
        mixer_act = (
            q_act
            + d + a.kv_lora_rank + a.qk_rope_head_dim  # kv down-projection (replicated)
            + H * (a.qk_nope_head_dim + 2 * a.kv_lora_rank + a.v_head_dim) / tp  # absorbed W_UK, W_UV
            + H * a.v_head_dim / tp + d  # output projection
        )
    else:
        attn_pair = 4 * H * h
        mixer_act = d + (H + 2 * Hkv) * h / tp + H * h / tp + d
    act = (n_full + n_slide) * mixer_act + n_lin * 4 * d + d  # + embedding row gather
    for i in range(L):
        if spec.is_moe_layer(i):
            assert m is not None
            act += d + m.num_experts  # router
            act += m.experts_per_token * (2 * d + 3 * m.expert_intermediate_size / tp)
            act += m.num_shared_experts * (2 * d + 3 * m.shared_width / tp)
        else:
            act += 2 * d + 3 * spec.intermediate_size / tp

    head_bytes = V * d / tp * 2
    emb_bytes = head_bytes * (1 if spec.tie_word_embeddings else 2)
    routed_bytes = routed_total / tp * wb
    if _moe_layout(spec, weight_dtype, ep, dp, expert_dtype, redundant):
        assert m is not None
        eb = WEIGHT_DTYPE_BYTES[expert_dtype or weight_dtype]
        routed_bytes = routed_expert_params(spec) * (m.num_experts + redundant) / m.num_experts / (tp * dp) * eb
    resident = weights_bytes_per_gpu(spec, weight_dtype, tp, ep=ep, dp=dp, expert_dtype=expert_dtype, redundant_experts=redundant)
    state = kv.state_elements_per_layer
    return {
        "tp": float(tp),
        "dp": float(dp),
        "ep": float(ep),
        "moe_layers": float(n_moe),
        # elements each forwarded position of a rank sends per GPU, summed over MoE layers, in
        # the dispatch (and back in the combine): k copies of the hidden state, the rank's
        # positions shared by its tp GPUs
        "a2a_elements_per_token": float(n_moe * (m.experts_per_token if m else 0) * d / tp) if ep > 1 else 0.0,
        "hidden": float(d),
        "layers": float(L),
        "gemm_flops_per_token": 2 * gemm_active / tp,
        "routed_flops_per_token": 2 * n_moe * (m.experts_per_token if m else 0) * expert / tp,
        # a routed expert's GEMM holds k / E of the positions of every rank's step, so it
        # saturates E / (k dp) times later than a dense GEMM of the step (module notes)
        "expert_group_spread": (m.num_experts / (m.experts_per_token * dp) - 1.0) if m and m.experts_per_token else 0.0,
        "head_flops_per_logit": 2 * V * d / tp,
        "attn_flops_per_pair_full": n_full * attn_pair / tp,
        "attn_flops_per_pair_window": n_slide * attn_pair / tp,
        "linear_flops_per_token": n_lin * 4 * state / tp,
        "window": spec.window_tokens,
        "fixed_weight_bytes": resident - emb_bytes - routed_bytes,
        "routed_bytes": float(routed_bytes),
        "head_bytes": head_bytes,
        "experts": float(m.num_experts) if m else 1.0,
        "experts_per_token": float(m.experts_per_token) if m else 0.0,
        "kv_bytes_full": kv.full_bytes_per_token,
        "gqa_group": gqa_group(spec, tp),
        "kv_bytes_window": kv.window_bytes_per_token,
        "state_bytes_per_seq": kv.state_bytes_per_sequence,
        "act_bytes_per_token": act * ACTIVATION_BYTES,
        "act_bytes_per_logit": (d + V / tp) * ACTIVATION_BYTES,
        "logit_gather_bytes": V * ACTIVATION_BYTES,
    }


def _weight_only(expert_dtype: str, unit: str) -> bool:
    """Whether experts of ``expert_dtype`` on tensor unit ``unit`` run weight-only kernels: weights
    narrower than a 16-bit unit, dequantised inside the GEMM (W4A16, W8A16)."""
    return unit in ("bf16", "fp16") and WEIGHT_DTYPE_BYTES[expert_dtype] < 2.0


def weight_only_experts(spec: "ModelSpec", hw: "HardwareProfile", inp: RooflineInputs) -> bool:
    """Whether ``spec``'s routed experts run weight-only kernels on ``hw`` with ``inp`` (the steps
    :attr:`~capplan.engine.TimeTerms.weight_only_moe_efficiency` prices)."""
    if spec.moe is None:
        return False
    r = inp.resolved(hw)
    return _weight_only(inp.expert_dtype or str(r.weight_dtype), _expert_unit(hw, inp, r))


def _expert_unit(hw: "HardwareProfile", inp: RooflineInputs, r: RooflineInputs) -> str:
    """The tensor unit the routed experts' GEMMs run on (``r``: ``inp`` resolved on ``hw``)."""
    if inp.expert_dtype not in (None, inp.weight_dtype):
        return hw.gemm_unit(inp.expert_dtype, inp.gemm_dtype, "--expert-dtype")
    return str(r.gemm_dtype or r.weight_dtype)


def _hw_terms(hw: "HardwareProfile", inp: RooflineInputs) -> dict[str, float]:
    """Hardware peaks and the resolved efficiency and host-time terms of one step."""
    r = inp.resolved(hw)
    ce = float(r.compute_efficiency)  # type: ignore[arg-type]
    terms = inp.profile().time_on(hw.name)
    attention = terms.attention_efficiency if inp.compute_efficiency is None else ce
    peak_gemm = hw.peak_flops(r.gemm_dtype or r.weight_dtype)
    expert_unit = _expert_unit(hw, inp, r)
    ep = inp.ep
    gpn = float(hw.gpus_per_node)
    inter = hw.inter_node_bandwidth_bytes_per_s * terms.alltoall_efficiency
    intra = hw.intra_node_bandwidth_bytes_per_s * terms.alltoall_efficiency
    # seconds per byte of a step's k copies of its hidden states (module notes):
    # within a node: the (ep - 1) / ep sent to other GPUs over NVLink; across nodes, low-latency:
    # every copy over the NIC (DeepEP's "logical bandwidth" counts node-local ones too); normal:
    # one copy per remote destination node over the NIC (the fraction ``remote_node_fraction``
    # of the k copies, set per model in _evaluate) while NVLink fans out the rest, in parallel
    if ep > gpn:
        ll_s_per_byte = 1.0 / inter
        nodes = math.ceil(ep / gpn)
    else:
        ll_s_per_byte = (ep - 1.0) / ep / intra if ep > 1 else 0.0
        nodes = 1
    # an FP4 or FP8 unit's effective peak carries the engine's FP4/FP8 GEMM efficiency (1 changes nothing)
    unit_efficiency = {"fp4": terms.fp4_gemm_efficiency, "fp8": terms.fp8_gemm_efficiency}
    peak_gemm = peak_gemm * unit_efficiency.get(r.gemm_dtype or r.weight_dtype, 1.0)
    peak_expert = peak_gemm
    if expert_unit != (r.gemm_dtype or r.weight_dtype):
        peak_expert = hw.peak_flops(expert_unit) * unit_efficiency.get(expert_unit, 1.0)
    # weight-only experts: their FLOPs and the bytes of the experts a step touches at
    # weight_only_moe_efficiency (module notes)
    wo = terms.weight_only_moe_efficiency if _weight_only(inp.expert_dtype or str(r.weight_dtype), expert_unit) else 1.0
    peak_expert = peak_expert * wo
    return {
        "a2a_ll_s_per_byte": ll_s_per_byte,
        "a2a_nic_s_per_byte": 1.0 / inter,
        "a2a_nvlink_s_per_byte": (min(ep, gpn) - 1.0) / max(ep, 1) / intra,
        "a2a_nodes": float(nodes),
        "a2a_mode": {"auto": 0.0, "low_latency": 1.0, "normal": 2.0}[inp.alltoall_mode],
        "peak_expert": peak_expert,
        "routed_bytes_extra": 1.0 / wo - 1.0,
        # dispatch moves fp8 hidden states (+ one fp32 scale per 128) when the experts run on an
        # fp8/fp4 unit (DeepEP "FP8 dispatching and BF16 combining"), else 16-bit; combine 16-bit
        "a2a_bytes_per_element": (1.0 + 4.0 / 128 if expert_unit in ("fp8", "fp4") else 2.0) + 2.0,
        "imbalance_extra": terms.moe_load_imbalance - 1.0 if ep > 1 else 0.0,
        "tbo": 1.0 if inp.two_batch_overlap else 0.0,
        "tbo_overlap": terms.tbo_overlap_efficiency,
        "peak_gemm": peak_gemm,
        "peak_16": hw.peak_flops(ATTENTION_DTYPE),
        "hbm": hw.hbm_bandwidth_bytes_per_s,
        "intra": hw.intra_node_bandwidth_bytes_per_s,
        "inter": hw.inter_node_bandwidth_bytes_per_s,
        "gpus_per_node": float(hw.gpus_per_node),
        "ce": ce,
        "be": float(r.bandwidth_efficiency),  # type: ignore[arg-type]
        "ie": float(r.interconnect_efficiency),  # type: ignore[arg-type]
        "latency_s": float(r.allreduce_latency_us) * 1e-6,  # type: ignore[arg-type]
        "overhead_s": float(r.step_overhead_s),  # type: ignore[arg-type]
        "eager_s_per_layer": terms.eager_s_per_layer if terms.enforce_eager else 0.0,
        # a step with more sequences than the largest captured CUDA graph runs eagerly
        "graph_max_seqs": terms.graph_limit,
        "graphless_s_per_layer": terms.eager_s_per_layer,
        "attention_rel": attention / ce,
        "gemm_half_tokens": terms.gemm_half_tokens,
        "moe_extra": 1.0 / terms.moe_gemm_efficiency - 1.0,
        "per_sequence_s": terms.per_sequence_s,
        "kv_reread": terms.gqa_kv_reread,
    }


def _flops(t: dict[str, Any], new: Any, logits: Any, pairs: Any, pairs_w: Any) -> tuple[Any, Any, Any]:
    """GEMM, attention and LM-head FLOPs of a step's work on one GPU (``t``: model terms)."""
    gemm = t["gemm_flops_per_token"] * new
    attn = t["attn_flops_per_pair_full"] * pairs + t["attn_flops_per_pair_window"] * pairs_w
    attn = attn + t["linear_flops_per_token"] * new
    head = t["head_flops_per_logit"] * logits
    return gemm, attn, head


def step_flops(
    spec: "ModelSpec",
    *,
    new_tokens: ArrayLike,
    logits_tokens: ArrayLike,
    attention_pairs: ArrayLike,
    window_attention_pairs: ArrayLike | None = None,
    tp: int = 1,
) -> Any:
    """FLOPs of one step's work on one GPU [FLOP]: the hardware-free part of :func:`engine_step`.

    The same counting rules (module notes) and the same work arguments; FLOPs depend on the
    model and the work only, so the trainer counts them without a hardware profile.

    Examples
    --------
    >>> from capplan.modelspec import load_model_spec
    >>> round(step_flops(load_model_spec("llama-3.1-8b"), new_tokens=2048, logits_tokens=1,
    ...                  attention_pairs=2048 * 2049 // 2) / 1e12, 2)
    29.69
    """
    new = _arr(new_tokens, "new_tokens", 1)
    logits = _arr(logits_tokens, "logits_tokens")
    pairs = _arr(attention_pairs, "attention_pairs")
    t = _terms(spec, "bf16", "bf16", tp)
    pairs_w = np.minimum(pairs, new * t["window"]) if window_attention_pairs is None else _arr(window_attention_pairs, "window_attention_pairs")
    gemm, attn, head = _flops(t, new, logits, pairs, pairs_w)
    out = gemm + attn + head
    return float(out) if np.ndim(out) == 0 else out


def _evaluate(
    t: dict[str, Any],
    w: dict[str, Any],
    new: Any,
    logits: Any,
    pairs: Any,
    pairs_w: Any,
    read: Any,
    read_w: Any,
    seqs: Any,
) -> StepCost:
    """The step formulas on broadcastable numpy operands (``t``: model terms, ``w``: hardware)."""
    has_logits = logits > 0
    gemm, attn, head = _flops(t, new, logits, pairs, pairs_w)
    flops = gemm + attn + head

    q = 1.0 - t["experts_per_token"] / t["experts"]
    touched = 1.0 - q ** (new * t["dp"])
    weights = t["fixed_weight_bytes"] + t["routed_bytes"] * touched + t["head_bytes"] * has_logits
    # two-batch overlap runs the step as two micro-batches of half the positions, each reading
    # the weights (the expert weights its half touches)
    half = 1.0 - q ** (new * t["dp"] / 2.0)
    tbo_split = (w["tbo"] > 0) & (new >= 2)
    weights = np.where(tbo_split, 2.0 * (t["fixed_weight_bytes"] + t["routed_bytes"] * half + t["head_bytes"] * has_logits), weights)
    routed_read = t["routed_bytes"] * np.where(tbo_split, 2.0 * half, touched)
    # a decode kernel that does not share a GQA group's K/V loads reads them once per query head
    reread = kv_reads_per_step(t["gqa_group"], w["kv_reread"])
    kv_read = (t["kv_bytes_full"] * read + t["kv_bytes_window"] * read_w) * reread + t["state_bytes_per_seq"] * seqs
    kv_write = (t["kv_bytes_full"] + t["kv_bytes_window"]) * new + t["state_bytes_per_seq"] * seqs
    act = t["act_bytes_per_token"] * new + t["act_bytes_per_logit"] * logits
    nbytes = weights + kv_read + kv_write + act

    ideal_compute = gemm / w["peak_gemm"] + (attn + head) / w["peak_16"]
    # engine terms: GEMMs of a T-token step reach ce x T / (T + h) of peak (the same as h extra
    # tokens' worth of GEMM work), routed experts moe_rel of that, attention ae_rel x ce; all
    # three are exact no-ops at their defaults (h = 0, relative efficiencies 1)
    gemm_work = (gemm + (t["gemm_flops_per_token"] + t["routed_flops_per_token"] * t["expert_group_spread"]) * w["gemm_half_tokens"]
                 + t["routed_flops_per_token"] * new * w["moe_extra"])
    # routed experts on their own tensor unit, and the busiest expert-parallel GPU's extra share:
    # both exactly 0 without an expert dtype or expert parallelism
    routed_work = t["routed_flops_per_token"] * new * (1.0 + w["moe_extra"])
    expert_extra = routed_work * ((1.0 + w["imbalance_extra"]) / w["peak_expert"] - 1.0 / w["peak_gemm"])
    compute_time = (gemm_work / w["peak_gemm"] + (attn + head) / (w["peak_16"] * w["attention_rel"]) + expert_extra) / w["ce"]
    # weight-only experts stream their bytes at a share of the bandwidth (0 extra otherwise)
    memory_time = (nbytes + routed_read * w["routed_bytes_extra"]) / (w["hbm"] * w["be"])

    tp = t["tp"]
    link = np.where(tp <= w["gpus_per_node"], w["intra"], w["inter"]) * w["ie"]
    share = (tp - 1.0) / tp
    allreduce = w["latency_s"] + 2.0 * share * (new * t["hidden"] * ACTIVATION_BYTES) / link
    gather = (w["latency_s"] + share * logits * t["logit_gather_bytes"] / link) * has_logits
    comm = np.where(tp > 1, (2.0 * t["layers"] + 1.0) * allreduce + gather, 0.0)
    # expert parallelism: a dispatch and a combine per MoE layer, the busiest GPU's volume
    a2a_bytes = t["a2a_elements_per_token"] * new * w["a2a_bytes_per_element"] * (1.0 + w["imbalance_extra"])
    n_nodes = w["a2a_nodes"]
    kk = np.maximum(t["experts_per_token"], 1.0)
    remote = (n_nodes - 1.0) * (1.0 - (1.0 - 1.0 / n_nodes) ** kk) / kk  # remote nodes per copy
    normal = np.where(n_nodes > 1, np.maximum(remote * w["a2a_nic_s_per_byte"], w["a2a_nvlink_s_per_byte"]), w["a2a_ll_s_per_byte"])
    low_latency = (w["a2a_mode"] == 1.0) | ((w["a2a_mode"] == 0.0) & (new / t["tp"] <= LOW_LATENCY_MAX_TOKENS))
    per_byte = np.where(low_latency, w["a2a_ll_s_per_byte"], normal)
    alltoall = np.where(t["ep"] > 1, 2.0 * t["moe_layers"] * w["latency_s"] + a2a_bytes * per_byte, 0.0)
    busy = np.maximum(compute_time, memory_time)
    comm = comm + np.where(w["tbo"] > 0, alltoall - w["tbo_overlap"] * np.minimum(busy, alltoall), alltoall)

    host = w["overhead_s"] + w["eager_s_per_layer"] * t["layers"] + w["per_sequence_s"] * seqs
    host = host + np.where(seqs > w["graph_max_seqs"], w["graphless_s_per_layer"] * t["layers"], 0.0)
    step = busy + comm + host
    is_compute = compute_time >= memory_time
    out = StepCost(
        flops=flops,
        bytes=nbytes,
        compute_time_s=compute_time,
        memory_time_s=memory_time,
        comm_time_s=comm,
        step_time_s=step,
        arithmetic_intensity=flops / nbytes,
        bound=np.where(is_compute, "compute", "memory"),
        mfu=ideal_compute / step,
        mbu=nbytes / (w["hbm"] * step),
        gemm_flops=gemm,
        attention_flops=attn,
        lm_head_flops=head,
        weight_bytes=weights,
        kv_read_bytes=kv_read,
        kv_write_bytes=kv_write,
        activation_bytes=act,
        overhead_s=np.broadcast_to(host, np.shape(step)),
        alltoall_time_s=alltoall,
    )
    return out


_SCALAR_TERMS = (
    "gemm_flops_per_token", "attn_flops_per_pair_full", "attn_flops_per_pair_window", "linear_flops_per_token",
    "head_flops_per_logit", "experts_per_token", "experts", "fixed_weight_bytes", "routed_bytes", "head_bytes",
    "kv_bytes_full", "kv_bytes_window", "state_bytes_per_seq", "act_bytes_per_token", "act_bytes_per_logit",
    "routed_flops_per_token", "tp", "hidden", "logit_gather_bytes", "layers", "expert_group_spread", "gqa_group",
)
_SCALAR_HW = (
    "peak_gemm", "peak_16", "gemm_half_tokens", "moe_extra", "attention_rel", "ce", "hbm", "be", "intra", "inter",
    "gpus_per_node", "ie", "latency_s", "overhead_s", "per_sequence_s", "eager_s_per_layer", "graph_max_seqs",
    "graphless_s_per_layer", "kv_reread",
)


def _scalar_path_exact(t: dict[str, Any], w: dict[str, Any]) -> bool:
    """Whether :func:`_evaluate_one` gives :func:`_evaluate`'s result: no expert or data
    parallelism, no two-batch overlap, no load imbalance and the experts on the dense GEMMs' unit
    at its efficiency (every term the scalar path leaves out is then exactly 0)."""
    return (
        t["ep"] == 1 and t["dp"] == 1 and w["tbo"] == 0 and w["imbalance_extra"] == 0
        and w["peak_expert"] == w["peak_gemm"] and w["routed_bytes_extra"] == 0
    )


def _scalar_terms(t: dict[str, Any], w: dict[str, Any]) -> tuple[float, ...]:
    """The model and hardware terms :func:`_evaluate_one` reads, as one tuple (unpacked at once)."""
    return tuple(t[k] for k in _SCALAR_TERMS) + tuple(w[k] for k in _SCALAR_HW)


def _evaluate_one(
    terms: tuple[float, ...],
    new: float,
    logits: float,
    pairs: float,
    pairs_w: float,
    read: float,
    read_w: float,
    seqs: float,
) -> StepCost:
    """:func:`_evaluate` on Python floats, operation for operation (so the results are the same
    IEEE doubles; tested), without numpy's per-call cost: the scalar path of :class:`StepPricer`.
    ``terms`` is :func:`_scalar_terms` of the model and hardware terms."""
    (
        gemm_per_token, attn_full, attn_window, linear_per_token, head_per_logit, experts_per_token, experts,
        fixed_weight_bytes, routed_bytes, head_bytes, kv_full, kv_window, state_per_seq, act_per_token, act_per_logit,
        routed_per_token, tp, hidden, logit_gather_bytes, layers, expert_group_spread, gqa_group,
        peak_gemm, peak_16, gemm_half_tokens, moe_extra, attention_rel, ce, hbm, be, intra, inter, gpus_per_node, ie,
        latency_s, overhead_s, per_sequence_s, eager_s_per_layer, graph_max_seqs, graphless_s_per_layer, kv_reread,
    ) = terms
    has_logits = logits > 0
    gemm = gemm_per_token * new
    attn = attn_full * pairs + attn_window * pairs_w
    attn = attn + linear_per_token * new
    head = head_per_logit * logits
    flops = gemm + attn + head

    touched = 1.0 - (1.0 - experts_per_token / experts) ** new
    weights = fixed_weight_bytes + routed_bytes * touched + head_bytes * has_logits
    reread = kv_reads_per_step(gqa_group, kv_reread)
    kv_read = (kv_full * read + kv_window * read_w) * reread + state_per_seq * seqs
    kv_write = (kv_full + kv_window) * new + state_per_seq * seqs
    act = act_per_token * new + act_per_logit * logits
    nbytes = weights + kv_read + kv_write + act

    ideal_compute = gemm / peak_gemm + (attn + head) / peak_16
    gemm_work = gemm + (gemm_per_token + routed_per_token * expert_group_spread) * gemm_half_tokens + routed_per_token * new * moe_extra
    compute_time = (gemm_work / peak_gemm + (attn + head) / (peak_16 * attention_rel)) / ce
    memory_time = nbytes / (hbm * be)

    if tp > 1:
        link = (intra if tp <= gpus_per_node else inter) * ie
        share = (tp - 1.0) / tp
        allreduce = latency_s + 2.0 * share * (new * hidden * ACTIVATION_BYTES) / link
        gather = (latency_s + share * logits * logit_gather_bytes / link) * has_logits
        comm = (2.0 * layers + 1.0) * allreduce + gather
    else:
        comm = 0.0

    host = overhead_s + eager_s_per_layer * layers + per_sequence_s * seqs
    host = host + (graphless_s_per_layer * layers if seqs > graph_max_seqs else 0.0)
    step = (compute_time if compute_time >= memory_time else memory_time) + comm + host
    return fast_init(
        StepCost,
        flops=float(flops),
        bytes=float(nbytes),
        compute_time_s=float(compute_time),
        memory_time_s=float(memory_time),
        comm_time_s=float(comm),
        step_time_s=float(step),
        arithmetic_intensity=float(flops / nbytes),
        bound="compute" if compute_time >= memory_time else "memory",
        mfu=float(ideal_compute / step),
        mbu=float(nbytes / (hbm * step)),
        gemm_flops=float(gemm),
        attention_flops=float(attn),
        lm_head_flops=float(head),
        weight_bytes=float(weights),
        kv_read_bytes=float(kv_read),
        kv_write_bytes=float(kv_write),
        activation_bytes=float(act),
        overhead_s=float(host),
        alltoall_time_s=0.0,
    )


def _one(x: Any, name: str, minimum: float = 0) -> float:
    """:func:`_arr` for a Python number: the same check and message."""
    value = float(x)
    if not (minimum <= value < _INF):
        raise InputError(f"{name}: every value must be a finite number >= {minimum:g}")
    return value


def _scalar(*values: Any) -> bool:
    """Whether every value is a plain Python (or numpy scalar) number, not an array."""
    for v in values:
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            return False
    return True


def _finish(cost: StepCost) -> StepCost:
    """Broadcast every field to one shape; 0-d results become Python floats/str."""
    shape = np.shape(cost.step_time_s)
    values = {}
    for k, v in cost.as_dict().items():
        arr = np.broadcast_to(np.asarray(v), shape)
        if shape == ():
            values[k] = str(arr) if arr.dtype.kind == "U" else float(arr)
        else:
            values[k] = np.array(arr)
    return StepCost(**values)


def _arr(x: ArrayLike, name: str, minimum: float = 0) -> np.ndarray:
    a = np.asarray(x, dtype=float)
    if np.any(~np.isfinite(a)) or np.any(a < minimum):
        raise InputError(f"{name}: every value must be a finite number >= {minimum:g}")
    return a


# ---------------------------------------------------------------------------------------------
# The generic step and its wrappers
# ---------------------------------------------------------------------------------------------


def engine_step(
    spec: "ModelSpec",
    hw: "HardwareProfile",
    inp: RooflineInputs,
    *,
    new_tokens: ArrayLike,
    logits_tokens: ArrayLike,
    attention_pairs: ArrayLike,
    kv_read_tokens: ArrayLike,
    sequences: ArrayLike,
    window_attention_pairs: ArrayLike | None = None,
    window_kv_read_tokens: ArrayLike | None = None,
) -> StepCost:
    """Price one engine step of arbitrary work (all work arguments broadcast together).

    Parameters
    ----------
    spec, hw, inp
        Model, hardware profile and dtypes / parallelism / efficiencies.
    new_tokens : array-like
        Positions forwarded in the step, summed over its sequences [positions].
    logits_tokens : array-like
        Positions whose logits are computed [positions]: one per sampled sequence, every
        position when scoring, 0 for a prefill chunk that does not end its prompt.
    attention_pairs : array-like
        Sum over the new positions of the positions each attends to, itself included
        [pairs]. A fresh prefill of ``P`` positions has ``P (P + 1) / 2``.
    kv_read_tokens : array-like
        Cached positions whose K/V are read from HBM, summed over sequences [positions].
    sequences : array-like
        Sequences in the step [count]; each reads and writes its linear-attention state.
    window_attention_pairs, window_kv_read_tokens : array-like, optional
        The same two counts for sliding-window layers. Default: capped at the window,
        ``min(attention_pairs, new_tokens x W)`` and ``min(kv_read_tokens, sequences x W)``
        (exact for decode; the wrappers pass exact values for prefill).

    Returns
    -------
    StepCost
        Floats for scalar inputs, else arrays of the broadcast shape.

    Raises
    ------
    InputError
        Unsupported tensor-parallel degree, unknown dtype, negative work.

    Notes
    -----
    Per GPU, with ``T`` = ``new_tokens``, ``N`` = ``logits_tokens``::

        F_gemm = 2 P_active T / tp
        F_attn = pairs x 4 H h L_full / tp  (+ window pairs x 4 H h L_sliding / tp)
        F_head = 2 V d N / tp
        bytes  = W_fixed + W_routed (1 - (1 - k/E)^T) + [N > 0] W_head
               + kv_read x b_kv + T x b_kv + T x a_token + N x a_logit

    where ``P_active`` are the decoder weights a token passes through
    (:meth:`~capplan.modelspec.ModelSpec.mixer_params` + ``active_mlp_params``), ``b_kv`` the
    KV bytes per position over all attention layers on one GPU, and ``a_token``/``a_logit`` the
    activation bytes per position (module notes).

    Examples
    --------
    A 2048-position prefill of Llama-3.1-8B (causal pairs ``2048 x 2049 / 2``), logits for the
    last position only:

    >>> from capplan.hardware import load_hardware
    >>> from capplan.modelspec import load_model_spec
    >>> s = engine_step(load_model_spec("llama-3.1-8b"), load_hardware("h100-sxm"), RooflineInputs(),
    ...                 new_tokens=2048, logits_tokens=1, attention_pairs=2048 * 2049 // 2,
    ...                 kv_read_tokens=0, sequences=1)
    >>> s.bound, round(s.flops / 1e12, 2)
    ('compute', 29.69)
    """
    return step_pricer(spec, hw, inp).step(
        new_tokens=new_tokens, logits_tokens=logits_tokens, attention_pairs=attention_pairs,
        kv_read_tokens=kv_read_tokens, sequences=sequences, window_attention_pairs=window_attention_pairs,
        window_kv_read_tokens=window_kv_read_tokens,
    )


_PRICERS: dict[Any, tuple[Any, Any, Any, "StepPricer"]] = {}
_PRICERS_MAX = 256


def step_pricer(spec: "ModelSpec", hw: "HardwareProfile", inp: RooflineInputs) -> "StepPricer":
    """The :class:`StepPricer` of ``(spec, hw, inp)``, kept for the next call with the same objects.

    Profiles and inputs are frozen, so a pricer built once stays right; the one-off functions
    (:func:`decode_step`, :func:`prefill_step`, ...) use it, so pricing one configuration at a
    time does not recount the model's layers every call. An equal ``inp`` built anew finds it
    too. At most :data:`_PRICERS_MAX` entries are kept.
    """
    key = (id(spec), id(hw), id(inp))
    hit = _PRICERS.get(key)
    if hit is not None and hit[0] is spec and hit[1] is hw and hit[2] is inp:
        return hit[3]
    try:
        alias: Any = (id(spec), id(hw), tuple(inp.__dict__.values()))  # the fields' values: cheaper to hash
        hit = _PRICERS.get(alias)
    except TypeError:  # an engine profile inside makes the inputs unhashable
        alias, hit = None, None
    if hit is not None and hit[0] is spec and hit[1] is hw:
        return hit[3]  # an equal input: found by value (an identity entry per new object would crowd the cache)
    pricer = StepPricer(spec, hw, inp)
    while len(_PRICERS) >= _PRICERS_MAX - 2:
        del _PRICERS[next(iter(_PRICERS))]  # the oldest entry
    _PRICERS[key] = (spec, hw, inp, pricer)
    if alias is not None:
        _PRICERS[alias] = (spec, hw, inp, pricer)
    return pricer


class StepPricer:
    """Prices the steps of one model on one hardware profile at one setting.

    The per-model terms (a pass over every layer) and the resolved efficiency terms are computed
    once, so pricing many steps of the same replica -- a benchmark scenario, a plan's sizing
    search, a fit of engine terms -- costs only the array arithmetic. :func:`engine_step` and
    its wrappers are one-off uses of it.
    """

    def __init__(self, spec: "ModelSpec", hw: "HardwareProfile", inp: RooflineInputs) -> None:
        self.spec, self.hw, self.inp = spec, hw, inp
        self.dp = resolve_dp(inp.tp, inp.ep, inp.dp)
        self._t = _terms(spec, inp.weight_dtype, inp.kv_dtype, inp.tp, inp.ep, self.dp, inp.expert_dtype,
                         inp.redundant_experts, inp.kv_scale)
        self._w = _hw_terms(hw, inp)
        self._terms = _scalar_terms(self._t, self._w)
        self._fast = _scalar_path_exact(self._t, self._w)
        self.window = self._t["window"]

    def with_inputs(self, inp: RooflineInputs) -> "StepPricer":
        """The same model and hardware at other time terms (dtypes and ``tp`` must not change)."""
        other = object.__new__(StepPricer)
        other.spec, other.hw, other.inp, other._t, other.window = self.spec, self.hw, inp, self._t, self.window
        other.dp = self.dp
        other._w = _hw_terms(self.hw, inp)
        other._terms = _scalar_terms(other._t, other._w)
        other._fast = _scalar_path_exact(other._t, other._w)
        return other

    def step(
        self,
        *,
        new_tokens: ArrayLike,
        logits_tokens: ArrayLike,
        attention_pairs: ArrayLike,
        kv_read_tokens: ArrayLike,
        sequences: ArrayLike,
        window_attention_pairs: ArrayLike | None = None,
        window_kv_read_tokens: ArrayLike | None = None,
    ) -> StepCost:
        """Price one step of arbitrary work (see :func:`engine_step`); Python numbers take a path
        without numpy (the same results)."""
        if self._fast and _scalar(new_tokens, logits_tokens, attention_pairs, kv_read_tokens, sequences) and (
            window_attention_pairs is None or _scalar(window_attention_pairs)
        ) and (window_kv_read_tokens is None or _scalar(window_kv_read_tokens)):
            return self._step_one(
                new_tokens, logits_tokens, attention_pairs, kv_read_tokens, sequences, window_attention_pairs,
                window_kv_read_tokens,
            )
        new = _arr(new_tokens, "new_tokens", 1)
        logits = _arr(logits_tokens, "logits_tokens")
        pairs = _arr(attention_pairs, "attention_pairs")
        read = _arr(kv_read_tokens, "kv_read_tokens")
        seqs = _arr(sequences, "sequences")
        win = self.window
        pairs_w = np.minimum(pairs, new * win) if window_attention_pairs is None else _arr(window_attention_pairs, "window_attention_pairs")
        read_w = np.minimum(read, seqs * win) if window_kv_read_tokens is None else _arr(window_kv_read_tokens, "window_kv_read_tokens")
        return _finish(_evaluate(self._t, self._w, new, logits, pairs, pairs_w, read, read_w, seqs))

    def _step_one(
        self, new_tokens: Any, logits_tokens: Any, attention_pairs: Any, kv_read_tokens: Any, sequences: Any,
        window_attention_pairs: Any, window_kv_read_tokens: Any,
    ) -> StepCost:
        """:meth:`step` of Python numbers, in Python floats."""
        new = _one(new_tokens, "new_tokens", 1)
        logits = _one(logits_tokens, "logits_tokens")
        pairs = _one(attention_pairs, "attention_pairs")
        read = _one(kv_read_tokens, "kv_read_tokens")
        seqs = _one(sequences, "sequences")
        win = self.window
        if window_attention_pairs is None:
            capped = new * win
            pairs_w = pairs if pairs <= capped else capped
        else:
            pairs_w = _one(window_attention_pairs, "window_attention_pairs")
        if window_kv_read_tokens is None:
            capped = seqs * win
            read_w = read if read <= capped else capped
        else:
            read_w = _one(window_kv_read_tokens, "window_kv_read_tokens")
        return _evaluate_one(self._terms, new, logits, pairs, pairs_w, read, read_w, seqs)

    def decode(self, batch: ArrayLike, context: ArrayLike) -> StepCost:
        """A decode step (see :func:`decode_step`)."""
        if self._fast and _scalar(batch, context):
            B, c, W = _one(batch, "batch", 1), _one(context, "context"), self.window
            return self._step_one(B, B, B * (c + 1), B * c, B, B * min(c + 1, W), B * min(c, W - 1))
        return self.step(**_decode_work(_arr(batch, "batch", 1), _arr(context, "context"), self.window))

    def prefill(self, prompt: ArrayLike, cached: ArrayLike = 0, batch: ArrayLike = 1) -> StepCost:
        """A prefill step (see :func:`prefill_step`)."""
        if self._fast and _scalar(prompt, cached, batch):
            P, C, B, W = _one(prompt, "prompt", 1), _one(cached, "cached"), _one(batch, "batch", 1), self.window
            return self._step_one(
                B * P, B, B * causal_pairs_one(C, P), B * C, B, B * causal_pairs_one(C, P, W), B * min(C, W - 1)
            )
        return self.step(**_prefill_work(_arr(prompt, "prompt", 1), _arr(cached, "cached"), _arr(batch, "batch", 1), self.window))

    def mixed(
        self, decode_batch: ArrayLike, decode_context: ArrayLike, prefill_chunk: ArrayLike,
        prefill_context: ArrayLike = 0, prefill_last_chunk: bool = False,
    ) -> StepCost:
        """A continuous-batching step of decodes and one prompt chunk (see :func:`mixed_step`)."""
        return self.step(**_mixed_work(decode_batch, decode_context, prefill_chunk, prefill_context, prefill_last_chunk, self.window))

    def chunked(self, tokens: float, pairs: float, pairs_w: float, kv_read: float, sequences: float, logits: float, chunk: int) -> tuple[float, float, float]:
        """Time [s], FLOPs and bytes of ``tokens`` prefill/score positions run in steps of at most
        ``chunk`` positions (the work spread evenly over ``ceil(tokens / chunk)`` steps)."""
        if tokens <= 0:
            return 0.0, 0.0, 0.0
        steps = max(1, math.ceil(tokens / chunk))
        c = self.step(
            new_tokens=tokens / steps,
            logits_tokens=logits / steps,
            attention_pairs=pairs / steps,
            kv_read_tokens=kv_read / steps,
            sequences=max(sequences / steps, 1.0),
            window_attention_pairs=pairs_w / steps,
            window_kv_read_tokens=kv_read / steps,
        )
        return steps * float(c.step_time_s), steps * float(c.flops), steps * float(c.bytes)


def _decode_work(B: Any, c: Any, W: float) -> dict[str, Any]:
    """Work of a decode step: ``B`` sequences, one new position each after ``c`` cached."""
    return dict(
        new_tokens=B, logits_tokens=B, attention_pairs=B * (c + 1), kv_read_tokens=B * c, sequences=B,
        window_attention_pairs=B * np.minimum(c + 1, W), window_kv_read_tokens=B * np.minimum(c, W - 1),
    )


def _prefill_work(P: Any, C: Any, B: Any, W: float) -> dict[str, Any]:
    """Work of a prefill step: ``B`` prompts of ``P`` new positions after ``C`` cached."""
    return dict(
        new_tokens=B * P, logits_tokens=B, attention_pairs=B * causal_pairs(C, P), kv_read_tokens=B * C,
        sequences=B, window_attention_pairs=B * causal_pairs(C, P, W), window_kv_read_tokens=B * np.minimum(C, W - 1),
    )


def _mixed_work(decode_batch: Any, decode_context: Any, prefill_chunk: Any, prefill_context: Any, last: bool, W: float) -> dict[str, Any]:
    """Work of a mixed step: decodes plus one prompt chunk."""
    Bd = _arr(decode_batch, "decode_batch")
    cd = _arr(decode_context, "decode_context")
    n = _arr(prefill_chunk, "prefill_chunk")
    C = _arr(prefill_context, "prefill_context")
    if np.any(Bd + n < 1):
        raise InputError("a mixed step needs at least one decoding sequence or one prefill position")
    has_chunk = (n > 0).astype(float)
    return dict(
        new_tokens=Bd + n,
        logits_tokens=Bd + (has_chunk if last else 0.0),
        attention_pairs=Bd * (cd + 1) + causal_pairs(C, n),
        kv_read_tokens=Bd * cd + has_chunk * C,
        sequences=Bd + has_chunk,
        window_attention_pairs=Bd * np.minimum(cd + 1, W) + causal_pairs(C, n, W),
        window_kv_read_tokens=Bd * np.minimum(cd, W - 1) + has_chunk * np.minimum(C, W - 1),
    )


def causal_pairs(cached: ArrayLike, new: ArrayLike, window: float = math.inf) -> np.ndarray:
    """Attention pairs of ``new`` positions appended after ``cached`` ones, causal, windowed.

    Notes
    -----
    Position ``i`` (1-based among the new ones) attends to ``min(C + i, W)`` positions::

        pairs = sum_{i=1..P} min(C + i, W)
              = P C + P (P + 1) / 2                         when C + P <= W
              = sum_{x=C+1..min(C+P, W)} x + (P - n1) W     otherwise, n1 = max(0, W - C)

    Examples
    --------
    >>> causal_pairs(0, 4).item(), causal_pairs(10, 1).item(), causal_pairs(0, 6, window=4).item()
    (10.0, 11.0, 18.0)
    """
    C = np.asarray(cached, dtype=float)
    P = np.asarray(new, dtype=float)
    if math.isinf(window):
        return P * C + P * (P + 1) / 2
    top = np.minimum(C + P, window)  # last position counted in full
    n1 = np.maximum(top - C, 0)  # new positions below the window edge
    below = n1 * (C + 1 + top) / 2
    return below + (P - n1) * window


def causal_pairs_one(cached: float, new: float, window: float = math.inf) -> float:
    """:func:`causal_pairs` of one sequence's step, in plain Python numbers.

    The simulator prices prefill chunks one at a time, millions of them, where numpy's per-call
    cost would dominate; the formula is the same (the tests check the two agree).

    Examples
    --------
    >>> causal_pairs_one(0, 4), causal_pairs_one(10, 1), causal_pairs_one(0, 6, window=4)
    (10.0, 11.0, 18.0)
    """
    if window == _INF:
        return new * cached + new * (new + 1) * 0.5
    top = cached + new if cached + new < window else window  # last position counted in full
    below_edge = top - cached if top > cached else 0  # new positions below the window edge
    return below_edge * (cached + 1 + top) * 0.5 + (new - below_edge) * window


_INF = math.inf


def decode_step(
    spec: "ModelSpec", hw: "HardwareProfile", inp: RooflineInputs, batch: ArrayLike, context: ArrayLike
) -> StepCost:
    """One decode step: ``batch`` sequences each forward one new position after ``context`` cached.

    Parameters
    ----------
    batch : array-like
        Sequences decoding together [count] (>= 1).
    context : array-like
        Positions already in each sequence's KV cache [positions].

    Notes
    -----
    ``new = logits = sequences = B``; ``pairs = B (c + 1)``; ``kv_read = B c``; on sliding
    layers ``B min(c + 1, W)`` pairs and ``B min(c, W - 1)`` reads. Time per output token is
    ``step_time_s``; decode throughput is ``B / step_time_s`` tokens/s.

    Examples
    --------
    >>> from capplan.hardware import load_hardware
    >>> from capplan.modelspec import load_model_spec
    >>> s = decode_step(load_model_spec("llama-3.1-8b"), load_hardware("h100-sxm"), RooflineInputs(),
    ...                 batch=[1, 512], context=1024)
    >>> s.bound.tolist(), (np.array([1, 512]) / s.step_time_s).round().tolist()  # output tokens/s
    (['memory', 'memory'], [153.0, 13893.0])
    """
    return step_pricer(spec, hw, inp).decode(batch, context)


def prefill_step(
    spec: "ModelSpec",
    hw: "HardwareProfile",
    inp: RooflineInputs,
    prompt: ArrayLike,
    cached: ArrayLike = 0,
    batch: ArrayLike = 1,
) -> StepCost:
    """One prefill step: ``batch`` prompts of ``prompt`` new positions after ``cached`` ones.

    Parameters
    ----------
    prompt : array-like
        Prompt positions forwarded per sequence [positions] (>= 1).
    cached : array-like
        Positions of each sequence already in the KV cache (a prefix-cache hit or earlier
        chunks) [positions].
    batch : array-like
        Prompts prefilled together [count].

    Notes
    -----
    ``new = B P``; ``logits = B`` (last position, sampled); ``pairs = B (P C + P (P + 1) / 2)``
    (:func:`causal_pairs`, windowed on sliding layers); ``kv_read = B C``. Time to first token
    is ``step_time_s``; prefill throughput ``B P / step_time_s``.

    Examples
    --------
    >>> from capplan.hardware import load_hardware
    >>> from capplan.modelspec import load_model_spec
    >>> s = prefill_step(load_model_spec("llama-3.1-8b"), load_hardware("h100-sxm"), RooflineInputs(), prompt=2048)
    >>> s.bound, round(s.step_time_s * 1e3, 1)
    ('compute', 36.4)
    """
    return step_pricer(spec, hw, inp).prefill(prompt, cached, batch)


def score_step(
    spec: "ModelSpec", hw: "HardwareProfile", inp: RooflineInputs, length: ArrayLike, batch: ArrayLike = 1
) -> StepCost:
    """One scoring step: a teacher or reference model forwards ``batch`` known records once.

    Like a fresh prefill of ``length`` positions, but the logits of *every* position are
    computed (log-probabilities of the record's tokens) and nothing is sampled:
    ``logits = B x length``.

    Examples
    --------
    >>> from capplan.hardware import load_hardware
    >>> from capplan.modelspec import load_model_spec
    >>> spec, h100 = load_model_spec("llama-3.1-8b"), load_hardware("h100-sxm")
    >>> s, p = score_step(spec, h100, RooflineInputs(), 2048), prefill_step(spec, h100, RooflineInputs(), 2048)
    >>> round((s.lm_head_flops - p.lm_head_flops) / 1e12, 2)  # 2047 more positions x 2 V d
    2.15
    """
    L_ = _arr(length, "length", 1)
    B = _arr(batch, "batch", 1)
    W = _window(spec)
    return engine_step(
        spec, hw, inp,
        new_tokens=B * L_, logits_tokens=B * L_, attention_pairs=B * causal_pairs(0, L_), kv_read_tokens=0,
        sequences=B, window_attention_pairs=B * causal_pairs(0, L_, W), window_kv_read_tokens=0,
    )


def mixed_step(
    spec: "ModelSpec",
    hw: "HardwareProfile",
    inp: RooflineInputs,
    decode_batch: ArrayLike,
    decode_context: ArrayLike,
    prefill_chunk: ArrayLike,
    prefill_context: ArrayLike = 0,
    prefill_last_chunk: bool = False,
) -> StepCost:
    """One continuous-batching step: decodes plus one chunk of a prompt, as engine schedulers build them.

    Parameters
    ----------
    decode_batch : array-like
        Sequences decoding one position each [count] (may be 0).
    decode_context : array-like
        Cached positions of each decoding sequence [positions].
    prefill_chunk : array-like
        Prompt positions of the one prefilling sequence in this step [positions] (may be 0).
    prefill_context : array-like
        Positions of that sequence already cached (earlier chunks, prefix hits) [positions].
    prefill_last_chunk : bool
        The chunk ends its prompt, so its last position's logits are computed and sampled.

    Notes
    -----
    The sum of a :func:`decode_step` and a :func:`prefill_step` in work, priced as one step
    (weights read once). A scheduler with token budget ``M`` (vLLM ``max_num_batched_tokens``)
    fills ``decode_batch + prefill_chunk <= M``.

    Examples
    --------
    >>> from capplan.hardware import load_hardware
    >>> from capplan.modelspec import load_model_spec
    >>> spec, h100 = load_model_spec("llama-3.1-8b"), load_hardware("h100-sxm")
    >>> m = mixed_step(spec, h100, RooflineInputs(), 64, 2048, 8192 - 64)
    >>> d = decode_step(spec, h100, RooflineInputs(), 64, 2048)
    >>> m.bound, d.bound, round(m.step_time_s * 1e3), round(d.step_time_s * 1e3)  # [ms]
    ('compute', 'memory', 160, 13)
    """
    return step_pricer(spec, hw, inp).mixed(decode_batch, decode_context, prefill_chunk, prefill_context, prefill_last_chunk)


def _window(spec: "ModelSpec") -> float:
    return spec.window_tokens


# ---------------------------------------------------------------------------------------------
# Derived figures
# ---------------------------------------------------------------------------------------------


def ridge_point(
    hw: "HardwareProfile", dtype: str = "bf16", compute_efficiency: float = 1.0, bandwidth_efficiency: float = 1.0
) -> float:
    """Arithmetic intensity at which a kernel turns from memory- to compute-bound [FLOP/byte].

    Notes
    -----
    ``ridge = peak_flops(dtype) x compute_efficiency / (hbm_bandwidth x bandwidth_efficiency)``.
    With both efficiencies 1 it is the datasheet ridge; with the engine profile's efficiencies it is the
    one :func:`engine_step` uses to decide ``bound`` (exactly, when all FLOPs run on one unit and
    the engine's GEMM curve is flat).

    Examples
    --------
    >>> from capplan.hardware import load_hardware
    >>> h100 = load_hardware("h100-sxm")
    >>> round(ridge_point(h100), 1), round(ridge_point(h100, "fp8"), 1)  # 989.4e12 / 3.35e12
    (295.3, 590.7)
    >>> round(ridge_point(h100, compute_efficiency=0.7, bandwidth_efficiency=0.8), 1)
    258.4
    """
    return hw.peak_flops(dtype) * compute_efficiency / (hw.hbm_bandwidth_bytes_per_s * bandwidth_efficiency)


def critical_decode_batch(
    spec: "ModelSpec", hw: "HardwareProfile", inp: RooflineInputs, context: ArrayLike
) -> Any:
    """Smallest decode batch at which a decode step turns compute-bound [sequences].

    Parameters
    ----------
    context : array-like
        Cached positions per sequence [positions].

    Returns
    -------
    float or ndarray
        The smallest integer ``B`` with ``compute_time_s >= memory_time_s`` in
        :func:`decode_step`; ``inf`` where none exists up to :data:`CRITICAL_BATCH_LIMIT` (long
        contexts: attention does ``4 H h`` FLOPs per ``2 H_kv h b`` KV bytes, an intensity of
        ``2 H / (H_kv b)`` FLOP/byte, below every ridge).

    Notes
    -----
    ``compute_time - memory_time`` is convex in ``B`` (linear terms, minus the concave MoE
    expert bytes) and negative at ``B = 0``, so it crosses zero once; the crossing is found by
    bisection. For a dense model at short context the answer is close to
    ``ridge x bytes_per_weight / 2`` (e.g. 258 x 2 / 2 = 258 for bf16 on an H100).

    Examples
    --------
    >>> from capplan.hardware import load_hardware
    >>> from capplan.modelspec import load_model_spec
    >>> spec, h100 = load_model_spec("llama-3.1-8b"), load_hardware("h100-sxm")
    >>> critical_decode_batch(spec, h100, RooflineInputs(), [0, 128, 8192])
    array([342., 549.,  inf])
    """
    c = _arr(context, "context")
    lo = np.zeros_like(c)  # memory-bound (B = 0 has weights and no FLOPs)
    hi = np.full_like(c, float(CRITICAL_BATCH_LIMIT))
    top = decode_step(spec, hw, inp, hi, c)
    never = np.asarray(top.compute_time_s) < np.asarray(top.memory_time_s)
    while np.any(hi - lo > 1):
        mid = np.floor((lo + hi) / 2)
        mid = np.where(hi - lo > 1, mid, hi)
        s = decode_step(spec, hw, inp, np.maximum(mid, 1), c)
        ok = np.asarray(s.compute_time_s) >= np.asarray(s.memory_time_s)
        hi = np.where(ok, mid, hi)
        lo = np.where(ok, lo, mid)
    out = np.where(never, np.inf, hi)
    return float(out) if out.ndim == 0 else out


def step_for_kind(
    spec: "ModelSpec",
    hw: "HardwareProfile",
    inp: RooflineInputs,
    kind: str,
    batch: ArrayLike,
    context: ArrayLike,
    prompt: ArrayLike,
    token_budget: int = 8192,
) -> tuple[StepCost, np.ndarray, np.ndarray]:
    """Price the step of one work kind; returns ``(cost, prompt_positions, tokens_per_step)``.

    Parameters
    ----------
    kind : {"decode", "prefill", "score", "mixed"}
        ``decode``: ``batch`` sequences at ``context`` cached positions (``prompt`` ignored).
        ``prefill``: ``batch`` prompts of ``prompt`` positions after ``context`` cached ones.
        ``score``: ``batch`` records of ``prompt`` positions forwarded once (``context`` must be 0).
        ``mixed``: ``batch`` decodes at ``context`` plus one chunk of a ``prompt``-position prompt,
        ``min(prompt, token_budget - batch)`` positions, ending the prompt when it fits.
    token_budget : int
        Positions a mixed step may forward [positions] (vLLM ``max_num_batched_tokens``).

    Returns
    -------
    cost : StepCost
    prompt_positions : ndarray
        Prompt positions forwarded per step (0 for decode; the chunk for mixed).
    tokens_per_step : ndarray
        Positions forwarded in the step: ``B`` (decode), ``B P`` (prefill, score),
        ``B + chunk`` (mixed); tokens/s is this over ``step_time_s``.
    """
    B = _arr(batch, "batch", 1)
    c = _arr(context, "context")
    P = _arr(prompt, "prompt", 1)
    shape = np.broadcast(B, c, P).shape
    B, c, P = (np.broadcast_to(x, shape) for x in (B, c, P))
    if kind == "decode":
        return decode_step(spec, hw, inp, B, c), np.zeros(shape), B
    if kind == "prefill":
        return prefill_step(spec, hw, inp, P, c, B), P, B * P
    if kind == "score":
        if np.any(c != 0):
            raise InputError("--kind score forwards whole records from position 0; give their length with --prompt, not --context")
        return score_step(spec, hw, inp, P, B), P, B * P
    if kind == "mixed":
        if np.any(B > token_budget):
            raise InputError(f"--batch {int(np.max(B))} exceeds --token-budget {token_budget}: a step forwards at most the budget")
        chunk = np.minimum(P, token_budget - B)
        return _mixed_varying_last(spec, hw, inp, B, c, chunk, chunk >= P), chunk, B + chunk
    raise InputError(f"--kind {kind}: unknown work kind (allowed: {', '.join(KINDS)})")


def _mixed_varying_last(
    spec: "ModelSpec", hw: "HardwareProfile", inp: RooflineInputs, B: Any, c: Any, chunk: Any, last: Any
) -> StepCost:
    """Mixed steps whose chunk ends its prompt where ``last`` is true (element-wise)."""
    a = mixed_step(spec, hw, inp, B, c, chunk, 0, prefill_last_chunk=True)
    if np.all(last):
        return a
    b = mixed_step(spec, hw, inp, B, c, chunk, 0, prefill_last_chunk=False)
    return _finish(StepCost(**{k: np.where(last, getattr(a, k), getattr(b, k)) for k in a.as_dict()}))


def roofline_rows(
    spec: "ModelSpec",
    hw: "HardwareProfile",
    inp: RooflineInputs,
    kind: str,
    batches: Sequence[int],
    contexts: Sequence[int],
    prompts: Sequence[int],
    token_budget: int = 8192,
) -> list[dict[str, Any]]:
    """One row per (batch, context, prompt) combination: the ``capplan roofline`` JSON contract.

    Returns
    -------
    list of dict
        Keys ``kind``, ``batch``, ``context``, ``prompt``, ``step_time_s``, ``tokens_per_s``,
        ``flops``, ``bytes``, ``arithmetic_intensity``, ``bound``, ``mbu``, ``mfu`` (see
        ``docs/roofline.md``). ``prompt`` is the prompt positions forwarded per sequence in the
        step (0 for decode); ``context`` the positions cached before it; ``flops``/``bytes`` are
        per GPU. Decode rows ignore ``prompts``; score rows ignore ``contexts``.
    """
    if kind not in KINDS:
        raise InputError(f"--kind {kind}: unknown work kind (allowed: {', '.join(KINDS)})")
    ps = [0] if kind == "decode" else list(prompts)
    cs = list(contexts)
    grid = np.array([(b, c, p) for b in batches for c in cs for p in ps], dtype=float).reshape(-1, 3)
    B, C, P = grid[:, 0], grid[:, 1], grid[:, 2]
    cost, prompt_pos, tokens = step_for_kind(spec, hw, inp, kind, B, C, np.maximum(P, 1), token_budget)
    rows = []
    for i in range(len(B)):
        rows.append(
            {
                "kind": kind,
                "batch": int(B[i]),
                "context": int(C[i]),
                "prompt": int(prompt_pos[i]),
                "step_time_s": float(cost.step_time_s[i]),
                "tokens_per_s": float(tokens[i] / cost.step_time_s[i]),
                "flops": float(cost.flops[i]),
                "bytes": float(cost.bytes[i]),
                "arithmetic_intensity": float(cost.arithmetic_intensity[i]),
                "bound": str(cost.bound[i]),
                "mbu": float(cost.mbu[i]),
                "mfu": float(cost.mfu[i]),
            }
        )
    return rows


ROW_KEYS: tuple[str, ...] = (
    "kind", "batch", "context", "prompt", "step_time_s", "tokens_per_s", "flops", "bytes",
    "arithmetic_intensity", "bound", "mbu", "mfu",
)
"""Keys of one ``capplan roofline`` row, in order (the JSON and CSV contract)."""


# ---------------------------------------------------------------------------------------------
# Vectorised sweeps
# ---------------------------------------------------------------------------------------------


def decode_grid(
    spec: "ModelSpec",
    hardware: Sequence["HardwareProfile"],
    inp: RooflineInputs,
    tp: Sequence[int],
    batch: ArrayLike,
    context: ArrayLike,
) -> StepCost:
    """Decode steps over the full grid hardware x TP x batch x context, in one numpy pass.

    Parameters
    ----------
    hardware : sequence of HardwareProfile
        Profiles to sweep (axis 0).
    inp : RooflineInputs
        Dtypes and efficiency overrides; its ``tp`` is ignored (``tp`` is swept).
    tp : sequence of int
        Tensor-parallel degrees (axis 1); each must suit the model.
    batch, context : array-like
        1-D decode batches (axis 2) and cached positions (axis 3).

    Returns
    -------
    StepCost
        Arrays of shape ``(len(hardware), len(tp), len(batch), len(context))``; identical to
        :func:`decode_step` element by element.

    Examples
    --------
    >>> from capplan.hardware import load_hardware
    >>> from capplan.modelspec import load_model_spec
    >>> g = decode_grid(load_model_spec("llama-3.1-8b"), [load_hardware("h100-sxm"), load_hardware("a100-80gb")],
    ...                 RooflineInputs(), tp=[1, 2], batch=[1, 64], context=[1024, 4096])
    >>> g.step_time_s.shape
    (2, 2, 2, 2)
    """
    if inp.ep != 1 or (inp.dp or 1) != 1 or inp.expert_dtype not in (None, inp.weight_dtype) or inp.redundant_experts:
        raise InputError("decode_grid sweeps tensor parallelism only; price expert/data-parallel layouts with StepPricer")
    tps = [int(x) for x in tp]
    per_tp = [_terms(spec, inp.weight_dtype, inp.kv_dtype, x, kv_scale=inp.kv_scale) for x in tps]
    per_hw = [_hw_terms(hw, inp) for hw in hardware]
    t = {k: np.array([d[k] for d in per_tp]).reshape(1, -1, 1, 1) for k in per_tp[0]}
    w = {k: np.array([d[k] for d in per_hw]).reshape(-1, 1, 1, 1) for k in per_hw[0]}
    B = _arr(batch, "batch", 1).reshape(1, 1, -1, 1)
    c = _arr(context, "context").reshape(1, 1, 1, -1)
    win = t["window"]
    return _evaluate(
        t, w, B, B, B * (c + 1), B * np.minimum(c + 1, win), B * c, B * np.minimum(c, win - 1), B
    )
