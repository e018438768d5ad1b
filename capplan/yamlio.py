"""Safe YAML loading with line numbers, and one-line validation errors.

Every user file goes through :func:`load_model`: YAML is read with ``yaml.SafeLoader`` only,
validated by a pydantic model, and any problem becomes a single :class:`InputError` line::

    workloads/x.yaml: conversation.turns[1].action_tokens (line 14): must be >= 0, got -3

Unknown keys name the closest valid key (``did you mean 'prompt_tokens'?``).
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from capplan.errors import InputError

M = TypeVar("M", bound=BaseModel)

class FieldError(ValueError):
    """A cross-field validation error that knows which field it concerns.

    Raise it from a pydantic ``model_validator`` with the path *relative to that model*; the
    one-line message then names the field rather than the model.
    """

    def __init__(self, path: tuple[Any, ...], message: str) -> None:
        super().__init__(message)
        self.path = path


def _line_map(text: str) -> dict[tuple[Any, ...], int]:
    """Map each key path (tuple of keys and list indices) to its 1-based YAML line."""
    lines: dict[tuple[Any, ...], int] = {}

    def walk(node: yaml.Node, path: tuple[Any, ...]) -> None:
        lines.setdefault(path, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                key = key_node.value
                lines[path + (key,)] = key_node.start_mark.line + 1
                walk(value_node, path + (key,))
                lines[path + (key,)] = key_node.start_mark.line + 1
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                walk(item, path + (i,))

    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return lines
    if root is not None:
        walk(root, ())
    return lines


def format_path(loc: tuple[Any, ...]) -> str:
    """``('conversation', 'turns', 1, 'action_tokens')`` -> ``conversation.turns[1].action_tokens``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


def _user_loc(loc: tuple[Any, ...], data: Any, kind: str = "") -> tuple[Any, ...]:
    """The part of a pydantic error location the user wrote.

    pydantic inserts the tag of a tagged union (``lognormal``) and validator names
    (``function-after[...]``) into locations; they are not keys of the input, so walking the
    input along ``loc`` tells them apart: a step the input does not have is dropped, except the
    last one of a ``missing`` error (the key the user left out).
    """
    out: list[Any] = []
    node = data
    for i, part in enumerate(loc):
        last = i == len(loc) - 1 and kind == "missing"
        if isinstance(part, str) and part.startswith("function-"):
            continue
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        elif not last:
            continue
        out.append(part)
    return tuple(out)


def _allowed_keys(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """Field names valid at the mapping that holds ``loc``'s last key (best effort)."""
    schema = model.model_json_schema()
    defs = schema.get("$defs", {})

    def deref(s: dict[str, Any]) -> dict[str, Any]:
        while "$ref" in s:
            s = defs[s["$ref"].split("/")[-1]]
        return s

    def candidates(s: dict[str, Any]) -> list[dict[str, Any]]:
        s = deref(s)
        subs = s.get("anyOf") or s.get("oneOf")
        if subs:
            return [c for sub in subs for c in candidates(sub)]
        return [s]

    level = [schema]
    for part in loc[:-1]:
        nxt: list[dict[str, Any]] = []
        for s in level:
            for c in candidates(s):
                if isinstance(part, int) and "items" in c:
                    nxt.append(c["items"])
                elif isinstance(part, str) and part in c.get("properties", {}):
                    nxt.append(c["properties"][part])
        level = nxt
    keys: list[str] = []
    for s in level:
        for c in candidates(s):
            keys.extend(k for k in c.get("properties", {}) if k not in keys)
    return keys


def _describe(err: dict[str, Any], model: type[BaseModel], data: Any) -> str:
    kind = err["type"]
    loc = _user_loc(tuple(err["loc"]), data, kind)
    if kind == "extra_forbidden":
        allowed = _allowed_keys(model, loc)
        close = difflib.get_close_matches(str(loc[-1]), allowed, n=1, cutoff=0.5)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        return f"unknown key{hint} (allowed: {', '.join(allowed)})"
    if kind == "missing":
        return "required field is missing"
    msg = err["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    if kind not in ("value_error", "assertion_error") and "input" in err:
        got = err["input"]
        if not isinstance(got, (dict, list)):
            msg = f"{msg}, got {got!r}"
    return msg


def validation_message(source: str, exc: ValidationError, model: type[BaseModel], text: str | None, data: Any = None) -> str:
    """The first validation error of ``exc`` as one line: ``source: field.path (line N): problem``."""
    lines = _line_map(text) if text else {}
    # A misspelled key shows up as both "unknown key" and "required field missing": report the
    # unknown key first, since it carries the fix.
    rank = {"extra_forbidden": 0, "missing": 2}
    err = sorted(exc.errors(include_url=False), key=lambda e: rank.get(e["type"], 1))[0]
    loc = _user_loc(tuple(err["loc"]), data, err["type"])
    cause = (err.get("ctx") or {}).get("error")
    if isinstance(cause, FieldError):
        loc = loc + cause.path
    where = format_path(loc)
    line = None
    lowest = 1 if err["type"] == "missing" else 0  # a missing top-level key has no line of its own
    for cut in range(len(loc), lowest - 1, -1):
        if loc[:cut] in lines:
            line = lines[loc[:cut]]
            break
    at = f" (line {line})" if line else ""
    more = len(exc.errors()) - 1
    extra = f" [+{more} more error{'s' if more > 1 else ''}]" if more > 0 else ""
    return f"{source}: {where}{at}: {_describe(err, model, data)}{extra}"


def read_yaml(path: Path) -> tuple[Any, str]:
    """Read ``path`` with the safe loader; return (data, text). Errors become :class:`InputError`."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"{path}: cannot read file ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a UTF-8 text file") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError(f"{path}: not valid YAML{at}: {problem}") from None
    return data, text


def load_model(path: Path, model: type[M], context: dict[str, Any] | None = None) -> M:
    """Read ``path`` (safe YAML) and validate it as ``model``; raise a one-line :class:`InputError`."""
    data, text = read_yaml(path)
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a mapping of fields at the top level, got {type(data).__name__}")
    return validate_data(str(path), data, model, text, context)


def validate_data(
    source: str, data: Any, model: type[M], text: str | None = None, context: dict[str, Any] | None = None
) -> M:
    """Validate already-parsed ``data`` as ``model``; errors name ``source`` and the field path."""
    try:
        return model.model_validate(data, context=context)
    except ValidationError as exc:
        raise InputError(validation_message(source, exc, model, text, data)) from None
