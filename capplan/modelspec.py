"""Decoder-LLM architecture descriptions (``ModelSpec``) and exact parameter counts.

A :class:`ModelSpec` holds the handful of numbers from a model's Hugging Face ``config.json``
that decide how many weights it has and what its per-layer attention looks like: layer count,
widths, head counts, mixture-of-experts (MoE) routing, multi-head latent attention (MLA),
sliding-window and linear-attention layers. Bundled presets live in ``models/*.yaml`` and load
by name with :func:`load_model_spec`; every number in a preset carries its source in ``sources``.

Parameter counts are exact integer sums over the weight tensors of the Hugging Face
implementation (projection matrices, biases, RMSNorm weight vectors, embeddings). They are
pure functions of the spec: no checkpoint is read.

Conventions (all counts are in parameters, i.e. scalar weights, not bytes):

* ``d`` = ``hidden_size``, ``H`` = ``num_attention_heads``, ``H_kv`` = ``num_kv_heads``,
  ``h`` = ``head_dim``, ``V`` = ``vocab_size``, ``L`` = ``num_layers``.
* Every MLP is gated (SwiGLU / GeGLU): gate, up and down projections, ``3 * d * d_ff``.
* The input embedding and the LM head are ``V * d`` each; a tied head is counted once.
* DeepSeek's multi-token-prediction (MTP) module is *not* part of the main model: it is
  recorded in ``mtp_modules`` and counted separately by :meth:`ModelSpec.mtp_params`.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from capplan.resources import bundled_names, resolve
from capplan.yamlio import load_model

LayerKind = Literal["full", "sliding", "linear"]
QKNorm = Literal["none", "per_head", "full_projection"]

_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*$")

_CONFIG = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

MAX_LAYERS = 10_000
"""Most decoder layers a spec may have [layers] (the deepest published model has a few hundred)."""
MAX_WIDTH = 1_000_000
"""Largest width, head count, head size or expert count [elements or count]."""
MAX_INNER = 10_000_000
"""Largest MLP inner width or vocabulary [elements or tokens]."""
MAX_POSITIONS = 100_000_000
"""Largest declared context [tokens]."""


class MoESpec(BaseModel):
    """Mixture-of-experts feed-forward layers (Qwen3-MoE, DeepSeek-V3 style)."""

    model_config = _CONFIG

    num_experts: int = Field(gt=0, le=MAX_WIDTH)
    """Routed experts per MoE layer [count] (HF ``num_experts`` / ``n_routed_experts``)."""

    experts_per_token: int = Field(gt=0, le=MAX_WIDTH)
    """Routed experts each token is sent to [count] (HF ``num_experts_per_tok``)."""

    expert_intermediate_size: int = Field(gt=0, le=MAX_INNER)
    """Inner width of one routed expert's gated MLP [elements] (HF ``moe_intermediate_size``)."""

    num_shared_experts: int = Field(default=0, ge=0, le=MAX_WIDTH)
    """Always-active shared experts per MoE layer [count] (HF ``n_shared_experts``)."""

    shared_expert_intermediate_size: int | None = Field(default=None, gt=0, le=MAX_INNER)
    """Inner width of one shared expert [elements]; defaults to ``expert_intermediate_size``."""

    first_dense_layers: int = Field(default=0, ge=0, le=MAX_LAYERS)
    """Leading layers that use the dense MLP of width ``intermediate_size`` instead of MoE
    [count] (DeepSeek ``first_k_dense_replace``)."""

    router_bias: bool = False
    """Whether the router carries a per-expert bias vector (DeepSeek-V3's
    ``e_score_correction_bias``, ``num_experts`` parameters per MoE layer)."""

    @model_validator(mode="after")
    def _check(self) -> MoESpec:
        if self.experts_per_token > self.num_experts:
            raise ValueError(
                f"experts_per_token ({self.experts_per_token}) exceeds num_experts ({self.num_experts})"
            )
        if self.shared_expert_intermediate_size is not None and self.num_shared_experts == 0:
            raise ValueError("shared_expert_intermediate_size is set but num_shared_experts is 0")
        return self

    @property
    def shared_width(self) -> int:
        """Inner width of one shared expert [elements]."""
        return self.shared_expert_intermediate_size or self.expert_intermediate_size


class MLASpec(BaseModel):
    """Multi-head latent attention (DeepSeek-V2/V3): low-rank query and key/value projections."""

    model_config = _CONFIG

    q_lora_rank: int | None = Field(default=None, gt=0, le=MAX_WIDTH)
    """Rank of the query down-projection [elements]; ``null`` = full-rank ``q_proj``."""

    kv_lora_rank: int = Field(gt=0, le=MAX_WIDTH)
    """Width of the compressed key/value latent that is cached per token [elements]."""

    qk_nope_head_dim: int = Field(gt=0, le=MAX_WIDTH)
    """Per-head query/key width without rotary position embedding [elements]."""

    qk_rope_head_dim: int = Field(gt=0, le=MAX_WIDTH)
    """Per-head query/key width carrying RoPE; the key part is shared by all heads [elements]."""

    v_head_dim: int = Field(gt=0, le=MAX_WIDTH)
    """Per-head value width [elements]."""


class SlidingWindowSpec(BaseModel):
    """Local (sliding-window) attention and the layers that use it.

    Give either ``layers`` (explicit 0-based indices) or ``pattern`` (repeated from layer 0:
    Gemma-2 is ``[sliding, full]``, OLMo 3 is ``[sliding, sliding, sliding, full]``, Mistral 7B
    v0.1 is ``[sliding]``).
    """

    model_config = _CONFIG

    window_tokens: int = Field(gt=0, le=MAX_POSITIONS)
    """Tokens a sliding layer attends to (and keeps in its KV cache) [tokens]."""

    layers: list[int] | None = Field(default=None, max_length=MAX_LAYERS)
    """0-based indices of the sliding-window layers."""

    pattern: list[Literal["sliding", "full"]] | None = Field(default=None, max_length=MAX_LAYERS)
    """Per-layer kinds repeated cyclically from layer 0."""

    @model_validator(mode="after")
    def _check(self) -> SlidingWindowSpec:
        if (self.layers is None) == (self.pattern is None):
            raise ValueError("give exactly one of 'layers' or 'pattern'")
        if self.pattern is not None and "sliding" not in self.pattern:
            raise ValueError("pattern has no 'sliding' entry")
        if self.layers is not None:
            if len(set(self.layers)) != len(self.layers) or any(i < 0 for i in self.layers):
                raise ValueError("layers must be distinct non-negative indices")
        return self


class LinearAttentionSpec(BaseModel):
    """Linear-attention / recurrent layers of a hybrid model (e.g. Gated DeltaNet layers).

    These layers keep a fixed-size state per sequence instead of a per-token KV cache, and
    their token mixer has its own weights in place of the softmax-attention projections.
    """

    model_config = _CONFIG

    layers: list[int] = Field(max_length=MAX_LAYERS)
    """0-based indices of the linear-attention layers."""

    state_elements_per_layer: int = Field(gt=0, le=10**12)
    """Recurrent state held per sequence in one linear-attention layer [elements]."""

    mixer_params_per_layer: int = Field(gt=0, le=10**12)
    """Weights of one linear-attention token mixer, replacing the attention projections
    [parameters]."""

    @field_validator("layers")
    @classmethod
    def _distinct(cls, v: list[int]) -> list[int]:
        if not v or len(set(v)) != len(v) or any(i < 0 for i in v):
            raise ValueError("layers must be a non-empty list of distinct non-negative indices")
        return v


class ModelSpec(BaseModel):
    """Architecture of a decoder-only LLM, as far as weights and attention layout go."""

    model_config = _CONFIG

    name: str
    """Preset name: lower case, digits, ``.``, ``-`` or ``_`` (e.g. ``llama-3.1-8b``)."""

    hf_id: str | None = None
    """Hugging Face repository id the numbers were taken from (e.g. ``meta-llama/Llama-3.1-8B``)."""

    source: str
    """URL of the ``config.json`` the architecture fields come from (pinned to a commit when known)."""

    architecture: str
    """Hugging Face ``architectures[0]`` (e.g. ``LlamaForCausalLM``)."""

    num_layers: int = Field(gt=0, le=MAX_LAYERS)
    """Decoder layers [count] (HF ``num_hidden_layers``)."""

    hidden_size: int = Field(gt=0, le=MAX_WIDTH)
    """Residual-stream width ``d`` [elements]."""

    num_attention_heads: int = Field(gt=0, le=MAX_WIDTH)
    """Query heads per layer [count]."""

    num_kv_heads: int = Field(gt=0, le=MAX_WIDTH)
    """Key/value heads per layer [count] (HF ``num_key_value_heads``; GQA when fewer than query
    heads). For MLA models this is the config value; the cache holds the latent instead."""

    head_dim: int = Field(gt=0, le=MAX_WIDTH)
    """Per-head query/key width [elements]; for MLA ``qk_nope_head_dim + qk_rope_head_dim``."""

    intermediate_size: int = Field(gt=0, le=MAX_INNER)
    """Inner width of the dense gated MLP [elements]; for MoE models only dense layers use it."""

    vocab_size: int = Field(gt=0, le=MAX_INNER)
    """Rows of the token-embedding matrix (and of the LM head) [tokens]."""

    tie_word_embeddings: bool
    """Whether the LM head shares the input-embedding matrix."""

    attention_bias: bool = False
    """Bias vectors on the q/k/v projections (Qwen2/Qwen2.5 always; others when
    ``attention_bias: true`` in their config)."""

    attention_output_bias: bool = False
    """Bias vector on the attention output projection ``o_proj`` (Llama, Qwen3, OLMo, Gemma-2
    when their ``attention_bias`` is true; never in Qwen2)."""

    qk_norm: QKNorm = "none"
    """RMSNorm on queries and keys: ``per_head`` (Qwen3: one ``head_dim`` vector each for q
    and k) or ``full_projection`` (OLMo 2/3: over all ``H*h`` query and ``H_kv*h`` key
    channels)."""

    norms_per_layer: int = Field(default=2, ge=0, le=100)
    """Hidden-size RMSNorm weight vectors per decoder layer [count]: 2 for Llama-style
    pre-norm and OLMo 2/3 post-norm, 4 for Gemma-2 (pre and post around both sub-blocks)."""

    max_position_embeddings: int = Field(gt=0, le=MAX_POSITIONS)
    """Longest context the config declares [tokens]."""

    moe: MoESpec | None = None
    """Mixture-of-experts feed-forward layers; ``null`` for a dense model."""

    mla: MLASpec | None = None
    """Multi-head latent attention; ``null`` for ordinary multi-head / grouped-query attention."""

    sliding_window: SlidingWindowSpec | None = None
    """Sliding-window layers; ``null`` when every attention layer is global."""

    linear_attention: LinearAttentionSpec | None = None
    """Linear-attention layers of a hybrid model; ``null`` when there are none."""

    mtp_modules: int = Field(default=0, ge=0, le=MAX_LAYERS)
    """Multi-token-prediction modules shipped with the checkpoint but not part of the main
    model [count] (DeepSeek ``num_nextn_predict_layers``); not counted in ``total_params``."""

    published_total_params: float | None = Field(default=None, gt=0)
    """Total parameter count stated by the model's authors [parameters]; required (with a
    ``sources`` entry) for bundled presets, unknown for imported configs."""

    published_active_params: float | None = Field(default=None, gt=0)
    """Parameters active per token as stated by the authors (MoE models) [parameters]."""

    published_active_counts_input_embedding: bool = True
    """Whether the authors' active count includes the input-embedding matrix (Qwen's does;
    DeepSeek's 36.6B counts only the output head)."""

    sources: dict[str, str] = Field(default_factory=dict)
    """Citation per field name (URL, paper, or GitHub repo + path + commit)."""

    notes: str | None = None
    """Free-text remarks: choices made, known discrepancies."""

    @field_validator("name")
    @classmethod
    def _name_ok(cls, v: str) -> str:
        if not _NAME_RE.match(v):
            raise ValueError("must be lower case letters, digits, '.', '-' or '_' (e.g. llama-3.1-8b)")
        return v

    @model_validator(mode="after")
    def _check(self) -> ModelSpec:
        if self.num_attention_heads % self.num_kv_heads:
            raise ValueError(
                f"num_attention_heads ({self.num_attention_heads}) is not a multiple of "
                f"num_kv_heads ({self.num_kv_heads})"
            )
        if self.moe is not None and self.moe.first_dense_layers > self.num_layers:
            raise ValueError("moe.first_dense_layers exceeds num_layers")
        if self.mla is not None and self.head_dim != self.mla.qk_nope_head_dim + self.mla.qk_rope_head_dim:
            raise ValueError("with mla, head_dim must equal qk_nope_head_dim + qk_rope_head_dim")
        if self.sliding_window is not None and self.sliding_window.layers is not None:
            bad = [i for i in self.sliding_window.layers if i >= self.num_layers]
            if bad:
                raise ValueError(f"sliding_window.layers has indices >= num_layers: {bad}")
        if self.linear_attention is not None:
            bad = [i for i in self.linear_attention.layers if i >= self.num_layers]
            if bad:
                raise ValueError(f"linear_attention.layers has indices >= num_layers: {bad}")
            if self.sliding_window is not None:
                both = sorted(set(self.linear_attention.layers) & set(self._sliding_layer_set()))
                if both:
                    raise ValueError(f"layers {both} are both sliding-window and linear-attention")
        if self.published_active_params is not None and self.published_total_params is not None:
            if self.published_active_params > self.published_total_params:
                raise ValueError("published_active_params exceeds published_total_params")
        allowed = set(type(self).model_fields)
        unknown = sorted(k for k in self.sources if k not in allowed)
        if unknown:
            raise ValueError(f"sources has keys that are not fields: {', '.join(unknown)}")
        for field in ("published_total_params", "published_active_params"):
            if getattr(self, field) is not None and not self.sources.get(field):
                raise ValueError(f"{field} is set but sources.{field} (its citation) is missing")
        return self

    # ------------------------------------------------------------------ layout

    def _sliding_layer_set(self) -> set[int]:
        sw = self.sliding_window
        if sw is None:
            return set()
        if sw.layers is not None:
            return set(sw.layers)
        assert sw.pattern is not None
        n = len(sw.pattern)
        return {i for i in range(self.num_layers) if sw.pattern[i % n] == "sliding"}

    def layer_kinds(self) -> list[LayerKind]:
        """Attention kind of every decoder layer, in order.

        Returns
        -------
        list of {"full", "sliding", "linear"}
            ``linear`` for layers in ``linear_attention.layers``, ``sliding`` for sliding-window
            layers (explicit indices, or ``pattern[i % len(pattern)]``), ``full`` otherwise.

        Examples
        --------
        >>> load_model_spec("gemma-2-9b").layer_kinds()[:4]
        ['sliding', 'full', 'sliding', 'full']
        """
        sliding = self._sliding_layer_set()
        linear = set(self.linear_attention.layers) if self.linear_attention else set()
        kinds: list[LayerKind] = []
        for i in range(self.num_layers):
            kinds.append("linear" if i in linear else "sliding" if i in sliding else "full")
        return kinds

    def layer_kind_counts(self) -> dict[LayerKind, int]:
        """How many decoder layers of each attention kind the model has.

        Examples
        --------
        >>> load_model_spec("gemma-2-9b").layer_kind_counts()
        {'full': 21, 'sliding': 21, 'linear': 0}
        """
        kinds = self.layer_kinds()
        return {"full": kinds.count("full"), "sliding": kinds.count("sliding"), "linear": kinds.count("linear")}

    @property
    def window_tokens(self) -> float:
        """Sliding-window width [positions]; ``inf`` when every attention layer is global."""
        return float(self.sliding_window.window_tokens) if self.sliding_window else math.inf

    def is_moe_layer(self, layer: int) -> bool:
        """Whether decoder layer ``layer`` (0-based) has a mixture-of-experts MLP."""
        self._check_layer(layer)
        return self.moe is not None and layer >= self.moe.first_dense_layers

    def _check_layer(self, layer: int) -> None:
        if not 0 <= layer < self.num_layers:
            raise IndexError(f"layer {layer} out of range 0..{self.num_layers - 1}")

    # ------------------------------------------------------------------ counts

    def attention_params_per_layer(self) -> int:
        """Weights of one softmax-attention block (full or sliding) [parameters].

        Returns
        -------
        int
            Projections, biases and q/k-norm weights of one attention layer.

        Notes
        -----
        Grouped-query attention (``d`` hidden, ``H`` / ``H_kv`` heads of width ``h``)::

            P = d*H*h + 2*d*H_kv*h + H*h*d           (q, k, v, o projections)
              + [attention_bias] (H*h + 2*H_kv*h)    (q/k/v biases)
              + [attention_output_bias] d            (o bias)
              + qk-norm: 2*h (per_head) or H*h + H_kv*h (full_projection)

        Multi-head latent attention (ranks ``r_q``, ``r_kv``; widths ``n`` nope, ``r`` rope,
        ``v`` value)::

            P = d*r_q + r_q + r_q*H*(n + r)      (q down-proj, its RMSNorm, q up-proj)
              + d*(r_kv + r) + r_kv              (kv down-proj incl. shared rope key, RMSNorm)
              + r_kv*H*(n + v) + H*v*d           (kv up-proj, output proj)

        With ``q_lora_rank: null`` the first line is ``d*H*(n + r)``.

        Examples
        --------
        Llama 3.1 8B: ``4096*4096 + 2*4096*1024 + 4096*4096``

        >>> load_model_spec("llama-3.1-8b").attention_params_per_layer()
        41943040
        """
        d, H, Hkv, h = self.hidden_size, self.num_attention_heads, self.num_kv_heads, self.head_dim
        if self.mla is not None:
            m = self.mla
            qk = m.qk_nope_head_dim + m.qk_rope_head_dim
            if m.q_lora_rank is None:
                q = d * H * qk
            else:
                q = d * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * H * qk
            kv = d * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank
            kv += m.kv_lora_rank * H * (m.qk_nope_head_dim + m.v_head_dim)
            o = H * m.v_head_dim * d
            p = q + kv + o
            if self.attention_output_bias:
                p += d
            return p
        p = d * H * h + 2 * d * Hkv * h + H * h * d
        if self.attention_bias:
            p += H * h + 2 * Hkv * h
        if self.attention_output_bias:
            p += d
        if self.qk_norm == "per_head":
            p += 2 * h
        elif self.qk_norm == "full_projection":
            p += H * h + Hkv * h
        return p

    def mixer_params(self, layer: int) -> int:
        """Weights of the token mixer of decoder layer ``layer`` [parameters].

        Softmax-attention layers return :meth:`attention_params_per_layer`; linear-attention
        layers return ``linear_attention.mixer_params_per_layer``.
        """
        self._check_layer(layer)
        if self.linear_attention is not None and layer in self.linear_attention.layers:
            return self.linear_attention.mixer_params_per_layer
        return self.attention_params_per_layer()

    def mlp_params_per_layer(self, layer: int) -> int:
        """All feed-forward weights of decoder layer ``layer`` [parameters].

        Parameters
        ----------
        layer : int
            0-based layer index.

        Returns
        -------
        int
            Dense layers: ``3*d*d_ff``. MoE layers: every routed expert, the shared experts and
            the router.

        Notes
        -----
        ::

            dense:  P = 3*d*d_ff
            MoE:    P = E*3*d*d_e + S*3*d*d_s + E*d + [router_bias] E

        with ``E`` routed experts of width ``d_e`` and ``S`` shared experts of width ``d_s``.

        Examples
        --------
        Qwen3-30B-A3B, 128 experts of width 768 plus a 128-way router on d = 2048:
        ``128*3*2048*768 + 128*2048``

        >>> load_model_spec("qwen3-30b-a3b").mlp_params_per_layer(0)
        604241920
        """
        self._check_layer(layer)
        d = self.hidden_size
        if not self.is_moe_layer(layer):
            return 3 * d * self.intermediate_size
        m = self.moe
        assert m is not None
        routed = m.num_experts * 3 * d * m.expert_intermediate_size
        return routed + self._shared_expert_params() + self._router_params()

    def active_mlp_params(self, layer: int) -> int:
        """Feed-forward weights one token passes through in decoder layer ``layer`` [parameters].

        Notes
        -----
        ::

            dense:  P = 3*d*d_ff
            MoE:    P = k*3*d*d_e + S*3*d*d_s + E*d + [router_bias] E

        with ``k`` = ``experts_per_token``; the whole router is read for every token.
        """
        self._check_layer(layer)
        d = self.hidden_size
        if not self.is_moe_layer(layer):
            return 3 * d * self.intermediate_size
        m = self.moe
        assert m is not None
        routed = m.experts_per_token * 3 * d * m.expert_intermediate_size
        return routed + self._shared_expert_params() + self._router_params()

    def _shared_expert_params(self) -> int:
        m = self.moe
        assert m is not None
        return m.num_shared_experts * 3 * self.hidden_size * m.shared_width

    def _router_params(self) -> int:
        m = self.moe
        assert m is not None
        return m.num_experts * self.hidden_size + (m.num_experts if m.router_bias else 0)

    def norm_params_per_layer(self) -> int:
        """RMSNorm weights of one decoder layer outside the attention block [parameters].

        ``P = norms_per_layer * d``. (q/k norms and MLA's latent norms are counted in
        :meth:`attention_params_per_layer`.)
        """
        return self.norms_per_layer * self.hidden_size

    def embedding_params(self) -> int:
        """Input embedding plus LM head [parameters].

        Notes
        -----
        ``P = V*d`` when the head is tied to the embedding, else ``2*V*d`` (each matrix counted
        once).

        Examples
        --------
        >>> load_model_spec("llama-3.1-8b").embedding_params()  # 2 * 128256 * 4096
        1050673152
        >>> load_model_spec("gemma-2-9b").embedding_params()  # tied: 256000 * 3584
        917504000
        """
        per_matrix = self.vocab_size * self.hidden_size
        return per_matrix if self.tie_word_embeddings else 2 * per_matrix

    def layer_params(self, layer: int) -> int:
        """All weights of decoder layer ``layer``: mixer + MLP + norms [parameters]."""
        return self.mixer_params(layer) + self.mlp_params_per_layer(layer) + self.norm_params_per_layer()

    def total_params(self) -> int:
        """Parameters of the main model [parameters].

        Notes
        -----
        ::

            P_total = embedding_params + d (final norm)
                    + sum over layers (mixer + MLP + norms_per_layer * d)

        MTP modules (``mtp_modules``) are excluded; see :meth:`mtp_params`.

        References
        ----------
        Llama 3.1 model card, 8B: https://github.com/meta-llama/llama-models/blob/main/models/llama3_1/MODEL_CARD.md

        Examples
        --------
        >>> load_model_spec("llama-3.1-8b").total_params()
        8030261248
        >>> load_model_spec("deepseek-v3").total_params()
        671026419200
        """
        layers = sum(self.layer_params(i) for i in range(self.num_layers))
        return self.embedding_params() + self.hidden_size + layers

    def active_params(self, include_input_embedding: bool = True) -> int:
        """Parameters a single token passes through [parameters].

        Parameters
        ----------
        include_input_embedding : bool
            Count the input-embedding matrix (``V*d``) as active. Qwen's published "activated"
            figures include it; DeepSeek's exclude it (a token reads one row of it, not the
            matrix). When the head is tied the shared matrix is always counted once.

        Returns
        -------
        int
            Equal to :meth:`total_params` for a dense model (with the default argument).

        Notes
        -----
        ::

            P_active = [V*d] + V*d (untied head) + d (final norm)
                     + sum over layers (mixer + active MLP + norms)

        where the active MLP of an MoE layer is ``experts_per_token`` routed experts, all
        shared experts and the router (:meth:`active_mlp_params`).

        References
        ----------
        DeepSeek-V3 weights documentation, README_WEIGHTS.md,
        https://github.com/deepseek-ai/DeepSeek-V3 (first version: 36.6B activated, including the
        0.9B output head but not the input embedding).

        Examples
        --------
        >>> load_model_spec("qwen3-30b-a3b").active_params()
        3353032704
        >>> load_model_spec("deepseek-v3").active_params(include_input_embedding=False)
        36625618432
        """
        layers = sum(
            self.mixer_params(i) + self.active_mlp_params(i) + self.norm_params_per_layer()
            for i in range(self.num_layers)
        )
        emb = self.vocab_size * self.hidden_size
        if self.tie_word_embeddings:
            embeddings = emb
        else:
            embeddings = emb + (emb if include_input_embedding else 0)
        return embeddings + self.hidden_size + layers

    def mtp_params(self) -> int:
        """Unique weights of the multi-token-prediction modules [parameters].

        Notes
        -----
        Per DeepSeek-V3's MTP module (README_WEIGHTS.md): one extra decoder layer shaped like the
        last main layer, RMSNorms ``enorm``, ``hnorm`` and the shared head's norm (``3*d``), and
        the ``eh_proj`` projection ``2d -> d``; the embedding and output head are shared with the
        main model and not counted::

            P_mtp = mtp_modules * (layer_params(L-1) + 3*d + 2*d*d)

        Examples
        --------
        >>> load_model_spec("deepseek-v3").mtp_params()
        11610068224
        """
        if self.mtp_modules == 0:
            return 0
        d = self.hidden_size
        return self.mtp_modules * (self.layer_params(self.num_layers - 1) + 3 * d + 2 * d * d)

    def param_breakdown(self) -> dict[str, int]:
        """Main-model parameters by component [parameters].

        Returns
        -------
        dict of str to int
            ``input_embedding_params``, ``lm_head_params`` (0 when tied), ``attention_params``
            (softmax-attention blocks), ``linear_attention_params``, ``dense_mlp_params``,
            ``routed_expert_params``, ``shared_expert_params``, ``router_params``,
            ``norm_params`` (per-layer norms and the final norm), plus ``total_params`` and
            ``active_params`` (as :meth:`total_params` and :meth:`active_params`). The component
            entries sum to ``total_params``.

        Examples
        --------
        >>> b = load_model_spec("llama-3.1-8b").param_breakdown()
        >>> b["attention_params"], b["dense_mlp_params"], b["norm_params"]
        (1342177280, 5637144576, 266240)
        """
        d = self.hidden_size
        kinds = self.layer_kinds()
        attention = sum(self.mixer_params(i) for i, k in enumerate(kinds) if k != "linear")
        linear = sum(self.mixer_params(i) for i, k in enumerate(kinds) if k == "linear")
        dense = routed = shared = router = 0
        for i in range(self.num_layers):
            if self.is_moe_layer(i):
                m = self.moe
                assert m is not None
                routed += m.num_experts * 3 * d * m.expert_intermediate_size
                shared += self._shared_expert_params()
                router += self._router_params()
            else:
                dense += self.mlp_params_per_layer(i)
        emb = self.vocab_size * d
        parts = {
            "input_embedding_params": emb,
            "lm_head_params": 0 if self.tie_word_embeddings else emb,
            "attention_params": attention,
            "linear_attention_params": linear,
            "dense_mlp_params": dense,
            "routed_expert_params": routed,
            "shared_expert_params": shared,
            "router_params": router,
            "norm_params": self.num_layers * self.norm_params_per_layer() + d,
        }
        parts["total_params"] = self.total_params()
        parts["active_params"] = self.active_params()
        return parts


def load_model_spec(name_or_path: str | Path) -> ModelSpec:
    """Load a bundled preset by name (``llama-3.1-8b``) or a user's YAML file by path.

    Raises
    ------
    NotFoundError
        Neither a file nor a bundled name; the message lists the bundled names.
    InputError
        The file is not valid YAML or fails validation; the message names file, field and line.

    Examples
    --------
    >>> load_model_spec("qwen3-8b").num_layers
    36
    """
    path = resolve("models", name_or_path)
    return load_model(path, ModelSpec)


def list_models() -> list[str]:
    """Sorted names of the bundled model presets."""
    return bundled_names("models")
