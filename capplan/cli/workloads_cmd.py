"""``capplan workloads`` (list, show) and ``capplan init KIND``: the bundled workloads and starting files."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from capplan.cli.common import ForceOpt, call, console, emit, fail, require_yaml_output, safe

if TYPE_CHECKING:
    from pydantic import BaseModel

workloads_app = typer.Typer(
    help=(
        "List the bundled example workloads with a one-line description, or print one.\n\n"
        "Examples:\n\n"
        "\b\n"
        "  capplan workloads\n"
        "  capplan workloads show agentic-tool-rl\n"
        "  capplan workloads show chat-serving > my-serving.yaml"
    ),
    invoke_without_command=True,
    no_args_is_help=False,
    rich_markup_mode=None,
)


@workloads_app.callback()
def _workloads(ctx: typer.Context) -> None:
    """List the bundled workloads when no subcommand is given."""
    if ctx.invoked_subcommand is None:
        list_()


@workloads_app.command(
    "list",
    help="List the bundled workloads: name, method, model and description.\n\nExample:\n\n\b\n  capplan workloads list",
)
def list_() -> None:
    from rich.table import Table

    from capplan.resources import bundled_names
    from capplan.workload import load_workload

    t = Table(title="Bundled workloads (capplan workloads show NAME prints one; capplan init KIND starts a new one)", title_justify="left")
    for col in ("name", "method", "model", "description"):
        t.add_column(col, no_wrap=col == "name", overflow="fold")
    for name in bundled_names("workloads"):
        w = call(lambda: load_workload(name))
        t.add_row(safe(name), safe(w.method), safe(w.model or "-"), safe(w.description))
    console().print(t)


@workloads_app.command(
    "show",
    help=(
        "Print a bundled workload file as it is shipped, comments and sources included.\n\n"
        "Example:\n\n\b\n  capplan workloads show reasoning-rl-olmo3-7b"
    ),
)
def show(name: Annotated[str, typer.Argument(help="Bundled workload name (capplan workloads lists them).")]) -> None:
    import difflib
    import sys

    from capplan.resources import bundled_dir, bundled_names

    names = bundled_names("workloads")
    if name not in names:
        close = difflib.get_close_matches(name, names, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise fail(f"{name[:80]}: not a bundled workload{hint}; bundled: {', '.join(names)}")
    sys.stdout.write((bundled_dir("workloads") / f"{name}.yaml").read_text(encoding="utf-8"))


class Kind(str, Enum):
    """Starting files ``capplan init`` writes, and the bundled workload each is copied from."""

    reasoning_rl = "reasoning-rl"
    agentic_rl = "agentic-rl"
    serving = "serving"
    distillation = "distillation"
    sft = "sft"


TEMPLATE_SOURCE = {
    "reasoning-rl": "reasoning-rl-olmo3-7b",
    "agentic-rl": "agentic-tool-rl",
    "serving": "chat-serving",
    "distillation": "distillation",
    "sft": "sft",
}
"""The bundled workload whose figures each starting file begins from (its comments cite them)."""


def _field_comment(model: type, field: str) -> str:
    """The first sentence of a field's docstring, for a YAML comment."""
    import re

    from capplan.options import field_docs, plain

    doc = plain(field_docs(model.__module__, model.__name__).get(field, ""))
    return re.split(r"(?<!e\.g)(?<!i\.e)\.(?:\s|$)", doc, maxsplit=1)[0]


def _plain_value(value: Any) -> Any:
    """A dumped field value as a user writes it: a fixed distribution as a bare number."""
    if isinstance(value, dict):
        if value.get("dist") == "fixed" and set(value) <= {"dist", "value"}:
            v = value["value"]
            return int(v) if float(v).is_integer() else v
        return {k: _plain_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain_value(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _emit(model: "BaseModel", indent: int, lines: list[str], skip: frozenset[str] = frozenset()) -> None:
    """``model``'s fields as YAML, each preceded by its documentation (but those in ``skip``)."""
    import yaml
    from pydantic import BaseModel

    from capplan.distributions import Empirical, Fixed, Lognormal, Uniform

    pad = " " * indent
    cls = type(model)
    for field, info in cls.model_fields.items():
        value = getattr(model, field)
        if value is None or field in skip:
            continue
        key = info.alias or field
        comment = _field_comment(cls, field)
        if comment:
            import textwrap

            lines.extend(textwrap.wrap(comment, width=100, initial_indent=f"{pad}# ", subsequent_indent=f"{pad}#   "))
        if isinstance(value, BaseModel) and not isinstance(value, (Fixed, Uniform, Lognormal, Empirical)):
            lines.append(f"{pad}{key}:")
            _emit(value, indent + 2, lines)
            continue
        dumped = value.model_dump(by_alias=True, exclude_none=True) if isinstance(value, BaseModel) else value
        if isinstance(dumped, list):
            dumped = [v.model_dump(by_alias=True, exclude_none=True) if isinstance(v, BaseModel) else v for v in dumped]
        dumped = _plain_value(dumped)
        if isinstance(dumped, (dict, list)):
            body = yaml.safe_dump({key: dumped}, sort_keys=False, default_flow_style=None, width=100)
            lines.extend(pad + line for line in body.rstrip("\n").split("\n"))
        else:
            scalar = yaml.safe_dump(dumped, default_flow_style=True, width=10_000).rstrip("\n")
            scalar = scalar[:-4].rstrip("\n") if scalar.endswith("\n...") else scalar
            lines.append(f"{pad}{key}: {scalar}")


def template(kind: str) -> str:
    """The commented starting file of ``kind``: every field of the workload format with its
    documentation, the values of the bundled example it starts from, and that example's notes."""
    from capplan.resources import bundled_dir
    from capplan.workload import load_workload

    source = TEMPLATE_SOURCE[kind]
    text = (bundled_dir("workloads") / f"{source}.yaml").read_text(encoding="utf-8")
    notes = [line for line in text.splitlines() if line.startswith("#")]
    w = load_workload(source)
    w = w.model_copy(update={"name": f"my-{kind}", "description": f"TODO: what this {kind} workload represents and where its numbers come from."})
    lines = [
        f"# capplan workload, a starting file for {kind} written by `capplan init {kind}`.",
        f"# The figures are those of the bundled example '{source}' (`capplan workloads show {source}`), whose notes",
        "# follow; replace every ASSUMED figure with your own measurements and cite them here.",
        "# Check the file with `capplan validate FILE`; `capplan schema workload` gives every field.",
        "#",
        *notes,
        "",
    ]
    _emit(w, 0, lines, frozenset() if w.has_trainer else frozenset({"training"}))  # a training block needs a trainer
    return "\n".join(lines) + "\n"


def init(
    kind: Annotated[Kind, typer.Argument(help="reasoning-rl, agentic-rl, serving, distillation or sft.")],
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="Where to write it (default: KIND.yaml here; '-' prints it).", dir_okay=False),
    ] = None,
    force: ForceOpt = False,
) -> None:
    require_yaml_output(output, "a workload file is YAML; give a .yaml file (capplan plan and simulate read it back)",
                        suffix_optional=True)
    text = template(kind.value)
    emit(text, output or Path(f"{kind.value}.yaml"), force)


INIT_HELP = (
    "Write a commented starting workload file for KIND (never over an existing file without --force).\n\n"
    "Examples:\n\n"
    "\b\n"
    "  capplan init agentic-rl                     # writes agentic-rl.yaml\n"
    "  capplan init serving -o my-serving.yaml\n"
    "  capplan init sft -o - | less"
)
