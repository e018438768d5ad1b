"""Shared fixtures: paths, a CLI runner, and a helper that writes a workload file."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest
from hypothesis import settings
from typer.testing import CliRunner

# Property tests draw the same examples on every run, so a CI run passes or fails on the code
# alone; HYPOTHESIS_PROFILE=explore draws new ones (run it locally to search for counterexamples).
settings.register_profile("ci", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

REPO = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture
def write_yaml(tmp_path: Path):
    """Write dedented YAML text to a file in tmp_path and return its path."""

    def _write(text: str, name: str = "w.yaml") -> Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text).lstrip())
        return path

    return _write


@pytest.fixture
def assumed_engine(monkeypatch: pytest.MonkeyPatch):
    """Price with the engine profile that reproduces capplan's former shared assumptions.

    Tests that check arithmetic against hand-derived numbers (a 0.8 bandwidth efficiency, a 2 ms
    step overhead, the 38.6-byte sampler peak) use it, so they keep testing the formulas whatever
    the fitted default profile says; the default profile itself is tested against published
    measurements by ``capplan accuracy`` and tests/test_engine.py.
    """
    from capplan import engine

    profile = engine.EngineProfile(
        name="assumed", engine="other", version="-", calibration="the former shared assumptions (defaults of every term)"
    )
    monkeypatch.setattr(engine, "default_engine", lambda: profile)
    return profile


@pytest.fixture
def pinned_framework(monkeypatch: pytest.MonkeyPatch):
    """Price RL steps with the RL framework terms of an earlier fit (2.33x rollout slowdown,
    29.9 s per step, no chip factor), so figures pinned from earlier code keep testing the code
    paths whatever the current fit (``capplan.trainer.RL_FRAMEWORK_FIT``) says."""
    from capplan import trainer

    fit = trainer.RLFrameworkFit(rollout_slowdown=2.33, step_overhead_s=29.9, fitted_on=())
    monkeypatch.setattr(trainer, "RL_FRAMEWORK_FIT", fit)
    return fit
