"""Reconcile real trajectory logs against the ledger, streaming: per-record checks and an observed ledger.

A trainer needs more from a rollout than text: token IDs, the behaviour policy's version,
generation boundaries, log-probs, the stop reason and the tool observations. Re-tokenising a chat
string can break the alignment of actions and loss mask. This module reads the records an RL
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

Counting follows :mod:`capplan.ledger` exactly: invocation ``j`` samples the span
``[s_j, e_j)`` and its input is every position before ``s_j``; its cache hit is its
``cached_tokens`` entry (or input minus ``prefill_tokens``; zero when neither is logged), split by
the classes of the first positions; decode forwards ``max(e_j - s_j - 1, 0)`` positions; trained
positions are the loss mask as logged; scored positions are the workload's scorers x the record,
for records the workload keeps (the log does not say who scored).

Memory stays flat: records are read one at a time (Parquet: one record batch at a time), counted
into per-batch rows that are folded into fixed-size histograms (exact below 2,048, relative bin
width 2^-10 above), and only the first ``max_errors`` failures are kept.
"""

from __future__ import annotations

import gzip
import json
import json.scanner
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

from capplan.errors import InputError
from capplan.ledger import CLASSES_AND_TOTAL, COUNTERS, Check, Ledger
from capplan.workload import TOKEN_CLASSES

if TYPE_CHECKING:
    import numpy as np

    from capplan.workload import Workload

STOP_REASONS: tuple[str, ...] = ("stop", "length", "tool_calls", "abort")
"""Known stop reasons: end of sequence or stop string, generation limit (truncated), the turn ended
to call a tool, cancelled or interrupted."""

RECORD_CHECKS: dict[str, str] = {
    "well_formed": "the line is a JSON object with the required fields, of the right types",
    "mask_lengths": "origin and loss masks (and counts) have the record's token count",
    "sampled_are_actions": "the positions inside the turn spans are exactly the action positions of the origin mask",
    "loss_classes": "loss only on the token classes the workload trains (training.loss_on; action by default)",
    "logprobs": "a finite behaviour log-prob for every sampled position (required by outcome-rl and multi-turn-rl)",
    "turn_boundaries": "turn spans ordered and inside the record, the prompt a prefix, no tool observation "
    "before the first turn, one per-invocation entry per turn",
    "cache_hits": "no invocation reuses more positions than earlier invocations of the conversation computed; "
    "prefill + cached = the invocation's input",
    "staleness": "trainer version - policy version <= --max-staleness",
    "stop_reason": "the stop reason is one of " + ", ".join(STOP_REASONS),
    "truncated_trained": "no loss on a truncated response (stop_reason length) when the workload drops truncations",
}
"""Per-record checks, by name (a JSON contract), with what each one asserts."""

_STOP_SET = frozenset(STOP_REASONS)

#: Methods whose objective needs the behaviour policy's log-probs (importance ratios, clipping).
LOGPROB_METHODS: frozenset[str] = frozenset({"outcome-rl", "multi-turn-rl"})

_PROMPT, _ACTION, _TOOL = 0, 1, 2
_RUNS_OF_ACTIONS = re.compile(rb"\x01+")


def _table(mapping: dict[int, int], default: int = 255) -> bytes:
    return bytes(mapping.get(i, default) for i in range(256))


#: Masks are held as bytes: origin 0 prompt / 1 action / 2 tool, loss 0 / 1; 255 marks a bad value.
_ORIGIN_FROM_STR = _table({ord("p"): 0, ord("a"): 1, ord("t"): 2})
_ORIGIN_FROM_INT = _table({0: 0, 1: 1, 2: 2})
_LOSS_FROM_STR = _table({ord("0"): 0, ord("1"): 1})
_LOSS_FROM_INT = _table({0: 0, 1: 1})
_IS = [_table({c: 1}, default=0) for c in range(3)]  # origin byte -> 1 when of class c
_IS_PROMPT, _IS_ACTION = _IS[0], _IS[1]
_VERL_MASK_TO_ORIGIN = _table({0: 2, 1: 1})  # verl response_mask 1 = generated, 0 = tool


class _Bad(Exception):
    """A record that cannot be read: which field, and what is wrong."""

    def __init__(self, field: str, message: str, check: str = "well_formed") -> None:
        super().__init__(message)
        self.field, self.message, self.check = field, message, check


@dataclass(frozen=True)
class Failure:
    """One failed check of one record."""

    line: int
    check: str
    field: str
    message: str
    record_id: str | None = None
    unit: str = "line"

    def __str__(self) -> str:
        rid = f" (id {self.record_id})" if self.record_id is not None else ""
        return f"{self.unit} {self.line}{rid}: {self.field}: {self.message} [{self.check}]"

    def as_dict(self) -> dict[str, Any]:
        return {
            self.unit: self.line,
            "id": self.record_id,
            "check": self.check,
            "field": self.field,
            "message": self.message,
        }


# --------------------------------------------------------------------------- record formats
#
# A record reaches the checks as a dict with capplan's keys (see the module docstring). Masks may
# be strings, lists or (from a mapping) bytes already in the internal coding; a mapping may add
# "_n_tokens" (the token count), "_lp_offset" (position of logprobs[0] when the log-probs cover
# positions _lp_offset..end) and "_stop_logged" (False when its format has no stop reason).


def _mask_bytes(value: Any, field: str, from_str: bytes, from_int: bytes, letters: str, codes: str) -> bytes:
    """A per-position mask (a string of ``letters`` or a list of ``codes``) as bytes in the
    internal coding; ``from_str`` / ``from_int`` translate valid entries and map the rest to 0xff."""
    t = type(value)
    if t is bytes:
        return value
    if t is str:
        try:
            m = value.encode("latin-1").translate(from_str)
        except UnicodeEncodeError:
            raise _Bad(field, f"a string of {letters}") from None
    elif t is list:
        try:
            m = bytes(value).translate(from_int)
        except (TypeError, ValueError):
            raise _Bad(field, f"a list of {codes}") from None
    else:
        raise _Bad(field, f"missing: a string of {letters} or a list of {codes}, one entry per position")
    if b"\xff" in m:
        i = m.index(b"\xff")
        raise _Bad(field, f"position {i} is {value[i]!r}; allowed: {letters} or {codes}")
    return m


def _origin_bytes(value: Any, field: str = "origin") -> bytes:
    """The origin mask as bytes 0 (prompt) / 1 (action) / 2 (tool)."""
    return _mask_bytes(value, field, _ORIGIN_FROM_STR, _ORIGIN_FROM_INT, "p (prompt)/a (action)/t (tool)", "0/1/2")


def _loss_bytes(value: Any, field: str = "loss_mask") -> bytes:
    """The loss mask as bytes 0 / 1."""
    return _mask_bytes(value, field, _LOSS_FROM_STR, _LOSS_FROM_INT, "0/1", "0/1")


def _int_list(value: Any, field: str) -> list[int]:
    if type(value) is not list:
        raise _Bad(field, "missing or not a list of token IDs")
    return value


def _read_verl(obj: dict[str, Any]) -> dict[str, Any]:
    """verl ``AgentLoopOutput`` (``verl/experimental/agent_loop/agent_loop.py``), one dumped per line.

    ``prompt_ids`` are the prompt; ``response_ids`` hold generated and tool-response tokens, told
    apart by ``response_mask`` (1 generated, 0 tool), which is also what verl trains on;
    ``response_logprobs`` are aligned with ``response_ids`` (0.0 on tool tokens). The fully
    asynchronous trainer adds ``extra_fields.param_version_start`` (policy version: the oldest
    weights that sampled part of the response) and ``extra_fields.is_cancel`` (stop reason
    ``abort``). verl logs no other stop reason; ``extra_fields.stop_reason`` is read when a pipeline
    adds one. ``metrics.tool_calls`` (time spent in tool calls [s]) is the tool wait.
    """
    prompt = _int_list(obj.get("prompt_ids"), "prompt_ids")
    resp = _int_list(obj.get("response_ids"), "response_ids")
    m = _loss_bytes(obj.get("response_mask"), "response_mask")
    if len(m) != len(resp):
        raise _Bad("response_mask", f"{len(m)} entries for {len(resp)} response_ids", check="mask_lengths")
    P = len(prompt)
    out: dict[str, Any] = {
        "_n_tokens": P + len(resp),
        "origin": b"\x00" * P + m.translate(_VERL_MASK_TO_ORIGIN),
        "loss_mask": b"\x00" * P + m,
        "logprobs": obj.get("response_logprobs"),
        "_lp_offset": P,
    }
    extra = obj.get("extra_fields") or {}
    if type(extra) is not dict:
        raise _Bad("extra_fields", "must be an object")
    out["policy_version"] = extra.get("param_version_start")
    stop = extra.get("stop_reason")
    if stop is None and extra.get("is_cancel"):
        stop = "abort"
    out["stop_reason"] = stop
    out["_stop_logged"] = stop is not None
    metrics = obj.get("metrics")
    if type(metrics) is dict and type(metrics.get("tool_calls")) in (int, float):
        out["tool_wait_s"] = metrics["tool_calls"]
    return out


def _read_openrlhf(obj: dict[str, Any]) -> dict[str, Any]:
    """OpenRLHF agent executor output (``openrlhf/utils/agent.py``), one dumped per line.

    ``observation_tokens`` is the whole sequence (prompt, actions, environment feedback);
    ``action_ranges`` are the ``(start, end)`` spans the model generated, which OpenRLHF turns into
    its ``action_mask`` (the trained positions); ``rollout_log_probs`` are aligned with
    ``observation_tokens`` (0.0 on non-generated positions). ``truncated`` (``finish_reason ==
    "length"``, read in ``openrlhf/trainer/ppo_utils/samples_generator.py``) gives stop reason
    ``length``, else ``stop``. OpenRLHF logs no policy version; ``policy_version`` is read when a
    pipeline adds one.
    """
    L = len(_int_list(obj.get("observation_tokens"), "observation_tokens"))
    ranges = obj.get("action_ranges")
    spans = _spans(ranges, L, "action_ranges")
    origin = bytearray(b"\x02" * L)
    first = spans[0][0] if spans else L
    origin[:first] = b"\x00" * first
    for s, e in spans:
        origin[s:e] = b"\x01" * (e - s)
    o = bytes(origin)
    t = obj.get("truncated")
    return {
        "_n_tokens": L,
        "origin": o,
        "loss_mask": o.translate(_IS[_ACTION]),
        "turns": ranges,
        "logprobs": obj.get("rollout_log_probs"),
        "policy_version": obj.get("policy_version"),
        "stop_reason": None if t is None else ("length" if t else "stop"),
        "_stop_logged": t is not None,
    }


def _unbatch(value: Any) -> Any:
    """AReaL tensors carry a batch dimension of 1; accept ``[[...]]`` as well as ``[...]``."""
    if type(value) is list and len(value) == 1 and type(value[0]) is list:
        return value[0]
    return value


def _read_areal(obj: dict[str, Any]) -> dict[str, Any]:
    """AReaL trajectory from ``RLVRWorkflow`` / ``MultiTurnWorkflow`` (``areal/workflow/*.py``).

    ``input_ids`` is the whole sequence; ``versions`` is the policy version of each generated
    token and -1 on every input position (the prompt and, in multi-turn, the inserted feedback), so
    it gives the origin; ``loss_mask`` gives the trained positions; ``logprobs`` are per position
    (0.0 on inputs); ``attention_mask`` trims padding. ``stop_reason`` (of ``ModelResponse``,
    ``areal/api/io_struct.py``) is read when a pipeline logs it; ``interrupt`` means ``abort``.
    The record's policy version is the oldest among its generated tokens.
    """
    L = len(_int_list(_unbatch(obj.get("input_ids")), "input_ids"))
    versions = _unbatch(obj.get("versions"))
    if type(versions) is not list:
        raise _Bad("versions", "missing: the per-token policy version (-1 on input positions)")
    att = _unbatch(obj.get("attention_mask"))
    if att is not None:
        if type(att) is not list or len(att) != L:
            raise _Bad("attention_mask", f"must have one entry per input_ids position ({L})", check="mask_lengths")
        L = sum(1 for a in att if a)
    if len(versions) < L:
        raise _Bad("versions", f"{len(versions)} entries for {L} positions", check="mask_lengths")
    try:
        generated = [v for v in versions[:L] if v >= 0]
        gen = bytes(1 if v >= 0 else 0 for v in versions[:L])
    except TypeError:
        raise _Bad("versions", "must be a list of integers") from None
    first = gen.find(1)
    first = L if first < 0 else first
    loss = _unbatch(obj.get("loss_mask"))
    lp = _unbatch(obj.get("logprobs"))
    stop = obj.get("stop_reason")
    return {
        "_n_tokens": L,
        "origin": b"\x00" * first + gen[first:].translate(_VERL_MASK_TO_ORIGIN),
        "loss_mask": loss[:L] if type(loss) is list else loss,
        "logprobs": lp[:L] if type(lp) is list else lp,
        "policy_version": min(generated) if generated else None,
        "stop_reason": "abort" if stop == "interrupt" else stop,
        "_stop_logged": stop is not None,
    }


MAPPINGS: dict[str, Callable[[dict[str, Any]], dict[str, Any]] | None] = {
    "capplan": None,
    "verl": _read_verl,
    "openrlhf": _read_openrlhf,
    "areal": _read_areal,
}
"""Record formats by name: capplan's own (read as is), and the dumps of three RL frameworks."""


def _spans(turns: Any, L: int, field: str = "turns") -> list[Any]:
    """Validate turn spans: a list of ``[start, end]`` with ``0 <= start <= end <= L``, in order."""
    if type(turns) is not list:
        raise _Bad(field, "missing or not a list of [start, end] spans", check="turn_boundaries")
    prev = 0
    for j, t in enumerate(turns):
        if type(t) is not list or len(t) != 2 or type(t[0]) is not int or type(t[1]) is not int:
            raise _Bad(f"{field}[{j}]", f"{t!r} is not a [start, end] pair of integers", check="turn_boundaries")
        s, e = t
        if not 0 <= s <= e <= L:
            raise _Bad(f"{field}[{j}]", f"span [{s}, {e}) is not inside the record (0..{L})", check="turn_boundaries")
        if s < prev:
            raise _Bad(
                f"{field}[{j}]", f"span [{s}, {e}) starts before turn {j}'s span ends ({prev})", check="turn_boundaries"
            )
        prev = e
    return turns


def _per_turn(values: Any, n: int, field: str) -> None:
    """Raise unless ``values`` holds one non-negative integer per turn."""
    if type(values) is not list or len(values) != n:
        got = len(values) if type(values) is list else type(values).__name__
        raise _Bad(field, f"needs one entry per turn: {n} turns, got {got}", check="turn_boundaries")
    for j, v in enumerate(values):
        if type(v) is not int or v < 0:
            raise _Bad(f"{field}[{j}]", f"{v!r} is not a non-negative integer", check="turn_boundaries")


# --------------------------------------------------------------------------- readers of files


def _open_lines(path: Path) -> tuple[Iterator[bytes], Callable[[], int], Callable[[], None]]:
    """Lines of a JSONL file (gzip detected by its magic bytes), a byte-position probe, a closer."""
    raw = open(path, "rb")  # noqa: SIM115 (closed by the returned closer)
    head = raw.peek(2)[:2] if hasattr(raw, "peek") else b""
    fh: Any = gzip.GzipFile(fileobj=raw, mode="rb") if head == b"\x1f\x8b" else raw

    def close() -> None:
        fh.close()
        raw.close()

    return iter(fh), raw.tell, close


class _NotJSON:
    """A line that does not decode, with the reason."""

    def __init__(self, message: str) -> None:
        self.message = message


_BLANK = object()
_scan = json.scanner.make_scanner(json.JSONDecoder())  # the C scanner behind json.loads


def _decode_line(raw: bytes) -> Any:
    """One JSON value from a line of bytes; ``_BLANK`` for a blank line, a ``_NotJSON`` on errors.

    Calls the C scanner directly (``json.loads`` adds three Python-level calls per line) and falls
    back to ``json.loads`` for the exact error message.
    """
    try:
        text = raw.decode()
        obj, end = _scan(text, 0)
        if end == len(text) or not text[end:].strip():
            return obj
    except (ValueError, StopIteration):  # JSONDecodeError, UnicodeDecodeError; StopIteration: no value at 0
        pass
    if not raw.strip():
        return _BLANK
    try:
        return json.loads(raw.rstrip(b"\r\n"))
    except ValueError as exc:
        return _NotJSON(f"not valid JSON ({exc.__class__.__name__}: {str(exc)[:80]})")


def _parquet_rows(path: Path, batch_size: int = 4096) -> tuple[Iterator[dict[str, Any]], Callable[[], int]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise InputError(
            f"{path}: reading Parquet needs pyarrow, which is not installed: pip install 'capplan[parquet]' "
            "(or convert the file to JSONL)"
        ) from None
    try:
        pf = pq.ParquetFile(path)
    except Exception as exc:  # pyarrow raises several types for a corrupt file
        raise InputError(f"{path}: unreadable Parquet file: {exc}") from None
    total_rows = max(pf.metadata.num_rows, 1)
    size = path.stat().st_size
    done = [0]

    def rows() -> Iterator[dict[str, Any]]:
        for batch in pf.iter_batches(batch_size=batch_size):
            for row in batch.to_pylist():
                done[0] += 1
                yield row

    return rows(), lambda: done[0] * size // total_rows


def _is_parquet(path: Path) -> bool:
    with open(path, "rb") as fh:
        return fh.read(4) == b"PAR1"


# --------------------------------------------------------------------------- histograms

_SUB = 1024  # sub-buckets per power of two: relative bin width 2^-10
_EMAX = 30  # values up to 2^41 are binned; larger ones land in the last bin
_NBINS = _SUB * (_EMAX + 2)


def _bins(v: "np.ndarray") -> "np.ndarray":
    """Log-linear histogram bin of non-negative integers: exact below ``2 * _SUB``.

    ``bin = _SUB * e + (v >> e)`` with ``e = max(bit_length(v) - 11, 0)``, so each bin above
    2,048 is ``2^e`` wide and its values differ by less than ``2^-10`` relative.
    """
    import numpy as np

    out = v.copy()
    big = v >= 2 * _SUB
    if big.any():
        vb = v[big]
        e = np.minimum(np.frexp(vb.astype(np.float64))[1] - 11, _EMAX)
        out[big] = np.minimum(_SUB * e + (vb >> e), _NBINS - 1)
    return out


def _bin_value(b: "np.ndarray") -> "np.ndarray":
    """Representative value of histogram bins: the value itself when exact, else the bin's middle."""
    import numpy as np

    b = np.asarray(b, dtype=np.int64)
    e = np.maximum(b // _SUB - 1, 0)
    m = b - _SUB * e
    low = (m << e).astype(np.float64)
    return low + ((1 << e) - 1) / 2.0


def _percentiles(hist: "np.ndarray", qs: tuple[float, ...]) -> list[float]:
    """Percentiles of a binned sample, as ``numpy.percentile`` (linear) on the bins' values."""
    import numpy as np

    n = int(hist.sum())
    if n == 0:
        return [0.0 for _ in qs]
    cum = np.cumsum(hist)
    out = []
    for q in qs:
        h = (n - 1) * q / 100.0
        lo, hi = math.floor(h), math.ceil(h)
        b = np.searchsorted(cum, [lo, hi], side="right")
        v = _bin_value(b)
        out.append(float(v[0] + (h - lo) * (v[1] - v[0])))
    return out


# Row of one counted record (a JSON-free internal layout): the counters that cannot be derived from
# others, then per-record facts. scored = scorers x recorded x kept, record length = recorded
# total and response length = recorded action + tool are derived when a batch is folded in.
(_R_P, _R_A, _R_T, _R_SP, _R_SA, _R_ST, _R_FP, _R_FA, _R_FT, _R_HP, _R_HA, _R_HT, _R_DEC, _R_TP, _R_TA, _R_TT,
 _R_INV, _R_CALLS, _R_FLAGS, _R_WAIT_MS) = range(20)
_NROW = 20  # values per row
_F_TRUNCATED, _F_KEPT, _F_CACHE_LOGGED = 1, 2, 4
# Histogram series: 7 counters x 3 classes, the 7 counter totals, response length, tool wait [ms].
_NC = len(COUNTERS) * 3
_H_TOTALS = _NC
_H_RESPONSE_LEN = _NC + 7
_H_WAIT_MS = _NC + 8
_NSER = _NC + 9


class _Accumulator:
    """Folds per-record rows into exact sums, maxima and fixed-size histograms, one batch at a time."""

    def __init__(self, scorers: int, batch: int = 16384) -> None:
        import numpy as np

        self.scorers = scorers
        self.batch = batch
        self.rows: list[tuple[int, ...]] = []
        self.n = 0
        self.sums = np.zeros(_NSER, dtype=np.int64)
        self.maxes = np.zeros(_NSER, dtype=np.int64)
        self.hist = np.zeros((_NSER, _NBINS), dtype=np.int64)
        self.flag_sums = {"truncated": 0, "kept": 0, "cache_logged": 0}
        self.invocations = 0
        self.tool_calls = 0

    def add(self, row: tuple[int, ...]) -> None:
        self.rows.append(row)
        if len(self.rows) >= self.batch:
            self.flush()

    def flush(self) -> None:
        import numpy as np

        if not self.rows:
            return
        a = np.array(self.rows, dtype=np.int64)
        self.rows.clear()
        b = a.shape[0]
        self.n += b
        flags = a[:, _R_FLAGS]
        kept = (flags & _F_KEPT) != 0
        self.flag_sums["truncated"] += int(((flags & _F_TRUNCATED) != 0).sum())
        self.flag_sums["kept"] += int(kept.sum())
        self.flag_sums["cache_logged"] += int(((flags & _F_CACHE_LOGGED) != 0).sum())
        self.invocations += int(a[:, _R_INV].sum())
        self.tool_calls += int(a[:, _R_CALLS].sum())
        s = np.zeros((b, _NSER), dtype=np.int64)
        s[:, 0:12] = a[:, 0:12]  # recorded, sampled, prefill_forwarded, cache_hit
        s[:, 13] = a[:, _R_DEC]  # decode_forwarded: action positions only
        s[:, 15:18] = a[:, _R_TP:_R_TT + 1]
        s[:, 18:21] = a[:, 0:3] * (self.scorers * kept)[:, None]
        s[:, _H_TOTALS:_H_TOTALS + 7] = s[:, 0:_NC:3] + s[:, 1:_NC:3] + s[:, 2:_NC:3]
        s[:, _H_RESPONSE_LEN] = a[:, _R_A] + a[:, _R_T]
        s[:, _H_WAIT_MS] = a[:, _R_WAIT_MS]
        self.sums += s.sum(0)
        np.maximum(self.maxes, s.max(0), out=self.maxes)
        flat = (_bins(s) + np.arange(_NSER, dtype=np.int64) * _NBINS).ravel()
        self.hist += np.bincount(flat, minlength=_NSER * _NBINS).reshape(_NSER, _NBINS)


# --------------------------------------------------------------------------- result


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

    @property
    def failures_total(self) -> int:
        return sum(self.failure_counts.values())

    @property
    def ok(self) -> bool:
        """True when no record failed a check and the observed means match the plan."""
        return self.failures_total == 0 and all(c.ok for c in self.ledger.checks)

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
        return out


# --------------------------------------------------------------------------- the reconciler

_MAX_KEYS = 65536  # distinct policy versions / lags / stop reasons kept; the rest count as "(other)"


def _bump(d: dict[Any, int], key: Any, cap: int = _MAX_KEYS) -> None:
    if key in d:
        d[key] += 1
    elif len(d) < cap:
        d[key] = 1
    else:
        d["(other)"] = d.get("(other)", 0) + 1


def _counts(value: Any) -> tuple[int, int, int]:
    if type(value) is dict:
        get = value.get
        p, a, t = get("prompt", 0), get("action", 0), get("tool", 0)
        if (
            type(p) is int and type(a) is int and type(t) is int and p >= 0 and a >= 0 and t >= 0
            and value.keys() <= _CLASS_KEYS
        ):
            return p, a, t
    raise _Bad("counts", "must map prompt/action/tool to non-negative integers")


_CLASS_KEYS = frozenset(TOKEN_CLASSES)


def _split_by_counting(
    o: bytes, spans: Any, cached: list[int] | None, pre: list[int] | None
) -> tuple[int, int, int, int, int, int]:
    """Prefill and cache-hit positions by class, counted from the origin mask.

    For a record whose prompt is not a prefix or whose spans are not exactly its action runs (it
    has failed a check already); a consistent record is split with arithmetic on its spans.
    Returns ``(prefill prompt, action, tool, cache-hit prompt, action, tool)``.
    """
    fP = fA = fT = hP = hA = hT = 0
    for j, (s, e) in enumerate(spans):
        if cached is not None:
            h = cached[j]
        elif pre is not None:
            h = max(s - pre[j], 0)
        else:
            h = 0
        h = min(h, s)
        ip, ia = o.count(0, 0, s), o.count(1, 0, s)
        hp, ha = o.count(0, 0, h), o.count(1, 0, h)
        hP += hp
        hA += ha
        hT += h - hp - ha
        fP += ip - hp
        fA += ia - ha
        fT += s - ip - ia - (h - hp - ha)
    return fP, fA, fT, hP, hA, hT


class _Reconciler:
    """Checks records one at a time and counts the well-formed ones into an :class:`_Accumulator`."""

    def __init__(self, workload: "Workload | None", max_staleness: int | None, max_errors: int, unit: str) -> None:
        self.unit = unit
        self.max_errors = max_errors
        self.max_staleness = max_staleness
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
        self.failures: list[Failure] = []
        self.failure_counts: dict[str, int] = {name: 0 for name in RECORD_CHECKS}
        self.records = 0
        self.records_failed = 0
        self.stop_reasons: dict[Any, int] = {}
        self.versions: dict[Any, int] = {}
        self.staleness: dict[Any, int] = {}
        self.newest_version: int | None = None
        self.stop_not_logged = 0
        self.acc = _Accumulator(scorers)
        self.rows = self.acc.rows  # appended to by _check, emptied in place by flush
        self._line = 0
        self._rid: Any = None
        self._failed = False

    def fail(self, check: str, field: str, message: str) -> None:
        self.failure_counts[check] += 1
        self._failed = True
        if len(self.failures) < self.max_errors:
            rid = None if self._rid is None else str(self._rid)
            self.failures.append(Failure(self._line, check, field, message, rid, self.unit))

    def feed(self, line: int, obj: Any, read: Callable[[dict[str, Any]], dict[str, Any]] | None) -> None:
        """Check and count one record (``obj`` is the decoded JSON value or a Parquet row)."""
        self.records += 1
        self._line = line
        self._failed = False
        if type(obj) is not dict:
            self._rid = None
            self.fail("well_formed", "line", f"not a JSON object (got {type(obj).__name__})")
        else:
            self._rid = obj.get("id")
            try:
                self._check(obj if read is None else read(obj))
            except _Bad as bad:
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
        self._line, self._rid = line, None
        self.fail("well_formed", "line", message)

    # The hot path: one call per record. Bytes methods do the per-position work in C; a record
    # whose turns match its origin mask is split by class with arithmetic on its spans alone.
    def _check(self, d: dict[str, Any]) -> None:  # noqa: C901 (one pass over the record, by design)
        get = d.get
        o = _origin_bytes(get("origin"))
        lm = _loss_bytes(get("loss_mask"))
        L = len(o)

        # ---- mask lengths (structural: a record that fails is not counted)
        n = get("_n_tokens")
        c = None
        if n is None:
            ids = get("token_ids")
            counts = get("counts")
            if ids is not None:
                if type(ids) is not list:
                    raise _Bad("token_ids", "must be a list of token IDs (integers)")
                n = len(ids)
            if counts is not None:
                c = _counts(counts)
                if n is None:
                    n = c[0] + c[1] + c[2]
                elif c[0] + c[1] + c[2] != n:
                    raise _Bad("counts", f"counts sum to {sum(c)} but token_ids has {n}", check="mask_lengths")
            elif n is None:
                raise _Bad("token_ids", "missing: give token_ids (a list) or counts ({prompt, action, tool})")
        if L != n:
            raise _Bad("origin", f"{L} entries for {n} tokens", check="mask_lengths")
        if len(lm) != n:
            raise _Bad("loss_mask", f"{len(lm)} entries for {n} tokens", check="mask_lengths")
        P = o.count(0)
        A = o.count(1)
        T = L - P - A
        if c is not None and c != (P, A, T):
            k = next(i for i in range(3) if c[i] != (P, A, T)[i])
            raise _Bad(
                f"counts.{TOKEN_CLASSES[k]}",
                f"{c[k]} but the origin mask has {(P, A, T)[k]} {TOKEN_CLASSES[k]} positions",
                check="mask_lengths",
            )

        # ---- loss on allowed classes only
        tr_prompt = tr_action = tr_tool = 0
        if b"\x01" in lm:
            loss_int = int.from_bytes(lm, "big")
            act_int = int.from_bytes(o.translate(_IS_ACTION), "big")
            if self.action_only and not loss_int & ~act_int:
                tr_action = loss_int.bit_count()
            else:
                tr_action = (loss_int & act_int).bit_count()
                tr_prompt = (loss_int & int.from_bytes(o.translate(_IS_PROMPT), "big")).bit_count()
                tr_tool = loss_int.bit_count() - tr_action - tr_prompt
                self._loss_classes(o, loss_int, tr_prompt, tr_action, tr_tool)

        # ---- stop reason, truncation
        stop = get("stop_reason")
        truncated = stop == "length"
        rollout = self.rollout
        if rollout:
            sd = self.stop_reasons
            if type(stop) is str and stop in _STOP_SET:
                if stop in sd:
                    sd[stop] += 1
                else:
                    sd[stop] = 1
            elif stop is None:
                if get("_stop_logged", True):
                    self.fail("stop_reason", "stop_reason", f"missing; allowed: {', '.join(STOP_REASONS)}")
                else:
                    self.stop_not_logged += 1
                _bump(sd, "(not logged)")
            else:
                shown = repr(stop)
                _bump(sd, shown[:40], cap=64)
                self.fail("stop_reason", "stop_reason", f"{shown} is not one of {', '.join(STOP_REASONS)}")
        if truncated and self.drop_truncated and (tr_prompt or tr_action or tr_tool):
            self.fail(
                "truncated_trained",
                "loss_mask",
                f"truncated response (stop_reason length) carries loss on {tr_prompt + tr_action + tr_tool} "
                "position(s) but the workload drops truncated conversations (training.drop_truncated)",
            )

        # ---- policy version, staleness
        if rollout:
            v = get("policy_version")
            if v is not None:
                ref = get("trainer_version")
                vd = self.versions
                if (
                    type(v) is int and v in vd and v <= self.newest_version  # type: ignore[operator]
                    and type(ref) is int and 0 <= ref - v in self.staleness
                    and (self.max_staleness is None or ref - v <= self.max_staleness)
                ):
                    vd[v] += 1  # the common case: a known version, a known lag, within the bound
                    self.staleness[ref - v] += 1
                else:
                    self._staleness(v, ref)
            elif self.max_staleness is not None:
                self.fail("staleness", "policy_version", "missing (needed by --max-staleness)")

        # ---- turns, log-probs, cache hits
        sP = sA = sT = fP = fA = fT = hP = hA = hT = decode = nt = tool_calls = 0
        flags = 0 if truncated and self.drop_truncated else _F_KEPT
        if truncated:
            flags |= _F_TRUNCATED
        if rollout:
            turns = get("turns")
            derived = turns is None
            if derived:
                spans: Any = [m.span() for m in _RUNS_OF_ACTIONS.finditer(o)] if A else ()
            elif type(turns) is list:
                spans = turns
            else:
                raise _Bad("turns", "must be a list of [start, end] spans", check="turn_boundaries")
            nt = len(spans)
            cached = get("cached_tokens")
            pre = get("prefill_tokens")
            logged = cached is not None or pre is not None
            if logged:
                flags |= _F_CACHE_LOGGED
                if cached is not None and (type(cached) is not list or len(cached) != nt):
                    _per_turn(cached, nt, "cached_tokens")
                if pre is not None and (type(pre) is not list or len(pre) != nt):
                    _per_turn(pre, nt, "prefill_tokens")

            # the prompt is a prefix
            prefix = not P or o.count(0, 0, P) == P
            if not prefix:
                pos = next(i for i in range(L) if o[i] != 0)
                self.fail(
                    "turn_boundaries",
                    "origin",
                    f"prompt position {o.find(0, pos)} comes after a non-prompt position ({pos}); "
                    "the prompt must be a prefix",
                )

            # One pass over the invocations: invocation j samples [s, e); its input is [0, s). The
            # class split assumes a consistent record (prompt a prefix, spans = action runs);
            # _split_by_counting recounts one that is not.
            prev_e = span_len = in_span = before_a = computed = nonempty = 0
            sum_s = sum_ip = sum_before_a = 0
            for j in range(nt):
                if derived:
                    s, e = spans[j]
                else:
                    t = spans[j]
                    if type(t) is not list or len(t) != 2:
                        _spans(spans, L)  # raises, naming the bad span
                    s, e = t
                    if type(s) is not int or type(e) is not int or not prev_e <= s <= e <= L:
                        _spans(spans, L)
                    in_span += o.count(1, s, e)
                    prev_e = e
                if logged:
                    if cached is not None:
                        h = cached[j]
                        if type(h) is not int or h < 0:
                            _per_turn(cached, nt, "cached_tokens")
                        if pre is not None and (type(pre[j]) is not int or h + pre[j] != s):
                            _per_turn(pre, nt, "prefill_tokens")
                            self.fail(
                                "cache_hits",
                                f"prefill_tokens[{j}]",
                                f"turn {j + 1}: prefill {pre[j]} + cached {h} = {pre[j] + h}, "
                                f"but its input is {s} positions",
                            )
                    else:
                        h = pre[j]  # type: ignore[index]
                        if type(h) is not int or h < 0:
                            _per_turn(pre, nt, "prefill_tokens")
                        h = s - h
                        if h < 0:
                            self.fail(
                                "cache_hits",
                                f"prefill_tokens[{j}]",
                                f"turn {j + 1} prefills {pre[j]} positions but its input is only {s}",  # type: ignore[index]
                            )
                            h = 0
                    if h > computed:
                        self.fail(
                            "cache_hits",
                            f"cached_tokens[{j}]" if cached is not None else f"prefill_tokens[{j}]",
                            f"turn {j + 1} claims {h} cached positions but earlier invocations computed only "
                            f"{computed} (the last sampled token of a turn is never forwarded)",
                        )
                        if h > s:
                            h = s
                    if h:
                        hp = h if h < P else P
                        ha = 0
                        if h > P:
                            for k in range(j):
                                sk, ek = spans[k]
                                if h <= sk:
                                    break
                                ha += (h if h < ek else ek) - sk
                        hP += hp
                        hA += ha
                        hT += h - hp - ha
                sum_s += s
                sum_ip += s if s < P else P
                sum_before_a += before_a
                before_a += e - s
                if e > s:
                    nonempty += 1
                    computed = e - 1  # the previous input and all but the last sampled token
                else:
                    computed = s
            span_len = before_a
            decode = span_len - nonempty
            tool_calls = o.count(b"\x01\x02")
            fP = sum_ip - hP
            fA = sum_before_a - hA
            fT = sum_s - sum_ip - sum_before_a - hT

            # no tool observation precedes the first invocation
            first = spans[0][0] if nt else L
            if T and (first > P or not prefix):
                pos = o.find(2, 0, first)
                if pos >= 0:
                    self.fail(
                        "turn_boundaries",
                        "origin",
                        f"tool position {pos} precedes the first turn (starts at {first}): no tool was called yet",
                    )

            # sampled positions are exactly the action positions
            consistent = derived or in_span == span_len == A
            if consistent:
                sA = span_len
            else:
                self._locate_sampled_mismatch(o, spans)
                sA = in_span
                sP = sum(o.count(0, s, e) for s, e in spans)
                sT = span_len - sA - sP
            if not (consistent and prefix):
                fP, fA, fT, hP, hA, hT = _split_by_counting(o, spans, cached, pre)

            # log-probs for every sampled position
            lp = get("logprobs")
            if lp is None:
                if span_len and self.needs_logprobs:
                    self.fail("logprobs", "logprobs", f"missing; {span_len} sampled positions need a behaviour log-prob")
            else:
                self._check_logprobs(lp, get("_lp_offset", 0), spans, span_len, L)

        wait = get("tool_wait_s")
        wait_ms = 0
        if wait is not None:
            if type(wait) in (int, float) and 0 <= wait <= 1e9:
                wait_ms = int(wait * 1000 + 0.5)
            else:
                self.fail("well_formed", "tool_wait_s", f"{wait!r} is not a number of seconds (0 to 1e9)")
        rows = self.rows
        rows.append(
            (P, A, T, sP, sA, sT, fP, fA, fT, hP, hA, hT, decode, tr_prompt, tr_action, tr_tool,
             nt, tool_calls, flags, wait_ms)
        )
        if len(rows) >= self.acc.batch:
            self.acc.flush()

    def _loss_classes(self, o: bytes, loss_int: int, tr_prompt: int, tr_action: int, tr_tool: int) -> None:
        L = len(o)
        for cls, k, cnt in (("prompt", 0, tr_prompt), ("action", 1, tr_action), ("tool", 2, tr_tool)):
            if cnt and cls not in self.allowed:
                bad = loss_int & int.from_bytes(o.translate(_IS[k]), "big")
                pos = L - 1 - (bad.bit_length() - 1) // 8
                allowed = "/".join(c for c in TOKEN_CLASSES if c in self.allowed) or "nothing (no trainer)"
                self.fail(
                    "loss_classes",
                    "loss_mask",
                    f"{cnt} {cls} position(s) carry loss, the first at position {pos}; the workload trains {allowed}",
                )

    def _staleness(self, v: Any, ref: Any) -> None:
        if type(v) is not int or v < 0:
            self.fail("staleness", "policy_version", f"{v!r} is not a non-negative integer")
            return
        d = self.versions
        if v in d:
            d[v] += 1
        else:
            _bump(d, v)
        newest = self.newest_version
        if newest is None or v > newest:
            self.newest_version = newest = v
        from_record = ref is not None
        if from_record and (type(ref) is not int or ref < 0):
            self.fail("staleness", "trainer_version", f"{ref!r} is not a non-negative integer")
            return
        lag = (ref if from_record else newest) - v
        d = self.staleness
        if lag in d:
            d[lag] += 1
        else:
            _bump(d, lag)
        K = self.max_staleness
        if K is not None and lag > K:
            source = f"trainer_version {ref}" if from_record else f"the newest policy version so far ({newest})"
            self.fail("staleness", "policy_version", f"version {v} is {lag} behind {source}; --max-staleness is {K}")

    def _locate_sampled_mismatch(self, o: bytes, spans: list[Any]) -> None:
        names = ("prompt", "action", "tool")
        for j, (s, e) in enumerate(spans):
            i = next((i for i in range(s, e) if o[i] != 1), -1)
            if i >= 0:
                self.fail(
                    "sampled_are_actions",
                    f"turns[{j}]",
                    f"position {i} ({names[o[i]]}) is inside turn {j + 1}'s sampled span [{s}, {e})",
                )
                return
        prev = 0
        for s, e in [*spans, (len(o), len(o))]:
            i = o.find(1, prev, s)
            if i >= 0:
                self.fail("sampled_are_actions", "turns", f"action position {i} lies outside every turn's sampled span")
                return
            prev = e

    def _check_logprobs(self, lp: Any, offset: int, spans: Any, span_len: int, L: int) -> None:
        if type(lp) is not list:
            self.fail("logprobs", "logprobs", f"must be a list of numbers, got {type(lp).__name__}")
            return
        n = len(lp)
        if n == span_len:
            parts = [lp]
            where = "one per sampled position"
        elif n == L - offset:
            parts = [lp[s - offset:e - offset] for s, e in spans if e > s]
            where = "one per position"
        else:
            self.fail(
                "logprobs",
                "logprobs",
                f"{n} values match neither the {span_len} sampled positions nor the {L - offset} positions "
                "they should cover (misaligned: re-tokenised?)",
            )
            return
        for part in parts:
            try:
                total = sum(part)
            except TypeError:
                total = math.nan
            if total - total != 0:  # NaN or infinite, or not a number
                bad = next((x for x in part if type(x) not in (int, float) or not math.isfinite(x)), None)
                self.fail(
                    "logprobs",
                    "logprobs",
                    f"a sampled position has no finite log-prob ({bad!r}; values given {where})",
                )
                return


# --------------------------------------------------------------------------- entry point


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
) -> Reconciliation:
    """Check every record of a trajectory log and count it into an observed ledger.

    Parameters
    ----------
    path : str or Path
        JSONL (optionally gzip-compressed, detected by its magic bytes) or Parquet file.
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
    The seed's replay record logged by a pipeline with automatic prefix reuse: turn 2 reuses the
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
    read = MAPPINGS[mapping]
    try:
        parquet = _is_parquet(path)
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    size = path.stat().st_size
    rec = _Reconciler(workload, max_staleness, max_errors, unit="row" if parquet else "line")
    every = 4096
    lines = 0
    if parquet:
        rows, pos = _parquet_rows(path)
        for lines, obj in enumerate(rows, 1):
            rec.feed(lines, obj, read)
            if progress is not None and not lines % every:
                progress(pos(), size)
    else:
        it, pos, close = _open_lines(path)
        try:
            for lines, raw in enumerate(it, 1):
                obj = _decode_line(raw)
                if obj is _BLANK:
                    continue
                if obj.__class__ is _NotJSON:
                    rec.malformed(lines, obj.message)
                    continue
                rec.feed(lines, obj, read)
                if progress is not None and not lines % every:
                    progress(pos(), size)
        except (OSError, EOFError, gzip.BadGzipFile) as exc:
            raise InputError(f"{path}: unreadable after line {lines}: {exc}") from None
        finally:
            close()
    if progress is not None:
        progress(size, size)
    if rec.records == 0:
        raise InputError(f"{path}: no records (an empty file cannot show that a pipeline works)")
    return _finish(rec, path, mapping, lines, workload, tolerance, plan_conversations)


def _finish(
    rec: _Reconciler,
    path: Path,
    mapping: str,
    lines: int,
    workload: "Workload | None",
    tolerance: float,
    plan_conversations: int | None,
) -> Reconciliation:
    import numpy as np

    acc = rec.acc
    acc.flush()
    n = acc.n
    N = workload.volume.conversations_per_step if workload is not None else 1
    sums = acc.sums

    def by_class(values: "np.ndarray", n: int) -> dict[str, float]:
        vals = [float(x) / n if n else 0.0 for x in values]  # as numpy's mean of the counts
        return dict(zip(CLASSES_AND_TOTAL, [*vals, sum(vals)]))

    inv = 1.0 / n if n else 0.0
    per_conv = {c: by_class(sums[3 * k:3 * k + 3], n) for k, c in enumerate(COUNTERS)}
    per_step = {c: {k: v * N for k, v in d.items()} for c, d in per_conv.items()}
    totals = {
        c: dict(zip(CLASSES_AND_TOTAL, [*(int(x) for x in sums[3 * k:3 * k + 3]), int(sums[3 * k:3 * k + 3].sum())]))
        for k, c in enumerate(COUNTERS)
    }

    def pct(q: float) -> dict[str, dict[str, float]]:
        out = {}
        for k, c in enumerate(COUNTERS):
            vals = [_percentiles(acc.hist[3 * k + i], (q,))[0] for i in range(3)]
            vals.append(_percentiles(acc.hist[_H_TOTALS + k], (q,))[0])
            out[c] = dict(zip(CLASSES_AND_TOTAL, vals))
        return out

    p50, p95 = pct(50), pct(95)
    rec_total = _H_TOTALS  # the recorded total is the record length
    rl50, rl95 = _percentiles(acc.hist[rec_total], (50, 95))
    stats = {
        "invocations": acc.invocations * inv,
        "tool_calls": acc.tool_calls * inv,
        "tool_wait_s": float(sums[_H_WAIT_MS]) * inv / 1000.0,
        "tool_wait_s_p95": _percentiles(acc.hist[_H_WAIT_MS], (95,))[0] / 1000.0,
        "truncated_fraction": acc.flag_sums["truncated"] * inv,
        "record_length_p50": rl50,
        "record_length_p95": rl95,
        "record_length_max": int(acc.maxes[rec_total]),
    }
    qs = (50, 90, 95, 99)
    resp = dict(zip(("p50", "p90", "p95", "p99"), _percentiles(acc.hist[_H_RESPONSE_LEN], qs)))
    resp["mean"] = float(sums[_H_RESPONSE_LEN]) * inv
    resp["max"] = float(acc.maxes[_H_RESPONSE_LEN])

    notes: list[str] = []
    cache_logged = acc.flag_sums["cache_logged"]
    if n and cache_logged < n and rec.rollout:
        notes.append(
            f"{n - cache_logged:,} of {n:,} counted records log neither cached_tokens nor prefill_tokens: "
            "they are counted with no cache hits (every invocation prefills its whole input)"
        )
    if rec.stop_not_logged:
        notes.append(
            f"{rec.stop_not_logged:,} records carry no stop reason (the {mapping} format does not log one): "
            "stop_reason and truncated_trained are checked only where it is given"
        )
    if n < rec.records:
        notes.append(
            f"{rec.records - n:,} of {rec.records:,} records are not counted in the ledger: they are malformed "
            "(well_formed, mask_lengths or turn_boundaries failures)"
        )
    if rec.rollout and not rec.versions:
        notes.append("no record carries a policy version: staleness cannot be shown")

    checks: list[Check] = []
    first = {}
    for f in rec.failures:
        first.setdefault(f.check, f)
    for name, what in RECORD_CHECKS.items():
        cnt = rec.failure_counts[name]
        if cnt:
            detail = f"{cnt:,} failure(s); first: {first[name]}" if name in first else f"{cnt:,} failure(s)"
        else:
            detail = what
        checks.append(Check(name, cnt == 0, detail))

    plan_rows = None
    if workload is not None:
        plan_rows = _compare(workload, per_conv, tolerance, all_cache_logged=cache_logged == n, conversations=plan_conversations)
        bad = [r for r in plan_rows if r.status == "FAIL"]
        if bad:
            worst = max(bad, key=lambda r: math.inf if r.relative_error is None else abs(r.relative_error))
            err = "inf" if worst.relative_error is None else f"{worst.relative_error:+.1%}"
            detail = (
                f"{len(bad)} per-conversation mean(s) differ from the plan by more than {tolerance:.1%}; worst: "
                f"{worst.counter}/{worst.token_class} observed {worst.observed:,.1f} vs planned {worst.planned:,.1f} ({err})"
            )
        else:
            detail = f"every per-conversation mean within {tolerance:.1%} of the plan of {workload.name}"
        checks.append(Check("matches_plan_within_tolerance", not bad, detail))

    led = Ledger(
        workload=workload.name if workload is not None else path.name,
        method=workload.method if workload is not None else "unspecified",
        exact=False,
        conversations_sampled=n,
        conversations_per_step=N,
        per_conversation=per_conv,
        per_step=per_step,
        per_conversation_p50=p50,
        per_conversation_p95=p95,
        conversation_stats=stats,
        checks=checks,
    )

    def keyed(d: dict[Any, int]) -> dict[str, int]:
        items = sorted(d.items(), key=lambda kv: (isinstance(kv[0], str), kv[0] if isinstance(kv[0], int) else 0, str(kv[0])))
        return {str(k): v for k, v in items}

    return Reconciliation(
        source=str(path),
        mapping=mapping,
        ledger=led,
        lines=lines,
        records=rec.records,
        records_counted=n,
        records_failed=rec.records_failed,
        failures=rec.failures,
        failure_counts={k: v for k, v in rec.failure_counts.items()},
        stop_reasons=dict(sorted(rec.stop_reasons.items(), key=lambda kv: -kv[1])),
        policy_versions=keyed(rec.versions),
        staleness=keyed(rec.staleness),
        response_length=resp,
        totals=totals,
        notes=notes,
        tolerance=tolerance if workload is not None else None,
        plan=plan_rows,
    )


def _compare(
    workload: "Workload",
    observed: dict[str, dict[str, float]],
    tolerance: float,
    all_cache_logged: bool,
    conversations: int | None,
) -> list[PlanRow]:
    """Observed per-conversation means against the plan of ``workload``, within ``tolerance``."""
    from capplan.ledger import compute_ledger

    planned = compute_ledger(workload, conversations=conversations).per_conversation
    unlogged = set()
    if not all_cache_logged and workload.cache.reuse != "none":
        unlogged = {"prefill_forwarded", "cache_hit"}
    rows = []
    for counter in COUNTERS:
        for cls in CLASSES_AND_TOTAL:
            o, p = float(observed[counter][cls]), float(planned[counter][cls])
            if o == 0 and p == 0:
                continue
            rel = (o - p) / p if p else None
            if counter in unlogged:
                status = "not logged"
            elif rel is not None and abs(rel) <= tolerance + 1e-12:
                status = "ok"
            else:
                status = "FAIL"
            rows.append(PlanRow(counter, cls, o, p, rel, status))
    return rows


def plan_records(
    workload: "Workload", n: int | None = None, seed: int | None = None, logprobs: bool = True
) -> Iterator[dict[str, Any]]:
    """Records in capplan's format for conversations sampled from ``workload``'s plan.

    The conversations are those :func:`capplan.ledger.compute_ledger` samples with the same ``n``
    and ``seed``, so reconciling the records (with ``plan_conversations=n``) gives the plan's
    per-conversation ledger exactly. For tests, examples and benchmarks: a log of a real pipeline
    is what this module is for.

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
