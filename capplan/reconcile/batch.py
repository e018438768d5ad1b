"""The per-record checks over a batch of records at once (numpy), for the records that pass them all.

:func:`screen` evaluates every check of :data:`~capplan.reconcile.checks.RECORD_CHECKS` on
:class:`~capplan.reconcile.columns.Columns` and computes, for each record that passes them all,
the same row of counters :meth:`RecordChecker.check <capplan.reconcile.checks.RecordChecker.check>`
computes. :class:`BatchCounter` then walks the batch in file order: runs of clean records are
counted with array operations, and every other record (one that fails a check, or that the
columns could not represent exactly) is fed to the record-by-record checker, which reports it
with its usual message. The result is the record-by-record result: same counters, same failures
in the same order (tested on every bundled workload and every fixture).

Only the staleness bound depends on earlier records (the newest policy version so far); it is
applied while walking, so a record that exceeds it is handed to the record-by-record checker too.

Files are read as the record-by-record reader reads them wherever that decides what is counted:
JSONL in the same blocks (a stream that breaks part-way gives the same lines and the same failed
record), Parquet row group by row group with the same columns, in larger batches while nothing
goes wrong and in the same batches from a batch that does (a corrupt page breaks both at the same
row).

The counts come from runs of positions (:class:`Runs`), not from the positions themselves, so
their cost grows with a record's turns rather than its length.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator

from capplan.reconcile.checks import _MAX_KEYS, STOP_REASONS, RecordChecker
from capplan.reconcile.histograms import FLAG_CACHE_LOGGED, FLAG_KEPT, FLAG_TRUNCATED

if TYPE_CHECKING:
    from pathlib import Path

    import numpy as np

    from capplan.reconcile.columns import Columns
    from capplan.reconcile.readers import TrajectoryLog

_LENGTH = STOP_REASONS.index("length")
_LARGEST_VERSION = 2**53
"""Largest newest-policy-version the batch path computes lags with (the columns hold no larger)."""


@dataclass
class Screened:
    """What :func:`screen` found: which records pass every check, and their counter rows."""

    clean: "np.ndarray"
    """The record passes every check that does not depend on earlier records."""
    rows: "np.ndarray"
    """(n, 20) counter rows in the layout of :mod:`capplan.reconcile.histograms` (valid where clean)."""
    stop: "np.ndarray"
    """Stop reason codes (:data:`~capplan.reconcile.columns.STOP_CODES`, -1 not given)."""
    policy_version: "np.ndarray"
    """Policy versions (-1 not given)."""
    trainer_version: "np.ndarray"
    """Trainer versions (-1 not given)."""


FIELD_BITS = 21
"""Bits of each count packed in one int64 (:class:`Runs`): action, tool, prompt."""
_FIELD = (1 << FIELD_BITS) - 1
LONGEST_PACKED = 1 << FIELD_BITS
"""Positions a record may have for the packed counts [positions]; a longer one goes record by record."""
PROMPT_SHIFT, ACTION_SHIFT, TOOL_SHIFT = 2 * FIELD_BITS, 0, FIELD_BITS
"""Bit offset of each class's count in a packed count; the batch's origin codes are these
(:attr:`Columns.origin <capplan.reconcile.columns.Columns.origin>`), 255 for an invalid entry."""
TRAINED, UNTRAINED = 0, 64
"""Loss codes of the batch (255 invalid): added to an origin code, 64 shifts the count out of the word."""
INVALID = 255


class Workspace:
    """Large per-position buffers reused from batch to batch.

    A fresh array of a few MiB per batch is costly beyond its size: the allocator hands freed
    memory back to the system, and the next batch touches new pages (a page fault each, in system
    time). One buffer per use, grown when a batch needs more, keeps the pages.
    """

    def __init__(self) -> None:
        self._buffers: dict[str, Any] = {}

    def take(self, name: str, size: int, dtype: Any) -> "np.ndarray":
        """A buffer of ``size`` elements of ``dtype`` (contents undefined), the same memory each call."""
        import numpy as np

        buffer = self._buffers.get(name)
        if buffer is None or buffer.size < size or buffer.dtype != dtype:
            buffer = np.empty(size + size // 4, dtype=dtype)
            self._buffers[name] = buffer
        return buffer[:size]


def _unpack(packed: "np.ndarray") -> tuple["np.ndarray", "np.ndarray", "np.ndarray"]:
    """Action, tool and prompt counts of packed differences (:class:`Runs`)."""
    return packed & _FIELD, (packed >> FIELD_BITS) & _FIELD, (packed >> 2 * FIELD_BITS) & _FIELD


@functools.lru_cache(maxsize=1)
def _shift_tables() -> tuple["np.ndarray", "np.ndarray"]:
    """Per position code (origin code | loss code): the bit offset its class counts at, for every
    position and for trained positions only; 64 (counted nowhere) for an invalid entry, and for an
    untrained one in the second table."""
    import numpy as np

    counted = np.full(256, 64, dtype=np.int64)
    trained = np.full(256, 64, dtype=np.int64)
    for shift in (PROMPT_SHIFT, ACTION_SHIFT, TOOL_SHIFT):
        counted[shift | TRAINED] = counted[shift | UNTRAINED] = shift
        trained[shift | TRAINED] = shift
    return counted, trained


class Runs:
    """A batch's positions as maximal runs of one origin and one loss code, no run crossing the
    start of a record, with the action, tool and prompt positions before each run.

    A record has a handful of runs (its prompt, each turn, each tool observation), so the counts
    come from a few values per record; only finding the runs reads every position, one byte each.

    Counts are packed in one int64: action in bits 0-20, tool in bits 21-41, prompt from bit 42.
    Sums wrap modulo 2^64, but a difference of two running counts is exact in every field while
    each count between them is below 2^21 (:data:`LONGEST_PACKED`): one cumulative sum serves
    three counts, over any span inside a record.

    Runs are numbered from 1 (a binary search among their starts then gives a position's run
    without a subtraction); run ``R + 1`` starts at the end of the batch.

    Parameters
    ----------
    origin, loss : numpy.ndarray
        Origin and loss codes of every position (uint8, aligned: :class:`Columns` codes).
    offsets : numpy.ndarray
        Each record's first position, then the end (n + 1).
    workspace : Workspace
        Where the per-position buffers live.
    """

    def __init__(self, origin: "np.ndarray", loss: "np.ndarray", offsets: "np.ndarray", workspace: "Workspace") -> None:
        import numpy as np

        size = origin.size
        code = np.bitwise_or(origin, loss, out=workspace.take("code", size, np.uint8))
        boundary = workspace.take("boundary", size + 1, np.bool_)
        boundary[0] = True
        np.not_equal(code[1:], code[:-1], out=boundary[1:size])
        boundary[offsets] = True  # every record starts a run (the end, offsets[-1], is one too)
        starts = np.flatnonzero(boundary)  # each run's first position, then the end
        runs = starts.size - 1
        counted, trained = _shift_tables()
        codes = code[starts[:-1]]
        lengths = np.diff(starts)
        self.runs = runs
        self.start = np.empty(runs + 2, dtype=np.int64)
        """First position of each run (run R + 1: the end of the batch)."""
        self.start[0] = 0
        self.start[1:] = starts
        self.shift = np.zeros(runs + 2, dtype=np.int64)
        """Bit offset of each run's class (64: counted nowhere)."""
        np.take(counted, codes, out=self.shift[1:runs + 1])
        self.before = np.zeros(runs + 2, dtype=np.int64)
        """Packed action, tool and prompt positions before each run."""
        np.cumsum(np.left_shift(lengths, self.shift[1:runs + 1]), out=self.before[2:])
        self.trained_before = np.zeros(runs + 2, dtype=np.int64)
        """The same, of trained positions only."""
        np.cumsum(np.left_shift(lengths, np.take(trained, codes)), out=self.trained_before[2:])
        # packed counts before a position p of run r: before[r] + ((p - start[r]) << shift[r]),
        # which is offset[r] + p * weight[r] in the same arithmetic modulo 2^64
        self._weight = np.left_shift(1, self.shift)
        self._offset = self.before - self.start * self._weight
        # each run's number at its first position (the other positions are never read)
        self._run_at = workspace.take("run_at", size + 1, np.int32 if size < 2**31 - 2 else np.int64)
        self._run_at[starts] = np.arange(1, runs + 2, dtype=self._run_at.dtype)
        self._boundary = boundary
        self._starts = starts
        self.first = self._run_at[offsets].astype(np.int64)
        """Each record's first run (then R + 1): a record's runs are ``first[i]`` to ``first[i + 1] - 1``."""

    def per_record(self, before: "np.ndarray") -> "np.ndarray":
        """Packed counts of each record (``before``: :attr:`before` or :attr:`trained_before`)."""
        return before[self.first[1:]] - before[self.first[:-1]]

    def at(self, positions: "np.ndarray") -> "np.ndarray":
        """Packed action, tool and prompt positions before each of ``positions`` (0 to the end).

        Most positions asked for start a run (a record's start, a turn's start and end, the end
        of a prompt) or end one, whose number is read off; the others are found by a binary
        search among the runs' starts. Either way the cost is per position asked for, however
        long the records are.
        """
        import numpy as np

        run = self._run_at[positions].astype(np.int64)
        inner = np.flatnonzero(~self._boundary[positions])
        if inner.size:
            # inside a run: the run before the next one, when the next position starts one (the
            # last position of a turn, a common cache hit); else a binary search
            inside = positions[inner]
            ends = self._boundary[inside + 1]
            run[inner[ends]] = self._run_at[inside[ends] + 1] - 1
            if not ends.all():
                rest = inner[~ends]
                run[rest] = np.searchsorted(self._starts, positions[rest], side="right")
        return self._offset[run] + positions * self._weight[run]

    def record_of_runs(self) -> "np.ndarray":
        """The record of each run (R, from 0)."""
        import numpy as np

        n = self.first.size - 1
        return np.repeat(np.arange(n), np.diff(self.first))

    def tool_calls(self, record: "np.ndarray") -> "np.ndarray":
        """Per record: action -> tool transitions (a run of action positions followed by one of tool
        positions in the same record); ``record`` is :meth:`record_of_runs`."""
        import numpy as np

        shift = self.shift[1:self.runs + 1]
        pair = (shift[:-1] == ACTION_SHIFT) & (shift[1:] == TOOL_SHIFT) & (record[1:] == record[:-1])
        return np.bincount(record[1:][pair], minlength=self.first.size - 1)

    def action_spans(
        self, record: "np.ndarray", offsets: "np.ndarray", wanted: "np.ndarray"
    ) -> tuple["np.ndarray", "np.ndarray", "np.ndarray"]:
        """Maximal runs of action positions (of any loss code) of the ``wanted`` records: (record,
        start, end), starts and ends relative to the record; ``record`` is :meth:`record_of_runs`."""
        import numpy as np

        action = self.shift[1:self.runs + 1] == ACTION_SHIFT
        joins = action[:-1] & action[1:] & (record[1:] == record[:-1])  # run k + 1 goes on with run k's actions
        opens = action.copy()
        opens[1:] &= ~joins
        closes = action.copy()
        closes[:-1] &= ~joins
        first, last = np.flatnonzero(opens), np.flatnonzero(closes)
        span_record = record[first]
        keep = wanted[span_record]
        base = offsets[span_record]
        return span_record[keep], (self.start[first + 1] - base)[keep], (self.start[last + 2] - base)[keep]


def screen(
    cols: "Columns",
    *,
    allowed: frozenset[str],
    drop_truncated: bool,
    needs_logprobs: bool,
    rollout: bool,
    max_staleness: int | None,
    workspace: "Workspace | None" = None,
) -> Screened:
    """Run the record checks on a batch and count the records that pass them.

    Parameters
    ----------
    cols : Columns
        The batch.
    allowed : frozenset of str
        Token classes that may carry loss.
    drop_truncated, needs_logprobs, rollout : bool
        As :class:`~capplan.reconcile.checks.RecordChecker` derives them from the workload.
    max_staleness : int, optional
        Largest allowed ``trainer_version - policy_version`` [versions] (applied by the caller
        where the reference is the newest version so far).
    workspace : Workspace, optional
        Buffers kept from the previous batch.

    Returns
    -------
    Screened
    """
    import numpy as np

    n = cols.n
    clean = cols.exact.copy()
    origin, origin_offsets = cols.origin, cols.origin_offsets
    positions = np.diff(origin_offsets)
    # counts over spans of a record are packed in 21 bits; a record too long for them goes record
    # by record
    clean &= positions < LONGEST_PACKED
    if workspace is None:
        workspace = Workspace()
    # mask_lengths: the token count from token_ids, else counts; both masks that long
    has_ids = cols.token_ids >= 0
    counts = cols.counts.T  # prompt, action, tool
    counted = counts[0] + counts[1] + counts[2]
    tokens = np.where(has_ids, cols.token_ids, counted)
    clean &= has_ids | cols.has_counts
    clean &= ~(has_ids & cols.has_counts) | (counted == cols.token_ids)
    clean &= positions == tokens
    loss_positions = np.diff(cols.loss_offsets)
    clean &= loss_positions == tokens
    loss = cols.loss
    if loss.size != origin.size or not np.array_equal(cols.loss_offsets, origin_offsets):
        # some record's masks differ in length: compare position by position only where they agree
        loss = np.full(origin.size, UNTRAINED, dtype=np.uint8)
        same = clean & (loss_positions == positions)
        source = np.repeat(cols.loss_offsets[:-1] - origin_offsets[:-1], positions) + np.arange(origin.size)
        take = np.repeat(same, positions)
        loss[take] = cols.loss[source[take]]
    runs = Runs(origin, loss, origin_offsets, workspace)
    action, tool, prompt = _unpack(runs.per_record(runs.before))
    # well_formed: every origin and loss entry valid (a position with an invalid one is counted in
    # no class)
    clean &= action + tool + prompt == positions
    clean &= ~cols.has_counts | ((counts[0] == prompt) & (counts[1] == action) & (counts[2] == tool))
    trained_action, trained_tool, trained_prompt = _unpack(runs.per_record(runs.trained_before))
    # loss_classes
    for cls, trained in (("prompt", trained_prompt), ("action", trained_action), ("tool", trained_tool)):
        if cls not in allowed:
            clean &= trained == 0
    stop = cols.stop
    truncated = stop == _LENGTH
    dropped = truncated & drop_truncated
    # truncated_trained
    clean &= ~(dropped & ((trained_prompt + trained_action + trained_tool) > 0))
    rows = np.zeros((20, n), dtype=np.int64).T  # F-ordered: each column written and folded contiguously
    columns = rows.T
    columns[0], columns[1], columns[2] = prompt, action, tool
    columns[13], columns[14], columns[15] = trained_prompt, trained_action, trained_tool
    flags = np.where(dropped, 0, FLAG_KEPT) | np.where(truncated, FLAG_TRUNCATED, 0)
    if rollout:
        # stop_reason: one of the known reasons (the capplan format always logs one)
        clean &= stop >= 0
        # staleness: a version when the bound needs one (the bound itself is applied in order)
        if max_staleness is not None:
            clean &= cols.policy_version >= 0
        # staleness: no trainer_version older than the record's policy_version (the lag against
        # the newest version so far is never negative)
        clean &= (cols.trainer_version < 0) | (cols.policy_version < 0) | (cols.trainer_version >= cols.policy_version)
        clean &= _turns(cols, columns, prompt, action, needs_logprobs, runs)
        cache_logged = cols.has_cached | cols.has_prefill
        flags |= np.where(cache_logged, FLAG_CACHE_LOGGED, 0)
    # well_formed: tool_wait_s in [ms]
    wait = cols.tool_wait_s
    given = ~np.isnan(wait)
    finite = given & (np.abs(wait) <= 1e12)  # an infinite or absurd wait is refused row by row; no cast of it here
    columns[19] = np.where(finite, np.floor(np.where(finite, wait, 0.0) * 1000 + 0.5), 0).astype(np.int64)
    columns[18] = flags
    return Screened(clean, rows, stop, cols.policy_version, cols.trainer_version)


def _per_invocation(
    values: "np.ndarray", offsets: "np.ndarray", has: "np.ndarray", record: "np.ndarray", index: "np.ndarray",
    inv_offsets: "np.ndarray",
) -> tuple["np.ndarray", "np.ndarray"]:
    """A per-invocation list field (``cached_tokens``, ``prefill_tokens``) lined up with the
    invocations: its value and whether the record gives one per invocation.

    Parameters
    ----------
    values, offsets, has : numpy.ndarray
        The field's values end to end, each record's first value (then the end), and whether each
        record gives the field.
    record, index : numpy.ndarray
        Each invocation's record and its number in that record.
    inv_offsets : numpy.ndarray
        Per record, its first invocation (then the end).
    """
    import numpy as np

    given = has[record]
    if given.all() and np.array_equal(offsets, inv_offsets):
        return values[:record.size], given  # the common case: one value per invocation, in order
    given &= (np.diff(offsets) == np.diff(inv_offsets))[record]
    out = np.zeros(record.size, dtype=np.int64)
    out[given] = values[offsets[record[given]] + index[given]]
    return out, given


def _turns(
    cols: "Columns",
    columns: "np.ndarray",
    prompt: "np.ndarray",
    action: "np.ndarray",
    needs_logprobs: bool,
    runs: Runs,
) -> "np.ndarray":
    """turn_boundaries, cache_hits, sampled_are_actions and logprobs of generated records; fills
    their sampled, prefill, cache-hit, decode, invocation and tool-call columns (``columns``: the
    counter rows, a row per counter). ``runs`` holds the batch's positions as runs. Returns which
    records pass."""
    import numpy as np

    n = cols.n
    ok = np.ones(n, dtype=bool)
    offsets = cols.origin_offsets
    positions = np.diff(offsets)
    at = runs.at

    # the invocations: logged spans, or the runs of action positions
    derived = ~cols.has_turns
    logged_counts = np.diff(cols.turn_offsets)
    record = np.repeat(np.arange(n), logged_counts)
    start, end = cols.turn_starts, cols.turn_ends
    run_record = runs.record_of_runs()
    if derived.any():
        span_record, span_start, span_end = runs.action_spans(run_record, offsets, derived)
        order = np.argsort(np.concatenate([record, span_record]), kind="stable")
        record = np.concatenate([record, span_record])[order]
        start = np.concatenate([start, span_start])[order]
        end = np.concatenate([end, span_end])[order]
        invocations = np.bincount(record, minlength=n)
    else:
        invocations = logged_counts  # already in record order
    m = record.size
    inv_offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(invocations, out=inv_offsets[1:])
    firsts = inv_offsets[:-1]
    index = np.arange(m) - firsts[record]  # j, the invocation's number in its record
    opening = firsts[invocations > 0]  # each record's first invocation

    def previous(values: "np.ndarray") -> "np.ndarray":
        """The value of the invocation before, in the same record (0 for a record's first)."""
        out = np.empty(values.size, dtype=np.int64)
        out[1:] = values[:-1]
        out[opening] = 0
        return out

    # turn_boundaries: spans ordered and inside the record
    inside = (previous(end) <= start) & (start <= end) & (end <= positions[record])
    if not inside.all():
        ok[record[~inside]] = False
        start = np.where(inside, start, 0)
        end = np.where(inside, end, 0)
    # turn_boundaries: one cached_tokens / prefill_tokens entry per invocation
    cached_counts = np.diff(cols.cached_offsets)
    prefill_counts = np.diff(cols.prefill_offsets)
    ok &= ~cols.has_cached | (cached_counts == invocations)
    ok &= ~cols.has_prefill | (prefill_counts == invocations)
    base = offsets[:-1]
    # sampled_are_actions: the spans hold exactly the action positions (checked below)
    span_base = base[record]
    length = end - start
    # cache_hits: each claim within what earlier invocations computed; prefill + cached = input
    previous_start, previous_end = previous(start), previous(end)
    computed = np.where(previous_end > previous_start, previous_end - 1, previous_start)  # 0 for a first
    cached, has_cached = _per_invocation(cols.cached, cols.cached_offsets, cols.has_cached, record, index, inv_offsets)
    prefill, has_prefill = _per_invocation(cols.prefill, cols.prefill_offsets, cols.has_prefill, record, index, inv_offsets)
    hit = np.where(has_cached, cached, np.where(has_prefill, start - prefill, 0))
    claim_ok = (hit >= 0) & (hit <= computed) & (~(has_cached & has_prefill) | (cached + prefill == start))
    if not claim_ok.all():
        ok[record[~claim_ok]] = False
        np.maximum(hit, 0, out=hit)
    np.minimum(hit, positions[record], out=hit)
    # the packed counts at every span's start and end and before every cache hit, at once
    spans = np.empty((3, m), dtype=np.int64)
    np.add(span_base, start, out=spans[0])
    np.add(span_base, end, out=spans[1])
    np.add(span_base, hit, out=spans[2])
    packed_spans = at(spans.ravel()).reshape(3, m)
    # turn_boundaries: the prompt a prefix (no action or tool before its end), no tool observation
    # before the first turn (a record without turns: before its end)
    at_start = runs.before[runs.first[:-1]]
    at_first = runs.before[runs.first[1:]]
    has_any = invocations > 0
    at_first[has_any] = packed_spans[0][firsts[has_any]]
    at_prompt_end = at(base + np.minimum(prompt, positions))
    ok &= ((at_prompt_end - at_start) & ((1 << 2 * FIELD_BITS) - 1)) == 0  # action and tool: zero when both are
    ok &= (((at_first - at_start) >> FIELD_BITS) & _FIELD) == 0
    prompt_r = prompt[record]
    cumulative = np.zeros(m + 1, dtype=np.int64)
    np.cumsum(length, out=cumulative[1:])
    terms = np.empty((9, m), dtype=np.int64)
    np.bitwise_and(packed_spans[1] - packed_spans[0], _FIELD, out=terms[0])  # action positions in the span
    terms[1] = start  # its input
    np.minimum(start, prompt_r, out=terms[2])  # its input's prompt positions
    np.subtract(cumulative[:-1], cumulative[firsts][record], out=terms[3])  # its input's sampled positions
    terms[4] = hit
    np.minimum(hit, prompt_r, out=terms[5])  # the hit's prompt positions
    np.bitwise_and(packed_spans[2] - at_start[record], _FIELD, out=terms[6])  # the hit's action positions
    np.greater(length, 0, out=terms[7])
    terms[8] = length
    # each record's invocations are consecutive: every quantity summed per record from one
    # cumulative sum of them all, quantity after quantity
    cumulative_terms = np.zeros(terms.size + 1, dtype=np.int64)
    np.cumsum(terms.ravel(), out=cumulative_terms[1:])
    row = (np.arange(terms.shape[0], dtype=np.int64) * m)[:, None]
    sums = cumulative_terms[row + inv_offsets[1:]] - cumulative_terms[row + firsts]
    in_spans, input_total, input_prompt, input_action, hit, hit_p, hit_a, nonempty, sampled = sums
    hit_t = hit - hit_p - hit_a
    ok &= derived | ((in_spans == sampled) & (sampled == action))
    # logprobs: one per sampled position (or per position), every one a finite number, none above
    # 0 (a record with a log-prob above 0 anywhere goes record by record: only those at sampled
    # positions fail it)
    count = cols.logprobs
    absent = count < 0
    lp_ok = np.where(absent, ~(needs_logprobs & (sampled > 0)), (count == sampled) | (count == positions))
    ok &= lp_ok & ~cols.logprobs_positive
    columns[4] = sampled  # sampled: action positions only (consistent records)
    columns[6] = input_prompt - hit_p
    columns[7] = input_action - hit_a
    columns[8] = input_total - input_prompt - input_action - hit_t
    columns[9], columns[10], columns[11] = hit_p, hit_a, hit_t
    columns[12] = sampled - nonempty
    columns[16] = invocations
    columns[17] = runs.tool_calls(run_record)  # action -> tool transitions inside a record
    return ok


def _key_counts(values: "np.ndarray") -> tuple[list[int], list[int]]:
    """The distinct values in ascending order and how often each occurs (a bincount when they span
    a short range, as versions and lags do; else a sort)."""
    import numpy as np

    if values.size == 0:
        return [], []
    low, high = int(values.min()), int(values.max())
    if high - low <= 4 * values.size + 1024:
        hits = np.bincount(values - low)
        keys = np.flatnonzero(hits)
        return (keys + low).tolist(), hits[keys].tolist()
    keys, hits = np.unique(values, return_counts=True)
    return keys.tolist(), hits.tolist()


class BatchCounter:
    """Feeds batches to a :class:`RecordChecker`: clean runs counted at once, the rest one by one.

    Parameters
    ----------
    checker : RecordChecker
        The checker whose state (counters, histograms, failures) is updated.
    """

    def __init__(self, checker: RecordChecker) -> None:
        self.checker = checker
        self.rules = {
            "allowed": checker.allowed,
            "drop_truncated": checker.drop_truncated,
            "needs_logprobs": checker.needs_logprobs,
            "rollout": checker.rollout,
            "max_staleness": checker.max_staleness,
        }
        self.workspace = Workspace()
        self.capped = False
        """Past the cap on distinct versions or lags, or past a version too large for int64
        arithmetic: every record goes record by record."""

    def feed(
        self,
        cols: "Columns",
        lines: "np.ndarray",
        record: Callable[[int], Any],
        read: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> None:
        """Check and count a batch in order.

        Parameters
        ----------
        cols : Columns
            The batch.
        lines : numpy.ndarray
            Line (or row) number of each record.
        record : callable
            ``record(i)`` -> the i-th record as the record-by-record checker reads it (a dict,
            or a :class:`~capplan.reconcile.readers.NotJSON`).
        """
        import numpy as np

        screened = screen(cols, **self.rules, workspace=self.workspace)
        clean = screened.clean
        n = cols.n
        i = 0
        while i < n:
            if clean[i] and not self.capped:
                stop_at = np.flatnonzero(~clean[i:])
                j = self._clean_run(screened, i, n if stop_at.size == 0 else i + int(stop_at[0]))
                if j > i:
                    i = j
                    continue
            # a record that fails a check, was not read exactly, or exceeds the staleness bound
            self._one(int(lines[i]), record(i), read)
            i += 1

    def _one(self, line: int, value: Any, read: Callable[[dict[str, Any]], dict[str, Any]] | None) -> None:
        from capplan.reconcile.readers import BLANK, NotJSON

        if value is BLANK:
            return
        if value.__class__ is NotJSON:
            self.checker.malformed(line, value.message)
        else:
            self.checker.feed(line, value, read)

    def _clean_run(self, screened: Screened, i: int, j: int) -> int:
        """Count clean records ``i`` to ``j - 1`` in order; stop before the first one whose
        staleness exceeds the bound (it fails: the record-by-record checker reports it). Returns
        where counting stopped (``i``: nothing counted)."""
        import numpy as np

        checker = self.checker
        if checker.rollout:
            if checker.newest_version is not None and checker.newest_version > _LARGEST_VERSION:
                self.capped = True  # a version past int64 arithmetic: from here on, record by record
                return i
            versions = screened.policy_version[i:j]
            trainers = screened.trainer_version[i:j]
            given = versions >= 0
            newest = -1 if checker.newest_version is None else checker.newest_version
            running = np.maximum(np.maximum.accumulate(np.where(given, versions, -1)), newest)
            lag = np.where(trainers >= 0, trainers - versions, running - versions)
            limit = checker.max_staleness
            if limit is not None:
                over = np.flatnonzero(given & (lag > limit))
                if over.size:
                    j = i + int(over[0])
                    if j == i:
                        return i
                    versions, given, running, lag = versions[: j - i], given[: j - i], running[: j - i], lag[: j - i]
            if not self._count_versions(versions[given], lag[given]):
                self.capped = True  # from here on, record by record (exact "(other)" counting)
                return i
            if given.any():
                checker.newest_version = int(running[-1])
            self._count_stops(screened.stop[i:j])
        checker.records += j - i
        checker.histograms.fold(screened.rows[i:j])
        return j

    def _count_versions(self, versions: "np.ndarray", lags: "np.ndarray") -> bool:
        """Add the versions and lags to the checker's histograms; False (nothing added) when that
        would pass the cap on distinct keys."""
        import numpy as np

        checker = self.checker
        new = []
        for counts, values in ((checker.versions, versions), (checker.staleness, lags)):
            keys, hits = _key_counts(values)
            fresh = sum(1 for k in keys if k not in counts)
            if len(counts) + fresh > _MAX_KEYS:
                return False
            new.append((counts, keys, hits))
        for counts, keys, hits in new:
            for key, hit in zip(keys, hits):
                counts[key] = counts.get(key, 0) + hit
        return True

    def _count_stops(self, stops: "np.ndarray") -> None:
        """Add the stop reasons, new ones in the order they first occur."""
        import numpy as np

        counts = self.checker.stop_reasons
        hits = np.bincount(stops.astype(np.intp), minlength=len(STOP_REASONS))  # clean records: codes >= 0
        present = np.flatnonzero(hits).tolist()
        for code in sorted(present, key=lambda c: int(np.argmax(stops == c))):
            name = STOP_REASONS[code]
            counts[name] = counts.get(name, 0) + int(hits[code])


BATCH_RECORDS = 2048
"""Records checked together [records] (Parquet: :data:`~capplan.reconcile.readers.PARQUET_BATCH_ROWS`)."""


def count_batches(
    log: "TrajectoryLog", checker: RecordChecker, progress: Callable[[int, int], None] | None, size: int
) -> int:
    """Check and count every record of an open log (capplan's format) in batches; returns the
    lines (or Parquet rows) read, as the record-by-record reader counts them.

    A gzip stream that breaks part-way, or a Parquet row group with a corrupt page, is one failed
    record at the same line (row) and with the same message as in the record-by-record path, and
    the records before it (Parquet: in the other row groups) are counted.

    Raises
    ------
    InputError
        The file cannot be read before its first line, or it is Parquet and pyarrow is missing or
        the footer is corrupt.
    """
    _settle_allocator()
    counter = BatchCounter(checker)
    if log.parquet:
        return _count_parquet(log, counter, progress, size)
    return _count_jsonl(log, counter, progress, size)


@functools.cache
def _settle_allocator() -> None:
    """Once per process: let the C allocator keep the memory a batch frees for the next batch.

    glibc's malloc maps a block larger than its mmap threshold (128 KiB at first) on its own and
    unmaps it when freed, and gives the top of its heap back to the system once more than twice
    that is free; both thresholds rise to the size of a mapped block when it is freed (up to
    32 MiB). Every batch allocates and frees arrays and byte strings of some 100 KiB, a few MiB
    in all, so until the thresholds have risen past that, each batch faults its pages in again:
    in system time, about half of it on a JSONL file. Freeing one untouched 16 MiB array raises
    them at once, as a long-running process's large frees would; another allocator merely
    allocates and frees it.
    """
    import numpy as np

    np.empty(16 << 20, dtype=np.uint8)  # allocated (no page touched) and freed at once


def _report(progress: Callable[[int, int], None] | None, before: int, after: int, done: int, size: int) -> None:
    """Call ``progress`` once per :data:`~capplan.reconcile.PROGRESS_EVERY` records passed."""
    from capplan.reconcile import PROGRESS_EVERY

    if progress is not None:
        for _ in range(after // PROGRESS_EVERY - before // PROGRESS_EVERY):
            progress(done, size)


def _line_groups(fh: Any, block_bytes: int) -> Iterator[tuple["bytes | memoryview", "np.ndarray"]]:
    """The regions of :func:`~capplan.reconcile.readers.line_regions` joined until they hold at
    least :data:`BATCH_RECORDS` lines, each with the positions of its line feeds. A region that
    is a group alone is the reader's view (valid until the next group is asked for). A read error
    is raised after the lines read before it."""
    import numpy as np

    from capplan.reconcile.readers import READ_ERRORS, line_regions

    regions = line_regions(fh, block_bytes)
    pending: list[tuple[bytes, "np.ndarray"]] = []
    lines = 0
    error: BaseException | None = None
    workspace = Workspace()
    while True:
        try:
            region = next(regions)
        except StopIteration:
            break
        except READ_ERRORS as exc:
            error = exc
            break
        chars = np.frombuffer(region, dtype=np.uint8)
        feeds = np.flatnonzero(np.equal(chars, ord("\n"), out=workspace.take("feeds", chars.size, np.bool_)))  # few: a fast scan
        if not pending and feeds.size >= BATCH_RECORDS:
            yield region, feeds
            continue
        pending.append((region.tobytes(), feeds))  # the reader reuses its buffer
        lines += feeds.size
        if lines >= BATCH_RECORDS:
            yield _joined_regions(pending)
            pending, lines = [], 0
    if pending:
        yield _joined_regions(pending)
    if error is not None:
        raise error


def _joined_regions(regions: list[tuple[bytes, "np.ndarray"]]) -> tuple[bytes, "np.ndarray"]:
    """Regions of lines end to end, with their line feeds' positions."""
    import numpy as np

    if len(regions) == 1:
        return regions[0]
    starts = np.cumsum([0] + [len(region) for region, _ in regions[:-1]])
    return b"".join(region for region, _ in regions), np.concatenate([f + s for (_, f), s in zip(regions, starts)])


def _decode_group(group: "bytes | memoryview", feeds: "np.ndarray") -> "list[Any] | None":
    """The records of a group of lines (:func:`_line_groups`) in one call, when that surely reads
    each line as decoding it on its own would: every line an object from its first byte to its
    last (``{`` to ``}``), ASCII, and one record per line. Else ``None``.

    ``msgspec``'s ``decode_lines`` reads a stream of JSON values without regard to lines; but a
    value cannot go on past a line feed that follows a ``}`` and precedes a ``{`` (no JSON text
    has ``}`` then ``{``), so no value spans two such lines, and as many values as lines means one
    per line.
    """
    import msgspec
    import numpy as np

    from capplan.reconcile.columns import LINE_DECODER

    chars = np.frombuffer(group, dtype=np.uint8)
    if not (
        feeds.size and feeds[0] > 0 and chars[0] == ord("{")
        and bool(np.all(chars[feeds - 1] == ord("}")))
        and bool(np.all(chars[feeds[:-1] + 1] == ord("{")))
        and int(chars.max()) < 0x80
    ):
        return None
    try:
        records = LINE_DECODER.decode_lines(group)
    except (msgspec.DecodeError, RecursionError):
        return None
    return records if len(records) == feeds.size else None


def _line_reader(group: "bytes | memoryview", starts: "np.ndarray", feeds: "np.ndarray") -> Callable[[int], bytes]:
    """``line(i)``: the i-th line of a group of lines (without its line feed)."""
    return lambda i: bytes(group[starts[i]:feeds[i]])


def _count_jsonl(log: "TrajectoryLog", counter: BatchCounter, progress: Callable[[int, int], None] | None, size: int) -> int:
    import msgspec
    import numpy as np

    from capplan.errors import InputError
    from capplan.reconcile.columns import LineRecord, decode_lines, from_line_records
    from capplan.reconcile.readers import READ_ERRORS, decode_line, open_jsonl, stream_broken

    fh, block_bytes, tell, log._close = open_jsonl(log.path)
    groups = _line_groups(fh, block_bytes)
    number = 0
    placeholder = LineRecord(origin=msgspec.Raw(b'""'), loss_mask=msgspec.Raw(b'""'))
    while True:
        try:
            group, feeds = next(groups)
        except StopIteration:
            return number
        except READ_ERRORS as exc:
            # as the record-by-record reader: what was read is counted, the break is a failed record
            if number == 0:
                raise InputError(f"{log.path}: unreadable after line 0: {exc}") from None
            number += 1
            counter.checker.malformed(number, stream_broken(log.path, number - 1, tell(), exc).message)
            return number
        n = feeds.size
        starts = np.empty(n, dtype=np.int64)
        starts[0] = 0
        starts[1:] = feeds[:-1] + 1
        line_bytes = feeds - starts
        decoded = _decode_group(group, feeds)
        unread: list[int] = []
        line: Callable[[int], bytes]
        if decoded is not None:
            ascii_lines = True
            line = _line_reader(group, starts, feeds)
        else:
            # line by line: some line is not an object from its first byte to its last, or not
            # ASCII, or not a record
            text = bytes(group)
            lines = text.split(b"\n")
            lines.pop()
            ascii_lines = text.isascii()
            line = lines.__getitem__
            decoded, unread = decode_lines(lines)
            for i in unread:
                decoded[i] = placeholder
        cols = from_line_records(decoded, line_bytes, line, ascii_lines)  # type: ignore[arg-type]
        cols.exact[unread] = False
        numbers = np.arange(number + 1, number + 1 + n)
        counter.feed(cols, numbers, lambda i: decode_line(line(i)))
        _report(progress, number, number + n, tell(), size)
        number += n


@functools.lru_cache(maxsize=256)
def _plain_type(kind: Any) -> bool:
    """Whether every value of an Arrow type converts to Python without fail (no strings: a string
    that is not UTF-8 fails; no dates, decimals or extension types)."""
    import pyarrow as pa

    t = pa.types
    if t.is_integer(kind) or t.is_floating(kind) or t.is_boolean(kind) or t.is_null(kind):
        return True
    if t.is_binary(kind) or t.is_large_binary(kind):
        return True
    if t.is_list(kind) or t.is_large_list(kind) or t.is_fixed_size_list(kind):
        return _plain_type(kind.value_type)
    if t.is_struct(kind):
        return all(_plain_type(kind.field(i).type) for i in range(kind.num_fields))
    return False


def _conversion_may_fail(batch: Any) -> bool:
    """Whether ``batch.to_pylist()`` might raise (a string that is not ASCII, which may not be
    UTF-8, or a type :func:`_plain_type` does not vouch for). The record-by-record reader converts
    every batch and counts a failure as an unreadable row group, so such a batch is converted
    whole before any of its rows is counted."""
    import numpy as np
    import pyarrow as pa

    for arr in batch.columns:
        kind = arr.type
        if pa.types.is_string(kind) or pa.types.is_large_string(kind):
            data = arr.buffers()[2]
            if data is not None and data.size and int(np.frombuffer(data, dtype=np.uint8).max()) >= 0x80:
                return True
        elif not _plain_type(kind):
            return True
    return False


PARQUET_CHECK_ROWS = 8192
"""Parquet rows read and checked together [rows], rounded down to a multiple of
:data:`~capplan.reconcile.readers.PARQUET_BATCH_ROWS`: the checks cost mostly a fixed amount per
numpy call, so they run on fewer, larger batches than the record-by-record path reads."""


def _parquet_check_batches(
    parquet_file: Any, path: "Path", columns: list[str]
) -> Iterator[tuple[int, Any, list[dict[str, Any]] | None]]:
    """The record batches to check, as :func:`~capplan.reconcile.readers.parquet_batches`
    yields them, in batches of :data:`PARQUET_CHECK_ROWS` while nothing goes wrong.

    From the first batch of a row group that does (a page that cannot be read, or strings whose
    conversion may fail: :func:`_conversion_may_fail`), that group is read on as the
    record-by-record path reads it (:func:`~capplan.reconcile.readers.group_batches`), so it
    breaks at the same row with the same message. A larger batch holds whole batches of the
    record-by-record path and reads the same pages, so the rows before it read alike.
    """
    from capplan.reconcile.readers import PARQUET_BATCH_ROWS, group_batches

    size = max(PARQUET_CHECK_ROWS // PARQUET_BATCH_ROWS, 1) * PARQUET_BATCH_ROWS
    metadata = parquet_file.metadata
    first = 0
    for group in range(metadata.num_row_groups):
        read = 0
        batches = parquet_file.iter_batches(batch_size=size, row_groups=[group], columns=columns, use_threads=False)
        while True:
            try:
                batch = next(batches)
                trouble = _conversion_may_fail(batch)
            except StopIteration:
                break
            except Exception:  # noqa: BLE001 - pyarrow raises several types for a corrupt page
                trouble = True
            if trouble:
                yield from group_batches(parquet_file, path, columns, _conversion_may_fail, group, first, skip=read)
                break
            yield first + read + 1, batch, None
            read += batch.num_rows
        first += metadata.row_group(group).num_rows


def _count_parquet(
    log: "TrajectoryLog", counter: BatchCounter, progress: Callable[[int, int], None] | None, size: int
) -> int:
    from capplan.reconcile.columns import PARQUET_COLUMNS
    from capplan.reconcile.readers import NotJSON, open_parquet

    parquet_file = open_parquet(log.path)
    total_rows = max(parquet_file.metadata.num_rows, 1)
    names = set(parquet_file.schema_arrow.names)
    columns = [c for c in PARQUET_COLUMNS if c in names]
    number = 0
    for first, batch, rows in _parquet_check_batches(parquet_file, log.path, columns):
        if batch.__class__ is NotJSON:  # a row group with a corrupt page, from row `first` on
            counter.checker.malformed(first, batch.message)
            number = first
            continue
        n = batch.num_rows
        if n == 0:
            continue
        _check_parquet_batch(counter, first, batch, rows)
        _report(progress, number, first + n - 1, (first + n - 1) * size // total_rows, size)
        number = first + n - 1
    return number


def _check_parquet_batch(counter: BatchCounter, first: int, batch: Any, rows: list[dict[str, Any]] | None) -> None:
    """Check and count the rows of one record batch, the first being row ``first``; ``rows`` is
    the batch as dicts when the reader converted it."""
    import numpy as np

    from capplan.reconcile.columns import Unsupported, from_arrow

    try:
        cols = from_arrow(batch)
    except Unsupported:
        for k, row in enumerate(batch.to_pylist() if rows is None else rows):
            counter.checker.feed(first + k, row, None)
        return
    numbers = np.arange(first, first + batch.num_rows)
    if rows is None:
        counter.feed(cols, numbers, lambda i: batch.slice(i, 1).to_pylist()[0])
    else:
        counter.feed(cols, numbers, rows.__getitem__)
