"""The trainer side of an RL (or SFT/distillation) step: FLOPs, memory, GPUs, time, weight sync.

Assumptions and fits (each a named, overridable input, labelled in output):

* **Training FLOPs** = 3 x the forward FLOPs of every recorded position the trainer forwards
  (forward + backward, the usual ``6 x params x tokens`` rule plus attention; a mixture of
  experts counts its *active* parameters), plus one forward for recomputing the behaviour
  log-probs (``training.recompute_logprobs``) and one for a reference model
  (``training.reference_forward``); :func:`trainer_passes` owns the count. Forward FLOPs come
  from :func:`capplan.roofline.step_flops` with logits at every position.
* **Trainer MFU** is a fitted function of the model and its layout (:data:`TRAINER_MFU_FIT`):
  ``log MFU`` is linear in the log of the expert sparsity (total / active parameters), the GPU's
  machine balance (dense BF16 FLOP/s per HBM byte/s, relative to an H100), the context- and
  model-parallel degrees and the active size. It is fitted on the BF16 rows of
  ``validation/trainer.csv`` that ``validation/split.yaml`` keeps in the fit (``fitted_on``);
  ``capplan accuracy`` reports its error on the held-out rows.
* **Memory, sharded (FSDP / ZeRO-3)**: 16 bytes per parameter for mixed-precision AdamW (bf16
  weights 2 + bf16 gradients 2 + fp32 master weights 4 + fp32 Adam moments 8; ZeRO paper,
  arXiv:1910.02054, section 3.1) spread evenly over the trainer GPUs; activations with full
  activation checkpointing: one bf16 hidden state per layer per token of a micro-batch, plus the
  working set of one layer and fp32 logits of a 4,096-token loss chunk.
* **Weight sync** by framework pattern (:data:`WEIGHT_SYNC_FITS`): every GPU of every inference
  replica receives, all in parallel, the bytes its pattern sends it (:func:`sync_bytes_per_gpu`) in
  ``latency + bytes / bandwidth``, with the two terms fitted per pattern on
  ``validation/weight_sync.csv``: ``nccl`` (NeMo RL's NCCL reshard from the trainer layout, split
  GPUs: each GPU its own shard), ``checkpoint-engine`` (MoonshotAI's checkpoint-engine: every
  bucket is broadcast to all engine GPUs, each of which copies its subset, so each GPU receives
  the whole model), ``nixl`` (NeMo RL's checkpoint-engine refit over NIXL with
  ``shard_expert_weights``: dense tensors whole, routed experts as the rank's slice) and
  ``reshard`` (colocated: the same GPUs re-lay the weights out for the engine; no published
  colocated refit time was found, so it takes the ``nccl`` fit, an ASSUMPTION).
* **Sane data-parallel layout** (:func:`sane_trainer_gpus`): a sized trainer is at least one
  whole node, and whole nodes beyond one.
* **RL framework** (:data:`RL_FRAMEWORK_FIT`): published RL steps run slower than their GPU
  phases priced from serving benchmarks: the engines generate ``rollout_slowdown`` times slower
  than a serving benchmark of the same engine (OLMo 3, Table 23: 43% MBU on the inference node
  after every optimisation), and each step spends ``step_overhead_s`` outside the GPU phases
  (the driver's per-step work; colocated, also handing the GPUs between engines and trainer);
  a chip whose rows one shared slowdown leaves biased gets a further factor (``chip_slowdown``:
  GB200). All are fitted on the step times of ``validation/rl_steps.csv`` that
  ``validation/split.yaml`` keeps in the fit, each row planned in full with its settings;
  ``capplan accuracy`` reports the held-out rows apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from capplan.units import GIB

if TYPE_CHECKING:
    import numpy as np

    from capplan.hardware import HardwareProfile
    from capplan.modelspec import ModelSpec


TRAIN_MFU = 0.40
"""Trainer MFU of the former single-constant model (Llama 3 paper, Table 4: 38-43% BF16 MFU on
H100); kept for callers that pass an MFU explicitly. Plans and simulations use
:func:`trainer_mfu`."""
TRAIN_BYTES_PER_PARAM = 16.0
"""Mixed-precision AdamW state per parameter [bytes] (ZeRO paper, section 3.1)."""
MICRO_BATCH_TOKENS = 32768
"""Tokens per GPU per micro-batch (packed sequences) for the activation estimate [tokens];
open-instruct's OLMo 3 scripts pack 35,840 (``pack_length``)."""
LOSS_CHUNK_TOKENS = 4096
"""Positions whose fp32 logits are materialised at once by a chunked loss [tokens]."""
TRAINER_USABLE_FRACTION = 0.9
"""Fraction of device memory a trainer can fill (allocator fragmentation, NCCL, CUDA context)."""
H100_BALANCE = 989.4e12 / 3.35e12
"""Machine balance of the reference GPU, an H100 SXM: dense BF16 FLOP/s per HBM byte/s."""


def mfu_features(spec: "ModelSpec", hw: "HardwareProfile", tp: int = 1, pp: int = 1, cp: int = 1) -> tuple[float, ...]:
    """Regressors of the trainer MFU fit: ``(1, log S, log(B / B_H100), log cp, log(tp x pp), log N_active)``.

    ``S`` = total / active parameters (1 for a dense model), ``B`` = the GPU's dense BF16 FLOP/s
    per HBM byte/s, ``N_active`` the active parameters in billions.
    """
    import math

    active = spec.active_params(include_input_embedding=False)
    balance = hw.peak_flops("bf16") / hw.hbm_bandwidth_bytes_per_s
    return (
        1.0,
        math.log(spec.total_params() / spec.active_params()),
        math.log(balance / H100_BALANCE),
        math.log(max(cp, 1)),
        math.log(max(tp * pp, 1)),
        math.log(active / 1e9),
    )


@dataclass(frozen=True)
class MFUModel:
    """``MFU = exp(c . features)`` (:func:`mfu_features`), clipped to [``floor``, ``ceiling``]."""

    coefficients: tuple[float, ...]
    """Intercept and the weights of log sparsity, log balance, log cp, log model parallel, log size."""
    fitted_on: tuple[str, ...]
    """Corpus rows (``validation/trainer.csv``) the coefficients were fitted on."""
    floor: float = 0.02
    ceiling: float = 0.7

    def from_features(self, features: tuple[float, ...]) -> float:
        """The MFU at the given regressors [fraction]."""
        import math

        x = math.exp(sum(c * f for c, f in zip(self.coefficients, features)))
        return min(self.ceiling, max(self.floor, x))


TRAINER_MFU_FIT = MFUModel(
    coefficients=(-0.8011, -0.3346, -0.2115, -0.0651, 0.0198, -0.0229),
    fitted_on=(
        "mbridge_260401_pretraining_b200_gptoss120b_64g_bf16_tps",
        "mbridge_260401_pretraining_b200_gptoss120b_64g_bf16_tflops",
        "mbridge_2511_pretraining_b200_gptoss120b_64g_bf16_tps",
        "mbridge_2511_pretraining_h100sxm_gptoss120b_64g_bf16_tps",
        "mbridge_2511_pretraining_h100sxm_gptoss120b_64g_bf16_tflops",
        "megatronlm_gpt1p7b_48g_mfu",
        "megatronlm_gpt7p1b_96g_mfu",
        "megatronlm_gpt16b_192g_tflops",
        "megatronlm_gpt16b_192g_mfu",
        "megatronlm_gpt32b_384g_tflops",
        "megatronlm_gpt32b_384g_mfu",
        "megatronlm_gpt70b_768g_tflops",
        "megatronlm_gpt70b_768g_mfu",
        "megatronlm_gpt119b_1536g_tflops",
        "megatronlm_gpt177b_2304g_mfu",
        "megatronlm_gpt314b_3072g_tflops",
        "llama3_t4_405b_8192g_seq8192_tflops",
        "llama3_t4_405b_8192g_seq8192_mfu",
        "llama3_t4_405b_16384g_seq8192_tflops",
        "llama3_t4_405b_16384g_seq131072_tflops",
        "llama3_t4_405b_16384g_seq131072_mfu",
        "olmo3_7b_pretrain_main_tps",
        "olmo3_7b_pretrain_main_mfu",
        "olmo3_32b_pretrain_main_tps",
        "olmo3_32b_pretrain_main_mfu",
        "olmo3_7b_pretrain_t34_tps",
        "olmo3_7b_midtrain_t34_tps",
        "olmo3_32b_midtrain_t34_tps",
        "olmo3_32b_longctx_t34_tps",
        "verl_dpsk_qwen3_30b_8g_mfu",
        "verl_dpsk_qwen3_30b_16g_mfu",
        "verl_dpsk_dsv3_96g_mfu",
    ),
)
"""The trainer MFU fit (refit with ``python -m capplan.accuracy.rl``; a test checks it)."""


@dataclass(frozen=True)
class RLFrameworkFit:
    """What an RL framework adds to the GPU phases of a step (fitted; see the module docstring)."""

    rollout_slowdown: float
    """Engine step time in an RL framework over a serving benchmark's [ratio >= 1]."""
    step_overhead_s: float
    """Wall time per trainer step outside the GPU phases [s]."""
    fitted_on: tuple[str, ...]
    """Corpus rows (``validation/rl_steps.csv``) the terms were fitted on."""
    chip_slowdown: tuple[tuple[str, float], ...] = ()
    """``(hardware profile, ratio)``: a further rollout slowdown on a chip whose fit rows the
    shared terms leave biased (the engines of the published runs reach a smaller share of that
    chip's peaks than of the reference chip's); fitted with the shared terms on the same rows."""

    def slowdown_on(self, hardware: str) -> float:
        """The fitted rollout slowdown on one hardware profile [ratio]."""
        return self.rollout_slowdown * dict(self.chip_slowdown).get(hardware, 1.0)


RL_FRAMEWORK_FIT = RLFrameworkFit(
    rollout_slowdown=2.37,
    step_overhead_s=25.7,
    fitted_on=(
        "nemorl_v04_h100_grpo_llama31_8b_on_16g_step",
        "nemorl_v04_h100_grpo_qwen3_235b_on_128g_step",
        "nemorl_v04_h100_grpo_qwen3_235b_1off_256g_step",
        "nemorl_v04_h100_grpo_qwen3_30b_on_32g_step",
        "nemorl_v04_h100_grpo_qwen3_30b_1off_32g_step",
        "nemorl_v04_h100_grpo_qwen3_32b_on_32g_step",
        "nemorl_v04_h100_grpo_qwen3_32b_1off_64g_step",
        "nemorl_v05_h100_grpo_llama31_8b_on_16g_step",
        "nemorl_v05_h100_grpo_llama31_8b_1off_16g_step",
        "nemorl_v05_h100_grpo_qwen3_235b_on_128g_step",
        "nemorl_v05_h100_grpo_qwen3_235b_1off_256g_step",
        "nemorl_v05_h100_grpo_qwen3_30b_on_32g_step",
        "nemorl_v05_h100_grpo_qwen3_30b_1off_32g_step",
        "nemorl_v05_h100_grpo_qwen3_32b_on_32g_step",
        "nemorl_v05_h100_grpo_qwen3_32b_1off_64g_step",
        "nemorl_v05_gb200_grpo_llama31_8b_1off_8g_step",
        "nemorl_v05_gb200_grpo_dsv3_on_128g_step",
        "nemorl_v05_gb200_grpo_dsv3_1off_256g_step",
        "nemorl_v05_gb200_grpo_qwen3_235b_on_64g_step",
        "nemorl_v05_gb200_grpo_qwen3_235b_1off_128g_step",
        "nemorl_v05_gb200_grpo_qwen3_30b_1off_32g_step",
        "nemorl_v05_gb200_grpo_qwen3_32b_on_16g_step",
        "nemorl_v05_gb200_grpo_qwen3_32b_1off_32g_step",
        "nemorl_v06_h100_grpo_dsv3_on_512g_step",
        "nemorl_v06_h100_grpo_qwen3_235b_1off_256g_step",
        "nemorl_v06_h100_grpo_qwen3_30b_1off_32g_step",
        "nemorl_v06_h100_grpo_qwen3_30b_8off_192g_step",
        "nemorl_v06_gb200_grpo_dsv3_1off_256g_step",
        "nemorl_v06_gb200_grpo_qwen3_235b_1off_128g_step",
        "nemorl_v06_gb200_grpo_qwen3_30b_on_16g_step",
    ),
    chip_slowdown=(("gb200", 1.23),),
)
"""The RL framework fit (refit with ``python -m capplan.accuracy.rl``; a test checks it)."""


def trainer_mfu(spec: "ModelSpec", hw: "HardwareProfile", tp: int = 1, pp: int = 1, cp: int = 1) -> float:
    """Fitted BF16 trainer MFU of ``spec`` on ``hw`` at the given layout [fraction] (:data:`TRAINER_MFU_FIT`).

    Examples
    --------
    >>> from capplan.hardware import load_hardware
    >>> from capplan.modelspec import load_model_spec
    >>> h100 = load_hardware("h100-sxm")
    >>> dense, moe = trainer_mfu(load_model_spec("llama-3.1-8b"), h100), trainer_mfu(load_model_spec("qwen3-30b-a3b"), h100)
    >>> dense > 0.35 > 0.25 > moe
    True
    """
    return TRAINER_MFU_FIT.from_features(mfu_features(spec, hw, tp, pp, cp))


SyncReceives = Literal["shard", "whole", "local"]
"""What each receiving GPU of a weight sync gets (:func:`sync_bytes_per_gpu`): ``shard`` the weights
it holds; ``whole`` every weight (a broadcast the engine picks its subset from); ``local`` every
dense tensor whole and its own slice of the routed experts."""

SYNC_RECEIVES_TEXT: dict[str, str] = {
    "shard": "its own shard",
    "whole": "the whole model, broadcast",
    "local": "dense weights whole, its slice of the experts",
}
"""What each ``receives`` value means, as ``plan --explain`` prints it."""


def sync_bytes_per_gpu(
    spec: "ModelSpec",
    tp: int,
    receives: SyncReceives = "shard",
    bytes_per_param: float = 2.0,
    ep: int = 1,
    dp: int = 1,
    redundant_experts: int = 0,
) -> float:
    """Bytes a weight sync delivers to each GPU of an inference replica of ``tp`` GPUs (``tp x dp``
    under expert parallelism) [bytes].

    ``shard``: ``b (P - P_routed) / tp + b P_routed s``; ``local``: ``b (P - P_routed) + b P_routed s``;
    ``whole``: ``b P``; with ``b`` bytes per parameter and ``s`` the share of the routed experts one
    GPU holds: ``1 / tp`` under tensor parallelism, ``(E + R) / E / (tp dp)`` under expert
    parallelism (whole experts, ``R`` redundant).

    >>> from capplan.modelspec import load_model_spec
    >>> v3 = load_model_spec("deepseek-v3")  # NeMo RL's DeepSeek-V3 NIXL refit: vLLM TP32, 69.95 GiB a rank
    >>> round(sync_bytes_per_gpu(v3, 32, "local") / 2**30, 2)
    69.95
    """
    from capplan.kv import routed_expert_params

    total = weight_bytes(spec, bytes_per_param)
    if receives == "whole":
        return total
    routed = bytes_per_param * routed_expert_params(spec)
    if spec.moe is not None and (ep > 1 or dp > 1):
        share = (spec.moe.num_experts + redundant_experts) / spec.moe.num_experts / (max(tp, 1) * max(dp, 1))
    else:
        share = 1.0 / max(tp, 1)
    dense = total - routed
    return (dense if receives == "local" else dense / max(tp, 1)) + routed * share


@dataclass(frozen=True)
class SyncFit:
    """Weight-sync time of one pattern: ``latency_s + bytes per receiving GPU / bandwidth``."""

    latency_s: float
    """Fixed cost of one sync [s]."""
    bandwidth_bytes_per_s: float
    """Effective bytes per second into each receiving GPU [bytes/s]."""
    fitted_on: tuple[str, ...]
    """Corpus rows (``validation/weight_sync.csv``) the two terms were fitted on."""
    receives: SyncReceives = "shard"
    """What each receiving GPU gets (:func:`sync_bytes_per_gpu`): how the pattern moves weights,
    read from its source, not fitted."""

    def time_s(self, bytes_per_gpu: float) -> float:
        """Time to deliver ``bytes_per_gpu`` to every receiving GPU [s]."""
        return self.latency_s + bytes_per_gpu / self.bandwidth_bytes_per_s


SyncPattern = Literal["nccl", "checkpoint-engine", "nixl", "reshard"]
SYNC_PATTERNS: tuple[str, ...] = ("nccl", "checkpoint-engine", "nixl", "reshard")
"""Weight-sync patterns: ``nccl`` (split GPUs, NCCL reshard), ``checkpoint-engine`` (bucketed
broadcast of the whole model), ``nixl`` (NeMo RL's NIXL refit of destination-local tensors) and
``reshard`` (colocated, same GPUs)."""

WEIGHT_SYNC_FITS: dict[str, SyncFit] = {
    "nccl": SyncFit(
        latency_s=0.232,
        bandwidth_bytes_per_s=17900000000.0,
        fitted_on=(
            "nemorl_nccl_reshard_qwen3_4b_lo",
            "nemorl_nccl_reshard_qwen3_4b_hi",
            "nemorl_nccl_reshard_qwen3_30b_bf16_hi",
            "nemorl_nccl_reshard_dsv3_h100_lo",
            "nemorl_nccl_reshard_dsv3_h100_hi",
            "nemorl_nccl_reshard_dsv3_gb200_lo",
            "nemorl_nccl_reshard_dsv3_gb200_hi",
        ),
    ),
    "checkpoint-engine": SyncFit(
        latency_s=0.0,
        bandwidth_bytes_per_s=63900000000.0,
        fitted_on=(
            "moonshot_ckpt_engine_qwen3_235b_8xh800_broadcast",
            "moonshot_ckpt_engine_qwen3_235b_8xh800_p2p",
            "moonshot_ckpt_engine_dsv31_16xh20_p2p",
            "moonshot_ckpt_engine_kimik2_16xh20_broadcast",
            "moonshot_ckpt_engine_kimik2_16xh20_p2p",
            "moonshot_ckpt_engine_dsv31_256xh20_broadcast",
            "moonshot_ckpt_engine_kimik2_256xh20_p2p",
        ),
        receives="whole",
    ),
    "nixl": SyncFit(
        latency_s=0.0,
        bandwidth_bytes_per_s=7470000000.0,
        fitted_on=("nemorl_ckpt_engine_dsv3_nixl_async", "nemorl_ckpt_engine_dsv3_nixl_sync"),
        receives="local",
    ),
    "reshard": SyncFit(latency_s=0.232, bandwidth_bytes_per_s=17900000000.0, fitted_on=()),
}
"""Fitted terms per pattern (refit with ``python -m capplan.accuracy.rl``; a test checks them).
``reshard`` has no published colocated refit time; it reuses the ``nccl`` terms (ASSUMPTION).
``nixl`` is fitted on one deployment (DeepSeek-V3 to vLLM TP32, 69.95 GiB a rank): its latency
is not separable from its bandwidth and is taken as 0 (:func:`capplan.accuracy.rl.fit_weight_sync`)."""


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


def sane_trainer_gpus(min_gpus: int, gpus_per_node: int) -> int:
    """The smallest trainer capplan sizes on its own: the memory minimum rounded up to whole nodes.

    A data-parallel trainer that fits in a fraction of a node is not what RL runs use (published
    learners are whole nodes: OLMo 3 used 2 and 8 learner nodes, NeMo RL's recipes whole nodes);
    below a node the trainer would also be the bottleneck of almost any split.

    >>> sane_trainer_gpus(2, 8), sane_trainer_gpus(13, 8)
    (8, 16)
    """
    import math

    return max(1, math.ceil(max(min_gpus, 1) / gpus_per_node)) * gpus_per_node


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


def weight_bytes(spec: "ModelSpec", bytes_per_param: float = 2.0) -> float:
    """Bytes of the weights pushed to inference [bytes]: ``bytes_per_param x P_total``."""
    return bytes_per_param * spec.total_params()


def weight_bytes_16bit(spec: "ModelSpec") -> float:
    """Bytes of the 16-bit weights pushed to inference [bytes]: ``2 x P_total``."""
    return weight_bytes(spec, 2.0)


def weight_sync_time_s(
    spec: "ModelSpec", tp: int, pattern: str = "nccl", ep: int = 1, dp: int = 1, redundant_experts: int = 0
) -> float:
    """Time to push new 16-bit parameters to the inference replicas [s].

    Each GPU of a replica of ``tp`` GPUs (``tp x dp`` under expert parallelism) receives the bytes
    its pattern sends it (:func:`sync_bytes_per_gpu`: its ``2 P / tp`` shard under ``nccl``, the
    whole ``2 P`` under ``checkpoint-engine``); replicas receive in parallel:
    ``latency + bytes / bandwidth`` with the pattern's fitted terms (:data:`WEIGHT_SYNC_FITS`).

    Raises
    ------
    InputError
        An unknown pattern.

    Examples
    --------
    >>> from capplan.modelspec import load_model_spec
    >>> llama = load_model_spec("llama-3.1-8b")
    >>> f = WEIGHT_SYNC_FITS["nccl"]
    >>> weight_sync_time_s(llama, tp=1) == f.latency_s + 2 * llama.total_params() / f.bandwidth_bytes_per_s
    True
    """
    if pattern not in WEIGHT_SYNC_FITS:
        from capplan.errors import InputError

        raise InputError(f"--weight-sync {pattern}: allowed {', '.join(SYNC_PATTERNS)}")
    fit = WEIGHT_SYNC_FITS[pattern]
    return fit.time_s(sync_bytes_per_gpu(spec, tp, fit.receives, 2.0, ep, dp, redundant_experts))
