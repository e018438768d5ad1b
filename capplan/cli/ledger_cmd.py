"""``capplan ledger``: the per-token-class ledger and its checks."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from capplan.cli.registry import CommandSet
from capplan.cli.common import (
    Format,
    FormatOpt,
    ForceOpt,
    OutputOpt,
    call,
    console,
    emit,
    file_console,
    fmt_num,
    pick_format,
    safe,
)

if TYPE_CHECKING:
    from capplan.ledger import Ledger


commands = CommandSet()
"""This module's commands (registered by :mod:`capplan.cli.app`)."""


@commands.command(
    "show",
    help=(
        "Print the ledger of WORKLOAD (a bundled name or a path).\n\n"
        "Rows are counters, columns the token classes; per conversation and per step "
        "(x prompts x samples). Exact in integers when every count is fixed, else a seeded Monte "
        "Carlo estimate (means, p50, p95).\n\n"
        "Examples:\n\n\b\n"
        "  capplan ledger seed-replay\n"
        "  capplan ledger seed-replay-auto --format csv -o ledger.csv\n"
        "  capplan ledger my.yaml --check      # CI: exit 1 with each broken identity"
    ),
)
def show(
    workload: Annotated[str, typer.Argument(help="Workload file, or the name of a bundled workload.")],
    format: FormatOpt = None,
    output: OutputOpt = None,
    force: ForceOpt = False,
    check: Annotated[
        bool, typer.Option("--check", help="Exit 1 when any reconciliation identity is broken (for CI).")
    ] = False,
    conversations: Annotated[
        int | None,
        typer.Option(help="Monte Carlo sample size (overrides sampling.conversations).", min=1),
    ] = None,
    seed: Annotated[int | None, typer.Option(help="Random seed (overrides sampling.seed).", min=0)] = None,
) -> None:
    from capplan.ledger import compute_ledger
    from capplan.output import printable
    from capplan.workload import check_sample_size, load_workload

    format = pick_format(format, output)
    w = call(lambda: load_workload(workload))
    call(lambda: check_sample_size(w, conversations))
    led = call(lambda: compute_ledger(w, conversations=conversations, seed=seed))
    if format is Format.json:
        from capplan.output import to_json

        emit(to_json(led.as_dict()), output, force)
    elif format is Format.csv:
        emit(ledger_csv(led), output, force)
    else:
        render_table(led, output, force)
    if check:
        broken = [c for c in led.checks if not c.ok]
        for c in broken:
            typer.echo(f"check failed: {c.name}: {printable(c.detail)}", err=True)
        if broken:
            raise typer.Exit(1)


def ledger_csv(led: "Ledger") -> str:
    """Long format: ``scope,counter,token_class,positions``."""
    from capplan.output import to_csv

    scopes = {"per_conversation": led.per_conversation, "per_step": led.per_step}
    if not led.exact:
        scopes["per_conversation_p50"] = led.per_conversation_p50
        scopes["per_conversation_p95"] = led.per_conversation_p95
    rows = [
        (scope, counter, cls, value)
        for scope, table in scopes.items()
        for counter, by_class in table.items()
        for cls, value in by_class.items()
    ]
    return to_csv(["scope", "counter", "token_class", "positions"], rows)


def render_table(led: "Ledger", output: object, force: bool) -> None:
    from rich.table import Table

    from capplan.ledger import CLASSES_AND_TOTAL, COUNTERS

    con = console() if output is None else file_console()
    how = (
        "exact"
        if led.exact
        else f"mean of {led.conversations_sampled:,} sampled conversations (seeded Monte Carlo)"
    )
    for scope, table, title in (
        ("conv", led.per_conversation, f"Per conversation [positions], {how}"),
        (
            "step",
            led.per_step,
            f"Per step [positions] = per conversation x {led.conversations_per_step:,} conversations"
            if led.conversations_generated_per_step == led.conversations_per_step else
            f"Per step [positions] = per conversation x {led.conversations_generated_per_step:,.1f} conversations generated "
            f"({led.conversations_per_step:,} trained and scored: filtered groups are generated, not trained)",
        ),
    ):
        t = Table(title=safe(f"{led.workload} ({led.method}): {title}"), title_justify="left")
        t.add_column("counter", no_wrap=True, min_width=17)
        for c in CLASSES_AND_TOTAL:
            t.add_column(c, justify="right")
        if scope == "conv" and not led.exact:
            t.add_column("p50 total", justify="right")
            t.add_column("p95 total", justify="right")
        for counter in COUNTERS:
            row = [counter, *(fmt_num(table[counter][c]) for c in CLASSES_AND_TOTAL)]
            if scope == "conv" and not led.exact:
                row += [fmt_num(led.per_conversation_p50[counter]["total"]), fmt_num(led.per_conversation_p95[counter]["total"])]
            t.add_row(*row)
        con.print(t)
    s = led.conversation_stats
    con.print(
        f"Per conversation: {fmt_num(s['invocations'], 2)} invocations, {fmt_num(s['tool_calls'], 2)} tool calls, "
        f"{s['tool_wait_s']:,.2f} s tool wait (waiting is not work: it enters no forwarded counter), "
        f"{s['truncated_fraction']:.1%} truncated at max_context."
    )
    con.print("Checks (over every sampled conversation):")
    for c in led.checks:
        mark = "[green]ok  [/green]" if c.ok else "[bold red]FAIL[/bold red]"
        con.print(f"  {mark} {c.name}: {safe(c.detail)}")
    if output is not None:
        emit(con.file.getvalue(), output, force)  # type: ignore[attr-defined,arg-type]
