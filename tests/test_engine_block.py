"""A workload's ``engine:`` block: vLLM-named engine settings that default the matching flags.

A flag given on the command line wins over the block; the block wins over the command's
default. Checked through ``plan``, ``simulate`` and ``kv --workload``, whose JSON names the
settings they ran with.
"""

from __future__ import annotations

import json

import pytest

from capplan.workload import load_workload

REPO_WORKLOAD = "reasoning-rl-olmo3-7b"


@pytest.fixture
def with_engine(tmp_path):
    """The bundled reasoning-rl-olmo3-7b with an ``engine:`` block appended."""

    def _make(block: str, base: str = REPO_WORKLOAD) -> str:
        from capplan.resources import resolve

        text = resolve("workloads", base).read_text() + "\nengine:\n" + block
        path = tmp_path / "w.yaml"
        path.write_text(text)
        return str(path)

    return _make


def test_block_loads_with_vllm_spellings(with_engine):
    """vLLM's dtype spellings are read as capplan's (bfloat16 -> bf16, fp8_e4m3 -> fp8)."""
    w = load_workload(with_engine("  tensor_parallel_size: 2\n  kv_cache_dtype: fp8_e4m3\n  dtype: bfloat16\n"))
    assert (w.engine.tensor_parallel_size, w.engine.kv_cache_dtype, w.engine.dtype) == (2, "fp8", "bf16")


def test_plan_takes_the_block_and_a_flag_wins(runner, with_engine):
    from capplan.cli.app import app

    path = with_engine("  tensor_parallel_size: 2\n  kv_cache_dtype: fp8\n  max_num_seqs: 64\n")
    r = runner.invoke(app, ["plan", path, "-H", "h100-sxm", "--inference-gpus", "8", "--trainer-gpus", "8", "-f", "json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)[0]
    assert (d["tp"], d["kv_dtype"], d["inference_replicas"]) == (2, "fp8", 4)
    assert d["decode_batch"] <= 64
    r = runner.invoke(app, ["plan", path, "-H", "h100-sxm", "--inference-gpus", "8", "--trainer-gpus", "8", "-f", "json", "-tp", "4"])
    d = json.loads(r.stdout)[0]
    assert (d["tp"], d["kv_dtype"], d["inference_replicas"]) == (4, "fp8", 2)


def test_simulate_takes_the_block(runner, with_engine):
    from capplan.cli.app import app

    path = with_engine("  tensor_parallel_size: 2\n  kv_cache_dtype: fp8\n")
    r = runner.invoke(app, ["simulate", path, "-H", "h100-sxm", "--inference-gpus", "4", "--steps", "1", "-f", "json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert (d["config"]["tp"], d["config"]["kv_dtype"], d["config"]["inference_replicas"]) == (2, "fp8", 2)


def test_kv_workload_takes_the_block(runner, with_engine):
    from capplan.cli.app import app

    path = with_engine("  tensor_parallel_size: 2\n  max_model_len: 16384\n")
    r = runner.invoke(app, ["kv", "-m", "olmo-3-7b", "-H", "h100-sxm", "-w", path, "-f", "json"])
    assert r.exit_code == 0, r.output
    row = json.loads(r.stdout)[0]
    assert (row["tp"], row["context"]) == (2, 16384)


def test_inference_gpus_and_replicas_are_one_count(runner):
    """plan's --inference-replicas R at tp T is --inference-gpus R*T; simulate's --inference-gpus G is G/T replicas."""
    from capplan.cli.app import app

    a = runner.invoke(app, ["plan", REPO_WORKLOAD, "-H", "h100-sxm", "-tp", "2", "--inference-replicas", "4", "--trainer-gpus", "8", "-f", "json"])
    b = runner.invoke(app, ["plan", REPO_WORKLOAD, "-H", "h100-sxm", "-tp", "2", "--inference-gpus", "8", "--trainer-gpus", "8", "-f", "json"])
    assert a.exit_code == 0 and a.stdout == b.stdout
    r = runner.invoke(app, ["plan", REPO_WORKLOAD, "-H", "h100-sxm", "--inference-replicas", "4", "--inference-gpus", "8"])
    assert r.exit_code == 2 and "give one" in r.stderr
    r = runner.invoke(app, ["simulate", REPO_WORKLOAD, "-H", "h100-sxm", "-tp", "2", "--inference-gpus", "3", "--steps", "1"])
    assert r.exit_code == 2 and "not a multiple of --tensor-parallel-size 2" in r.stderr
