"""The trainer side of an RL (or SFT/distillation) step: FLOPs, memory, GPUs, time, weight sync.

Assumptions (each a named, overridable input, labelled as an assumption in output):

* **Training FLOPs** = 3 x the forward FLOPs of every recorded position the trainer forwards
  (forward + backward, the usual ``6 x params x tokens`` rule plus attention), plus one forward
  for recomputing the behaviour log-probs (``training.recompute_logprobs``) and one for a
  reference model (``training.reference_forward``); :func:`trainer_passes` owns the count.
  Forward FLOPs come from :func:`capplan.roofline.engine_step` with logits at every position.
* **Trainer MFU** = 0.40 of dense bf16 peak: the Llama 3 paper reports 38-43% BF16 MFU for
  training on H100 ("The Llama 3 Herd of Models", arXiv:2407.21783, Table 4).
* **Memory, sharded (FSDP / ZeRO-3)**: 16 bytes per parameter for mixed-precision AdamW (bf16
  weights 2 + bf16 gradients 2 + fp32 master weights 4 + fp32 Adam moments 8; ZeRO paper,
  arXiv:1910.02054, section 3.1) spread evenly over the trainer GPUs; activations with full
  activation checkpointing: one bf16 hidden state per layer per token of a micro-batch, plus the
  working set of one layer and fp32 logits of a 4,096-token loss chunk.
* **Weight sync**: the 16-bit weights travel from the trainer to every inference replica; each
  of a replica's ``tp`` GPUs receives its ``1/tp`` shard over its own inter-node link, so
  ``time = weight_bytes / (tp x inter_node_bandwidth x interconnect_efficiency) + latency``
  (a broadcast pipelines across replicas). Compare checkpoint-engine's published 6.22 s for
  Qwen3-235B BF16 on 8xH800 (``../shared/research/rl_systems.md`` section 3.1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from capplan.units import GIB

if TYPE_CHECKING:
    import numpy as np

    from capplan.hardware import HardwareProfile
    from capplan.modelspec import ModelSpec


TRAIN_MFU = 0.40
"""Default trainer MFU (ASSUMPTION; Llama 3 paper, Table 4: 38-43% BF16 MFU on H100)."""
TRAIN_BYTES_PER_PARAM = 16.0
"""Mixed-precision AdamW state per parameter [bytes] (ZeRO paper, section 3.1)."""
MICRO_BATCH_TOKENS = 32768
"""Tokens per GPU per micro-batch (packed sequences) for the activation estimate [tokens];
open-instruct's OLMo 3 scripts pack 35,840 (``pack_length``)."""
LOSS_CHUNK_TOKENS = 4096
"""Positions whose fp32 logits are materialised at once by a chunked loss [tokens]."""
TRAINER_USABLE_FRACTION = 0.9
"""Fraction of device memory a trainer can fill (allocator fragmentation, NCCL, CUDA context)."""
SYNC_NETWORK_EFFICIENCY = 0.7
"""Fraction of the per-GPU network bandwidth a weight broadcast reaches (ASSUMPTION: calculon's
A100 system file derates InfiniBand by 0.9 and NVLink by 0.65, calculon-ai/calculon
systems/a100_80g.json; 0.7 is one blended value)."""
SYNC_LATENCY_S = 0.5
"""Fixed cost of one weight sync (pause, handshake, cache reset) [s] (ASSUMPTION)."""


def forward_flops(spec: "ModelSpec", lengths: "np.ndarray") -> float:
    """FLOPs of one forward pass over records of the given lengths, logits at every position.

    Parameters
    ----------
    lengths : array of int
        Record lengths [positions].

    Notes
    -----
    One :func:`capplan.roofline.step_flops` over the summed work (FLOPs are additive):
    ``new = logits = sum L``, causal pairs ``sum L (L + 1) / 2`` (windowed on sliding layers).
    """
    import numpy as np

    from capplan.roofline import causal_pairs, step_flops

    L = np.asarray(lengths, dtype=float)
    L = L[L > 0]
    if L.size == 0:
        return 0.0
    total = float(L.sum())
    return float(
        step_flops(
            spec,
            new_tokens=total,
            logits_tokens=total,
            attention_pairs=float(causal_pairs(0, L).sum()),
            window_attention_pairs=float(causal_pairs(0, L, spec.window_tokens).sum()),
        )
    )


@dataclass(frozen=True)
class TrainerPasses:
    """Forward-equivalent passes a trainer step makes over each record: the one home of the rule.

    ``3`` for forward + backward, ``+ 1`` to recompute the behaviour policy's log-probs,
    ``+ 1`` for a frozen reference model's forward.
    """

    recompute_logprobs: bool
    """Whether the log-prob recomputation pass is counted (only with a rollout engine)."""
    reference_forward: bool
    """Whether a reference model forwards every record."""

    @property
    def count(self) -> int:
        """Forward-equivalent passes per record [passes]."""
        return 3 + int(self.recompute_logprobs) + int(self.reference_forward)

    @property
    def description(self) -> str:
        """The passes in words, e.g. ``3 fwd+bwd + log-prob recompute``."""
        return (
            "3 fwd+bwd"
            + (" + log-prob recompute" if self.recompute_logprobs else "")
            + (" + reference" if self.reference_forward else "")
        )


def trainer_passes(recompute_logprobs: bool, reference_forward: bool, has_rollout: bool = True) -> TrainerPasses:
    """The passes of one trainer step (see :class:`TrainerPasses`).

    Parameters
    ----------
    recompute_logprobs : bool
        ``training.recompute_logprobs``: recompute the behaviour log-probs with one forward.
    reference_forward : bool
        ``training.reference_forward``: a frozen reference model forwards the record.
    has_rollout : bool
        Whether a rollout engine sampled the records. Without one (SFT) there are no behaviour
        log-probs to recompute, so ``recompute_logprobs`` is ignored (as the workload field
        documents).

    Examples
    --------
    >>> trainer_passes(True, False).count, trainer_passes(True, True, has_rollout=False).count
    (4, 4)
    """
    return TrainerPasses(recompute_logprobs=recompute_logprobs and has_rollout, reference_forward=reference_forward)


def training_flops(
    spec: "ModelSpec",
    lengths: "np.ndarray",
    recompute_logprobs: bool = True,
    reference_forward: bool = False,
    has_rollout: bool = True,
) -> float:
    """FLOPs of one trainer step over records of the given lengths [FLOP].

    ``trainer_passes(...).count x forward``: ``3 x forward`` (forward + backward) ``+ forward``
    per extra pass (log-prob recomputation with a rollout engine, reference model).

    Examples
    --------
    >>> import numpy as np
    >>> from capplan.modelspec import load_model_spec
    >>> spec = load_model_spec("llama-3.1-8b")
    >>> f = training_flops(spec, np.array([1000]), recompute_logprobs=False)
    >>> matmul_params = spec.active_params() - spec.vocab_size * spec.hidden_size  # no input embedding
    >>> round(f / (6 * matmul_params * 1000), 3)  # causal attention adds ~1.7% at 1K tokens
    1.017
    """
    passes = trainer_passes(recompute_logprobs, reference_forward, has_rollout).count
    return passes * forward_flops(spec, lengths)


def trainer_step_time_s(flops: float, hw: "HardwareProfile", gpus: Any, mfu: float = TRAIN_MFU) -> Any:
    """``flops / (gpus x peak bf16 x mfu)`` [s] (``gpus`` may be an array)."""
    return flops / (gpus * hw.peak_flops("bf16") * mfu)


def trainer_memory_gib_per_gpu(
    spec: "ModelSpec", gpus: int, micro_batch_tokens: int = MICRO_BATCH_TOKENS, bytes_per_param: float = TRAIN_BYTES_PER_PARAM
) -> float:
    """Trainer memory per GPU with FSDP/ZeRO-3 and full activation checkpointing [GiB].

    Notes
    -----
    ::

        states      = bytes_per_param x P_total / gpus
        checkpoints = L x T x d x 2                       (one bf16 hidden state per layer)
        working set = T x (3 d + 3 d_ff_active) x 2 x 2   (one layer's forward and backward)
        logits      = chunk x V x 4                       (fp32, chunked loss)
    """
    d = spec.hidden_size
    if spec.moe is not None:
        m = spec.moe
        ff = m.experts_per_token * m.expert_intermediate_size + m.num_shared_experts * m.shared_width
    else:
        ff = spec.intermediate_size
    T = micro_batch_tokens
    states = bytes_per_param * spec.total_params() / gpus
    acts = spec.num_layers * T * d * 2 + T * (3 * d + 3 * ff) * 2 * 2 + LOSS_CHUNK_TOKENS * spec.vocab_size * 4
    return (states + acts) / GIB


def min_trainer_gpus(
    spec: "ModelSpec", hw: "HardwareProfile", micro_batch_tokens: int = MICRO_BATCH_TOKENS, multiple: int = 1
) -> int:
    """Fewest trainer GPUs (a multiple of ``multiple``) whose memory holds the sharded state.

    Raises
    ------
    DoesNotFitError
        When even 4,096 GPUs cannot hold the activations of one micro-batch.
    """
    from capplan.errors import DoesNotFitError

    usable = hw.mem_total_gib * TRAINER_USABLE_FRACTION
    n = multiple
    while n <= 4096:
        if trainer_memory_gib_per_gpu(spec, n, micro_batch_tokens) <= usable:
            return n
        n += multiple
    raise DoesNotFitError(
        f"{spec.name}: a {micro_batch_tokens:,}-token micro-batch does not fit on {hw.name} at any trainer size; "
        "lower the micro-batch"
    )


def weight_bytes_16bit(spec: "ModelSpec") -> float:
    """Bytes of the 16-bit weights pushed to inference [bytes]: ``2 x P_total``."""
    return 2.0 * spec.total_params()


def weight_sync_time_s(
    spec: "ModelSpec", inference_hw: "HardwareProfile", tp: int, latency_s: float = SYNC_LATENCY_S
) -> float:
    """Time to push new parameters to the inference replicas [s].

    ``2 P / (tp x inter_node_bandwidth x SYNC_NETWORK_EFFICIENCY) + latency``: each of a
    replica's ``tp`` GPUs receives its shard over its own network link.

    Examples
    --------
    >>> from capplan.hardware import load_hardware
    >>> from capplan.modelspec import load_model_spec
    >>> t = weight_sync_time_s(load_model_spec("llama-3.1-8b"), load_hardware("h100-sxm"), tp=1)
    >>> round(t, 2)  # 16.06 GB / (50 GB/s x 0.7) + 0.5 s
    0.96
    """
    bw = inference_hw.inter_node_bandwidth_bytes_per_s * SYNC_NETWORK_EFFICIENCY
    return weight_bytes_16bit(spec) / (tp * bw) + latency_s
