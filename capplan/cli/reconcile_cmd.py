"""``capplan ledger reconcile``: check a trajectory log record by record and count it into a ledger."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from capplan.cli.registry import CommandSet
from capplan.cli.common import (
    Format, FormatOpt, ForceOpt, OutputOpt, call, console, emit, file_console, fmt_num, pick_format, progress_bar,
)

if TYPE_CHECKING:
    from capplan.reconcile import Reconciliation

#: Files at least this large get a progress bar (when standard error is a terminal) [bytes].
PROGRESS_MIN_BYTES = 8 * 2**20


commands = CommandSet()
"""This module's commands (registered by :mod:`capplan.cli.app`)."""


class Executor(str, Enum):
    """Where several files are counted (see ``capplan.scale``)."""

    process = "process"
    ray = "ray"
    serial = "serial"


class Mapping(str, Enum):
    """Record formats (see ``capplan.reconcile.MAPPINGS``)."""

    capplan = "capplan"
    verl = "verl"
    openrlhf = "openrlhf"
    areal = "areal"


@commands.command(
    "reconcile",
    help=(
        "Check every record of a trajectory log (JSONL, gzip-compressed JSONL or Parquet) and count it "
        "into an observed ledger with the same counters as `capplan ledger`.\n\n"
        "Per record: mask lengths, sampled positions = action positions, loss only on the trained classes, "
        "log-probs for every sampled position, turn boundaries, cache hits backed by computed prefixes, "
        "policy-version staleness, stop reason, no loss on dropped truncations. Over the file: the observed "
        "ledger, stop-reason and policy-version histograms, response-length percentiles and, with "
        "--workload, the observed per-conversation means against the plan.\n\n"
        "Exit 0 when everything holds, 1 when a check fails (each failure on standard error with its line "
        "number and field), 2 when the input cannot be read.\n\n"
        "Examples:\n\n\b\n"
        "  capplan ledger reconcile rollouts.jsonl.gz\n"
        "  capplan ledger reconcile rollouts.jsonl --workload agentic-tool-rl --tolerance 0.1\n"
        "  capplan ledger reconcile dump.jsonl --mapping verl --max-staleness 2 --format json -o report.json\n"
        "  capplan ledger reconcile runs/ --workers 4\n"
        "  capplan ledger reconcile 'runs/step-*.parquet' --executor ray --ray-address auto"
    ),
)
def reconcile(
    files: Annotated[
        list[str],
        typer.Argument(
            help="Trajectory logs: JSONL (optionally .gz) or Parquet files, directories (searched for "
            "*.jsonl, *.jsonl.gz, *.ndjson, *.parquet) or glob patterns; several are counted in parallel "
            "into one report.",
            metavar="FILE|DIR|GLOB...",
        ),
    ],
    workload: Annotated[
        str | None,
        typer.Option(
            "--workload",
            "-w",
            help="Workload (file or bundled name): what records must look like, and the plan to compare with.",
        ),
    ] = None,
    tolerance: Annotated[
        float, typer.Option(help="Largest relative difference of a per-conversation mean from the plan.", min=0)
    ] = 0.05,
    max_staleness: Annotated[
        int | None,
        typer.Option(
            help="Largest trainer version - policy version (trainer version: the record's trainer_version, "
            "else the newest policy version so far).",
            min=0,
        ),
    ] = None,
    mapping: Annotated[
        Mapping, typer.Option(help="Record format: capplan's own, or a framework's dump (see docs/reconcile.md).")
    ] = Mapping.capplan,
    format: FormatOpt = None,
    max_errors: Annotated[
        int, typer.Option(help="Failures listed with their line number; the rest are counted.", min=0)
    ] = 20,
    output: OutputOpt = None,
    force: ForceOpt = False,
    executor: Annotated[
        Executor,
        typer.Option(help="Where several files are counted: a local process pool, a Ray cluster, or serially."),
    ] = Executor.process,
    workers: Annotated[
        int | None,
        typer.Option(help="Processes (or local Ray CPUs) counting files at once; default: the CPUs available.", min=1),
    ] = None,
    ray_address: Annotated[
        str | None,
        typer.Option(help="Ray cluster to run on (auto or HOST:PORT; needs --executor ray); default: a local Ray instance."),
    ] = None,
) -> None:
    from capplan.reconcile.files import reconcile_files

    format = pick_format(format, output)
    expected = None
    if workload is not None:
        from capplan.workload import load_workload

        expected = call(lambda: load_workload(workload))
    single = Path(files[0]) if len(files) == 1 and Path(files[0]).is_file() else None
    with _progress(single, len(files)) as progress:
        result = call(
            lambda: reconcile_files(
                files,
                expected,
                mapping=mapping.value,
                tolerance=tolerance,
                max_staleness=max_staleness,
                max_errors=max_errors,
                progress=progress,
                executor=executor.value,
                workers=workers,
                ray_address=ray_address,
            )
        )
    _render(result, format, output, force)
    _echo_failures(result, max_errors)
    if not result.ok:
        raise typer.Exit(1)


def _render(result: "Reconciliation", format: Format, output: Path | None, force: bool) -> None:
    """Write ``result`` as JSON, long-format CSV or rich tables to ``output`` or standard output."""
    from capplan.output import to_csv, to_json
    from capplan.reconcile.report import CSV_HEADER

    if format is Format.json:
        emit(to_json(result.as_dict()), output, force)
    elif format is Format.csv:
        emit(to_csv(CSV_HEADER, result.csv_rows()), output, force)
    else:
        render_table(result, output, force)


def _echo_failures(result: "Reconciliation", max_errors: int) -> None:
    """Each file that could not be read, each listed failure, the count of the unlisted ones and a
    plan mismatch, on standard error."""
    for failed in result.files_failed or []:
        typer.echo(f"file failed: {failed['file']}: {failed['error']}", err=True)
    for failure in result.failures:
        typer.echo(f"check failed: {failure}", err=True)
    rest = result.failures_total - len(result.failures)
    if rest:
        typer.echo(f"... and {rest:,} more failure(s) not listed (--max-errors {max_errors})", err=True)
    for check in result.ledger.checks:
        if check.name == "matches_plan_within_tolerance" and not check.ok:
            typer.echo(f"check failed: {check.name}: {check.detail}", err=True)


def _progress(file: Path | None, inputs: int = 1) -> Any:
    """The progress bar (:func:`capplan.cli.common.progress_bar`): bytes of one large file, or
    files done of several; none for a file under :data:`PROGRESS_MIN_BYTES`."""
    if file is None:  # several files: one step per file
        return progress_bar("reconciling files")
    try:
        total = file.stat().st_size
    except OSError:
        return progress_bar("reconciling", show=False)
    return progress_bar("reconciling", total, bytes=True, show=total >= PROGRESS_MIN_BYTES)


def render_table(result: "Reconciliation", output: Path | None, force: bool) -> None:
    """The observed ledger, the plan comparison, the histograms, notes and checks as rich text."""
    from rich.markup import escape
    from rich.table import Table

    from capplan.ledger import CLASSES_AND_TOTAL, COUNTERS

    ledger = result.ledger
    con = console() if output is None else file_console()
    where = f"{result.source} ({result.mapping} format)"
    means = Table(
        title=escape(
            f"{where}: observed per conversation [positions], mean of {result.records_counted:,} counted records"
        ),
        title_justify="left",
    )
    means.add_column("counter", no_wrap=True, min_width=17)
    for cls in CLASSES_AND_TOTAL:
        means.add_column(cls, justify="right")
    means.add_column("p50 total", justify="right")
    means.add_column("p95 total", justify="right")
    for counter in COUNTERS:
        means.add_row(
            counter,
            *(fmt_num(ledger.per_conversation[counter][cls]) for cls in CLASSES_AND_TOTAL),
            fmt_num(ledger.per_conversation_p50[counter]["total"]),
            fmt_num(ledger.per_conversation_p95[counter]["total"]),
        )
    con.print(means)
    if result.plan is not None:
        plan = Table(
            title=escape(f"Against the plan of {ledger.workload} (tolerance {result.tolerance:.1%})"),
            title_justify="left",
        )
        for column, justify in (("counter", "left"), ("class", "left"), ("observed", "right"), ("planned", "right"),
                          ("difference", "right"), ("", "left")):
            plan.add_column(column, justify=justify, no_wrap=True)  # type: ignore[arg-type]
        for row in result.plan:
            diff = "n/a" if row.relative_error is None else f"{row.relative_error:+.1%}"
            mark = {"ok": "[green]ok[/green]", "FAIL": "[bold red]FAIL[/bold red]"}.get(row.status, row.status)
            plan.add_row(row.counter, row.token_class, fmt_num(row.observed), fmt_num(row.planned), diff, mark)
        con.print(plan)
    stats = ledger.conversation_stats
    con.print(
        f"Records: {result.records:,} on {result.lines:,} lines, {result.records_counted:,} counted, "
        f"{result.records_failed:,} with a failed check. Per conversation: {fmt_num(stats['invocations'], 2)} "
        f"invocations, {fmt_num(stats['tool_calls'], 2)} tool calls, {stats['tool_wait_s']:,.2f} s tool wait, "
        f"{stats['truncated_fraction']:.1%} truncated."
    )
    con.print(
        escape("Response length [positions after the prompt]: " + ", ".join(f"{stat} {fmt_num(value)}" for stat, value in result.response_length.items()))
    )
    con.print("Stop reasons: " + escape(_hist_text(result.stop_reasons)))
    con.print("Policy versions: " + escape(_hist_text(result.policy_versions, limit=12)))
    if result.staleness:
        con.print(escape("Staleness [versions behind]: " + _hist_text(result.staleness, limit=12)))
    for note in result.notes:
        con.print(f"Note: {escape(note)}")
    con.print("Checks (over every record):")
    for check in ledger.checks:
        mark = "[green]ok  [/green]" if check.ok else "[bold red]FAIL[/bold red]"
        con.print(f"  {mark} {check.name}: {escape(check.detail)}")
    if output is not None:
        emit(con.file.getvalue(), output, force)  # type: ignore[attr-defined]


def _hist_text(hist: dict[str, int], limit: int = 20) -> str:
    """``key: records (share)`` for each key; a long numeric histogram is summarised by its range."""
    if not hist:
        return "none"
    total = sum(hist.values())
    items = list(hist.items())
    if len(items) > limit:
        keys = [k for k, _ in items if k != "(other)"]
        top = sorted(items, key=lambda kv: -kv[1])[:5]
        return f"{len(items):,} distinct, {keys[0]} to {keys[-1]}; most frequent: " + ", ".join(
            f"{k}: {n:,} ({n / total:.1%})" for k, n in top
        )
    return ", ".join(f"{k}: {n:,} ({n / total:.1%})" for k, n in items)
