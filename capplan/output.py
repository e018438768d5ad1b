"""Writing results: atomic files that never overwrite without ``--force``, spreadsheet-safe CSV.

Kept free of rich/typer so library users can export too.
"""

from __future__ import annotations

import csv
import io
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterable, Sequence

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


def write_atomic(path: str | Path, text: str, force: bool = False) -> Path:
    """Write ``text`` to ``path`` atomically (temporary file + rename in the same folder).

    Raises
    ------
    OutputExistsError
        When ``path`` exists and ``force`` is false: nothing a user has is overwritten unasked.
    """
    path = Path(path)
    if path.exists() and not force:
        raise OutputExistsError(f"{path}: file exists; pass --force to overwrite it")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
