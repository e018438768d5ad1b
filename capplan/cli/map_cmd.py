"""``capplan map``: the workload map (components, owners, records and counters of a method)."""

from __future__ import annotations

from enum import Enum
from typing import Annotated

import typer

from capplan.cli.registry import CommandSet
from capplan.cli.common import ForceOpt, OutputOpt, call, console, emit, fail, safe


commands = CommandSet()
"""This module's commands (registered by :mod:`capplan.cli.app`)."""


class MapFormat(str, Enum):
    table = "table"
    mermaid = "mermaid"
    dot = "dot"
    json = "json"


@commands.command(
    "map",
    help=(
        "Draw the workload map: the components a method needs (absent ones with the reason), who owns "
        "generation, tool execution, scoring, the ready queue and the parameter update, and for each "
        "arrow the record it transfers and the ledger counter that measures it.\n\n"
        "Examples:\n\n\b\n"
        "  capplan map seed-replay\n"
        "  capplan map sft --format mermaid > map.mmd\n"
        "  capplan map distillation --format dot | dot -Tsvg > map.svg"
    ),
)
def map_(
    workload: Annotated[str, typer.Argument(help="Workload file, or the name of a bundled workload.")],
    format: Annotated[
        MapFormat | None,
        typer.Option("--format", "-f", help="table, mermaid, dot or json [default: the --output extension (.mmd, .dot, .json), else table].", show_default=False),
    ] = None,
    output: OutputOpt = None,
    force: ForceOpt = False,
) -> None:
    from capplan.workload import load_workload
    from capplan.workload_map import build_map, to_dot, to_mermaid

    format = _pick_map_format(format, output)
    m = build_map(call(lambda: load_workload(workload)))
    if format is MapFormat.mermaid:
        emit(to_mermaid(m), output, force)
        return
    if format is MapFormat.dot:
        emit(to_dot(m), output, force)
        return
    if format is MapFormat.json:
        from capplan.output import to_json

        emit(to_json(m.as_dict()), output, force)
        return
    from rich.table import Table

    from capplan.cli.common import file_console

    con = console() if output is None else file_console()
    comps = Table(title=safe(f"{m.workload} ({m.method}): components"), title_justify="left")
    for col in ("component", "in the loop", "why"):
        comps.add_column(col)
    for c in m.components:
        comps.add_row(safe(c.label), "yes" if c.present else "absent", safe(c.reason), style=None if c.present else "dim")
    con.print(comps)
    owners = Table(title="Who owns what", title_justify="left")
    owners.add_column("responsibility")
    owners.add_column("owner")
    for k, v in m.owners.items():
        owners.add_row(safe(k.replace("_", " ")), safe(v))
    con.print(owners)
    labels = {c.id: c.label for c in m.components}
    arrows = Table(title="Arrows", title_justify="left")
    for col in ("from", "to", "record transferred", "measured by"):
        arrows.add_column(col)
    for a in m.arrows:
        arrows.add_row(safe(labels[a.source]), safe(labels[a.target]), safe(a.record), safe(a.counter))
    con.print(arrows)
    if output is not None:
        emit(con.file.getvalue(), output, force)  # type: ignore[attr-defined]


_MAP_EXTENSIONS = {".json": MapFormat.json, ".mmd": MapFormat.mermaid, ".mermaid": MapFormat.mermaid, ".dot": MapFormat.dot, ".gv": MapFormat.dot}


def _pick_map_format(format: MapFormat | None, output: object) -> MapFormat:
    """``--format``, else the ``--output`` extension, else table; a contradiction is an error."""
    from pathlib import Path

    ext = _MAP_EXTENSIONS.get(Path(str(output)).suffix.lower()) if output is not None else None
    if output is not None and Path(str(output)).suffix.lower() in (".csv", ".parquet", ".png", ".svg"):
        raise fail(f"--output {output}: map writes .json, .mmd, .dot or text; give one of those or no extension")
    if format is None:
        return ext or MapFormat.table
    if ext is not None and ext is not format:
        raise fail(f"--output {output} is a {ext.value} file but --format is {format.value}; drop one or make them agree")
    return format
