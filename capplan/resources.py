"""Locate bundled data (example workloads, hardware, engine and model profiles) by name or path.

The folders ``workloads/``, ``hardware_profiles/``, ``engine_profiles/`` and ``models/`` sit at the top of the source
tree. A wheel ships them as package data under ``capplan/data/<kind>/`` (see ``pyproject.toml``),
so named lookup works from an installed wheel as well as from a checkout or editable install.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Literal

from capplan.errors import NotFoundError

Kind = Literal["workloads", "hardware_profiles", "models", "engine_profiles", "validation"]

_KIND_LABEL = {
    "workloads": "workload", "hardware_profiles": "hardware profile", "models": "model", "engine_profiles": "engine profile", "validation": "validation file",
}
_PACKAGE_DIR = Path(__file__).resolve().parent


def bundled_dir(kind: Kind) -> Path:
    """Return the folder that holds the bundled files of ``kind``.

    A wheel installs them under ``capplan/data/<kind>``; a source checkout (plain or editable
    install) keeps them at ``<repo>/<kind>``.
    """
    installed = _PACKAGE_DIR / "data" / kind
    if installed.is_dir():
        return installed
    return _PACKAGE_DIR.parent / kind


def is_bundled(path: Path) -> bool:
    """True when ``path`` is one of the files capplan ships (in a bundled folder of any kind)."""
    try:
        folder = path.resolve().parent
    except OSError:
        return False
    kinds: tuple[Kind, ...] = ("workloads", "hardware_profiles", "models", "engine_profiles", "validation")
    return any(folder == bundled_dir(kind).resolve() for kind in kinds)


def bundled_names(kind: Kind) -> list[str]:
    """Sorted names (file stems) of the bundled YAML files of ``kind``."""
    folder = bundled_dir(kind)
    if not folder.is_dir():
        return []
    return sorted(p.stem for p in folder.glob("*.yaml"))


def resolve(kind: Kind, name_or_path: str | Path) -> Path:
    """Turn a bundled name (``seed-replay``) or a path to a user's file into an existing path.

    A value that names an existing file is always taken as a path, so a user's own file wins
    over a bundled one with the same stem.

    Raises
    ------
    NotFoundError
        When it is neither an existing file nor a bundled name; the message lists the valid
        names and the closest match.
    """
    path = Path(name_or_path)
    if path.is_file():
        return path
    stem = path.name[:-5] if path.name.endswith(".yaml") else path.name
    candidate = bundled_dir(kind) / f"{stem}.yaml"
    if str(path.parent) in (".", "") and candidate.is_file():
        return candidate
    names = bundled_names(kind)
    label = _KIND_LABEL[kind]
    if path.exists():  # a directory or a device: there, but not a file to read
        raise NotFoundError(f"{name_or_path}: not a regular file (a {label} is a YAML file or a bundled name); "
                            f"bundled {label}s: {', '.join(names) or 'none'}")
    close = difflib.get_close_matches(stem, names, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    raise NotFoundError(
        f"{name_or_path}: no such file and no bundled {label} of that name{hint}; "
        f"bundled {label}s: {', '.join(names) or 'none'}"
    )
