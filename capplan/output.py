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
        yield path
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
