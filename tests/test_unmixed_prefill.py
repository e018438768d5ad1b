"""Engines that do not mix prompts into decode steps (``time.mixed_prefill: false``: SGLang without
``--enable-mixed-chunk``): a prompt step holds prompts only, up to the whole token budget, and the
decoding batch waits for it. The closed form, the queueing model and the simulator take the same
schedule; the sglang profile runs it (cited)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from capplan import benchmark as B
from capplan.engine import default_engine, load_engine
from capplan.hardware import load_hardware
from capplan.modelspec import load_model_spec
from capplan.plan.serving import serving_mix
from capplan.sim.serving import replay_mix, serving_engine, simulate_replica
from capplan.workload import load_workload


@pytest.fixture(scope="module")
def mixed() -> B.Server:
    return B.server_for(load_model_spec("llama-3.1-8b"), load_hardware("h100-sxm"), engine=default_engine())


@pytest.fixture(scope="module")
def unmixed(mixed) -> B.Server:
    return replace(mixed, mixed_prefill=False)


def test_the_sglang_profile_runs_prompt_steps_apart_and_says_why():
    """SGLang's ServerArgs has ``enable_mixed_chunk: bool = False``; vLLM V1 and TensorRT-LLM's
    in-flight batching mix (the default)."""
    sglang = load_engine("sglang")
    assert sglang.time.mixed_prefill is False
    assert "enable_mixed_chunk" in sglang.sources["time.mixed_prefill"]
    assert load_engine("vllm-0.19").time.mixed_prefill and load_engine("trtllm").time.mixed_prefill
    s = B.server_for(load_model_spec("llama-3.1-8b"), load_hardware("h100-sxm"), engine=sglang)
    assert s.mixed_prefill is False


def test_a_decode_token_waits_for_the_prompt_steps(mixed, unmixed):
    """32 clients with 1,000-token prompts and 200-token answers: each decode step is followed, for
    a share of the steps, by a prompt step of its own, so the inter-token latency is the decode
    step plus that share of a prompt step alone; the mixed engine hides part of the prompt work
    under the decodes' memory time, so the unmixed one is slower per token."""
    a = B._closed_loop_arrays(unmixed, 32.0, 1000, 200)
    m = B._closed_loop_arrays(mixed, 32.0, 1000, 200)
    assert float(a["itl"][0]) > float(m["itl"][0])
    t_d = float(np.mean(unmixed.pricer.decode(float(a["b"][0]), 1000 + 199 * (np.arange(8) + 0.5) / 8).step_time_s))
    t_p = B.prefill_alone_s(unmixed, [1000.0])[0]  # one prompt in one step: 1,000 < 8,192 tokens
    share = 32.0 / (1.0 + 199.0)  # 32 prompt steps per request lifetime of 1 + 199 steps
    assert float(a["itl"][0]) == pytest.approx(t_d + share * t_p, rel=0.02)


def test_a_prompt_step_takes_the_whole_budget(mixed, unmixed):
    """The chunk budget beside ``b`` decodes is ``M - b`` when they mix, all of ``M`` when not."""
    b, c = np.array([100.0]), np.array([101.0])
    assert B._chunk_budget(mixed, None, 8192.0, b, c, 1000.0)[0] == 8092.0
    assert B._chunk_budget(unmixed, None, 8192.0, b, c, 1000.0)[0] == 8192.0


def test_alone_on_the_replica_the_schedules_agree(mixed, unmixed):
    """One request at a time (nothing else decoding) has nothing to mix: the same TTFT."""
    assert B.closed_loop(unmixed, 1, 1000, 1).ttft_s == pytest.approx(B.closed_loop(mixed, 1, 1000, 1).ttft_s, rel=1e-9)


def test_the_simulator_stalls_the_decodes_during_prompt_steps(mixed, unmixed):
    """The same arrivals through both schedules: the unmixed replica's decodes wait for prompt
    steps, so its time per output token is longer; every request is served either way."""
    rng = np.random.default_rng(3)
    n = 3000
    arrivals = np.cumsum(rng.exponential(1.0 / 20.0, n))
    prompt, output = np.full(n, 1000), np.full(n, 200)

    def tpot(server: B.Server) -> float:
        run = simulate_replica(serving_engine(server), arrivals, prompt, output, np.zeros(n, np.int64))
        assert np.all(run.finish_s > 0)
        return float(np.mean((run.finish_s - arrivals - run.ttft_s) / 199.0))

    assert tpot(unmixed) > tpot(mixed) * 1.05


@pytest.mark.parametrize("utilisation", [0.3, 0.6, 0.85])
def test_queueing_model_matches_the_simulator_unmixed(unmixed, utilisation):
    """The queueing model's p50 and p99 TTFT within 15% of the simulator's for the unmixed schedule
    (chat-serving's lengths), as for the mixed one (tests/test_serving.py)."""
    mix = serving_mix(load_workload("chat-serving"), 4000)
    cap = B.serving_capacity(unmixed, mix)
    rate = utilisation * cap[0]
    q = B.queueing_latency(unmixed, rate, mix, 1.0, (50.0, 99.0), cap)
    n = 40_000
    run, _, _ = replay_mix(unmixed, mix, rate, n, np.random.default_rng(int(utilisation * 100)))
    sim = run.ttft_s[n // 10:]
    for p in (50, 99):
        assert q.ttft_s.at(p) == pytest.approx(float(np.percentile(sim, p)), rel=0.15), p


def test_speculative_decoding_without_mixing():
    """SGLang runs EAGLE unmixed: a prompt step alone, then the verify steps. Per output token the
    prompt steps stall the verify steps, so at 16 clients the unmixed engine is slower per token
    than the mixing one; alone on the replica (one client, one output token) nothing is mixed and
    the two agree. The queueing model prices it too (the batch solves Little's law)."""
    from capplan.speculative import SpecInputs, SpeculativePricer

    spec, hw = load_model_spec("llama-3.1-8b"), load_hardware("h100-sxm")
    s = B.server_for(spec, hw, engine=default_engine())
    pricer = SpeculativePricer.build(spec, hw, s.pricer.inp, SpecInputs(method="eagle3", num_speculative_tokens=3, acceptance_rate=0.7))
    mixed, unmixed = replace(s, pricer=pricer), replace(s, pricer=pricer, mixed_prefill=False)
    assert B.closed_loop(unmixed, 16, 1000, 200).itl_s > B.closed_loop(mixed, 16, 1000, 200).itl_s
    assert B.closed_loop(unmixed, 1, 1000, 1).ttft_s == pytest.approx(B.closed_loop(mixed, 1, 1000, 1).ttft_s, rel=1e-9)
    mix = serving_mix(load_workload("chat-serving"), 500)
    q = B.queueing_latency(unmixed, 5.0, mix, 1.0, (50.0, 99.0))
    assert q.ttft_s.at(99.0) >= q.ttft_s.at(50.0) > 0


# --------------------------------------------------------------------------------------------- RL rollouts


def _rollout(engine, steps=3):
    from capplan.sim import SimConfig, simulate

    w = load_workload("agentic-tool-rl")
    cfg = SimConfig(tp=1, inference_replicas=8, trainer_gpus=8, mode="sync", steps=steps, engine=engine)
    return simulate(w, load_hardware("h100-sxm"), cfg, model=load_model_spec("qwen3-8b"))


def test_rl_rollouts_stall_the_decodes_during_prompt_steps():
    """The RL scheduler takes the profile's schedule: the same terms without mixing run prompt
    steps of their own (counted in ``engine_steps``), the decoding batch waits for them, so the
    rollout is slower; every trajectory still completes, and no caveat is raised for it."""
    from capplan.sim.setup import rollout_caveats

    base = load_engine("vllm-0.19")
    unmixed = base.model_copy(update={"time": base.time.model_copy(update={"mixed_prefill": False})})
    assert rollout_caveats(unmixed, unmixed.time_on("h100-sxm")) == []
    a, b = _rollout(base), _rollout(unmixed)
    assert b.summary["step_time_s"] > a.summary["step_time_s"]
    assert b.summary["completed_trajectories"] == a.summary["completed_trajectories"]
    assert b.summary["engine_forwarded_tokens"] == pytest.approx(a.summary["engine_forwarded_tokens"], rel=0.02)


def test_sglang_rollouts_agree_with_the_plan():
    """agentic-tool-rl (multi-turn, tool observations prefilled every turn) on SGLang's profile:
    the plan's closed form and the simulator's steady step time within 15% (3-4% when written)."""
    from capplan.plan import PlanInputs, plan_workload

    engine = load_engine("sglang")
    w, spec, h100 = load_workload("agentic-tool-rl"), load_model_spec("qwen3-8b"), load_hardware("h100-sxm")
    plan = plan_workload(w, PlanInputs(hardware=h100, model=spec, tp=1, inference_gpus=8, trainer_gpus=8, mode="sync",
                                       engine=engine), conversations=2000)
    sim = _rollout(engine, steps=4)
    assert plan.step_time_s == pytest.approx(sim.summary["step_time_s"], rel=0.15)
