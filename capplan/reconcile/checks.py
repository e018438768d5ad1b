"""Per-record checks: each record's masks, loss classes, turns, cache hits, log-probs, versions and stop reason.

:class:`RecordChecker` reads one record at a time, runs the checks of :data:`RECORD_CHECKS` in a
fixed order (so the failures of a file are always listed the same way), and counts every
well-formed record as one row of :class:`~capplan.reconcile.histograms.Accumulator`.

Counting follows :mod:`capplan.ledger` exactly: invocation ``j`` samples the span
``[s_j, e_j)`` and its input is every position before ``s_j``; its cache hit is its
``cached_tokens`` entry (or input minus ``prefill_tokens``; zero when neither is logged), split by
the classes of the first positions; decode forwards ``max(e_j - s_j - 1, 0)`` positions; trained
positions are the loss mask as logged.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from capplan.reconcile.formats import IS_ACTION, IS_CLASS, IS_PROMPT, BadRecord, loss_bytes, origin_bytes, turn_spans
from capplan.reconcile.histograms import FLAG_CACHE_LOGGED, FLAG_KEPT, FLAG_TRUNCATED, Accumulator
from capplan.workload import TOKEN_CLASSES

if TYPE_CHECKING:
    from capplan.workload import Workload

STOP_REASONS: tuple[str, ...] = ("stop", "length", "tool_calls", "abort")
"""Known stop reasons: end of sequence or stop string, generation limit (truncated), the turn ended
to call a tool, cancelled or interrupted."""

RECORD_CHECKS: dict[str, str] = {
    "well_formed": "the line is a JSON object with the required fields, of the right types",
    "mask_lengths": "origin and loss masks (and counts) have the record's token count",
    "sampled_are_actions": "the positions inside the turn spans are exactly the action positions of the origin mask",
    "loss_classes": "loss only on the token classes the workload trains (training.loss_on; action by default)",
    "logprobs": "a finite, non-positive behaviour log-prob for every sampled position (required by outcome-rl and "
    "multi-turn-rl)",
    "turn_boundaries": "turn spans ordered and inside the record, the prompt a prefix, no tool observation "
    "before the first turn, one per-invocation entry per turn",
    "cache_hits": "no invocation reuses more positions than earlier invocations of the conversation computed "
    "(the first, at most the prompt when the workload's GRPO groups share it); prefill + cached = the invocation's input",
    "staleness": "0 <= trainer version - policy version <= --max-staleness",
    "stop_reason": "the stop reason is one of " + ", ".join(STOP_REASONS),
    "truncated_trained": "no loss on a truncated response (stop_reason length) when the workload drops truncations",
}
"""Per-record checks, by name (a JSON contract), with what each one asserts."""

LOGPROB_METHODS: frozenset[str] = frozenset({"outcome-rl", "multi-turn-rl"})
"""Methods whose objective needs the behaviour policy's log-probs (importance ratios, clipping)."""

_STOP_SET = frozenset(STOP_REASONS)
_CLASS_KEYS = frozenset(TOKEN_CLASSES)
_RUNS_OF_ACTIONS = re.compile(rb"\x01+")
_NOTHING_TRAINED = (0, 0, 0)
_NOT_GENERATED = (0,) * 13  # what _turns counts for a record no engine generated
_MAX_KEYS = 65536  # distinct policy versions / lags / stop reasons kept; the rest count as "(other)"


@dataclass(frozen=True)
class Failure:
    """One failed check of one record."""

    line: int
    check: str
    field: str
    message: str
    record_id: str | None = None
    unit: str = "line"
    source: str | None = None
    """The file, when a reconciliation reads several."""

    def __str__(self) -> str:
        """One line for a terminal or a log: the record's ``id`` and the message have their control
        characters and line breaks escaped, so a record cannot forge a line (``ok   all checks passed``)."""
        from capplan.output import printable

        rid = ""
        if self.record_id is not None:
            shown = printable(self.record_id)
            rid = f" (id {shown if len(shown) <= 80 else shown[:77] + '...'})"
        where = f"{self.source} " if self.source is not None else ""
        return printable(f"{where}{self.unit} {self.line}{rid}: {self.field}: {self.message} [{self.check}]")

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {} if self.source is None else {"file": self.source}
        out.update({
            self.unit: self.line,
            "id": self.record_id,
            "check": self.check,
            "field": self.field,
            "message": self.message,
        })
        return out


def _bump(counts: dict[Any, int], key: Any, cap: int = _MAX_KEYS) -> None:
    """Count ``key``; past ``cap`` distinct keys a new key counts as ``"(other)"``."""
    if key in counts:
        counts[key] += 1
    elif len(counts) < cap:
        counts[key] = 1
    else:
        counts["(other)"] = counts.get("(other)", 0) + 1


def _class_counts(value: Any) -> tuple[int, int, int]:
    """The ``counts`` field as ``(prompt, action, tool)``."""
    if type(value) is dict and value.keys() <= _CLASS_KEYS:
        prompt, action, tool = value.get("prompt", 0), value.get("action", 0), value.get("tool", 0)
        if (
            type(prompt) is int and type(action) is int and type(tool) is int
            and prompt >= 0 and action >= 0 and tool >= 0
        ):
            return prompt, action, tool
    raise BadRecord("counts", "must map prompt/action/tool to non-negative integers")


def _per_turn(values: Any, turns: int, field: str) -> None:
    """Raise unless ``values`` holds one non-negative integer per turn."""
    if type(values) is not list or len(values) != turns:
        got = len(values) if type(values) is list else type(values).__name__
        raise BadRecord(field, f"needs one entry per turn: {turns} turns, got {got}", check="turn_boundaries")
    for j, value in enumerate(values):
        if type(value) is not int or value < 0:
            raise BadRecord(f"{field}[{j}]", f"{value!r} is not a non-negative integer", check="turn_boundaries")


def _split_by_counting(
    origin: bytes, spans: Any, cached: list[int] | None, prefilled: list[int] | None
) -> tuple[int, int, int, int, int, int]:
    """Prefill and cache-hit positions by class, counted from the origin mask.

    For a record whose prompt is not a prefix or whose spans are not exactly its action runs (it
    has failed a check already); a consistent record is split with arithmetic on its spans.
    Returns ``(prefill prompt, action, tool, cache-hit prompt, action, tool)``.
    """
    prefill_prompt = prefill_action = prefill_tool = hit_prompt = hit_action = hit_tool = 0
    for j, (start, _end) in enumerate(spans):
        if cached is not None:
            hit = cached[j]
        elif prefilled is not None:
            hit = max(start - prefilled[j], 0)
        else:
            hit = 0
        hit = min(hit, start)
        input_prompt, input_action = origin.count(0, 0, start), origin.count(1, 0, start)
        turn_hit_prompt, turn_hit_action = origin.count(0, 0, hit), origin.count(1, 0, hit)
        hit_prompt += turn_hit_prompt
        hit_action += turn_hit_action
        hit_tool += hit - turn_hit_prompt - turn_hit_action
        prefill_prompt += input_prompt - turn_hit_prompt
        prefill_action += input_action - turn_hit_action
        prefill_tool += start - input_prompt - input_action - (hit - turn_hit_prompt - turn_hit_action)
    return prefill_prompt, prefill_action, prefill_tool, hit_prompt, hit_action, hit_tool


class RecordChecker:
    """Checks records one at a time and counts the well-formed ones into an :class:`Accumulator`.

    Parameters
    ----------
    workload : Workload, optional
        What records must look like (trained classes, dropped truncations, log-probs, scorers);
        without it: loss on actions only, truncations kept, log-probs required, no scorers.
    max_staleness : int, optional
        Largest allowed ``trainer_version - policy_version`` [versions].
    max_errors : int
        Failures kept with their line numbers; the rest are only counted.
    unit : {"line", "row"}
        What a record's number counts in the file.
    """

    def __init__(self, workload: "Workload | None", max_staleness: int | None, max_errors: int, unit: str) -> None:
        self.unit = unit
        self.max_errors = max_errors
        self.max_staleness = max_staleness
        # the first turn may reuse the prompt a sibling of its GRPO group computed
        self.group_prompt = (
            workload is not None and workload.has_rollout and workload.cache.shares_group_prompt
            and workload.volume.samples_per_prompt > 1
        )
        if workload is not None:
            self.allowed = frozenset(workload.training.loss_on) if workload.has_trainer else frozenset()
            self.drop_truncated = workload.training.drop_truncated
            self.needs_logprobs = workload.method in LOGPROB_METHODS
            self.rollout = workload.has_rollout
            scorers = workload.scorers
        else:
            self.allowed = frozenset({"action"})
            self.drop_truncated = False
            self.needs_logprobs = True
            self.rollout = True
            scorers = 0
        self.action_only = self.allowed == {"action"}
        # a serving workload's shared prefix was computed by earlier requests: a first turn may reuse it
        self.shared_prefix = workload.serving.shared_prefix_tokens if workload is not None and workload.serving else 0
        self.failures: list[Failure] = []
        self.failure_counts: dict[str, int] = {name: 0 for name in RECORD_CHECKS}
        self.records = 0
        self.records_failed = 0
        self.stop_reasons: dict[Any, int] = {}
        self.versions: dict[Any, int] = {}
        self.staleness: dict[Any, int] = {}
        self.newest_version: int | None = None
        self.stop_not_logged = 0
        self.histograms = Accumulator(scorers)
        self.rows = self.histograms.rows  # appended to by check, emptied in place by flush
        self._line = 0
        self._record_id: Any = None
        self._failed = False

    # ------------------------------------------------------------------ bookkeeping

    def fail(self, check: str, field: str, message: str) -> None:
        """Count a failure of ``check`` for the current record; keep it while under ``max_errors``."""
        self.failure_counts[check] += 1
        self._failed = True
        if len(self.failures) < self.max_errors:
            record_id = None if self._record_id is None else str(self._record_id)
            self.failures.append(Failure(self._line, check, field, message, record_id, self.unit))

    def feed(self, line: int, obj: Any, read: Callable[[dict[str, Any]], dict[str, Any]] | None) -> None:
        """Check and count one record (``obj`` is the decoded JSON value or a Parquet row)."""
        self.records += 1
        self._line = line
        self._failed = False
        if type(obj) is not dict:
            self._record_id = None
            self.fail("well_formed", "line", f"not a JSON object (got {type(obj).__name__})")
        else:
            self._record_id = obj.get("id")
            try:
                self.check(obj if read is None else read(obj))
            except BadRecord as bad:
                self.fail(bad.check, bad.field, bad.message)
            except (TypeError, ValueError, OverflowError, IndexError, KeyError, AttributeError) as exc:
                # a value of a type no check expected: reported, never a crash
                self.fail("well_formed", "record", f"cannot be read ({exc.__class__.__name__}: {str(exc)[:80]})")
        if self._failed:
            self.records_failed += 1

    def malformed(self, line: int, message: str) -> None:
        """Report a line that is not a record at all (not JSON)."""
        self.records += 1
        self.records_failed += 1
        self._line, self._record_id = line, None
        self.fail("well_formed", "line", message)

    # ------------------------------------------------------------------ the checks, in order

    # The hot path: one call per record. Bytes methods do the per-position work in C; a record
    # whose turns match its origin mask is split by class with arithmetic on its spans alone. A
    # check that finds a record unreadable raises BadRecord (the record is not counted); the
    # others call fail() and let the record be counted.
    def check(self, record: dict[str, Any]) -> None:
        """Run every check on one record (capplan's keys) and count it."""
        origin = origin_bytes(record.get("origin"))
        loss = loss_bytes(record.get("loss_mask"))
        prompt, action, tool = self._mask_lengths(record, origin, loss)
        trained_prompt, trained_action, trained_tool = (
            self._loss_classes(origin, loss) if 1 in loss else _NOTHING_TRAINED
        )
        stop = record.get("stop_reason")
        truncated = stop == "length"
        dropped = truncated and self.drop_truncated
        rollout = self.rollout
        if rollout:
            self._stop_reason(stop, record)
        if dropped and (trained_prompt or trained_action or trained_tool):
            self._truncated_trained(trained_prompt + trained_action + trained_tool)
        if rollout:
            self._staleness(record.get("policy_version"), record.get("trainer_version"))
        flags = 0 if dropped else FLAG_KEPT
        if truncated:
            flags |= FLAG_TRUNCATED
        (
            sampled_prompt, sampled_action, sampled_tool, prefill_prompt, prefill_action, prefill_tool,
            hit_prompt, hit_action, hit_tool, decode, invocations, tool_calls, cache_logged,
        ) = self._turns(record, origin, prompt, action, tool) if rollout else _NOT_GENERATED
        if cache_logged:
            flags |= FLAG_CACHE_LOGGED
        wait_ms = self._tool_wait(record.get("tool_wait_s"))
        rows = self.rows
        rows.append(
            (prompt, action, tool, sampled_prompt, sampled_action, sampled_tool,
             prefill_prompt, prefill_action, prefill_tool, hit_prompt, hit_action, hit_tool,
             decode, trained_prompt, trained_action, trained_tool, invocations, tool_calls, flags, wait_ms)
        )
        if len(rows) >= self.histograms.batch:
            self.histograms.flush()

    def _mask_lengths(self, record: dict[str, Any], origin: bytes, loss: bytes) -> tuple[int, int, int]:
        """well_formed / mask_lengths: the token count (token IDs, counts or the mapping's) matches
        both masks and the counts; returns the ``(prompt, action, tool)`` positions of the origin."""
        tokens = record.get("_n_tokens")
        counts = None
        if tokens is None:
            token_ids = record.get("token_ids")
            logged_counts = record.get("counts")
            if token_ids is not None:
                if type(token_ids) is not list:
                    raise BadRecord("token_ids", "must be a list of token IDs (integers)")
                tokens = len(token_ids)
            if logged_counts is not None:
                counts = _class_counts(logged_counts)
                if tokens is None:
                    tokens = counts[0] + counts[1] + counts[2]
                elif counts[0] + counts[1] + counts[2] != tokens:
                    raise BadRecord(
                        "counts", f"counts sum to {sum(counts)} but token_ids has {tokens}", check="mask_lengths"
                    )
            elif tokens is None:
                raise BadRecord("token_ids", "missing: give token_ids (a list) or counts ({prompt, action, tool})")
        positions = len(origin)
        if positions != tokens:
            raise BadRecord("origin", f"{positions} entries for {tokens} tokens", check="mask_lengths")
        if len(loss) != tokens:
            raise BadRecord("loss_mask", f"{len(loss)} entries for {tokens} tokens", check="mask_lengths")
        prompt = origin.count(0)
        action = origin.count(1)
        by_class = (prompt, action, positions - prompt - action)
        if counts is not None and counts != by_class:
            k = next(i for i in range(3) if counts[i] != by_class[i])
            raise BadRecord(
                f"counts.{TOKEN_CLASSES[k]}",
                f"{counts[k]} but the origin mask has {by_class[k]} {TOKEN_CLASSES[k]} positions",
                check="mask_lengths",
            )
        return by_class

    def _loss_classes(self, origin: bytes, loss: bytes) -> tuple[int, int, int]:
        """loss_classes: loss only on the classes the workload trains; returns the trained
        ``(prompt, action, tool)`` positions of a record with some loss."""
        loss_bits = int.from_bytes(loss, "big")
        action_bits = int.from_bytes(origin.translate(IS_ACTION), "big")
        if self.action_only and not loss_bits & ~action_bits:
            return 0, loss_bits.bit_count(), 0
        trained_action = (loss_bits & action_bits).bit_count()
        trained_prompt = (loss_bits & int.from_bytes(origin.translate(IS_PROMPT), "big")).bit_count()
        trained_tool = loss_bits.bit_count() - trained_action - trained_prompt
        positions = len(origin)
        for cls, code, trained in (("prompt", 0, trained_prompt), ("action", 1, trained_action), ("tool", 2, trained_tool)):
            if trained and cls not in self.allowed:
                bad = loss_bits & int.from_bytes(origin.translate(IS_CLASS[code]), "big")
                first = positions - 1 - (bad.bit_length() - 1) // 8
                allowed = "/".join(c for c in TOKEN_CLASSES if c in self.allowed) or "nothing (no trainer)"
                self.fail(
                    "loss_classes",
                    "loss_mask",
                    f"{trained} {cls} position(s) carry loss, the first at position {first}; the workload trains {allowed}",
                )
        return trained_prompt, trained_action, trained_tool

    def _stop_reason(self, stop: Any, record: dict[str, Any]) -> None:
        """stop_reason: one of :data:`STOP_REASONS` (where the format logs one); counted by reason."""
        counts = self.stop_reasons
        if type(stop) is str and stop in _STOP_SET:
            if stop in counts:
                counts[stop] += 1
            else:
                counts[stop] = 1
        elif stop is None:
            if record.get("_stop_logged", True):
                self.fail("stop_reason", "stop_reason", f"missing; allowed: {', '.join(STOP_REASONS)}")
            else:
                self.stop_not_logged += 1
            _bump(counts, "(not logged)")
        else:
            shown = repr(stop)
            _bump(counts, shown[:40], cap=64)
            self.fail("stop_reason", "stop_reason", f"{shown} is not one of {', '.join(STOP_REASONS)}")

    def _truncated_trained(self, trained: int) -> None:
        """truncated_trained: a truncated response the workload drops carries loss (on ``trained`` positions)."""
        self.fail(
            "truncated_trained",
            "loss_mask",
            f"truncated response (stop_reason length) carries loss on {trained} "
            "position(s) but the workload drops truncated conversations (training.drop_truncated)",
        )

    def _staleness(self, version: Any, trainer_version: Any) -> None:
        """staleness: the policy version is a non-negative integer at most ``max_staleness`` behind
        the trainer's; counted by version and by lag."""
        if version is None:
            if self.max_staleness is not None:
                self.fail("staleness", "policy_version", "missing (needed by --max-staleness)")
            return
        versions = self.versions
        if (
            type(version) is int and version in versions and version <= self.newest_version  # type: ignore[operator]
            and type(trainer_version) is int and 0 <= trainer_version - version in self.staleness
            and (self.max_staleness is None or trainer_version - version <= self.max_staleness)
        ):
            versions[version] += 1  # the common case: a known version, a known lag, within the bound
            self.staleness[trainer_version - version] += 1
        else:
            self._count_version(version, trainer_version)

    def _count_version(self, version: Any, trainer_version: Any) -> None:
        """The general case of :meth:`_staleness`: a new version or lag, a bad value, or too stale."""
        if type(version) is not int or version < 0:
            self.fail("staleness", "policy_version", f"{version!r} is not a non-negative integer")
            return
        _bump(self.versions, version)
        newest = self.newest_version
        if newest is None or version > newest:
            self.newest_version = newest = version
        from_record = trainer_version is not None
        if from_record and (type(trainer_version) is not int or trainer_version < 0):
            self.fail("staleness", "trainer_version", f"{trainer_version!r} is not a non-negative integer")
            return
        lag = (trainer_version if from_record else newest) - version
        if lag < 0:  # only a record's own trainer_version can be behind its policy version
            self.fail(
                "staleness",
                "trainer_version",
                f"trainer_version {trainer_version} is older than policy_version {version}: "
                "no trainer trains on a policy it has not produced yet",
            )
            return
        _bump(self.staleness, lag)
        limit = self.max_staleness
        if limit is not None and lag > limit:
            source = f"trainer_version {trainer_version}" if from_record else f"the newest policy version so far ({newest})"
            self.fail(
                "staleness", "policy_version", f"version {version} is {lag} behind {source}; --max-staleness is {limit}"
            )

    def _turns(self, record: dict[str, Any], origin: bytes, prompt: int, action: int, tool: int) -> tuple[int, ...]:
        """The checks of a generated record's invocations, in order: turn_boundaries (spans, the
        prompt a prefix), cache_hits, turn_boundaries (no tool before the first turn),
        sampled_are_actions, logprobs.

        Returns the record's ``sampled``, ``prefill_forwarded`` and ``cache_hit`` positions by
        class, its decoded positions, invocations, tool calls and whether it logs cache hits.
        """
        positions = len(origin)
        spans, derived = self._turn_spans(record.get("turns"), origin, action)
        invocations = len(spans)
        cached = record.get("cached_tokens")
        prefilled = record.get("prefill_tokens")
        cache_logged = cached is not None or prefilled is not None
        # turn_boundaries: one cached_tokens / prefill_tokens entry per turn, when logged
        if cached is not None and (type(cached) is not list or len(cached) != invocations):
            _per_turn(cached, invocations, "cached_tokens")
        if prefilled is not None and (type(prefilled) is not list or len(prefilled) != invocations):
            _per_turn(prefilled, invocations, "prefill_tokens")
        prefix = not prompt or origin.count(0, 0, prompt) == prompt
        if not prefix:
            self._prompt_not_prefix(origin)
        (
            in_spans, sampled, nonempty, input_total, input_prompt, input_action, hit_prompt, hit_action, hit_tool
        ) = self._invocations(origin, positions, prompt, spans, derived, cached, prefilled, cache_logged)
        decode = sampled - nonempty
        tool_calls = origin.count(b"\x01\x02")
        prefill_prompt = input_prompt - hit_prompt
        prefill_action = input_action - hit_action
        prefill_tool = input_total - input_prompt - input_action - hit_tool
        first = spans[0][0] if invocations else positions
        if tool and (first > prompt or not prefix):
            self._no_tool_before_first_turn(origin, first)
        consistent = derived or in_spans == sampled == action
        if consistent:
            sampled_prompt, sampled_action, sampled_tool = 0, sampled, 0
        else:
            sampled_prompt, sampled_action, sampled_tool = self._sampled_are_actions(origin, spans, in_spans, sampled)
        if not (consistent and prefix):
            prefill_prompt, prefill_action, prefill_tool, hit_prompt, hit_action, hit_tool = _split_by_counting(
                origin, spans, cached, prefilled
            )
        self._logprobs(record, spans, sampled, positions)
        return (
            sampled_prompt, sampled_action, sampled_tool, prefill_prompt, prefill_action, prefill_tool,
            hit_prompt, hit_action, hit_tool, decode, invocations, tool_calls, cache_logged,
        )

    def _turn_spans(self, turns: Any, origin: bytes, action: int) -> tuple[Any, bool]:
        """turn_boundaries: ``turns`` is a list (its spans are checked in :meth:`_invocations`); when
        absent, the maximal runs of action positions. Returns the spans and whether they were derived."""
        if turns is None:
            return ([match.span() for match in _RUNS_OF_ACTIONS.finditer(origin)] if action else ()), True
        if type(turns) is not list:
            raise BadRecord("turns", "must be a list of [start, end] spans", check="turn_boundaries")
        return turns, False

    def _prompt_not_prefix(self, origin: bytes) -> None:
        """turn_boundaries: a prompt position comes after another position (the prompt is not a prefix)."""
        first_other = next(i for i in range(len(origin)) if origin[i] != 0)
        self.fail(
            "turn_boundaries",
            "origin",
            f"prompt position {origin.find(0, first_other)} comes after a non-prompt position ({first_other}); "
            "the prompt must be a prefix",
        )

    def _invocations(
        self,
        origin: bytes,
        positions: int,
        prompt: int,
        spans: Any,
        derived: bool,
        cached: Any,
        prefilled: Any,
        cache_logged: bool,
    ) -> tuple[int, int, int, int, int, int, int, int, int]:
        """turn_boundaries and cache_hits, in one pass over the invocations.

        Invocation ``j`` samples ``[s, e)``; its input is ``[0, s)``. Returns the action positions
        inside the spans, the sampled positions, the non-empty invocations, then summed over the
        invocations: the input positions (all, prompt, action) and the cache hits by class. The
        class split assumes a consistent record (prompt a prefix, spans = action runs);
        :func:`_split_by_counting` recounts one that is not.
        """
        turns = len(spans)
        previous_end = in_spans = before = nonempty = 0
        computed = max(prompt if self.group_prompt else 0, self.shared_prefix)
        input_total = input_prompt = input_action = hit_prompt = hit_action = hit_tool = 0
        for j in range(turns):
            if derived:
                start, end = spans[j]
            else:
                span = spans[j]
                if type(span) is not list or len(span) != 2:
                    turn_spans(spans, positions)  # raises, naming the bad span
                start, end = span
                if type(start) is not int or type(end) is not int or not previous_end <= start <= end <= positions:
                    turn_spans(spans, positions)
                in_spans += origin.count(1, start, end)
                previous_end = end
            if cache_logged:
                # the common case inline: a well-formed claim within what earlier invocations computed
                hit = cached[j] if cached is not None else None
                if not (
                    type(hit) is int and 0 <= hit <= computed
                    and prefilled is not None and type(prefilled[j]) is int and hit + prefilled[j] == start
                ):
                    hit = self._cache_hit(j, start, computed, cached, prefilled, turns)
                if hit:
                    turn_hit_prompt = hit if hit < prompt else prompt
                    turn_hit_action = 0
                    if hit > prompt:
                        for k in range(j):
                            earlier_start, earlier_end = spans[k]
                            if hit <= earlier_start:
                                break
                            turn_hit_action += (hit if hit < earlier_end else earlier_end) - earlier_start
                    hit_prompt += turn_hit_prompt
                    hit_action += turn_hit_action
                    hit_tool += hit - turn_hit_prompt - turn_hit_action
            input_total += start
            input_prompt += start if start < prompt else prompt
            input_action += before
            before += end - start
            if end > start:
                nonempty += 1
                computed = end - 1  # the previous input and all but the last sampled token
            else:
                computed = start
        return in_spans, before, nonempty, input_total, input_prompt, input_action, hit_prompt, hit_action, hit_tool

    def _cache_hit(self, j: int, start: int, computed: int, cached: Any, prefilled: Any, turns: int) -> int:
        """cache_hits: invocation ``j``'s hit (``cached_tokens``, else input - ``prefill_tokens``)
        is at most what earlier invocations computed, and prefill + cached = its input ``start``.
        Returns the hit, cut to the input when it claims more."""
        if cached is not None:
            hit = cached[j]
            if type(hit) is not int or hit < 0:
                _per_turn(cached, turns, "cached_tokens")
            if prefilled is not None and (type(prefilled[j]) is not int or hit + prefilled[j] != start):
                _per_turn(prefilled, turns, "prefill_tokens")
                self.fail(
                    "cache_hits",
                    f"prefill_tokens[{j}]",
                    f"turn {j + 1}: prefill {prefilled[j]} + cached {hit} = {prefilled[j] + hit}, "
                    f"but its input is {start} positions",
                )
        else:
            hit = prefilled[j]
            if type(hit) is not int or hit < 0:
                _per_turn(prefilled, turns, "prefill_tokens")
            hit = start - hit
            if hit < 0:
                self.fail(
                    "cache_hits",
                    f"prefill_tokens[{j}]",
                    f"turn {j + 1} prefills {prefilled[j]} positions but its input is only {start}",
                )
                hit = 0
        if hit > computed:
            self.fail(
                "cache_hits",
                f"cached_tokens[{j}]" if cached is not None else f"prefill_tokens[{j}]",
                f"turn {j + 1} claims {hit} cached positions but earlier invocations computed only "
                f"{computed} (the last sampled token of a turn is never forwarded)",
            )
            if hit > start:
                hit = start
        return hit

    def _no_tool_before_first_turn(self, origin: bytes, first: int) -> None:
        """turn_boundaries: no tool observation precedes the first invocation (starting at ``first``)."""
        tool_position = origin.find(2, 0, first)
        if tool_position >= 0:
            self.fail(
                "turn_boundaries",
                "origin",
                f"tool position {tool_position} precedes the first turn (starts at {first}): no tool was called yet",
            )

    def _sampled_are_actions(self, origin: bytes, spans: Any, in_spans: int, sampled: int) -> tuple[int, int, int]:
        """sampled_are_actions, for a record whose spans are not exactly its action positions: names
        the first position in the wrong place; returns the sampled positions by class."""
        names = ("prompt", "action", "tool")
        located = False
        for j, (start, end) in enumerate(spans):
            position = next((i for i in range(start, end) if origin[i] != 1), -1)
            if position >= 0:
                self.fail(
                    "sampled_are_actions",
                    f"turns[{j}]",
                    f"position {position} ({names[origin[position]]}) is inside turn {j + 1}'s sampled span [{start}, {end})",
                )
                located = True
                break
        if not located:
            previous_end = 0
            for start, end in [*spans, (len(origin), len(origin))]:
                position = origin.find(1, previous_end, start)
                if position >= 0:
                    self.fail(
                        "sampled_are_actions", "turns", f"action position {position} lies outside every turn's sampled span"
                    )
                    break
                previous_end = end
        sampled_prompt = sum(origin.count(0, start, end) for start, end in spans)
        return sampled_prompt, in_spans, sampled - in_spans - sampled_prompt

    def _logprobs(self, record: dict[str, Any], spans: Any, sampled: int, positions: int) -> None:
        """logprobs: a finite log-prob for every sampled position (one per sampled position, or one
        per position from the mapping's offset); required by the methods of :data:`LOGPROB_METHODS`."""
        logprobs = record.get("logprobs")
        if logprobs is None:
            if sampled and self.needs_logprobs:
                self.fail("logprobs", "logprobs", f"missing; {sampled} sampled positions need a behaviour log-prob")
            return
        if type(logprobs) is not list:
            self.fail("logprobs", "logprobs", f"must be a list of numbers, got {type(logprobs).__name__}")
            return
        offset = record.get("_lp_offset", 0)
        given = len(logprobs)
        if given == sampled:
            parts = [logprobs]
            where = "one per sampled position"
        elif given == positions - offset:
            parts = [logprobs[start - offset:end - offset] for start, end in spans if end > start]
            where = "one per position"
        else:
            self.fail(
                "logprobs",
                "logprobs",
                f"{given} values match neither the {sampled} sampled positions nor the {positions - offset} positions "
                "they should cover (misaligned: re-tokenised?)",
            )
            return
        for part in parts:
            try:
                total = sum(part)
            except TypeError:
                total = math.nan
            if total - total != 0:  # NaN or infinite, or not a number (or finite values whose sum overflows)
                bad = [x for x in part if type(x) not in (int, float) or not math.isfinite(x)][:1]
                if bad:
                    self.fail(
                        "logprobs",
                        "logprobs",
                        f"a sampled position has no finite log-prob ({bad[0]!r}; values given {where})",
                    )
                    return
            if part and max(part) > 0:  # a log-probability is at most 0 (a probability at most 1)
                self.fail(
                    "logprobs",
                    "logprobs",
                    f"a sampled position has a positive log-prob ({max(part)!r}; values given {where}): "
                    "log-probs are <= 0 (probabilities, or logits logged instead?)",
                )
                return

    def _tool_wait(self, wait_s: Any) -> int:
        """well_formed: ``tool_wait_s``, when given, is a number of seconds; returns it in [ms]."""
        if wait_s is None:
            return 0
        if type(wait_s) in (int, float) and 0 <= wait_s <= 1e9:
            return int(wait_s * 1000 + 0.5)
        self.fail("well_formed", "tool_wait_s", f"{wait_s!r} is not a number of seconds (0 to 1e9)")
        return 0
