"""The discrete-event simulator: step prices, hand-derivable timelines, conservation, determinism,
batching, staleness, agreement with the analytic plan, outputs and the command line."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from capplan.cli.app import app
from capplan.hardware import load_hardware
from capplan.modelspec import load_model_spec
from capplan.roofline import RooflineInputs, decode_step, engine_step, prefill_step
from capplan.sim.stepcost import run_time, steps_within
from capplan.sim.stepcost import step_coefficients
from capplan.sim import SUMMARY_KEYS, SimConfig, simulate, trajectory_records, write_trajectories
from capplan.trainer import trainer_mfu, trainer_step_time_s, training_flops
from capplan.workload import load_workload

pytestmark = pytest.mark.usefixtures("assumed_engine")


H100 = load_hardware("h100-sxm")
SMALL = 256  # conversations drawn per chunk in tests (keeps set-up fast)
AS_PROFILED = {"rollout_slowdown": 1.0, "step_overhead_s": 0.0}
"""The RL framework terms off: engine steps as the profile prices them, no per-update overhead
(the timelines by hand check the event arithmetic, not the fitted terms)."""

ONE_REQUEST = """
version: 1
name: one-request
model: llama-3.1-8b
method: outcome-rl
volume: {{prompts_per_step: 1, samples_per_prompt: 1}}
conversation:
  prompt_tokens: {P}
  turns:
    - {{action_tokens: {A}}}
"""

TWO_TURNS = """
version: 1
name: two-turns
model: llama-3.1-8b
method: multi-turn-rl
volume: {{prompts_per_step: 1, samples_per_prompt: 1}}
conversation:
  prompt_tokens: 100
  turns:
    - {{action_tokens: 5, tool_tokens: 10, tool_wait_s: 2.0}}
    - {{action_tokens: 3}}
cache: {{reuse: {reuse}, kv_during_tool_wait: {kv}}}
"""

AGENTIC = """
version: 1
name: small-agentic
model: llama-3.1-8b
method: multi-turn-rl
volume: {prompts_per_step: 4, samples_per_prompt: 4}
conversation:
  prompt_tokens: {dist: lognormal, mean: 600, p95: 1500}
  num_turns: {dist: uniform, low: 1, high: 5}
  action_tokens: {dist: lognormal, mean: 200, p95: 700}
  tool_tokens: {dist: lognormal, mean: 400, p95: 1200}
  tool_wait_s: {dist: lognormal, mean: 2.0, p95: 6.0}
  max_context: 8192
cache: {reuse: auto, kv_during_tool_wait: retain}
training: {filtered_group_fraction: 0.25, drop_truncated: true}
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


@pytest.fixture
def agentic(write_yaml):
    return load_workload(write_yaml(AGENTIC))


# ------------------------------------------------------------------------------ step prices


@pytest.mark.parametrize(
    "model,tp,weight_dtype",
    [
        ("llama-3.1-8b", 1, "bf16"),  # dense GQA
        ("llama-3.1-70b", 4, "fp8"),  # tensor parallel: all-reduces, logit gather
        ("qwen3-30b-a3b", 2, "bf16"),  # MoE: expected experts touched, 1 - q^T
        ("olmo-3-7b", 1, "bf16"),  # sliding-window layers
        ("gemma-2-9b", 2, "bf16"),  # sliding window and tensor parallel
    ],
)
def test_step_coefficients_reproduce_engine_step(model, tp, weight_dtype):
    """The probed affine coefficients give engine_step's time on 200 random step mixes (rel. 1e-9)."""
    spec = load_model_spec(model)
    inp = RooflineInputs(tp=tp, weight_dtype=weight_dtype)
    c = step_coefficients(spec, H100, inp)
    rng = np.random.default_rng(7)
    new = rng.integers(1, 9000, 200).astype(float)
    logits = np.minimum(new, rng.integers(0, 600, 200))
    pairs = new * rng.integers(1, 40000, 200)
    pairs_w = np.minimum(pairs, new * (spec.sliding_window.window_tokens if spec.sliding_window else 1e9))
    read = rng.integers(0, 3_000_000, 200).astype(float)
    read_w = np.minimum(read, rng.integers(0, 500_000, 200))
    seqs = rng.integers(1, 600, 200).astype(float)
    ref = engine_step(
        spec, H100, inp, new_tokens=new, logits_tokens=logits, attention_pairs=pairs, kv_read_tokens=read,
        sequences=seqs, window_attention_pairs=pairs_w, window_kv_read_tokens=read_w,
    ).step_time_s
    got = [c.step_time(*x) for x in zip(new, logits, pairs, pairs_w, read, read_w, seqs)]
    np.testing.assert_allclose(got, ref, rtol=1e-9)


@pytest.mark.parametrize("seed", range(5))
def test_run_time_is_the_sum_of_its_steps_and_steps_within_inverts_it(seed):
    """``run_time`` = sum of ``max(c0 + cg i, m0 + mg i) + fixed``; lines cross inside the run."""
    rng = np.random.default_rng(seed)
    c0, m0 = rng.uniform(1e-3, 2e-2, 2)
    cg, mg = rng.uniform(0, 1e-5, 2)
    line = (float(c0), float(cg), float(m0), float(mg), 0.002)
    k = int(rng.integers(1, 5000))
    steps = np.maximum(c0 + cg * np.arange(k), m0 + mg * np.arange(k)) + 0.002
    assert math.isclose(run_time(line, k), float(steps.sum()), rel_tol=1e-12)
    cum = np.concatenate([[0.0], np.cumsum(steps)])
    for dt in rng.uniform(0, cum[-1] * 1.1, 50):
        j = steps_within(line, k, float(dt))
        assert j == min(k, int(np.searchsorted(cum, dt - 1e-12 * cum[-1]))) or abs(cum[j] - dt) < 1e-9 * cum[-1]
        assert j == k or run_time(line, j) >= dt
        assert j == 0 or run_time(line, j - 1) < dt


# ------------------------------------------------------------------------------ timelines by hand


@pytest.mark.parametrize(
    "model,tp,P,A",
    [
        ("llama-3.1-8b", 1, 100, 5),
        ("olmo-3-7b", 1, 4000, 300),  # decode crosses the 4,096-position sliding window
        ("qwen3-30b-a3b", 2, 700, 40),  # MoE, tensor parallel
    ],
)
def test_one_request_timeline_by_hand(write_yaml, model, tp, P, A):
    """One replica, one request of ``P`` prompt and ``A`` sampled tokens, one update.

    Step 1 prefills the prompt and samples token 1 (``prefill_step(P)``); steps 2..A decode
    tokens 2..A at contexts ``P .. P + A - 2`` (``decode_step(1, c)``); then the trainer runs
    ``training_flops([P + A]) / (gpus x peak x MFU)``. So ``T = prefill + sum(decode) + train``,
    ``A`` engine steps and ``P + A - 1`` forwarded positions (the last sampled token is never
    forwarded).
    """
    w = load_workload(write_yaml(ONE_REQUEST.format(P=P, A=A)))
    spec = load_model_spec(model)
    inp = RooflineInputs(tp=tp)
    r = simulate(w, H100, SimConfig(steps=1, tp=tp, chunk_conversations=1, **AS_PROFILED), model=model)
    prefill = float(prefill_step(spec, H100, inp, P).step_time_s)
    decode = float(np.sum(decode_step(spec, H100, inp, 1, np.arange(P, P + A - 1)).step_time_s))
    train = trainer_step_time_s(training_flops(spec, np.array([P + A])), H100, r.setup["trainer_gpus"], trainer_mfu(spec, H100))
    assert math.isclose(r.conversations["end_s"][0], prefill + decode, rel_tol=1e-12)
    assert math.isclose(r.summary["simulated_s"], prefill + decode + train, rel_tol=1e-12)
    assert r.summary["engine_steps"] == A
    assert r.summary["engine_forwarded_tokens"] == P + A - 1


@pytest.mark.parametrize(
    "reuse,kv,hit",
    [("auto", "retain", 104), ("auto", "evict", 0), ("none", "retain", 0)],
)
def test_two_turns_with_a_tool_wait_by_hand(write_yaml, reuse, kv, hit):
    """100 prompt tokens, 5 actions, a 2 s tool returning 10 tokens, 3 actions.

    Turn 1: ``prefill(100)`` then decode at contexts 100..103. The tool waits 2 s. Turn 2's input
    is 100 + 5 + 10 = 115 positions; with reuse and retained KV the cached prefix is what turn 1
    computed, 100 + 5 - 1 = 104, so it prefills 11 positions after 104 cached; otherwise all 115.
    Then decode at contexts 115 and 116. The record has 118 positions.
    """
    w = load_workload(write_yaml(TWO_TURNS.format(reuse=reuse, kv=kv)))
    spec = load_model_spec("llama-3.1-8b")
    inp = RooflineInputs()
    r = simulate(w, H100, SimConfig(steps=1, chunk_conversations=1, **AS_PROFILED))

    def dec(cs: list[int]) -> float:
        return float(np.sum(decode_step(spec, H100, inp, 1, np.array(cs)).step_time_s))

    t_end = (
        float(prefill_step(spec, H100, inp, 100).step_time_s) + dec([100, 101, 102, 103]) + 2.0
        + float(prefill_step(spec, H100, inp, 115 - hit, cached=hit).step_time_s) + dec([115, 116])
    )
    assert math.isclose(r.conversations["end_s"][0], t_end, rel_tol=1e-12)
    led = r.conversations["ledger"]
    assert int(led["cache_hit"][0].sum()) == hit
    assert r.summary["engine_forwarded_tokens"] == 100 + 4 + (115 - hit) + 2


# ------------------------------------------------------------------------------ conservation


@pytest.mark.parametrize(
    "hardware,kw",
    [
        ("l4", dict(mode="async", max_staleness=0, max_inflight_groups=8)),  # stale rejections, preemption
        ("l4", dict(mode="async", max_staleness=1)),
        ("h100-sxm", dict(mode="sync")),
        ("l4", dict(mode="sync", sampling="oversample", oversample=2.0)),  # surplus rejections
        ("l4", dict(mode="async", sampling="oversample", max_staleness=1, inflight_updates=True)),
        ("l4", dict(mode="sync", static_batching=True, env_workers=2)),
    ],
)
def test_conservation_of_tasks_and_tokens(agentic, hardware, kw):
    """Every started task ends exactly once: accepted, rejected (stale, filtered, surplus) or
    unfinished at the horizon; the engine forwards exactly the ledger's positions plus recomputes.

    Per completed conversation the simulator's own counts (prefill chunks minus recomputed
    positions, decode steps) equal :func:`capplan.ledger.count_positions` on the same draw; over
    every started conversation the positions forwarded step by step equal prefill + decode.
    """
    r = simulate(agentic, load_hardware(hardware), SimConfig(steps=6, chunk_conversations=SMALL, **kw))
    s, c = r.summary, r.conversations
    ends = (
        s["accepted_trajectories"] + s["rejected_stale_trajectories"] + s["rejected_filtered_trajectories"]
        + s["rejected_surplus_trajectories"] + s["unfinished_trajectories"]
    )
    assert ends == s["started_trajectories"] == int(c["started"].sum())
    assert s["completed_trajectories"] == ends - s["unfinished_trajectories"] + s["pending_trajectories"]
    outcome = c["outcome"]
    assert not (outcome[~c["started"]]).any()  # nothing that never started has an outcome
    assert (c["completed"][outcome > 0]).all()  # everything with an outcome completed
    if kw.get("sampling") != "oversample":
        assert s["accepted_trajectories"] == 6 * 16  # active sampling: every batch full
    done = c["completed"]
    led = c["ledger"]
    np.testing.assert_array_equal(c["prefill_forwarded"][done], led["prefill_forwarded"][done].sum(1))
    np.testing.assert_array_equal(c["decode_forwarded"][done], led["decode_forwarded"][done].sum(1))
    started = c["started"]
    total = c["prefill_forwarded"][started].sum() + c["recompute_forwarded"][started].sum() + c["decode_forwarded"][started].sum()
    assert s["engine_forwarded_tokens"] == total
    assert s["recompute_tokens"] == c["recompute_forwarded"].sum()


def test_pressure_case_exercises_preemption_and_eviction(agentic):
    """The L4 case of the conservation test really runs out of KV (so recompute is covered)."""
    r = simulate(agentic, load_hardware("l4"), SimConfig(steps=6, chunk_conversations=SMALL, mode="async",
                                                         max_staleness=0, max_inflight_groups=8))
    assert r.summary["preemptions"] > 0 and r.summary["retained_kv_evictions"] > 0
    assert r.summary["rejected_stale_trajectories"] > 0


# ------------------------------------------------------------------------------ determinism


def test_same_seed_same_result_bit_for_bit(agentic):
    cfg = SimConfig(steps=4, chunk_conversations=SMALL, mode="async", max_staleness=1)
    a = json.dumps(simulate(agentic, load_hardware("l4"), cfg).as_dict())
    b = json.dumps(simulate(agentic, load_hardware("l4"), cfg).as_dict())
    assert a == b
    c = json.dumps(simulate(agentic, load_hardware("l4"), cfg.replace(seed=1)).as_dict())
    assert c != a


# ------------------------------------------------------------------------------ batching and modes


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_static_batching_never_beats_continuous(agentic, seed):
    """Same tasks, same hardware: a batch admitted only when the last one has finished idles its
    slots on the longest member, so it finishes the same updates no sooner."""
    cont = simulate(agentic, H100, SimConfig(steps=3, seed=seed, chunk_conversations=SMALL))
    stat = simulate(agentic, H100, SimConfig(steps=3, seed=seed, chunk_conversations=SMALL, static_batching=True))
    assert stat.summary["simulated_s"] >= cont.summary["simulated_s"]
    assert stat.summary["accepted_trajectories_per_s"] <= cont.summary["accepted_trajectories_per_s"]


def test_sync_generation_pauses_while_training(agentic):
    """Sync: policy lag is always 0 and no replica runs while the trainer trains or pushes weights."""
    r = simulate(agentic, H100, SimConfig(steps=4, chunk_conversations=SMALL))
    assert r.summary["max_policy_lag"] == 0
    tl = r.timeline
    busy = [b for b, st in zip(tl["running_batch"], tl["trainer_state"]) if st != 0]
    assert busy and max(busy) == 0


def test_a_run_too_short_for_a_steady_window_says_so(agentic):
    """Async with K = 1 needs 2 (K + 1) = 4 warm-up updates and two more for a window: 2 updates
    have none (their "steady" step averaged two batches dispatched together), 6 have one."""
    short = simulate(agentic, H100, SimConfig(steps=2, chunk_conversations=SMALL, mode="async", max_staleness=1))
    assert short.summary["steady_window"] is False
    enough = simulate(agentic, H100, SimConfig(steps=6, chunk_conversations=SMALL, mode="async", max_staleness=1))
    assert enough.summary["steady_window"] is True


@pytest.mark.parametrize("K", [0, 1, 2])
def test_async_accepts_nothing_staler_than_the_bound(agentic, K):
    r = simulate(agentic, load_hardware("l4"), SimConfig(steps=5, chunk_conversations=SMALL, mode="async",
                                                         max_staleness=K, max_inflight_groups=8))
    acc = r.conversations["outcome"] == 1
    lag = r.conversations["trainer_version"][acc] - r.conversations["policy_version"][acc]
    assert lag.max() <= K and r.summary["max_policy_lag"] <= K
    stale = r.conversations["outcome"] == 2
    assert (r.conversations["trainer_version"][stale] - r.conversations["policy_version"][stale] > K).all()


def test_tighter_bound_separates_completed_from_accepted(agentic):
    """With production fixed (a constant in-flight cap), tightening K rejects more."""
    runs = [
        simulate(agentic, load_hardware("l4"), SimConfig(steps=5, chunk_conversations=SMALL, mode="async",
                                                         max_staleness=K, max_inflight_groups=8))
        for K in (0, 2)
    ]
    assert runs[0].summary["rejected_stale_fraction"] > runs[1].summary["rejected_stale_fraction"]


def test_active_sampling_keeps_the_batch_full_and_oversampling_does_not(agentic):
    """Active sampling trains on exactly prompts x samples trajectories per update; fixed
    oversampling by 1 (no oversampling) trains on what survives the 25% filter."""
    act = simulate(agentic, H100, SimConfig(steps=6, chunk_conversations=SMALL))
    ovr = simulate(agentic, H100, SimConfig(steps=6, chunk_conversations=SMALL, sampling="oversample", oversample=1.0))
    assert [u["accepted_trajectories"] for u in act.updates] == [16] * 6
    assert min(u["accepted_trajectories"] for u in ovr.updates) < 16
    assert ovr.summary["rejected_filtered_trajectories"] > 0


# ------------------------------------------------------------------------------ the analytic plan


def test_agreement_with_the_analytic_plan_on_a_steady_workload(write_yaml):
    """No tail: 64 identical requests (512 prompt, 1,024 sampled tokens) on one replica, sync.

    The plan prices one step as rollout (prefill GPU-s + decode at batch 64) + weight push +
    training. The simulator plays the same step event by event (chunked prefill under the
    8,192-token budget, then 1,023 decode steps at batch 64). Stated tolerance: 1% on the rollout
    time and on the step time.
    """
    from capplan.plan import PlanInputs, plan_workload

    w = load_workload(write_yaml(STEADY))
    spec = load_model_spec("llama-3.1-8b")
    plan = plan_workload(w, PlanInputs(hardware=H100, model=spec, inference_gpus=1, trainer_gpus=4))
    r = simulate(w, H100, SimConfig(steps=3, trainer_gpus=4, chunk_conversations=64))
    first_rollout = r.updates[0]["start_s"]
    assert math.isclose(first_rollout, plan.rollout_time_s, rel_tol=0.01)
    period = r.updates[2]["start_s"] - r.updates[1]["start_s"]
    assert math.isclose(period, plan.step_time_s, rel_tol=0.01)


# ------------------------------------------------------------------------------ outputs


def test_json_contract_has_the_documented_figures(agentic):
    d = simulate(agentic, H100, SimConfig(steps=2, chunk_conversations=SMALL)).as_dict()
    for key in (
        "completed_trajectories_per_s", "accepted_trajectories_per_s", "completed_tokens_per_s",
        "accepted_tokens_per_s", "trainer_idle_fraction", "rejected_stale_fraction", "preemptions",
        "mean_policy_lag", "max_policy_lag", *SUMMARY_KEYS, "queues", "timeline", "update_log",
    ):
        assert key in d, key
    assert d["updates"] == 2 and len(d["update_log"]) == 2
    n = len(d["timeline"]["t_s"])
    assert n > 10 and all(len(v) == n for v in d["timeline"].values())
    json.dumps(d, allow_nan=False)


def test_trajectories_reconcile_against_their_workload(write_yaml, tmp_path):
    """The JSONL passes every check of ``capplan ledger reconcile`` and matches the plan."""
    from capplan.reconcile import reconcile

    w = load_workload(write_yaml(TWO_TURNS.format(reuse="auto", kv="retain")))
    r = simulate(w, H100, SimConfig(steps=3, chunk_conversations=4))
    path = write_trajectories(r, w, tmp_path / "t.jsonl")
    rec = reconcile(path, w, max_staleness=0)
    assert rec.ok and rec.records == 3
    first = next(trajectory_records(r, w))
    assert first["cached_tokens"] == [0, 104] and first["prefill_tokens"] == [100, 11]
    with pytest.raises(Exception, match="exists"):
        write_trajectories(r, w, path)


# ------------------------------------------------------------------------------ command line


def test_cli_summary_json_and_output(runner, write_yaml, tmp_path):
    w = write_yaml(TWO_TURNS.format(reuse="auto", kv="retain"))
    out = tmp_path / "sim.json"
    res = runner.invoke(app, ["simulate", str(w), "-H", "h100-sxm", "--steps", "2", "--output", str(out)])
    assert res.exit_code == 0, res.output
    assert "completed" in res.stdout and "accepted" in res.stdout and "Queue lengths" in res.stdout
    d = json.loads(out.read_text())
    assert d["accepted_trajectories"] == 2 and d["config"]["steps"] == 2
    again = runner.invoke(app, ["simulate", str(w), "-H", "h100-sxm", "--steps", "2", "--output", str(out)])
    assert again.exit_code == 2 and again.stderr == f"Error: {out}: file exists; pass --force to overwrite it\n"


def test_cli_sweep_table(runner, write_yaml):
    w = write_yaml(AGENTIC)
    res = runner.invoke(app, ["simulate", str(w), "-H", "l4", "--steps", "2", "--sweep-staleness", "0,1"])
    assert res.exit_code == 0, res.output
    runs = [line.split()[0] if line.startswith("sync") else " ".join(line.split()[:2])
            for line in map(str.strip, res.stdout.splitlines()) if line.startswith(("sync", "async"))]
    assert runs == ["sync", "async K=0", "async K=1"]


@pytest.mark.parametrize(
    "args,message",
    [
        (["--sweep-staleness", "1,x"], "Error: --sweep-staleness 'x': expected integers, a list (1,2,4) or a range (8:512:8)\n"),
        (["--timeline", "t.jpg"], "Error: --timeline t.jpg: give a .png or .svg file name\n"),
        (["--format", "csv"], "Error: --format csv is not available for simulate; use table or json\n"),
        (["--max-inflight-groups", "4"], "Error: --max-inflight-groups needs --mode async and --sampling active\n"),
        (["--inflight-updates"], "Error: --inflight-updates applies to --mode async; with --mode sync rollouts and training "
                                 "alternate, so there is no asynchrony for it to shape\n"),
    ],
)
def test_cli_errors_are_one_line(runner, args, message):
    res = runner.invoke(app, ["simulate", "agentic-tool-rl", "-H", "h100-sxm", *args])
    assert res.exit_code == 2 and res.stderr == message


@pytest.mark.parametrize(
    "workload, flags, clash",
    [
        ("seed-replay-auto", ["-m", "llama-3.1-8b", "--steps", "2", "-o", "{d}/s2.json", "--trajectories", "{d}/s2.json"],
         "--output {d}/s2.json and --trajectories {d}/s2.json name the same file"),
        ("seed-replay-auto", ["-m", "llama-3.1-8b", "--steps", "2", "--timeline", "{d}/s2.png", "--trajectories", "{d}/./s2.png",
                              "--force"], "--trajectories {d}/s2.png and --timeline {d}/s2.png name the same file"),
        ("chat-serving", ["--requests", "50", "-o", "{d}/s2.json", "--records", "{d}/s2.json"],
         "--output {d}/s2.json and --records {d}/s2.json name the same file"),
    ],
)
def test_cli_refuses_two_outputs_naming_one_file(runner, tmp_path, workload, flags, clash):
    """Two outputs on one path are refused before anything is written (with or without --force):
    the trajectories used to be written, then --output refused the file they had made."""
    args = [a.format(d=tmp_path) for a in flags]
    res = runner.invoke(app, ["simulate", workload, "-H", "h100-sxm", *args])
    assert res.exit_code == 2, res.output
    assert res.stderr == f"Error: {clash.format(d=tmp_path)}: give each output its own path\n"
    assert list(tmp_path.iterdir()) == []


def test_cli_rejects_a_workload_without_rollout(runner):
    res = runner.invoke(app, ["simulate", "sft", "-H", "h100-sxm"])
    assert res.exit_code == 2
    assert res.stderr.startswith("Error: workload sft: method sft has no rollout engine; simulate needs both")


def test_cli_timeline_plot(runner, write_yaml, tmp_path):
    pytest.importorskip("matplotlib")
    w = write_yaml(TWO_TURNS.format(reuse="auto", kv="retain"))
    png = tmp_path / "t.png"
    res = runner.invoke(app, ["simulate", str(w), "-H", "h100-sxm", "--steps", "2", "--timeline", str(png)])
    assert res.exit_code == 0, res.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_replicas_beyond_what_one_simulation_plays_are_refused(runner):
    """100,000 replicas were accepted (up to a million) and the run did not end within a minute;
    the limit is 10,000 (about a minute for two steps), and the message names the flag and the range."""
    from capplan.sim.config import MAX_SIM_REPLICAS

    from capplan.errors import InputError

    with pytest.raises(InputError, match=r"--inference-replicas 10001: must be in \[1, 10,000\]"):
        SimConfig(inference_replicas=MAX_SIM_REPLICAS + 1)
    result = runner.invoke(app, ["simulate", "agentic-tool-rl", "-H", "h100-sxm", "--steps", "2", "--inference-replicas", "100000"])
    assert result.exit_code == 2 and result.stderr == "Error: --inference-replicas 100000: must be in [1, 10,000]\n"
