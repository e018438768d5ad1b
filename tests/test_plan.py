"""The capacity plan: end-to-end arithmetic on a hand-computed case, properties, and the CLI."""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from capplan.errors import DoesNotFitError, InputError
from capplan.hardware import load_hardware
from capplan.modelspec import load_model_spec
from capplan.plan import PlanInputs, plan_workload, shrinking_batch_decode_s, static_batching_waste
from capplan.roofline import RooflineInputs, decode_step, engine_step
from capplan.trainer import forward_flops
from capplan.workload import Workload, load_workload

pytestmark = pytest.mark.usefixtures("assumed_engine")


H100 = load_hardware("h100-sxm")
LLAMA = load_model_spec("llama-3.1-8b")


def wl(prompt=100, action=50, prompts=2, samples=2, **extra) -> Workload:
    data = {
        "name": "hand",
        "method": "outcome-rl",
        "volume": {"prompts_per_step": prompts, "samples_per_prompt": samples},
        "conversation": {"prompt_tokens": prompt, "turns": [{"action_tokens": action}]},
    }
    data.update(extra)
    return Workload.model_validate(data)


def test_hand_computed_plan_end_to_end():
    """4 conversations (2 prompts x 2 samples) of a 100-token prompt and 50 sampled tokens, Llama-3.1-8B
    on one H100 (tp 1), 1 inference GPU and 4 trainer GPUs given, sync mode.

    * decode: each conversation forwards 50 - 1 = 49 positions; 4 x 49 = 196. The replica gets all
      4 conversations, fewer than memory allows, so the batch is 4 ("arrival of work"). Decode step
      k finds 100 + k - 1 positions cached: mean context = (49 x 100 + 49 x 48 / 2) / 49 = 124.
      decode GPU-s = 196 / 4 x t_dec(4, 124).
    * prefill: 4 x 100 = 400 positions in one chunk (<= 8,192): one engine step with 4 logits,
      4 x (100 x 101 / 2) = 20,200 causal pairs, no cached reads. prefill GPU-s = t_pre.
    * tail: all 4 sample 50 tokens, so the batch never shrinks: the longest decodes 50 tokens at
      batch 4, token k priced at the survivors' context 100 + k (on the tail's 256-point grid):
      about 50 x t_dec(4, 125). rollout = max(t_pre + 49 t_dec, tail).
    * trainer: 4 passes (3 for forward+backward, 1 to recompute log-probs) x forward FLOPs of four
      150-position records; time = FLOPs / (4 x 989.4e12 x 0.40) (MFU given).
    * weight sync (nccl fit) = latency + 2 x 8,030,261,248 B / (1 x bandwidth).
    * step = rollout + sync + train (the RL framework terms set to none: slowdown 1, no overhead);
      trainer idle = 1 - (train + sync) / step; node ratio = (1/8)/(4/8) = 0.25; static batching
      waste = 0 (equal lengths).
    """
    from capplan.trainer import WEIGHT_SYNC_FITS

    inputs = PlanInputs(hardware=H100, model=LLAMA, tp=1, inference_gpus=1, trainer_gpus=4, trainer_mfu=0.40,
                        rollout_slowdown=1.0, step_overhead_s=0.0)
    p = plan_workload(wl(), inputs)
    inp = RooflineInputs()
    t_dec = float(decode_step(LLAMA, H100, inp, 4, 124).step_time_s)
    t_pre = float(
        engine_step(LLAMA, H100, inp, new_tokens=400, logits_tokens=4, attention_pairs=20_200, kv_read_tokens=0,
                    sequences=4, window_attention_pairs=20_200, window_kv_read_tokens=0).step_time_s
    )
    assert p.decode_batch == 4 and p.binding_constraint == "arrival of work"
    assert p.decode_gpu_s == pytest.approx(196 / 4 * t_dec)
    assert p.prefill_gpu_s == pytest.approx(t_pre)
    grid = np.linspace(0, 50, 257)
    tail = float((np.diff(grid) * decode_step(LLAMA, H100, inp, 4, 100 + (grid[1:] + grid[:-1]) / 2).step_time_s).sum())
    assert p.rollout_time_tail_s == pytest.approx(tail, rel=1e-9)
    assert tail == pytest.approx(50 * t_dec, rel=1e-3)
    assert p.rollout_time_s == pytest.approx(max(t_pre + 49 * t_dec, tail))
    flops = 4 * forward_flops(LLAMA, np.array([150, 150, 150, 150]))
    assert p.trainer_flops == pytest.approx(flops)
    train = flops / (4 * 989.4e12 * 0.40)
    assert p.trainer_time_s == pytest.approx(train)
    fit = WEIGHT_SYNC_FITS["nccl"]
    assert p.weight_sync_time_s == pytest.approx(fit.latency_s + 2 * 8_030_261_248 / fit.bandwidth_bytes_per_s)
    assert p.mode == "sync" and p.step_time_s == pytest.approx(p.rollout_time_s + p.weight_sync_time_s + train)
    assert p.trainer_idle_fraction == pytest.approx(1 - (train + p.weight_sync_time_s) / p.step_time_s)
    assert p.node_ratio == 0.25
    assert p.static_batching_waste == 0.0
    assert p.ledger_per_step["sampled"]["total"] == 200
    assert p.ledger_per_step["prefill_forwarded"]["total"] == 400


def test_filtering_multiplies_rollout_work():
    """Dropping half the groups doubles the conversations generated per trained step (and decode work)."""
    base = plan_workload(wl(), PlanInputs(hardware=H100, model=LLAMA, inference_gpus=1, trainer_gpus=4))
    half = plan_workload(
        wl(training={"filtered_group_fraction": 0.5}), PlanInputs(hardware=H100, model=LLAMA, inference_gpus=1, trainer_gpus=4)
    )
    assert half.filter_factor == 2.0
    assert half.conversations_per_step == 2 * base.conversations_per_step
    assert half.decode_gpu_s > base.decode_gpu_s
    assert half.trainer_flops == pytest.approx(base.trainer_flops)  # the trainer still trains 4 conversations


def test_static_batching_waste_of_the_seed():
    """OLMo 3 (section 4.4.3): mean 14,628 and max 32,768 with large groups -> 1 - 14628/32768 = 55.4% of slot-steps wasted.

    A sample whose every group of 64 holds one 32,768-token sequence and 63 others averaging
    (64 x 14628 - 32768) / 63 tokens has exactly that mean and maximum.
    """
    other = (64 * 14628 - 32768) / 63
    lengths = np.tile(np.r_[32768.0, np.full(63, other)], 50)
    waste, group_max = static_batching_waste(lengths, 64)
    assert group_max == 32768
    assert waste == pytest.approx(1 - 14628 / 32768)
    assert round(waste, 2) == 0.55


def test_shrinking_batch_tail():
    """Two conversations of 10 and 30 tokens, batch cap 2, t(b) = b ms: 10 steps at b=2, 20 at b=1.

    The longest (30 tokens; the 1 - 1/3 quantile of the two-point sample is interpolated) runs
    its first tokens at batch 2 and the rest alone, so T_tail lies between 30 x 1 ms and 30 x 2 ms.
    """
    lengths = np.array([10.0, 30.0] * 500)
    t, L = shrinking_batch_decode_s(lengths, 2, 2, lambda b: np.asarray(b) * 1e-3)
    assert L == pytest.approx(30)
    # survival: 1 for k <= 10, 0.5 for k in (10, 30]: active = 2 then min(2, 1) = 1
    assert t == pytest.approx(10 * 2e-3 + 20 * 1e-3, rel=0.02)


def test_async_overlaps_rollout_and_training():
    w = load_workload("reasoning-rl-olmo3-7b")
    sync = plan_workload(w, PlanInputs(hardware=H100, model=load_model_spec("olmo-3-7b"), inference_gpus=56, trainer_gpus=16), 5000)
    asyn = plan_workload(
        w, PlanInputs(hardware=H100, model=load_model_spec("olmo-3-7b"), inference_gpus=56, trainer_gpus=16, mode="async", max_staleness=1), 5000
    )
    assert asyn.step_time_s < sync.step_time_s
    assert 0 <= asyn.stale_fraction <= 1
    assert asyn.trained_tokens_per_s > sync.trained_tokens_per_s


def test_async_decode_figures_share_one_batch():
    """An async plan's replicas run at the batch that delivers one step per period
    (:meth:`~capplan.plan.rollout.RolloutModel.async_period`), not a synchronised step's; its
    decode GPU-s are priced at that same batch: ``decode positions / b x t(b, mean context) x tp``.

    OLMo-3-7B on 64 + 8 H100s at K 1 (engines as profiled, no framework terms): the period is set
    by the staleness bound, the replicas run below the synchronised batch, so the two plans'
    decode GPU-s differ, each matching its own batch.
    """
    from capplan.plan.work import prepare

    w, spec = load_workload("reasoning-rl-olmo3-7b"), load_model_spec("olmo-3-7b")
    common = {"hardware": H100, "model": spec, "inference_gpus": 64, "trainer_gpus": 8, "rollout_slowdown": 1.0, "step_overhead_s": 0.0}
    sync = plan_workload(w, PlanInputs(**common), 2000)
    asyn = plan_workload(w, PlanInputs(**common, mode="async", max_staleness=1), 2000)
    work = prepare(w, spec, 2000).work
    for p in (sync, asyn):
        t = float(decode_step(spec, H100, RooflineInputs(), p.decode_batch, work.decode_context_mean).step_time_s)
        assert p.decode_gpu_s == pytest.approx(work.decode_tokens / p.decode_batch * t, rel=1e-9)
    assert asyn.decode_batch < sync.decode_batch and asyn.decode_gpu_s > sync.decode_gpu_s


@pytest.mark.parametrize("name,extra", [("reasoning-rl-olmo3-7b", {}), ("agentic-tool-rl", {}),
                                        ("reasoning-rl-olmo3-7b", {"total_gpus": 72, "mode": "async"})])
def test_static_batching_never_beats_the_longest_rollout(name, extra):
    """A static group holds its slots until its longest member ends, so a static step is never
    shorter than the longest rollout at the shrinking batch, nor than the continuous-batching rollout."""
    w = load_workload(name)
    p = plan_workload(w, PlanInputs(hardware=H100, model=load_model_spec(w.model), **extra), 2000)
    assert p.static_rollout_time_s >= p.rollout_time_tail_s
    assert p.static_rollout_time_s >= p.rollout_time_s


def test_sizing_one_side_balances_the_other():
    """Sync, 4 trainer GPUs given, engines as profiled: the fewest inference GPUs whose rollout work
    fits in a trainer step."""
    w = load_workload("reasoning-rl-olmo3-7b")
    spec = load_model_spec("olmo-3-7b")
    engines = {"rollout_slowdown": 1.0, "step_overhead_s": 0.0}
    p = plan_workload(w, PlanInputs(hardware=H100, model=spec, trainer_gpus=4, **engines), 5000)
    assert p.trainer_gpus == 4 and "keeps pace" in p.sizing
    assert p.rollout_time_work_s <= p.trainer_time_s  # production keeps pace
    smaller = plan_workload(w, PlanInputs(hardware=H100, model=spec, trainer_gpus=4, inference_gpus=p.inference_gpus - 1, **engines), 5000)
    assert smaller.rollout_time_work_s > p.trainer_time_s  # one GPU fewer would not


def test_sizing_says_when_balance_is_out_of_reach():
    """With 64 trainer GPUs a step trains in ~20 s, but one 15K-token rollout alone decodes for
    longer than that at batch 1: no inference size balances, and the plan says so."""
    w = load_workload("reasoning-rl-olmo3-7b")
    p = plan_workload(w, PlanInputs(hardware=H100, model=load_model_spec("olmo-3-7b"), trainer_gpus=64), 5000)
    assert "out of reach" in p.sizing
    assert p.rollout_time_work_s > p.trainer_time_s


def test_total_gpus_split_maximises_trained_tokens():
    w = load_workload("reasoning-rl-olmo3-7b")
    spec = load_model_spec("olmo-3-7b")
    best = plan_workload(w, PlanInputs(hardware=H100, model=spec, total_gpus=24, mode="sync"), 3000)
    assert best.inference_gpus + best.trainer_gpus == 24
    for g in (4, 12, 20):
        other = plan_workload(w, PlanInputs(hardware=H100, model=spec, inference_gpus=g, trainer_gpus=24 - g, mode="sync"), 3000)
        assert other.trained_tokens_per_s <= best.trained_tokens_per_s * (1 + 1e-9)


def test_sft_has_no_rollout_side():
    p = plan_workload(load_workload("sft"), PlanInputs(hardware=H100, model=LLAMA), 2000)
    assert p.inference_gpus == 0 and p.decode_gpu_s == 0 and p.prefill_gpu_s == 0
    assert p.binding_constraint == "no rollout engine" and p.trainer_gpus >= 1


def test_serving_replicas_meet_the_rate():
    """A serving workload gets a fleet plan (tests/test_serving.py covers it)."""
    p = plan_workload(load_workload("chat-serving"), PlanInputs(hardware=H100, model=LLAMA), 5000)
    assert p.targets_met and p.replicas >= 1
    assert p.replicas * p.capacity_per_replica_per_s * p.max_utilisation >= p.arrival_rate_per_s
    assert p.tpot_s["p95"] <= 0.05 and p.ttft_s["p95"] <= 0.5
    assert p.gpus == p.replicas * p.tp


def test_distillation_scores_with_the_teacher():
    p = plan_workload(load_workload("distillation"), PlanInputs(hardware=H100, model=load_model_spec("qwen3-8b")), 3000)
    assert p.score_gpu_s > 0


def test_errors():
    with pytest.raises(InputError, match="not a multiple of --tp 2"):
        plan_workload(wl(), PlanInputs(hardware=H100, model=LLAMA, tp=2, inference_gpus=3, trainer_gpus=4))
    with pytest.raises(DoesNotFitError, match="needs at least 3"):
        plan_workload(wl(), PlanInputs(hardware=H100, model=LLAMA, tp=1, inference_gpus=1, trainer_gpus=1))
    with pytest.raises(DoesNotFitError, match="needs at least"):
        plan_workload(wl(), PlanInputs(hardware=H100, model=load_model_spec("llama-3.1-70b"), tp=4, trainer_gpus=4))


# --- properties ------------------------------------------------------------------------------


@settings(max_examples=12, deadline=None)
@given(action=st.integers(20, 2000), extra=st.integers(1, 2000), prompt=st.integers(10, 2000))
def test_longer_responses_never_shorten_the_step(action, extra, prompt):
    a = plan_workload(wl(prompt, action, 4, 4), PlanInputs(hardware=H100, model=LLAMA, inference_gpus=2, trainer_gpus=4))
    b = plan_workload(wl(prompt, action + extra, 4, 4), PlanInputs(hardware=H100, model=LLAMA, inference_gpus=2, trainer_gpus=4))
    assert b.step_time_s >= a.step_time_s


@settings(max_examples=10, deadline=None)
@given(g=st.integers(1, 40), more=st.integers(1, 40))
def test_more_inference_gpus_never_raise_trainer_idle_in_sync(g, more):
    w = wl(300, 800, 16, 4)
    a = plan_workload(w, PlanInputs(hardware=H100, model=LLAMA, inference_gpus=g, trainer_gpus=4))
    b = plan_workload(w, PlanInputs(hardware=H100, model=LLAMA, inference_gpus=g + more, trainer_gpus=4))
    assert b.trainer_idle_fraction <= a.trainer_idle_fraction + 1e-12


@settings(max_examples=10, deadline=None)
@given(mem=st.floats(40, 120), extra=st.floats(1, 80))
def test_more_memory_never_lowers_concurrency(mem, extra):
    from capplan.concurrency import workload_concurrency
    from capplan.kv import KVInputs, compute_kv

    w = load_workload("agentic-tool-rl")
    spec = load_model_spec("qwen3-8b")
    res = []
    for m in (mem, mem + extra):
        kv = compute_kv(spec, H100, KVInputs(usable_mem_gib=m))
        res.append(workload_concurrency(spec, H100, kv, w, conversations=500, step_time=lambda b, c: 0.02))
    assert res[1].resident_conversations >= res[0].resident_conversations
    assert res[1].runnable_sequences >= res[0].runnable_sequences


@settings(max_examples=15, deadline=None)
@given(
    k=st.integers(1, 6), g=st.integers(1, 16), trainer=st.sampled_from([4, 8, 16]),
    action=st.integers(20, 4000), ingest=st.sampled_from(["groups", "batches"]),
)
def test_async_mean_lag_never_exceeds_the_staleness_bound(k, g, trainer, action, ingest):
    """Trajectories more than K versions old are rejected, so what is trained has a mean lag of at
    most K, and the stale fraction (lag >= 1) is a fraction."""
    p = plan_workload(wl(300, action, 16, 4), PlanInputs(hardware=H100, model=LLAMA, inference_gpus=g, trainer_gpus=trainer,
                                                        mode="async", max_staleness=k, async_ingest=ingest))
    assert 0.0 <= p.mean_policy_lag <= k + 1e-12
    assert 0.0 <= p.stale_fraction <= 1.0


# --- CLI -------------------------------------------------------------------------------------

CONTRACT = (
    "workload", "hardware", "kv", "ledger_per_step", "prefill_gpu_s", "decode_gpu_s", "score_gpu_s",
    "rollout_time_s", "trainer_time_s", "weight_sync_time_s", "static_batching_waste", "trainer_gpus",
    "inference_gpus", "node_ratio", "trainer_idle_fraction", "mode", "binding_constraint",
)


def test_plan_cli_json_contract(runner):
    from capplan.cli.app import app

    r = runner.invoke(app, ["plan", "reasoning-rl-olmo3-7b", "agentic-tool-rl", "-H", "h100-sxm", "--conversations", "2000", "-f", "json"])
    assert r.exit_code == 0, r.output
    docs = json.loads(r.stdout)
    assert [d["workload"] for d in docs] == ["reasoning-rl-olmo3-7b", "agentic-tool-rl"]
    for d in docs:
        for key in CONTRACT:
            assert key in d, key
        assert "kv_capacity_tokens" in d["kv"] and "recorded" in d["ledger_per_step"]


def test_plan_cli_csv_and_output_dir(runner, tmp_path):
    from capplan.cli.app import app

    r = runner.invoke(app, ["plan", "seed-replay", "-H", "h100-sxm", "-m", "llama-3.1-8b", "-f", "csv"])
    assert r.exit_code == 0, r.output
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert rows[0]["workload"] == "seed-replay" and float(rows[0]["rollout_time_s"]) > 0
    out = tmp_path / "out"
    args = ["plan", "seed-replay", "-H", "h100-sxm", "-m", "llama-3.1-8b", "--output-dir", str(out)]
    assert runner.invoke(app, args).exit_code == 0
    assert json.loads((out / "plan.json").read_text())[0]["workload"] == "seed-replay"
    again = runner.invoke(app, args)
    assert again.exit_code == 2 and "file exists" in again.stderr


def test_plan_cli_table_and_explain(runner):
    from capplan.cli.app import app

    r = runner.invoke(app, ["plan", "reasoning-rl-olmo3-7b", "-H", "h100-sxm", "--conversations", "2000", "--explain"])
    assert r.exit_code == 0, r.output
    for text in ("rollout time [s]", "node ratio", "formulas with the numbers substituted", "trainer time ="):
        assert text in r.stdout


def test_plan_cli_errors(runner, write_yaml):
    from capplan.cli.app import app

    path = write_yaml("version: 1\nname: nomodel\nmethod: outcome-rl\nconversation: {prompt_tokens: 5, turns: [{action_tokens: 5}]}\n")
    r = runner.invoke(app, ["plan", str(path), "-H", "h100-sxm"])
    assert r.exit_code == 2 and "names no model" in r.stderr
    r = runner.invoke(app, ["plan", "seed-replay", "-H", "h100-sxm", "-m", "llama-3.1-8b", "--tp", "3"])
    assert r.exit_code == 2 and "attention heads" in r.stderr
