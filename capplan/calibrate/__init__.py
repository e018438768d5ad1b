"""``capplan calibrate``: an engine profile fitted to a user's own benchmark files.

:mod:`~capplan.calibrate.readers` turns ``vllm bench serve``, GuideLLM and AIPerf results, vLLM
start-up logs and decode step-time CSVs into observation rows; :mod:`~capplan.calibrate.terms`
says which engine-profile terms those rows constrain; :mod:`~capplan.calibrate.run` prices every
row with the base profile, fits the terms and returns the calibrated profile with each point's
prediction before and after (``docs/calibrate.md``). The names below load on first use, so the
command line's ``--help`` (which reads this package's field docstrings) stays fast.
"""

from __future__ import annotations

from typing import Any

_EXPORTS = {
    "FileData": "capplan.calibrate.readers", "read_file": "capplan.calibrate.readers",
    "CalibrateSettings": "capplan.calibrate.run", "Calibration": "capplan.calibrate.run",
    "PointResult": "capplan.calibrate.run", "TermResult": "capplan.calibrate.run",
    "calibrate": "capplan.calibrate.run", "profile_yaml": "capplan.calibrate.run",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'capplan.calibrate' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_EXPORTS[name]), name)
