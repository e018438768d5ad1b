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


class _Rec:
    """A record in the common form every reader produces (masks as bytes, see the tables above)."""

    __slots__ = (
        "rid", "n_tokens", "counts", "origin", "loss", "turns", "cached", "prefill", "logprobs",
        "lp_offset", "version", "trainer_version", "stop", "stop_logged", "tool_wait_s",
    )

    def __init__(self) -> None:
        self.rid: str | None = None
        self.n_tokens: int | None = None  # len(token_ids), when given
        self.counts: tuple[int, int, int] | None = None
        self.origin: bytes = b""
        self.loss: bytes = b""
        self.turns: list[Any] | None = None
        self.cached: list[Any] | None = None
        self.prefill: list[Any] | None = None
        self.logprobs: list[Any] | None = None
        self.lp_offset: int = 0  # position of logprobs[0] when they cover positions lp_offset..end
        self.version: Any = None
        self.trainer_version: Any = None
        self.stop: Any = None
        self.stop_logged = True  # False: the source format has no stop reason to check
        self.tool_wait_s: Any = None


# --------------------------------------------------------------------------- readers / mappings


def _origin_bytes(value: Any, field: str = "origin") -> bytes:
    if type(value) is str:
        try:
            o = value.encode("latin-1").translate(_ORIGIN_FROM_STR)
        except UnicodeEncodeError:
            raise _Bad(field, "a string of the letters p (prompt), a (action), t (tool)") from None
    elif type(value) is list:
        try:
            o = bytes(value).translate(_ORIGIN_FROM_INT)
        except (TypeError, ValueError):
            raise _Bad(field, "a list of 0 (prompt), 1 (action), 2 (tool)") from None
    else:
        raise _Bad(field, "missing: a string of p/a/t or a list of 0/1/2, one entry per position")
    if b"\xff" in o:
        i = o.index(b"\xff")
        raise _Bad(field, f"position {i} is {value[i]!r}; allowed: p/a/t or 0/1/2")
    return o


def _loss_bytes(value: Any, field: str = "loss_mask") -> bytes:
    if type(value) is str:
        try:
            m = value.encode("latin-1").translate(_LOSS_FROM_STR)
        except UnicodeEncodeError:
            raise _Bad(field, "a string of 0/1") from None
    elif type(value) is list:
        try:
            m = bytes(value).translate(_LOSS_FROM_INT)
        except (TypeError, ValueError):
            raise _Bad(field, "a list of 0/1") from None
    else:
        raise _Bad(field, "missing: a string of 0/1 or a list of 0/1, one entry per position")
    if b"\xff" in m:
        i = m.index(b"\xff")
        raise _Bad(field, f"position {i} is {value[i]!r}; allowed: 0 or 1")
    return m


def _int_list(value: Any, field: str) -> list[int]:
    if type(value) is not list:
        raise _Bad(field, "must be a list of token IDs (integers)")
    return value


def _read_capplan(obj: dict[str, Any]) -> _Rec:
    """The ``capplan`` record format (see the module docstring)."""
    r = _Rec()
    rid = obj.get("id")
    r.rid = None if rid is None else str(rid)
    ids = obj.get("token_ids")
    counts = obj.get("counts")
    if ids is not None:
        r.n_tokens = len(_int_list(ids, "token_ids"))
    if counts is not None:
        if type(counts) is not dict or any(
            type(counts.get(c, 0)) is not int or counts.get(c, 0) < 0 for c in TOKEN_CLASSES
        ) or set(counts) - set(TOKEN_CLASSES):
            raise _Bad("counts", "must map prompt/action/tool to non-negative integers")
        r.counts = (counts.get("prompt", 0), counts.get("action", 0), counts.get("tool", 0))
    if ids is None and counts is None:
        raise _Bad("token_ids", "missing: give token_ids (a list) or counts ({prompt, action, tool})")
    r.origin = _origin_bytes(obj.get("origin"))
    r.loss = _loss_bytes(obj.get("loss_mask"))
    r.turns = obj.get("turns")
    r.cached = obj.get("cached_tokens")
    r.prefill = obj.get("prefill_tokens")
    r.logprobs = obj.get("logprobs")
    r.version = obj.get("policy_version")
    r.trainer_version = obj.get("trainer_version")
    r.stop = obj.get("stop_reason")
    r.tool_wait_s = obj.get("tool_wait_s")
    return r


def _read_verl(obj: dict[str, Any]) -> _Rec:
    """verl ``AgentLoopOutput`` (``verl/experimental/agent_loop/agent_loop.py``), one dumped per line.

    ``prompt_ids`` are the prompt; ``response_ids`` hold generated and tool-response tokens, told
    apart by ``response_mask`` (1 generated, 0 tool), which is also what verl trains on;
    ``response_logprobs`` are aligned with ``response_ids``. The fully asynchronous trainer adds
    ``extra_fields.param_version_start`` (policy version; the oldest weights that sampled part of
    the response) and ``extra_fields.is_cancel`` (stop reason ``abort``). verl logs no other stop
    reason; ``extra_fields.stop_reason`` is read when a pipeline adds one.
    """
    r = _Rec()
    prompt = _int_list(obj.get("prompt_ids"), "prompt_ids")
    resp = _int_list(obj.get("response_ids"), "response_ids")
    mask = obj.get("response_mask")
    if type(mask) is not list:
        raise _Bad("response_mask", "missing: a list of 0/1, one per response token")
    try:
        m = bytes(mask).translate(_LOSS_FROM_INT)
    except (TypeError, ValueError):
        raise _Bad("response_mask", "a list of 0/1") from None
    if b"\xff" in m:
        i = m.index(b"\xff")
        raise _Bad("response_mask", f"position {i} is {mask[i]!r}; allowed: 0 or 1")
    if len(m) != len(resp):
        raise _Bad(
            "response_mask", f"{len(m)} entries for {len(resp)} response_ids", check="mask_lengths"
        )
    P = len(prompt)
    r.n_tokens = P + len(resp)
    r.origin = b"\x00" * P + m.translate(_VERL_MASK_TO_ORIGIN)
    r.loss = b"\x00" * P + m
    lp = obj.get("response_logprobs")
    if lp is not None:
        r.logprobs, r.lp_offset = lp, P
    extra = obj.get("extra_fields") or {}
    if type(extra) is not dict:
        raise _Bad("extra_fields", "must be an object")
    r.version = extra.get("param_version_start")
    r.stop = extra.get("stop_reason")
    if r.stop is None:
        if extra.get("is_cancel"):
            r.stop = "abort"
        else:
            r.stop_logged = False
    metrics = obj.get("metrics")
    if type(metrics) is dict and isinstance(metrics.get("tool_calls"), (int, float)):
        r.tool_wait_s = metrics["tool_calls"]  # verl times tool calls [s]: waiting, not GPU work
    return r


def _read_openrlhf(obj: dict[str, Any]) -> _Rec:
    """OpenRLHF agent executor output (``openrlhf/utils/agent.py``), one dumped per line.

    ``observation_tokens`` is the whole sequence (prompt, actions, environment feedback);
    ``action_ranges`` are the ``(start, end)`` spans the model generated, which OpenRLHF turns into
    its ``action_mask`` (the trained positions); ``rollout_log_probs`` are aligned with
    ``observation_tokens`` (0.0 on non-generated positions). ``truncated`` (``finish_reason ==
    "length"``, read in ``openrlhf/trainer/ppo_utils/samples_generator.py``) gives stop reason
    ``length``, else ``stop``. OpenRLHF logs no policy version; ``policy_version`` is read when a
    pipeline adds one.
    """
    r = _Rec()
    toks = _int_list(obj.get("observation_tokens"), "observation_tokens")
    L = len(toks)
    r.n_tokens = L
    ranges = obj.get("action_ranges")
    if type(ranges) is not list:
        raise _Bad("action_ranges", "missing: a list of [start, end] spans")
    spans = _spans(ranges, L, "action_ranges")
    origin = bytearray(b"\x02" * L)
    first = spans[0][0] if spans else L
    origin[:first] = b"\x00" * first
    for s, e in spans:
        origin[s:e] = b"\x01" * (e - s)
    r.origin = bytes(origin)
    r.loss = r.origin.translate(_IS[_ACTION])
    r.turns = [list(s) for s in spans]
    r.logprobs = obj.get("rollout_log_probs")
    r.version = obj.get("policy_version")
    t = obj.get("truncated")
    if t is None:
        r.stop_logged = False
    else:
        r.stop = "length" if t else "stop"
    return r


def _unbatch(value: Any) -> Any:
    """AReaL tensors carry a batch dimension of 1; accept ``[[...]]`` as well as ``[...]``."""
    if type(value) is list and len(value) == 1 and type(value[0]) is list:
        return value[0]
    return value


def _read_areal(obj: dict[str, Any]) -> _Rec:
    """AReaL trajectory from ``RLVRWorkflow`` / ``MultiTurnWorkflow`` (``areal/workflow/*.py``).

    ``input_ids`` is the whole sequence; ``versions`` is the policy version of each generated
    token and -1 on every input position (prompt and, in multi-turn, inserted feedback), so it
    gives the origin; ``loss_mask`` gives the trained positions; ``logprobs`` are per position
    (0.0 on inputs); ``attention_mask`` trims padding. ``stop_reason`` (of ``ModelResponse``,
    ``areal/api/io_struct.py``) is read when a pipeline logs it; ``interrupt`` means ``abort``.
    The policy version is the oldest version among the generated tokens.
    """
    r = _Rec()
    toks = _int_list(_unbatch(obj.get("input_ids")), "input_ids")
    versions = _unbatch(obj.get("versions"))
    if type(versions) is not list:
        raise _Bad("versions", "missing: the per-token policy version (-1 on input positions)")
    loss = _unbatch(obj.get("loss_mask"))
    att = _unbatch(obj.get("attention_mask"))
    L = len(toks)
    if att is not None:
        if type(att) is not list or len(att) != L:
            raise _Bad("attention_mask", f"must have one entry per input_ids position ({L})", check="mask_lengths")
        L = sum(1 for a in att if a)
    if len(versions) < L:
        raise _Bad("versions", f"{len(versions)} entries for {L} positions", check="mask_lengths")
    try:
        gen = bytes(1 if v >= 0 else 0 for v in versions[:L])
    except TypeError:
        raise _Bad("versions", "must be a list of integers") from None
    first = gen.find(1)
    first = L if first < 0 else first
    r.origin = b"\x00" * first + gen[first:].translate(_VERL_MASK_TO_ORIGIN)
    if type(loss) is not list:
        raise _Bad("loss_mask", "missing: a list of 0/1, one per position")
    r.loss = _loss_bytes(loss[:L] if len(loss) >= L else loss)
    r.n_tokens = L
    lp = _unbatch(obj.get("logprobs"))
    if lp is not None:
        r.logprobs = lp[:L] if type(lp) is list else lp
    vs = [v for v in versions[:L] if v >= 0]
    r.version = min(vs) if vs else None
    stop = obj.get("stop_reason")
    if stop is None:
        r.stop_logged = False
    else:
        r.stop = "abort" if stop == "interrupt" else stop
    return r


MAPPINGS: dict[str, Callable[[dict[str, Any]], _Rec]] = {
    "capplan": _read_capplan,
    "verl": _read_verl,
    "openrlhf": _read_openrlhf,
    "areal": _read_areal,
}
"""Record formats by name: capplan's own, and the dumps of three RL frameworks."""


def _spans(turns: Any, L: int, field: str = "turns") -> list[tuple[int, int]]:
    """Validate turn spans: a list of ``[start, end]`` with ``0 <= start <= end <= L``, in order."""
    if type(turns) is not list:
        raise _Bad(field, "must be a list of [start, end] spans", check="turn_boundaries")
    out: list[tuple[int, int]] = []
    prev = 0
    for j, t in enumerate(turns):
        if type(t) not in (list, tuple) or len(t) != 2 or type(t[0]) is not int or type(t[1]) is not int:
            raise _Bad(f"{field}[{j}]", f"{t!r} is not a [start, end] pair of integers", check="turn_boundaries")
        s, e = t
        if not 0 <= s <= e <= L:
            raise _Bad(f"{field}[{j}]", f"span [{s}, {e}) is not inside the record (0..{L})", check="turn_boundaries")
        if s < prev:
            raise _Bad(
                f"{field}[{j}]", f"span [{s}, {e}) starts before turn {j}'s span ends ({prev})", check="turn_boundaries"
            )
        out.append((s, e))
        prev = e
    return out


def _per_turn(values: Any, n: int, field: str) -> list[int]:
    if type(values) is not list or len(values) != n:
        got = len(values) if type(values) is list else type(values).__name__
        raise _Bad(field, f"needs one entry per turn: {n} turns, got {got}", check="turn_boundaries")
    for j, v in enumerate(values):
        if type(v) is not int or v < 0:
            raise _Bad(f"{field}[{j}]", f"{v!r} is not a non-negative integer", check="turn_boundaries")
    return values


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

    v = np.maximum(v, 0)
    e = np.maximum(np.frexp(v.astype(np.float64))[1] - 11, 0)
    e = np.minimum(e, _EMAX)
    return np.minimum(_SUB * e + (v >> e), _NBINS - 1)


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


# Row layout of one counted record: 7 counters x 3 classes, then the extra columns.
_NC = len(COUNTERS) * 3
_X_RECORD_LEN, _X_RESPONSE_LEN, _X_INVOCATIONS, _X_TOOL_CALLS, _X_TRUNCATED, _X_WAIT_MS, _X_CACHE_LOGGED = range(
    _NC, _NC + 7
)
_NCOL = _NC + 7
# Histogram series: the 21 class counters, the 7 counter totals, record length, response length, tool wait.
_H_TOTALS = _NC
_H_RECORD_LEN = _NC + 7
_H_RESPONSE_LEN = _NC + 8
_H_WAIT_MS = _NC + 9
_NSER = _NC + 10


class _Accumulator:
    """Folds per-record rows into sums, maxima and fixed-size histograms, one batch at a time."""

    def __init__(self, batch: int = 8192) -> None:
        import numpy as np

        self.batch = batch
        self.rows: list[tuple[int, ...]] = []
        self.n = 0
        self.sums = np.zeros(_NCOL, dtype=np.int64)
        self.maxes = np.zeros(_NSER, dtype=np.int64)
        self.hist = np.zeros((_NSER, _NBINS), dtype=np.int64)

    def add(self, row: tuple[int, ...]) -> None:
        self.rows.append(row)
        if len(self.rows) >= self.batch:
            self.flush()

    def flush(self) -> None:
        import numpy as np

        if not self.rows:
            return
        a = np.array(self.rows, dtype=np.int64)
        self.rows = []
        b = a.shape[0]
        self.n += b
        self.sums += a.sum(0)
        series = np.empty((b, _NSER), dtype=np.int64)
        series[:, :_NC] = a[:, :_NC]
        series[:, _H_TOTALS:_H_TOTALS + 7] = a[:, :_NC].reshape(b, 7, 3).sum(2)
        series[:, _H_RECORD_LEN] = a[:, _X_RECORD_LEN]
        series[:, _H_RESPONSE_LEN] = a[:, _X_RESPONSE_LEN]
        series[:, _H_WAIT_MS] = a[:, _X_WAIT_MS]
        self.maxes = np.maximum(self.maxes, series.max(0))
        flat = (_bins(series) + np.arange(_NSER, dtype=np.int64) * _NBINS).ravel()
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

_MAX_KEYS = 256  # distinct stop reasons / versions / lags kept; the rest are counted as "(other)"


def _bump(d: dict[Any, int], key: Any) -> None:
    if key in d or len(d) < _MAX_KEYS:
        d[key] = d.get(key, 0) + 1
    else:
        d["(other)"] = d.get("(other)", 0) + 1


class _Reconciler:
    def __init__(
        self,
        workload: "Workload | None",
        max_staleness: int | None,
        max_errors: int,
        unit: str,
    ) -> None:
        self.unit = unit
        self.max_errors = max_errors
        self.max_staleness = max_staleness
        if workload is not None:
            self.allowed = frozenset(workload.training.loss_on) if workload.has_trainer else frozenset()
            self.drop_truncated = workload.training.drop_truncated
            self.needs_logprobs = workload.method in LOGPROB_METHODS
            self.rollout = workload.has_rollout
            self.scorers = workload.scorers
        else:
            self.allowed = frozenset({"action"})
            self.drop_truncated = False
            self.needs_logprobs = True
            self.rollout = True
            self.scorers = 0
        self.failures: list[Failure] = []
        self.failure_counts: dict[str, int] = {name: 0 for name in RECORD_CHECKS}
        self.records = 0
        self.records_failed = 0
        self.stop_reasons: dict[str, int] = {}
        self.versions: dict[int, int] = {}
        self.staleness: dict[int, int] = {}
        self.newest_version: int | None = None
        self.stop_not_logged = 0
        self.acc = _Accumulator()
        self._line = 0
        self._rid: str | None = None
        self._failed = False

    def fail(self, check: str, field: str, message: str) -> None:
        self.failure_counts[check] += 1
        self._failed = True
        if len(self.failures) < self.max_errors:
            self.failures.append(Failure(self._line, check, field, message, self._rid, self.unit))

    def feed(self, line: int, obj: Any, read: Callable[[dict[str, Any]], _Rec]) -> None:
        """Check and count one record (``obj`` is the decoded JSON value or a Parquet row)."""
        self.records += 1
        self._line, self._rid, self._failed = line, None, False
        try:
            if type(obj) is not dict:
                raise _Bad("line", f"not a JSON object (got {type(obj).__name__})")
            rid = obj.get("id")
            self._rid = None if rid is None else str(rid)
            rec = read(obj)
            self._check(rec)
        except _Bad as bad:
            self.fail(bad.check, bad.field, bad.message)
        if self._failed:
            self.records_failed += 1

    def malformed(self, line: int, message: str) -> None:
        self.records += 1
        self.records_failed += 1
        self._line, self._rid = line, None
        self.fail("well_formed", "line", message)

    # The hot path: one call per record.
    def _check(self, r: _Rec) -> None:  # noqa: C901 (one pass over the record, by design)
        o, lm = r.origin, r.loss
        L = len(o)
        # ---- mask lengths (structural: a record that fails is not counted)
        n = r.n_tokens
        if n is None:
            assert r.counts is not None
            n = sum(r.counts)
        elif r.counts is not None and sum(r.counts) != n:
            raise _Bad("counts", f"counts sum to {sum(r.counts)} but token_ids has {n}", check="mask_lengths")
        if L != n:
            raise _Bad("origin", f"{L} entries for {n} tokens", check="mask_lengths")
        if len(lm) != n:
            raise _Bad("loss_mask", f"{len(lm)} entries for {n} tokens", check="mask_lengths")
        P = o.count(0)
        A = o.count(1)
        T = L - P - A
        if r.counts is not None and r.counts != (P, A, T):
            k = next(i for i in range(3) if r.counts[i] != (P, A, T)[i])
            raise _Bad(
                f"counts.{TOKEN_CLASSES[k]}",
                f"{r.counts[k]} but the origin mask has {(P, A, T)[k]} {TOKEN_CLASSES[k]} positions",
                check="mask_lengths",
            )

        # ---- loss on allowed classes only
        loss_int = int.from_bytes(lm, "big")
        tr_prompt = (loss_int & int.from_bytes(o.translate(_IS[_PROMPT]), "big")).bit_count() if loss_int else 0
        tr_action = (loss_int & int.from_bytes(o.translate(_IS[_ACTION]), "big")).bit_count() if loss_int else 0
        tr_total = lm.count(1) if loss_int else 0
        tr_tool = tr_total - tr_prompt - tr_action
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

        # ---- stop reason, truncation
        stop = r.stop
        truncated = stop == "length"
        if self.rollout:
            if stop is None:
                if r.stop_logged:
                    self.fail("stop_reason", "stop_reason", f"missing; allowed: {', '.join(STOP_REASONS)}")
                else:
                    self.stop_not_logged += 1
                _bump(self.stop_reasons, "(not logged)")
            else:
                key = stop if type(stop) is str else repr(stop)
                _bump(self.stop_reasons, key)
                if stop not in STOP_REASONS:
                    self.fail("stop_reason", "stop_reason", f"{stop!r} is not one of {', '.join(STOP_REASONS)}")
        if truncated and self.drop_truncated and tr_total:
            self.fail(
                "truncated_trained",
                "loss_mask",
                f"truncated response (stop_reason length) carries loss on {tr_total} position(s) but the "
                "workload drops truncated conversations (training.drop_truncated)",
            )

        # ---- policy version, staleness
        v = r.version
        if self.rollout:
            if v is not None and (type(v) is not int or v < 0):
                self.fail("staleness", "policy_version", f"{v!r} is not a non-negative integer")
                v = None
            if v is not None:
                _bump(self.versions, v)
                if self.newest_version is None or v > self.newest_version:
                    self.newest_version = v
                ref = r.trainer_version
                if ref is not None and (type(ref) is not int or ref < 0):
                    self.fail("staleness", "trainer_version", f"{ref!r} is not a non-negative integer")
                    ref = None
                if ref is None:
                    ref = self.newest_version
                lag = ref - v
                _bump(self.staleness, lag)
                K = self.max_staleness
                if K is not None and lag > K:
                    source = "trainer_version" if r.trainer_version is not None else "the newest policy version so far"
                    self.fail(
                        "staleness",
                        "policy_version",
                        f"version {v} is {lag} behind {source} ({ref}); --max-staleness is {K}",
                    )
            elif self.max_staleness is not None:
                self.fail("staleness", "policy_version", "missing (needed by --max-staleness)")

        # ---- turns: spans and per-invocation lists (structural)
        sampled = [0, 0, 0]
        prefill = [0, 0, 0]
        hit = [0, 0, 0]
        decode = 0
        invocations = tool_calls = 0
        cache_logged = 1
        if self.rollout:
            if r.turns is None:
                spans = [m.span() for m in _RUNS_OF_ACTIONS.finditer(o)] if A else []
            else:
                spans = _spans(r.turns, L)
            nt = len(spans)
            cached = None if r.cached is None else _per_turn(r.cached, nt, "cached_tokens")
            pre = None if r.prefill is None else _per_turn(r.prefill, nt, "prefill_tokens")
            cache_logged = int(cached is not None or pre is not None)

            # prompt is a prefix; no tool observation before the first invocation
            if P and o.count(0, 0, P) != P:
                pos = next(i for i in range(L) if o[i] != 0)
                later = o.find(b"\x00", pos)
                self.fail(
                    "turn_boundaries",
                    "origin",
                    f"prompt position {later} comes after a non-prompt position ({pos}); the prompt must be a prefix",
                )
            first = spans[0][0] if spans else L
            if T and first:
                pos = o.find(b"\x02", 0, first)
                if pos >= 0:
                    self.fail(
                        "turn_boundaries",
                        "origin",
                        f"tool position {pos} precedes the first turn (starts at {first}): no tool was called yet",
                    )

            # sampled positions are exactly the action positions
            in_span = 0
            span_len = 0
            for s, e in spans:
                span_len += e - s
                in_span += o.count(1, s, e)
            if in_span != span_len or span_len != A:
                self._locate_sampled_mismatch(o, spans)
            sampled[1] = in_span
            sampled[0] = sum(o.count(0, s, e) for s, e in spans) if in_span != span_len else 0
            sampled[2] = span_len - in_span - sampled[0]

            # log-probs for every sampled position
            lp = r.logprobs
            if lp is None:
                if self.needs_logprobs and span_len:
                    self.fail("logprobs", "logprobs", f"missing; {span_len} sampled positions need a behaviour log-prob")
            else:
                self._check_logprobs(lp, r.lp_offset, spans, span_len, L)

            # inputs, cache hits and prefill per invocation
            cP = cA = 0  # prompt/action positions before the current span start
            prev_start = 0
            computed = 0  # positions earlier invocations computed
            for j, (s, e) in enumerate(spans):
                cP += o.count(0, prev_start, s)
                cA += o.count(1, prev_start, s)
                prev_start = s
                if cached is not None:
                    h = cached[j]
                    if pre is not None and h + pre[j] != s:
                        self.fail(
                            "cache_hits",
                            f"prefill_tokens[{j}]",
                            f"turn {j + 1}: prefill {pre[j]} + cached {h} = {pre[j] + h}, but its input is {s} positions",
                        )
                elif pre is not None:
                    h = s - pre[j]
                    if h < 0:
                        self.fail(
                            "cache_hits",
                            f"prefill_tokens[{j}]",
                            f"turn {j + 1} prefills {pre[j]} positions but its input is only {s}",
                        )
                        h = 0
                else:
                    h = 0
                if h > computed:
                    self.fail(
                        "cache_hits",
                        f"cached_tokens[{j}]" if cached is not None else f"prefill_tokens[{j}]",
                        f"turn {j + 1} claims {h} cached positions but earlier invocations computed only {computed} "
                        "(the last sampled token of a turn is never forwarded)",
                    )
                if h > s:
                    h = s
                if h:
                    hp = o.count(0, 0, h)
                    ha = o.count(1, 0, h)
                    hit[0] += hp
                    hit[1] += ha
                    hit[2] += h - hp - ha
                    prefill[0] += cP - hp
                    prefill[1] += cA - ha
                    prefill[2] += s - cP - cA - (h - hp - ha)
                else:
                    prefill[0] += cP
                    prefill[1] += cA
                    prefill[2] += s - cP - cA
                d = e - s - 1
                if d > 0:
                    decode += d
                done = s + (d if d > 0 else 0)
                if done > computed:
                    computed = done
                if e < L and o[e] == 2:
                    tool_calls += 1
            invocations = nt

        # ---- count
        kept = not (truncated and self.drop_truncated)
        sc = self.scorers if kept else 0
        wait = r.tool_wait_s
        wait_ms = int(round(wait * 1000)) if type(wait) in (int, float) and wait >= 0 else 0
        self.acc.add(
            (
                P, A, T,
                sampled[0], sampled[1], sampled[2],
                prefill[0], prefill[1], prefill[2],
                hit[0], hit[1], hit[2],
                0, decode, 0,
                tr_prompt, tr_action, tr_tool,
                sc * P, sc * A, sc * T,
                L, L - P, invocations, tool_calls, int(truncated), wait_ms, cache_logged,
            )
        )

    def _locate_sampled_mismatch(self, o: bytes, spans: list[tuple[int, int]]) -> None:
        names = ("prompt", "action", "tool")
        for j, (s, e) in enumerate(spans):
            for i in range(s, e):
                if o[i] != 1:
                    self.fail(
                        "sampled_are_actions",
                        "turns",
                        f"position {i} ({names[o[i]]}) is inside turn {j + 1}'s sampled span [{s}, {e})",
                    )
                    return
        prev = 0
        for s, e in [*spans, (len(o), len(o))]:
            i = o.find(b"\x01", prev, s)
            if i >= 0:
                self.fail("sampled_are_actions", "turns", f"action position {i} lies outside every turn's sampled span")
                return
            prev = e

    def _check_logprobs(self, lp: Any, offset: int, spans: list[tuple[int, int]], span_len: int, L: int) -> None:
        if type(lp) is not list:
            self.fail("logprobs", "logprobs", f"must be a list of numbers, got {type(lp).__name__}")
            return
        n = len(lp)
        if n == L - offset:
            parts = [lp[s - offset:e - offset] for s, e in spans if e > s]
            where = "per position"
        elif n == span_len:
            parts = [lp]
            where = "per sampled position"
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
            if not math.isfinite(total):
                bad = next(
                    (i for i, x in enumerate(part) if type(x) not in (int, float) or not math.isfinite(x)), 0
                )
                self.fail(
                    "logprobs",
                    "logprobs",
                    f"sampled position has no finite log-prob ({part[bad]!r}; values given {where})",
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
    loads = json.loads
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
                if not raw.strip():
                    continue
                try:
                    obj = loads(raw)
                except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
                    rec.malformed(lines, f"not valid JSON ({exc.__class__.__name__}: {str(exc)[:80]})")
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

    def by_class(values: "np.ndarray", scale: float) -> dict[str, float]:
        vals = [float(x) * scale for x in values]
        return dict(zip(CLASSES_AND_TOTAL, [*vals, sum(vals)]))

    inv = 1.0 / n if n else 0.0
    per_conv = {c: by_class(sums[3 * k:3 * k + 3], inv) for k, c in enumerate(COUNTERS)}
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
    rl50, rl95 = _percentiles(acc.hist[_H_RECORD_LEN], (50, 95))
    stats = {
        "invocations": float(sums[_X_INVOCATIONS]) * inv,
        "tool_calls": float(sums[_X_TOOL_CALLS]) * inv,
        "tool_wait_s": float(sums[_X_WAIT_MS]) * inv / 1000.0,
        "tool_wait_s_p95": _percentiles(acc.hist[_H_WAIT_MS], (95,))[0] / 1000.0,
        "truncated_fraction": float(sums[_X_TRUNCATED]) * inv,
        "record_length_p50": rl50,
        "record_length_p95": rl95,
        "record_length_max": int(acc.maxes[_H_RECORD_LEN]),
    }
    qs = (50, 90, 95, 99)
    resp = dict(zip(("p50", "p90", "p95", "p99"), _percentiles(acc.hist[_H_RESPONSE_LEN], qs)))
    resp["mean"] = float(sums[_X_RESPONSE_LEN]) * inv
    resp["max"] = float(acc.maxes[_H_RESPONSE_LEN])

    notes: list[str] = []
    cache_logged = int(sums[_X_CACHE_LOGGED])
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
