"""``capplan calibrate``: an engine profile fitted to a user's own benchmark files.

:mod:`~capplan.calibrate.readers` turns ``vllm bench serve``, GuideLLM and AIPerf results, vLLM
start-up logs and decode step-time CSVs into observation rows; :mod:`~capplan.calibrate.terms`
says which engine-profile terms those rows constrain; :mod:`~capplan.calibrate.run` prices every
row with the base profile, fits the terms and returns the calibrated profile with each point's
prediction before and after (``docs/calibrate.md``).
"""

from capplan.calibrate.readers import FileData, read_file
from capplan.calibrate.run import CalibrateSettings, Calibration, PointResult, TermResult, calibrate, profile_yaml

__all__ = ["FileData", "read_file", "CalibrateSettings", "Calibration", "PointResult", "TermResult", "calibrate", "profile_yaml"]
