"""The generated reference pages: ``docs/cli.md`` from the command tree, ``docs/reference.md``
from the option models' and file formats' field docstrings.

Regenerate both after changing a command, a flag or a field's docstring::

    python -m capplan.cli.reference

``tests/test_docs_and_packaging.py`` fails when a committed page differs from what this module
generates, so the pages cannot go stale.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

WIDTH = 100
"""Help text is wrapped at this width in the generated page."""

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _walk(cmd: Any, path: list[str]) -> list[tuple[list[str], Any]]:
    out = [(path, cmd)]
    if hasattr(cmd, "commands"):
        for name in sorted(cmd.commands):
            out += _walk(cmd.commands[name], [*path, name])
    return out


def cli_markdown() -> str:
    """``docs/cli.md``: every command's ``--help``, as the command line prints it."""
    import typer.main

    from capplan.cli.app import app

    root = typer.main.get_command(app)
    parts = [
        "# Command reference\n",
        "Generated from the command line itself by `python -m capplan.cli.reference`; do not edit by hand.",
        "Every command also prints this with `--help`.\n",
    ]
    for path, cmd in _walk(root, ["capplan"]):
        ctx = cmd.context_class(cmd, info_name=" ".join(path), max_content_width=WIDTH, terminal_width=WIDTH)
        parts.append(f"## `{' '.join(path)}`\n")
        parts.append("```text\n" + cmd.get_help(ctx).rstrip() + "\n```\n")
    return "\n".join(parts)


def _table(module: str, cls: Any, title: str, intro: str) -> str:
    from capplan.options import field_docs

    docs = field_docs(module, cls.__name__)
    rows = ["| field | default | description |", "|---|---|---|"]
    for name, f in cls.model_fields.items():
        default = "required" if f.is_required() else repr(f.get_default(call_default_factory=False)) if f.default_factory is None else "(see below)"
        text = docs.get(name, "").replace("|", "/").replace("``", "`")
        rows.append(f"| `{f.alias or name}` | `{default}` | {text} |")
    return f"## {title}\n\n{intro}\n\n" + "\n".join(rows) + "\n"


def reference_markdown() -> str:
    """``docs/reference.md``: the fields of every file format and option set, from their docstrings."""
    from capplan import distributions, workload
    from capplan.hardware import Assumptions, HardwareProfile
    from capplan.engine import EngineProfile, MemoryTerms, TimeTerms
    from capplan.kv import KVInputs
    from capplan.plan.inputs import PlanInputs
    from capplan.roofline import RooflineInputs
    from capplan.sim.config import SimConfig

    sections = [
        (workload, workload.Workload, "Workload file: top level", "A workload YAML file (`capplan schema workload` gives the JSON Schema)."),
        (workload, workload.Volume, "Workload: `volume`", ""),
        (workload, workload.Conversation, "Workload: `conversation`", ""),
        (workload, workload.Turn, "Workload: `conversation.turns[]`", ""),
        (workload, workload.Cache, "Workload: `cache`", ""),
        (workload, workload.Training, "Workload: `training`", ""),
        (workload, workload.Serving, "Workload: `serving`", ""),
        (workload, workload.Sampling, "Workload: `sampling`", ""),
        (distributions, distributions.Fixed, "Distribution: `fixed` (or a plain number)", ""),
        (distributions, distributions.Uniform, "Distribution: `uniform`", ""),
        (distributions, distributions.Lognormal, "Distribution: `lognormal`", ""),
        (distributions, distributions.Empirical, "Distribution: `empirical`", ""),
        (None, HardwareProfile, "Hardware profile", "A `hardware_profiles/*.yaml` file (`capplan schema hardware`)."),
        (None, Assumptions, "Hardware profile: `assumptions`", ""),
        (None, KVInputs, "Options of `capplan kv`", "The KV calculator's settings (`capplan schema kv`); the flags are in `docs/cli.md`."),
        (None, RooflineInputs, "Options of `capplan roofline`", "Step-pricing settings (`capplan schema roofline`)."),
        (None, PlanInputs, "Options of `capplan plan`", "What a plan needs besides the workload (`capplan schema plan`)."),
        (None, SimConfig, "Options of `capplan simulate`", "How a simulation runs (`capplan schema simulate`)."),
        (None, EngineProfile, "Engine profile", "An `engine_profiles/*.yaml` file (`capplan schema engine`)."),
        (None, MemoryTerms, "Engine profile: `memory`", ""),
        (None, TimeTerms, "Engine profile: `time`", ""),
    ]
    parts = [
        "# Reference: file formats and option sets\n",
        "Generated from the field docstrings by `python -m capplan.cli.reference`; do not edit by hand.",
        "GiB = 2^30 bytes; bandwidth and FLOP/s are decimal.\n",
    ]
    for _, cls, title, intro in sections:
        parts.append(_table(cls.__module__, cls, title, intro or (cls.__doc__ or "").strip().splitlines()[0]))
    return "\n".join(parts)


PAGES = {"cli.md": cli_markdown, "reference.md": reference_markdown}
"""Generated pages under ``docs/`` and their generators."""


def main(argv: list[str] | None = None) -> int:
    """Write (default) or ``--check`` the generated pages; ``--check`` exits 1 on a stale page."""
    args = sys.argv[1:] if argv is None else argv
    stale = []
    for name, make in PAGES.items():
        text = make()
        path = DOCS / name
        if "--check" in args:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(name)
        else:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path}")
    if stale:
        print(f"stale: {', '.join(stale)}; run python -m capplan.cli.reference", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
