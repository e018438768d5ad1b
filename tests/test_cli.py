"""The command line, through typer's runner: exit codes, contracts, exact error lines."""

from __future__ import annotations

from pathlib import Path

import csv
import io
import json

import pytest

from capplan import __version__
from capplan.cli.app import app
from capplan.ledger import COUNTERS
from capplan.resources import bundled_names

pytestmark = pytest.mark.usefixtures("assumed_engine")



def test_version(runner):
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output == f"capplan {__version__}\n"


def _commands():
    import typer.main

    root = typer.main.get_command(app)
    out = []
    for name, cmd in root.commands.items():
        for sub in getattr(cmd, "commands", {}):
            out.append([name, sub])
        out.append([name])
    return out


@pytest.mark.parametrize("path", [[]] + _commands(), ids=lambda p: " ".join(p) or "root")
def test_every_command_has_help_with_examples(runner, path):
    result = runner.invoke(app, [*path, "--help"])
    assert result.exit_code == 0, result.output
    assert "Example" in result.output


@pytest.mark.parametrize("name", bundled_names("workloads"))
def test_check_passes_on_bundled_workloads_except_claim16(runner, name):
    result = runner.invoke(app, ["ledger", name, "--check", "--format", "json", "--conversations", "2000"])
    expected = 1 if name == "seed-replay-claim16" else 0
    assert result.exit_code == expected, result.output


def test_check_fails_on_broken_fixture(runner):
    result = runner.invoke(app, ["ledger", str(Path(__file__).parent / "fixtures" / "broken-claim-turn1.yaml"), "--check"])
    assert result.exit_code == 1
    assert "check failed: cache_hits_backed_by_computed_prefix: turn 1 claims 5" in result.stderr


def test_claim16_check_lines(runner):
    result = runner.invoke(app, ["ledger", "seed-replay-claim16", "--check", "-f", "csv"])
    assert result.exit_code == 1
    assert result.stderr == (
        "check failed: cache_hits_backed_by_computed_prefix: turn 2 claims 16 reused positions but earlier "
        "invocations computed only 15 (the last sampled token of a turn is never forwarded)\n"
    )


def test_json_contract(runner):
    result = runner.invoke(app, ["ledger", "seed-replay", "--format", "json"])
    assert result.exit_code == 0
    doc = json.loads(result.stdout)
    for key in ("workload", "per_conversation", "per_step", "checks"):
        assert key in doc
    assert doc["workload"] == "seed-replay"
    for scope in ("per_conversation", "per_step"):
        assert list(doc[scope]) == list(COUNTERS)
        for counter in COUNTERS:
            assert set(doc[scope][counter]) == {"prompt", "action", "tool", "total"}
    assert doc["per_step"]["prefill_forwarded"]["total"] == 33
    assert all(set(c) == {"name", "ok", "detail"} for c in doc["checks"])


def test_csv_long_format(runner):
    result = runner.invoke(app, ["ledger", "seed-replay", "--format", "csv"])
    rows = list(csv.reader(io.StringIO(result.stdout)))
    assert rows[0] == ["scope", "counter", "token_class", "positions"]
    assert ["per_conversation", "prefill_forwarded", "total", "33"] in rows
    assert ["per_step", "recorded", "total", "25"] in rows
    assert len(rows) == 1 + 2 * len(COUNTERS) * 4


def test_table_shows_counters_and_checks(runner):
    result = runner.invoke(app, ["ledger", "seed-replay"])
    assert result.exit_code == 0
    for word in (*COUNTERS, "Checks", "ok", "[positions]"):
        assert word in result.stdout


def test_output_is_not_overwritten_without_force(runner, tmp_path):
    out = tmp_path / "ledger.json"
    out.write_text("precious")
    result = runner.invoke(app, ["ledger", "seed-replay", "-f", "json", "-o", str(out)])
    assert result.exit_code == 2
    assert result.stderr == f"Error: {out}: file exists; pass --force to overwrite it\n"
    assert out.read_text() == "precious"
    result = runner.invoke(app, ["ledger", "seed-replay", "-f", "json", "-o", str(out), "--force"])
    assert result.exit_code == 0
    assert json.loads(out.read_text())["workload"] == "seed-replay"


def test_table_to_file(runner, tmp_path):
    out = tmp_path / "ledger.txt"
    assert runner.invoke(app, ["ledger", "seed-replay", "-o", str(out)]).exit_code == 0
    assert "prefill_forwarded" in out.read_text()


def test_bad_file_is_one_line_exit_2(runner, write_yaml):
    path = write_yaml("version: 1\nname: x\nmethod: sft\nconversation:\n  prompt_tokens: -1\n  turns: [{action_tokens: 1}]\n")
    result = runner.invoke(app, ["ledger", str(path)])
    assert result.exit_code == 2
    assert result.stderr == f"Error: {path}: conversation.prompt_tokens (line 5): must be >= 0, got -1\n"


def test_unknown_workload_name(runner):
    result = runner.invoke(app, ["ledger", "no-such-workload"])
    assert result.exit_code == 2
    assert result.stderr.startswith("Error: no-such-workload: no such file and no bundled workload of that name")


def test_validate(runner, write_yaml):
    bad = write_yaml("version: 1\nname: x\nmethod: sft\nconversation: {prompt_tokens: 1, turns: [{action_tokns: 1}]}\n")
    result = runner.invoke(app, ["validate", "seed-replay", str(bad)])
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert lines[0] == "ok: seed-replay (seed-replay, multi-turn-rl)"
    assert lines[1].startswith(f"invalid: {bad}: conversation.turns[0].action_tokns (line 4): unknown key; did you mean 'action_tokens'?")


def test_schema_is_json_schema(runner):
    result = runner.invoke(app, ["schema", "workload"])
    doc = json.loads(result.stdout)
    assert doc["title"] == "Workload"
    assert {"method", "conversation", "cache", "training"} <= set(doc["properties"])


@pytest.mark.parametrize("fmt", ["table", "mermaid", "dot", "json"])
def test_map_formats(runner, fmt):
    result = runner.invoke(app, ["map", "agentic-tool-rl", "--format", fmt])
    assert result.exit_code == 0
    text = result.stdout
    if fmt == "mermaid":
        assert text.startswith("flowchart LR") and "tools -->" in text
    elif fmt == "dot":
        assert text.startswith('digraph "agentic-tool-rl"') and "rollout -> tools" in text
    elif fmt == "json":
        doc = json.loads(text)
        assert doc["owners"]["tool_execution"] == "Environment / tool workers"


def test_map_sft_has_no_rollout_engine():
    """SFT on an existing dataset needs no rollout engine and no tool workers."""
    from capplan.workload import load_workload
    from capplan.workload_map import build_map

    m = build_map(load_workload("sft"))
    absent = {c.id for c in m.components if not c.present}
    assert {"rollout", "tools", "sync"} <= absent
    assert m.owners["generation"].startswith("nobody")
    assert all(a.source != "rollout" and a.target != "rollout" for a in m.arrows)


def test_map_distillation_teacher_scores():
    from capplan.workload import load_workload
    from capplan.workload_map import build_map

    m = build_map(load_workload("distillation"))
    assert any(a.target == "teacher" and a.counter == "scored[total]" for a in m.arrows)
    assert not next(c for c in m.components if c.id == "reward").present


def test_python_dash_m(tmp_path):
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "capplan", "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == f"capplan {__version__}"


@pytest.mark.parametrize("name", ["plan", "sweep", "simulate", "kv", "roofline"])
def test_lean_application_behaves_as_the_full_one(runner, name: str) -> None:
    """The console script runs these commands from an application holding only them
    (:func:`capplan.cli.app.app_for`); help, a usage error and a run must read the same."""
    from capplan.cli.app import app as full
    from capplan.cli.app import app_for

    runs = {
        "plan": ["plan", "chat-serving", "-H", "h100-sxm", "--conversations", "2000", "--format", "json"],
        "sweep": ["sweep", "reasoning-rl-olmo3-7b", "-H", "h100-sxm", "--tp", "1,2", "--inference-gpus", "8,16",
                  "--trainer-gpus", "8", "--conversations", "2000"],
        "simulate": ["simulate", "chat-serving", "-H", "h100-sxm", "--requests", "200", "--format", "json"],
        "kv": ["kv", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--format", "json"],
        "roofline": ["roofline", "-m", "llama-3.1-8b", "--hardware", "h100-sxm", "--format", "csv"],
    }
    lean = app_for([name])
    assert lean is not full
    for argv in ([name, "--help"], [name, "--no-such-flag"], runs[name]):
        a, b = runner.invoke(lean, argv), runner.invoke(full, argv)
        assert (a.exit_code, a.output) == (b.exit_code, b.output), argv
    assert a.exit_code == 0, a.output  # the run itself succeeded (not two equal errors)
    assert app_for(["ledger", "seed-replay"]) is full and app_for(["--help"]) is full
