"""Units and dtypes: GiB, and the bytes one element of each weight / KV dtype takes.

Memory is counted in GiB = 2^30 bytes (what frameworks print); vendor bandwidth and FLOP/s are
decimal (1 GB/s = 1e9 bytes/s, 1 TFLOP/s = 1e12 FLOP/s). This module imports nothing of capplan
but :mod:`capplan.errors`, so every layer can use it.
"""

from __future__ import annotations

from typing import Literal

from capplan.errors import InputError

GIB = 2**30
"""Bytes in one GiB."""

MAX_MEM_GIB = 10 * 1024.0
"""Largest memory figure accepted for one GPU [GiB] (10 TiB): anything above is a typo."""
MAX_CONTEXT_TOKENS = 10_000_000
"""Largest context, batch budget or block accepted [tokens]."""
MAX_GPUS = 1_000_000
"""Largest GPU count or parallel degree accepted [GPUs]."""
MAX_SEQUENCES = 10_000_000
"""Largest sequence count accepted (batch, ``max_num_seqs``) [sequences]."""

KVDtype = Literal["bf16", "fp16", "fp8", "int8", "int4"]
WeightDtype = Literal["bf16", "fp16", "fp8", "int8", "int4", "nvfp4", "mxfp4"]
KVScale = Literal["tensor", "token_head"]

DTYPE_SPELLINGS = {"auto": "bf16", "bfloat16": "bf16", "float16": "fp16", "half": "fp16", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8"}
"""vLLM's dtype spellings and the capplan dtype each means (``auto``: the checkpoint's 16-bit dtype)."""


def dtype_name(value: str) -> str:
    """capplan's dtype name for a capplan or vLLM spelling (unknown names pass through, to be
    refused with the allowed list by the option model).

    >>> dtype_name("bfloat16"), dtype_name("FP8_E4M3"), dtype_name("nvfp4")
    ('bf16', 'fp8', 'nvfp4')
    """
    return DTYPE_SPELLINGS.get(value.strip().lower(), value.strip().lower())

FP4_DTYPES: frozenset[str] = frozenset({"nvfp4", "mxfp4"})
"""Weight dtypes whose GEMMs need an FP4 tensor unit (``peak_tflops.fp4``) to run at full rate."""

KV_DTYPE_BYTES: dict[str, float] = {"bf16": 2, "fp16": 2, "fp8": 1, "int8": 1, "int4": 0.5}
"""Bytes per cached element. int4 KV exists in some engines (LMDeploy ``quant_policy=4``);
vLLM and SGLang offer fp8 (and vLLM int8 on some backends)."""

KV_SCALE_BYTES = 4
"""Bytes of one KV quantisation scale: fp32, as vLLM's ``k_scale``/``v_scale`` tensors."""

NVFP4_BLOCK = 16
"""Elements sharing one FP8 (E4M3) scale in NVFP4 (NVIDIA, "Introducing NVFP4 for efficient and
accurate low-precision inference", 2025: "a two-level scaling strategy ... one FP8 E4M3 scale
factor per 16-value micro-block" plus one FP32 scale per tensor)."""

MXFP4_BLOCK = 32
"""Elements sharing one 8-bit power-of-two (E8M0) scale in MXFP4 (OCP Microscaling Formats (MX)
Specification v1.0, 2023: block size k = 32, scale type E8M0)."""

INT4_GROUP = 128
"""Weights per 16-bit scale in AWQ/GPTQ int4 checkpoints (``group_size: 128``)."""

WEIGHT_DTYPE_BYTES: dict[str, float] = {
    "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1, "int4": 0.5 + 2 / INT4_GROUP,
    "nvfp4": 0.5 + 1 / NVFP4_BLOCK, "mxfp4": 0.5 + 1 / MXFP4_BLOCK,
}
"""Bytes per quantised weight, scales included. int4 (W4A16 AWQ/GPTQ) adds one 16-bit scale per
group of 128 weights (``group_size: 128``; the 4-bit zero points of asymmetric AWQ, 0.4 % more,
are not counted); nvfp4 one 1-byte E4M3 scale per 16 values (0.5625 bytes); mxfp4 one 1-byte
E8M0 scale per 32 values (0.53125 bytes). Per-channel or 128 x 128-block fp8/int8 scales are
below 0.1 % and not counted. Only the decoder's linear layers are quantised: embeddings, the LM
head, norms and routers stay 16-bit, as in the common fp8/AWQ/GPTQ/NVFP4 checkpoints."""


def kv_element_bytes(kv_dtype: str, head_dim: int, scale: str = "tensor") -> float:
    """Bytes one cached K or V element takes, its quantisation scale included.

    Parameters
    ----------
    kv_dtype : str
        One of :data:`KV_DTYPE_BYTES`.
    head_dim : int
        Elements per head and token that share one scale with ``scale="token_head"`` [elements].
    scale : {"tensor", "token_head"}
        ``tensor``: one scale per layer (vLLM's and TensorRT-LLM's fp8 KV cache: ``k_scale`` and
        ``v_scale`` per layer), nothing per token; ``token_head``: one fp32 scale per token and
        head (dynamic per-token quantisation, e.g. LMDeploy's int8/int4 KV), ``4 / head_dim``
        bytes more per element. 16-bit caches carry no scale either way.

    Examples
    --------
    >>> kv_element_bytes("fp8", 128), kv_element_bytes("fp8", 128, "token_head")
    (1, 1.03125)
    >>> kv_element_bytes("bf16", 128, "token_head")
    2
    """
    b = dtype_bytes(kv_dtype, KV_DTYPE_BYTES, "--kv-dtype")
    if scale == "tensor" or b >= 2:
        return b
    if scale != "token_head":
        raise InputError(f"--kv-scale {scale}: unknown scale granularity (allowed: tensor, token_head)")
    return b + KV_SCALE_BYTES / head_dim


def dtype_bytes(dtype: str, table: dict[str, float], flag: str) -> float:
    """Bytes per element of ``dtype`` in ``table``; an unknown dtype is an error naming ``flag``.

    >>> dtype_bytes("fp8", KV_DTYPE_BYTES, "--kv-dtype")
    1
    """
    try:
        return table[dtype]
    except KeyError:
        raise InputError(f"{flag} {dtype}: unknown dtype (allowed: {', '.join(table)})") from None
