"""Eager-mode engines (vLLM ``--enforce-eager``): no CUDA graphs, a host cost per layer per step.

The term is ``TimeTerms.eager_s_per_layer`` (:data:`capplan.engine.EAGER_S_PER_LAYER`), on only
with ``enforce_eager``; eager engines reserve no CUDA-graph memory. The flag reaches ``kv``,
``roofline``, ``plan``, ``sweep`` and ``simulate``, and a workload's ``engine.enforce_eager``.
"""

from __future__ import annotations

import json

import pytest

from capplan.engine import EAGER_S_PER_LAYER, load_engine
from capplan.hardware import load_hardware
from capplan.modelspec import load_model_spec
from capplan.roofline import RooflineInputs, step_pricer

H100 = load_hardware("h100-sxm")
OLMO32 = load_model_spec("olmo-3-32b")


def test_the_eager_cost_is_the_published_difference_per_layer():
    """vllm-omni #7960: Qwen2.5-Omni-7B's 28-layer thinker on an A800, TPOT ~22.5 ms eager
    against ~13 ms with CUDA graphs: (22.5 - 13) / 28 = 0.339 ms per layer."""
    assert EAGER_S_PER_LAYER == pytest.approx((22.5e-3 - 13e-3) / 28, rel=0.01)


def test_off_by_default_and_bit_identical_when_off():
    """The bundled profiles run CUDA graphs; asking for them explicitly changes no bit."""
    vllm = load_engine("vllm")
    assert not vllm.time.enforce_eager
    a = step_pricer(OLMO32, H100, RooflineInputs(tp=8, engine=vllm)).decode(52, 12_000)
    b = step_pricer(OLMO32, H100, RooflineInputs(tp=8, engine=vllm.with_settings(enforce_eager=False))).decode(52, 12_000)
    assert a.step_time_s == b.step_time_s


@pytest.mark.parametrize("batch,context", [(1, 1_000), (52, 12_000), (256, 4_000)])
def test_an_eager_step_adds_the_per_layer_cost_on_both_paths(batch, context):
    """OLMo-3-32B (64 layers) at TP 8: every step is 64 x 0.34 ms = 21.8 ms longer, whatever the
    batch (a host cost), on the scalar path and the array path alike."""
    vllm = load_engine("vllm")
    graph = step_pricer(OLMO32, H100, RooflineInputs(tp=8, engine=vllm))
    eager = step_pricer(OLMO32, H100, RooflineInputs(tp=8, engine=vllm.with_settings(enforce_eager=True)))
    extra = eager.decode(batch, context).step_time_s - graph.decode(batch, context).step_time_s
    assert extra == pytest.approx(OLMO32.num_layers * EAGER_S_PER_LAYER, rel=1e-9)
    assert float(eager.decode([float(batch)], [float(context)]).step_time_s[0]) == pytest.approx(
        eager.decode(batch, context).step_time_s, rel=1e-12)


def test_eager_engines_reserve_no_graph_memory():
    """vllm-latest subtracts 2.35 GiB of CUDA-graph memory from the KV budget; eager, none."""
    from capplan.kv import KVInputs, compute_kv

    latest = load_engine("vllm-latest")
    assert latest.memory.cudagraph_gib > 0
    eager = latest.with_settings(enforce_eager=True)
    assert eager.memory.cudagraph_gib == 0 and "--enforce-eager true" in eager.calibration
    graph_kv = compute_kv(OLMO32, H100, KVInputs(tp=8, engine=latest)).kv_capacity_tokens
    eager_kv = compute_kv(OLMO32, H100, KVInputs(tp=8, engine=eager)).kv_capacity_tokens
    assert eager_kv > graph_kv


def test_the_flag_reaches_roofline_and_kv(runner):
    from capplan.cli.app import app

    def step(*extra: str) -> float:
        r = runner.invoke(app, ["roofline", "-m", "olmo-3-32b", "-H", "h100-sxm", "--tp", "8", "--batch", "52",
                                "--context", "12000", "-f", "json", *extra])
        assert r.exit_code == 0, r.output
        return json.loads(r.stdout)[0]["step_time_s"]

    assert step("--enforce-eager") - step() == pytest.approx(64 * EAGER_S_PER_LAYER, rel=1e-6)

    def tokens(*extra: str) -> int:
        r = runner.invoke(app, ["kv", "-m", "olmo-3-32b", "-H", "h100-sxm", "--tp", "8", "--engine", "vllm-latest", "-f", "json", *extra])
        assert r.exit_code == 0, r.output
        return json.loads(r.stdout)[0]["kv_capacity_tokens"]

    assert tokens("--enforce-eager") > tokens()


def test_plan_reads_the_workload_block_and_the_flag_wins(runner, tmp_path):
    """``engine: {enforce_eager: true}`` slows the plan's rollout; ``--no-enforce-eager`` undoes it."""
    from capplan.cli.app import app
    from capplan.resources import resolve

    path = tmp_path / "w.yaml"
    path.write_text(resolve("workloads", "reasoning-rl-olmo3-7b").read_text() + "\nengine:\n  enforce_eager: true\n")
    args = ["-H", "h100-sxm", "--inference-gpus", "8", "--trainer-gpus", "8", "--mode", "sync", "-f", "json"]

    def rollout(workload: str, *extra: str) -> float:
        r = runner.invoke(app, ["plan", workload, *args, *extra])
        assert r.exit_code == 0, r.output
        return json.loads(r.stdout)[0]["phases"]["generation_s"]

    plain = rollout("reasoning-rl-olmo3-7b")
    assert rollout(str(path)) > 1.05 * plain
    assert rollout(str(path), "--no-enforce-eager") == pytest.approx(plain, rel=1e-12)


def test_sweep_and_simulate_take_the_flag(runner, tmp_path):
    from capplan.cli.app import app

    def sweep_step(*extra: str) -> float:
        out = tmp_path / f"g{len(extra)}.json"
        r = runner.invoke(app, ["sweep", "reasoning-rl-olmo3-7b", "-H", "h100-sxm", "--inference-gpus", "8",
                                "--trainer-gpus", "8", "-o", str(out), *extra])
        assert r.exit_code == 0, r.output
        return json.loads(out.read_text())[0]["step_time_s"]

    assert sweep_step("--enforce-eager") > sweep_step()

    def tpot_p50(*extra: str) -> float:
        r = runner.invoke(app, ["simulate", "chat-serving", "-H", "h100-sxm", "--inference-replicas", "2",
                                "--requests", "300", "-f", "json", *extra])
        assert r.exit_code == 0, r.output
        d = json.loads(r.stdout)
        return d["latency"]["tpot_s"]["p50"]

    assert tpot_p50("--enforce-eager") > tpot_p50()


def test_the_olmo3_32b_rows_run_eager_and_the_7b_rows_do_not():
    """open-instruct's 32B Think script passes --vllm_enforce_eager, its 7B script does not; the
    accuracy rows say which they assume."""
    from capplan.accuracy.corpus import load_corpus
    from capplan.accuracy.rl import predict_rl

    rows = {r.id: r for r in load_corpus(kinds={"rl"})}
    assert any("eager mode" in a for a in predict_rl(rows["olmo3_32b_think_trainer_wait"], None).assumed)
    assert any("eager mode" in a for a in predict_rl(rows["olmo3_fn41_gen"], None).assumed)
    assert not any("eager mode" in a for a in predict_rl(rows["olmo3_7b_think_infer_train_ratio"], None).assumed)
