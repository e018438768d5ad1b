"""TensorRT-LLM's ``guaranteed_no_evict`` admission: a request reserves its prompt and whole output.

The engine-profile term ``time.capacity_scheduler_policy`` (TensorRT-LLM's name) sets how many
requests the KV cache holds at once in the closed form, the queueing model and the serving
simulator; vLLM and SGLang admit on what a request holds now (``max_utilization``).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from capplan import benchmark as B
from capplan.engine import default_engine, load_engine
from capplan.errors import CapplanError
from capplan.hardware import load_hardware
from capplan.modelspec import load_model_spec
from capplan.sim.serving import replay_mix, serving_engine, simulate_replica

H100 = load_hardware("h100-sxm")
LLAMA = load_model_spec("llama-3.1-8b")


@pytest.fixture(scope="module")
def server() -> B.Server:
    return B.server_for(LLAMA, H100, engine=default_engine())


def no_evict(server: B.Server, kv_tokens: int | None = None) -> B.Server:
    changes: dict = {"capacity_scheduler_policy": "guaranteed_no_evict"}
    if kv_tokens is not None:
        changes["kv_capacity_tokens"] = kv_tokens
    return replace(server, **changes)


def test_bundled_profiles_name_their_admission_and_its_source():
    """trtllm reserves (trtllm-bench's and the LLM API's default, cited); vLLM and SGLang do not."""
    trt = load_engine("trtllm")
    assert trt.time.capacity_scheduler_policy == "guaranteed_no_evict"
    assert "throughput.py" in trt.sources["time.capacity_scheduler_policy"]
    for name in ("vllm-0.19", "vllm-latest", "sglang"):
        assert load_engine(name).time.capacity_scheduler_policy == "max_utilization"
    assert B.server_for(LLAMA, H100, engine=trt).reserves_output


def test_an_unknown_policy_is_refused_naming_the_field(tmp_path):
    text = load_engine("trtllm").model_dump_json()
    bad = tmp_path / "bad.json"
    bad.write_text(text.replace('"guaranteed_no_evict"', '"static_batch_please"'))
    with pytest.raises(CapplanError, match="capacity_scheduler_policy"):
        load_engine(bad)


def test_offline_batch_holds_the_whole_output_when_reserved(server):
    """KV 100,000 positions, 1,000-token prompts and outputs: on average a request holds its prompt
    and half its output, 100,000 / 1,500 = 66.7 requests; reserved, 100,000 / 2,000 = 50."""
    small = replace(server, kv_capacity_tokens=100_000, max_num_seqs=1024)
    assert B.max_concurrency(small, 1000, 1000) == (pytest.approx(100_000 / 1500), "kv capacity")
    assert B.max_concurrency(no_evict(small), 1000, 1000) == (pytest.approx(50.0), "kv capacity")
    assert B.offline(no_evict(small), 1000, 1000).output_tokens_per_s < B.offline(small, 1000, 1000).output_tokens_per_s


def test_queueing_batch_limit_counts_the_reservation(server):
    """Fixed 1,000/1,000 requests: the limit is 0.99 x KV over 1,000 + 1,000 reserved positions,
    where admission on what is held gives 0.99 x KV over 1,000 + 999 / 2."""
    small = replace(server, kv_capacity_tokens=100_000, max_num_seqs=1024)
    mix = B._Mix(B.RequestMix.fixed(1000, 1000))
    assert B._batch_limit(no_evict(small), mix) == (pytest.approx(99_000 / 2000), "kv capacity")
    assert B._batch_limit(small, mix) == (pytest.approx(99_000 / 1499.5), "kv capacity")


def test_simulator_never_preempts_and_keeps_the_reservation(server):
    """Arrivals far beyond what the KV holds: admission on what is held preempts and recomputes;
    reserving the whole output never does, and never runs more than KV / (prompt + output)."""
    n, kv = 3000, 60_000
    arrivals = np.cumsum(np.full(n, 1 / 80.0))
    prompt, output = np.full(n, 2000), np.full(n, 800)
    held = simulate_replica(serving_engine(replace(server, kv_capacity_tokens=kv)), arrivals, prompt, output, np.zeros(n, np.int64))
    reserved = simulate_replica(serving_engine(no_evict(server, kv)), arrivals, prompt, output, np.zeros(n, np.int64))
    assert held.preemptions > 0
    assert reserved.preemptions == 0 and reserved.recomputed_tokens == 0
    assert np.all(reserved.finish_s > 0)
    mean_batch = reserved.sequence_s / reserved.busy_s
    assert mean_batch <= kv * (1 - B.KV_WATERMARK) / 2800 + 1e-9
    assert mean_batch > 0.8 * kv * (1 - B.KV_WATERMARK) / 2800  # the reservation, not something else, binds


def test_closed_form_and_simulator_agree_on_the_reserved_batch(server):
    """Every request queued at once (2,000/800 tokens, KV 60,000): the closed form's offline batch
    and the simulator's mean batch agree within 10% with the whole output reserved."""
    kv = 60_000
    s = no_evict(server, kv)
    n = 2000
    run = simulate_replica(serving_engine(s), np.zeros(n), np.full(n, 2000), np.full(n, 800), np.zeros(n, np.int64))
    assert run.sequence_s / run.busy_s == pytest.approx(B.offline(s, 2000, 800).decode_batch, rel=0.10)


def test_rl_rollouts_say_where_they_depart_from_the_profile():
    """The RL rollout scheduler admits and mixes as vLLM V1: with the trtllm profile (reserves the
    output, prefills whole prompts) the set-up lists both caveats and ``capplan simulate`` warns
    with each; with a vLLM profile there is no caveat and no ``caveats`` key."""
    from capplan.sim.setup import rollout_caveats

    trt = load_engine("trtllm")
    caveats = rollout_caveats(trt, trt.time_on("h100-sxm"))
    assert len(caveats) == 2
    assert "guaranteed_no_evict" in caveats[0] and "prefills whole prompts" in caveats[1]
    vllm = load_engine("vllm-0.19")
    assert rollout_caveats(vllm, vllm.time_on("h100-sxm")) == []


def test_simulate_warns_with_the_caveats():
    from typer.testing import CliRunner

    from capplan.cli.app import app

    out = CliRunner().invoke(app, ["simulate", "reasoning-rl-olmo3-7b", "-H", "h100-sxm", "--engine", "trtllm", "--steps", "1",
                                   "--format", "json"])
    assert out.exit_code == 0, out.output
    assert "Warning: engine profile trtllm reserves a request's whole output" in out.output


@pytest.mark.parametrize("utilisation", [0.6, 0.85])
def test_queueing_model_matches_the_simulator_with_reservations(utilisation):
    """TensorRT-LLM's profile (whole prompts, reservations) on a KV-limited H100 (25% of memory,
    chat-serving's lengths): the queueing model's p50 and p99 TTFT within 15% of the simulator's,
    and the same mean batch within 5% (measured when written: p99 119 vs 136 ms at 60%, 136 vs
    153 ms at 85%)."""
    from capplan.plan.serving import serving_mix
    from capplan.workload import load_workload

    s = B.server_for(LLAMA, H100, engine=load_engine("trtllm"), gpu_memory_utilization=0.25)
    assert s.reserves_output
    mix = serving_mix(load_workload("chat-serving"), 4000)
    cap = B.serving_capacity(s, mix)
    assert cap[1] == "kv capacity"
    rate = utilisation * cap[0]
    q = B.queueing_latency(s, rate, mix, 1.0, (50.0, 99.0), cap)
    n = 30_000
    run, _, _ = replay_mix(s, mix, rate, n, np.random.default_rng(int(utilisation * 100)))
    ttft = run.ttft_s[n // 10:]
    for p in (50, 99):
        assert q.ttft_s.at(p) == pytest.approx(float(np.percentile(ttft, p)), rel=0.15), p
    assert q.decode_batch == pytest.approx(run.sequence_s / run.busy_s, rel=0.05)
    assert run.preemptions == 0


def test_scheduler_policy_flag_sets_the_admission():
    """``--scheduler-policy`` (trtllm-bench's flag) overrides the profile's admission, names itself
    in the profile's calibration, and a value it does not know is a one-line error."""
    from typer.testing import CliRunner

    from capplan.cli.app import app
    from capplan.errors import InputError

    trt = load_engine("trtllm")
    mu = trt.with_settings(capacity_scheduler_policy="max_utilization")
    assert mu.time.capacity_scheduler_policy == "max_utilization" and "--scheduler-policy max_utilization" in mu.calibration
    assert trt.with_settings(capacity_scheduler_policy="guaranteed_no_evict") is trt
    with pytest.raises(InputError, match="--scheduler-policy fifo: one of max_utilization, guaranteed_no_evict"):
        trt.with_settings(capacity_scheduler_policy="fifo")
    runner = CliRunner()
    out = runner.invoke(app, ["plan", "chat-serving", "-H", "h100-sxm", "--scheduler-policy", "guaranteed_no_evict",
                              "--format", "json"])
    assert out.exit_code == 0, out.output
    assert "--scheduler-policy guaranteed_no_evict" in out.output
    bad = runner.invoke(app, ["plan", "chat-serving", "-H", "h100-sxm", "--scheduler-policy", "fifo"])
    assert bad.exit_code != 0 and "--scheduler-policy fifo: one of" in bad.output and "Traceback" not in bad.output
