"""Record formats: the mask coding, capplan's field decoders, and the verl, OpenRLHF and AReaL mappings.

A record reaches the checks as a dict with capplan's keys (see :mod:`capplan.reconcile`). Masks
may be strings, lists or bytes (a mapping's, in the internal coding, or a Parquet binary column:
codes or letters, validated like a list); a mapping may add
``"_n_tokens"`` (the token count), ``"_lp_offset"`` (position of ``logprobs[0]`` when the
log-probs cover positions ``_lp_offset`` to the end) and ``"_stop_logged"`` (False when its format
has no stop reason).
"""

from __future__ import annotations

from typing import Any, Callable

PROMPT, ACTION, TOOL = 0, 1, 2
"""Origin codes of the token classes, in :data:`capplan.workload.TOKEN_CLASSES` order."""


def _table(mapping: dict[int, int], default: int = 255) -> bytes:
    """A ``bytes.translate`` table sending each byte through ``mapping`` (``default`` elsewhere)."""
    return bytes(mapping.get(i, default) for i in range(256))


# Masks are held as bytes: origin 0 prompt / 1 action / 2 tool, loss 0 / 1; 255 marks a bad value.
ORIGIN_FROM_STR = _table({ord("p"): PROMPT, ord("a"): ACTION, ord("t"): TOOL})
ORIGIN_FROM_INT = _table({PROMPT: PROMPT, ACTION: ACTION, TOOL: TOOL})
LOSS_FROM_STR = _table({ord("0"): 0, ord("1"): 1})
LOSS_FROM_INT = _table({0: 0, 1: 1})
IS_CLASS = [_table({code: 1}, default=0) for code in (PROMPT, ACTION, TOOL)]
"""Per class: a table sending an origin byte to 1 when it is of that class, else 0."""
IS_PROMPT, IS_ACTION = IS_CLASS[PROMPT], IS_CLASS[ACTION]
_VERL_MASK_TO_ORIGIN = _table({0: TOOL, 1: ACTION})  # verl response_mask: 1 generated, 0 tool


class BadRecord(Exception):
    """A record that cannot be read: which field, what is wrong, and the check it fails."""

    def __init__(self, field: str, message: str, check: str = "well_formed") -> None:
        super().__init__(message)
        self.field, self.message, self.check = field, message, check


def _flag(value: Any, field: str) -> bool | None:
    """A logged true/false field: a JSON boolean (or 0/1), else a :class:`BadRecord`; ``None`` if absent.
    A string such as ``"false"`` is refused rather than read by Python truthiness (it would be true)."""
    if value is None:
        return None
    if type(value) is bool or (type(value) is int and value in (0, 1)):
        return bool(value)
    raise BadRecord(field, f"{value!r} is not true/false")


def mask_bytes(value: Any, field: str, from_str: bytes, from_int: bytes, letters: str, codes: str) -> bytes:
    """A per-position mask (a string of ``letters`` or a list of ``codes``) as bytes in the
    internal coding; ``from_str`` / ``from_int`` translate valid entries and map the rest to 0xff."""
    kind = type(value)
    if kind is bytes or kind is bytearray:
        mask = bytes(value).translate(from_int)
        if 255 not in mask:
            return mask
        letters_mask = bytes(value).translate(from_str)  # a Parquet binary column holding the letters
        if 255 not in letters_mask:
            return letters_mask
        bad = mask.index(255)
        raise BadRecord(field, f"position {bad} is byte {value[bad]}; allowed: {letters if letters == codes else f'{letters} or {codes}'}")
    if kind is str:
        try:
            mask = value.encode("latin-1").translate(from_str)
        except UnicodeEncodeError:
            raise BadRecord(field, f"a string of {letters}") from None
    elif kind is list:
        try:
            mask = bytes(value).translate(from_int)
        except (TypeError, ValueError):
            raise BadRecord(field, f"a list of {codes}") from None
    else:
        raise BadRecord(field, f"missing: a string of {letters} or a list of {codes}, one entry per position")
    if 255 in mask:  # an int needle: a bytes needle first fails as an int, at the cost of an exception
        bad = mask.index(255)
        raise BadRecord(field, f"position {bad} is {value[bad]!r}; allowed: {letters if letters == codes else f'{letters} or {codes}'}")
    return mask


def origin_bytes(value: Any, field: str = "origin") -> bytes:
    """The origin mask as bytes 0 (prompt) / 1 (action) / 2 (tool)."""
    return mask_bytes(value, field, ORIGIN_FROM_STR, ORIGIN_FROM_INT, "p (prompt)/a (action)/t (tool)", "0/1/2")


def loss_bytes(value: Any, field: str = "loss_mask") -> bytes:
    """The loss mask as bytes 0 / 1."""
    return mask_bytes(value, field, LOSS_FROM_STR, LOSS_FROM_INT, "0/1", "0/1")


def turn_spans(turns: Any, positions: int, field: str = "turns") -> list[Any]:
    """Validate turn spans: a list of ``[start, end]`` with ``0 <= start <= end <= positions``, in order."""
    if type(turns) is not list:
        raise BadRecord(field, "missing or not a list of [start, end] spans", check="turn_boundaries")
    previous_end = 0
    for j, span in enumerate(turns):
        if type(span) is not list or len(span) != 2 or type(span[0]) is not int or type(span[1]) is not int:
            raise BadRecord(f"{field}[{j}]", f"{span!r} is not a [start, end] pair of integers", check="turn_boundaries")
        start, end = span
        if not 0 <= start <= end <= positions:
            raise BadRecord(
                f"{field}[{j}]", f"span [{start}, {end}) is not inside the record (0..{positions})", check="turn_boundaries"
            )
        if start < previous_end:
            raise BadRecord(
                f"{field}[{j}]",
                f"span [{start}, {end}) starts before turn {j}'s span ends ({previous_end})",
                check="turn_boundaries",
            )
        previous_end = end
    return turns


def _token_ids(value: Any, field: str) -> list[int]:
    if type(value) is not list:
        raise BadRecord(field, "missing or not a list of token IDs")
    return value


def read_verl(obj: dict[str, Any]) -> dict[str, Any]:
    """verl ``AgentLoopOutput`` (``verl/experimental/agent_loop/agent_loop.py``), one dumped per line.

    ``prompt_ids`` are the prompt; ``response_ids`` hold generated and tool-response tokens, told
    apart by ``response_mask`` (1 generated, 0 tool), which is also what verl trains on;
    ``response_logprobs`` are aligned with ``response_ids`` (0.0 on tool tokens). The fully
    asynchronous trainer adds ``extra_fields.param_version_start`` (policy version: the oldest
    weights that sampled part of the response) and ``extra_fields.is_cancel`` (stop reason
    ``abort``). verl logs no other stop reason; ``extra_fields.stop_reason`` is read when a pipeline
    adds one. ``metrics.tool_calls`` (time spent in tool calls [s]) is the tool wait.
    """
    prompt = _token_ids(obj.get("prompt_ids"), "prompt_ids")
    response = _token_ids(obj.get("response_ids"), "response_ids")
    response_mask = loss_bytes(obj.get("response_mask"), "response_mask")
    if len(response_mask) != len(response):
        raise BadRecord(
            "response_mask", f"{len(response_mask)} entries for {len(response)} response_ids", check="mask_lengths"
        )
    prompt_tokens = len(prompt)
    out: dict[str, Any] = {
        "_n_tokens": prompt_tokens + len(response),
        "origin": b"\x00" * prompt_tokens + response_mask.translate(_VERL_MASK_TO_ORIGIN),
        "loss_mask": b"\x00" * prompt_tokens + response_mask,
        "logprobs": obj.get("response_logprobs"),
        "_lp_offset": prompt_tokens,
    }
    extra = obj.get("extra_fields") or {}
    if type(extra) is not dict:
        raise BadRecord("extra_fields", "must be an object")
    out["policy_version"] = extra.get("param_version_start")
    stop = extra.get("stop_reason")
    if stop is None and _flag(extra.get("is_cancel"), "extra_fields.is_cancel"):
        stop = "abort"
    out["stop_reason"] = stop
    out["_stop_logged"] = stop is not None
    metrics = obj.get("metrics")
    if type(metrics) is dict and metrics.get("tool_calls") is not None:
        out["tool_wait_s"] = metrics["tool_calls"]  # the reader checks it as any tool_wait_s (a number of seconds)
    return out


def read_openrlhf(obj: dict[str, Any]) -> dict[str, Any]:
    """OpenRLHF agent executor output (``openrlhf/utils/agent.py``), one dumped per line.

    ``observation_tokens`` is the whole sequence (prompt, actions, environment feedback);
    ``action_ranges`` are the ``(start, end)`` spans the model generated, which OpenRLHF turns into
    its ``action_mask`` (the trained positions); ``rollout_log_probs`` are aligned with
    ``observation_tokens`` (0.0 on non-generated positions). ``truncated`` (``finish_reason ==
    "length"``, read in ``openrlhf/trainer/ppo_utils/samples_generator.py``) gives stop reason
    ``length``, else ``stop``. OpenRLHF logs no policy version; ``policy_version`` is read when a
    pipeline adds one.
    """
    positions = len(_token_ids(obj.get("observation_tokens"), "observation_tokens"))
    ranges = obj.get("action_ranges")
    spans = turn_spans(ranges, positions, "action_ranges")
    origin = bytearray(b"\x02" * positions)
    first = spans[0][0] if spans else positions
    origin[:first] = b"\x00" * first
    for start, end in spans:
        origin[start:end] = b"\x01" * (end - start)
    origin_mask = bytes(origin)
    truncated = _flag(obj.get("truncated"), "truncated")
    return {
        "_n_tokens": positions,
        "origin": origin_mask,
        "loss_mask": origin_mask.translate(IS_ACTION),
        "turns": ranges,
        "logprobs": obj.get("rollout_log_probs"),
        "policy_version": obj.get("policy_version"),
        "stop_reason": None if truncated is None else ("length" if truncated else "stop"),
        "_stop_logged": truncated is not None,
    }


def _unbatch(value: Any) -> Any:
    """AReaL tensors carry a batch dimension of 1; accept ``[[...]]`` as well as ``[...]``."""
    if type(value) is list and len(value) == 1 and type(value[0]) is list:
        return value[0]
    return value


def read_areal(obj: dict[str, Any]) -> dict[str, Any]:
    """AReaL trajectory from ``RLVRWorkflow`` / ``MultiTurnWorkflow`` (``areal/workflow/*.py``).

    ``input_ids`` is the whole sequence; ``versions`` is the policy version of each generated
    token and -1 on every input position (the prompt and, in multi-turn, the inserted feedback), so
    it gives the origin; ``loss_mask`` gives the trained positions; ``logprobs`` are per position
    (0.0 on inputs); ``attention_mask`` trims padding. ``stop_reason`` (of ``ModelResponse``,
    ``areal/api/io_struct.py``) is read when a pipeline logs it; ``interrupt`` means ``abort``.
    The record's policy version is the oldest among its generated tokens.
    """
    positions = len(_token_ids(_unbatch(obj.get("input_ids")), "input_ids"))
    versions = _unbatch(obj.get("versions"))
    if type(versions) is not list:
        raise BadRecord("versions", "missing: the per-token policy version (-1 on input positions)")
    attention = _unbatch(obj.get("attention_mask"))
    start, end = 0, positions
    if attention is not None:
        if type(attention) is not list or len(attention) != positions:
            raise BadRecord(
                "attention_mask", f"must have one entry per input_ids position ({positions})", check="mask_lengths"
            )
        # padding on either side (AReaL pads left for generation, right in batches): the tokens are
        # the one run of 1s; a hole inside it would misalign every mask
        kept = [i for i, a in enumerate(attention) if a]
        if kept:
            start, end = kept[0], kept[-1] + 1
            if len(kept) != end - start:
                hole = next(i for i in range(start, end) if not attention[i])
                raise BadRecord("attention_mask", f"position {hole} is padding inside the sequence", check="mask_lengths")
        else:
            start = end = 0
        positions = end - start
    if len(versions) < end:
        raise BadRecord("versions", f"{len(versions)} entries for {end} positions", check="mask_lengths")
    try:
        generated_versions = [v for v in versions[start:end] if v >= 0]
        generated = bytes(1 if v >= 0 else 0 for v in versions[start:end])
    except TypeError:
        raise BadRecord("versions", "must be a list of integers") from None
    first = generated.find(1)
    first = positions if first < 0 else first
    loss = _unbatch(obj.get("loss_mask"))
    logprobs = _unbatch(obj.get("logprobs"))
    stop = obj.get("stop_reason")
    return {
        "_n_tokens": positions,
        "origin": b"\x00" * first + generated[first:].translate(_VERL_MASK_TO_ORIGIN),
        "loss_mask": loss[start:end] if type(loss) is list else loss,
        "logprobs": logprobs[start:end] if type(logprobs) is list else logprobs,
        "policy_version": min(generated_versions) if generated_versions else None,
        "stop_reason": "abort" if stop == "interrupt" else stop,
        "_stop_logged": stop is not None,
    }


CAPPLAN_COLUMNS: tuple[str, ...] = (
    "id", "origin", "loss_mask", "counts", "token_ids", "turns", "cached_tokens", "prefill_tokens", "logprobs",
    "policy_version", "trainer_version", "stop_reason", "tool_wait_s", "_n_tokens", "_lp_offset", "_stop_logged",
)
"""The fields of capplan's own record format: the only Parquet columns its records are read from
(a corrupt page in any other column costs nothing)."""

MAPPINGS: dict[str, Callable[[dict[str, Any]], dict[str, Any]] | None] = {
    "capplan": None,
    "verl": read_verl,
    "openrlhf": read_openrlhf,
    "areal": read_areal,
}
"""Record formats by name: capplan's own (read as is), and the dumps of three RL frameworks."""
