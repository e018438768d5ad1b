"""Reading trajectory logs: JSONL lines (plain or gzip) and their JSON decoding, Parquet rows in batches."""

from __future__ import annotations

import gzip
import json
import json.scanner
import re
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

from capplan.errors import InputError

if TYPE_CHECKING:
    from types import TracebackType

PARQUET_BATCH_ROWS = 2048
"""Parquet rows decoded at a time [rows], by both the record-by-record and the batch path: a
corrupt page costs its row group from the batch it lies in on, so both paths cut batches alike."""

MAX_JSON_DEPTH = 512
"""Deepest nesting of arrays and objects a JSONL line may have [levels]; a deeper line is one
failed record ("nested too deeply"). A fixed bound, well inside the interpreter's recursion limit,
so that whether a line is readable does not depend on how deep the caller's stack is."""

READ_ERRORS: tuple[type[BaseException], ...] = (OSError, EOFError, zlib.error)
"""What reading a JSONL file can raise part-way (a truncated or corrupt gzip stream;
``gzip.BadGzipFile`` is an ``OSError``)."""


def is_parquet(path: Path) -> bool:
    """Whether ``path`` is read as Parquet: it starts with the Parquet magic bytes ``PAR1``, or it
    is named ``*.parquet`` (then a file that is not Parquet is refused as unreadable Parquet, not
    read as JSONL lines)."""
    if path.suffix.lower() == ".parquet":
        return True
    with open(path, "rb") as fh:
        return fh.read(4) == b"PAR1"


BLOCK_BYTES = 1 << 21
"""Most bytes of a plain JSONL file read at a time [bytes] (the batch path checks the lines of
one read together)."""
GZIP_BLOCK_BYTES = 1 << 16
"""Most decompressed bytes of a gzip JSONL file read at a time [bytes]: a stream corrupt in the
middle loses what the read that meets the damage had decompressed, so at most this much."""


def open_jsonl(path: Path) -> tuple[Any, int, Callable[[], int], Callable[[], None]]:
    """A JSONL file opened for reading (gzip detected by its magic bytes), the bytes to read from
    it at a time (:data:`BLOCK_BYTES`, :data:`GZIP_BLOCK_BYTES`), a byte-position probe of the file
    on disk, and a closer."""
    raw = open(path, "rb")  # noqa: SIM115 (closed by the returned closer)
    head = raw.peek(2)[:2] if hasattr(raw, "peek") else b""
    compressed = head == b"\x1f\x8b"
    fh: Any = gzip.GzipFile(fileobj=raw, mode="rb") if compressed else raw

    def close() -> None:
        fh.close()
        raw.close()

    return fh, GZIP_BLOCK_BYTES if compressed else BLOCK_BYTES, raw.tell, close


def line_regions(fh: Any, block_bytes: int) -> Iterator[memoryview]:
    """The complete lines of an open JSONL file, one region per block read that completes a line,
    every line in it ending with a line feed (the last line of a file without one is given one).
    A read error (:data:`READ_ERRORS`) is raised after the lines read before it; the line it cuts
    is lost.

    Both paths read through here, so a stream that breaks part-way gives both the same lines and
    the same byte position. Each block is one ``readinto1`` of at most ``block_bytes``: one read
    of a plain file, or one decompressed piece of a gzip stream. A truncated gzip stream loses
    nothing but the line it cuts (the read that meets its end returns what came before it); one
    corrupt in the middle loses the piece being decompressed.

    Each region is a view of one buffer, read into again for the next region (a fresh buffer per
    read costs page faults beyond its copy): what must outlive the next region is copied.
    """
    buffer = bytearray(block_bytes + max(block_bytes >> 4, 4096))  # a read, and the line it cuts (grown if longer)
    view = memoryview(buffer)
    filled = 0  # the start of a line not yet complete, at the front of the buffer
    while True:
        if filled + block_bytes > len(buffer):  # a line longer than the buffer so far
            view = memoryview(bytearray(2 * (filled + block_bytes)))
            view[:filled] = buffer[:filled]
            buffer = view.obj  # type: ignore[assignment]
        got = fh.readinto1(view[filled:filled + block_bytes])
        if not got:
            if filled:
                view[filled:filled + 1] = b"\n"
                yield view[:filled + 1]
            return
        end = buffer.rfind(b"\n", filled, filled + got) + 1
        filled += got
        if end:
            yield view[:end]
            view[:filled - end] = view[end:filled]
            filled -= end


def line_blocks(fh: Any, block_bytes: int) -> Iterator[tuple[list[bytes], bool]]:
    """The lines of :func:`line_regions`, one list per region, each with whether its lines are all
    ASCII."""
    for region in line_regions(fh, block_bytes):
        text = region.tobytes()
        lines = text.split(b"\n")
        lines.pop()  # what follows the last line feed: nothing
        yield lines, text.isascii()


class NotJSON:
    """A line that does not decode, with the reason."""

    def __init__(self, message: str) -> None:
        self.message = message


BLANK = object()
"""What :func:`decode_line` returns for a blank line."""

_scan = json.scanner.make_scanner(json.JSONDecoder())  # the C scanner behind json.loads


_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_OPEN_CLOSE = bytes.maketrans(b"[{]}", b"\x01\x01\x02\x02")
_KEEP = bytes(c for c in range(256) if c not in b"[{]}")  # deleted by translate
_DEPTH_BLOCK = 1 << 16


def json_depth(raw: bytes, above: int | None = None) -> int:
    """The deepest nesting of arrays and objects in a line of JSON [levels], brackets inside
    strings not counted (a line that is not valid JSON gets the depth of its brackets); with
    ``above``, counting may stop once deeper than that (the depth returned is then above it, but
    not necessarily the deepest)."""
    import numpy as np

    codes = np.frombuffer(_STRING.sub(b"", raw).translate(_OPEN_CLOSE, _KEEP), dtype=np.uint8)
    depth = deepest = 0
    for start in range(0, codes.size, _DEPTH_BLOCK):  # in blocks: memory stays small, a deep line stops early
        running = np.cumsum(3 - 2 * codes[start:start + _DEPTH_BLOCK].astype(np.int64)) + depth
        deepest = max(deepest, int(running.max()))
        if above is not None and deepest > above:
            break
        depth = int(running[-1])
    return deepest


def too_deep(raw: bytes) -> bool:
    """Whether a line nests deeper than :data:`MAX_JSON_DEPTH`; cheap for a line too short or
    with too few brackets to be that deep, and for a deep one (counting stops past the bound)."""
    return (
        len(raw) > 2 * MAX_JSON_DEPTH
        and raw.count(b"[") + raw.count(b"{") > MAX_JSON_DEPTH
        and json_depth(raw, MAX_JSON_DEPTH) > MAX_JSON_DEPTH
    )


NESTED_TOO_DEEPLY = "not readable JSON: nested too deeply"


def decode_line(raw: bytes) -> Any:
    """One JSON value from a line of bytes; :data:`BLANK` for a blank line, a :class:`NotJSON` on errors.

    A line nested deeper than :data:`MAX_JSON_DEPTH` is a :class:`NotJSON`. Calls the C scanner
    directly (``json.loads`` adds three Python-level calls per line) and falls back to
    ``json.loads`` for the exact error message.
    """
    if too_deep(raw):
        return NotJSON(NESTED_TOO_DEEPLY)
    try:
        text = raw.decode()
        obj, end = _scan(text, 0)
        if end == len(text) or not text[end:].strip():
            return obj
    except (ValueError, StopIteration):  # JSONDecodeError, UnicodeDecodeError; StopIteration: no value at 0
        pass
    except RecursionError:  # only when the caller's own stack is nearly exhausted
        return NotJSON(NESTED_TOO_DEEPLY)
    if not raw.strip():
        return BLANK
    try:
        return json.loads(raw.rstrip(b"\r\n"))
    except ValueError as exc:
        return NotJSON(f"not valid JSON ({exc.__class__.__name__}: {str(exc)[:80]})")
    except RecursionError:
        return NotJSON(NESTED_TOO_DEEPLY)


def stream_broken(path: Path, lines_read: int, byte: int, exc: BaseException) -> NotJSON:
    """The failed record that stands for the rest of a JSONL file whose stream broke after line
    ``lines_read`` (at ``byte`` of the file on disk)."""
    return NotJSON(
        f"{path.name}: compressed stream broken after line {lines_read:,} (byte {byte:,} "
        f"of {path.stat().st_size:,}): {str(exc)[:80]}; the rest of the file is not counted"
    )


def open_parquet(path: Path) -> Any:
    """A ``pyarrow.parquet.ParquetFile`` that reads pages on demand through a 1 MiB buffered stream.

    Without a stream buffer pyarrow reads each column chunk of a row group whole, so memory grew
    with the row group (a file written in one row group: with the file); without pre-buffering it
    does not read ahead either. Memory then depends on the batch, not on the file.

    Raises
    ------
    InputError
        pyarrow is not installed, or the file is not readable Parquet.
    """
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise InputError(
            f"{path}: reading Parquet needs pyarrow, which is not installed: pip install 'capplan[parquet]' "
            "(or convert the file to JSONL)"
        ) from None
    try:
        return pq.ParquetFile(path, pre_buffer=False, buffer_size=1 << 20)
    except Exception as exc:  # pyarrow raises several types for a corrupt file
        raise InputError(f"{path}: unreadable Parquet file: {exc}") from None


def group_broken(path: Path, group: int, first: int, group_rows: int, read: int, exc: BaseException) -> NotJSON:
    """The failed record that stands for the rest of a Parquet row group with a corrupt page: group
    ``group`` holds rows ``first + 1`` to ``first + group_rows``; ``read`` of them were read."""
    return NotJSON(
        f"{path.name}: Parquet row group {group} (rows {first + 1:,}-{first + group_rows:,}) is unreadable from "
        f"row {first + read + 1:,} on ({type(exc).__name__}: {str(exc)[:80]}); {group_rows - read:,} row(s) not counted"
    )


def parquet_batches(
    parquet_file: Any, path: Path, columns: list[str] | None, convert: Callable[[Any], bool]
) -> Iterator[tuple[int, Any, list[dict[str, Any]] | None]]:
    """The record batches of a Parquet file, row group by row group, with the number of each
    batch's first row: ``(number, batch, rows)``, ``rows`` being the batch as dicts when
    ``convert(batch)`` asks for them (converting can fail, and then counts as reading).

    A row group with a corrupt page costs the rest of that group, not the file: it yields
    ``(number, NotJSON, None)`` at its first unread row (:func:`group_broken`) and reading goes
    on with the next group. Both paths read through here (:func:`group_batches`), with the same
    batches (:data:`PARQUET_BATCH_ROWS`), the same ``columns`` and one thread, so a corrupt page
    breaks them at the same row with the same message.
    """
    metadata = parquet_file.metadata
    first = 0
    for group in range(metadata.num_row_groups):
        yield from group_batches(parquet_file, path, columns, convert, group, first)
        first += metadata.row_group(group).num_rows


def group_batches(
    parquet_file: Any, path: Path, columns: list[str] | None, convert: Callable[[Any], bool], group: int, first: int,
    skip: int = 0,
) -> Iterator[tuple[int, Any, list[dict[str, Any]] | None]]:
    """:func:`parquet_batches` of row group ``group``, whose first row is row ``first + 1``; the
    batches of its first ``skip`` rows (a multiple of :data:`PARQUET_BATCH_ROWS`) are read but
    not yielded, nor converted (the batch path has read them in larger batches; a page those
    read, these read too)."""
    group_rows = parquet_file.metadata.row_group(group).num_rows
    read = 0
    batches = parquet_file.iter_batches(
        batch_size=PARQUET_BATCH_ROWS, row_groups=[group], columns=columns, use_threads=False
    )
    while True:
        try:
            batch = next(batches)
            if read < skip:
                read += batch.num_rows
                continue
            rows = batch.to_pylist() if convert(batch) else None
        except StopIteration:
            break
        except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for a corrupt page
            read = max(read, skip)  # (a page read before cannot fail now; were it to, no row counts twice)
            yield first + read + 1, group_broken(path, group, first, group_rows, read, exc), None
            break
        yield first + read + 1, batch, rows
        read += batch.num_rows


def parquet_rows(path: Path, columns: list[str] | None = None) -> tuple[Iterator[tuple[int, Any]], Callable[[], int]]:
    """``(row number, row as a dict)`` of a Parquet file, read one record batch at a time (only
    ``columns``, when given, that the file has), and a byte-position estimate. A row group with a
    corrupt page yields one :class:`NotJSON` at its first unread row (see :func:`parquet_batches`).

    Raises
    ------
    InputError
        pyarrow is not installed, or the file is not readable Parquet.
    """
    parquet_file = open_parquet(path)
    total_rows = max(parquet_file.metadata.num_rows, 1)
    size_bytes = path.stat().st_size
    if columns is not None:
        names = set(parquet_file.schema_arrow.names)
        columns = [c for c in columns if c in names]
    done = [0]

    def rows() -> Iterator[tuple[int, Any]]:
        for number, batch, converted in parquet_batches(parquet_file, path, columns, lambda _batch: True):
            if converted is None:  # a broken row group
                done[0] = number
                yield number, batch
                continue
            for k, row in enumerate(converted):
                done[0] = number + k
                yield number + k, row

    return rows(), lambda: done[0] * size_bytes // total_rows


class TrajectoryLog:
    """An open trajectory log: its records with their line (or row) numbers, and how far reading got.

    Use as a context manager; :meth:`records` yields ``(number, value)`` for every non-blank line
    (the decoded JSON value, or a :class:`NotJSON`) or every Parquet row (a dict).

    A gzip stream that breaks part-way, or a Parquet row group with a corrupt page, yields one
    :class:`NotJSON` at the first unread line or row, naming the file and the position; the
    records before it (and, for Parquet, the other row groups) are still yielded.

    Raises
    ------
    InputError
        The file cannot be read (on opening, or before its first line), or it is Parquet and
        pyarrow is missing or the footer is corrupt.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.parquet = is_parquet(path)
        except OSError as exc:
            raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from None
        self.unit = "row" if self.parquet else "line"
        self.lines = 0
        """Lines (or rows) read so far, blank lines included."""
        self._close: Callable[[], None] | None = None
        self.bytes_read: Callable[[], int]
        """Bytes of the file read so far (estimated from the row count for Parquet)."""

    def __enter__(self) -> "TrajectoryLog":
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, traceback: "TracebackType | None"
    ) -> None:
        if self._close is not None:
            self._close()

    def records(self, columns: list[str] | None = None) -> Iterator[tuple[int, Any]]:
        """``(line or row number, value)`` of every record, in file order; blank lines are skipped.
        Parquet: only ``columns`` are read, when given."""
        number = 0
        try:
            if self.parquet:
                rows, self.bytes_read = parquet_rows(self.path, columns)
                for number, row in rows:
                    yield number, row
                return
            fh, block_bytes, self.bytes_read, self._close = open_jsonl(self.path)
            try:
                for lines, _ascii in line_blocks(fh, block_bytes):
                    for raw in lines:
                        number += 1
                        value = decode_line(raw)
                        if value is not BLANK:
                            yield number, value
            except READ_ERRORS as exc:
                # a truncated or corrupt gzip stream: what was read is counted, the break is a failed record
                if number == 0:
                    raise InputError(f"{self.path}: unreadable after line 0: {exc}") from None
                number += 1
                yield number, stream_broken(self.path, number - 1, self.bytes_read(), exc)
        finally:
            self.lines = number
