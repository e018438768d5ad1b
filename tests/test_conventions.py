"""The command line speaks vLLM's dialect and behaves like a Unix tool.

vLLM engine-argument names on every command that models an engine (and the old short names
still work); sweep limits and prices; kv's warnings; plan headers at 80 columns; the bundled
workloads and starting files; outputs (the format from the extension, the umask, atomic plots, a
closed pipe); strict YAML and config reading that the bad-input corpus does not show by exit code.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import stat
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import typer.main

from capplan.cli.app import app

REPO = Path(__file__).resolve().parent.parent
CLI_MD = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")

ENGINE_COMMANDS = ["kv", "roofline", "plan", "sweep", "simulate"]
VLLM_FLAGS = [
    "--tensor-parallel-size", "-tp", "--pipeline-parallel-size", "-pp", "--gpu-memory-utilization",
    "--kv-cache-dtype", "--dtype", "--max-model-len", "--max-num-seqs", "--max-num-batched-tokens",
    "--block-size", "--enable-prefix-caching", "--no-enable-prefix-caching",
]
ALIASES = {
    "kv": ["--tp", "--pp", "--kv-dtype", "--weight-dtype", "--gpu-mem-util", "--max-batched-tokens", "--context"],
    "roofline": ["--tp", "--kv-dtype", "--weight-dtype", "--token-budget"],
    "plan": ["--tp", "--kv-dtype", "--weight-dtype", "--gpu-mem-util"],
    "sweep": ["--tp", "--kv-dtype", "--weight-dtype"],
    "simulate": ["--tp", "--kv-dtype", "--weight-dtype", "--max-batched-tokens"],
}


def _opts(command: str) -> set[str]:
    cmd = typer.main.get_command(app).commands[command]
    return {o for p in cmd.params for o in [*p.opts, *p.secondary_opts]}


def _cli_section(command: str) -> str:
    """The part of docs/cli.md that documents ``capplan COMMAND``."""
    match = re.search(rf"^## `capplan {command}`\n(.*?)(?=^## )", CLI_MD, re.S | re.M)
    assert match, f"docs/cli.md has no section for capplan {command}"
    return match.group(1)


# ------------------------------------------------------------------------------ vLLM flag names


@pytest.mark.parametrize("command", ENGINE_COMMANDS)
@pytest.mark.parametrize("flag", VLLM_FLAGS)
def test_vllm_flag_names_on_every_engine_command(command, flag):
    """Each vLLM engine-argument name is an option of the command and is listed in docs/cli.md."""
    assert flag in _opts(command)
    assert flag in _cli_section(command)


@pytest.mark.parametrize("command", ENGINE_COMMANDS)
def test_short_names_kept_as_aliases(command):
    assert set(ALIASES[command]) <= _opts(command)


def test_plan_engine_flags_take_effect(runner):
    """--max-num-seqs caps the decode batch; the engine profile names the override."""
    base = ["plan", "reasoning-rl-olmo3-7b", "-H", "h100-sxm", "--conversations", "1000", "--format", "json"]
    free = json.loads(runner.invoke(app, base).stdout)[0]
    capped = runner.invoke(app, [*base, "--max-num-seqs", "4"])
    assert capped.exit_code == 0, capped.output
    doc = json.loads(capped.stdout)[0]
    assert free["decode_batch"] > 4 >= doc["decode_batch"] and doc["binding_constraint"] == "max_num_seqs"
    assert "--max-num-seqs 4" in doc["calibration"]


def test_prefix_caching_flag_is_the_workloads_reuse(runner):
    """seed-replay with --enable-prefix-caching plans like seed-replay-auto (the same file with reuse: auto)."""
    common = ["-H", "h100-sxm", "-m", "llama-3.1-8b", "--format", "json"]
    on = json.loads(runner.invoke(app, ["plan", "seed-replay", "--enable-prefix-caching", *common]).stdout)[0]
    auto = json.loads(runner.invoke(app, ["plan", "seed-replay-auto", *common]).stdout)[0]
    off = json.loads(runner.invoke(app, ["plan", "seed-replay-auto", "--no-enable-prefix-caching", *common]).stdout)[0]
    plain = json.loads(runner.invoke(app, ["plan", "seed-replay", *common]).stdout)[0]
    assert on["ledger_per_step"] == auto["ledger_per_step"] and on["ledger_per_step"] != plain["ledger_per_step"]
    assert off["ledger_per_step"] == plain["ledger_per_step"]


def test_max_model_len_caps_the_context(runner, write_yaml):
    """--max-model-len 8192 plans like the workload file with conversation.max_context: 8192."""
    text = (REPO / "workloads" / "reasoning-rl-olmo3-7b.yaml").read_text()
    capped = write_yaml(text.replace("  max_response_tokens: 32768", "  max_response_tokens: 32768\n  max_context: 8192"), "c.yaml")
    args = ["-H", "h100-sxm", "--conversations", "1000", "--format", "json"]
    by_flag = json.loads(runner.invoke(app, ["plan", "reasoning-rl-olmo3-7b", "--max-model-len", "8192", *args]).stdout)[0]
    by_file = json.loads(runner.invoke(app, ["plan", str(capped), *args]).stdout)[0]
    assert by_flag["ledger_per_step"] == by_file["ledger_per_step"]
    assert by_flag["rollout_time_s"] == by_file["rollout_time_s"]


def test_kv_max_model_len_is_the_context(runner):
    a = runner.invoke(app, ["kv", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--max-model-len", "4096", "-f", "json"])
    b = runner.invoke(app, ["kv", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--context", "4096", "-f", "json"])
    assert a.stdout == b.stdout and json.loads(a.stdout)[0]["context"] == 4096


def test_sweep_engine_flags_take_effect(runner, tmp_path):
    """A lower --gpu-memory-utilization leaves less KV; --block-size rounds the capacity to its blocks."""
    out = {}
    for name, extra in (("default", []), ("low", ["--gpu-memory-utilization", "0.5", "--block-size", "32"])):
        path = tmp_path / f"{name}.csv"
        r = runner.invoke(app, ["sweep", "seed-replay", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--inference-gpus", "1",
                                "--trainer-gpus", "4", "-o", str(path), *extra])
        assert r.exit_code == 0, r.output
        out[name] = int(next(csv.DictReader(io.StringIO(path.read_text())))["kv_capacity_tokens_per_replica"])
    assert out["low"] < out["default"] and out["low"] % 32 == 0


def test_simulate_help_offers_only_what_it_writes(runner):
    """simulate --help used to offer csv and then refuse it."""
    text = runner.invoke(app, ["simulate", "--help"]).stdout
    option = text[text.index("--format"):].split("\n")[0]
    assert "table|json" in option and "csv" not in option


# ------------------------------------------------------------------------------ sweep usability


def _sweep_grid(runner, tmp_path, *extra):
    path = tmp_path / "grid.csv"
    r = runner.invoke(app, ["sweep", "reasoning-rl-olmo3-7b", "-H", "h100-sxm,h200", "--inference-gpus", "1:8",
                            "--trainer-gpus", "1:8", "--conversations", "1000", "-o", str(path), *extra])
    assert r.exit_code == 0, r.output
    return r, list(csv.DictReader(io.StringIO(path.read_text())))


def test_sweep_max_total_gpus(runner, tmp_path):
    """Rows above --max-total-gpus are infeasible with the reason; the best rows use at most N GPUs."""
    r, rows = _sweep_grid(runner, tmp_path, "--max-total-gpus", "8")
    over = [x for x in rows if int(x["total_gpus"]) > 8]
    assert over and all(x["feasible"] == "False" and x["reason"] for x in over)
    # a row can fail for an earlier reason first (a trainer too small); the others name the limit
    assert {x["reason"] for x in over if int(x["trainer_gpus"]) >= 2} == {"total GPUs above --max-total-gpus 8"}
    shown = re.findall(r"\s(\d+)\+(\d+)\s", r.stdout)
    assert shown and all(int(a) + int(b) <= 8 for a, b in shown)


def test_sweep_infeasible_rows_keep_reason_and_blank_figures(runner, tmp_path):
    _, rows = _sweep_grid(runner, tmp_path)
    bad = [x for x in rows if x["feasible"] == "False"]
    assert bad and all(x["reason"] for x in bad)
    for column in ("step_time_s", "trained_tokens_per_s", "rollout_time_s", "kv_capacity_tokens_per_replica", "cost_per_step_usd"):
        assert all(x[column] == "" for x in bad), column
    good = [x for x in rows if x["feasible"] == "True"]
    assert all(float(x["step_time_s"]) > 0 and x["kv_capacity_tokens_per_replica"].isdigit() for x in good)


def test_sweep_prices_per_hardware(runner, tmp_path):
    """cost per step = step time x (inference GPUs x its price + trainer GPUs x the trainer's) / 3600."""
    r, rows = _sweep_grid(runner, tmp_path, "--gpu-hour-price", "h100-sxm=2,h200=3", "--objective", "cost")
    assert "GPU-hour prices (--gpu-hour-price): h100-sxm $2.00, h200 $3.00." in " ".join(r.stdout.split())
    for x in [x for x in rows if x["feasible"] == "True"][:20]:
        price = {"h100-sxm": 2.0, "h200": 3.0}[x["hardware"]]
        expected = float(x["step_time_s"]) * (int(x["inference_gpus"]) + int(x["trainer_gpus"])) * price / 3600
        assert float(x["cost_per_step_usd"]) == pytest.approx(expected)


def test_price_from_the_profile_when_present():
    """A profile's own price_usd_per_gpu_hour is used unless the flag names the profile."""
    from capplan.plan.grid import hourly_price

    priced = SimpleNamespace(name="x100", price_usd_per_gpu_hour=1.5)
    bare = SimpleNamespace(name="y100")
    assert hourly_price(priced, None) == 1.5 and hourly_price(bare, None) is None
    assert hourly_price(priced, {"x100": 4.0}) == 4.0 and hourly_price(bare, 2.5) == 2.5


def test_sweep_grid_limit_default_is_the_librarys():
    from capplan.plan.grid import MAX_GRID_CELLS

    cmd = typer.main.get_command(app).commands["sweep"]
    assert next(p.default for p in cmd.params if p.name == "max_grid_cells") == MAX_GRID_CELLS


def test_sweep_writes_parquet(runner, tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    path = tmp_path / "grid.parquet"
    r = runner.invoke(app, ["sweep", "seed-replay", "-m", "llama-3.1-8b", "-H", "h100-sxm", "-o", str(path)])
    assert r.exit_code == 0, r.output
    assert "step_time_s" in pq.read_table(path).column_names


# ------------------------------------------------------------------------------ kv and roofline warnings


def test_kv_warns_when_no_sequence_fits_and_names_the_tp_that_does(runner, assumed_engine):
    """Llama-3.1-70B at tp 2 on H100 holds its weights but not one 8K sequence (assumed engine terms)."""
    r = runner.invoke(app, ["kv", "-m", "llama-3.1-70b", "-H", "h100-sxm", "--tp", "2,4"])
    assert r.exit_code == 0, r.output
    assert "Warning: tp 2: not one sequence of 8,192 tokens fits" in r.stderr
    assert "the smallest that fits one is --tensor-parallel-size 4" in r.stderr
    assert "tp 4:" not in r.stderr


def test_kv_warns_past_max_position_embeddings(runner):
    r = runner.invoke(app, ["kv", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--max-model-len", "200000"])
    assert "exceeds llama-3.1-8b's max_position_embeddings (131,072)" in r.stderr


def test_roofline_marks_batches_that_do_not_fit(runner):
    """Batch 256 at 8K context needs 2.1M KV positions; an 80 GB H100 holds about 0.4M."""
    r = runner.invoke(app, ["roofline", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--batch", "1,256", "--context", "8192"])
    assert r.exit_code == 0, r.output
    text = " ".join(r.stdout.split())
    assert "1 row(s) do not fit on h100-sxm at TP1 (e.g. batch 256 holds 2,097,408 KV positions" in text
    rows = [line.split() for line in r.stdout.splitlines() if line.strip().startswith(("1 ", "256 "))]
    assert rows[0][-1] == "yes" and rows[1][-1] == "no"
    j = runner.invoke(app, ["roofline", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--batch", "256", "--context", "8192", "-f", "json"])
    assert "Warning: 1 of 1 rows do not fit" in j.stderr and json.loads(j.stdout)


# ------------------------------------------------------------------------------ plan headers


def test_plan_headers_survive_80_columns(runner):
    """Two workloads side by side at 80 columns: no header is cut to an ellipsis; each reads whole."""
    r = runner.invoke(app, ["plan", "agentic-tool-rl", "reasoning-rl-olmo3-7b", "-H", "h100-sxm", "--conversations", "1000"],
                      env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    assert "…" not in r.stdout and max(len(line) for line in r.stdout.splitlines()) <= 80
    header = [line for line in r.stdout.splitlines() if line.startswith("┃")]
    cells = [[c.strip() for c in line.strip("┃").split("┃")] for line in header]
    joined = ["".join(row[i] for row in cells) for i in range(len(cells[0]))]
    assert "agentic-tool-rl(multi-turn-rl,qwen3-8b)" in joined
    assert "reasoning-rl-olmo3-7b(outcome-rl,olmo-3-7b)" in joined


# ------------------------------------------------------------------------------ workloads and init


def test_workloads_lists_every_bundled_workload(runner):
    from capplan.resources import bundled_names

    r = runner.invoke(app, ["workloads"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    for name in bundled_names("workloads"):
        assert name in r.stdout
    assert "Multi-turn tool-use RL" in r.stdout
    assert runner.invoke(app, ["workloads", "list"], env={"COLUMNS": "200"}).stdout == r.stdout


def test_workloads_show_prints_the_file(runner):
    r = runner.invoke(app, ["workloads", "show", "agentic-tool-rl"])
    assert r.stdout == (REPO / "workloads" / "agentic-tool-rl.yaml").read_text()


@pytest.mark.parametrize(
    ("kind", "source"),
    [("reasoning-rl", "reasoning-rl-olmo3-7b"), ("agentic-rl", "agentic-tool-rl"), ("serving", "chat-serving"),
     ("distillation", "distillation"), ("sft", "sft")],
)
def test_init_writes_a_commented_file_with_the_examples_figures(runner, tmp_path, monkeypatch, kind, source):
    """The starting file is valid, documents its fields, and gives the same ledger as its source."""
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, ["init", kind])
    assert r.exit_code == 0, r.output
    path = tmp_path / f"{kind}.yaml"
    text = path.read_text()
    assert text.count("\n# ") + text.count("\n  # ") >= 10 and f"capplan workloads show {source}" in text
    ledger = [json.loads(runner.invoke(app, ["ledger", w, "-f", "json", "--conversations", "2000"]).stdout) for w in (str(path), source)]
    assert ledger[0]["per_conversation"] == ledger[1]["per_conversation"]
    again = runner.invoke(app, ["init", kind])
    assert again.exit_code == 2 and "file exists" in again.stderr


# ------------------------------------------------------------------------------ outputs


@pytest.mark.parametrize(
    "args",
    [["ledger", "seed-replay"], ["kv", "-m", "llama-3.1-8b", "-H", "h100-sxm"],
     ["roofline", "-m", "llama-3.1-8b", "-H", "h100-sxm"],
     ["ledger", "reconcile", str(REPO / "tests" / "fixtures" / "reconcile" / "clean.jsonl")]],
    ids=["ledger", "kv", "roofline", "reconcile"],
)
@pytest.mark.parametrize("ext", [".json", ".csv"])
def test_output_extension_picks_the_format(runner, tmp_path, args, ext):
    """-o x.csv / x.json used to receive the box-drawn table."""
    path = tmp_path / f"out{ext}"
    r = runner.invoke(app, [*args, "-o", str(path)])
    assert r.exit_code == 0, r.output
    text = path.read_text()
    if ext == ".json":
        json.loads(text)
    else:
        rows = list(csv.reader(io.StringIO(text)))
        assert len(rows) > 1 and len({len(row) for row in rows}) == 1
    assert "┃" not in text and "━" not in text


def test_files_follow_the_umask(runner, tmp_path):
    """Every file capplan wrote used to be 0600 whatever the umask."""
    old = os.umask(0o022)
    try:
        path = tmp_path / "ledger.json"
        assert runner.invoke(app, ["ledger", "seed-replay", "-o", str(path)]).exit_code == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_plot_is_atomic(tmp_path, monkeypatch):
    """A failure while drawing leaves neither the target nor a temporary file behind."""
    pytest.importorskip("matplotlib")
    from capplan import plots

    def boom(*_args, **_kwargs):
        raise RuntimeError("killed mid-write")

    monkeypatch.setattr("matplotlib.figure.Figure.savefig", boom)
    target = tmp_path / "roofline.png"
    with pytest.raises(RuntimeError):
        plots._save_figure(plots._pyplot().figure(), target, force=False)
    assert list(tmp_path.iterdir()) == []


def test_closed_pipe_exits_quietly():
    """`capplan ... | head -1`: no BrokenPipeError traceback, nothing on standard error."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "capplan", "ledger", "agentic-tool-rl", "--conversations", "20000", "-f", "csv"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) in (0, 1, 141) and err == ""


def test_closed_stdout_is_one_line():
    """`capplan ... >&-` (standard output closed): one line, exit 1."""
    proc = subprocess.run(["sh", "-c", f"'{sys.executable}' -m capplan ledger seed-replay >&-"], capture_output=True, text=True)
    assert proc.returncode == 1 and proc.stderr.strip().splitlines() == [
        "Error: standard output is closed; nothing can be printed (redirect it to a file or /dev/null)"
    ]


def test_unexpected_error_is_one_line(monkeypatch, capsys):
    """The entry point's last line of defence: an internal error prints one line, exit 1."""
    from capplan.cli import app as app_module

    def broken():
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(app_module, "app", broken)
    monkeypatch.delenv("CAPPLAN_DEBUG", raising=False)
    with pytest.raises(SystemExit) as exit_info:
        app_module.run()
    assert exit_info.value.code == 1
    err = capsys.readouterr().err
    assert err.startswith("Error: internal error (ZeroDivisionError: division by zero)") and err.count("\n") == 1


# ------------------------------------------------------------------------------ strict reading


def test_yaml_12_floats():
    """1e15 is a number (YAML 1.2); PyYAML alone reads it as the string '1e15'."""
    from capplan.yamlio import safe_load

    assert safe_load("a: 1e15\nb: -2E-3\nc: 1.0e+15\nd: '1e15'\n") == {"a": 1e15, "b": -0.002, "c": 1e15, "d": "1e15"}


def test_alias_bomb_refused_fast():
    import time

    from capplan.yamlio import YAMLRefused, safe_load

    text = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 10)
    )
    with pytest.raises(YAMLRefused, match="expands to more than"):
        safe_load(text)  # refused while counting, before 10^10 values are built


@pytest.mark.parametrize("text", ["a: &a [*a]\n", "conversation: &c {prompt_tokens: 5, x: *c}\n",
                                  "a: &a\n  b: [1, {c: *a}]\n"])
def test_self_referencing_alias_refused(text):
    """An alias inside the value it names is a structure that contains itself: it used to loop for
    ever while the expanded size was counted (every YAML input: workloads, profiles, engines)."""
    from capplan.yamlio import YAMLRefused, safe_load

    with pytest.raises(YAMLRefused, match="refers to a value that contains it"):
        safe_load(text)


def test_repeated_alias_is_not_a_cycle():
    """The same anchor used twice, side by side or nested under another key, is a shared value, not a cycle."""
    from capplan.yamlio import safe_load

    assert safe_load("a: &x [1, 2]\nb: [*x, *x]\nc: {p: *x, q: [*x]}\n") == {
        "a": [1, 2], "b": [[1, 2], [1, 2]], "c": {"p": [1, 2], "q": [[1, 2]]}}


def test_tie_word_embeddings_string_false():
    """"tie_word_embeddings": "false" used to be read as true: 7.50B instead of 8.03B parameters."""
    from capplan.hf_import import spec_from_hf_config

    cfg = json.loads((REPO / "tests" / "data" / "hf_configs" / "meta-llama--Llama-3.1-8B.json").read_text())
    cfg["tie_word_embeddings"] = "false"
    assert spec_from_hf_config(cfg, "x", "c.json").total_params() == 8_030_261_248
    cfg["tie_word_embeddings"] = "true"
    assert spec_from_hf_config(cfg, "x", "c.json").total_params() == 8_030_261_248 - 128_256 * 4096


def test_areal_left_padding_counts_like_no_padding(tmp_path):
    """AReaL pads generation batches on the left; the padded record used to lose its actions."""
    from capplan.reconcile import reconcile

    plain = {"input_ids": [[1, 2, 3, 4, 5]], "versions": [[-1, -1, 3, 3, 3]], "loss_mask": [[0, 0, 1, 1, 1]],
             "logprobs": [[0, 0, -0.1, -0.2, -0.3]], "stop_reason": "stop"}
    padded = {"input_ids": [[0, 0, 1, 2, 3, 4, 5]], "versions": [[-1, -1, -1, -1, 3, 3, 3]],
              "loss_mask": [[0, 0, 0, 0, 1, 1, 1]], "logprobs": [[0, 0, 0, 0, -0.1, -0.2, -0.3]],
              "attention_mask": [[0, 0, 1, 1, 1, 1, 1]], "stop_reason": "stop"}
    results = []
    for name, record in (("plain", plain), ("padded", padded)):
        path = tmp_path / f"{name}.jsonl"
        path.write_text(json.dumps(record) + "\n")
        results.append(reconcile(path, mapping="areal"))
    assert all(r.ok for r in results)
    assert results[0].ledger.per_conversation == results[1].ledger.per_conversation
    assert results[1].ledger.per_conversation["sampled"]["action"] == 3


def test_csv_cell_with_line_breaks_is_quoted_and_inert():
    from capplan.output import to_csv

    text = to_csv(["name", "n"], [["ok\r=cmd|' /C calc'!A0", 1], ["a\r\n@SUM(A1)", 2]])
    rows = list(csv.reader(io.StringIO(text)))
    assert rows[1:] == [["ok\n'=cmd|' /C calc'!A0", "1"], ["a\n'@SUM(A1)", "2"]]
    assert "\r" not in text


def test_json_output_refuses_non_finite_numbers():
    from capplan.output import OutputError, to_json

    with pytest.raises(OutputError, match=r"non-finite number at rows\[1\]\.step_time_s"):
        to_json({"rows": [{"step_time_s": 1.0}, {"step_time_s": math.inf}]})


def test_library_warnings_print_as_one_line(monkeypatch, capsys):
    """A warning raised in the library (an fp8 GEMM priced at bf16 on an A100) reaches the user
    of the console script as one ``Warning:`` line, not Python's file:line and source excerpt."""
    import sys

    from capplan.cli import app as app_module

    monkeypatch.setattr(sys, "argv", ["capplan", "plan", "chat-serving", "-H", "a100-80gb", "--weight-dtype", "fp8",
                                      "--conversations", "2000", "--format", "csv"])
    monkeypatch.setattr(app_module, "_warned", set())
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("default")
        with pytest.raises(SystemExit) as exit_info:
            app_module.run()
    assert exit_info.value.code == 0
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert err and all(line.startswith("Warning: ") for line in err), err
    assert any("a100-80gb has no fp8 tensor unit" in line for line in err)
    assert not any(".py:" in line for line in err)
