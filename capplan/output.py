"""Writing results: atomic files that never overwrite without ``--force``, spreadsheet-safe CSV,
and text made safe for a terminal.

Regular files are replaced atomically (a temporary file renamed over the target, created with
the user's umask); devices, FIFOs and sockets (``/dev/null``, ``/dev/stdout``, a pipe) are
written in place and never replaced. A failure to write (no permission, a read-only or full
disk, a missing folder) is a one-line :class:`OutputError`. Kept free of rich/typer so library
users can export too.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import io
import json
import math
import os
import re
import stat
import tempfile
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence, TextIO

from capplan.errors import CapplanError, OutputExistsError

#: A text cell starting with one of these is read as a formula by spreadsheet programs.
_FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")
_LINE_BREAK = re.compile(r"\r\n?|\n")


class OutputError(CapplanError):
    """A result cannot be written: the path, and why (no permission, disk full, no such folder)."""


_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]")
_CONTROL_AND_NEWLINE = re.compile(_CONTROL.pattern[:-1] + "\n\t]")


def printable(text: str, newlines: bool = False) -> str:
    """``text`` with control characters, escape sequences and bidirectional overrides shown as
    ``\\xNN`` / ``\\uNNNN`` escapes, so user text printed to a terminal or a log cannot move the
    cursor, recolour, hide itself or forge a line. Newlines and tabs are escaped too unless
    ``newlines`` is true.

    >>> printable("ep-1\\x1b[2K\\rok   all checks passed\\n")
    'ep-1\\\\x1b[2K\\\\rok   all checks passed\\\\n'
    """
    pattern = _CONTROL if newlines else _CONTROL_AND_NEWLINE
    if not pattern.search(text):
        return text
    named = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}

    def esc(m: re.Match[str]) -> str:
        c = m.group()
        return named.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")

    return pattern.sub(esc, text)


def csv_safe(value: Any) -> Any:
    """Neutralise a text cell a spreadsheet would run as a formula; numbers pass unchanged.

    A missing number (``None`` or NaN) becomes an empty cell, not the text ``nan``. Line breaks
    inside a cell (``\\r``, ``\\r\\n``, ``\\n``) become ``\\n``, which the CSV writer quotes, and a
    line of the cell that starts like a formula is neutralised too: a spreadsheet never sees a
    new row or a formula.

    >>> csv_safe("=SUM(A1)"), csv_safe(-3), csv_safe("h100-sxm"), csv_safe(float("nan"))
    ("'=SUM(A1)", -3, 'h100-sxm', '')
    >>> csv_safe("ok\\r=cmd|' /C calc'!A0")
    "ok\\n'=cmd|' /C calc'!A0"
    """
    if isinstance(value, str):
        if "\r" in value or "\n" in value:
            return "\n".join(csv_safe(part) for part in _LINE_BREAK.split(value))
        if value.startswith(_FORMULA_PREFIXES):
            return "'" + value
        return value
    if value is None or (isinstance(value, float) and value != value):
        return ""
    return value


def to_csv(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """Render rows as CSV text (``\\n`` line ends) with every text cell made spreadsheet-safe."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow([csv_safe(h) for h in header])
    for row in rows:
        writer.writerow([csv_safe(v) for v in row])
    return buf.getvalue()


def to_json(obj: Any) -> str:
    """Pretty JSON with a trailing newline (NaN is refused: JSON has none).

    Raises
    ------
    OutputError
        A figure is NaN or infinite (inputs outside what the model covers); the message names
        the first such field.
    """
    try:
        return json.dumps(obj, indent=2, allow_nan=False) + "\n"
    except ValueError:
        where = _first_non_finite(obj) or "a field"
        raise OutputError(
            f"the result holds a non-finite number at {where}: the inputs are outside what capplan can compute"
        ) from None


def _first_non_finite(obj: Any, path: str = "") -> str | None:
    if isinstance(obj, float) and not math.isfinite(obj):
        return path or "the top level"
    if isinstance(obj, dict):
        items: Iterable[tuple[Any, Any]] = obj.items()
    elif isinstance(obj, (list, tuple)):
        items = enumerate(obj)
    else:
        return None
    for k, v in items:
        found = _first_non_finite(v, f"{path}[{k}]" if isinstance(k, int) else (f"{path}.{k}" if path else str(k)))
        if found:
            return found
    return None


def ensure_new(path: str | Path, force: bool = False) -> Path:
    """The one "file exists, pass --force" check: refuse an existing ``path`` unless ``force``.

    Raises
    ------
    OutputExistsError
        When ``path`` exists and ``force`` is false: nothing a user has is overwritten unasked.
    """
    path = Path(path)
    if path.exists() and not force:
        raise OutputExistsError(f"{path}: file exists; pass --force to overwrite it")
    return path


def ensure_distinct(outputs: dict[str, "str | Path | None"]) -> None:
    """The one check that a command's several outputs are several files: refuse two of them
    naming the same path (``s.json`` and ``./s.json``, or a symbolic link to it) before anything
    is written, whatever ``--force`` says. ``outputs`` maps each flag to its path (``None``: not
    given). Standard output (``-``) and special files (``/dev/null``) may take several outputs.

    Raises
    ------
    InputError
        ``--output s.json and --trajectories s.json name the same file``.
    """
    from capplan.errors import InputError

    seen: dict[str, tuple[str, Path]] = {}
    for flag, value in outputs.items():
        if value is None or str(value) == "-" or is_special(Path(value)):
            continue
        key = os.path.realpath(value)
        if key in seen:
            first, path = seen[key]
            raise InputError(f"{first} {path} and {flag} {value} name the same file: give each output its own path")
        seen[key] = (flag, Path(value))


def _reason(exc: OSError) -> str:
    """A short, plain reason for a failed write."""
    return {
        errno.ENOSPC: "no space left on the device (disk full)",
        errno.EDQUOT: "disk quota exceeded",
        errno.EACCES: "permission denied",
        errno.EPERM: "operation not permitted",
        errno.EROFS: "read-only file system",
        errno.ENOENT: "no such file or folder",
        errno.ENOTDIR: "a part of the path is not a folder",
        errno.EEXIST: "a part of the path is not a folder",
        errno.EISDIR: "is a folder",
    }.get(exc.errno or 0, exc.strerror or str(exc))


def is_special(path: Path) -> bool:
    """A device, FIFO or socket: written in place, never replaced by a rename."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_path(path: str | Path, force: bool = False, suffix: str | None = None) -> Iterator[Path]:
    """A temporary path beside ``path`` that replaces it when the block succeeds.

    For writers that take a file name (plots, Parquet). The temporary file keeps ``path``'s
    suffix (``suffix`` overrides it) so format detection by extension still works; on any
    exception it is removed and ``path`` is untouched.
    """
    path = Path(path)
    if is_special(path):  # /dev/null, /dev/stdout, a FIFO: written in place, never replaced
        try:
            yield path
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise OutputError(f"{path}: cannot write: {_reason(exc)}") from None
        return
    path = ensure_new(path, force)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp" + (suffix if suffix is not None else path.suffix), dir=path.parent)
    except OSError as exc:
        raise OutputError(f"{path}: cannot write: {_reason(exc)}") from None
    os.close(fd)
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # as open() would create it, not mkstemp's 0600
        yield Path(tmp)
        os.replace(tmp, path)
    except BrokenPipeError:
        Path(tmp).unlink(missing_ok=True)
        raise
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise OutputError(f"{path}: cannot write: {_reason(exc)}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def atomic_file(path: str | Path, force: bool = False) -> Iterator[TextIO]:
    """A text file handle whose content replaces ``path`` atomically when the block succeeds."""
    with atomic_path(path, force, suffix="") as tmp:
        try:
            with open(tmp, "w", encoding="utf-8", newline="") as fh:
                yield fh
        except BrokenPipeError:
            raise  # a closed pipe (``-o /dev/stdout | head``) ends quietly at the entry point
        except OSError as exc:
            raise OutputError(f"{path}: cannot write: {_reason(exc)}") from None


def write_atomic(path: str | Path, text: str, force: bool = False) -> Path:
    """Write ``text`` to ``path`` atomically (temporary file + rename in the same folder).

    Raises
    ------
    OutputExistsError
        When ``path`` exists and ``force`` is false: nothing a user has is overwritten unasked.
    """
    with atomic_file(path, force) as fh:
        fh.write(text)
    return Path(path)


# ---------------------------------------------------------------------------- large tables (the sweep export)

#: Rows converted and written at a time by :func:`write_frame` [rows].
FRAME_CHUNK_ROWS = 32_768

_FLOAT_SAFE_LOW, _FLOAT_SAFE_HIGH = 1e-4, 1e15
"""Magnitudes between which the JSON encoders print a float exactly as ``repr`` does (zero too);
outside them ``repr`` is used value by value."""


def _csv_cell(value: Any) -> str:
    """One cell exactly as :func:`to_csv` writes it (neutralised, then quoted by :mod:`csv` if needed)."""
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow([csv_safe(value), ""])
    return buf.getvalue()[:-2]  # drop the empty second cell's separator and the line end


def _orjson() -> Any:
    """The orjson module when installed (``capplan[fast]``), else ``None``."""
    try:
        import orjson
    except ImportError:
        return None
    return orjson


def _arrow_csv() -> Any:
    """``pyarrow.csv`` when pyarrow is installed, else ``None``."""
    try:
        import pyarrow.csv
    except ImportError:
        return None
    return pyarrow.csv


def _encode_numbers(values: Any) -> bytes:
    """A 1-D int or float array as a JSON array (``null`` for NaN); orjson when installed, else msgspec."""
    orjson = _orjson()
    if orjson is None:
        import msgspec

        return msgspec.json.encode(values.tolist())
    return orjson.dumps(values, option=orjson.OPT_SERIALIZE_NUMPY)


def _number_column(values: Any) -> tuple[bytes, Any, Any]:
    """Tokens of a numeric column as (data, offsets, valid): token ``i`` is
    ``data[offsets[i]:offsets[i + 1]]``, equal to ``str(value)``; ``valid`` is False for NaN."""
    import numpy as np

    body = _encode_numbers(values)[1:-1]
    n = len(values)
    if n == 0:
        return b"", np.zeros(1, dtype=np.int64), np.ones(0, dtype=bool)
    commas = np.flatnonzero(np.frombuffer(body, dtype=np.uint8) == ord(","))
    offsets = np.empty(n + 1, dtype=np.int64)
    offsets[0] = 0
    offsets[1:n] = commas - np.arange(n - 1)
    offsets[n] = len(body) - (n - 1)
    valid = ~np.isnan(values) if values.dtype.kind == "f" else np.ones(n, dtype=bool)
    return body.replace(b",", b""), offsets, valid


def _repr_needed(values: Any) -> Any:
    """Indices of floats the JSON encoders may print differently from ``repr``."""
    import numpy as np

    if values.dtype.kind != "f":
        return np.zeros(0, dtype=np.int64)
    magnitude = np.abs(values)
    safe = (magnitude == 0) | ((magnitude >= _FLOAT_SAFE_LOW) & (magnitude < _FLOAT_SAFE_HIGH)) | np.isnan(values)
    return np.flatnonzero(~safe)


def _text_column(values: Any, placeholders: dict[bytes, bytes]) -> tuple[Any, list[str]]:
    """Codes and distinct cells of a text (or other object) column, each cell as :func:`to_csv`
    writes it; a cell that needs CSV quoting is replaced by a placeholder recorded in ``placeholders``."""
    import pandas as pd

    codes, uniques = pd.factorize(values, use_na_sentinel=True)
    cells = []
    for value in uniques.tolist() if hasattr(uniques, "tolist") else list(uniques):
        cell = _csv_cell(value)
        if cell[:1] == '"':
            token = f"\x02{len(placeholders)}\x03"
            placeholders[token.encode()] = cell.encode()
            cell = token
        cells.append(cell)
    return codes, cells


def _arrow_chunk(frame: Any, placeholders: dict[bytes, bytes]) -> Any:
    """The CSV cells of ``frame`` as a table of Arrow string columns (none needs CSV quoting)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    import pandas as pd

    columns = []
    for name in frame.columns:
        series = frame[name]
        if isinstance(series.dtype, pd.CategoricalDtype):
            codes = series.cat.codes.to_numpy()
            cells = [_csv_cell(value) for value in series.cat.categories.tolist()]
            for k, cell in enumerate(cells):
                if cell[:1] == '"':
                    token = f"\x02{len(placeholders)}\x03"
                    placeholders[token.encode()] = cell.encode()
                    cells[k] = token
            indices = pa.array(codes, mask=codes < 0)
            columns.append(pa.DictionaryArray.from_arrays(indices, pa.array(cells, type=pa.string())).cast(pa.string()))
            continue
        values = series.to_numpy()
        kind = values.dtype.kind
        if kind in "iuf":
            data, offsets, valid = _number_column(values)
            bitmap = None if valid.all() else pa.array(valid).buffers()[1]
            array = pa.StringArray.from_buffers(len(values), pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data), bitmap)
            fix = _repr_needed(values)
            if fix.size:
                mask = np.zeros(len(values), dtype=bool)
                mask[fix] = True
                array = pc.replace_with_mask(array, pa.array(mask), pa.array([repr(float(v)) for v in values[fix]]))
        elif kind == "b":
            array = pa.DictionaryArray.from_arrays(pa.array(values.astype(np.int8)), pa.array(["False", "True"])).cast(pa.string())
        else:
            codes, cells = _text_column(series, placeholders)
            indices = pa.array(codes, mask=codes < 0)
            array = pa.DictionaryArray.from_arrays(indices, pa.array(cells, type=pa.string())).cast(pa.string())
        columns.append(array)
    return pa.Table.from_arrays(columns, names=[f"c{i}" for i in range(len(columns))])


def _frame_csv_python(frame: Any) -> str:
    """The rows of ``frame`` as CSV text (no header), without pyarrow: the cells of :func:`to_csv`."""
    placeholders: dict[bytes, bytes] = {}
    columns: list[list[str]] = []
    for name in frame.columns:
        series = frame[name]
        values = series.to_numpy()
        if values.dtype.kind in "iuf":
            cells = ["" if v != v else str(v) for v in values.tolist()]
        elif values.dtype.kind == "b":
            cells = ["True" if v else "False" for v in values.tolist()]
        else:
            codes, uniques = _text_column(series, placeholders)
            cells = ["" if c < 0 else uniques[c] for c in codes.tolist()]
        columns.append(cells)
    text = "".join(",".join(row) + "\n" for row in zip(*columns))
    for token, cell in placeholders.items():
        text = text.replace(token.decode(), cell.decode())
    return text


def frame_csv_chunks(frame: Any, chunk_rows: int = FRAME_CHUNK_ROWS) -> Iterator[bytes]:
    """A DataFrame as spreadsheet-safe CSV in chunks of UTF-8 bytes, header first.

    Byte for byte what :func:`to_csv` writes for ``(frame.columns, frame.itertuples(index=False))``
    (tested), but column by column: numbers are printed by a JSON encoder (``repr``'s digits),
    only text cells are neutralised (once per distinct value), and rows are assembled by pyarrow's
    CSV writer when it is installed.

    Parameters
    ----------
    frame : pandas.DataFrame
        The table.
    chunk_rows : int
        Rows per chunk [rows].
    """
    pa_csv = _arrow_csv()
    yield to_csv([str(c) for c in frame.columns], []).encode()
    if pa_csv is None:
        for start in range(0, len(frame), chunk_rows):
            yield _frame_csv_python(frame.iloc[start:start + chunk_rows]).encode()
        return

    def render(table: Any, placeholders: dict[bytes, bytes]) -> bytes:
        sink = io.BytesIO()
        pa_csv.write_csv(table, sink, pa_csv.WriteOptions(include_header=False, quoting_style="none"))
        data = sink.getvalue()
        for token, cell in placeholders.items():
            data = data.replace(token, cell)
        return data

    from concurrent.futures import ThreadPoolExecutor

    # pyarrow's writer runs (without the interpreter lock) on a second thread while the next
    # chunk's cells are prepared
    with ThreadPoolExecutor(max_workers=1) as pool:
        pending = None
        for start in range(0, len(frame), chunk_rows):
            placeholders: dict[bytes, bytes] = {}
            table = _arrow_chunk(frame.iloc[start:start + chunk_rows], placeholders)
            if pending is not None:
                yield pending.result()
            pending = pool.submit(render, table, placeholders)
        if pending is not None:
            yield pending.result()


def write_frame(frame: Any, path: str | Path, force: bool = False, chunk_rows: int = FRAME_CHUNK_ROWS) -> Path:
    """Write a DataFrame by the extension of ``path``, atomically: ``.parquet`` (typed columns, one
    row group per chunk; needs pyarrow), ``.json`` (a list of records) or else spreadsheet-safe CSV
    (:func:`frame_csv_chunks`). CSV and Parquet are written chunk by chunk.

    Raises
    ------
    OutputExistsError
        ``path`` exists and ``force`` is false.
    InputError
        A ``.parquet`` path without pyarrow installed.
    """
    from capplan.errors import InputError

    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".json":
        return write_atomic(path, to_json(frame.astype(object).where(frame.notna(), None).to_dict(orient="records")), force)
    if suffix == ".parquet":
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            raise InputError(
                f"{path}: writing Parquet needs pyarrow, which is not installed: pip install 'capplan[parquet]' "
                "(or write .csv)"
            ) from None
        schema = pa.Schema.from_pandas(frame, preserve_index=False)
        with atomic_path(path, force) as tmp:
            with pq.ParquetWriter(tmp, schema) as writer:
                for start in range(0, max(len(frame), 1), chunk_rows):
                    chunk = frame.iloc[start:start + chunk_rows]
                    writer.write_table(pa.Table.from_pandas(chunk, schema=schema, preserve_index=False))
        return path
    with atomic_path(path, force, suffix="") as tmp:
        with open(tmp, "wb") as fh:
            for data in frame_csv_chunks(frame, chunk_rows):
                fh.write(data)
    return path
