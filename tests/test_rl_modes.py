"""RL plans: the three modes, the staleness trade-off, sizing rules, warnings, the trainer's fits and group prompt sharing."""

from __future__ import annotations

import numpy as np
import pytest

from capplan.errors import InputError
from capplan.hardware import load_hardware
from capplan.ledger import compute_ledger
from capplan.modelspec import load_model_spec
from capplan.plan import PlanInputs, plan_workload
from capplan.workload import Workload, load_workload

H100 = load_hardware("h100-sxm")
OLMO7 = load_model_spec("olmo-3-7b")
N = 2000  # Monte Carlo conversations per plan (keeps the suite fast)


def olmo7(**inputs):
    return plan_workload(load_workload("reasoning-rl-olmo3-7b"), PlanInputs(hardware=H100, model=OLMO7, **inputs), N)


# ------------------------------------------------------------------------------ the modes


def test_colocated_runs_every_phase_in_series_on_every_gpu():
    """Colocated on 16 GPUs: step = rollout (16 replicas) + trainer (16 GPUs) + reshard + framework
    time; the split side reports no node ratio and every GPU counted once per GPU figure."""
    p = olmo7(total_gpus=16, mode="colocated")
    ph = p.phases
    assert p.mode == "colocated" and p.inference_gpus == p.trainer_gpus == 16 and p.weight_sync_pattern == "reshard"
    assert p.step_time_s == pytest.approx(
        ph["generation_s"] + ph["logprob_s"] + ph["reference_s"] + ph["training_s"] + ph["weight_sync_s"] + ph["overhead_s"]
    )
    assert p.node_ratio == 0.0 and p.stale_fraction == 0.0
    assert p.trained_tokens_per_s_per_gpu == pytest.approx(p.trained_tokens_per_s / 16)


def test_colocated_needs_total_gpus():
    with pytest.raises(InputError, match="--mode colocated: needs --total-gpus"):
        PlanInputs(hardware=H100, model=OLMO7, mode="colocated", trainer_gpus=8)


def test_async_k0_is_the_synchronous_step():
    sync, k0 = olmo7(inference_gpus=56, trainer_gpus=16, mode="sync"), olmo7(inference_gpus=56, trainer_gpus=16, mode="async", max_staleness=0)
    assert k0.step_time_s == pytest.approx(sync.step_time_s) and k0.trained_tokens_per_s == pytest.approx(sync.trained_tokens_per_s)
    assert k0.stale_fraction == 0.0


def test_staleness_trades_throughput_for_freshness():
    """Raising K never lowers trained tokens/s nor the stale share, and the first bound raises
    throughput (the published 16 : 56 OLMo-3-7B split is bound by its tail at K = 0)."""
    plans = [olmo7(inference_gpus=56, trainer_gpus=16, mode="async", max_staleness=k) for k in (0, 1, 2, 4, 8)]
    rates = [p.trained_tokens_per_s for p in plans]
    stale = [p.stale_fraction for p in plans]
    assert rates[1] > 1.3 * rates[0]
    assert all(b >= a * (1 - 1e-9) for a, b in zip(rates, rates[1:]))
    assert all(b >= a - 1e-9 for a, b in zip(stale, stale[1:]))
    assert plans[0].mean_policy_lag == 0.0 < plans[1].mean_policy_lag < plans[-1].mean_policy_lag


def test_auto_mode_with_total_gpus_picks_the_most_trained_tokens():
    p = olmo7(total_gpus=72)
    assert {c["mode"] for c in p.mode_choice} == {"colocated", "sync", "async"}
    assert p.mode == p.mode_choice[0]["mode"]
    assert p.trained_tokens_per_s == pytest.approx(max(c["trained_tokens_per_s"] for c in p.mode_choice))
    assert "mode" in p.split_decided_by


# ------------------------------------------------------------------------------ sizing


def test_a_sized_trainer_is_at_least_a_whole_node():
    """OLMo-3-7B's state fits 2 H100s, but capplan sizes whole nodes: one node of 8."""
    p = olmo7(mode="sync")
    assert p.trainer_gpus_min_memory < 8 == p.trainer_gpus
    assert "sane data-parallel" in p.split_decided_by


def test_total_gpus_split_gives_the_trainer_whole_nodes():
    p = olmo7(total_gpus=72, mode="async", max_staleness=1)
    assert p.trainer_gpus % 8 == 0 and p.inference_gpus + p.trainer_gpus <= 72


def test_async_balance_sizes_inference_until_the_trainer_is_busy():
    """Given 8 trainer GPUs at K = 8 the trainer is the bound: inference sized so the step is the trainer's."""
    p = olmo7(trainer_gpus=8, mode="async", max_staleness=8)
    assert p.step_bound_by == "trainer" and p.trainer_idle_fraction == pytest.approx(0.0, abs=1e-6)
    fewer = olmo7(trainer_gpus=8, inference_gpus=p.inference_gpus - 1, mode="async", max_staleness=8)
    assert fewer.trainer_idle_fraction > 0


# ------------------------------------------------------------------------------ warnings


def test_kv_thrash_is_warned():
    """agentic-tool-rl on 2 replicas: 128 conversations each hold ~7K positions retained during
    tool waits against ~55 conversations' worth of KV: most reused prefixes are evicted."""
    w = load_workload("agentic-tool-rl")
    p = plan_workload(w, PlanInputs(hardware=H100, model=load_model_spec("qwen3-8b"), inference_gpus=2, trainer_gpus=8, mode="sync"), N)
    assert p.recompute_fraction > 0.10
    assert any(warning.startswith("KV thrash") for warning in p.warnings)
    assert p.ledger_per_step["recomputed"]["total"] == pytest.approx(p.recompute_tokens_per_step)


def test_a_tail_beyond_the_bound_is_warned():
    p = olmo7(inference_gpus=56, trainer_gpus=16, mode="async", max_staleness=1)
    assert any("outlasts 1 trainer step" in warning for warning in p.warnings)


def test_a_split_far_from_balance_is_warned():
    """Two replicas against a 64-GPU trainer at K = 8: generation takes many trainer steps."""
    p = olmo7(inference_gpus=16, trainer_gpus=64, mode="async", max_staleness=8)
    assert any("far from balance" in warning for warning in p.warnings)


# ------------------------------------------------------------------------------ the trainer


def test_trainer_mfu_fit_is_what_the_corpus_gives():
    """The shipped coefficients are the least-squares fit on the fit rows of trainer.csv, none held out."""
    from capplan.accuracy.corpus import load_corpus
    from capplan.accuracy.rl import fit_trainer_mfu
    from capplan.trainer import TRAINER_MFU_FIT

    coefficients, fitted_on = fit_trainer_mfu()
    assert coefficients == TRAINER_MFU_FIT.coefficients and tuple(fitted_on) == TRAINER_MFU_FIT.fitted_on
    held_out = {r.id for r in load_corpus(kinds={"trainer"}) if r.held_out}
    assert not held_out & set(fitted_on)


def test_weight_sync_fits_are_what_the_corpus_gives():
    from capplan.accuracy.rl import fit_weight_sync
    from capplan.trainer import WEIGHT_SYNC_FITS

    for pattern, (latency, bandwidth, fitted_on) in fit_weight_sync().items():
        fit = WEIGHT_SYNC_FITS[pattern]
        assert (fit.latency_s, fit.bandwidth_bytes_per_s, fit.fitted_on) == (latency, bandwidth, tuple(fitted_on))


def test_weight_sync_bytes_follow_what_each_pattern_sends():
    """What one engine GPU receives, per pattern, for DeepSeek-V3 (671.0B parameters, 653.9B of
    them routed experts) on a vLLM TP32 replica, 2 bytes a parameter:

    * ``nccl`` (its own shard): 2 x 671.0B / 32 = 41.9 GB;
    * ``nixl`` (dense whole + its expert slice): 2 x 17.1B + 2 x 653.9B / 32 = 75.1 GB = 69.95 GiB,
      the "69.95 GiB" NeMo RL's checkpoint-engine guide logs for each vLLM rank of this layout;
    * ``checkpoint-engine`` (MoonshotAI's broadcast: every GPU gets every bucket): 1,342 GB.
    """
    from capplan.kv import routed_expert_params
    from capplan.modelspec import load_model_spec
    from capplan.trainer import WEIGHT_SYNC_FITS, sync_bytes_per_gpu, weight_sync_time_s

    v3 = load_model_spec("deepseek-v3")
    total, routed = 2 * v3.total_params(), 2 * routed_expert_params(v3)
    assert sync_bytes_per_gpu(v3, 32, "shard") == pytest.approx(total / 32)
    assert sync_bytes_per_gpu(v3, 32, "local") / 2**30 == pytest.approx(69.95, abs=0.005)
    assert sync_bytes_per_gpu(v3, 32, "whole") == total
    assert sync_bytes_per_gpu(v3, 32, "local") == pytest.approx(total - routed + routed / 32)
    # the checkpoint-engine broadcast does not shrink with the replica's tensor parallelism
    assert weight_sync_time_s(v3, 8, "checkpoint-engine") == weight_sync_time_s(v3, 32, "checkpoint-engine")
    assert weight_sync_time_s(v3, 8, "nccl") > weight_sync_time_s(v3, 32, "nccl")
    assert WEIGHT_SYNC_FITS["nixl"].receives == "local" and WEIGHT_SYNC_FITS["checkpoint-engine"].receives == "whole"


def test_a_split_gpu_weight_sync_leaves_colocated_out_of_the_mode_choice():
    """With --total-gpus and --mode auto every mode competes; a push between split GPUs (nccl) has
    no colocated form, so colocated is not among the candidates, and --mode colocated with it is refused."""
    from capplan.errors import InputError
    from capplan.hardware import load_hardware
    from capplan.plan import PlanInputs, plan_workload
    from capplan.plan.inputs import load_policy

    w, spec = load_policy("reasoning-rl-olmo3-7b")
    h100 = load_hardware("h100-sxm")
    auto = plan_workload(w, PlanInputs(model=spec, hardware=h100, total_gpus=32, weight_sync="nccl"), conversations=256)
    assert {c["mode"] for c in auto.as_dict()["mode_choice"]} == {"sync", "async"}
    with pytest.raises(InputError, match="--mode colocated reshards them on the same GPUs"):
        PlanInputs(model=spec, hardware=h100, total_gpus=32, weight_sync="nccl", mode="colocated")


def test_full_weight_nixl_refit_is_reported_unsupported():
    """NeMo RL's ``shard_expert_weights: false`` (every rank receives every expert whole, 36.8 s
    against 10.9 s sharded) has no pattern of its own: its row says so instead of being priced as
    the sharded path."""
    from capplan.accuracy.corpus import load_corpus
    from capplan.accuracy.rl import predict_weight_sync

    row = next(r for r in load_corpus(kinds={"weight_sync"}) if r.id == "nemorl_ckpt_engine_dsv3_full_expert_sync")
    prediction = predict_weight_sync(row)
    assert prediction.value is None and "shard_expert_weights=false" in prediction.reason


def test_rl_framework_fit_is_on_fit_rows_of_published_steps():
    """The fit itself plans every row (``python -m capplan.accuracy.rl`` reruns it); here: its rows
    are step times of the RL corpus that the split keeps in the fit."""
    from capplan.accuracy.corpus import load_corpus
    from capplan.trainer import RL_FRAMEWORK_FIT

    rows = {r.id: r for r in load_corpus(kinds={"rl"})}
    assert RL_FRAMEWORK_FIT.fitted_on and RL_FRAMEWORK_FIT.rollout_slowdown >= 1 and RL_FRAMEWORK_FIT.step_overhead_s >= 0
    for row_id in RL_FRAMEWORK_FIT.fitted_on:
        assert rows[row_id].metric == "step_time_s" and not rows[row_id].held_out


def test_a_chip_slowdown_is_fitted_on_enough_rows_of_that_chip():
    """A chip with its own rollout slowdown (GB200) has at least ``RL_CHIP_MIN_ROWS`` fit rows of
    its own, and is not the reference chip (the one with most fit rows)."""
    from collections import Counter

    from capplan.accuracy.corpus import load_corpus
    from capplan.accuracy.rl import RL_CHIP_MIN_ROWS
    from capplan.trainer import RL_FRAMEWORK_FIT

    rows = {r.id: r for r in load_corpus(kinds={"rl"})}
    counts = Counter(rows[i].get("hardware") for i in RL_FRAMEWORK_FIT.fitted_on)
    reference = counts.most_common(1)[0][0]
    assert dict(RL_FRAMEWORK_FIT.chip_slowdown)  # GB200 today
    for chip, factor in RL_FRAMEWORK_FIT.chip_slowdown:
        assert chip != reference and counts[chip] >= RL_CHIP_MIN_ROWS and 0.5 <= factor <= 5


def test_the_plan_takes_the_chip_slowdown():
    """On GB200 the engines run ``rollout_slowdown x chip factor`` slower than the profile; on
    H100 the shared slowdown alone; a given ``--rollout-slowdown`` is taken as it is."""
    from capplan.trainer import RL_FRAMEWORK_FIT

    gb200, chip = load_hardware("gb200"), dict(RL_FRAMEWORK_FIT.chip_slowdown)["gb200"]
    wl = load_workload("reasoning-rl-olmo3-7b")
    a = RL_FRAMEWORK_FIT.rollout_slowdown
    assert PlanInputs(hardware=gb200, model=OLMO7, inference_gpus=8).framework(wl)[0] == pytest.approx(a * chip)
    assert PlanInputs(hardware=H100, model=OLMO7, inference_gpus=8).framework(wl)[0] == pytest.approx(a)
    assert PlanInputs(hardware=gb200, model=OLMO7, inference_gpus=8, rollout_slowdown=1.5).framework(wl)[0] == 1.5
    plan = plan_workload(wl, PlanInputs(hardware=gb200, model=OLMO7, inference_gpus=8, trainer_gpus=8), N)
    assert plan.rollout_slowdown == pytest.approx(a * chip)


def test_mfu_falls_with_expert_sparsity():
    """Same GPU, same layout: a dense 8B trains near the published ~40-45% BF16 MFU; a 30B-A3B
    mixture of experts (sparsity 10) well below it."""
    from capplan.trainer import trainer_mfu

    dense, moe = trainer_mfu(load_model_spec("llama-3.1-8b"), H100), trainer_mfu(load_model_spec("qwen3-30b-a3b"), H100)
    assert 0.35 < dense < 0.5 and moe < 0.6 * dense


def test_moe_training_flops_count_active_parameters():
    """One 1,000-token record of Qwen3-30B-A3B: 6 x active (not total) parameters per token, plus attention."""
    from capplan.trainer import training_flops

    spec = load_model_spec("qwen3-30b-a3b")
    flops = training_flops(spec, np.array([1000]), recompute_logprobs=False)
    active = spec.active_params(include_input_embedding=False)
    assert 6 * active * 1000 < flops < 1.1 * 6 * active * 1000 < 6 * spec.total_params() * 1000 / 5


def test_trainer_phases_follow_the_passes():
    """Log-prob recompute and a reference each cost one forward; training three (forward + backward)."""
    w = load_workload("reasoning-rl-olmo3-7b")
    ref = w.model_copy(update={"training": w.training.model_copy(update={"reference_forward": True})})
    p = plan_workload(ref, PlanInputs(hardware=H100, model=OLMO7, inference_gpus=56, trainer_gpus=16, mode="sync"), N)
    ph = p.phases
    assert ph["logprob_s"] == pytest.approx(ph["reference_s"]) == pytest.approx(ph["training_s"] / 3)
    assert ph["logprob_s"] + ph["reference_s"] + ph["training_s"] == pytest.approx(p.trainer_time_s)


# ------------------------------------------------------------------------------ group prompt sharing


def _group(reuse: str, samples: int = 4) -> Workload:
    return Workload.model_validate({
        "name": "group", "method": "outcome-rl", "volume": {"prompts_per_step": 2, "samples_per_prompt": samples},
        "conversation": {"prompt_tokens": 1000, "turns": [{"action_tokens": 200}]}, "cache": {"reuse": reuse},
    })


def test_a_group_prefills_its_prompt_once_with_prefix_caching():
    """4 samples of a 1,000-token prompt: with ``reuse: auto`` the first prefills 1,000 positions and
    the others find all but the last cached (the last is forwarded again for the first token's
    logits, as vLLM does on a full prefix hit), so per conversation (1,000 + 3 x 1) / 4 = 250.75
    prompt positions are prefilled and 3 x 999 / 4 = 749.25 hit; without reuse each sample prefills
    all 1,000."""
    shared, separate = compute_ledger(_group("auto")), compute_ledger(_group("none"))
    assert shared.per_conversation["prefill_forwarded"]["prompt"] == pytest.approx(250.75)
    assert shared.per_conversation["cache_hit"]["prompt"] == pytest.approx(749.25)
    assert separate.per_conversation["prefill_forwarded"]["prompt"] == 1000
    assert shared.ok and separate.ok
    assert shared.per_step["prefill_forwarded"]["prompt"] == pytest.approx(2 * 1003)  # once per group, + 1 per sibling


def test_group_sharing_can_be_turned_off_and_needs_a_prefix_cache():
    w = Workload.model_validate({**_group("auto").model_dump(), "cache": {"reuse": "auto", "share_group_prompt": False}})
    assert compute_ledger(w).per_conversation["prefill_forwarded"]["prompt"] == 1000
    with pytest.raises(Exception, match="share_group_prompt needs a prefix cache"):
        Workload.model_validate({**_group("none").model_dump(), "cache": {"reuse": "none", "share_group_prompt": True}})


def test_the_samples_of_a_group_share_one_prompt_draw():
    from capplan.ledger import sample_conversations

    w = load_workload("agentic-tool-rl")
    c = sample_conversations(w, n=800)
    groups = c.prompt.reshape(-1, w.volume.samples_per_prompt)
    assert (groups == groups[:, :1]).all() and len(np.unique(groups[:, 0])) > 50


def test_the_plan_prices_the_shared_prompt_once():
    """The plan's prefill follows the ledger: sharing cuts the prompt's prefill GPU-seconds by the group size."""
    spec = load_model_spec("llama-3.1-8b")
    shared = plan_workload(_group("auto", 8), PlanInputs(hardware=H100, model=spec, inference_gpus=1, trainer_gpus=8, mode="sync"))
    separate = plan_workload(_group("none", 8), PlanInputs(hardware=H100, model=spec, inference_gpus=1, trainer_gpus=8, mode="sync"))
    assert shared.prefill_gpu_s_by_class["prompt"] < separate.prefill_gpu_s_by_class["prompt"] / 4


# ------------------------------------------------------------------------------ the rollout model's helpers


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "incomplete-beta"])
def test_binomial_quantile_is_scipy_stats_ppf(compiled, monkeypatch):
    """The critical replica's survivors: both routes equal ``scipy.stats.binom.ppf`` exactly, edges
    p = 0 (nobody left: 0) and p = 1 (all n) included."""
    from scipy import special
    from scipy.stats import binom

    from capplan.plan.rollout import binomial_quantile

    rng = np.random.default_rng(0)
    n = np.rint(rng.uniform(1, 600, (40, 1)))
    q = 1.0 - 1.0 / (rng.integers(1, 300, (40, 1)) + 1.0)
    p = np.concatenate([np.zeros((40, 2)), np.ones((40, 2)), rng.uniform(0, 1, (40, 60)), np.full((40, 2), 1e-9)], axis=1)
    expected = binom.ppf(q, n, p)
    if not compiled:
        monkeypatch.delattr(special._ufuncs, "_binom_ppf", raising=False)
    assert np.array_equal(binomial_quantile(q, n, p), expected)


def test_synchronised_peak_is_the_max_over_the_grid_of_the_mean_held_kv():
    """The difference-array form equals the direct definition, ``max_k mean_i h(I_i + min(k, a_i))``
    over the conversations still decoding (``a_i >= k``), ``h(c) = c - s max(c - W, 0)``, with and
    without sliding-window layers."""
    from capplan.plan.rollout import _TAIL_POINTS, synchronised_peak

    rng = np.random.default_rng(1)
    inputs = rng.integers(0, 3000, 500).astype(float)
    actions = np.minimum(rng.lognormal(8, 1, 500), 32768).round()
    for share, window in ((0.0, 4096.0), (0.75, 4096.0), (0.5, 500.0)):
        best, context = 0.0, 0.0
        for k in np.linspace(0.0, actions.max(), _TAIL_POINTS + 1):
            alive = actions >= k
            c = inputs + np.minimum(k, actions)
            mean = np.where(alive, c - share * np.maximum(c - window, 0.0), 0.0).mean()
            if mean > best:
                best, context = mean, c[alive].mean()
        assert synchronised_peak(inputs, actions, share, window) == pytest.approx((best, context), rel=1e-9)


@pytest.mark.parametrize(
    "fields, moe",
    [
        ({"model": "qwen3-30b-a3b"}, True),  # an RL row names a preset: Qwen3-30B-A3B routes 8 of 128 experts
        ({"model": "llama-3.1-8b"}, False),  # a dense preset
        ({"model": "no-such-model"}, False),  # an unknown model is not claimed to be a mixture
        ({"model": "llama-3.1-8b", "moe": "true"}, True),  # the row's own column wins
    ],
)
def test_dense_and_moe_rows_are_told_apart(fields, moe):
    """capplan accuracy reports dense and MoE errors apart; rows of corpora without a ``moe``
    column (rl_steps.csv, kv_capacity.csv) take it from the model preset."""
    from capplan.accuracy.corpus import CorpusRow
    from capplan.accuracy.report import row_is_moe

    row = CorpusRow(id="x", kind="rl", source="s", citation="c", metric="step_time_s", unit="s", measured=1.0,
                    held_out=False, fields=fields)
    assert row_is_moe(row) is moe


@pytest.mark.parametrize("sigma", [0.3, 0.6, 1.0])
@pytest.mark.parametrize("mean", [500.0, 2999.0, 14628.0])
def test_a_published_mean_is_the_mean_after_the_generation_limit(mean, sigma):
    """A run's published mean length is measured after the limit cut the long responses: the
    lognormal the corpus rows plan with has a larger mean before the cut, and sampling it clipped
    at the limit gives back the published mean (Monte Carlo, 400,000 draws, within 0.5%)."""
    from capplan.distributions import clipped_lognormal_mean, lognormal_mean_before_clip

    cap = 32768.0 if mean > 4000 else 3896.0
    before = lognormal_mean_before_clip(mean, sigma, cap)
    assert before > mean
    assert clipped_lognormal_mean(before, sigma, cap) == pytest.approx(mean, rel=1e-9)
    rng = np.random.default_rng(0)
    draws = np.minimum(rng.lognormal(np.log(before) - sigma**2 / 2, sigma, 400_000), cap)
    assert draws.mean() == pytest.approx(mean, rel=0.005)


def test_a_mean_at_or_above_the_limit_is_refused():
    from capplan.distributions import lognormal_mean_before_clip

    with pytest.raises(ValueError, match="between 0 and the cap"):
        lognormal_mean_before_clip(4096, 0.6, 4096)


def test_generators_at_seventy_percent_of_the_trainer_leave_it_idle_thirty_percent():
    """Issue target: an async split of a large MoE reasoning model whose generators deliver ~70% of
    the trainer's capacity shows the trainer idle ~30%. The SemiAnalysis Qwen3-235B row's setup
    (64 H200 trainer GPUs, OLMo 3 Think's batch and lengths) at a range of inference GPU counts:
    while rollout production binds, idle = 1 - generated / trainable samples per second, and at
    168 inference GPUs the generators give ~70% and the trainer idles ~30%."""
    from capplan.accuracy.corpus import load_corpus
    from capplan.accuracy.rl import _plan, rl_inputs

    row = {r.id: r for r in load_corpus(kinds={"rl"})}["semianalysis_qwen3_235b_64_192_wait"]
    workload, inputs = rl_inputs(row, None, [])
    for gpus in (96, 168):
        p = _plan(workload, inputs.replace(inference_gpus=gpus))
        share = p.generation_samples_per_s / p.trainer_capacity_samples_per_s
        assert p.step_bound_by == "rollout production"
        assert p.trainer_idle_fraction == pytest.approx(1 - share, abs=0.01)
    assert 0.65 < share < 0.75 and 0.25 < p.trainer_idle_fraction < 0.35
