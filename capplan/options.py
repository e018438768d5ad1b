"""Validated option models and their field documentation: one source for help, schema and docs.

Every option object a calculation takes (KV, roofline, plan, simulation settings) derives from
:class:`Options`: a frozen pydantic model whose constraints are declared on the fields and whose
every field carries an attribute docstring. That docstring is the only place a field is
described: the command line's ``--help`` text (:func:`field_help`), ``capplan schema``'s
descriptions (:func:`add_descriptions`) and the reference tables in ``docs/`` are read from it.

Reading docstrings goes through the source file with :mod:`ast` rather than importing the
module, so the command line can build its help without importing numpy or pydantic.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
from typing import Any, ClassVar

from capplan.errors import InputError


@functools.lru_cache(maxsize=None)
def _classes(module: str) -> dict[str, ast.ClassDef]:
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise ImportError(module)
    with open(spec.origin, encoding="utf-8") as fh:
        tree = ast.parse(fh.read(), spec.origin)
    return {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}


@functools.lru_cache(maxsize=None)
def field_docs(module: str, cls: str) -> dict[str, str]:
    """Attribute docstrings of class ``cls`` in ``module``, base classes of the module first.

    A field's docstring is the string literal right after its annotated assignment. Whitespace
    is collapsed to single spaces.

    >>> field_docs("capplan.workload", "Volume")["prompts_per_step"]
    'Unique prompts per step [prompts].'
    """
    classes = _classes(module)
    node = classes[cls]
    docs: dict[str, str] = {}
    for base in node.bases:
        if isinstance(base, ast.Name) and base.id in classes:
            docs.update(field_docs(module, base.id))
    body = node.body
    for stmt, nxt in zip(body, body[1:]):
        if (
            isinstance(stmt, ast.AnnAssign)
            and isinstance(stmt.target, ast.Name)
            and isinstance(nxt, ast.Expr)
            and isinstance(nxt.value, ast.Constant)
            and isinstance(nxt.value.value, str)
        ):
            docs[stmt.target.id] = " ".join(nxt.value.value.split())
    return docs


def plain(text: str) -> str:
    """Docstring markup as plain text: ``x`` and :func:`x` become x (for ``--help``)."""
    import re

    text = re.sub(r":(?:func|class|data|meth|attr|mod):`~?([^`]+)`", r"\1", text)
    return text.replace("``", "")


def field_help(module: str, cls: str, field: str, default: Any = None) -> str:
    """The ``--help`` text of one option: the field's docstring (and its default, if given)."""
    text = plain(field_docs(module, cls)[field])
    return text if default is None else f"{text} [default: {default}]"


def add_descriptions(schema: dict[str, Any], models: list[type]) -> dict[str, Any]:
    """Fill ``description`` of every property in a JSON schema from the models' docstrings.

    ``schema`` is the output of ``model_json_schema()``; each definition (and the root) is
    matched to the model of the same ``title`` among ``models`` and their field types.
    """
    by_title: dict[str, type] = {}

    def collect(model: Any) -> None:
        if not isinstance(model, type) or model.__name__ in by_title or not hasattr(model, "model_fields"):
            return
        by_title[model.__name__] = model
        for f in model.model_fields.values():
            for arg in _types_in(f.annotation):
                collect(arg)

    for m in models:
        collect(m)

    def fill(node: dict[str, Any]) -> None:
        model = by_title.get(node.get("title", ""))
        if model is None:
            return
        docs = dict(field_docs(model.__module__, model.__name__))
        for fname, f in model.model_fields.items():
            if f.alias and fname in docs:
                docs.setdefault(f.alias, docs[fname])
        if model.__doc__ and "description" not in node:
            node["description"] = " ".join(model.__doc__.split())
        for name, prop in node.get("properties", {}).items():
            if name in docs:
                prop.setdefault("description", docs[name])

    fill(schema)
    for node in schema.get("$defs", {}).values():
        fill(node)
    return schema


def _types_in(annotation: Any) -> list[Any]:
    """Classes mentioned in a type annotation (through unions, lists, Annotated)."""
    import typing

    out = [annotation]
    for arg in typing.get_args(annotation):
        out.extend(_types_in(arg))
    return out


def _constraint_text(field: Any) -> str:
    """``must be >= 1`` / ``must be in (0, 1]`` from a pydantic field's constraints."""
    lo = hi = None
    lo_open = hi_open = False
    for m in field.metadata:
        for name in ("gt", "ge", "lt", "le"):
            v = getattr(m, name, None)
            if v is None:
                continue
            if name in ("gt", "ge"):
                lo, lo_open = v, name == "gt"
            else:
                hi, hi_open = v, name == "lt"
    if lo is not None and hi is not None:
        return f"must be in {'(' if lo_open else '['}{_num(lo)}, {_num(hi)}{')' if hi_open else ']'}"
    if lo is not None:
        return f"must be {'>' if lo_open else '>='} {_num(lo)}"
    if hi is not None:
        return f"must be {'<' if hi_open else '<='} {_num(hi)}"
    return ""


def _num(v: float) -> str:
    """``1000000`` -> ``1,000,000``; ``0.5`` -> ``0.5``."""
    return f"{int(v):,}" if float(v).is_integer() else f"{v:g}"


class Options:
    """Mixin for option models: validation errors become one-line :class:`InputError`\\ s.

    Subclasses are pydantic models (``class X(Options, BaseModel)``) that set :attr:`FLAGS`,
    the command-line flag each field is given by, so a message names what the user typed::

        --tp 0: must be >= 1
    """

    FLAGS: ClassVar[dict[str, str]] = {}
    """Command-line flag of each field (default ``--field-name``)."""

    def __init__(self, **data: Any) -> None:
        from pydantic import ValidationError

        try:
            super().__init__(**data)  # type: ignore[call-arg]
        except ValidationError as exc:
            raise InputError(self._message(exc)) from None

    @classmethod
    def flag(cls, field: str) -> str:
        return cls.FLAGS.get(field, "--" + field.replace("_", "-"))

    @classmethod
    def check(cls, **values: Any) -> None:
        """Validate ``values`` against the constraints of the fields of the same names alone, without
        building an object (no other field is needed and no model validator runs): a command that
        takes one of these settings without the whole option object refuses a bad value with the
        message construction gives (``--kv-offload-gib -5.0: must be in (0, 1,000,000]``).

        Raises
        ------
        InputError
            A value the field does not allow; the one-line message names the flag.
        """
        from typing import Annotated

        from pydantic import ConfigDict, TypeAdapter, ValidationError

        fields = cls.model_fields  # type: ignore[attr-defined]
        config = ConfigDict(allow_inf_nan=cls.model_config.get("allow_inf_nan", True))  # type: ignore[attr-defined]
        for name, value in values.items():
            field = fields[name]
            try:
                kind = Annotated[(field.annotation, *field.metadata)] if field.metadata else field.annotation
                TypeAdapter(kind, config=config).validate_python(value)
            except ValidationError as exc:
                raise InputError(cls._message(exc, name)) from None

    @classmethod
    def _message(cls, exc: Any, field: str | None = None) -> str:
        err = exc.errors(include_url=False)[0]
        name = field if field is not None else str(err["loc"][0]) if err["loc"] else ""
        fields = cls.model_fields  # type: ignore[attr-defined]
        flag = cls.flag(name) if name in fields else name
        got = err.get("input")
        if not name:
            msg = err["msg"]
            return msg[len("Value error, "):] if msg.startswith("Value error, ") else msg
        if err["type"] == "extra_forbidden":
            return f"{name}: unknown option (allowed: {', '.join(fields)})"
        if err["type"] == "literal_error":
            expected = (err.get("ctx") or {}).get("expected", "")
            what = "dtype" if name.endswith("dtype") else "value"
            return f"{flag} {got}: unknown {what} (allowed: {expected.replace(' or ', ', ')})".replace("'", "")
        rule = _constraint_text(fields[name]) if name in fields else ""
        kind = err["type"]
        if kind.startswith("int_") or kind == "float_parsing" or kind == "float_type":
            noun = "an integer" if kind.startswith("int_") else "a number"
            return f"{flag} {got!r}: must be {noun}" + (f" {rule[8:]}" if rule else "")
        if kind == "finite_number":
            return f"{flag} {got}: must be a finite number" + (f" {rule[8:]}" if rule else "")
        msg = err["msg"]
        if msg.startswith("Value error, "):
            msg = msg[len("Value error, "):]
        return f"{flag} {got}: {rule or msg}"

    def replace(self, **changes: Any) -> Any:
        """A validated copy with ``changes`` applied."""
        return type(self)(**{**dict(self), **changes})  # type: ignore[call-overload]
