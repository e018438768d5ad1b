"""``capplan accuracy``: capplan's predictions against the shipped validation corpus."""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING, Annotated

import typer

from capplan.cli.common import Format, FormatOpt, ForceOpt, OutputOpt, call, console, emit, file_console, pick_format

if TYPE_CHECKING:
    from capplan.accuracy import AccuracyReport


class Group(str, Enum):
    source = "source"
    metric = "metric"
    hardware = "hardware"
    kind = "kind"
    feature = "feature"
    moe = "moe"
    engine = "engine"


HELP = (
    "Run capplan on every published measurement in the validation corpus (validation/*.csv: "
    "serving throughput and latency, KV capacity from engine logs, RL step times) and print "
    "predicted against measured with the signed and absolute error of each row, summarised per "
    "group. Signed error is + when capplan is optimistic (more throughput or less time than "
    "measured). Held-out rows were in no fit (validation/split.yaml). Exit 1 when a bound given "
    "with --max-median-error / --max-signed-error / --max-error / --max-factor is exceeded (on the held-out rows "
    "when there are any) or has no predicted row to check (a --kind/--source/--held-out filter that "
    "matches none), so CI can gate on it.\n\n"
    "Examples:\n\n\b\n"
    "  capplan accuracy\n"
    "  capplan accuracy --kind kv --rows\n"
    "  capplan accuracy --by source --format json -o accuracy.json\n"
    "  capplan accuracy --source sgl-cookbook --by engine   # one publisher's rows, per engine profile\n"
    "  capplan accuracy --max-median-error 0.15 --max-signed-error 0.05   # a CI gate\n"
    "  capplan accuracy --max-factor 2   # no row off by more than 2x either way"
)


def accuracy(
    kind: Annotated[
        list[str] | None, typer.Option("--kind", help="Only these kinds: serving, kv, rl, trainer, weight_sync (repeat or comma-separate).")
    ] = None,
    source: Annotated[str | None, typer.Option("--source", help="Only rows whose source contains this text.")] = None,
    engine: Annotated[
        str | None,
        typer.Option("--engine", help="Predict every row with this engine profile (name or file) instead of each row's engine's."),
    ] = None,
    by: Annotated[
        Group, typer.Option("--by", help="Group the summary by source, metric, hardware, kind, feature (EP, speculative "
                            "decoding, disaggregation, FP8/FP4/INT4, KV offload), moe (dense vs mixture-of-experts) or "
                            "engine (the engine profile that priced the row).")
    ] = Group.metric,
    rows: Annotated[bool, typer.Option("--rows", help="Also list every row (the table format).")] = False,
    held_out_only: Annotated[bool, typer.Option("--held-out", help="Only the rows held out of every fit.")] = False,
    max_median_error: Annotated[
        float | None, typer.Option("--max-median-error", help="Fail when the median absolute error exceeds this fraction.", min=0)
    ] = None,
    max_signed_error: Annotated[
        float | None, typer.Option("--max-signed-error", help="Fail when |median signed error| exceeds this fraction.", min=0)
    ] = None,
    max_error: Annotated[
        float | None, typer.Option("--max-error", help="Fail when any row's absolute error exceeds this fraction, or a latency row is predicted saturated.", min=0)
    ] = None,
    max_factor: Annotated[
        float | None,
        typer.Option("--max-factor", help="Fail when any row's prediction is off by more than this factor either way "
                     "(predicted / measured outside [1/F, F]), or a latency row is predicted saturated.", min=1),
    ] = None,
    format: FormatOpt = None,
    output: OutputOpt = None,
    force: ForceOpt = False,
) -> None:
    from capplan.accuracy import load_corpus, run_accuracy
    from capplan.accuracy.report import default_engines
    from capplan.cli.common import parse_names

    format = pick_format(format, output)
    kinds = set(parse_names(kind)) or None
    corpus = call(lambda: load_corpus(kinds=kinds))
    if source:
        corpus = [r for r in corpus if source in r.source]
    if held_out_only:
        corpus = [r for r in corpus if r.held_out]
    if not corpus:
        from capplan.cli.common import warn

        filters = [f for f, given in (("--kind " + ",".join(sorted(kinds or ())), kinds), (f"--source {source}", source),
                                      ("--held-out", held_out_only)) if given]
        warn(f"no corpus rows match {' with '.join(filters)}: the report below is empty")
    engines = call(lambda: default_engines(engine))
    report = call(lambda: run_accuracy(corpus, engines))
    if format is Format.json:
        from capplan.output import to_json

        emit(to_json(report.as_dict()), output, force)
    elif format is Format.csv:
        from capplan.output import to_csv

        keys = ["id", "source", "kind", "metric", "unit", "hardware", "model", "engine_profile", "predicted", "measured",
                "signed_error", "abs_error", "held_out", "unsupported", "citation"]
        emit(to_csv(keys, ([getattr(r, k) for k in keys] for r in report.rows)), output, force)
    else:
        con = console() if output is None else file_console(140)
        render(con, report, by.value, rows)
        if output is not None:
            emit(con.file.getvalue(), output, force)  # type: ignore[attr-defined]
    _gate(report, max_median_error, max_signed_error, max_error, max_factor)


def render(con, report: "AccuracyReport", by: str, show_rows: bool) -> None:  # noqa: ANN001
    from rich.markup import escape
    from rich.table import Table

    from capplan.accuracy.coverage import architecture

    key = {
        "source": lambda r: r.source,
        "metric": lambda r: f"{r.kind}: {r.metric}",
        "hardware": lambda r: r.hardware,
        "kind": lambda r: r.kind,
        "feature": lambda r: r.feature or "none",
        "moe": lambda r: architecture(r.moe),
        "engine": lambda r: r.engine_profile or "none",
    }[by]
    con.print(
        "Engine profiles: " + ", ".join(f"{k} -> {v}" for k, v in sorted(report.engines.items()))
        + ". Errors are fractions; signed + = capplan optimistic."
    )
    if show_rows:
        t = Table(title="Rows", title_justify="left")
        for c in ("id", "metric", "predicted", "measured", "signed", "held out"):
            t.add_column(c, justify="right" if c in ("predicted", "measured", "signed") else "left")
        for r in report.rows:
            t.add_row(
                escape(r.id), escape(r.metric), f"{r.predicted:,.4g}" if r.predicted is not None else escape(r.unsupported[:40]),
                f"{r.measured:,.4g}", f"{r.signed_error:+.1%}" if r.signed_error is not None else "", "yes" if r.held_out else "",
            )
        con.print(t)
    t = Table(title=f"Error by {by}", title_justify="left")
    for c in ("group", "n", "median |err|", "median signed", "mean |err|", "max |err|", "within 2x"):
        t.add_column(c, justify="left" if c == "group" else "right")

    def add(label: str, s, style: str | None = None) -> None:  # noqa: ANN001
        if not s.n:
            t.add_row(escape(label), "0", "", "", "", "", "", style=style)
            return
        t.add_row(escape(label), str(s.n), f"{s.median_abs_error:.1%}", f"{s.median_signed_error:+.1%}", f"{s.mean_abs_error:.1%}",
                  f"{s.max_abs_error:.1%}", f"{s.within_2x:.0%}", style=style)

    for g, s in report.groups(key).items():
        add(g, s)
    add("all rows", report.summary(), "bold")
    add("held-out rows", report.summary(lambda r: r.held_out), "bold")
    con.print(t)
    sat = report.saturated()
    if sat["n"]:
        con.print(f"{sat['n']} latency rows ({sat['held_out']} held out) are predicted saturated though the run measured a figure: "
                  "misses the errors above leave out (--format csv: 'arrivals exceed what the instance can serve').")
    n_un = sum(1 for r in report.rows if r.predicted is None)
    if n_un:
        con.print(f"{n_un} of {len(report.rows)} rows are not predicted (a model, dtype or layout capplan does not express); "
                  "--format csv lists each with the reason.")


def _percentages(value: float, bound: float, sign: str = "") -> tuple[str, str]:
    """``value`` and ``bound`` as percentages with the decimals that tell them apart (an error just
    past a tiny bound never reads "+0.0% outside +/-0.0%").

    >>> _percentages(0.00012, 0.00001, "+")
    ('+0.012%', '0.001%')
    """
    digits = 1
    while digits < 6 and (f"{abs(value):.{digits}%}" == f"{bound:.{digits}%}" or 0 < bound < 0.5 * 10 ** -(digits + 2)):
        digits += 1
    return f"{value:{sign}.{digits}%}", f"{bound:.{digits}%}"


def _gate(report: "AccuracyReport", median: float | None, signed: float | None, worst: float | None,
          factor: float | None = None) -> None:
    held = report.summary(lambda r: r.held_out)
    s = held if held.n else report.summary()
    which = "held-out" if held.n else "all"
    if s.n == 0 and (median is not None or signed is not None or worst is not None or factor is not None):
        matched = f"{len(report.rows)} rows matched, none predicted" if report.rows else "no rows matched"
        typer.echo(f"accuracy gate failed: {matched}, so there is no error to bound (check --kind, --source, --held-out)",
                   err=True)
        raise typer.Exit(1)
    failed = []
    if median is not None and s.median_abs_error is not None and s.median_abs_error > median:
        failed.append("median absolute error {} > {}".format(*_percentages(s.median_abs_error, median)))
    if signed is not None and s.median_signed_error is not None and abs(s.median_signed_error) > signed:
        failed.append("median signed error {} outside +/-{}".format(*_percentages(s.median_signed_error, signed, "+")))
    if worst is not None and s.max_abs_error is not None and s.max_abs_error > worst:
        failed.append("largest absolute error {} > {}".format(*_percentages(s.max_abs_error, worst)))
    if factor is not None:
        off = report.beyond_factor(factor, (lambda r: r.held_out) if held.n else (lambda r: True))
        if off:
            w = max(off, key=lambda r: max(r.predicted / r.measured, r.measured / r.predicted))  # type: ignore[operator]
            failed.append(f"{len(off)} rows off by more than {factor:g}x (worst: {w.id}, predicted {w.predicted:,.4g} "
                          f"against {w.measured:,.4g} {w.unit})")
    sat = report.saturated()
    n_sat = sat["held_out"] if held.n else sat["n"]
    if (worst is not None or factor is not None) and n_sat:
        failed.append(f"{n_sat} latency rows predicted saturated (an unbounded error)")
    if failed:
        typer.echo(f"accuracy gate failed on the {which} rows: " + "; ".join(failed), err=True)
        raise typer.Exit(1)
