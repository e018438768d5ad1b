"""Property tests: workload, hardware, model and engine documents with extreme values never end
in a traceback or a silently wrong answer.

Hypothesis takes a valid bundled document, puts extreme values (NaN, infinities, 1e308, 5e-324,
huge and negative integers, text, booleans, null) into a few of its fields, and runs the command
that reads it. The property: the command either refuses the document with exactly one
``Error:`` line and exit code 2, or succeeds (exit 0 or 1 for a failed check) with JSON whose
every number is finite and whose counts are not negative.
"""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path
from typing import Any

import pytest
import typer.main
import typer.testing
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from capplan.cli.app import app

REPO = Path(__file__).resolve().parent.parent
COMMAND = typer.main.get_command(app)

EXTREME = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, -1, 1, 1e308, -1e308, 5e-324, 1e-300, 1e15, 10**18, 2**63, -(2**63), 10**40, 0.5, 1e7 + 1]),
    st.integers(min_value=-(10**20), max_value=10**20),
    st.text(max_size=8),
    st.booleans(),
    st.none(),
    st.lists(st.integers(min_value=-5, max_value=10**9), max_size=4),
)
"""Values no field should be trusted with."""

SETTINGS = settings(
    max_examples=12, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)


def _load(folder: str, name: str) -> dict[str, Any]:
    return yaml.safe_load((REPO / folder / f"{name}.yaml").read_text(encoding="utf-8"))


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every scalar leaf's key path (list items included)."""
    if isinstance(doc, dict):
        return [p for k, v in doc.items() if k != "sources" for p in _paths(v, prefix + (k,))]
    if isinstance(doc, list):
        return [p for i, v in enumerate(doc) for p in _paths(v, prefix + (i,))]
    return [prefix]


def _set(doc: Any, path: tuple[Any, ...], value: Any) -> None:
    for key in path[:-1]:
        doc = doc[key]
    doc[path[-1]] = value


def _mutated(base: dict[str, Any], data: st.DataObject) -> dict[str, Any]:
    doc = json.loads(json.dumps(base))
    paths = _paths(doc)
    for path in data.draw(st.lists(st.sampled_from(paths), min_size=1, max_size=3, unique=True)):
        _set(doc, path, data.draw(EXTREME))
    return doc


def _run(args: list[str], monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr(typer.testing, "_get_command", lambda _app: COMMAND)
    return typer.testing.CliRunner().invoke(app, args, catch_exceptions=True, prog_name="capplan")


def _numbers(obj: Any, path: str = "") -> list[tuple[str, float]]:
    if isinstance(obj, bool) or obj is None:
        return []
    if isinstance(obj, (int, float)):
        return [(path, obj)]
    if isinstance(obj, dict):
        return [n for k, v in obj.items() for n in _numbers(v, f"{path}.{k}")]
    if isinstance(obj, list):
        return [n for i, v in enumerate(obj) for n in _numbers(v, f"{path}[{i}]")]
    return []


def _assert_sane(result: Any, counts_non_negative: bool = True) -> None:
    """One error line and exit 2, or JSON with finite numbers (and no negative count) and exit 0/1."""
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    if result.exit_code == 2:
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        errors = [line for line in lines if line.startswith("Error:")]
        assert len(errors) == 1, result.stderr
        assert all(line.startswith(("Error:", "Warning:", "Usage: ", "Try '")) for line in lines), result.stderr
        return
    assert result.exit_code in (0, 1), result.output
    doc = json.loads(result.stdout)
    for where, value in _numbers(doc):
        assert math.isfinite(value), f"{where} = {value}"
        if counts_non_negative and ("per_conversation" in where or "per_step" in where or "tokens" in where):
            assert value >= 0, f"{where} = {value}"


def _write(doc: dict[str, Any], name: str) -> Path:
    folder = Path(tempfile.mkdtemp(prefix="capplan-fuzz-"))
    path = folder / name
    path.write_text(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return path


@pytest.mark.parametrize("base", ["seed-replay", "agentic-tool-rl", "chat-serving"])
@SETTINGS
@given(data=st.data())
def test_workload_documents(base, data, monkeypatch):
    """``capplan ledger`` on a bundled workload with extreme values in up to three fields."""
    path = _write(_mutated(_load("workloads", base), data), "w.yaml")
    _assert_sane(_run(["ledger", str(path), "--format", "json", "--conversations", "500"], monkeypatch))


@SETTINGS
@given(data=st.data())
def test_workload_documents_through_plan(data, monkeypatch):
    """``capplan plan`` reads the same documents: a refusal or finite figures, never a traceback."""
    path = _write(_mutated(_load("workloads", "seed-replay"), data), "w.yaml")
    _assert_sane(_run(["plan", str(path), "-H", "h100-sxm", "-m", "qwen3-0.6b", "--format", "json"], monkeypatch), False)


@SETTINGS
@given(data=st.data())
def test_hardware_documents(data, monkeypatch):
    """``capplan kv`` and ``capplan roofline`` on an H100 profile with extreme values."""
    path = _write(_mutated(_load("hardware_profiles", "h100-sxm"), data), "h.yaml")
    _assert_sane(_run(["kv", "-m", "llama-3.1-8b", "-H", str(path), "--format", "json"], monkeypatch))
    _assert_sane(_run(["roofline", "-m", "llama-3.1-8b", "-H", str(path), "--format", "json"], monkeypatch), False)


@SETTINGS
@given(data=st.data())
def test_model_documents(data, monkeypatch):
    """``capplan kv`` and ``capplan roofline`` on a model preset with extreme values."""
    path = _write(_mutated(_load("models", "qwen3-8b"), data), "m.yaml")
    _assert_sane(_run(["kv", "-m", str(path), "-H", "h100-sxm", "--format", "json"], monkeypatch))
    _assert_sane(_run(["roofline", "-m", str(path), "-H", "h100-sxm", "--format", "json"], monkeypatch), False)


@SETTINGS
@given(data=st.data())
def test_engine_documents(data, monkeypatch):
    """``capplan kv`` and ``capplan roofline`` with an engine profile holding extreme values."""
    path = _write(_mutated(_load("engine_profiles", "vllm-0.19"), data), "e.yaml")
    args = ["-m", "llama-3.1-8b", "-H", "h100-sxm", "--engine", str(path), "--format", "json"]
    _assert_sane(_run(["kv", *args], monkeypatch))
    _assert_sane(_run(["roofline", *args], monkeypatch), False)
