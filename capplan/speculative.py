"""Speculative decoding: tokens per verify step, the drafter's cost and KV, and the speed-up at a batch.

A speculative decoder drafts ``k`` tokens cheaply (an EAGLE head, a DeepSeek multi-token-
prediction module, a small draft model, or n-gram lookup in the prompt) and the target model
verifies them in one forward pass of ``k + 1`` positions per sequence. With a per-token
acceptance rate ``a`` (each drafted token accepted independently with probability ``a`` while
the ones before it were), a verify step yields on average (Leviathan, Kalman and Matias, "Fast
Inference from Transformers via Speculative Decoding", ICML 2023, eq. 1)::

    E[tokens per step] = (1 - a^(k+1)) / (1 - a)          (k + 1 at a = 1, 1 at a = 0)

and the time per output token is ``(t_verify + t_draft) / E``. ``t_verify`` is the target's step
over ``B (k + 1)`` positions (:class:`capplan.roofline.StepPricer`), ``t_draft`` is ``k`` steps of
the drafter over ``B`` positions, priced with the same roofline and engine terms; each draft
step is a forward of its own and pays the engine's host time per step, as the verify step does
(measured: vLLM V1's EAGLE-3 on Llama-3.1-8B at batch 1 adds about 1.1 ms a drafted token where
the head's bytes alone take 0.3 ms, vllm-project/vllm#20780; docs/features.md). The speed-up
over plain decoding at the same batch, ``E t_decode / (t_verify + t_draft)``, is at most ``E``
and shrinks where decode is compute-bound (the verify step's ``k + 1`` positions cost ``k + 1``
times the FLOPs); at small batches, where the drafts' host time weighs most, it can rise with
the batch, and at long contexts, where
reading the KV cache dominates both, a growing batch can *raise* it (the drafter reads far less
KV than the target; MagicDec, Chen et al. 2024). At ``a = 0`` it is never above 1.

Drafters (:func:`draft_spec`): ``eagle`` (EAGLE-1/2: one decoder layer of the target's width and
a ``2d -> d`` fusion, the target's LM head), ``eagle3`` (one layer, a ``3d -> d`` fusion and its
own LM head over a 32,000-token draft vocabulary, as the EAGLE-3 release configs), ``mtp`` (the
checkpoint's next-token-prediction module: one decoder layer of the target's last kind and a
``2d -> d`` projection, sharing the LM head; DeepSeek-V3 ``num_nextn_predict_layers``), ``draft``
(a separate model preset), ``ngram`` (prompt lookup on the host: no GPU work).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from capplan.errors import InputError
from capplan.options import Options

if TYPE_CHECKING:
    from capplan.hardware import HardwareProfile
    from capplan.modelspec import ModelSpec
    from capplan.roofline import RooflineInputs, StepPricer
    from capplan.workload import Speculative

SpecMethod = Literal["eagle", "eagle3", "mtp", "ngram", "draft"]
SPEC_METHODS: tuple[str, ...] = ("eagle", "eagle3", "mtp", "ngram", "draft")

EAGLE3_DRAFT_VOCAB = 32000
"""Draft vocabulary of the EAGLE-3 heads [tokens]: ``"draft_vocab_size": 32000`` in the released
EAGLE-3 configs (e.g. ``yuhuili/EAGLE3-LLaMA3.1-Instruct-8B``)."""


class SpecInputs(Options, BaseModel):
    """A speculative-decoding setting: the drafter, the drafted tokens and how many are accepted."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    FLAGS: ClassVar[dict[str, str]] = {
        "method": "--spec-method", "num_speculative_tokens": "--spec-tokens", "acceptance_rate": "--acceptance-rate",
        "acceptance_length": "--acceptance-length", "draft_model": "--draft-model", "verify_tokens": "--verify-tokens",
    }

    method: SpecMethod
    """Drafter: ``eagle``, ``eagle3``, ``mtp`` (the checkpoint's multi-token-prediction module),
    ``ngram`` (prompt lookup) or ``draft`` (a separate draft model, ``draft_model``)."""
    num_speculative_tokens: int = Field(ge=1, le=64)
    """Tokens drafted per verify step ``k`` [tokens] (vLLM ``num_speculative_tokens``, SGLang
    ``--speculative-num-steps``)."""
    acceptance_rate: float | None = Field(default=None, ge=0, le=1)
    """Probability [0-1] that a drafted token is accepted, given the ones before it were (per-token
    acceptance ``a``). Give this or ``acceptance_length``."""
    acceptance_length: float | None = Field(default=None, ge=1, le=65)
    """Mean tokens a verify step yields, the bonus token included [tokens] (EAGLE's and SGLang's
    "accept length" tau, measured with tree drafting). Give this or ``acceptance_rate``."""
    verify_tokens: int | None = Field(default=None, ge=1, le=1024)
    """Positions verified per sequence and step [positions]: ``k + 1`` for a chain (default); more
    for a draft tree (SGLang ``--speculative-num-draft-tokens``)."""
    draft_model: str | None = None
    """Draft model preset or path (``method: draft`` only)."""

    @model_validator(mode="after")
    def _check(self) -> "SpecInputs":
        if (self.acceptance_rate is None) == (self.acceptance_length is None):
            raise ValueError("give exactly one of --acceptance-rate (per token, 0-1) or --acceptance-length (tokens per verify step)")
        k = self.num_speculative_tokens
        if self.acceptance_length is not None and self.acceptance_length > k + 1:
            raise ValueError(f"--acceptance-length {self.acceptance_length:g}: a verify step yields at most --spec-tokens + 1 = {k + 1}")
        if self.verify_tokens is not None and self.verify_tokens < k + 1:
            raise ValueError(f"--verify-tokens {self.verify_tokens}: at least --spec-tokens + 1 = {k + 1} positions are verified")
        if self.method == "draft" and not self.draft_model:
            raise ValueError("--spec-method draft needs --draft-model (a model preset or path)")
        if self.method != "draft" and self.draft_model:
            raise ValueError(f"--draft-model is only used with --spec-method draft (got {self.method})")
        return self

    @property
    def tokens_per_step(self) -> float:
        """Mean tokens one verify step yields [tokens] (:func:`expected_tokens_per_step`)."""
        if self.acceptance_length is not None:
            return float(self.acceptance_length)
        return float(expected_tokens_per_step(self.num_speculative_tokens, self.acceptance_rate))

    @property
    def positions_verified(self) -> int:
        """Positions the target forwards per sequence and verify step [positions]."""
        return self.verify_tokens or self.num_speculative_tokens + 1

    @classmethod
    def from_workload(cls, block: "Speculative", step: int = 0) -> "SpecInputs":
        """The setting of a workload's ``speculative:`` block at trainer step ``step`` (its
        acceptance schedule read there)."""
        return cls(method=block.method, num_speculative_tokens=block.num_speculative_tokens,
                   acceptance_rate=block.acceptance_at(step), draft_model=block.draft_model)


def expected_tokens_per_step(k: Any, acceptance_rate: Any) -> Any:
    """Mean tokens a verify step of ``k`` drafted tokens yields, the bonus token included [tokens].

    Parameters
    ----------
    k : int or array-like
        Drafted tokens per step [tokens] (>= 0).
    acceptance_rate : float or array-like
        Per-token acceptance ``a`` [0-1].

    Notes
    -----
    ``(1 - a^(k+1)) / (1 - a)`` (Leviathan et al. 2023, eq. 1): the first rejected draft is replaced
    by the target's own token, and when all ``k`` are accepted the target adds one more.

    Examples
    --------
    >>> expected_tokens_per_step(3, 0.0), expected_tokens_per_step(3, 1.0)
    (1.0, 4.0)
    >>> round(expected_tokens_per_step(3, 0.7), 4)  # 1 + 0.7 + 0.49 + 0.343
    2.533
    """
    k_ = np.asarray(k, dtype=float)
    a = np.asarray(acceptance_rate, dtype=float)
    if np.any(k_ < 0) or np.any((a < 0) | (a > 1)):
        raise InputError("speculative decoding: k must be >= 0 and the acceptance rate in [0, 1]")
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(a >= 1.0, k_ + 1.0, (1.0 - a ** (k_ + 1.0)) / np.where(a >= 1.0, 1.0, 1.0 - a))
    return float(out) if out.ndim == 0 else out


def acceptance_rate_for_length(k: int, length: float) -> float:
    """The per-token acceptance rate whose chain of ``k`` drafts yields ``length`` tokens per step
    (the inverse of :func:`expected_tokens_per_step`, by bisection) [0-1].

    >>> round(acceptance_rate_for_length(3, 2.533), 3)
    0.7
    """
    if not 1.0 <= length <= k + 1:
        raise InputError(f"acceptance length {length:g}: must be in [1, {k + 1}] for {k} drafted tokens")
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if expected_tokens_per_step(k, mid) < length:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def draft_spec(target: "ModelSpec", inp: SpecInputs) -> "ModelSpec | None":
    """The drafter as a model spec priced by the roofline (``None`` for ``ngram``: no GPU work).

    Raises
    ------
    InputError
        ``mtp`` for a model whose checkpoint ships no MTP module; an unknown ``draft_model``.

    Examples
    --------
    >>> from capplan.modelspec import load_model_spec
    >>> d = draft_spec(load_model_spec("llama-3.1-8b"), SpecInputs(method="eagle3", num_speculative_tokens=3, acceptance_rate=0.7))
    >>> d.num_layers, d.vocab_size  # one layer, EAGLE-3's 32k draft vocabulary
    (1, 32000)
    """
    if inp.method == "ngram":
        return None
    if inp.method == "draft":
        from capplan.errors import CapplanError
        from capplan.modelspec import load_model_spec

        try:
            return load_model_spec(inp.draft_model or "")
        except CapplanError as exc:
            raise InputError(f"--draft-model {inp.draft_model}: {exc}") from None
    d = target.hidden_size
    update: dict[str, Any] = {
        "name": f"{target.name}-{inp.method}-head", "num_layers": 1, "sliding_window": None, "linear_attention": None,
        "mtp_modules": 0, "published_total_params": None, "published_active_params": None,
    }
    if inp.method == "mtp":
        if target.mtp_modules < 1:
            raise InputError(
                f"--spec-method mtp: {target.name} ships no multi-token-prediction module (mtp_modules: 0); "
                "use eagle, eagle3, draft or ngram"
            )
        fusion = 2 * d * d  # eh_proj: [embedding; hidden] -> hidden
        if target.moe is not None:
            update["moe"] = target.moe.model_copy(update={"first_dense_layers": 0})
            # the fusion projection's FLOPs and bytes, folded into the shared-expert width
            # (exact in parameters: 3 d w per unit of width)
            m = target.moe
            shared = (m.num_shared_experts * m.shared_width * 3 * d + fusion) / (3 * d)
            update["moe"] = update["moe"].model_copy(update={"num_shared_experts": 1, "shared_expert_intermediate_size": max(1, round(shared))})
        else:
            update["intermediate_size"] = target.intermediate_size + max(1, round(fusion / (3 * d)))
        return target.model_copy(update=update)
    fusion = (3 if inp.method == "eagle3" else 2) * d * d
    update["moe"] = None
    update["intermediate_size"] = target.intermediate_size + max(1, round(fusion / (3 * d)))
    if inp.method == "eagle3":
        update["vocab_size"] = EAGLE3_DRAFT_VOCAB
        update["tie_word_embeddings"] = False
    return target.model_copy(update=update)


@dataclass(frozen=True)
class SpecStep:
    """One verify step of speculative decoding against plain decoding at the same batch (a JSON
    contract: :meth:`as_dict`)."""

    method: str
    num_speculative_tokens: int
    tokens_per_step: float
    """Mean tokens a verify step yields per sequence [tokens]."""
    decode_step_s: float
    """Plain decode step at the batch [s] (= time per output token without speculation)."""
    verify_step_s: float
    """Target forward over ``B x verify_tokens`` positions, host time included [s]."""
    draft_s: float
    """The ``k`` drafter forwards of the step, host time excluded [s]."""
    time_per_token_s: float
    """``(verify_step_s + draft_s) / tokens_per_step`` [s]."""
    speedup: float
    """``decode_step_s / time_per_token_s``: output tokens/s with speculation over without [x]."""
    verify_bound: str
    """``compute`` or ``memory``: what bounds the verify step."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def spec_pricers(spec: "ModelSpec", hw: "HardwareProfile", rinp: "RooflineInputs", inp: SpecInputs) -> tuple["StepPricer", "StepPricer | None"]:
    """The target's and the drafter's step pricers (the drafter at the target's dtypes, ``tp`` and
    engine terms, dense, no expert parallelism; ``None`` for ``ngram``)."""
    from capplan.roofline import StepPricer

    target = StepPricer(spec, hw, rinp)
    dspec = draft_spec(spec, inp)
    if dspec is None:
        return target, None
    dinp = rinp.model_copy(update={"ep": 1, "dp": None, "redundant_experts": 0, "two_batch_overlap": False,
                                   "expert_dtype": None if dspec.moe is None else rinp.expert_dtype})
    from capplan.kv import check_parallelism

    try:
        check_parallelism(dspec, rinp.tp)
    except InputError as exc:
        raise InputError(f"draft model at --tp {rinp.tp}: {exc}") from None
    return target, StepPricer(dspec, hw, dinp)


def spec_step(
    target: "StepPricer", drafter: "StepPricer | None", inp: SpecInputs, batch: float, context: float,
) -> SpecStep:
    """Price one verify step of ``batch`` sequences at ``context`` cached positions.

    Parameters
    ----------
    target, drafter : StepPricer
        From :func:`spec_pricers` (``drafter`` ``None`` for n-gram lookup).
    batch : float
        Sequences decoding together [sequences] (>= 1).
    context : float
        Cached positions per sequence before the step [positions].

    Notes
    -----
    Verify work, with ``n = verify_tokens`` positions per sequence after ``c`` cached::

        new = logits = B n,   pairs = B (n c + n (n + 1) / 2),   kv_read = B c

    Draft work: ``k`` steps of ``B`` positions at contexts ``c + 1 .. c + k`` on the drafter
    (its own KV cache, one layer for EAGLE/MTP heads), each a forward of its own that pays the
    engine's host time per step (fixed and per sequence: launch, sampling, bookkeeping).

    Examples
    --------
    >>> from capplan.hardware import load_hardware
    >>> from capplan.modelspec import load_model_spec
    >>> from capplan.roofline import RooflineInputs
    >>> s = SpecInputs(method="eagle3", num_speculative_tokens=3, acceptance_rate=0.7)
    >>> t, d = spec_pricers(load_model_spec("llama-3.1-8b"), load_hardware("h100-sxm"), RooflineInputs(), s)
    >>> r = spec_step(t, d, s, batch=1, context=1024)
    >>> round(r.tokens_per_step, 2), round(r.speedup, 2)
    (2.53, 1.6)
    """
    from capplan.roofline import causal_pairs

    if batch < 1 or context < 0:
        raise InputError("speculative decoding: batch must be >= 1 and context >= 0")
    B, c = float(batch), float(context)
    n = float(inp.positions_verified)
    W = target.window
    plain = target.decode(B, c)
    verify = target.step(
        new_tokens=B * n, logits_tokens=B * n, attention_pairs=B * float(causal_pairs(c, n)), kv_read_tokens=B * c,
        sequences=B, window_attention_pairs=B * float(causal_pairs(c, n, W)), window_kv_read_tokens=B * min(c, W - 1),
    )
    d = _draft_steps(drafter, inp, B, c)
    draft = 0.0 if d is None else float(np.sum(np.asarray(d.step_time_s)))
    E = inp.tokens_per_step
    per_token = (float(verify.step_time_s) + draft) / E
    return SpecStep(
        method=inp.method, num_speculative_tokens=inp.num_speculative_tokens, tokens_per_step=E,
        decode_step_s=float(plain.step_time_s), verify_step_s=float(verify.step_time_s), draft_s=draft,
        time_per_token_s=per_token, speedup=float(plain.step_time_s) / per_token, verify_bound=str(verify.bound),
    )


def _draft_steps(drafter: "StepPricer | None", inp: SpecInputs, batch: Any, context: Any) -> "StepCost | None":
    """The drafter's ``k`` forwards of a verify step of ``batch`` sequences at ``context`` cached:
    one decode step each at contexts ``c + 1 .. c + k``, along a new last axis (vectorised;
    ``None`` without a drafter, n-gram lookup)."""
    if drafter is None:
        return None
    B, c = np.asarray(batch, dtype=float), np.asarray(context, dtype=float)
    return drafter.decode(B[..., None], c[..., None] + 1.0 + np.arange(inp.num_speculative_tokens, dtype=float))


def spec_speedup_curve(
    target: "StepPricer", drafter: "StepPricer | None", inp: SpecInputs, batches: Any, context: float,
) -> np.ndarray:
    """:attr:`SpecStep.speedup` at each batch in ``batches`` [x] (how the benefit shrinks as decode
    turns compute-bound)."""
    return np.array([spec_step(target, drafter, inp, float(b), context).speedup for b in np.atleast_1d(batches)])


def draft_kv_bytes_per_token(spec: "ModelSpec", inp: SpecInputs, kv_dtype: str = "bf16", tp: int = 1) -> float:
    """KV bytes the drafter adds per cached position on one GPU [bytes/position] (0 for ngram).

    EAGLE and MTP heads cache one layer; a draft model caches all of its layers. The ``k``
    positions drafted ahead also occupy the target's cache until verified: see
    :func:`extra_kv_tokens_per_sequence`.

    >>> from capplan.modelspec import load_model_spec
    >>> s = SpecInputs(method="eagle", num_speculative_tokens=3, acceptance_rate=0.7)
    >>> draft_kv_bytes_per_token(load_model_spec("llama-3.1-8b"), s)  # one layer: 2 x 8 x 128 x 2
    4096.0
    """
    from capplan.kv import kv_layout

    d = draft_spec(spec, inp)
    return 0.0 if d is None else kv_layout(d, kv_dtype, tp).bytes_per_token


def extra_kv_tokens_per_sequence(inp: SpecInputs) -> int:
    """Target KV positions a sequence holds beyond its context while a step is verified: the
    ``verify_tokens - 1`` drafted positions [positions]."""
    return inp.positions_verified - 1


@dataclass(frozen=True)
class SpecMemory:
    """What the drafter takes from one GPU's KV budget (a JSON contract: :meth:`as_dict`)."""

    method: str
    draft_weights_gib_per_gpu: float
    """Drafter weights not shared with the target, per GPU [GiB] (an EAGLE/MTP head's layer and
    fusion, EAGLE-3's own LM head, a draft model's whole weights)."""
    draft_kv_bytes_per_token_per_gpu: float
    """Drafter KV per cached position on one GPU [bytes/position]."""
    kv_capacity_tokens: int
    """Target KV capacity once the drafter's weights and KV share the budget [positions]."""
    kv_capacity_tokens_without: int
    """The same without speculative decoding [positions]."""
    extra_kv_tokens_per_sequence: int
    """Drafted positions each running sequence holds beyond its context [positions]."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def spec_memory(spec: "ModelSpec", kv: Any, inp: SpecInputs) -> SpecMemory:
    """The drafter's share of one GPU's KV budget, from a :class:`capplan.kv.KVResult`.

    Notes
    -----
    ``capacity = floor((budget - W_draft) / (block (b + b_draft))) x block``: every cached
    position of the target also caches the drafter's layers (one for EAGLE/MTP heads).

    Examples
    --------
    >>> from capplan.hardware import load_hardware
    >>> from capplan.kv import KVInputs, compute_kv
    >>> from capplan.modelspec import load_model_spec
    >>> m = load_model_spec("llama-3.1-8b")
    >>> kv = compute_kv(m, load_hardware("h100-sxm"), KVInputs())
    >>> r = spec_memory(m, kv, SpecInputs(method="eagle3", num_speculative_tokens=3, acceptance_rate=0.7))
    >>> round(r.draft_kv_bytes_per_token_per_gpu), r.kv_capacity_tokens < r.kv_capacity_tokens_without
    (4096, True)
    """
    from capplan.kv import weights_bytes_per_gpu
    from capplan.units import GIB, WEIGHT_DTYPE_BYTES

    d = draft_spec(spec, inp)
    tp = kv.tp
    if d is None:
        w = 0.0
    elif inp.method == "draft":
        w = weights_bytes_per_gpu(d, kv.weight_dtype, tp)
    else:
        w = d.layer_params(0) / tp * WEIGHT_DTYPE_BYTES[kv.weight_dtype]
        if inp.method == "eagle3":
            w += d.vocab_size * d.hidden_size * 2 / tp  # its own 16-bit LM head over the draft vocabulary
    bd = draft_kv_bytes_per_token(spec, inp, kv.kv_dtype, tp)
    budget = kv.kv_budget_gib_per_gpu * GIB - w
    block = kv.block_size
    cap = int(max(budget, 0.0) // (block * (kv.kv_bytes_per_token_per_gpu + bd))) * block
    return SpecMemory(inp.method, w / GIB, bd, cap, kv.kv_capacity_tokens, extra_kv_tokens_per_sequence(inp))


def spec_rows(
    spec: "ModelSpec", hw: "HardwareProfile", rinp: "RooflineInputs", inp: SpecInputs, batches: Any, contexts: Any,
) -> list[dict[str, Any]]:
    """:func:`spec_step` over every (batch, context) pair: ``batch``, ``context`` and the
    :class:`SpecStep` fields (the ``spec_*`` keys of ``capplan roofline --spec-method``)."""
    target, drafter = spec_pricers(spec, hw, rinp, inp)
    return [{"batch": int(b), "context": int(c), **spec_step(target, drafter, inp, float(b), float(c)).as_dict()}
            for b in batches for c in contexts]


class SpeculativePricer:
    """A target model's step prices when it decodes speculatively, in the shape of a
    :class:`capplan.roofline.StepPricer`, so a replica, a benchmark :class:`~capplan.benchmark.Server`
    or a plan prices speculative decoding through the calls it already makes.

    :meth:`decode` prices **one output token** of every sequence: a verify step over ``B x n``
    positions (``n`` = :attr:`SpecInputs.positions_verified`) plus the ``k`` drafter forwards,
    divided by the ``E`` tokens a verify step yields (:func:`spec_step`'s ``time_per_token_s``,
    vectorised). A model that counts one decode step per output token (Little's law, a rollout's
    decode work) then sees the speculative time per token. Steps without decoding sequences
    (:meth:`step`, :meth:`prefill`, :meth:`chunked`) are the target's own; a step that carries
    both (continuous batching) is :meth:`step_with_decodes`.

    Examples
    --------
    >>> from capplan.hardware import load_hardware
    >>> from capplan.modelspec import load_model_spec
    >>> from capplan.roofline import RooflineInputs
    >>> s = SpecInputs(method="eagle3", num_speculative_tokens=3, acceptance_rate=0.7)
    >>> p = SpeculativePricer.build(load_model_spec("llama-3.1-8b"), load_hardware("h100-sxm"), RooflineInputs(), s)
    >>> plain = p.target.decode(1, 1024).step_time_s
    >>> round(plain / float(p.decode(1, 1024).step_time_s), 2)  # spec_step's speed-up at batch 1
    1.6
    """

    def __init__(self, target: "StepPricer", drafter: "StepPricer | None", inp: SpecInputs) -> None:
        self.target, self.drafter, self.setting = target, drafter, inp
        self.spec, self.hw, self.inp, self.window = target.spec, target.hw, target.inp, target.window
        self.dp = target.dp
        self.positions_per_sequence = float(inp.positions_verified)
        """Positions each decoding sequence forwards per verify step [positions]."""
        self.tokens_per_step = float(inp.tokens_per_step)
        """Mean tokens a verify step yields per sequence ``E`` [tokens]."""

    @classmethod
    def build(cls, spec: "ModelSpec", hw: "HardwareProfile", rinp: "RooflineInputs", inp: SpecInputs) -> "SpeculativePricer":
        """The pricer of ``spec`` on ``hw`` at ``rinp`` decoding with ``inp`` (:func:`spec_pricers`)."""
        target, drafter = spec_pricers(spec, hw, rinp, inp)
        return cls(target, drafter, inp)

    def draft_s(self, batch: Any, context: Any) -> np.ndarray:
        """The ``k`` drafter forwards of a verify step of ``batch`` sequences at ``context`` [s],
        each a step of its own with the engine's host time (vectorised; 0 for n-gram lookup)."""
        B = np.asarray(batch, dtype=float)
        c = np.asarray(context, dtype=float)
        d = _draft_steps(self.drafter, self.setting, np.maximum(B, 1.0), c)  # a drafter step forwards at least one position
        if d is None:
            return np.zeros(np.broadcast_shapes(B.shape, c.shape))
        return np.sum(np.asarray(d.step_time_s, dtype=float), axis=-1)

    def verify(self, batch: Any, context: Any, *, new_tokens: Any = 0.0, logits_tokens: Any = 0.0, attention_pairs: Any = 0.0,
               kv_read_tokens: Any = 0.0, sequences: Any = 0.0, window_attention_pairs: Any = 0.0,
               window_kv_read_tokens: Any = 0.0) -> "StepCost":
        """The target's verify step of ``batch`` sequences at ``context`` cached, plus any other
        work the step carries (prompt chunks, as keyword arguments of
        :meth:`capplan.roofline.StepPricer.step`) (vectorised).

        Notes
        -----
        With ``n`` positions verified per sequence after ``c`` cached:
        ``new = logits = B n``, ``pairs = B (n c + n (n + 1) / 2)``, ``kv_read = B c``.
        """
        from capplan.roofline import causal_pairs

        B = np.asarray(batch, dtype=float)
        c = np.asarray(context, dtype=float)
        n = self.positions_per_sequence
        W = self.window
        return self.target.step(
            new_tokens=np.maximum(B * n + new_tokens, 1.0), logits_tokens=B * n + logits_tokens,
            attention_pairs=B * causal_pairs(c, n) + attention_pairs, kv_read_tokens=B * c + kv_read_tokens,
            sequences=B + sequences, window_attention_pairs=B * causal_pairs(c, n, W) + window_attention_pairs,
            window_kv_read_tokens=B * np.minimum(c, W - 1) + window_kv_read_tokens,
        )

    def step_with_decodes(self, batch: Any, context: Any, **other: Any) -> np.ndarray:
        """Time of one verify step of ``batch`` decoding sequences that also carries ``other``
        work (prompt chunks), drafting included [s] (vectorised): it yields
        :attr:`tokens_per_step` tokens per decoding sequence."""
        return np.asarray(self.verify(batch, context, **other).step_time_s, dtype=float) + self.draft_s(batch, context)

    def decode(self, batch: Any, context: Any) -> "StepCost":
        """The price of one output token of ``batch`` sequences at ``context`` cached: the verify
        step and the drafts divided by :attr:`tokens_per_step` (time, FLOPs and bytes; the other
        fields are the verify step's, scaled alike) (vectorised)."""
        from dataclasses import replace

        B = np.maximum(np.asarray(batch, dtype=float), 1.0)
        c = np.asarray(context, dtype=float)
        v = self.verify(B, c)
        E = self.tokens_per_step
        draft: Any = 0.0
        flops_d = bytes_d = 0.0
        d = _draft_steps(self.drafter, self.setting, B, c)
        if d is not None:
            draft = np.sum(np.asarray(d.step_time_s, dtype=float), axis=-1)
            flops_d = np.sum(np.asarray(d.flops, dtype=float), axis=-1)
            bytes_d = np.sum(np.asarray(d.bytes, dtype=float), axis=-1)
        step = np.asarray(v.step_time_s, dtype=float)
        total = step + draft
        share = np.where(total > 0, step / np.where(total > 0, total, 1.0), 1.0)

        def out(x: Any) -> Any:
            x = np.asarray(x, dtype=float)
            return float(x) if x.ndim == 0 else x

        return replace(
            v, flops=out((np.asarray(v.flops, dtype=float) + flops_d) / E), bytes=out((np.asarray(v.bytes, dtype=float) + bytes_d) / E),
            compute_time_s=out(np.asarray(v.compute_time_s, dtype=float) / E), memory_time_s=out(np.asarray(v.memory_time_s, dtype=float) / E),
            comm_time_s=out(np.asarray(v.comm_time_s, dtype=float) / E), step_time_s=out(total / E),
            mfu=out(np.asarray(v.mfu, dtype=float) * share), mbu=out(np.asarray(v.mbu, dtype=float) * share),
            overhead_s=out(np.asarray(v.overhead_s, dtype=float) / E),
        )

    def step(self, **work: Any) -> "StepCost":
        """A step without decoding sequences (a prefill or scoring step): the target's own."""
        return self.target.step(**work)

    def prefill(self, prompt: Any, cached: Any = 0, batch: Any = 1) -> "StepCost":
        """A prefill step: the target's own."""
        return self.target.prefill(prompt, cached, batch)

    def chunked(self, tokens: float, pairs: float, pairs_w: float, kv_read: float, sequences: float, logits: float,
                chunk: int) -> tuple[float, float, float]:
        """Prefill or scoring positions in steps of ``chunk``: the target's own
        (:meth:`capplan.roofline.StepPricer.chunked`)."""
        return self.target.chunked(tokens, pairs, pairs_w, kv_read, sequences, logits, chunk)
