"""``capplan validate`` and ``capplan schema``."""

from __future__ import annotations

from enum import Enum
from typing import Annotated

import typer

from capplan.cli.app import app


@app.command(
    help=(
        "Check workload files; print one line per file (ok, or what is wrong and where). Exit 1 when "
        "any file is invalid.\n\n"
        "Examples:\n\n\b\n"
        "  capplan validate workloads/*.yaml\n"
        "  capplan validate my-workload.yaml"
    )
)
def validate(files: Annotated[list[str], typer.Argument(help="Workload files or bundled names.")]) -> None:
    from capplan.errors import CapplanError
    from capplan.workload import load_workload

    bad = 0
    for f in files:
        try:
            w = load_workload(f)
        except CapplanError as exc:
            bad += 1
            typer.echo(f"invalid: {exc}")
        else:
            typer.echo(f"ok: {f} ({w.name}, {w.method})")
    if bad:
        raise typer.Exit(1)


class SchemaKind(str, Enum):
    workload = "workload"


@app.command(
    help=(
        "Print the JSON Schema of a file kind, for editors (e.g. the YAML language server).\n\n"
        "Example:\n\n\b\n"
        "  capplan schema workload > workload.schema.json"
    )
)
def schema(kind: Annotated[SchemaKind, typer.Argument(help="Which file kind.")] = SchemaKind.workload) -> None:
    import json

    from capplan.workload import Workload

    models = {SchemaKind.workload: Workload}
    typer.echo(json.dumps(models[kind].model_json_schema(by_alias=True), indent=2))
