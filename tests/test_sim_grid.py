"""``capplan simulate --sweep`` and :func:`capplan.sim.grid.simulate_grid`: the grid's points and
order, the same rows on every executor, failed points by name, and the command line.

The grids are small (seed-replay-auto: one conversation per update, ``steps=1``) so each point
simulates in milliseconds; what is tested is the grid, not the simulator (tests/test_simulate.py).
"""

from __future__ import annotations

import builtins
import json

import pandas as pd
import pytest
from typer.testing import CliRunner

from capplan.cli.app import app
from capplan.errors import InputError
from capplan.hardware import load_hardware
from capplan.sim import SUMMARY_KEYS, SimConfig, simulate
from capplan.sim.grid import GRID_AXES, grid_points, point_config, simulate_grid
from capplan.workload import load_workload

H100 = load_hardware("h100-sxm")
WORKLOAD = load_workload("seed-replay-auto")
MODEL = "llama-3.1-8b"
BASE = SimConfig(steps=1)
AXES = {"tp": [1, 2], "mode": ["sync", "async"]}
CLI = ["simulate", "seed-replay-auto", "-m", MODEL, "-H", "h100-sxm", "--steps", "1"]


def _grid(executor: str, axes=AXES, **options):
    return simulate_grid(WORKLOAD, H100, BASE, axes, model=MODEL, executor=executor, **options)


def test_points_are_the_product_in_order():
    """2 x 3 axes give 6 points, the last axis varying fastest (like itertools.product)."""
    points = grid_points({"tp": [1, 2], "max_staleness": [0, 1, 2]})
    assert [(p["tp"], p["max_staleness"]) for p in points] == [(1, 0), (1, 1), (1, 2), (2, 0), (2, 1), (2, 2)]


@pytest.mark.parametrize(
    "axes, message",
    [
        ({}, "--sweep: give at least one setting"),
        ({"engine": ["x"]}, "--sweep engine: unknown setting (allowed: inference_replicas, inference_gpus, tp"),
        ({"tp": []}, "--sweep tp: give at least one value"),
        ({"tp": [1, 1]}, "--sweep tp: 1 appears twice"),
        ({"inference_gpus": [8], "inference_replicas": [2]}, "--sweep inference_gpus with inference_replicas: sweep one"),
        ({"seed": list(range(101)), "tp": list(range(1, 101))}, "--sweep: 10,100 points, more than 10,000"),
        # one axis of 99,993 values: refused on its count (the check for repeated values was quadratic
        # and ran first, so `--sweep inference_gpus=8:100000:1` never returned)
        ({"inference_gpus": list(range(8, 100_001))}, "--sweep: 99,993 points, more than 10,000"),
    ],
)
def test_bad_axes(axes, message):
    with pytest.raises(InputError) as err:
        grid_points(axes)
    assert message in str(err.value)


def test_supported_settings_are_config_fields():
    """Every axis but inference_gpus is a SimConfig field (the brief's list at least)."""
    assert set(GRID_AXES) - {"inference_gpus"} <= set(SimConfig.model_fields)
    wanted = {"inference_replicas", "tp", "mode", "max_staleness", "max_num_seqs", "max_batched_tokens", "gpu_mem_util",
              "kv_dtype", "trainer_gpus", "steps", "seed", "sampling", "inference_gpus"}
    assert wanted <= set(GRID_AXES)


def test_inference_gpus_become_replicas():
    """8 GPUs at tp 2 are 4 replicas; 6 GPUs at tp 4 are not whole replicas."""
    assert point_config(BASE, {"inference_gpus": 8, "tp": 2}).inference_replicas == 4
    assert point_config(BASE.replace(tp=4), {"inference_gpus": 8}).inference_replicas == 2
    with pytest.raises(InputError, match="--sweep point inference_gpus=6 tp=4: inference_gpus 6 is not a multiple of tp 4"):
        point_config(BASE, {"inference_gpus": 6, "tp": 4})


def test_a_bad_value_is_refused_before_any_work():
    with pytest.raises(InputError, match=r"--sweep point mode=fast: --mode fast: unknown value \(allowed: colocated, sync, async\)"):
        _grid("serial", {"mode": ["sync", "fast"]})


def test_rows_are_the_points_summaries_in_order():
    """Each row is the point's settings, then SimResult.summary of a direct simulate() with those settings."""
    grid = _grid("serial")
    assert grid.ok and grid.executor == "serial"
    assert [(r["tp"], r["mode"]) for r in grid.rows] == [(1, "sync"), (1, "async"), (2, "sync"), (2, "async")]
    assert list(grid.rows[0]) == ["tp", "mode", *SUMMARY_KEYS]
    direct = simulate(WORKLOAD, H100, BASE.replace(tp=2, mode="async"), model=MODEL).summary
    assert {k: grid.rows[3][k] for k in SUMMARY_KEYS} == dict(direct)
    frame = grid.as_frame()
    assert list(frame.columns) == ["tp", "mode", *SUMMARY_KEYS] and len(frame) == 4


def test_process_pool_gives_the_serial_rows():
    serial, pool = _grid("serial"), _grid("process", workers=2)
    assert pool.executor == "process" and pool.workers == 2
    assert pool.rows == serial.rows


def test_ray_gives_the_serial_rows():
    pytest.importorskip("ray", reason="Ray is not installed (pip install 'capplan[ray]'); the Ray executor is untested")
    seen = []
    on_ray = _grid("ray", workers=2, progress=lambda done, total: seen.append((done, total)))
    assert on_ray.executor == "ray"
    assert on_ray.rows == _grid("serial").rows
    assert seen[-1] == (4, 4)


def test_a_failed_point_is_named_not_dropped():
    """At 5% of 80 GB the 8B model's 15 GiB of weights do not fit: that point fails twice (one
    retry) and is reported by name; the other point's row is there."""
    grid = _grid("process", {"gpu_mem_util": [0.05, 0.9]}, workers=2)
    assert not grid.ok
    assert [r["gpu_mem_util"] for r in grid.rows] == [0.9]
    (failure,) = grid.failures
    assert failure.name == "gpu_mem_util=0.05" and failure.attempts == 2
    assert failure.error.startswith("DoesNotFitError: ")


# ------------------------------------------------------------------------------ command line


def test_cli_table_json_and_file(tmp_path):
    runner = CliRunner()
    table = runner.invoke(app, [*CLI, "--sweep", "tp=1:2", "--sweep", "mode=sync,async", "--executor", "serial"])
    assert table.exit_code == 0, table.output
    lines = [line.split() for line in table.stdout.splitlines()]
    assert [line[:2] for line in lines if line[:2] in (["1", "sync"], ["1", "async"], ["2", "sync"], ["2", "async"])] == [
        ["1", "sync"], ["1", "async"], ["2", "sync"], ["2", "async"]
    ]
    out = tmp_path / "grid.csv"
    doc = runner.invoke(app, [*CLI, "--sweep", "tp=1,2", "--sweep", "mode=sync,async", "--format", "json", "-o", str(out)])
    assert doc.exit_code == 0, doc.output
    data = json.loads(doc.stdout)
    assert data["axes"] == AXES and data["failures"] == []
    assert data["rows"] == json.loads(json.dumps(_grid("serial").rows))
    frame = pd.read_csv(out)
    assert list(frame.columns) == ["tp", "mode", *SUMMARY_KEYS]
    assert frame["steady_trained_tokens_per_s"].tolist() == pytest.approx([r["steady_trained_tokens_per_s"] for r in data["rows"]], rel=1e-15)
    again = runner.invoke(app, [*CLI, "--sweep", "tp=1", "-o", str(out)])
    assert again.exit_code == 2 and "file exists; pass --force" in again.stderr


def test_cli_parquet(tmp_path):
    pytest.importorskip("pyarrow", reason="Parquet output needs pyarrow (pip install 'capplan[parquet]')")
    out = tmp_path / "grid.parquet"
    result = CliRunner().invoke(app, [*CLI, "--sweep", "kv_dtype=bf16,fp8", "--executor", "serial", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert pd.read_parquet(out)["kv_dtype"].tolist() == ["bf16", "fp8"]


def test_cli_failed_point_exits_1_after_the_table():
    result = CliRunner().invoke(app, [*CLI, "--sweep", "gpu_mem_util=0.05,0.9", "--executor", "serial"])
    assert result.exit_code == 1
    assert "0.9" in result.stdout
    (line,) = [line for line in result.stderr.splitlines() if line.strip() and not line.startswith("Warning: ")]
    assert line.startswith("point failed: gpu_mem_util=0.05: DoesNotFitError: ") and line.endswith("(failed 2 time(s))")


def test_cli_ray_missing_is_one_line(monkeypatch):
    real_import = builtins.__import__

    def no_ray(name, *args, **kwargs):
        if name == "ray" or name.startswith("ray."):
            raise ImportError("No module named 'ray'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    result = CliRunner().invoke(app, [*CLI, "--sweep", "tp=1,2", "--executor", "ray"])
    assert result.exit_code == 2
    assert result.stderr.strip() == "Error: --executor ray needs Ray, which is not installed: pip install 'capplan[ray]'"
