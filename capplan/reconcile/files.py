"""Reconciling many trajectory files at once: a directory or glob expanded to files, one task per file, exact counters merged.

Each file is counted on its own (:func:`count_part`, one task of :func:`capplan.scale.run_tasks`,
on a local process pool or a Ray cluster) into a :class:`FilePart`: integer counters, the sums,
maxima and histogram bins of its records, its first ``max_errors`` failures. Parts are merged in
file order, so the result is the same on every executor and equals reading the files one after
the other, with one difference: without ``trainer_version`` the staleness reference is the newest
policy version seen so far *in the same file*.
"""

from __future__ import annotations

import dataclasses
import glob
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from capplan.errors import InputError
from capplan.reconcile.checks import _MAX_KEYS, Failure, RecordChecker

if TYPE_CHECKING:
    import numpy as np

    from capplan.reconcile.report import Reconciliation
    from capplan.workload import Workload

LOG_SUFFIXES: tuple[str, ...] = (".jsonl", ".jsonl.gz", ".ndjson", ".ndjson.gz", ".parquet")
"""File names a directory is searched for (recursively)."""


def expand_inputs(inputs: Sequence[str | Path]) -> list[Path]:
    """The trajectory files named by ``inputs``: files, directories (every file below ending in
    one of :data:`LOG_SUFFIXES`) and glob patterns (``runs/step-*.parquet``, ``**`` recursive).

    Files come in the order given; a directory's and a pattern's in sorted order; repeats once.

    Raises
    ------
    InputError
        Nothing named, a path that does not exist, or a directory or pattern with no log file.
    """
    out: list[Path] = []
    for item in inputs:
        path = Path(item)
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.is_file() and p.name.endswith(LOG_SUFFIXES))
            if not found:
                raise InputError(f"{path}: no trajectory files in this directory (looked for {', '.join(LOG_SUFFIXES)})")
            out += found
        elif not path.exists() and glob.has_magic(str(item)):
            found = sorted(Path(p) for p in glob.glob(str(item), recursive=True) if Path(p).is_file())
            if not found:
                raise InputError(f"{item}: no file matches this pattern")
            out += found
        elif not path.is_file():
            raise InputError(f"{path}: no such file")
        else:
            out.append(path)
    if not out:
        raise InputError("no trajectory file given")
    return list(dict.fromkeys(out))


@dataclass(frozen=True)
class PartTask:
    """What one task needs to count one file."""

    path: str
    workload: "Workload | None"
    mapping: str
    max_staleness: int | None
    max_errors: int
    batches: bool = True


@dataclass(frozen=True)
class FilePart:
    """The mergeable state of one counted file (small: histogram bins are kept sparse)."""

    path: str
    unit: str
    lines: int
    records: int
    records_failed: int
    failures: list[Failure]
    failure_counts: dict[str, int]
    stop_reasons: dict[Any, int]
    versions: dict[Any, int]
    staleness: dict[Any, int]
    newest_version: int | None
    stop_not_logged: int
    counted: int
    sums: "np.ndarray"
    maxes: "np.ndarray"
    bins: "np.ndarray"
    """Flat indices of the non-empty histogram bins."""
    bin_counts: "np.ndarray"
    flag_sums: dict[str, int]
    invocations: int
    tool_calls: int


def count_part(task: PartTask) -> FilePart:
    """Count one file (a task of :func:`capplan.scale.run_tasks`).

    Raises
    ------
    InputError
        As :func:`capplan.reconcile.reconcile` (missing, unreadable or empty file).
    """
    import numpy as np

    from capplan.reconcile import count_file

    checker, lines = count_file(
        Path(task.path), task.workload, task.mapping, task.max_staleness, task.max_errors, batches=task.batches
    )
    histograms = checker.histograms
    histograms.flush()
    flat = histograms.hist.ravel()
    bins = np.flatnonzero(flat)
    return FilePart(
        path=task.path,
        unit=checker.unit,
        lines=lines,
        records=checker.records,
        records_failed=checker.records_failed,
        failures=checker.failures,
        failure_counts=dict(checker.failure_counts),
        stop_reasons=dict(checker.stop_reasons),
        versions=dict(checker.versions),
        staleness=dict(checker.staleness),
        newest_version=checker.newest_version,
        stop_not_logged=checker.stop_not_logged,
        counted=histograms.counted,
        sums=histograms.sums.copy(),
        maxes=histograms.maxes.copy(),
        bins=bins,
        bin_counts=flat[bins],
        flag_sums=dict(histograms.flag_sums),
        invocations=histograms.invocations,
        tool_calls=histograms.tool_calls,
    )


def _merge_keyed(into: dict[Any, int], counts: dict[Any, int]) -> None:
    """Add a histogram by key, new keys in order; past the cap on distinct keys, into ``(other)``."""
    for key, value in counts.items():
        if key in into:
            into[key] += value
        elif len(into) < _MAX_KEYS:
            into[key] = value
        else:
            into["(other)"] = into.get("(other)", 0) + value


def merge_parts(
    parts: Sequence[FilePart], workload: "Workload | None", max_staleness: int | None, max_errors: int
) -> RecordChecker:
    """One checker holding the sums of ``parts`` (in their order), as if it had read them all."""
    units = {part.unit for part in parts}
    checker = RecordChecker(workload, max_staleness, max_errors, unit=units.pop() if len(units) == 1 else "line")
    histograms = checker.histograms
    for part in parts:
        checker.records += part.records
        checker.records_failed += part.records_failed
        for name, count in part.failure_counts.items():
            checker.failure_counts[name] += count
        room = max_errors - len(checker.failures)
        checker.failures += [dataclasses.replace(f, source=part.path) for f in part.failures[:max(room, 0)]]
        _merge_keyed(checker.stop_reasons, part.stop_reasons)
        _merge_keyed(checker.versions, part.versions)
        _merge_keyed(checker.staleness, part.staleness)
        if part.newest_version is not None:
            newest = checker.newest_version
            checker.newest_version = part.newest_version if newest is None else max(newest, part.newest_version)
        checker.stop_not_logged += part.stop_not_logged
        histograms.counted += part.counted
        histograms.sums += part.sums
        histograms.maxes[:] = [max(a, b) for a, b in zip(histograms.maxes.tolist(), part.maxes.tolist())]
        histograms.hist.ravel()[part.bins] += part.bin_counts
        for name, count in part.flag_sums.items():
            histograms.flag_sums[name] += count
        histograms.invocations += part.invocations
        histograms.tool_calls += part.tool_calls
    return checker


def reconcile_files(
    inputs: Sequence[str | Path],
    workload: "Workload | None" = None,
    *,
    mapping: str = "capplan",
    tolerance: float = 0.05,
    max_staleness: int | None = None,
    max_errors: int = 20,
    plan_conversations: int | None = None,
    executor: str = "process",
    workers: int | None = None,
    ray_address: str | None = None,
    progress: Callable[[int, int], None] | None = None,
    batches: bool = True,
) -> "Reconciliation":
    """Reconcile every file named by ``inputs`` (files, directories, glob patterns) into one report.

    One file named as a file is :func:`capplan.reconcile.reconcile` exactly. Otherwise every file is
    one task on ``executor`` (see :func:`capplan.scale.run_tasks`), its counters are merged exactly,
    and each failure names its file and line.

    Parameters
    ----------
    inputs : sequence of str or Path
        Files, directories and glob patterns (see :func:`expand_inputs`).
    workload, mapping, tolerance, max_staleness, max_errors, plan_conversations, batches
        As :func:`capplan.reconcile.reconcile`.
    executor : {"process", "ray", "serial"}
        Where the files are counted.
    workers : int, optional
        Processes (or local Ray CPUs) [processes]; default the CPUs available.
    ray_address : str, optional
        An existing Ray cluster (``auto`` or ``HOST:PORT``).
    progress : callable, optional
        ``progress(done, total)``: bytes of one file, or files of several.

    Returns
    -------
    Reconciliation
        With ``files`` (per-file counts) and ``files_failed`` (files that could not be read, each
        tried twice) when several files were named; a failed file makes the result not ``ok``.

    Raises
    ------
    InputError
        Nothing to read, an unknown mapping, or no file could be read (the first error).
    """
    from capplan.reconcile import MAPPINGS, reconcile
    from capplan.reconcile.report import summarize
    from capplan.scale import run_tasks

    if mapping not in MAPPINGS:
        raise InputError(f"unknown mapping {mapping!r}; allowed: {', '.join(MAPPINGS)}")
    paths = expand_inputs(inputs)
    single = len(inputs) == 1 and len(paths) == 1 and Path(inputs[0]).is_file()
    if single and ray_address is None and executor != "ray":
        return reconcile(
            paths[0], workload, mapping=mapping, tolerance=tolerance, max_staleness=max_staleness,
            max_errors=max_errors, progress=progress, plan_conversations=plan_conversations, batches=batches,
        )
    tasks = [(str(p), PartTask(str(p), workload, mapping, max_staleness, max_errors, batches)) for p in paths]
    run = run_tasks(count_part, tasks, executor=executor, workers=workers, ray_address=ray_address, progress=progress)
    if not run.results:
        first = run.failures[0]
        raise InputError(f"no file could be reconciled; {first.name}: {first.error}")
    parts = list(run.results.values())
    checker = merge_parts(parts, workload, max_staleness, max_errors)
    source = " ".join(str(i) for i in inputs)
    result = summarize(checker, Path(source), mapping, sum(p.lines for p in parts), workload, tolerance, plan_conversations)
    notes = list(result.notes)
    notes.insert(0, f"{len(parts):,} file(s) read on {run.executor} ({run.workers} worker(s))")
    if run.failures:
        notes.append(f"{len(run.failures):,} file(s) could not be reconciled (each tried twice): see files_failed")
    return dataclasses.replace(
        result,
        notes=notes,
        files=[
            {"file": p.path, "lines": p.lines, "records": p.records, "records_failed": p.records_failed} for p in parts
        ],
        files_failed=[{"file": f.name, "error": f.error, "attempts": f.attempts} for f in run.failures],
    )
