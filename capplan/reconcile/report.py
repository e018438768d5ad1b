"""The result of a reconciliation: the observed ledger and summary, the comparison with the plan, the CSV rows."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from capplan.ledger import CLASSES_AND_TOTAL, COUNTERS, Check, Ledger
from capplan.reconcile.checks import RECORD_CHECKS, Failure, RecordChecker
from capplan.reconcile.histograms import (
    SERIES_RESPONSE_LENGTH,
    SERIES_TOTALS,
    SERIES_WAIT_MS,
    Accumulator,
    percentiles,
)

if TYPE_CHECKING:
    import numpy as np

    from capplan.workload import Workload

CSV_HEADER = ("scope", "counter", "token_class", "value")
"""Columns of :meth:`Reconciliation.csv_rows` (``capplan ledger reconcile --format csv``)."""


@dataclass(frozen=True)
class PlanRow:
    """Observed against planned per-conversation mean of one counter and class."""

    counter: str
    token_class: str
    observed: float
    planned: float
    relative_error: float | None  # (observed - planned) / planned; None when planned is 0 and observed is not
    status: str  # "ok", "FAIL" or "not logged"

    def as_dict(self) -> dict[str, Any]:
        return {
            "counter": self.counter,
            "token_class": self.token_class,
            "observed": self.observed,
            "planned": self.planned,
            "relative_error": self.relative_error,
            "status": self.status,
        }


@dataclass(frozen=True)
class Reconciliation:
    """What reconciling one file found: the observed ledger, failures, histograms, the plan comparison."""

    source: str
    mapping: str
    ledger: Ledger
    lines: int
    records: int
    records_counted: int
    records_failed: int
    failures: list[Failure]
    failure_counts: dict[str, int]
    stop_reasons: dict[str, int]
    policy_versions: dict[str, int]
    staleness: dict[str, int]
    response_length: dict[str, float]
    totals: dict[str, dict[str, int]]
    notes: list[str] = field(default_factory=list)
    tolerance: float | None = None
    plan: list[PlanRow] | None = None
    files: list[dict[str, Any]] | None = None
    """Per file read (several files only): its name, lines, records and failed records."""
    files_failed: list[dict[str, Any]] | None = None
    """Files that could not be reconciled (several files only): name, error, attempts."""

    @property
    def failures_total(self) -> int:
        return sum(self.failure_counts.values())

    @property
    def ok(self) -> bool:
        """True when every file was read, no record failed a check and the observed means match the plan."""
        return self.failures_total == 0 and all(c.ok for c in self.ledger.checks) and not self.files_failed

    def as_dict(self) -> dict[str, Any]:
        """The ledger's JSON contract (``capplan ledger --format json``) plus the reconciliation."""
        out = self.ledger.as_dict()
        out.update(
            {
                "source": self.source,
                "mapping": self.mapping,
                "ok": self.ok,
                "lines": self.lines,
                "records": self.records,
                "records_counted": self.records_counted,
                "records_failed": self.records_failed,
                "totals": self.totals,
                "failure_counts": self.failure_counts,
                "failures": [f.as_dict() for f in self.failures],
                "failures_not_listed": self.failures_total - len(self.failures),
                "stop_reasons": self.stop_reasons,
                "policy_versions": self.policy_versions,
                "staleness": self.staleness,
                "response_length": self.response_length,
                "notes": self.notes,
                "tolerance": self.tolerance,
                "plan": None if self.plan is None else [r.as_dict() for r in self.plan],
            }
        )
        if self.files is not None:
            out["files"] = self.files
            out["files_failed"] = self.files_failed or []
        return out

    def csv_rows(self) -> list[tuple[Any, ...]]:
        """Long format, one row per value, in the columns of :data:`CSV_HEADER`.

        Scopes: the ledger's (``per_conversation``, ``per_step``, ``per_conversation_p50``,
        ``per_conversation_p95``), ``total`` (file sums), ``stop_reason`` / ``policy_version`` /
        ``staleness`` (records per key), ``response_length`` (statistic), ``check`` (failures per
        check) and, with a workload, ``planned_per_conversation`` and ``plan_relative_error``.
        """
        ledger = self.ledger
        rows: list[tuple[Any, ...]] = []
        for scope, table in (
            ("per_conversation", ledger.per_conversation),
            ("per_step", ledger.per_step),
            ("per_conversation_p50", ledger.per_conversation_p50),
            ("per_conversation_p95", ledger.per_conversation_p95),
            ("total", self.totals),
        ):
            rows += [(scope, counter, cls, v) for counter, by_class in table.items() for cls, v in by_class.items()]
        for scope, hist in (
            ("stop_reason", self.stop_reasons),
            ("policy_version", self.policy_versions),
            ("staleness", self.staleness),
        ):
            rows += [(scope, key, "records", n) for key, n in hist.items()]
        rows += [("response_length", stat, "positions", v) for stat, v in self.response_length.items()]
        rows += [("check", name, "failures", n) for name, n in self.failure_counts.items()]
        for r in self.plan or []:
            rows.append(("planned_per_conversation", r.counter, r.token_class, r.planned))
            rows.append(("plan_relative_error", r.counter, r.token_class, "" if r.relative_error is None else r.relative_error))
        return rows


def compare_with_plan(
    workload: "Workload",
    observed: dict[str, dict[str, float]],
    tolerance: float,
    all_cache_logged: bool,
    conversations: int | None,
) -> list[PlanRow]:
    """Observed per-conversation means against the plan of ``workload``, within ``tolerance`` [fraction]."""
    from capplan.ledger import compute_ledger

    planned = compute_ledger(workload, conversations=conversations).per_conversation
    unlogged = set()
    if not all_cache_logged and workload.cache.reuse != "none":
        unlogged = {"prefill_forwarded", "cache_hit"}
    rows = []
    for counter in COUNTERS:
        for cls in CLASSES_AND_TOTAL:
            observed_mean, planned_mean = float(observed[counter][cls]), float(planned[counter][cls])
            if observed_mean == 0 and planned_mean == 0:
                continue
            relative_error = (observed_mean - planned_mean) / planned_mean if planned_mean else None
            if counter in unlogged:
                status = "not logged"
            elif relative_error is not None and abs(relative_error) <= tolerance + 1e-12:
                status = "ok"
            else:
                status = "FAIL"
            rows.append(PlanRow(counter, cls, observed_mean, planned_mean, relative_error, status))
    return rows


def summarize(
    checker: RecordChecker,
    path: Path,
    mapping: str,
    lines: int,
    workload: "Workload | None",
    tolerance: float,
    plan_conversations: int | None,
) -> Reconciliation:
    """Fold the last rows of ``checker`` and assemble the observed ledger, notes and plan comparison.

    Parameters
    ----------
    checker : RecordChecker
        The checker every record of the file was fed to.
    path : Path
        The file (its name names the ledger without a workload).
    mapping : str
        The record format it was read with.
    lines : int
        Lines (or Parquet rows) read [lines].
    workload : Workload, optional
        The plan to compare with.
    tolerance : float
        Largest relative difference of a per-conversation mean from the plan [fraction].
    plan_conversations : int, optional
        Monte Carlo sample size of the plan.
    """
    histograms = checker.histograms
    histograms.flush()
    counted = histograms.counted
    conversations_per_step = workload.volume.conversations_per_step if workload is not None else 1
    per_conversation = _per_conversation_means(histograms)
    checks = _record_checks(checker)
    plan_rows = None
    if workload is not None:
        plan_rows = compare_with_plan(
            workload,
            per_conversation,
            tolerance,
            all_cache_logged=histograms.flag_sums["cache_logged"] == counted,
            conversations=plan_conversations,
        )
        checks.append(_plan_check(plan_rows, tolerance, workload.name))
    ledger = Ledger(
        workload=workload.name if workload is not None else path.name,
        method=workload.method if workload is not None else "unspecified",
        exact=False,
        conversations_sampled=counted,
        conversations_per_step=conversations_per_step,
        conversations_generated_per_step=conversations_per_step,  # a log's records: what was generated
        per_conversation=per_conversation,
        per_step={
            counter: {cls: mean * conversations_per_step for cls, mean in by_class.items()}
            for counter, by_class in per_conversation.items()
        },
        per_conversation_p50=_percentile_table(histograms, 50),
        per_conversation_p95=_percentile_table(histograms, 95),
        conversation_stats=_conversation_stats(histograms),
        checks=checks,
    )
    return Reconciliation(
        source=str(path),
        mapping=mapping,
        ledger=ledger,
        lines=lines,
        records=checker.records,
        records_counted=counted,
        records_failed=checker.records_failed,
        failures=checker.failures,
        failure_counts=dict(checker.failure_counts),
        stop_reasons=dict(sorted(checker.stop_reasons.items(), key=lambda item: -item[1])),
        policy_versions=_keyed(checker.versions),
        staleness=_keyed(checker.staleness),
        response_length=_response_length(histograms),
        totals=_totals(histograms),
        notes=_notes(checker, mapping),
        tolerance=tolerance if workload is not None else None,
        plan=plan_rows,
    )


def _per_conversation_means(histograms: Accumulator) -> dict[str, dict[str, float]]:
    """Mean positions per counted record, by counter and class (``total`` the sum of the classes)."""
    counted = histograms.counted
    sums = histograms.sums

    def by_class(values: "np.ndarray") -> dict[str, float]:
        means = [float(x) / counted if counted else 0.0 for x in values]  # as numpy's mean of the counts
        return dict(zip(CLASSES_AND_TOTAL, [*means, sum(means)]))

    return {counter: by_class(sums[3 * k:3 * k + 3]) for k, counter in enumerate(COUNTERS)}


def _totals(histograms: Accumulator) -> dict[str, dict[str, int]]:
    """Positions summed over the counted records, by counter and class."""
    sums = histograms.sums
    return {
        counter: dict(
            zip(CLASSES_AND_TOTAL, [*(int(x) for x in sums[3 * k:3 * k + 3]), int(sums[3 * k:3 * k + 3].sum())])
        )
        for k, counter in enumerate(COUNTERS)
    }


def _percentile_table(histograms: Accumulator, q: float) -> dict[str, dict[str, float]]:
    """The ``q``-th percentile [0-100] of each counter and class over the counted records."""
    out = {}
    for k, counter in enumerate(COUNTERS):
        values = [percentiles(histograms.used(3 * k + i), (q,))[0] for i in range(3)]
        values.append(percentiles(histograms.used(SERIES_TOTALS + k), (q,))[0])
        out[counter] = dict(zip(CLASSES_AND_TOTAL, values))
    return out


def _conversation_stats(histograms: Accumulator) -> dict[str, float]:
    """Per-record means and percentiles of the ledger's ``conversation_stats``."""
    inverse = 1.0 / histograms.counted if histograms.counted else 0.0
    record_length = SERIES_TOTALS  # the recorded total is the record length
    length_p50, length_p95 = percentiles(histograms.used(record_length), (50, 95))
    return {
        "invocations": histograms.invocations * inverse,
        "tool_calls": histograms.tool_calls * inverse,
        "tool_wait_s": float(histograms.sums[SERIES_WAIT_MS]) * inverse / 1000.0,
        "tool_wait_s_p95": percentiles(histograms.used(SERIES_WAIT_MS), (95,))[0] / 1000.0,
        "truncated_fraction": histograms.flag_sums["truncated"] * inverse,
        "record_length_p50": length_p50,
        "record_length_p95": length_p95,
        "record_length_max": int(histograms.maxes[record_length]),
    }


def _response_length(histograms: Accumulator) -> dict[str, float]:
    """Percentiles, mean and maximum of the positions after the prompt [positions]."""
    inverse = 1.0 / histograms.counted if histograms.counted else 0.0
    qs = (50, 90, 95, 99)
    out = dict(zip(("p50", "p90", "p95", "p99"), percentiles(histograms.used(SERIES_RESPONSE_LENGTH), qs)))
    out["mean"] = float(histograms.sums[SERIES_RESPONSE_LENGTH]) * inverse
    out["max"] = float(histograms.maxes[SERIES_RESPONSE_LENGTH])
    return out


def _notes(checker: RecordChecker, mapping: str) -> list[str]:
    """What the log does not show: unlogged cache hits or stop reasons, uncounted records, no versions."""
    counted = checker.histograms.counted
    notes: list[str] = []
    cache_logged = checker.histograms.flag_sums["cache_logged"]
    if counted and cache_logged < counted and checker.rollout:
        notes.append(
            f"{counted - cache_logged:,} of {counted:,} counted records log neither cached_tokens nor prefill_tokens: "
            "they are counted with no cache hits (every invocation prefills its whole input)"
        )
    if checker.stop_not_logged:
        notes.append(
            f"{checker.stop_not_logged:,} records carry no stop reason (the {mapping} format does not log one): "
            "stop_reason and truncated_trained are checked only where it is given"
        )
    if counted < checker.records:
        notes.append(
            f"{checker.records - counted:,} of {checker.records:,} records are not counted in the ledger: they are "
            "malformed (well_formed, mask_lengths or turn_boundaries failures)"
        )
    if checker.rollout and not checker.versions:
        notes.append("no record carries a policy version: staleness cannot be shown")
    return notes


def _record_checks(checker: RecordChecker) -> list[Check]:
    """One ledger check per record check: failures counted, with the first one kept."""
    first: dict[str, Failure] = {}
    for failure in checker.failures:
        first.setdefault(failure.check, failure)
    checks = []
    for name, what in RECORD_CHECKS.items():
        failed = checker.failure_counts[name]
        if failed:
            detail = f"{failed:,} failure(s); first: {first[name]}" if name in first else f"{failed:,} failure(s)"
        else:
            detail = what
        checks.append(Check(name, failed == 0, detail))
    return checks


def _plan_check(plan_rows: list[PlanRow], tolerance: float, workload_name: str) -> Check:
    """``matches_plan_within_tolerance``, naming the worst mean when some differ."""
    bad = [r for r in plan_rows if r.status == "FAIL"]
    if bad:
        worst = max(bad, key=lambda r: math.inf if r.relative_error is None else abs(r.relative_error))
        error = "the plan has none" if worst.relative_error is None else f"{worst.relative_error:+.1%}"
        detail = (
            f"{len(bad)} per-conversation mean(s) differ from the plan by more than {tolerance:.1%}; worst: "
            f"{worst.counter}/{worst.token_class} observed {worst.observed:,.1f} vs planned {worst.planned:,.1f} ({error})"
        )
    else:
        detail = f"every per-conversation mean within {tolerance:.1%} of the plan of {workload_name}"
    return Check("matches_plan_within_tolerance", not bad, detail)


def _keyed(counts: dict[Any, int]) -> dict[str, int]:
    """A histogram with its keys as text: integers in order first, then the other keys."""
    items = sorted(
        counts.items(), key=lambda item: (isinstance(item[0], str), item[0] if isinstance(item[0], int) else 0, str(item[0]))
    )
    return {str(key): value for key, value in items}
