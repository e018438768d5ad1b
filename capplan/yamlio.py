"""Safe YAML loading with line numbers, resource limits, and one-line validation errors.

Every user file goes through :func:`load_model`: YAML is read with a ``yaml.SafeLoader``
subclass only, validated by a pydantic model, and any problem becomes a single
:class:`InputError` line::

    workloads/x.yaml: conversation.turns[1].action_tokens (line 14): must be >= 0, got -3

Unknown keys name the closest valid key (``did you mean 'prompt_tokens'?``).

Before any work starts, a file is refused when it is larger than :func:`max_input_bytes`, nests
deeper than :data:`MAX_DEPTH`, expands (through YAML aliases) to more than :data:`MAX_NODES`
values, repeats a key, or holds a number that is not finite; ``1e15`` (YAML 1.2 spelling) is read
as a number, not as the string YAML 1.1 makes of it.
"""

from __future__ import annotations

import difflib
import math
import os
import re
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from capplan import resources
from capplan.errors import InputError

M = TypeVar("M", bound=BaseModel)

MAX_INPUT_MB_DEFAULT = 4.0
"""Largest input file read by default [MiB]; ``CAPPLAN_MAX_INPUT_MB`` raises or lowers it."""
MAX_DEPTH = 64
"""Deepest nesting of mappings and lists accepted in a YAML file [levels]."""
MAX_NODES = 1_000_000
"""Most values a YAML file may hold once its aliases are expanded [values] (a "billion
laughs" document of a few hundred bytes expands to 10^9)."""
MAX_MAGNITUDE = 1e15
"""Largest absolute value of a number in an input file; every field has its own, smaller range."""


def max_input_bytes() -> int:
    """The input-size limit [bytes]: ``CAPPLAN_MAX_INPUT_MB`` (MiB) or :data:`MAX_INPUT_MB_DEFAULT`.

    Raises
    ------
    InputError
        The variable is set but is not a positive number.
    """
    raw = os.environ.get("CAPPLAN_MAX_INPUT_MB")
    if raw is None or not raw.strip():
        return int(MAX_INPUT_MB_DEFAULT * 2**20)
    try:
        mb = float(raw)
    except ValueError:
        mb = math.nan
    if not (mb > 0 and math.isfinite(mb)):
        raise InputError(f"CAPPLAN_MAX_INPUT_MB={raw!r}: must be a positive number of MiB")
    return int(mb * 2**20)


def read_text_limited(path: Path, what: str = "input file") -> str:
    """The UTF-8 text of ``path``, refused above :func:`max_input_bytes` before it is read whole.

    Reads at most one byte more than the limit, so a device or a FIFO that never ends is refused
    as well as a large regular file.

    Raises
    ------
    InputError
        The file cannot be read, is not UTF-8, or is larger than the limit.
    """
    limit = max_input_bytes()
    try:
        with open(path, "rb") as fh:
            raw = fh.read(limit + 1)
    except OSError as exc:
        raise InputError(f"{path}: cannot read file ({exc.strerror or exc})") from None
    if len(raw) > limit:
        raise InputError(
            f"{path}: {what} is larger than {_size(limit)}; capplan refuses it before reading "
            "(set CAPPLAN_MAX_INPUT_MB to raise the limit)"
        )
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a UTF-8 text file") from None


def _size(n_bytes: int) -> str:
    """``4194304`` -> ``4 MiB``; ``104`` -> ``104 bytes``."""
    return f"{n_bytes / 2**20:.3g} MiB" if n_bytes >= 2**20 else f"{n_bytes:,} bytes"


class YAMLRefused(yaml.YAMLError):
    """A document capplan will not read: too deep, too many expanded values, a repeated key."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.message, self.line = message, line


# YAML 1.2 reads 1e15 as a number; PyYAML (YAML 1.1) needs a dot (1.0e+15) and makes a string.
_FLOAT_NO_DOT = re.compile(r"^[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+$")


class _RepeatedKeyCheck:
    """``construct_mapping`` that refuses a key written twice (shared by both loaders)."""

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:  # noqa: D102
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = (key_node.tag, key_node.value)
            line = key_node.start_mark.line + 1
            if key in seen:
                raise YAMLRefused(
                    f"key '{_short(key_node.value)}' appears twice (lines {seen[key]} and {line}); "
                    "YAML would silently keep the last one: remove one of them",
                    line,
                )
            seen[key] = line
        return super().construct_mapping(node, deep=deep)  # type: ignore[misc]


class SafeLoader(_RepeatedKeyCheck, yaml.SafeLoader):
    """``yaml.SafeLoader`` with limits: nesting depth, a repeated key is an error, 1e15 is a float."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:  # noqa: D102
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise YAMLRefused(f"nested deeper than {MAX_DEPTH} levels at line {mark.line + 1}", mark.line + 1)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


SafeLoader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT_NO_DOT, list("-+0123456789"))

if getattr(yaml, "__with_libyaml__", False):

    class BundledLoader(_RepeatedKeyCheck, yaml.CSafeLoader):  # type: ignore[name-defined,misc]
        """The same reading as :class:`SafeLoader` with libyaml's parser, for capplan's own files.

        libyaml composes the node graph in C without a depth check, so it reads only files in
        capplan's bundled folders (engine, hardware and model profiles, example workloads), not
        files given by path from elsewhere; on those it is about ten times faster, which was most
        of a ``capplan kv`` run's start-up.
        """

    BundledLoader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT_NO_DOT, list("-+0123456789"))
else:  # pragma: no cover - PyYAML wheels ship libyaml
    BundledLoader = SafeLoader  # type: ignore[misc,assignment]


def _short(text: Any, limit: int = 60) -> str:
    """``text`` cut to ``limit`` characters, control characters escaped (for messages)."""
    from capplan.output import printable

    s = printable(str(text))
    return s if len(s) <= limit else s[: limit - 3] + "..."


def _expanded_size(root: yaml.Node) -> int:
    """Values ``root`` holds once every alias is expanded, stopping past :data:`MAX_NODES`.

    An alias is the same node object in the composed graph, so the size of each node is
    computed once (memoised by identity): linear in the document, however much it expands.

    Raises
    ------
    YAMLRefused
        An alias inside the node it names (``a: &a [*a]``): a structure that contains itself
        expands without end.
    """
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()  # nodes whose children are still being sized (the current path)
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        if id(node) in sizes:
            continue
        if isinstance(node, yaml.ScalarNode):
            sizes[id(node)] = 1
            continue
        children = [c for pair in node.value for c in pair] if isinstance(node, yaml.MappingNode) else list(node.value)
        if done:
            sizes[id(node)] = min(1 + sum(sizes[id(c)] for c in children), MAX_NODES + 1)
            open_nodes.discard(id(node))
            continue
        if id(node) in open_nodes:  # reached again below itself
            raise YAMLRefused(f"an alias (*name) at line {node.start_mark.line + 1} refers to a value that contains "
                              "it, which expands without end; write the values out")
        open_nodes.add(id(node))
        stack.append((node, True))
        stack.extend((c, False) for c in children if id(c) not in sizes)
    return sizes[id(root)]


def _compose(text: str) -> yaml.Node | None:
    """The node graph of a single-document ``text`` (with :class:`SafeLoader`'s limits)."""
    loader = SafeLoader(text)
    try:
        return loader.get_single_node()
    finally:
        loader.dispose()


def safe_load(text: str, bundled: bool = False) -> Any:
    """Parse ``text`` like ``yaml.safe_load`` within capplan's limits.

    ``bundled`` reads one of capplan's own files with :class:`BundledLoader` (same result).

    Raises
    ------
    yaml.YAMLError
        Invalid YAML; :class:`YAMLRefused` (a subclass) for a document over a limit or a
        repeated key.
    """
    loader = BundledLoader(text) if bundled else SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if _expanded_size(node) > MAX_NODES:
            raise YAMLRefused(
                f"expands to more than {MAX_NODES:,} values through YAML aliases (*name); "
                "write the values out or use fewer aliases"
            )
        return loader.construct_document(node)
    finally:
        loader.dispose()


def check_numbers(source: str, data: Any, text: str | None = None) -> None:
    """Refuse a number that is not finite or larger than :data:`MAX_MAGNITUDE` anywhere in ``data``.

    Raises
    ------
    InputError
        ``source: field.path (line N): .nan is not a finite number``.
    """
    stack: list[tuple[tuple[Any, ...], Any]] = [((), data)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, dict):
            stack.extend((path + (k,), v) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((path + (i,), v) for i, v in enumerate(value))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            problem = None
            if isinstance(value, float) and not math.isfinite(value):
                problem = f"{value} is not a finite number (write a number, e.g. 4096)"
            elif abs(value) > MAX_MAGNITUDE:
                shown = f"{value:.3g}" if isinstance(value, float) else _short(str(value), 24)
                problem = f"{shown} is out of range (no capplan figure is larger than {MAX_MAGNITUDE:.0e})"
            if problem:
                raise InputError(f"{source}: {_where(path, text)}: {problem}")


def _where(path: tuple[Any, ...], text: str | None) -> str:
    """``field.path (line N)`` for a key path of a document with source ``text``."""
    lines = _line_map(text) if text else {}
    line = next((lines[path[:cut]] for cut in range(len(path), 0, -1) if path[:cut] in lines), None)
    return format_path(path) + (f" (line {line})" if line else "")

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
        root = _compose(text)
    except (yaml.YAMLError, ValueError, RecursionError):
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
    bound = _RANGE_WORDS.get(kind)
    if bound is not None:
        limit = (err.get("ctx") or {}).get(bound[0])
        if isinstance(limit, (int, float)):
            return f"must be {bound[1]} {_num(limit)}, got {_short(repr(err.get('input')), 40)}"
    if kind not in ("value_error", "assertion_error") and "input" in err:
        got = err["input"]
        if not isinstance(got, (dict, list)):
            msg = f"{msg}, got {_short(repr(got), 80)}"
        if isinstance(got, bool) and kind == "string_type":
            msg += " (YAML reads yes/no/on/off/true/false as booleans: quote the value)"
        elif isinstance(got, str) and _looks_numeric(got):
            msg += " (a quoted number is text: remove the quotes)"
    return msg


_RANGE_WORDS = {
    "greater_than_equal": ("ge", ">="), "greater_than": ("gt", ">"),
    "less_than_equal": ("le", "<="), "less_than": ("lt", "<"),
}


def _num(v: float) -> str:
    """``10000000`` -> ``10,000,000``; ``0.5`` -> ``0.5``."""
    return f"{int(v):,}" if float(v).is_integer() else f"{v:g}"


def _looks_numeric(text: str) -> bool:
    try:
        float(text.replace("_", ""))
    except ValueError:
        return False
    return True


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
    """Read ``path`` with the safe loader; return (data, text). Errors become :class:`InputError`.

    The file is refused before parsing when it is larger than :func:`max_input_bytes`, and while
    parsing when it breaks a limit of :class:`SafeLoader` or :func:`safe_load`.
    """
    text = read_text_limited(path)
    try:
        data = safe_load(text, bundled=resources.is_bundled(path))
    except YAMLRefused as exc:
        raise InputError(f"{path}: {exc.message}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError(f"{path}: not valid YAML{at}: {_short(problem, 120)}") from None
    except (ValueError, OverflowError) as exc:  # a scalar the constructor cannot build (a 5,000-digit int, 2020-13-45)
        raise InputError(f"{path}: not valid YAML: {_short(exc, 120)}") from None
    except RecursionError:
        raise InputError(f"{path}: nested too deeply") from None
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
    """Validate already-parsed ``data`` as ``model``; errors name ``source`` and the field path.

    Every number is checked first (:func:`check_numbers`): finite and within
    :data:`MAX_MAGNITUDE`, so no NaN or infinity reaches arithmetic.
    """
    check_numbers(source, data, text)
    try:
        return model.model_validate(data, context=context)
    except ValidationError as exc:
        raise InputError(validation_message(source, exc, model, text, data)) from None
    except RecursionError:
        raise InputError(f"{source}: nested too deeply") from None
