"""Sweeps agree with plans cell by cell, flag infeasible cells, and export spreadsheet-safe CSV."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from capplan.hardware import load_hardware
from capplan.modelspec import load_model_spec
from capplan.plan import PlanInputs, plan_workload, sweep
from capplan.workload import load_workload

pytestmark = pytest.mark.usefixtures("assumed_engine")

REPO = Path(__file__).resolve().parent.parent



def test_sweep_rows_equal_plans():
    """Each feasible row is the same arithmetic as `capplan plan` with both GPU counts given."""
    w = load_workload("agentic-tool-rl")
    spec = load_model_spec("qwen3-8b")
    hws = [load_hardware("h100-sxm"), load_hardware("h200")]
    grid = sweep(w, spec, hws, [1, 2], ["bf16", "fp8"], inference_gpus=[2, 4, 6], trainer_gpus=[4, 8], conversations=3000)
    assert len(grid) == 2 * 2 * 2 * 3 * 2
    for _, row in grid[grid["feasible"]].sample(6, random_state=0).iterrows():
        hw = load_hardware(row["hardware"])
        p = plan_workload(
            w,
            PlanInputs(hardware=hw, model=spec, tp=int(row["tp"]), kv_dtype=row["kv_dtype"],
                       inference_gpus=int(row["inference_gpus"]), trainer_gpus=int(row["trainer_gpus"])),
            conversations=3000,
        )
        assert row["step_time_s"] == pytest.approx(p.step_time_s)
        assert row["rollout_time_s"] == pytest.approx(p.rollout_time_s)
        assert row["trained_tokens_per_s"] == pytest.approx(p.trained_tokens_per_s)
        assert row["binding_constraint"] == p.binding_constraint


def test_sft_sweep_has_no_inference_gpus_and_equals_the_plan():
    """SFT has no rollout engine: the sweep used to cross inference GPUs 1..512 with the trainer sizes
    (a phantom inference GPU in every per-GPU figure: 5,432.5 against the plan's 5,443.1 tokens/s/GPU)."""
    w, spec, hw = load_workload("sft"), load_model_spec("llama-3.1-8b"), load_hardware("h100-sxm")
    grid = sweep(w, spec, [hw], [1], ["bf16"], trainer_gpus=[8, 16], conversations=3000)
    assert list(grid["inference_gpus"]) == [0, 0] and list(grid["total_gpus"]) == [8, 16]
    for _, row in grid.iterrows():
        p = plan_workload(w, PlanInputs(hardware=hw, model=spec, trainer_gpus=int(row["trainer_gpus"])), conversations=3000)
        assert row["trained_tokens_per_s_per_gpu"] == pytest.approx(p.trained_tokens_per_s / p.trainer_gpus)


def test_async_sweep_rows_equal_async_plans():
    """An async row reports the steady state's own decode batch (the smallest that keeps up with
    one step per period, below a synchronised step's) and trains only the groups the staleness
    gate accepts, as `capplan plan --mode async` does: the same batch, trained tokens/s and cost
    per trained token, not the synchronised step's batch and every group. (The period's batch
    grid spans the largest steady batch of the counts priced together, so a sweep's cell can sit
    one grid point from the plan's: within 0.5%.)"""
    w = load_workload("agentic-tool-rl")
    spec = load_model_spec("qwen3-8b")
    hw = load_hardware("h100-sxm")
    grid = sweep(w, spec, [hw], [1], inference_gpus=[16, 32], trainer_gpus=[16, 32], mode="async",
                 gpu_hour_price=2.0, max_staleness=1)
    for _, row in grid[grid["feasible"]].iterrows():
        p = plan_workload(
            w,
            PlanInputs(hardware=hw, model=spec, tp=1, inference_gpus=int(row["inference_gpus"]),
                       trainer_gpus=int(row["trainer_gpus"]), mode="async", max_staleness=1),
        )
        assert row["step_time_s"] == pytest.approx(p.step_time_s, rel=5e-3)
        assert row["decode_batch_sequences"] == pytest.approx(p.decode_batch, rel=5e-3)
        assert row["trained_tokens_per_s"] == pytest.approx(p.trained_tokens_per_s, rel=5e-3)
        # the step's cost over the tokens the plan trains in it (the accepted groups')
        per_step = p.trained_tokens_per_s * p.step_time_s
        assert row["cost_per_million_trained_tokens_usd"] == pytest.approx(row["cost_per_step_usd"] / per_step * 1e6, rel=5e-3)
        assert p.stale_fraction > 0  # the async state differs from a synchronised step's here


def test_sweep_flags_infeasible_cells():
    """OLMo-3-32B's bf16 weights (60 GiB) exceed one 22 GiB L4; 3 inference GPUs cannot host tp-2
    replicas; one trainer GPU cannot hold 16 B/param of a 7B model."""
    w = load_workload("reasoning-rl-olmo3-32b")
    grid = sweep(w, load_model_spec("olmo-3-32b"), [load_hardware("l4")], [1], trainer_hardware=load_hardware("h100-sxm"), conversations=500)
    assert not grid["feasible"].any() and grid["reason"].str.contains("exceed the memory budget").all()
    w = load_workload("reasoning-rl-olmo3-7b")
    grid = sweep(w, load_model_spec("olmo-3-7b"), [load_hardware("h100-sxm")], [2], inference_gpus=[2, 3], trainer_gpus=[1, 8], conversations=500)
    odd = grid[grid["inference_gpus"] == 3]
    assert (~odd["feasible"]).all() and (odd["reason"] == "inference GPUs not a multiple of tp 2").all()
    small = grid[(grid["trainer_gpus"] == 1) & (grid["inference_gpus"] == 2)]
    assert (~small["feasible"]).all() and small["reason"].str.startswith("trainer needs >=").all()
    assert grid[(grid["trainer_gpus"] == 8) & (grid["inference_gpus"] == 2)]["feasible"].all()


def test_sweep_cli(runner, tmp_path):
    from capplan.cli.app import app

    out = tmp_path / "grid.csv"
    r = runner.invoke(
        app,
        ["sweep", "seed-replay", "-m", "llama-3.1-8b", "-H", "h100-sxm,h200", "--tp", "1,2", "--inference-gpus", "2:8:2",
         "--trainer-gpus", "4,8", "--gpu-hour-price", "2.5", "--objective", "cost", "-o", str(out)],
    )
    assert r.exit_code == 0, r.output
    assert "best 10 of 32 combinations" in r.stdout and "by cost" in r.stdout
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    assert len(rows) == 2 * 2 * 4 * 2
    assert all(float(x["cost_per_step_usd"]) > 0 for x in rows if x["feasible"] == "True")
    again = runner.invoke(app, ["sweep", "seed-replay", "-m", "llama-3.1-8b", "-H", "h100-sxm", "-o", str(out)])
    assert again.exit_code == 2 and "file exists" in again.stderr


def test_sweep_cli_errors(runner):
    from capplan.cli.app import app

    r = runner.invoke(app, ["sweep", "seed-replay", "-m", "llama-3.1-8b", "-H", "h200", "--objective", "cost"])
    assert r.exit_code == 2 and "--gpu-hour-price" in r.stderr  # h200's profile carries no price
    r = runner.invoke(app, ["sweep", "seed-replay", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--objective", "cost"])
    assert r.exit_code == 0 and "price_usd_per_gpu_hour" in r.stdout  # h100-sxm's does, and the output says so
    r = runner.invoke(app, ["sweep", "seed-replay", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--tp", "one"])
    assert r.exit_code == 2 and "expected integers" in r.stderr


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--kv-scale", "bogus"], "--kv-scale bogus: unknown value (allowed: tensor, token_head)"),
        (["--alltoall-mode", "bogus"], "--alltoall-mode bogus: unknown value"),
        (["--gemm-dtype", "fp3"], "--gemm-dtype fp3: unknown dtype"),
        (["--offload-gib", "-5"], "--kv-offload-gib -5.0: must be in (0, 1,000,000]"),
        (["--offload-gib", "nan"], "--kv-offload-gib nan: must be a finite number"),
        (["--tp", "1,3"], "--tp 3: olmo-3-7b has 32 attention heads, which 3 does not divide"),
        (["--expert-dtype", "fp8"], "--expert-dtype fp8: olmo-3-7b is a dense model"),
    ],
)
def test_sweep_refuses_a_flag_no_point_can_take(runner, tmp_path, flags, message):
    """A bad flag value is the input's error (exit 2, one line, no grid written), not a grid whose
    every row repeats it under "No feasible combination"."""
    from capplan.cli.app import app

    out = tmp_path / "bad.csv"
    r = runner.invoke(app, ["sweep", "reasoning-rl-olmo3-7b", "-H", "h100-sxm", "--conversations", "200", *flags, "-o", str(out)])
    assert r.exit_code == 2, r.output
    assert message in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert "No feasible combination" not in r.stdout and not out.exists()


def test_sweep_refuses_a_workload_no_point_can_run(runner, tmp_path):
    """Every prompt filling max_context leaves nothing to generate at any point: an input error
    (the workload file's, naming the field), not an exit 0 over a grid of infeasible rows; a point
    that does not fit stays a row."""
    from capplan.cli.app import app

    text = (REPO / "workloads" / "reasoning-rl-olmo3-7b.yaml").read_text(encoding="utf-8")
    text = text.replace("  max_response_tokens: 32768", "  max_response_tokens: 32768\n  max_context: 10")
    text = text.replace("prompt_tokens: {dist: lognormal, mean: 400, p95: 900, max: 2048}", "prompt_tokens: 2000")
    (tmp_path / "w.yaml").write_text(text, encoding="utf-8")
    r = runner.invoke(app, ["sweep", str(tmp_path / "w.yaml"), "-H", "h100-sxm", "-o", str(tmp_path / "g.csv")])
    assert r.exit_code == 2, r.output
    assert "conversation.max_context (line" in r.stderr and "must hold the prompt" in r.stderr  # refused as the file is read
    assert not (tmp_path / "g.csv").exists()
    # a model too large for the GPU at every point is infeasibility, reported per row and written; with no row
    # feasible the command exits 3 (it exited 0, so a script took an empty answer for one)
    r = runner.invoke(app, ["sweep", "reasoning-rl-olmo3-32b", "-H", "l4", "--tp", "1", "--trainer-hardware", "h100-sxm",
                            "--conversations", "200", "-o", str(tmp_path / "l4.csv")])
    assert r.exit_code == 3, r.output
    assert r.stderr.endswith("Error: no feasible combination in the grid\n")
    assert "No feasible combination" in r.stdout and "exceed the memory budget" in (tmp_path / "l4.csv").read_text()


def test_sweep_library_raises_when_every_configuration_is_refused():
    """Redundant experts on a dense model fail at every point for the same input reason."""
    from capplan.errors import InputError

    w = load_workload("reasoning-rl-olmo3-7b")
    with pytest.raises(InputError, match="no configuration of the sweep can be planned: --redundant-experts 2"):
        sweep(w, load_model_spec("olmo-3-7b"), [load_hardware("h100-sxm")], [1, 2], conversations=200,
              layout={"redundant_experts": 2})


def test_csv_export_is_spreadsheet_safe():
    from capplan.output import to_csv

    text = to_csv(["name", "value", "missing"], [["=cmd|' /C calc'!A0", -1.5, float("nan")], ["@SUM(A1)", 2, None]])
    rows = list(csv.reader(io.StringIO(text)))
    assert rows[1] == ["'=cmd|' /C calc'!A0", "-1.5", ""]
    assert rows[2] == ["'@SUM(A1)", "2", ""]
