"""``capplan validate`` and ``capplan schema``."""

from __future__ import annotations

from enum import Enum
from typing import Annotated

import typer

from capplan.cli.registry import CommandSet


commands = CommandSet()
"""This module's commands (registered by :mod:`capplan.cli.app`)."""


@commands.command(
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
    from capplan.output import printable
    from capplan.workload import load_workload

    bad = 0
    for f in files:
        try:
            w = load_workload(f)
        except CapplanError as exc:
            bad += 1
            typer.echo(f"invalid: {printable(str(exc))}")
        else:
            typer.echo(printable(f"ok: {f} ({w.name}, {w.method})"))
    if bad:
        raise typer.Exit(1)


class SchemaKind(str, Enum):
    workload = "workload"
    hardware = "hardware"
    model = "model"
    engine = "engine"
    kv = "kv"
    roofline = "roofline"
    plan = "plan"
    simulate = "simulate"


@commands.command(
    help=(
        "Print the JSON Schema of a file kind or an option set, for editors (e.g. the YAML language "
        "server) and scripts; every property carries its description.\n\n"
        "Example:\n\n\b\n"
        "  capplan schema workload > workload.schema.json\n"
        "  capplan schema hardware"
    )
)
def schema(kind: Annotated[SchemaKind, typer.Argument(help="Which file kind or option set.")] = SchemaKind.workload) -> None:
    import json

    from capplan.options import add_descriptions

    model = _schema_model(kind)
    typer.echo(json.dumps(add_descriptions(model.model_json_schema(by_alias=True), [model]), indent=2))


def _schema_model(kind: SchemaKind) -> type:
    if kind is SchemaKind.workload:
        from capplan.workload import Workload

        return Workload
    if kind is SchemaKind.hardware:
        from capplan.hardware import HardwareProfile

        return HardwareProfile
    if kind is SchemaKind.model:
        from capplan.modelspec import ModelSpec

        return ModelSpec
    if kind is SchemaKind.engine:
        from capplan.engine import EngineProfile

        return EngineProfile
    if kind is SchemaKind.plan:
        from capplan.plan.inputs import PlanInputs

        return PlanInputs
    if kind is SchemaKind.simulate:
        from capplan.sim.config import SimConfig

        return SimConfig
    if kind is SchemaKind.kv:
        from capplan.kv import KVInputs

        return KVInputs
    from capplan.roofline import RooflineInputs

    return RooflineInputs
