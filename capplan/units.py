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
WeightDtype = Literal["bf16", "fp16", "fp8", "int8", "int4"]

KV_DTYPE_BYTES: dict[str, float] = {"bf16": 2, "fp16": 2, "fp8": 1, "int8": 1, "int4": 0.5}
"""Bytes per cached element. int4 KV exists in some engines (LMDeploy ``quant_policy=4``);
vLLM and SGLang offer fp8 (and vLLM int8 on some backends)."""

WEIGHT_DTYPE_BYTES: dict[str, float] = {"bf16": 2, "fp16": 2, "fp8": 1, "int8": 1, "int4": 0.5 + 2 / 128}
"""Bytes per quantised weight. int4 adds one 16-bit scale per group of 128 weights (AWQ/GPTQ
``group_size: 128``); per-channel fp8/int8 scales are negligible and not counted. Only the
decoder's linear layers are quantised: embeddings, the LM head, norms and routers stay 16-bit,
as in the common fp8/AWQ/GPTQ checkpoints."""


def dtype_bytes(dtype: str, table: dict[str, float], flag: str) -> float:
    """Bytes per element of ``dtype`` in ``table``; an unknown dtype is an error naming ``flag``.

    >>> dtype_bytes("fp8", KV_DTYPE_BYTES, "--kv-dtype")
    1
    """
    try:
        return table[dtype]
    except KeyError:
        raise InputError(f"{flag} {dtype}: unknown dtype (allowed: {', '.join(table)})") from None
