"""Speculative decoding and the CPU KV tier in ``capplan simulate`` (the RL simulator).

References: :class:`capplan.speculative.SpeculativePricer` (what ``capplan plan`` charges per
output token), :func:`capplan.speculative.spec_memory` (the drafter's share of the KV budget),
:func:`capplan.offload.kv_load_s` (a load over the host link), and the plan itself.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from capplan.cli.app import app
from capplan.hardware import load_hardware
from capplan.modelspec import load_model_spec
from capplan.roofline import RooflineInputs, prefill_step
from capplan.sim import SimConfig, simulate
from capplan.speculative import SpecInputs, SpeculativePricer
from capplan.workload import load_workload

pytestmark = pytest.mark.usefixtures("assumed_engine")

H100 = load_hardware("h100-sxm")
AS_PROFILED = {"rollout_slowdown": 1.0, "step_overhead_s": 0.0}
EAGLE3 = SpecInputs(method="eagle3", num_speculative_tokens=3, acceptance_rate=0.7)

ONE_REQUEST = """
version: 1
name: one-request
model: llama-3.1-8b
method: outcome-rl
volume: {{prompts_per_step: 1, samples_per_prompt: {n}}}
conversation:
  prompt_tokens: {P}
  turns:
    - {{action_tokens: {A}}}
"""

STEADY = """
version: 1
name: steady
model: llama-3.1-8b
method: outcome-rl
volume: {prompts_per_step: 16, samples_per_prompt: 4}
conversation:
  prompt_tokens: 512
  turns:
    - {action_tokens: 1024}
"""

AGENTIC = """
version: 1
name: small-agentic
model: llama-3.1-8b
method: multi-turn-rl
volume: {prompts_per_step: 16, samples_per_prompt: 8}
conversation:
  prompt_tokens: {dist: lognormal, mean: 2000, p95: 5000}
  num_turns: {dist: uniform, low: 3, high: 8}
  action_tokens: {dist: lognormal, mean: 400, p95: 1200}
  tool_tokens: {dist: lognormal, mean: 800, p95: 2400}
  tool_wait_s: {dist: lognormal, mean: 2.0, p95: 6.0}
  max_context: 32768
cache: {reuse: auto, kv_during_tool_wait: retain}
"""


def _one(write_yaml, P: int, A: int, n: int = 1, **kw):
    w = load_workload(write_yaml(ONE_REQUEST.format(P=P, A=A, n=n)))
    return simulate(w, H100, SimConfig(steps=1, chunk_conversations=max(n, 1), **AS_PROFILED, **kw))


# ------------------------------------------------------------------------------ decode prices


def test_batch_one_decode_is_the_speculative_pricers_time_per_token(write_yaml):
    """One request of ``P = 1,000`` prompt and ``A = 2,000`` sampled tokens, EAGLE-3 (k = 3, a = 0.7).

    Step 1 prefills the prompt (the target's own step: no sequence decodes yet); tokens 2..A are
    priced at :meth:`SpeculativePricer.decode` of batch 1 at contexts ``P .. P + A - 2``, so the
    request ends at ``prefill(P) + sum(decode)`` (to rounding: the run is summed in closed form).
    The decode throughput over the plain run's is then the pricer's speed-up at the mean context,
    within 1 % (the speed-up varies slowly along the run: 1.3x at 1,000 positions, where the test
    engine's 2 ms host time a step is paid by the verify step and by each of the 3 draft steps).
    """
    P, A = 1000, 2000
    spec = load_model_spec("llama-3.1-8b")
    pricer = SpeculativePricer.build(spec, H100, RooflineInputs(), EAGLE3)
    contexts = np.arange(P, P + A - 1)
    decode = float(np.sum(pricer.decode(1, contexts).step_time_s))
    prefill = float(prefill_step(spec, H100, RooflineInputs(), P).step_time_s)
    r = _one(write_yaml, P, A, speculative=EAGLE3)
    assert math.isclose(r.conversations["end_s"][0], prefill + decode, rel_tol=1e-9)
    plain = _one(write_yaml, P, A)
    sim_speedup = (plain.conversations["end_s"][0] - prefill) / (r.conversations["end_s"][0] - prefill)
    mid = P + (A - 2) / 2
    ref = float(pricer.target.decode(1, mid).step_time_s) / float(pricer.decode(1, mid).step_time_s)
    assert sim_speedup == pytest.approx(ref, rel=0.01)
    assert 1.25 < sim_speedup < 1.45


def test_acceptance_zero_is_never_faster(write_yaml):
    """At acceptance 0 a verify step yields one token (``E = 1``) and costs a verify step of
    ``k + 1`` positions plus the drafts: every decode step costs at least a plain one, at batch 1
    and at batch 64, so no request ends earlier and the step is not shorter."""
    zero = SpecInputs(method="eagle3", num_speculative_tokens=3, acceptance_rate=0.0)
    for n in (1, 64):
        plain = _one(write_yaml, 512, 1024, n=n)
        spec0 = _one(write_yaml, 512, 1024, n=n, speculative=zero)
        assert spec0.setup["spec_tokens_per_step"] == 1.0
        assert (spec0.conversations["end_s"] >= plain.conversations["end_s"]).all()
        assert spec0.summary["simulated_s"] > plain.summary["simulated_s"]


def test_the_drafts_host_time_holds_the_small_batch_speedup_down(write_yaml):
    """The verify step forwards ``k + 1`` positions per sequence and each of the ``k`` drafts is a
    step of its own. At batch 1 the test engine's 2 ms host time a step, paid by the verify step and
    by each of the 3 drafts, holds the rollout speed-up to about 1.33x (``E = 2.53``); at batch 64
    the GPU work outweighs it (about 1.46x) and at 256 it is about 1.47x, every one below ``E``.
    Where the verify step is compute-bound a larger batch never raises the speed-up
    (tests/test_features.py::test_speedup_shrinks_with_batch_once_verify_is_compute_bound).
    Measured as plain over speculative rollout time (the prefill, the same in both, included)."""
    speedups = []
    for n in (1, 64, 256):
        plain = _one(write_yaml, 512, 1024, n=n)
        spec = _one(write_yaml, 512, 1024, n=n, speculative=EAGLE3)
        speedups.append(plain.updates[0]["start_s"] / spec.updates[0]["start_s"])
    assert 1.0 < speedups[0] < speedups[1] and max(speedups) < EAGLE3.tokens_per_step


def test_acceptance_follows_the_policy_version_of_the_weights(write_yaml):
    """With an acceptance schedule falling from 0.9 at step 0 to 0.1 at step 2, the second
    update's rollout (weights of version 1: a = 0.5) is slower than the first (a = 0.9) though
    the work is the same; at a constant 0.9 the two take the same time (to 1e-9)."""
    w = load_workload(write_yaml(ONE_REQUEST.format(P=512, A=1024, n=16)))
    schedule = ((0.0, 0.9), (2.0, 0.1))
    fast = SpecInputs(method="eagle3", num_speculative_tokens=3, acceptance_rate=0.9)
    drift = simulate(w, H100, SimConfig(steps=3, speculative=fast, acceptance_by_step=schedule, **AS_PROFILED))
    flat = simulate(w, H100, SimConfig(steps=3, speculative=fast, **AS_PROFILED))

    def rollouts(r):
        u = r.updates
        return [u[0]["start_s"]] + [u[i]["start_s"] - (u[i - 1]["start_s"] + u[i - 1]["train_s"] + r.setup["weight_sync_s"])
                                    for i in (1, 2)]

    d, f = rollouts(drift), rollouts(flat)
    assert d[0] == pytest.approx(f[0], rel=1e-9) and f[1] == pytest.approx(f[0], rel=1e-6)
    assert d[1] > 1.2 * d[0] and d[2] > 1.2 * d[1]  # not float noise: the pushes reach the drafter (sync mode too)


# ------------------------------------------------------------------------------ KV


def test_kv_capacity_equals_the_plans_with_a_drafter():
    """The drafter's weights and one layer of KV per position share the budget
    (:func:`capplan.speculative.spec_memory`): the simulator's replica holds the plan's positions."""
    from capplan.plan import PlanInputs, plan_workload

    w = load_workload("reasoning-rl-olmo3-7b")
    spec = load_model_spec("olmo-3-7b")
    plan = plan_workload(w, PlanInputs(hardware=H100, model=spec, inference_gpus=8, trainer_gpus=8, speculative=EAGLE3),
                         conversations=500).as_dict()
    r = simulate(w, H100, SimConfig(inference_replicas=8, trainer_gpus=8, steps=1, speculative=EAGLE3, chunk_conversations=256))
    assert r.setup["kv_capacity_tokens"] == plan["kv"]["kv_capacity_tokens"] == plan["speculative"]["kv_capacity_tokens"]
    assert r.setup["kv_capacity_tokens_without_spec"] == plan["speculative"]["kv_capacity_tokens_without"]
    assert r.setup["kv_capacity_tokens"] < r.setup["kv_capacity_tokens_without_spec"]


# ------------------------------------------------------------------------------ the CPU KV tier


def test_cpu_tier_loads_evicted_prefixes_instead_of_recomputing_them(write_yaml):
    """Long multi-turn conversations on a replica whose KV is short evict retained prefixes; with
    a 64 GiB tier the next turns load them back. Fewer positions are recomputed, each load is
    charged ``positions x bytes per position / (host link x efficiency)`` (the hardware profile's
    64 GB/s PCIe Gen5 link, :func:`capplan.offload.kv_load_s`), and the run is not slower."""
    from capplan.benchmark import server_for
    from capplan.offload import kv_load_s

    w = load_workload(write_yaml(AGENTIC))
    base = dict(inference_replicas=1, steps=2, chunk_conversations=128, gpu_mem_util=0.4, **AS_PROFILED)
    plain = simulate(w, H100, SimConfig(**base))
    tier = simulate(w, H100, SimConfig(**base, kv_offload_gib=64.0))
    assert plain.summary["retained_kv_evictions"] > 0
    s = tier.summary
    assert s["kv_offload_loads"] > 0 and s["kv_offload_loaded_tokens"] > 0
    assert s["recompute_tokens"] < plain.summary["recompute_tokens"]
    per_token = kv_load_s(server_for(load_model_spec("llama-3.1-8b"), H100), 1.0)
    assert s["kv_offload_load_s"] == pytest.approx(s["kv_offload_loaded_tokens"] * per_token, rel=1e-9)
    assert s["kv_offload_loaded_gib_per_gpu"] == pytest.approx(s["kv_offload_loaded_tokens"] * 131072 / 2**30, rel=1e-12)
    assert tier.setup["kv_offload_used"] and tier.setup["host_link_bandwidth_gbps"] == 64.0
    assert s["simulated_s"] <= plain.summary["simulated_s"]
    assert "kv_offload_loads" not in plain.summary  # the plain run's keys are unchanged


# ------------------------------------------------------------------------------ the plan


def test_agreement_with_the_plan_for_a_speculative_rl_step(write_yaml):
    """The steady workload of ``tests/test_simulate.py`` (64 identical requests, one replica,
    sync) with EAGLE-3: the plan prices decode per output token at the batch of 64, the
    simulator token by token. Stated tolerance as for plain decoding: 1 % on the rollout time
    and on the step time."""
    from capplan.plan import PlanInputs, plan_workload

    w = load_workload(write_yaml(STEADY))
    spec = load_model_spec("llama-3.1-8b")
    plan = plan_workload(w, PlanInputs(hardware=H100, model=spec, inference_gpus=1, trainer_gpus=4, speculative=EAGLE3))
    r = simulate(w, H100, SimConfig(steps=3, trainer_gpus=4, chunk_conversations=64, speculative=EAGLE3))
    assert math.isclose(r.updates[0]["start_s"], plan.rollout_time_s, rel_tol=0.01)
    period = r.updates[2]["start_s"] - r.updates[1]["start_s"]
    assert math.isclose(period, plan.step_time_s, rel_tol=0.01)


# ------------------------------------------------------------------------------ the command line


def test_cli_simulates_the_flags_and_reports_them(runner, write_yaml):
    """``--spec-*`` and ``--kv-offload-gib`` run (exit 0) and show in the JSON: the setting in
    ``config``, the drafter's figures in ``setup``, the tier's with the summary figures."""
    import json

    w = write_yaml(ONE_REQUEST.format(P=512, A=256, n=4))
    res = runner.invoke(app, ["simulate", str(w), "-H", "h100-sxm", "--steps", "1", "--spec-method", "eagle3", "--spec-tokens", "3",
                              "--acceptance-rate", "0.7", "--kv-offload-gib", "8", "-f", "json"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    assert d["config"]["speculative"]["method"] == "eagle3" and d["config"]["kv_offload_gib"] == 8.0
    assert d["setup"]["spec_tokens_per_step"] == pytest.approx(2.533)
    assert d["kv_offload_loads"] == 0  # one turn: nothing to load back
