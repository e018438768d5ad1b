"""The README stays true: its set-up commands, its command list, and the packaged data."""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text()


def _setup_commands() -> list[str]:
    block = re.search(r"```bash\n(.*?)```", README, re.S)
    assert block, "README must open with a bash block of set-up commands"
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_readme_starts_with_two_commands():
    cmds = _setup_commands()
    assert len(cmds) == 2
    assert "capplan " in cmds[0] and "pytest" in cmds[1]


def test_ci_runs_the_readme_test_command():
    ci = (REPO / ".ci" / "run").read_text()
    assert _setup_commands()[1] in ci


def test_every_command_is_in_the_readme():
    import typer.main

    from capplan.cli.app import app

    root = typer.main.get_command(app)
    for name, cmd in root.commands.items():
        assert f"`capplan {name}" in README, name
        for sub in getattr(cmd, "commands", {}):
            if sub != "show":
                assert f"capplan {name} {sub}" in README, f"{name} {sub}"


def test_help_imports_no_heavy_modules():
    """``capplan --help`` must stay fast: numpy, pandas, pydantic are imported only by commands."""
    probe = (
        "import sys; sys.argv=['capplan','--help']\n"
        "from capplan.cli.app import app\n"
        "try:\n    app()\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in ('numpy','pandas','pydantic','matplotlib') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_bundled_lookup_prefers_installed_data(tmp_path, monkeypatch):
    """An installed wheel keeps bundled files in capplan/data/<kind>; a checkout at <repo>/<kind>."""
    from capplan import resources

    pkg = tmp_path / "capplan"
    (pkg / "data" / "workloads").mkdir(parents=True)
    (pkg / "data" / "workloads" / "only-in-wheel.yaml").write_text("x")
    monkeypatch.setattr(resources, "_PACKAGE_DIR", pkg)
    assert resources.bundled_names("workloads") == ["only-in-wheel"]
    assert resources.resolve("workloads", "only-in-wheel").parent == pkg / "data" / "workloads"


@pytest.mark.slow
def test_wheel_ships_bundled_files(tmp_path):
    """Build the wheel and check that every bundled YAML is inside it under capplan/data/."""
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(REPO)],
        check=True,
        capture_output=True,
    )
    wheel = next(tmp_path.glob("capplan-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    for kind in ("workloads", "hardware_profiles", "models"):
        for f in (REPO / kind).glob("*.yaml"):
            assert f"capplan/data/{kind}/{f.name}" in names
    for module in (REPO / "capplan").rglob("*.py"):
        assert f"capplan/{module.relative_to(REPO / 'capplan').as_posix()}" in names, module


def test_generated_reference_pages_are_current():
    """docs/cli.md (every command's --help), docs/reference.md (every field's docstring),
    docs/accuracy.md and validation/coverage.yaml (capplan accuracy on the shipped corpus) are
    generated; a change to a command, flag, docstring or prediction without regenerating them fails here.
    Fix: ``python -m capplan.cli.reference``."""
    from capplan.cli.reference import main

    assert main(["--check"]) == 0


def test_readme_is_a_front_door():
    """Under ~15 KB, and every document it links to exists."""
    assert len(README.encode()) < 15_000
    links = re.findall(r"\]\((docs/[^)]+)\)", README)
    assert links and all((REPO / link).is_file() for link in links), [l for l in links if not (REPO / l).is_file()]


def test_performance_tables_are_the_recorded_benchmarks(monkeypatch):
    """The README's and docs/performance.md's performance tables are written from
    ``benchmarks/results.json`` (what the benchmarks recorded) by ``benchmarks/report.py``; a
    figure typed into a table by hand, or a benchmark run without regenerating, fails here.
    Fix: ``python benchmarks/report.py``."""
    import importlib.util
    import json

    spec = importlib.util.spec_from_file_location("bench_report", REPO / "benchmarks" / "report.py")
    report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(report)
    results = json.loads((REPO / "benchmarks" / "results.json").read_text(encoding="utf-8"))
    for path, short in report.DOCUMENTS.items():
        text = path.read_text(encoding="utf-8")
        assert report.splice(text, report.render(results, short)) == text, f"{path.name}: run python benchmarks/report.py"
    assert all(r["cores"] and r["date"] for r in results.values())
