"""Reading trajectory logs: JSONL lines (plain or gzip) and their JSON decoding, Parquet rows in batches."""

from __future__ import annotations

import gzip
import json
import json.scanner
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

from capplan.errors import InputError

if TYPE_CHECKING:
    from types import TracebackType

PARQUET_BATCH_ROWS = 4096
"""Parquet rows converted to Python objects at a time [rows]."""


def is_parquet(path: Path) -> bool:
    """Whether ``path`` starts with the Parquet magic bytes ``PAR1``."""
    with open(path, "rb") as fh:
        return fh.read(4) == b"PAR1"


def open_lines(path: Path) -> tuple[Iterator[bytes], Callable[[], int], Callable[[], None]]:
    """Lines of a JSONL file (gzip detected by its magic bytes), a byte-position probe, a closer."""
    raw = open(path, "rb")  # noqa: SIM115 (closed by the returned closer)
    head = raw.peek(2)[:2] if hasattr(raw, "peek") else b""
    fh: Any = gzip.GzipFile(fileobj=raw, mode="rb") if head == b"\x1f\x8b" else raw

    def close() -> None:
        fh.close()
        raw.close()

    return iter(fh), raw.tell, close


def open_blocks(path: Path) -> tuple[Any, Callable[[], int], Callable[[], None]]:
    """A JSONL file (gzip detected by its magic bytes) to ``read`` in blocks, a byte-position
    probe of the file on disk, a closer."""
    raw = open(path, "rb")  # noqa: SIM115 (closed by the returned closer)
    head = raw.peek(2)[:2] if hasattr(raw, "peek") else b""
    fh: Any = gzip.GzipFile(fileobj=raw, mode="rb") if head == b"\x1f\x8b" else raw

    def close() -> None:
        fh.close()
        raw.close()

    return fh, raw.tell, close


class NotJSON:
    """A line that does not decode, with the reason."""

    def __init__(self, message: str) -> None:
        self.message = message


BLANK = object()
"""What :func:`decode_line` returns for a blank line."""

_scan = json.scanner.make_scanner(json.JSONDecoder())  # the C scanner behind json.loads


def decode_line(raw: bytes) -> Any:
    """One JSON value from a line of bytes; :data:`BLANK` for a blank line, a :class:`NotJSON` on errors.

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
    except RecursionError:
        return NotJSON("not readable JSON: nested too deeply")
    if not raw.strip():
        return BLANK
    try:
        return json.loads(raw.rstrip(b"\r\n"))
    except ValueError as exc:
        return NotJSON(f"not valid JSON ({exc.__class__.__name__}: {str(exc)[:80]})")
    except RecursionError:
        return NotJSON("not readable JSON: nested too deeply")


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


def parquet_rows(path: Path, batch_rows: int = PARQUET_BATCH_ROWS) -> tuple[Iterator[dict[str, Any]], Callable[[], int]]:
    """Rows of a Parquet file as dicts, read one record batch at a time, and a byte-position estimate.

    Raises
    ------
    InputError
        pyarrow is not installed, or the file is not readable Parquet.
    """
    parquet_file = open_parquet(path)
    metadata = parquet_file.metadata
    total_rows = max(metadata.num_rows, 1)
    size_bytes = path.stat().st_size
    done = [0]

    def rows() -> Iterator[Any]:
        # Row group by row group: a corrupt data page costs the rest of its group (reported as one
        # unreadable record at its first unread row), not the file.
        first = 0
        for group in range(metadata.num_row_groups):
            group_rows = metadata.row_group(group).num_rows
            read = 0
            try:
                for batch in parquet_file.iter_batches(batch_size=batch_rows, row_groups=[group]):
                    for row in batch.to_pylist():
                        done[0] += 1
                        read += 1
                        yield row
            except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for a corrupt page
                done[0] += group_rows - read
                yield NotJSON(
                    f"{path.name}: Parquet row group {group} (rows {first + 1:,}-{first + group_rows:,}) is unreadable from "
                    f"row {first + read + 1:,} on ({type(exc).__name__}: {str(exc)[:80]}); {group_rows - read:,} row(s) not counted"
                )
            first += group_rows

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

    def records(self) -> Iterator[tuple[int, Any]]:
        """``(line or row number, value)`` of every record, in file order; blank lines are skipped."""
        number = 0
        try:
            if self.parquet:
                rows, self.bytes_read = parquet_rows(self.path)
                for number, row in enumerate(rows, 1):
                    yield number, row
                return
            lines, self.bytes_read, self._close = open_lines(self.path)
            try:
                for number, raw in enumerate(lines, 1):
                    value = decode_line(raw)
                    if value is not BLANK:
                        yield number, value
            except (OSError, EOFError, gzip.BadGzipFile, zlib.error) as exc:
                # a truncated or corrupt gzip stream: what was read is counted, the break is a failed record
                if number == 0:
                    raise InputError(f"{self.path}: unreadable after line 0: {exc}") from None
                number += 1
                yield number, NotJSON(
                    f"{self.path.name}: compressed stream broken after line {number - 1:,} (byte {self.bytes_read():,} "
                    f"of {self.path.stat().st_size:,}): {str(exc)[:80]}; the rest of the file is not counted"
                )
        finally:
            self.lines = number
