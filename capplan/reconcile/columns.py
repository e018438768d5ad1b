"""Records as columns: JSONL lines decoded by a typed decoder, Parquet batches read as Arrow buffers.

The batch checker (:mod:`capplan.reconcile.batch`) works on :class:`Columns`: one flat array per
per-position field (origin and loss codes), one flat array per list field with per-record offsets,
and one array per scalar field. Two sources fill it:

* JSONL: ``msgspec`` decodes each line into :class:`LineRecord` (the lines of one read at once,
  when that surely reads each line alike: :func:`capplan.reconcile.batch._decode_group`), a typed
  struct whose masks and list fields stay raw JSON text (:class:`msgspec.Raw`): decoding them into
  Python lists of ints and floats is most of the cost of ``json.loads``, and a mask needs no
  Python string either. The raw values of a batch are then read together with bytes methods and
  numpy (:func:`mask_codes`, :func:`parse_int_lists`, :func:`count_numbers`).
* Parquet: the columns of a record batch are read from their Arrow buffers without creating a
  Python object per value.

Anything a source cannot represent exactly (a list mask, a float where an integer belongs, a
negative count, a NaN, an integer past 2^53), and any line the record-by-record reader might read
otherwise than ``msgspec`` (bytes that are not UTF-8 in a value ``msgspec`` skips, nesting that
could pass :data:`~capplan.reconcile.readers.MAX_JSON_DEPTH`; :func:`read_alike`), marks the
record ``exact = False``: the batch checker then hands it to the record-by-record checker, which
reports it with its usual message. So the columns never decide a check; they only say which
records the fast path may count.
"""

from __future__ import annotations

import functools
import operator
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Callable, Literal

import msgspec

from capplan.reconcile.checks import STOP_REASONS
from capplan.reconcile.batch import ACTION_SHIFT, PROMPT_SHIFT, TOOL_SHIFT, TRAINED, UNTRAINED
from capplan.reconcile.formats import (
    ACTION, CAPPLAN_COLUMNS, LOSS_FROM_INT, LOSS_FROM_STR, ORIGIN_FROM_INT, ORIGIN_FROM_STR, PROMPT, TOOL,
)

if TYPE_CHECKING:
    import numpy as np

NonNegative = Annotated[int, msgspec.Meta(ge=0, le=2**53)]
"""A non-negative integer small enough for int64 arithmetic on sums and differences (a larger one,
valid for the record-by-record checker, sends its record there)."""
_EMPTY = msgspec.Raw(b"")

def _then(table: bytes, codes: dict[int, int]) -> bytes:
    """``table`` followed by ``codes`` (a byte not in ``codes`` becomes 255)."""
    return bytes(codes.get(code, 255) for code in table)


_SHIFT_OF_CLASS = {PROMPT: PROMPT_SHIFT, ACTION: ACTION_SHIFT, TOOL: TOOL_SHIFT}
_LOSS_CODE = {0: UNTRAINED, 1: TRAINED}
ORIGIN_CODE_FROM_STR = _then(ORIGIN_FROM_STR, _SHIFT_OF_CLASS)
"""An origin letter (``p a t``) -> its :attr:`Columns.origin` code."""
ORIGIN_CODE_FROM_INT = _then(ORIGIN_FROM_INT, _SHIFT_OF_CLASS)
LOSS_CODE_FROM_STR = _then(LOSS_FROM_STR, _LOSS_CODE)
"""A loss character (``0 1``) -> its :attr:`Columns.loss` code."""
LOSS_CODE_FROM_INT = _then(LOSS_FROM_INT, _LOSS_CODE)
_ORIGIN_CODE_OF_CLASS = _then(bytes(range(256)), _SHIFT_OF_CLASS)
_LOSS_CODE_OF_VALUE = _then(bytes(range(256)), _LOSS_CODE)

STOP_CODES: dict[str, int] = {name: code for code, name in enumerate(STOP_REASONS)}
"""Stop reasons as small integers (-1: not given), in :data:`STOP_REASONS` order."""


class ClassCounts(msgspec.Struct, forbid_unknown_fields=True, frozen=True, gc=False):
    """The ``counts`` field: non-negative positions per class (a missing class is 0)."""

    prompt: NonNegative = 0
    action: NonNegative = 0
    tool: NonNegative = 0


_NO_COUNTS = ClassCounts(-1, -1, -1)
"""``counts`` not given (no decoded value is negative)."""
_NEVER = Annotated[int, msgspec.Meta(ge=1, le=0)]
"""A type no JSON value decodes into: a record with such a key goes to the record-by-record checker."""


class LineRecord(msgspec.Struct, gc=False):
    """One JSONL record as the fast path reads it; list fields are kept as raw JSON.

    A line that does not decode into this type (a bool where an integer belongs, a negative
    version, an unknown stop reason, NaN, a null scalar...) goes to the record-by-record checker.
    So does one with a mapping-only key (``_n_tokens``, ``_lp_offset``, ``_stop_logged``): their
    type accepts no value; and one whose raw values are not what the columns read (a list-valued
    mask, a string with an escape, a null list: :func:`mask_codes`, :func:`parse_int_lists`). A
    field not given takes a default outside its valid values (-1, NaN, ``""``, an empty raw
    value), so that each field is read into numpy in one pass over the records without a test for
    ``None``.
    """

    origin: msgspec.Raw
    loss_mask: msgspec.Raw
    counts: ClassCounts = _NO_COUNTS
    token_ids: msgspec.Raw = _EMPTY
    turns: msgspec.Raw = _EMPTY
    cached_tokens: msgspec.Raw = _EMPTY
    prefill_tokens: msgspec.Raw = _EMPTY
    logprobs: msgspec.Raw = _EMPTY
    policy_version: NonNegative = -1
    trainer_version: NonNegative = -1
    stop_reason: Literal["stop", "length", "tool_calls", "abort"] = ""  # type: ignore[assignment]
    tool_wait_s: Annotated[float, msgspec.Meta(ge=0, le=1e9)] = float("nan")
    n_tokens: _NEVER = msgspec.field(default=0, name="_n_tokens")
    lp_offset: _NEVER = msgspec.field(default=0, name="_lp_offset")
    stop_logged: _NEVER = msgspec.field(default=0, name="_stop_logged")


LINE_DECODER = msgspec.json.Decoder(LineRecord)
"""Decodes one JSONL line into a :class:`LineRecord` (raises ``msgspec.DecodeError`` otherwise)."""


@dataclass
class Columns:
    """A batch of records as flat arrays (see the module docstring); ``n`` records.

    Offsets arrays have ``n + 1`` entries; "absent" means the field is missing or null.
    """

    n: int
    exact: "np.ndarray"
    """Whether the record was read without loss (else it goes to the record-by-record checker)."""
    origin: "np.ndarray"
    """Origin codes, all records end to end (uint8): the bit offset of the class's count in the
    batch checker's packed counts, 42 prompt / 0 action / 21 tool, 255 invalid
    (:data:`~capplan.reconcile.batch.PROMPT_SHIFT`...)."""
    origin_offsets: "np.ndarray"
    loss: "np.ndarray"
    """Loss codes (uint8): 0 carries loss, 64 does not, 255 invalid (added to an origin code, 64
    moves the count out of the packed word; :data:`~capplan.reconcile.batch.TRAINED`)."""
    loss_offsets: "np.ndarray"
    token_ids: "np.ndarray"
    """Length of ``token_ids`` (-1 absent)."""
    counts: "np.ndarray"
    """``counts`` as (n, 3) prompt/action/tool; meaningful where ``has_counts``."""
    has_counts: "np.ndarray"
    has_turns: "np.ndarray"
    turn_offsets: "np.ndarray"
    """Offsets into ``turn_starts`` / ``turn_ends`` (records without turns have none)."""
    turn_starts: "np.ndarray"
    turn_ends: "np.ndarray"
    has_cached: "np.ndarray"
    cached_offsets: "np.ndarray"
    cached: "np.ndarray"
    has_prefill: "np.ndarray"
    prefill_offsets: "np.ndarray"
    prefill: "np.ndarray"
    logprobs: "np.ndarray"
    """Number of log-probs (-1 absent); a record is exact only if every one is a number small
    enough that any sum of them is finite (see :func:`count_numbers`)."""
    logprobs_positive: "np.ndarray"
    """Some log-prob may be above 0 (the logprobs check then decides record by record: only the
    values at sampled positions count)."""
    policy_version: "np.ndarray"
    """-1 absent."""
    trainer_version: "np.ndarray"
    """-1 absent."""
    stop: "np.ndarray"
    """:data:`STOP_CODES` (-1 absent)."""
    tool_wait_s: "np.ndarray"
    """NaN absent."""


# ---------------------------------------------------------------------------- code tables


def _offsets(lengths: Any) -> "np.ndarray":
    import numpy as np

    out = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=out[1:])
    return out


def _segment_any(flags: "np.ndarray", offsets: "np.ndarray") -> "np.ndarray":
    """Per segment ``[offsets[i], offsets[i+1])``: whether any flag is set (False when empty)."""
    import numpy as np

    if not flags.any():  # the common case: nothing flagged
        return np.zeros(offsets.size - 1, dtype=bool)
    cumulative = np.zeros(flags.size + 1, dtype=np.int64)
    np.cumsum(flags, out=cumulative[1:])
    return cumulative[offsets[1:]] > cumulative[offsets[:-1]]


# ---------------------------------------------------------------------------- raw JSON lists

_DIGIT = 1
_OPEN = 2
_CLOSE = 3
_COMMA = 4
_SPACE = 5
_SIGN = 6
_FRACTION = 7  # "." "e" "E" "+"


def _char_classes() -> "np.ndarray":
    import numpy as np

    table = np.zeros(256, dtype=np.uint8)  # 0: a character no list of numbers contains
    table[ord("0"):ord("9") + 1] = _DIGIT
    table[ord("[")] = _OPEN
    table[ord("]")] = _CLOSE
    table[ord(",")] = _COMMA
    for c in " \t\r\n":
        table[ord(c)] = _SPACE
    table[ord("-")] = _SIGN
    for c in ".eE+":
        table[ord(c)] = _FRACTION
    return table


_CLASSES: "np.ndarray | None" = None


def _classes() -> "np.ndarray":
    global _CLASSES
    if _CLASSES is None:
        _CLASSES = _char_classes()
    return _CLASSES


@dataclass
class RawLists:
    """Raw JSON values of one list field, end to end, with their character classes."""

    present: "np.ndarray"
    """The value is given and not null."""
    is_list: "np.ndarray"
    """The value is a JSON array."""
    offsets: "np.ndarray"
    chars: "np.ndarray"
    classes: "np.ndarray"
    depth: "np.ndarray"
    """Bracket depth after each character."""
    record: "np.ndarray"
    """Record of each character."""


def _raw_lists(raws: list[Any], lengths: "np.ndarray | None" = None) -> RawLists:
    import numpy as np

    if lengths is None:
        lengths = np.fromiter(map(len, raws), dtype=np.int64, count=len(raws))
    offsets = _offsets(lengths)
    chars = np.frombuffer(b"".join(raws), dtype=np.uint8)
    classes = _classes()[chars]
    first = np.full(len(raws), 0, dtype=np.uint8)
    nonempty = lengths > 0
    first[nonempty] = chars[offsets[:-1][nonempty]]
    is_null = (lengths == 4) & (first == ord("n"))
    present = nonempty & ~is_null
    is_list = present & (first == ord("["))
    opens = (classes == _OPEN).astype(np.int8)
    opens -= classes == _CLOSE
    depth = np.cumsum(opens, dtype=np.int32)
    record = np.repeat(np.arange(len(raws), dtype=np.int64), lengths)
    return RawLists(present, is_list, offsets, chars, classes, depth, record)


_NOT_DIGIT_TO_SPACE = bytes(c if 48 <= c <= 57 else 32 for c in range(256))


def _simple_int_lists(raws: list[Any], nested: bool) -> tuple["np.ndarray", ...] | None:
    """:func:`parse_int_lists` for the common case, with bytes methods over the whole batch: every
    value absent or a compact array of integers below 10^18 (of ``[a,b]`` pairs when ``nested``).
    ``None`` when the batch is not that simple; else also the raw values' lengths.

    The values are joined with line feeds, which no raw value holds (it comes from one line), so
    where each value lies comes from the separators rather than from a ``len`` per value.
    """
    import numpy as np

    n = len(raws)
    buf = b"\n".join(raws)  # a null fails the test of the characters below
    # valid JSON has a number on each side of every comma, so without digits a pair is "[,]", and
    # a number outside a pair leaves an empty place (",,", "[,", ",]"); no pattern holds a
    # separator, so each value is reduced on its own
    every = (b"[]\n" * n)[:-1]  # every value given, reduced to its brackets
    if nested:
        pairs = buf.translate(None, b"0123456789").replace(b"[,]", b"P")
        if b",," in pairs or b"[," in pairs or b",]" in pairs:
            return None
        rest = pairs.translate(None, b",P")
    else:
        rest = buf.translate(None, b"0123456789,")
    given = rest == every
    if not given and rest.replace(b"[]", b"") != b"\n" * (n - 1):
        return None
    chars = np.frombuffer(buf, dtype=np.uint8)
    bounds = np.empty(n + 1, dtype=np.int64)  # where each value starts (after its separator), then past the end
    bounds[0] = 0
    bounds[1:n] = np.flatnonzero(chars == ord("\n")) + 1
    bounds[n] = len(buf) + 1
    lengths = np.diff(bounds) - 1
    present = lengths > 0
    if not given and rest.count(b"[") != int(np.count_nonzero(present)):
        return None  # a value given without brackets: a number, not an array
    values = np.fromstring(buf.translate(_NOT_DIGIT_TO_SPACE), dtype=np.int64, sep=" ")  # noqa: NPY201 (text mode)
    if values.size and int(values.max()) >= 10**18:  # 19 digits or more (a larger one reads as 2^63 - 1)
        return None
    if nested:
        opens = np.flatnonzero(chars == ord("["))
        counts = np.diff(np.searchsorted(opens, bounds)) - present  # the outer bracket is no pair
    else:
        commas = np.flatnonzero(chars == ord(","))
        counts = np.diff(np.searchsorted(commas, bounds)) + (lengths > 2)
    if int(counts.sum()) * (2 if nested else 1) != values.size:
        return None  # a number outside the arrays counted (an array of one number where pairs belong)
    return present, np.ones(n, dtype=bool), _offsets(counts), values, lengths


def parse_int_lists(
    raws: list[bytes], nested: bool, lengths: "np.ndarray | None" = None
) -> tuple["np.ndarray", "np.ndarray", "np.ndarray", "np.ndarray"]:
    """Non-negative integers of raw JSON arrays, all records at once.

    Parameters
    ----------
    raws : list of bytes
        One raw JSON value per record (``b""`` when absent).
    nested : bool
        Arrays of ``[a, b]`` pairs (``turns``) rather than arrays of integers.
    lengths : numpy.ndarray, optional
        ``len`` of each raw value [bytes], when the caller has them.

    Returns
    -------
    (present, exact, offsets, values)
        Whether each value is given (not null); whether it was read exactly (an array of
        non-negative integers below 10^18, or of pairs of them); per-record offsets into
        ``values`` (pairs: into ``values.reshape(-1, 2)``); the integers.
    """
    return _int_lists(raws, nested, lengths)[:4]  # type: ignore[return-value]


def _int_lists(raws: list[Any], nested: bool, lengths: "np.ndarray | None" = None) -> tuple["np.ndarray", ...]:
    """:func:`parse_int_lists`, and the raw values' lengths [bytes]."""
    import numpy as np

    simple = _simple_int_lists(raws, nested)
    if simple is not None:
        return simple
    if lengths is None:
        lengths = np.fromiter(map(len, raws), dtype=np.int64, count=len(raws))
    raw = _raw_lists(raws, lengths)
    classes, depth, record = raw.classes, raw.depth, raw.record
    n = len(raws)
    allowed = (classes == _DIGIT) | (classes == _OPEN) | (classes == _CLOSE) | (classes == _COMMA) | (classes == _SPACE)
    bad = np.zeros(n, dtype=bool)
    bad[record[~allowed]] = True
    want = 2 if nested else 1
    bad[record[depth > want]] = True
    digit = classes == _DIGIT
    previous_digit = np.zeros_like(digit)
    previous_digit[1:] = digit[:-1]
    previous_digit[raw.offsets[:-1][raw.offsets[:-1] < digit.size]] = False  # a record starts a new number
    start = digit & ~previous_digit
    starts = np.flatnonzero(start)
    number_record = record[starts]
    # a digit's place value: digits from the end of its number
    run = np.cumsum(start) - 1  # number index of each character (valid on digits)
    digit_positions = np.flatnonzero(digit)
    digit_run = run[digit_positions]
    ends = np.zeros(starts.size, dtype=np.int64)
    if digit_positions.size:
        last = np.ones(digit_positions.size, dtype=bool)
        last[:-1] = digit_run[1:] != digit_run[:-1]
        ends[digit_run[last]] = digit_positions[last]
    width = ends - starts + 1
    too_long = width > 18
    bad[number_record[too_long]] = True
    place = ends[digit_run] - digit_positions
    place = np.minimum(place, 18)
    powers = 10 ** np.arange(19, dtype=np.int64)
    weighted = (raw.chars[digit_positions].astype(np.int64) - 48) * powers[place]
    values = np.zeros(0, dtype=np.int64)
    if weighted.size:
        values = np.add.reduceat(weighted, np.flatnonzero(np.r_[True, digit_run[1:] != digit_run[:-1]]))
    if nested:
        number_depth = depth[starts]
        bad[number_record[number_depth != 2]] = True
        inner_open = (classes == _OPEN) & (depth == 2)
        inner = np.cumsum(inner_open) - 1
        inner_of_number = inner[starts[number_depth == 2]]  # a number elsewhere fails its record already
        inner_count = np.flatnonzero(inner_open).size
        per_inner = np.bincount(inner_of_number, minlength=inner_count) if inner_count else np.zeros(0, dtype=np.int64)
        inner_record = record[np.flatnonzero(inner_open)]
        bad[inner_record[per_inner != 2]] = True
    else:
        number_depth = depth[starts]
        bad[number_record[number_depth != 1]] = True
    exact = ~raw.present | (raw.is_list & ~bad)
    keep = exact[number_record]  # numbers of records read exactly (so pairs stay aligned)
    values = values[keep]
    counts = np.bincount(number_record[keep], minlength=n)
    if nested:
        counts = counts // 2
    offsets = _offsets(counts)
    return raw.present, exact, offsets, values, lengths


_NUMBER_CHARS = b"0123456789-+.eE,"
_INTEGER_CHARS = b"0123456789-,"
_NUMBER_KEEP_SIGNS = _NUMBER_CHARS.replace(b",", b"").replace(b"-", b"")
_INTEGER_KEEP_SIGNS = _INTEGER_CHARS.replace(b",", b"").replace(b"-", b"")
"""The characters deleted first: what is left is brackets, commas and minus signs (and anything
that is not part of a number)."""
_SHAPE = bytes.maketrans(b"0123456789eE+-", b"1111111111eess")
"""Digits to ``1``, exponent letters to ``e``, signs to ``s`` (for searching number shapes)."""


def count_numbers(
    raws: list[Any], integers: bool, lengths: "np.ndarray | None" = None
) -> tuple["np.ndarray", "np.ndarray"]:
    """Element counts of raw JSON arrays of numbers, all records at once.

    Parameters
    ----------
    raws : list of bytes
        One raw JSON value per record (``b""`` when absent).
    integers : bool
        Accept only integers (token IDs); else any JSON number whose magnitude is below 1e124
        (log-probs: every digit run is at most 25 long and no exponent has three digits, so the
        sum of up to 10^18 of them is finite).
    lengths : numpy.ndarray, optional
        ``len`` of each raw value [bytes], when the caller has them.

    Returns
    -------
    (count, exact)
        The element count (-1 when absent or null); whether the value is a flat array of such
        numbers (else the record goes to the record-by-record checker).

    Notes
    -----
    The common case is checked with bytes methods over the whole batch (one pass each at memory
    speed); a batch with anything unusual is examined record by record with numpy.
    """
    count, exact, _positive = _number_lists(raws, integers, lengths, positive=False)
    return count, exact


_POSITIVE = re.compile(rb"[\[,]\s*[0-9.]*[1-9]")
"""A JSON number above 0 in an array: no minus sign and a non-zero digit before any exponent
(within the magnitudes :func:`count_numbers` reads exactly, no such number rounds to 0)."""


def positive_numbers(raws: list[Any], lengths: "np.ndarray | None" = None) -> tuple["np.ndarray", ...]:
    """:func:`count_numbers` for floats, and whether each array may hold a number above 0.

    Returns
    -------
    (count, exact, positive)
        As :func:`count_numbers`; ``positive`` is True where some element may be above 0
        (conservative: never False for an array that holds one).
    """
    return _number_lists(raws, False, lengths, positive=True)


def _number_lists(
    raws: list[Any], integers: bool, lengths: "np.ndarray | None", positive: bool
) -> tuple["np.ndarray", "np.ndarray", "np.ndarray"]:
    import numpy as np

    n = len(raws)
    buf = b"".join(raws)
    if not buf:  # every value absent
        return np.full(n, -1, dtype=np.int64), np.ones(n, dtype=bool), np.zeros(n, dtype=bool)
    # every character a digit, sign, comma or number letter, one bracket pair per array, no spaces
    signed = buf.translate(None, _INTEGER_KEEP_SIGNS if integers else _NUMBER_KEEP_SIGNS)
    kept = signed.translate(None, b"-")
    bare = kept.translate(None, b",")
    # the common case: every value an array of two numbers or more (one bracket pair each, and
    # a comma inside it), which needs no per-value lengths
    every = bare == b"[]" * n and b"[]" not in kept
    if every:
        simple = True
    else:
        lengths = np.fromiter(map(len, raws), dtype=np.int64, count=n) if lengths is None else lengths
        offsets = _offsets(lengths)
        chars = np.frombuffer(buf, dtype=np.uint8)
        first = np.zeros(n, dtype=np.uint8)
        nonempty = lengths > 0
        first[nonempty] = chars[offsets[:-1][nonempty]]
        is_list = nonempty & (first == ord("["))
        is_null = nonempty & ~is_list
        if is_null.any():
            expected = b"".join([b"[]" if listed else (b"null" if null else b"") for listed, null in zip(is_list, is_null)])
        else:
            expected = b"[]" * int(np.count_nonzero(is_list))
        simple = bare == expected
    exponents = False
    if simple and not integers:
        shape = buf.translate(_SHAPE)
        simple = b"1" * 26 not in shape
        exponents = b"e" in shape
        if simple and exponents:
            padded = np.frombuffer(shape + b"0000", dtype=np.uint8)
            exponent = np.flatnonzero(padded == ord("e"))
            first = exponent + 1 + (padded[exponent + 1] == ord("s"))
            simple = not np.any((padded[first] == ord("1")) & (padded[first + 1] == ord("1")) & (padded[first + 2] == ord("1")))
    if not simple:
        if lengths is None:
            lengths = np.fromiter(map(len, raws), dtype=np.int64, count=n)
        count, exact = _count_numbers_exactly(raws, integers, lengths)
        above = np.zeros(n, dtype=bool)
        if positive:
            for i in np.flatnonzero(count > 0).tolist():
                above[i] = _POSITIVE.search(bytes(raws[i])) is not None
        return count, exact, above
    # what is kept is each array's brackets around its commas (and each "null"), so the commas of
    # an array are the kept characters from its "[" to the next value's start, less two
    marks = np.frombuffer(kept, dtype=np.uint8)
    if every:
        kept_lengths = np.diff(np.append(np.flatnonzero(marks == ord("[")), marks.size))
        count = kept_lengths - 1  # "[" and "]" around the commas, one fewer than the numbers
    else:
        starts = np.flatnonzero((marks == ord("[")) | (marks == ord("n")))
        kept_lengths = np.diff(np.append(starts, marks.size))
        count = np.full(n, -1, dtype=np.int64)
        assert lengths is not None  # computed when not every value is an array of two numbers or more
        count[is_list] = kept_lengths[is_list[nonempty]] - 2 + (lengths[is_list] > 2)
    above = np.zeros(n, dtype=bool)
    if positive:
        # Every array is valid JSON made of number characters only, so a "-" is either a number's
        # sign or an exponent's: when the signs are as many as the numbers, none is above 0.
        signs = signed.count(b"-")
        if exponents:
            signs -= buf.count(b"e-") + buf.count(b"E-")
        if signs != int(count[count > 0].sum()):
            # the arrays with a number that starts with a digit; the pattern tells zero from positive
            if lengths is None:
                lengths = np.fromiter(map(len, raws), dtype=np.int64, count=n)
            offsets = _offsets(lengths)
            chars = np.frombuffer(buf, dtype=np.uint8)
            digit = (chars >= ord("0")) & (chars <= ord("9"))
            after = np.zeros(chars.size, dtype=bool)
            after[1:] = (chars[:-1] == ord(",")) | (chars[:-1] == ord("["))
            unsigned = np.flatnonzero(digit & after)
            for i in np.unique(np.searchsorted(offsets, unsigned, side="right") - 1).tolist():
                above[i] = _POSITIVE.search(bytes(raws[i])) is not None
    return count, np.ones(n, dtype=bool), above


def _count_numbers_exactly(raws: list[Any], integers: bool, lengths: "np.ndarray | None" = None) -> tuple["np.ndarray", "np.ndarray"]:
    """Element counts of raw JSON arrays of numbers, all records at once.

    Parameters
    ----------
    raws : list of bytes
        One raw JSON value per record (``b""`` when absent).
    integers : bool
        Accept only integers (token IDs); else any JSON number below 10^124 in magnitude
        (log-probs: every digit run is at most 25 long and no exponent has three digits, so the
        sum of up to 10^18 of them is finite).

    Returns
    -------
    (count, exact)
        The element count (-1 when absent or null); whether the value is a flat array of such
        numbers (else the record goes to the record-by-record checker).
    """
    import numpy as np

    raw = _raw_lists(raws, lengths)
    classes, record = raw.classes, raw.record
    n = len(raws)
    allowed = (classes == _DIGIT) | (classes == _OPEN) | (classes == _CLOSE) | (classes == _COMMA) | (classes == _SPACE) | (
        classes == _SIGN
    )
    if not integers:
        allowed |= classes == _FRACTION
    bad = np.zeros(n, dtype=bool)
    bad[record[~allowed]] = True
    bad[record[raw.depth > 1]] = True
    digit = classes == _DIGIT
    if not integers and digit.size:
        breaks = np.flatnonzero(~digit)  # the same rule as count_numbers: runs <= 25, exponents < 100
        runs = np.diff(np.r_[-1, breaks, digit.size]) - 1
        if runs.size and runs.max() > 25:
            long_at = np.r_[-1, breaks][runs > 25] + 1
            bad[record[np.minimum(long_at, digit.size - 1)]] = True
        exponent = np.flatnonzero((raw.chars == ord("e")) | (raw.chars == ord("E")))
        if exponent.size:
            padded = np.r_[digit, False, False, False, False]
            sign = (raw.chars[np.minimum(exponent + 1, digit.size - 1)] == ord("-")) | (
                raw.chars[np.minimum(exponent + 1, digit.size - 1)] == ord("+")
            )
            first = exponent + 1 + sign
            three = padded[first] & padded[first + 1] & padded[first + 2]
            bad[record[exponent[three]]] = True
    commas = np.bincount(record[classes == _COMMA], minlength=n)
    has_digit = np.bincount(record[digit], minlength=n) > 0
    count = np.where(raw.present, commas + has_digit, -1)
    exact = ~raw.present | (raw.is_list & ~bad)
    return count, exact


# ---------------------------------------------------------------------------- JSONL


def decode_lines(lines: list[bytes]) -> tuple[list[LineRecord | None], list[int]]:
    """Each line as a :class:`LineRecord`, or ``None`` where it does not decode into one; and the
    indices of those ``None`` (usually none: then the whole batch decoded in one comprehension)."""
    decode = LINE_DECODER.decode
    out: list[LineRecord | None]
    try:
        return [decode(line) for line in lines], []
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):  # RecursionError: nested too deeply
        out = []
        unread = []
        for i, line in enumerate(lines):
            try:
                out.append(decode(line))
            except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
                out.append(None)
                unread.append(i)
    return out, unread


def read_alike(
    line_bytes: "np.ndarray", line: Callable[[int], bytes], known_bytes: "np.ndarray", ascii_lines: bool = False
) -> "np.ndarray":
    """Whether the record-by-record reader (:func:`capplan.reconcile.readers.decode_line`) surely
    reads each line as ``msgspec`` did: strict UTF-8 (``msgspec`` does not check the bytes of
    the values it skips) and no nesting deeper than
    :data:`~capplan.reconcile.readers.MAX_JSON_DEPTH`.

    Parameters
    ----------
    line_bytes : numpy.ndarray
        Length of each line that ``msgspec`` decoded [bytes].
    line : callable
        ``line(i)`` -> the i-th line.
    known_bytes : numpy.ndarray
        Per line, a lower bound of the bytes its known fields take (their values' lengths) [bytes].
    ascii_lines : bool
        Every line is known to be ASCII (the caller checked the blocks they came from).

    Notes
    -----
    A decoded record nests 2 levels in its known fields (``counts``; a ``turns`` deeper than
    that is not read exactly), and a JSON value of ``b`` bytes at most ``b / 2`` levels. A line
    whose other bytes are too few to reach the bound is therefore shallow enough, without a look
    at its brackets; so is one with too few brackets. Only the rest goes record by record.
    """
    import numpy as np

    from capplan.reconcile.readers import MAX_JSON_DEPTH

    n = line_bytes.size
    ok = np.ones(n, dtype=bool)
    for i in np.flatnonzero(line_bytes - known_bytes > 2 * (MAX_JSON_DEPTH - 1)).tolist():
        text = line(i)
        if text.count(b"[") + text.count(b"{") > MAX_JSON_DEPTH:
            ok[i] = False
    if not ascii_lines:
        for i in range(n):
            text = line(i)
            if not text.isascii():
                try:
                    text.decode()
                except UnicodeDecodeError:
                    ok[i] = False
    return ok


_STOP_OR_NONE = {**STOP_CODES, "": -1}


@functools.lru_cache(maxsize=1)
def _stop_tables() -> tuple["np.ndarray", "np.ndarray", "np.ndarray"]:
    """The stop reasons' bytes end to end, where each starts (indexed by code; -1 maps to 0), and
    the code of the reason of each length (-1: none; a length past the longest maps to the last)."""
    import numpy as np

    names = [name.encode() for name in STOP_CODES]
    assert len({len(name) for name in names}) == len(names), "stop reasons of equal length"
    starts = np.zeros(len(names) + 1, dtype=np.int64)
    np.cumsum([len(name) for name in names[:-1]], out=starts[1:-1])
    by_length = np.full(max(map(len, names)) + 2, -1, dtype=np.int64)
    for code, name in enumerate(names):
        by_length[len(name)] = code
    return np.frombuffer(b"".join(names), dtype=np.uint8), starts, by_length


def mask_codes(raws: list[Any], table: bytes) -> tuple["np.ndarray", "np.ndarray", "np.ndarray", "np.ndarray"]:
    """A mask field of a batch (raw JSON values, quotes included) as codes, all records at once.

    Parameters
    ----------
    raws : list of msgspec.Raw
        One raw JSON value per record.
    table : bytes
        Translates a letter to its code (:data:`ORIGIN_CODE_FROM_STR`, :data:`LOSS_CODE_FROM_STR`).

    Returns
    -------
    (codes, offsets, exact, lengths)
        The codes end to end, each record's first code (then the end), whether the value was read
        exactly, and the raw values' lengths [bytes].

    Notes
    -----
    A JSON string without a backslash holds no quote but its two delimiters, so deleting every
    quote of the joined values leaves their letters end to end. A value that is not such a string
    (a list of codes, a string with an escape) is read as an empty mask and is not exact: the
    record-by-record checker reads it. A letter that is not ASCII, or not a mask letter, becomes
    255 (invalid) like any other.
    """
    import numpy as np

    n = len(raws)
    joined = b"".join(raws)
    chars = np.frombuffer(joined, dtype=np.uint8)
    if b"\\" not in joined:
        # the common case, without a length per value: the quotes pair up end to end (the first
        # at 0, each closing one just before the next opening one, the last at the end). Then the
        # first value, starting with a quote, is a string and, without a backslash, ends at the
        # next quote; so is the next one, and so on: the pairs are the values.
        quotes = np.flatnonzero(chars == ord('"'))
        if (
            quotes.size == 2 * n and (not n or (quotes[0] == 0 and quotes[-1] == chars.size - 1))
            and np.array_equal(quotes[1:-1:2] + 1, quotes[2::2])
        ):
            lengths = quotes[1::2] - quotes[0::2] + 1
            codes = np.frombuffer(joined.translate(table, b'"'), dtype=np.uint8)
            return codes, _offsets(lengths - 2), np.ones(n, dtype=bool), lengths
    lengths = np.fromiter(map(len, raws), dtype=np.int64, count=n)  # every JSON value is at least a byte
    quoted = chars[_offsets(lengths)[:-1]] == ord('"')
    if quoted.all() and b"\\" not in joined:
        codes = np.frombuffer(joined.translate(table, b'"'), dtype=np.uint8)
        return codes, _offsets(lengths - 2), quoted, lengths
    plain = [raw if ok and b"\\" not in bytes(raw) else b'""' for raw, ok in zip(raws, quoted.tolist())]
    codes, offsets, _, _ = mask_codes(plain, table)
    return codes, offsets, np.fromiter(map(operator.is_, plain, raws), dtype=bool, count=n), lengths


def from_line_records(
    records: list[LineRecord],
    line_bytes: "np.ndarray | None" = None,
    line: Callable[[int], bytes] | None = None,
    ascii_lines: bool = False,
) -> Columns:
    """The columns of decoded JSONL records (every one a :class:`LineRecord`); with the lengths of
    the lines they were decoded from and ``line(i)``, the i-th of them, a record the
    record-by-record reader might read otherwise is not exact (see :func:`read_alike`;
    ``ascii_lines``: the lines are known to be ASCII)."""
    import numpy as np

    n = len(records)
    # one list comprehension per field, the fastest way to gather an attribute of many objects
    # (faster than operator.attrgetter, and than transposing tuples of all the fields); the
    # scalars go straight into numpy (absent ones hold their out-of-range default)
    origin, origin_offsets, origin_exact, origin_bytes = mask_codes([r.origin for r in records], ORIGIN_CODE_FROM_STR)
    loss, loss_offsets, loss_exact, loss_bytes = mask_codes([r.loss_mask for r in records], LOSS_CODE_FROM_STR)
    exact = origin_exact & loss_exact
    counts = [r.counts for r in records]
    count_values = np.empty((n, 3), dtype=np.int64)
    if counts.count(_NO_COUNTS) == n:  # no record gives counts
        has_counts = np.zeros(n, dtype=bool)
        count_values.fill(0)
    else:
        by_class = count_values.T
        by_class[0] = [c.prompt for c in counts]
        by_class[1] = [c.action for c in counts]
        by_class[2] = [c.tool for c in counts]
        has_counts = count_values[:, 0] >= 0
        count_values[~has_counts] = 0
    token_count, token_exact = count_numbers([r.token_ids for r in records], integers=True)
    turns = _int_lists([r.turns for r in records], nested=True)
    # cached_tokens and prefill_tokens read as one list of 2n values
    per_turn = _int_lists([r.cached_tokens for r in records] + [r.prefill_tokens for r in records], nested=False)
    split = int(per_turn[2][n])
    lp_count, lp_exact, lp_positive = positive_numbers([r.logprobs for r in records])
    exact &= token_exact & turns[1] & per_turn[1][:n] & per_turn[1][n:] & lp_exact
    if line_bytes is not None and line is not None:
        # a lower bound of the bytes each line's known fields take: the masks' and integer lists',
        # and two per number of the other lists (a digit and a separator)
        known = origin_bytes + loss_bytes + turns[4] + per_turn[4][:n] + per_turn[4][n:]
        known += 2 * np.maximum(token_count, 0) + 2 * np.maximum(lp_count, 0)
        exact &= read_alike(line_bytes, line, known, ascii_lines)
    return Columns(
        n=n,
        exact=exact,
        origin=origin,
        origin_offsets=origin_offsets,
        loss=loss,
        loss_offsets=loss_offsets,
        token_ids=token_count,
        counts=count_values,
        has_counts=has_counts,
        has_turns=turns[0],
        turn_offsets=turns[2],
        turn_starts=turns[3][0::2],
        turn_ends=turns[3][1::2],
        has_cached=per_turn[0][:n],
        cached_offsets=per_turn[2][:n + 1],
        cached=per_turn[3][:split],
        has_prefill=per_turn[0][n:],
        prefill_offsets=per_turn[2][n:] - split,
        prefill=per_turn[3][split:],
        logprobs=lp_count,
        logprobs_positive=lp_positive,
        policy_version=np.fromiter([r.policy_version for r in records], dtype=np.int64, count=n),
        trainer_version=np.fromiter([r.trainer_version for r in records], dtype=np.int64, count=n),
        stop=np.fromiter(map(_STOP_OR_NONE.__getitem__, [r.stop_reason for r in records]), dtype=np.int8, count=n),
        tool_wait_s=np.fromiter([r.tool_wait_s for r in records], dtype=np.float64, count=n),
    )


# ---------------------------------------------------------------------------- Parquet (Arrow)


class Unsupported(Exception):
    """A column type the fast path does not read (the batch goes record by record)."""


def _validity(arr: Any) -> "np.ndarray":
    """Per value of an Arrow array: not null, read from its validity bitmap.

    Converting ``arr.is_null()`` to numpy goes through ``pyarrow.compute`` and, for a boolean
    array, imports pandas (a quarter of a second of a 100,000-row file); the bitmap is one
    ``unpackbits``.
    """
    import numpy as np

    n = len(arr)
    if arr.null_count == 0:
        return np.ones(n, dtype=bool)
    bitmap = arr.buffers()[0]
    if bitmap is None:  # the null type: every value null
        return np.zeros(n, dtype=bool)
    bits = np.unpackbits(np.frombuffer(bitmap, dtype=np.uint8), count=arr.offset + n, bitorder="little")
    return bits[arr.offset:].view(bool)


def _primitive(arr: Any, dtype: Any) -> "np.ndarray":
    """The values buffer of a fixed-width Arrow array as numpy (a view; null slots undefined)."""
    import numpy as np

    n = len(arr)
    data = arr.buffers()[1]
    if n == 0 or data is None:
        return np.zeros(n, dtype=dtype)
    return np.frombuffer(data, dtype=dtype)[arr.offset:arr.offset + n]


def _list_parts(arr: Any) -> tuple["np.ndarray", "np.ndarray", Any]:
    """A list column's per-row validity, offsets rebased to 0, and its child values in range."""
    import numpy as np
    import pyarrow as pa

    kind = arr.type
    n = len(arr)
    if pa.types.is_fixed_size_list(kind):
        size = kind.list_size
        offsets = (np.arange(n + 1, dtype=np.int64) + arr.offset) * size
    elif pa.types.is_list(kind) or pa.types.is_large_list(kind):
        width = np.int64 if pa.types.is_large_list(kind) else np.int32
        buffer = arr.buffers()[1]
        if buffer is None:  # an empty array may have no offsets buffer
            offsets = np.zeros(n + 1, dtype=np.int64)
        else:
            offsets = np.frombuffer(buffer, dtype=width)[arr.offset:arr.offset + n + 1].astype(np.int64)
    else:
        raise Unsupported(str(kind))
    valid = _validity(arr)
    values = arr.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
    return valid, offsets - offsets[0], values


_INT_TYPES = {8: "i1", 16: "i2", 32: "i4", 64: "i8"}


def _ints(values: Any) -> tuple["np.ndarray", "np.ndarray"]:
    """An integer Arrow array as int64 and its validity (nulls read as 0)."""
    import numpy as np
    import pyarrow as pa

    kind = values.type
    if not pa.types.is_integer(kind):
        raise Unsupported(str(kind))
    code = _INT_TYPES[kind.bit_width]
    if pa.types.is_unsigned_integer(kind):
        code = "u" + code[1:]
    data = _primitive(values, np.dtype(code))
    if code == "u8" and data.size and int(data.max()) > np.iinfo(np.int64).max:
        raise Unsupported("an unsigned integer past int64")
    valid = _validity(values)
    if valid.all():
        return data.astype(np.int64, copy=False), valid  # int64 already: a view of the Arrow buffer
    out = data.astype(np.int64)
    out[~valid] = 0
    return out, valid


def _floats(values: Any) -> tuple["np.ndarray", "np.ndarray"]:
    """A floating-point or integer Arrow array as float64 (nulls read as NaN) and its validity."""
    import numpy as np
    import pyarrow as pa

    kind = values.type
    if pa.types.is_integer(kind):
        ints, valid = _ints(values)
        data = ints.astype(np.float64)
    elif pa.types.is_floating(kind):
        data = _primitive(values, np.dtype({16: "f2", 32: "f4", 64: "f8"}[kind.bit_width]))
        valid = _validity(values)
    else:
        raise Unsupported(str(kind))
    if valid.all():
        return data.astype(np.float64, copy=False), valid  # float64 already: a view of the Arrow buffer
    data = data.astype(np.float64)
    data[~valid] = np.nan
    return data, valid


def _strings(arr: Any) -> tuple[bytes, "np.ndarray"]:
    """A string or binary Arrow array's bytes end to end and its offsets rebased to 0."""
    import numpy as np
    import pyarrow as pa

    kind = arr.type
    width = np.int64 if pa.types.is_large_string(kind) or pa.types.is_large_binary(kind) else np.int32
    n = len(arr)
    buffers = arr.buffers()
    if buffers[1] is None:
        return b"", np.zeros(n + 1, dtype=np.int64)
    offsets = np.frombuffer(buffers[1], dtype=width)[arr.offset:arr.offset + n + 1].astype(np.int64)
    data = buffers[2]
    raw = (np.frombuffer(data, dtype=np.uint8)[offsets[0]:offsets[-1]] if data is not None else np.zeros(0, np.uint8)).tobytes()
    return raw, offsets - offsets[0]


def _stop_codes(arr: Any) -> tuple["np.ndarray", "np.ndarray"]:
    """A string column of stop reasons as :data:`STOP_CODES` (-1 null or unknown), and validity.

    The known reasons differ in length, so a row's length names the one reason it can be; its
    bytes are then compared with that reason's, all rows at once.
    """
    import numpy as np

    valid = _validity(arr)
    raw, offsets = _strings(arr)
    lengths = np.diff(offsets)
    names, starts, by_length = _stop_tables()
    candidate = by_length[np.minimum(lengths, by_length.size - 1)]
    # each character's counterpart in the candidate reason (anything, when there is none)
    within = np.arange(len(raw)) - np.repeat(offsets[:-1], lengths)
    counterpart = np.minimum(np.repeat(starts[candidate], lengths) + within, names.size - 1)
    differs = np.frombuffer(raw, dtype=np.uint8) != names[counterpart]
    codes = np.where(valid & (candidate >= 0) & ~_segment_any(differs, offsets), candidate, -1).astype(np.int8)
    return codes, valid


def _record_of(offsets: "np.ndarray") -> "np.ndarray":
    import numpy as np

    return np.repeat(np.arange(offsets.size - 1), np.diff(offsets))


def _bad_per_record(bad: "np.ndarray", offsets: "np.ndarray") -> "np.ndarray":
    """Per record: whether any of its list entries is bad."""
    return _segment_any(bad, offsets)


def _mask_column(
    arr: Any, n: int, letters: bytes, codes: bytes, top: int, of_value: bytes
) -> tuple["np.ndarray", "np.ndarray", "np.ndarray"]:
    """A mask column (a string of letters, a list of integer codes, or binary holding either, one
    or the other per record) as codes, offsets, exactness. ``letters`` and ``codes`` translate
    bytes; ``of_value`` translates an integer ``0..top`` of a list."""
    import numpy as np
    import pyarrow as pa

    if arr is None:
        return np.zeros(0, dtype=np.uint8), np.zeros(n + 1, dtype=np.int64), np.zeros(n, dtype=bool)
    kind = arr.type
    text = pa.types.is_string(kind) or pa.types.is_large_string(kind)
    if text or pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        valid = _validity(arr)
        raw, offsets = _strings(arr)
        mapped = np.frombuffer(raw.translate(letters), dtype=np.uint8)
        if not text:
            # binary: codes (0/1/2) unless some byte is not one, then letters (formats.mask_bytes)
            as_codes = np.frombuffer(raw.translate(codes), dtype=np.uint8)
            bad_codes = _segment_any(as_codes == 255, offsets)
            mapped = np.where(np.repeat(bad_codes, np.diff(offsets)), mapped, as_codes)
        return mapped, offsets, valid
    valid_rows, offsets, values = _list_parts(arr)
    codes, present = _ints(values)
    good = present & (codes >= 0) & (codes <= top)
    out = np.where(good, codes, 255).astype(np.uint8)
    return np.frombuffer(out.tobytes().translate(of_value), dtype=np.uint8), offsets, valid_rows


def from_arrow(batch: Any) -> Columns:
    """The columns of a Parquet record batch, read from its Arrow buffers.

    Raises
    ------
    Unsupported
        A column has a type the fast path does not read exactly, or values it cannot convert (an
        unsigned integer past int64): the batch's rows go record by record.
    """
    import pyarrow as pa

    try:
        return _from_arrow(batch)
    except (pa.ArrowException, OverflowError, ValueError, TypeError) as exc:
        raise Unsupported(f"{type(exc).__name__}: {exc}") from None


def _from_arrow(batch: Any) -> Columns:
    import numpy as np
    import pyarrow as pa

    names = set(batch.schema.names)
    if names & {"_n_tokens", "_lp_offset", "_stop_logged"}:
        raise Unsupported("mapping-only column")
    n = batch.num_rows

    def column(name: str) -> Any:
        return batch.column(name) if name in names else None

    exact = np.ones(n, dtype=bool)
    origin, origin_offsets, origin_ok = _mask_column(
        column("origin"), n, ORIGIN_CODE_FROM_STR, ORIGIN_CODE_FROM_INT, 2, _ORIGIN_CODE_OF_CLASS
    )
    loss, loss_offsets, loss_ok = _mask_column(
        column("loss_mask"), n, LOSS_CODE_FROM_STR, LOSS_CODE_FROM_INT, 1, _LOSS_CODE_OF_VALUE
    )
    exact &= origin_ok & loss_ok

    counts = np.zeros((n, 3), dtype=np.int64)
    has_counts = np.zeros(n, dtype=bool)
    arr = column("counts")
    if arr is not None:
        if not pa.types.is_struct(arr.type):
            raise Unsupported(str(arr.type))
        has_counts = _validity(arr)
        fields = [arr.type.field(i).name for i in range(arr.type.num_fields)]
        if not set(fields) <= {"prompt", "action", "tool"}:
            raise Unsupported("counts with other fields")
        for k, name in enumerate(("prompt", "action", "tool")):
            if name in fields:
                values, present = _ints(arr.field(name))
                counts[:, k] = values
                exact &= ~has_counts | (present & (values >= 0))

    token_ids = np.full(n, -1, dtype=np.int64)
    arr = column("token_ids")
    if arr is not None:
        valid, offsets, _ = _list_parts(arr)
        token_ids = np.where(valid, np.diff(offsets), -1)

    has_turns = np.zeros(n, dtype=bool)
    turn_offsets = np.zeros(n + 1, dtype=np.int64)
    turn_starts = turn_ends = np.zeros(0, dtype=np.int64)
    arr = column("turns")
    if arr is not None:
        has_turns, outer, inner = _list_parts(arr)
        inner_valid, inner_offsets, values = _list_parts(inner)
        ints, present = _ints(values)
        pair = (np.diff(inner_offsets) == 2) & inner_valid
        if pair.all() and present.all() and not (ints < 0).any():
            # the common case: every span a pair of integers, end to end
            turn_starts, turn_ends, turn_offsets = ints[0::2], ints[1::2], outer
        else:
            pair_ok = pair & ~_segment_any(~present | (ints < 0), inner_offsets)
            record_ok = ~_bad_per_record(~pair_ok, outer)
            exact &= ~has_turns | record_ok
            keep = record_ok[_record_of(outer)] & pair  # the spans of records read exactly
            first = inner_offsets[:-1][keep]
            turn_starts, turn_ends = ints[first], ints[first + 1]
            turn_offsets = _offsets(np.bincount(_record_of(outer)[keep], minlength=n))

    def int_list(name: str) -> tuple["np.ndarray", "np.ndarray", "np.ndarray"]:
        arr = column(name)
        if arr is None:
            return np.zeros(n, dtype=bool), np.zeros(n + 1, dtype=np.int64), np.zeros(0, dtype=np.int64)
        valid, offsets, values = _list_parts(arr)
        ints, present = _ints(values)
        bad = _bad_per_record(~present | (ints < 0), offsets)
        nonlocal exact
        exact &= ~valid | ~bad
        return valid, offsets, ints

    has_cached, cached_offsets, cached = int_list("cached_tokens")
    has_prefill, prefill_offsets, prefill = int_list("prefill_tokens")

    logprobs = np.full(n, -1, dtype=np.int64)
    logprobs_positive = np.zeros(n, dtype=bool)
    arr = column("logprobs")
    if arr is not None:
        valid, offsets, values = _list_parts(arr)
        data, _present = _floats(values)
        logprobs = np.where(valid, np.diff(offsets), -1)
        low, high = (float(data.min()), float(data.max())) if data.size else (0.0, 0.0)  # NaN if any is
        if not -1e290 <= low <= high <= 1e290:
            bad = _bad_per_record(~((data <= 1e290) & (data >= -1e290)), offsets)  # any sum of up to 10^18 stays finite
            exact &= ~valid | ~bad
        if high > 0 or high != high:
            logprobs_positive = valid & _bad_per_record(data > 0, offsets)

    def version(name: str) -> "np.ndarray":
        arr = column(name)
        if arr is None:
            return np.full(n, -1, dtype=np.int64)
        values, present = _ints(arr)
        nonlocal exact
        exact &= ~present | (values >= 0)
        return np.where(present, values, -1)

    policy_version = version("policy_version")
    trainer_version = version("trainer_version")

    stop = np.full(n, -1, dtype=np.int8)
    arr = column("stop_reason")
    if arr is not None:
        if not (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)):
            raise Unsupported(str(arr.type))
        stop, present = _stop_codes(arr)
        exact &= ~present | (stop >= 0)

    tool_wait_s = np.full(n, np.nan)
    arr = column("tool_wait_s")
    if arr is not None:
        data, present = _floats(arr)
        exact &= ~present | ((data >= 0) & (data <= 1e9))
        tool_wait_s = np.where(present, data, np.nan)

    return Columns(
        n=n, exact=exact, origin=origin, origin_offsets=origin_offsets, loss=loss, loss_offsets=loss_offsets,
        token_ids=token_ids, counts=counts, has_counts=has_counts, has_turns=has_turns, turn_offsets=turn_offsets,
        turn_starts=turn_starts, turn_ends=turn_ends, has_cached=has_cached, cached_offsets=cached_offsets,
        cached=cached, has_prefill=has_prefill, prefill_offsets=prefill_offsets, prefill=prefill, logprobs=logprobs,
        logprobs_positive=logprobs_positive, policy_version=policy_version, trainer_version=trainer_version,
        stop=stop, tool_wait_s=tool_wait_s,
    )


PARQUET_COLUMNS = CAPPLAN_COLUMNS
"""The columns of capplan's record format (the others are never read)."""
