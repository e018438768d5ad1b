"""Build a :class:`~capplan.modelspec.ModelSpec` from a Hugging Face ``config.json``.

:func:`spec_from_hf_config` reads the architecture fields of the decoder families capplan knows
how to count (see :data:`SUPPORTED_ARCHITECTURES`) and refuses anything else with a one-line
:class:`~capplan.errors.InputError`. :func:`spec_to_yaml` writes a spec as a commented YAML
preset that :func:`~capplan.modelspec.load_model_spec` reads back unchanged.

What each family contributes beyond the common Llama layout (taken from the Hugging Face
``transformers`` modelling code of each family):

* ``Qwen2ForCausalLM``: q/k/v projections always carry a bias, ``o_proj`` never does.
* ``Qwen3ForCausalLM`` / ``Qwen3MoeForCausalLM``: per-head RMSNorm on q and k; MoE experts.
* ``Gemma2ForCausalLM``: four RMSNorms per layer, tied embeddings by default, alternating
  sliding-window (even layers) and global (odd layers) attention.
* ``MistralForCausalLM``: ``sliding_window`` applies to every layer when set.
* ``DeepseekV3ForCausalLM``: multi-head latent attention, dense-then-MoE layers with shared
  experts, router bias (``e_score_correction_bias``), MTP modules (not counted in the total).
* ``Olmo2ForCausalLM`` / ``Olmo3ForCausalLM``: post-norm blocks (two norms per layer), RMSNorm
  over the full q and k projections; OLMo 3 adds ``layer_types`` with sliding windows.

Published parameter counts are unknown for an imported config and stay ``None``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import yaml
from pydantic import BaseModel

from capplan.errors import InputError
from capplan.modelspec import MAX_LAYERS, ModelSpec
from capplan.yamlio import validate_data

Config = dict[str, Any]


def _need(config: Config, key: str, source: str) -> Any:
    if key not in config or config[key] is None:
        raise InputError(f"{source}: config.json has no '{key}', which this architecture needs")
    return config[key]


def _int(config: Config, key: str, source: str, minimum: int = 1) -> int:
    value = _need(config, key, source)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"{source}: config.json '{key}' must be an integer, got {_shown(value)}")
    if value < minimum:
        raise InputError(f"{source}: config.json '{key}' must be >= {minimum}, got {value}")
    return value


def _shown(value: Any) -> str:
    """A config value for a message: its repr, cut short."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _bool(config: Config, key: str, default: bool, source: str) -> bool:
    """A boolean field; JSON ``true``/``false`` (and the strings ``"true"``/``"false"``, which some
    hand-edited configs carry). Any other value is an error: ``bool("false")`` is true in Python."""
    value = config.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise InputError(f"{source}: config.json '{key}' must be true or false, got {_shown(value)}")


def _layer_types(config: Config, source: str) -> list[Any]:
    """``layer_types``: a list with one entry per layer."""
    value = config["layer_types"]
    if not isinstance(value, list):
        raise InputError(f"{source}: config.json 'layer_types' must be a list of layer kinds, got {_shown(value)}")
    layers = config.get("num_hidden_layers")
    if len(value) > MAX_LAYERS:
        raise InputError(f"{source}: config.json 'layer_types' has {len(value):,} entries; at most {MAX_LAYERS:,} layers are modelled")
    if isinstance(layers, int) and len(value) != layers:
        raise InputError(
            f"{source}: config.json 'layer_types' has {len(value)} entries but num_hidden_layers is {layers}"
        )
    return value


def _common(config: Config, source: str, *, tie_default: bool) -> dict[str, Any]:
    """Fields every supported family spells the same way."""
    hidden = _int(config, "hidden_size", source)
    heads = _int(config, "num_attention_heads", source)
    kv = _int(config, "num_key_value_heads", source) if config.get("num_key_value_heads") is not None else None
    head_dim = _int(config, "head_dim", source) if config.get("head_dim") is not None else None
    if head_dim is None:
        if hidden % heads:
            raise InputError(
                f"{source}: config.json has no 'head_dim' and hidden_size {hidden} is not a "
                f"multiple of num_attention_heads {heads}"
            )
        head_dim = hidden // heads
    if _bool(config, "mlp_bias", False, source):
        raise InputError(f"{source}: config.json sets 'mlp_bias': true, which capplan does not model")
    return {
        "architecture": config["architectures"][0],
        "num_layers": _int(config, "num_hidden_layers", source),
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "num_kv_heads": heads if kv is None else kv,
        "head_dim": head_dim,
        "intermediate_size": _int(config, "intermediate_size", source),
        "vocab_size": _int(config, "vocab_size", source),
        "tie_word_embeddings": _bool(config, "tie_word_embeddings", tie_default, source),
        "max_position_embeddings": _int(config, "max_position_embeddings", source),
    }


def _sliding_from_layer_types(layer_types: list[Any], window: Any, source: str) -> dict[str, Any] | None:
    """Turn HF ``layer_types`` into a ``sliding_window`` mapping.

    A list that repeats a shorter block becomes that block as ``pattern``; any other list becomes
    explicit ``layers``.
    """
    kinds = []
    for i, kind in enumerate(layer_types):
        if kind == "sliding_attention":
            kinds.append("sliding")
        elif kind == "full_attention":
            kinds.append("full")
        else:
            raise InputError(
                f"{source}: config.json layer_types[{i}] is '{kind}'; capplan knows only "
                "'sliding_attention' and 'full_attention' here"
            )
    if "sliding" not in kinds:
        return None
    if not isinstance(window, int) or isinstance(window, bool) or window <= 0:
        raise InputError(f"{source}: config.json has sliding layers but 'sliding_window' is {window!r}")
    for period in range(1, len(kinds) // 2 + 1):
        if len(kinds) % period == 0 and kinds == kinds[:period] * (len(kinds) // period):
            return {"window_tokens": window, "pattern": kinds[:period]}
    return {"window_tokens": window, "layers": [i for i, k in enumerate(kinds) if k == "sliding"]}


def _qwen_sliding(config: Config, source: str, num_layers: int) -> dict[str, Any] | None:
    """Qwen2/Qwen3 sliding window: off unless ``use_sliding_window``; then layers >= max_window_layers."""
    if "layer_types" in config and config["layer_types"] is not None:
        return _sliding_from_layer_types(_layer_types(config, source), config.get("sliding_window"), source)
    if not _bool(config, "use_sliding_window", False, source):
        return None
    first = _int(config, "max_window_layers", source)
    layers = list(range(first, num_layers))
    if not layers:
        return None
    return {"window_tokens": _int(config, "sliding_window", source), "layers": layers}


def _biased(config: Config, source: str, qk_norm: str) -> dict[str, Any]:
    """Llama-shaped blocks whose ``attention_bias`` covers q/k/v and o, two norms per layer."""
    spec = _common(config, source, tie_default=False)
    bias = _bool(config, "attention_bias", False, source)
    spec.update(attention_bias=bias, attention_output_bias=bias, qk_norm=qk_norm, norms_per_layer=2)
    return spec


def _llama(config: Config, source: str) -> dict[str, Any]:
    return _biased(config, source, "none")


def _mistral(config: Config, source: str) -> dict[str, Any]:
    spec = _llama(config, source)
    if config.get("layer_types") is not None:
        spec["sliding_window"] = _sliding_from_layer_types(
            _layer_types(config, source), config.get("sliding_window"), source
        )
    elif config.get("sliding_window") is not None:
        spec["sliding_window"] = {"window_tokens": _int(config, "sliding_window", source), "pattern": ["sliding"]}
    return spec


def _qwen2(config: Config, source: str) -> dict[str, Any]:
    spec = _common(config, source, tie_default=False)
    spec.update(attention_bias=True, attention_output_bias=False, qk_norm="none", norms_per_layer=2)
    spec["sliding_window"] = _qwen_sliding(config, source, spec["num_layers"])
    return spec


def _qwen3(config: Config, source: str) -> dict[str, Any]:
    spec = _common(config, source, tie_default=False)
    bias = _bool(config, "attention_bias", False, source)
    spec.update(attention_bias=bias, attention_output_bias=bias, qk_norm="per_head", norms_per_layer=2)
    spec["sliding_window"] = _qwen_sliding(config, source, spec["num_layers"])
    return spec


def _qwen3_moe(config: Config, source: str) -> dict[str, Any]:
    spec = _qwen3(config, source)
    step = config.get("decoder_sparse_step", 1)
    only = config.get("mlp_only_layers") or []
    if not isinstance(only, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in only):
        raise InputError(f"{source}: config.json 'mlp_only_layers' must be a list of layer indices, got {_shown(only)}")
    dense = sorted(only)
    if step != 1 or dense != list(range(len(dense))):
        raise InputError(
            f"{source}: config.json decoder_sparse_step {step} / mlp_only_layers {dense}: capplan "
            "models only MoE in every layer after an optional leading run of dense layers"
        )
    spec["moe"] = {
        "num_experts": _int(config, "num_experts", source),
        "experts_per_token": _int(config, "num_experts_per_tok", source),
        "expert_intermediate_size": _int(config, "moe_intermediate_size", source),
        "first_dense_layers": len(dense),
    }
    return spec


def _gemma2(config: Config, source: str) -> dict[str, Any]:
    spec = _common(config, source, tie_default=True)
    bias = _bool(config, "attention_bias", False, source)
    spec.update(attention_bias=bias, attention_output_bias=bias, qk_norm="none", norms_per_layer=4)
    if config.get("layer_types") is not None:
        spec["sliding_window"] = _sliding_from_layer_types(
            _layer_types(config, source), config.get("sliding_window"), source
        )
    else:
        spec["sliding_window"] = {
            "window_tokens": _int(config, "sliding_window", source),
            "pattern": ["sliding", "full"],
        }
    return spec


def _deepseek_v3(config: Config, source: str) -> dict[str, Any]:
    if _bool(config, "attention_bias", False, source):
        raise InputError(f"{source}: config.json sets 'attention_bias': true, which capplan does not model for MLA")
    if config.get("moe_layer_freq", 1) != 1:
        raise InputError(f"{source}: config.json moe_layer_freq {config['moe_layer_freq']} is not supported (only 1)")
    nope = _int(config, "qk_nope_head_dim", source)
    rope = _int(config, "qk_rope_head_dim", source)
    spec = _common({**config, "head_dim": nope + rope}, source, tie_default=False)
    spec.update(attention_bias=False, attention_output_bias=False, qk_norm="none", norms_per_layer=2)
    spec["mla"] = {
        "q_lora_rank": config.get("q_lora_rank"),
        "kv_lora_rank": _int(config, "kv_lora_rank", source),
        "qk_nope_head_dim": nope,
        "qk_rope_head_dim": rope,
        "v_head_dim": _int(config, "v_head_dim", source),
    }
    shared = config.get("n_shared_experts") or 0
    spec["moe"] = {
        "num_experts": _int(config, "n_routed_experts", source),
        "experts_per_token": _int(config, "num_experts_per_tok", source),
        "expert_intermediate_size": _int(config, "moe_intermediate_size", source),
        "num_shared_experts": shared,
        "first_dense_layers": config.get("first_k_dense_replace", 0) or 0,
        # e_score_correction_bias exists for the noaux_tc router (DeepSeek-V3's only method).
        "router_bias": config.get("topk_method", "noaux_tc") == "noaux_tc",
    }
    spec["mtp_modules"] = config.get("num_nextn_predict_layers", 0) or 0
    return spec


def _mixtral(config: Config, source: str) -> dict[str, Any]:
    spec = _common(config, source, tie_default=False)
    spec.update(attention_bias=False, attention_output_bias=False, qk_norm="none", norms_per_layer=2)
    if config.get("sliding_window"):
        spec["sliding_window"] = {"window_tokens": _int(config, "sliding_window", source), "pattern": ["sliding"]}
    spec["moe"] = {
        "num_experts": _int(config, "num_local_experts", source),
        "experts_per_token": _int(config, "num_experts_per_tok", source),
        "expert_intermediate_size": _int(config, "intermediate_size", source),
        "num_shared_experts": 0,
        "first_dense_layers": 0,
        "router_bias": False,
    }
    return spec


def _gpt_oss(config: Config, source: str) -> dict[str, Any]:
    spec = _common(config, source, tie_default=False)
    bias = _bool(config, "attention_bias", True, source)
    spec.update(attention_bias=bias, attention_output_bias=bias, qk_norm="none", norms_per_layer=2)
    if config.get("layer_types") is not None:
        spec["sliding_window"] = _sliding_from_layer_types(_layer_types(config, source), config.get("sliding_window"), source)
    spec["moe"] = {
        "num_experts": _int(config, "num_local_experts", source),
        "experts_per_token": _int(config, "num_experts_per_tok", source),
        "expert_intermediate_size": _int(config, "intermediate_size", source),
        "num_shared_experts": 0,
        "first_dense_layers": 0,
        "router_bias": True,
    }
    return spec


def _olmo2(config: Config, source: str) -> dict[str, Any]:
    return _biased(config, source, "full_projection")


def _olmo3(config: Config, source: str) -> dict[str, Any]:
    spec = _olmo2(config, source)
    if config.get("layer_types") is not None:
        spec["sliding_window"] = _sliding_from_layer_types(
            _layer_types(config, source), config.get("sliding_window"), source
        )
    return spec


#: ``architectures[0]`` values :func:`spec_from_hf_config` understands, with their readers.
SUPPORTED_ARCHITECTURES: dict[str, Callable[[Config, str], dict[str, Any]]] = {
    "LlamaForCausalLM": _llama,
    "MistralForCausalLM": _mistral,
    "Qwen2ForCausalLM": _qwen2,
    "Qwen3ForCausalLM": _qwen3,
    "Qwen3MoeForCausalLM": _qwen3_moe,
    "Gemma2ForCausalLM": _gemma2,
    "DeepseekV2ForCausalLM": _deepseek_v3,
    "DeepseekV3ForCausalLM": _deepseek_v3,
    "MixtralForCausalLM": _mixtral,
    "GptOssForCausalLM": _gpt_oss,
    "Olmo2ForCausalLM": _olmo2,
    "Olmo3ForCausalLM": _olmo3,
}


def spec_from_hf_config(config: dict[str, Any], name: str, source: str) -> ModelSpec:
    """Read the architecture of a supported decoder from a parsed ``config.json``.

    Parameters
    ----------
    config : dict
        The parsed ``config.json`` (``json.load`` output).
    name : str
        Preset name to give the spec (lower case, e.g. ``my-llama``).
    source : str
        Where the config came from (URL or path); used in the spec and in error messages.

    Returns
    -------
    ModelSpec
        With ``published_total_params`` / ``published_active_params`` left ``None``.

    Raises
    ------
    InputError
        The architecture is not supported (the message lists the supported ones), a needed key
        is missing, or the values fail validation.

    Examples
    --------
    >>> cfg = {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336,
    ...        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
    ...        "vocab_size": 128256, "max_position_embeddings": 131072, "tie_word_embeddings": False}
    >>> spec_from_hf_config(cfg, "my-llama", "config.json").total_params()
    8030261248
    """
    if not isinstance(config, dict):
        raise InputError(f"{source}: config.json must be a JSON object, got {type(config).__name__}")
    archs = config.get("architectures")
    arch = archs[0] if isinstance(archs, list) and archs else None
    reader = SUPPORTED_ARCHITECTURES.get(arch) if isinstance(arch, str) else None
    if arch is None:
        nested = " (it nests a text_config: a multimodal model's config; give the language model's own config.json)" if isinstance(
            config.get("text_config"), dict) else ""
        raise InputError(f"{source}: architectures: missing or empty{nested}; supported architectures: "
                         + ", ".join(SUPPORTED_ARCHITECTURES))
    if reader is None:
        raise InputError(
            f"{source}: architecture {arch!r} is not supported; supported architectures: "
            + ", ".join(SUPPORTED_ARCHITECTURES)
        )
    fields = reader(config, source)
    data = {
        "name": name,
        "hf_id": config.get("_name_or_path") or None,
        "source": source,
        **{k: v for k, v in fields.items() if v is not None},
        "sources": {"source": f"architecture fields read from {source} by capplan.hf_import"},
    }
    return validate_data(source, data, ModelSpec)


def _comment(model: type[BaseModel], field: str) -> str:
    from capplan.options import field_docs

    desc = field_docs(model.__module__, model.__name__).get(field, "").replace("``", "")
    first = re.split(r"(?<!e\.g)(?<!i\.e)\.(?:\s|$)", desc, maxsplit=1)[0]
    return first


def _emit(model: BaseModel, indent: int, lines: list[str]) -> None:
    pad = " " * indent
    cls = type(model)
    for field in cls.model_fields:
        value = getattr(model, field)
        if value is None:
            continue
        comment = _comment(cls, field)
        if isinstance(value, BaseModel):
            lines.append(f"{pad}# {comment}")
            lines.append(f"{pad}{field}:")
            _emit(value, indent + 2, lines)
        elif isinstance(value, dict):
            lines.append(f"{pad}# {comment}")
            if not value:
                lines.append(f"{pad}{field}: {{}}")
                continue
            body = yaml.safe_dump({field: value}, sort_keys=False, allow_unicode=True, width=100)
            lines.extend(pad + line for line in body.rstrip("\n").split("\n"))
        else:
            body = yaml.safe_dump({field: value}, sort_keys=False, default_flow_style=True, width=10_000)
            text = body.strip()[1:-1].strip()  # "{key: value}" -> "key: value"
            lines.append(f"{pad}{text}  # {comment}" if comment else f"{pad}{text}")


def spec_to_yaml(spec: ModelSpec) -> str:
    """Render ``spec`` as a commented YAML preset that :func:`load_model_spec` reads back.

    Every field is followed (or, for mappings, preceded) by the first sentence of its
    documentation; the derived parameter counts head the file as comments.

    Examples
    --------
    >>> from capplan.modelspec import load_model_spec
    >>> text = spec_to_yaml(load_model_spec("qwen3-8b"))
    >>> print(text.splitlines()[2])
    # Derived: total_params = 8,190,735,360; active_params = 8,190,735,360
    >>> print(text.splitlines()[9])
    num_layers: 36  # Decoder layers [count] (HF num_hidden_layers)
    """
    lines = [
        f"# capplan model preset '{spec.name}', written by capplan.hf_import.spec_to_yaml.",
        f"# Architecture from {spec.source}",
        f"# Derived: total_params = {spec.total_params():,}; active_params = {spec.active_params():,}",
        "# Field meanings: models/README.md. Add published_total_params with a sources entry to",
        "# compare against the authors' figure.",
    ]
    _emit(spec, 0, lines)
    return "\n".join(lines) + "\n"
