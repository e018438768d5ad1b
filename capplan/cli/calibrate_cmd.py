"""``capplan calibrate``: an engine profile fitted to the user's own benchmark files."""

from __future__ import annotations

import re
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from capplan.cli.common import ForceOpt, call, console, dtype_name, emit, fail, require_yaml_output

if TYPE_CHECKING:
    from capplan.calibrate import Calibration


def _help(field: str) -> str:
    from capplan.options import field_help

    return field_help("capplan.calibrate.run", "CalibrateSettings", field)


class ReportFormat(str, Enum):
    table = "table"
    json = "json"


class Arrivals(str, Enum):
    auto = "auto"
    waves = "waves"
    steady = "steady"


HELP = (
    "Fit an engine profile's step-time terms (and, from a vLLM start-up log, its KV-memory terms) "
    "to benchmark files you already have, print every measured point against capplan's prediction "
    "before and after the fit, and write the calibrated profile, which --engine FILE accepts. "
    "Reads vllm bench serve result JSON (with or without --save-detailed), GuideLLM benchmarks "
    "JSON, AIPerf profile_export_aiperf.json, a vLLM start-up log, and a CSV of measured decode "
    "step times (batch,context_tokens,step_ms). Only the terms the data constrain are fitted "
    "(docs/calibrate.md).\n\n"
    "Examples:\n\n\b\n"
    "  capplan calibrate bench.json --hardware h100-sxm -o my-engine.yaml\n"
    "  capplan calibrate c8.json c32.json server.log --hardware h100-sxm -o my-engine.yaml\n"
    "  capplan calibrate steps.csv --model llama-3.1-8b --hardware h100-sxm --terms bandwidth_efficiency,step_overhead_s -o e.yaml\n"
    "  capplan calibrate other.json --hardware h100-sxm --engine my-engine.yaml --terms none   # compare only\n"
    "  capplan accuracy --engine my-engine.yaml"
)


def profile_name(path: Path) -> str:
    """A profile name from the output file's stem (lower case, other characters as ``-``)."""
    stem = path.name[:-5] if path.name.endswith(".yaml") else path.stem
    name = re.sub(r"[^a-z0-9.\-]+", "-", stem.lower()).lstrip(".-")
    return name or "calibrated"


def calibrate(
    files: Annotated[list[Path], typer.Argument(help="Benchmark results, start-up logs or step-time CSVs.", dir_okay=False)],
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="Write the calibrated engine profile (YAML) here (required unless --terms none).",
                     dir_okay=False),
    ] = None,
    model: Annotated[str | None, typer.Option("--model", "-m", help=_help("model"))] = None,
    hardware: Annotated[str | None, typer.Option("--hardware", "-H", help=_help("hardware"))] = None,
    tp: Annotated[int | None, typer.Option("--tensor-parallel-size", "-tp", "--tp", help=_help("tp"), min=1)] = None,
    dtype: Annotated[str | None, typer.Option("--dtype", "--weight-dtype", help=_help("weight_dtype"))] = None,
    kv_dtype: Annotated[str | None, typer.Option("--kv-cache-dtype", "--kv-dtype", help=_help("kv_dtype"))] = None,
    engine: Annotated[str | None, typer.Option("--engine", help=_help("engine"))] = None,
    terms: Annotated[list[str] | None, typer.Option("--terms", help=_help("terms") + " Comma-separate or repeat.")] = None,
    arrivals: Annotated[Arrivals, typer.Option("--arrivals", help=_help("arrivals"))] = Arrivals.auto,
    format: Annotated[ReportFormat, typer.Option("--format", "-f", help="Report format on standard output: a table or JSON.")] = ReportFormat.table,
    force: ForceOpt = False,
) -> None:
    from capplan.calibrate import CalibrateSettings, calibrate as run, profile_yaml
    from capplan.cli.common import parse_names
    from capplan.output import ensure_new

    names = parse_names(terms)
    compare_only = names == ["none"]
    if compare_only and output is not None:
        raise fail("--output: --terms none fits nothing, so there is no profile to write; drop --output")
    if not compare_only and output is None:
        raise fail("--output: give the file to write the calibrated profile to (or --terms none to only compare)")
    require_yaml_output(output, "the calibrated engine profile is YAML; give a .yaml file (it is read back with --engine)")
    if output is not None:
        call(lambda: ensure_new(output, force))
    settings = CalibrateSettings(
        model=model, hardware=hardware, tp=tp, weight_dtype=dtype_name(dtype) if dtype else None,
        kv_dtype=dtype_name(kv_dtype) if kv_dtype else None, engine=engine,
        terms=() if compare_only else (tuple(names) if terms else None), arrivals=arrivals.value,
        name=profile_name(output) if output is not None else "calibrated",
    )
    cal = call(lambda: run(files, settings))
    command = "capplan calibrate " + " ".join(str(f) for f in files)
    if format is ReportFormat.json:
        from capplan.output import to_json

        emit(to_json({**cal.as_dict(), "output": str(output) if output else None}), None, False)
    else:
        render(console(), cal)
    failure = cal.fit_failure()
    if failure is not None:
        typer.echo(f"Error: {failure}; the profile is not written", err=True)
        raise typer.Exit(3)
    if output is not None:
        emit(profile_yaml(cal, command), output, force)


def _num(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.4g}"


def _with_error(x: float | None, err: float | None) -> str:
    return "-" if x is None or err is None else f"{_num(x)} ({err:+.1%})"


def render(con, cal: "Calibration") -> None:  # noqa: ANN001
    """The calibration as rich tables: notes, every point before and after, the fitted terms."""
    from rich.markup import escape
    from rich.table import Table

    fitted = bool(cal.terms)
    if fitted:
        con.print(f"Calibrated profile {escape(cal.engine.name)} from {escape(cal.base)} on {len(cal.files)} file(s):")
    else:
        con.print(f"Profile {escape(cal.base)} against {len(cal.files)} file(s), nothing fitted:")
    for n in cal.notes:
        con.print(f"  - {escape(n)}")
    t = Table(title="Points: predicted (predicted / measured - 1)", title_justify="left")
    columns = ["point", "setting", "measured", f"before ({cal.base})", f"after ({cal.engine.name})"]
    if not fitted:
        columns[3:] = [f"predicted ({cal.base})"]
    for c in columns:
        t.add_column(escape(c), justify="left" if c in ("point", "setting") else "right")
    current = None
    for p in cal.points:
        label, _, rest = p.id.partition(":")
        if label != current:
            t.add_row(f"[bold]{escape(label)}[/bold]", escape(p.format), *[""] * (len(columns) - 2))
            current = label
        cells = [_with_error(p.before, p.error_before)] + ([_with_error(p.after, p.error_after)] if fitted else [])
        t.add_row(f"  {escape(rest)}", escape(p.setting), _num(p.measured), *cells)
    con.print(t)
    if fitted:
        t = Table(title="Fitted terms", title_justify="left")
        for c in ("term", cal.base, cal.engine.name):
            t.add_column(escape(c), justify="left" if c == "term" else "right")
        for term in cal.terms:
            t.add_row(escape(term.name), f"{term.before:.6g}", f"{term.after:.6g}")
        con.print(t)
    before, after = cal.median_abs_error_before, cal.median_abs_error_after
    if before is not None and after is not None:
        change = f"{before:.1%} -> {after:.1%}" if fitted else f"{before:.1%}"
        con.print(f"median |predicted / measured - 1| over {len(cal.points)} point(s): {change}")
    for pid, why in cal.skipped:
        con.print(f"not priced: {escape(pid)}: {escape(why)}")
