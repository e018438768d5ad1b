"""Reconciling trajectory logs against the ledger: :func:`reconcile` (a log read into an observed ledger) and :func:`plan_records`.

A trainer needs more from a rollout than text: token IDs, the behaviour policy's version,
generation boundaries, log-probs, the stop reason and the tool observations. Re-tokenising a chat
string can break the alignment of actions and loss mask. This package reads the records an RL
pipeline logged, checks each one, and counts them into the same per-token-class ledger that
:func:`capplan.ledger.compute_ledger` plans, so a run can be compared with its plan.

The record (``capplan`` format, one JSON object per line, optionally gzip-compressed, or one row
of a Parquet file)::

    {"id": "ep-1", "token_ids": [...25 ints...],
     "origin":    "ppppppppppppaaaatttttaaaa",   # p prompt, a action, t tool (or ints 0/1/2)
     "loss_mask": "0000000000001111000001111",   # 1 = carries loss       (or ints 0/1)
     "turns": [[12, 16], [21, 25]],              # sampled span [start, end) of each invocation
     "cached_tokens": [0, 15],                   # optional: reused prefix per invocation
     "prefill_tokens": [12, 6],                  # optional: prefilled positions per invocation
     "logprobs": [-0.1, ...],                    # one per sampled position, or one per position
     "policy_version": 41, "trainer_version": 42, "stop_reason": "stop", "tool_wait_s": 1.5}

``token_ids`` may be replaced by ``counts`` (``{"prompt": 12, "action": 8, "tool": 5}``) when the
IDs were not kept; ``turns`` defaults to the maximal runs of action positions. Dumps of verl,
OpenRLHF and AReaL are read through :data:`MAPPINGS` (see ``docs/reconcile.md``).

The package, one concern per module:

* :mod:`capplan.reconcile.formats`: the mask coding and the record mappings (:data:`MAPPINGS`);
* :mod:`capplan.reconcile.readers`: JSONL (plain or gzip) and Parquet files, record by record;
* :mod:`capplan.reconcile.checks`: the per-record checks (:data:`RECORD_CHECKS`) and the counting
  of each record, which follows :mod:`capplan.ledger` exactly;
* :mod:`capplan.reconcile.histograms`: the fixed-size histograms and their percentiles;
* :mod:`capplan.reconcile.report`: the :class:`Reconciliation`, its summary and the comparison
  with the plan.

Memory stays flat: records are read a block (Parquet: a record batch) at a time, counted
into per-batch rows that are folded into fixed-size histograms (exact below 2,048, relative bin
width 2^-10 above), and only the first ``max_errors`` failures are kept.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

from capplan.errors import InputError
from capplan.reconcile.checks import LOGPROB_METHODS, RECORD_CHECKS, STOP_REASONS, Failure, RecordChecker
from capplan.reconcile.formats import CAPPLAN_COLUMNS, MAPPINGS
from capplan.reconcile.batch import count_batches
from capplan.reconcile.readers import NotJSON, TrajectoryLog
from capplan.reconcile.report import PlanRow, Reconciliation, summarize

if TYPE_CHECKING:
    from capplan.workload import Workload

__all__ = [
    "LOGPROB_METHODS",
    "MAPPINGS",
    "RECORD_CHECKS",
    "STOP_REASONS",
    "Failure",
    "PlanRow",
    "Reconciliation",
    "plan_records",
    "reconcile",
]

PROGRESS_EVERY = 4096
"""Records between two calls of ``reconcile``'s ``progress`` callback [records]."""


def reconcile(
    path: str | Path,
    workload: "Workload | None" = None,
    *,
    mapping: str = "capplan",
    tolerance: float = 0.05,
    max_staleness: int | None = None,
    max_errors: int = 20,
    progress: Callable[[int, int], None] | None = None,
    plan_conversations: int | None = None,
    batches: bool = True,
) -> Reconciliation:
    """Check every record of a trajectory log and count it into an observed ledger.

    Parameters
    ----------
    path : str or Path
        JSONL (optionally gzip-compressed, detected by its magic bytes) or Parquet file (by its magic
        bytes or a ``.parquet`` name).
    workload : Workload, optional
        What the records should look like (``training.loss_on``, ``drop_truncated``, the method)
        and the plan to compare with. Without it: loss on actions only, truncations kept,
        log-probs required, no scorers, no plan.
    mapping : str
        Record format: one of :data:`MAPPINGS`.
    tolerance : float
        Largest relative difference between an observed and a planned per-conversation mean
        [fraction].
    max_staleness : int, optional
        Largest allowed ``trainer_version - policy_version`` [versions]; the trainer version is the
        record's ``trainer_version``, else the newest policy version seen so far in the file.
    max_errors : int
        Failures kept with their line numbers; the rest are only counted.
    progress : callable, optional
        Called with ``(bytes_done, bytes_total)`` every few thousand records.
    plan_conversations : int, optional
        Monte Carlo sample size of the plan (default: the workload's ``sampling.conversations``).
    batches : bool
        Check capplan-format records in batches with numpy (``False``: one at a time; the result
        is the same, tested, only slower).

    Returns
    -------
    Reconciliation

    Raises
    ------
    InputError
        The file is missing, unreadable, empty, or Parquet without pyarrow; the mapping is unknown.

    Notes
    -----
    A per-conversation mean ``o`` matches its plan ``p`` when ``|o - p| <= tolerance * p`` (both
    zero also match). Counters the log cannot show (cache hits when no record logs
    ``cached_tokens`` or ``prefill_tokens``) are reported "not logged" rather than compared.

    Examples
    --------
    The replay example's record logged by a pipeline with automatic prefix reuse: turn 2 reuses the
    12 + 3 = 15 positions turn 1 computed and prefills 21 - 15 = 6:

    >>> import json, tempfile
    >>> from capplan.workload import load_workload
    >>> w = load_workload("seed-replay-auto")
    >>> log = Path(tempfile.mkdtemp()) / "rollouts.jsonl"
    >>> _ = log.write_text("".join(json.dumps(r) + chr(10) for r in plan_records(w)))
    >>> r = reconcile(log, w)
    >>> r.ok, r.ledger.per_conversation["prefill_forwarded"]["total"], r.ledger.per_conversation["cache_hit"]["total"]
    (True, 18.0, 15.0)
    """
    path = Path(path)
    if mapping not in MAPPINGS:
        raise InputError(f"unknown mapping {mapping!r}; allowed: {', '.join(MAPPINGS)}")
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    checker, lines = count_file(path, workload, mapping, max_staleness, max_errors, progress, batches)
    return summarize(checker, path, mapping, lines, workload, tolerance, plan_conversations)


def count_file(
    path: Path,
    workload: "Workload | None",
    mapping: str,
    max_staleness: int | None,
    max_errors: int,
    progress: Callable[[int, int], None] | None = None,
    batches: bool = True,
) -> tuple[RecordChecker, int]:
    """Check and count every record of one file; returns the checker and the lines (rows) read.

    Records of capplan's own format are checked in batches (:mod:`capplan.reconcile.batch`);
    the mappings, and ``batches=False``, check them one at a time. Both give the same result.

    Raises
    ------
    InputError
        As :func:`reconcile`.
    """
    read = MAPPINGS[mapping]
    with TrajectoryLog(path) as log:
        size = path.stat().st_size
        checker = RecordChecker(workload, max_staleness, max_errors, unit=log.unit)
        if batches and read is None:
            lines = count_batches(log, checker, progress, size)
        else:
            # capplan's own format reads only its own Parquet columns, like the batch path
            for line, value in log.records(list(CAPPLAN_COLUMNS) if read is None else None):
                if value.__class__ is NotJSON:
                    checker.malformed(line, value.message)
                    continue
                checker.feed(line, value, read)
                if progress is not None and not line % PROGRESS_EVERY:
                    progress(log.bytes_read(), size)
            lines = log.lines
    if progress is not None:
        progress(size, size)
    if checker.records == 0:
        raise InputError(f"{path}: no records (an empty file cannot show that a pipeline works)")
    return checker, lines


def plan_records(
    workload: "Workload", n: int | None = None, seed: int | None = None, logprobs: bool = True
) -> Iterator[dict[str, Any]]:
    """Records in capplan's format for conversations sampled from ``workload``'s plan.

    The conversations are those :func:`capplan.ledger.compute_ledger` samples with the same ``n``
    and ``seed``, so reconciling the records (with ``plan_conversations=n``) gives the plan's
    per-conversation ledger exactly. For tests, examples and benchmarks: a log of a real pipeline
    is what this package is for.

    Parameters
    ----------
    workload : Workload
        The plan.
    n : int, optional
        Conversations [records]; default ``sampling.conversations`` (1 for a fixed workload).
    seed : int, optional
        Overrides ``sampling.seed``.
    logprobs : bool
        Write a placeholder log-prob (-0.5) for every sampled position.

    Notes
    -----
    Cached positions per invocation are what the ledger counts as hits: the prefix earlier
    invocations computed (``reuse: auto``; nothing after a tool wait with ``evict``), the claimed
    reuse cut to the input (``explicit``), or none. A truncated conversation stops with
    ``length`` and, when the workload drops truncations, carries no loss.
    """
    from capplan.ledger import count_positions, sample_conversations
    from capplan.records import trajectory_record

    conv = sample_conversations(workload, n=n, seed=seed)
    _, aux = count_positions(workload, conv)
    hits = aux["claimed"].clip(max=aux["input_per_turn"])
    loss_on = workload.training.loss_on if workload.has_trainer else []
    for i in range(conv.n):
        invoked = [j for j in range(conv.actions.shape[1]) if conv.invoked[i, j]]
        yield trajectory_record(
            i,
            int(conv.prompt[i]),
            [(int(conv.actions[i, j]), int(conv.tools[i, j])) for j in invoked],
            [int(hits[i, j]) for j in invoked],
            loss_on=loss_on,
            truncated=bool(conv.truncated[i]),
            drop_truncated=workload.training.drop_truncated,
            policy_version=0,
            tool_wait_s=float(conv.waits_s[i].sum()),
            logprob=-0.5 if logprobs else None,
            rollout=workload.has_rollout,
        )
