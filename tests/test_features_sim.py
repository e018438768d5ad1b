"""Engine features in ``capplan simulate``: expert/data parallelism and quantised experts priced and
sized as the plan does, and the features it does not simulate refused in one line."""

from __future__ import annotations

import math

import numpy as np
import pytest

from capplan.cli.app import app
from capplan.hardware import load_hardware
from capplan.kv import KVInputs, compute_kv
from capplan.modelspec import load_model_spec
from capplan.roofline import RooflineInputs, engine_step
from capplan.sim import SimConfig, simulate
from capplan.sim.setup import engine_setup
from capplan.sim.stepcost import NO_WINDOW, step_coefficients
from capplan.workload import load_workload

H100 = load_hardware("h100-sxm")
H200 = load_hardware("h200")

STEADY_MOE = """
version: 1
name: steady-moe
model: qwen3-30b-a3b
method: outcome-rl
volume: {prompts_per_step: 16, samples_per_prompt: 4}
conversation:
  prompt_tokens: 512
  turns:
    - {action_tokens: 1024}
"""


@pytest.mark.parametrize(
    "model,hw,layout",
    [
        ("qwen3-30b-a3b", H100, {"tp": 1, "ep": 8}),  # one node: both all-to-all kernels cost the same per byte
        ("qwen3-30b-a3b", H100, {"tp": 2, "ep": 8, "alltoall_mode": "normal"}),  # dp 4: the MoE layers see 4 ranks
        ("deepseek-v3", H200, {"tp": 1, "ep": 16, "weight_dtype": "fp8"}),  # two nodes: the kernel switch at 256
        ("deepseek-v3", H200, {"tp": 8, "dp": 2, "ep": 16, "weight_dtype": "fp8", "redundant_experts": 32,
                               "alltoall_mode": "low_latency"}),
        ("qwen3-30b-a3b", H100, {"tp": 1, "ep": 8, "expert_dtype": "fp8", "kv_dtype": "fp8", "kv_scale": "token_head"}),
    ],
)
def test_step_coefficients_reproduce_engine_step_under_expert_parallelism(model, hw, layout):
    """The probed coefficients (with the all-to-all kernel switch) give engine_step's time on 200
    random step mixes, on both sides of the switch (rel. 1e-9), as the plain-layout test in
    tests/test_simulate.py does."""
    spec = load_model_spec(model)
    inp = RooflineInputs(**layout)
    c = step_coefficients(spec, hw, inp)
    rng = np.random.default_rng(11)
    new = rng.choice([1, 17, 255, 256, 257, 511, 512, 513, 2048, 2049, 8192], 200).astype(float)
    logits = np.minimum(new, rng.integers(0, 600, 200))
    pairs = new * rng.integers(1, 40000, 200)
    read = rng.integers(0, 3_000_000, 200).astype(float)
    seqs = np.minimum(new, rng.integers(1, 600, 200)).astype(float)
    ref = engine_step(spec, hw, inp, new_tokens=new, logits_tokens=logits, attention_pairs=pairs, kv_read_tokens=read,
                      sequences=seqs).step_time_s
    got = [c.step_time(n, lg, p, 0.0, r, 0.0, s) for n, lg, p, r, s in zip(new, logits, pairs, read, seqs)]
    np.testing.assert_allclose(got, ref, rtol=1e-9)


def test_the_kernel_switch_is_only_where_the_roofline_switches():
    """Within one node (EP8 on H100) the two kernel families cost the same per byte: no switch, so
    the simulator's step is priced exactly as without one; across nodes (EP16 on H200) the switch
    sits at 256 positions per GPU (capplan.roofline.LOW_LATENCY_MAX_TOKENS x tp)."""
    one_node = step_coefficients(load_model_spec("qwen3-30b-a3b"), H100, RooflineInputs(tp=1, ep=8))
    assert one_node.a2a_switch == NO_WINDOW and one_node.k_a2a == 0.0
    two_nodes = step_coefficients(load_model_spec("deepseek-v3"), H200, RooflineInputs(tp=1, ep=16, weight_dtype="fp8"))
    assert two_nodes.a2a_switch == 256.0 and two_nodes.k_a2a != 0.0


def test_plain_coefficients_have_no_expert_parallel_terms():
    """A plain layout builds exactly the coefficients it always did (the new fields at their defaults)."""
    c = step_coefficients(load_model_spec("qwen3-30b-a3b"), H100, RooflineInputs(tp=2))
    assert c.a2a_switch == NO_WINDOW and c.k_a2a == 0.0
    assert c.q == 1.0 - 8 / 128


def test_expert_parallel_replica_holds_what_capplan_kv_and_the_plan_say(write_yaml):
    """Weights per GPU and KV capacity of a simulated EP8 rank are compute_kv's (the plan's
    calculator), and differ from the TP-only layout (EP frees expert memory: more KV)."""
    w = load_workload(write_yaml(STEADY_MOE))
    spec = load_model_spec("qwen3-30b-a3b")
    cfg = SimConfig(tp=1, ep=8, inference_replicas=8, trainer_gpus=8)
    _, report, notes = engine_setup(w, spec, H100, H100, cfg)
    kv = compute_kv(spec, H100, KVInputs(tp=1, ep=8))
    assert report.kv_capacity_tokens == kv.kv_capacity_tokens
    assert f"weights {kv.weights_gib_per_gpu:.2f} GiB per GPU" in notes[0]
    plain = compute_kv(spec, H100, KVInputs(tp=1))
    assert kv.kv_capacity_tokens > plain.kv_capacity_tokens
    from capplan.plan import PlanInputs, plan_workload

    plan = plan_workload(w, PlanInputs(hardware=H100, model=spec, inference_gpus=8, trainer_gpus=8, ep=8)).as_dict()
    assert (plan["kv"]["ep"], plan["kv"]["dp"]) == (8, 8)
    assert report.kv_capacity_tokens == plan["kv"]["kv_capacity_tokens"]
    assert report.kv_budget_gib_per_gpu == plan["kv"]["kv_budget_gib_per_gpu"]
    assert f"weights {plan['kv']['weights_gib_per_gpu']:.2f} GiB per GPU" in notes[0]
    assert report.weight_sync_s == plan["weight_sync_time_s"]


def test_steady_throughput_agrees_with_the_plan_under_expert_parallelism(write_yaml):
    """No tail: 64 identical requests (512 prompt, 1,024 sampled tokens) on one EP8 instance of
    8 ranks (8 requests each), sync. The plan prices the rollout as prefill + decode at the
    rank's batch with the EP step prices; the simulator plays it event by event. Stated
    tolerance, as tests/test_simulate.py's plain agreement test: 1% on the rollout time and on
    the step time."""
    from capplan.plan import PlanInputs, plan_workload

    w = load_workload(write_yaml(STEADY_MOE))
    spec = load_model_spec("qwen3-30b-a3b")
    plan = plan_workload(w, PlanInputs(hardware=H100, model=spec, inference_gpus=8, trainer_gpus=8, ep=8))
    r = simulate(w, H100, SimConfig(steps=3, trainer_gpus=8, inference_replicas=8, ep=8, chunk_conversations=64))
    assert r.config["ep"] == 8
    first_rollout = r.updates[0]["start_s"]
    assert math.isclose(first_rollout, plan.rollout_time_s, rel_tol=0.01), (first_rollout, plan.rollout_time_s)
    period = r.updates[2]["start_s"] - r.updates[1]["start_s"]
    assert math.isclose(period, plan.step_time_s, rel_tol=0.01), (period, plan.step_time_s)
    assert math.isclose(r.setup["weight_sync_s"], plan.weight_sync_time_s, rel_tol=1e-12)


def test_serving_simulation_under_expert_parallelism_uses_the_plans_replica():
    """The bundled DeepSeek-V3 EP16 example: its engine: block sets the layout (dp 16, EP), and
    each simulated rank holds capplan kv's 1,021,776 positions (docs/features.md)."""
    from capplan.sim.serving import ServingSimConfig, simulate_serving

    w = load_workload("deepseek-v3-ep-serving")
    r = simulate_serving(w, H200, ServingSimConfig(tp=1, ep=16, dp=16, inference_replicas=16, requests=200,
                                                   weight_dtype="fp8"))
    kv = compute_kv(load_model_spec("deepseek-v3"), H200, KVInputs(tp=1, ep=16, weight_dtype="fp8"))
    assert r.setup["kv_capacity_tokens"] == kv.kv_capacity_tokens
    assert r.config["ep"] == 16 and r.config["dp"] == 16


@pytest.mark.parametrize(
    "args,message",
    [
        (["--two-batch-overlap", "--ep", "8", "--inference-replicas", "8"], "--two-batch-overlap: the simulator prices"),
        (["--spec-method", "eagle3", "--spec-tokens", "3"], "give exactly one of --acceptance-rate"),  # simulated: needs an acceptance
        (["--ep", "8", "--inference-replicas", "4"], "not a multiple of an instance's 8 data-parallel ranks"),
    ],
)
def test_features_not_simulated_or_incomplete_are_refused_in_one_line(runner, args, message):
    """Never silently another setup: a one-line error naming the flag (exit 2)."""
    r = runner.invoke(app, ["simulate", "seed-replay", "-m", "qwen3-30b-a3b", "-H", "h100-sxm", "--steps", "1", *args])
    assert r.exit_code == 2
    assert message in r.stderr and r.stderr.count("Error:") == 1


@pytest.mark.parametrize(
    "args,message",
    [
        (["--spec-method", "eagle3", "--spec-tokens", "3", "--acceptance-rate", "0.7"],
         "--spec-method: speculative decoding is not simulated for serving workloads"),
        (["--kv-offload-gib", "8"], "--kv-offload-gib: the serving simulator keeps no prefixes between requests"),
    ],
)
def test_serving_features_not_simulated_are_refused_in_one_line(runner, args, message):
    """Speculative decoding and the CPU KV tier are simulated for RL workloads only: the serving
    simulator refuses them in one line naming the flag (exit 2)."""
    r = runner.invoke(app, ["simulate", "chat-serving", "-H", "h100-sxm", "--requests", "10", *args])
    assert r.exit_code == 2
    assert message in r.stderr and r.stderr.count("Error:") == 1


def test_the_workload_engine_keys_set_the_layout_and_a_flag_wins(runner):
    """deepseek-v3-ep-serving's engine: block gives EP16 over 16 ranks; --inference-replicas 8 is
    refused (half an instance); an explicit --ep 1 --dp 1 --tp 8 turns it off."""
    r = runner.invoke(app, ["simulate", "deepseek-v3-ep-serving", "-H", "h200", "--inference-replicas", "8", "--requests", "10"])
    assert r.exit_code == 2 and "16 data-parallel ranks" in r.stderr
    r = runner.invoke(app, ["simulate", "deepseek-v3-ep-serving", "-H", "h200", "--tp", "8", "--ep", "1", "--dp", "1",
                            "--inference-replicas", "1", "--requests", "10", "-f", "json"])
    assert r.exit_code == 0, r.stderr
    assert '"ep"' not in r.stdout.split('"setup"')[0]
