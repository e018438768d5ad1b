"""Shared fixtures: paths, a CLI runner, and a helper that writes a workload file."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

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
