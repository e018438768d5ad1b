"""Writing results: atomic files that never overwrite without ``--force``, spreadsheet-safe CSV.

Kept free of rich/typer so library users can export too.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence, TextIO

from capplan.errors import OutputExistsError

#: A text cell starting with one of these is read as a formula by spreadsheet programs.
_FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")


def csv_safe(value: Any) -> Any:
    """Neutralise a text cell a spreadsheet would run as a formula; numbers pass unchanged.

    A missing number (``None`` or NaN) becomes an empty cell, not the text ``nan``.

    >>> csv_safe("=SUM(A1)"), csv_safe(-3), csv_safe("h100-sxm"), csv_safe(float("nan"))
    ("'=SUM(A1)", -3, 'h100-sxm', '')
    """
    if isinstance(value, str) and value.startswith(_FORMULA_PREFIXES):
        return "'" + value
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
    """Pretty JSON with a trailing newline (NaN is refused: JSON has none)."""
    return json.dumps(obj, indent=2, allow_nan=False) + "\n"


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


def _is_special(path: Path) -> bool:
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
    path = ensure_new(path, force)
    if _is_special(path):
        yield path
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp" + (suffix if suffix is not None else path.suffix), dir=path.parent)
    os.close(fd)
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # as open() would create it, not mkstemp's 0600
        yield Path(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def atomic_file(path: str | Path, force: bool = False) -> Iterator[TextIO]:
    """A text file handle whose content replaces ``path`` atomically when the block succeeds."""
    with atomic_path(path, force, suffix="") as tmp:
        with open(tmp, "w", encoding="utf-8", newline="") as fh:
            yield fh


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
