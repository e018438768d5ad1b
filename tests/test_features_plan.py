"""Engine features in ``capplan plan`` and ``capplan sweep``: expert parallelism, speculative decoding, disaggregated pools, the CPU KV tier.

The bundled examples each plan with their feature (DeepSeek-V3 EP16 on 2 x 8 H200, EAGLE-3
serving, disaggregated serving); the plan's figures are the calculation modules' (``capplan kv``
for weights, :func:`capplan.speculative.spec_step` for the speculative decode step,
:func:`capplan.disagg.size_pools` for the pools), and a sweep row is the plan of its cell.
"""

from __future__ import annotations

import csv
import io
import json
import math

import numpy as np
import pytest

from capplan.cli.app import app
from capplan.hardware import load_hardware
from capplan.plan import PlanInputs, plan_workload
from capplan.plan.inputs import load_policy
from capplan.plan.serving import plan_serving, serving_mix
from capplan.speculative import SpecInputs, spec_pricers, spec_step

EAGLE3 = SpecInputs(method="eagle3", num_speculative_tokens=3, acceptance_rate=0.7)
"""The bundled EAGLE-3 example's setting."""


def _json(runner, args: list[str]) -> list[dict]:
    result = runner.invoke(app, [*args, "--format", "json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    return out if isinstance(out, list) else [out]


# ------------------------------------------------------------------------------ expert parallelism


def test_deepseek_v3_ep_plan_on_two_h200_nodes_holds_the_weights_kv_gives(runner):
    """``capplan plan deepseek-v3-ep-serving -H h200`` runs EP16 from the workload's engine block
    (tp 1 x dp 16, fp8): instances of 16 GPUs (two 8-GPU nodes), the replicas a whole number of
    instances, and each GPU holds the weights ``capplan kv --tp 1 --ep 16 --weight-dtype fp8``
    reports (55.73 GiB: the 16-way expert split, docs/features.md) with the same KV capacity."""
    plan = _json(runner, ["plan", "deepseek-v3-ep-serving", "-H", "h200"])[0]
    kv = _json(runner, ["kv", "-m", "deepseek-v3", "-H", "h200", "--tp", "1", "--ep", "16", "--weight-dtype", "fp8"])[0]
    assert (plan["ep"], plan["dp"], plan["tp"], plan["weight_dtype"]) == (16, 16, 1, "fp8")
    assert plan["replicas"] % 16 == 0 and plan["instances"] == plan["replicas"] // 16 and plan["gpus"] == 16 * plan["instances"]
    assert plan["weights_gib_per_gpu"] == pytest.approx(kv["weights_gib_per_gpu"], rel=1e-12)
    assert plan["weights_gib_per_gpu"] == pytest.approx(55.73, abs=0.01)
    assert plan["kv_capacity_tokens"] == kv["kv_capacity_tokens"]
    assert plan["targets_met"]


def test_flags_win_over_the_workloads_engine_block(runner):
    """``--ep 8 --dp 8`` replaces the file's 16 x 16 layout: instances of 8 GPUs."""
    plan = _json(runner, ["plan", "deepseek-v3-ep-serving", "-H", "h200", "--ep", "8", "--dp", "8", "--conversations", "20000"])[0]
    assert (plan["ep"], plan["dp"]) == (8, 8)
    assert plan["replicas"] % 8 == 0 and plan["gpus"] == 8 * plan["instances"]


def test_rl_plan_under_expert_parallelism_counts_instances_and_weights(runner):
    """An RL plan of Qwen3-30B-A3B on instances of tp 1 x dp 8 (EP8): 56 inference GPUs are 7
    instances of 8 ranks; each rank's KV budget is ``capplan kv``'s at the same layout; the weight
    push sends each GPU its share, ``2 (P - P_routed) / 1 + 2 P_routed / 8``, less than the whole
    model a TP1 replica receives."""
    base = ["plan", "reasoning-rl-olmo3-7b", "-m", "qwen3-30b-a3b", "-H", "h100-sxm", "--tp", "1", "--trainer-gpus", "16",
            "--inference-gpus", "56", "--conversations", "2000"]
    ep = _json(runner, [*base, "--ep", "8"])[0]
    plain = _json(runner, base)[0]
    kv = _json(runner, ["kv", "-m", "qwen3-30b-a3b", "-H", "h100-sxm", "--tp", "1", "--ep", "8",
                        "--context", str(ep["kv"]["context"])])[0]
    assert (ep["ep"], ep["dp"], ep["inference_instances"], ep["inference_replicas"]) == (8, 8, 7, 56)
    assert ep["kv"]["weights_gib_per_gpu"] == pytest.approx(kv["weights_gib_per_gpu"], rel=1e-12)
    assert ep["kv"]["kv_capacity_tokens"] == kv["kv_capacity_tokens"]
    assert ep["weight_sync_time_s"] < plain["weight_sync_time_s"]
    assert "ep" not in plain and "inference_instances" not in plain  # a plain plan's keys are unchanged


# ------------------------------------------------------------------------------ speculative decoding


def _rl(workload: str = "reasoning-rl-olmo3-7b", model: str | None = None, **kw):
    w, spec = load_policy(workload, model)
    inputs = PlanInputs(hardware=load_hardware("h100-sxm"), model=spec, trainer_gpus=16, inference_gpus=56, mode="sync", **kw)
    return plan_workload(w, inputs, conversations=2000), inputs


def test_speculative_decode_throughput_is_the_rooflines_speedup_at_the_plans_batch():
    """Decode of an RL step with EAGLE-3 (k = 3, a = 0.7): the replica decodes ``B`` tokens per
    ``(t_verify(B) + t_draft(B)) / E`` seconds with ``E = (1 - 0.7^4) / 0.3 = 2.533``, so at the
    plan's batch ``B`` and mean context ``c`` its decode throughput is :func:`spec_step`'s
    speed-up times the plain one, and the decode GPU-seconds are
    ``decode positions / B x time per token x tp x slowdown``."""
    plan, inputs = _rl(speculative=EAGLE3)
    f = plan.speculative
    b, c = f["decode_batch"], f["decode_context_tokens"]
    target, drafter = spec_pricers(inputs.model, inputs.hardware, _roofline_inputs(inputs), EAGLE3)
    ref = spec_step(target, drafter, EAGLE3, b, c)
    assert f["tokens_per_step"] == pytest.approx(2.533, rel=1e-9)
    assert f["speedup"] == pytest.approx(ref.speedup, rel=1e-9)
    assert f["time_per_token_s"] == pytest.approx(ref.time_per_token_s * plan.rollout_slowdown, rel=1e-9)
    w, _ = load_policy("reasoning-rl-olmo3-7b")
    from capplan.plan.work import prepare

    decode_tokens = prepare(w, inputs.model, 2000).work.decode_tokens
    assert plan.decode_gpu_s == pytest.approx(decode_tokens / plan.decode_batch * f["time_per_token_s"] * plan.tp, rel=1e-9)
    assert f["speedup"] > 1.5  # memory-bound decode of an 8B-class model at batch ~16


def _roofline_inputs(inputs: PlanInputs):
    """The roofline inputs of a plan's replica (plain layout)."""
    from capplan.roofline import RooflineInputs

    return RooflineInputs(tp=inputs.tp, weight_dtype=inputs.weight_dtype, kv_dtype=inputs.kv_dtype, engine=inputs.engine)


def test_acceptance_zero_never_helps_a_plan():
    """At acceptance 0 a verify step yields one token (``E = 1``) and costs a verify and a draft:
    the RL step is never shorter and the serving fleet never smaller or faster per token."""
    zero = SpecInputs(method="eagle3", num_speculative_tokens=3, acceptance_rate=0.0)
    plain, _ = _rl()
    spec0, _ = _rl(speculative=zero)
    assert spec0.speculative["tokens_per_step"] == 1.0 and spec0.speculative["speedup"] <= 1.0
    assert spec0.step_time_s >= plain.step_time_s and spec0.decode_gpu_s >= plain.decode_gpu_s
    w, m = load_policy("eagle3-serving")
    h = load_hardware("h100-sxm")
    s_plain = plan_serving(w, PlanInputs(hardware=h, model=m), 20000)
    s_zero = plan_serving(w, PlanInputs(hardware=h, model=m, speculative=zero), 20000)
    assert s_zero.replicas >= s_plain.replicas
    assert s_zero.tpot_s["p50"] >= s_plain.tpot_s["p50"] and s_zero.speculative["speedup"] <= 1.0


def test_eagle3_serving_plan_uses_its_speculative_block(runner):
    """``capplan plan eagle3-serving`` decodes with the workload's EAGLE-3 block (2.53 tokens a
    step): fewer replicas meet the 20 ms TPOT target than plain decoding needs
    (``--spec-method none``), each at a larger batch (so its TPOT, 11.0 ms at p95, is not below
    plain decoding's 10.6 ms on more replicas), and the drafter's memory comes out of the KV
    capacity."""
    spec = _json(runner, ["plan", "eagle3-serving", "-H", "h100-sxm", "--conversations", "20000"])[0]
    plain = _json(runner, ["plan", "eagle3-serving", "-H", "h100-sxm", "--conversations", "20000", "--spec-method", "none"])[0]
    f = spec["speculative"]
    assert (f["method"], f["num_speculative_tokens"], f["acceptance_rate"]) == ("eagle3", 3, 0.7)
    assert f["acceptance_source"] == "the workload's speculative.acceptance_rate"
    assert f["kv_capacity_tokens"] < f["kv_capacity_tokens_without"] and spec["kv_capacity_tokens"] == f["kv_capacity_tokens"]
    assert spec["replicas"] < plain["replicas"] and "speculative" not in plain
    assert spec["tpot_s"]["p95"] <= 0.020 and spec["targets_met"]
    text = runner.invoke(app, ["plan", "eagle3-serving", "-H", "h100-sxm", "--conversations", "20000"]).output
    assert "speculative decoding: eagle3, 3 drafted" in text.replace("\n", " ")


def test_rl_acceptance_is_read_at_the_planned_trainer_step(write_yaml):
    """An acceptance schedule of 0.8 at step 0 and 0.6 at step 200 gives 0.7 at step 100 (linear),
    and the plan says where it came from; a later step (lower acceptance) plans a longer step."""
    from capplan.plan.inputs import speculative_setting
    from capplan.workload import load_workload

    text = open("workloads/reasoning-rl-olmo3-7b.yaml").read() + (
        "\nspeculative:\n  method: eagle3\n  num_speculative_tokens: 3\n  acceptance_by_step:\n"
        "    - {step: 0, acceptance_rate: 0.8}\n    - {step: 200, acceptance_rate: 0.6}\n")
    w = load_workload(write_yaml(text))
    s100, source = speculative_setting(w.speculative, step=100)
    assert s100.acceptance_rate == pytest.approx(0.7) and source.endswith("at trainer step 100")
    early, _ = _rl(speculative=speculative_setting(w.speculative, step=0)[0])
    late, _ = _rl(speculative=speculative_setting(w.speculative, step=200)[0])
    assert early.speculative["tokens_per_step"] > late.speculative["tokens_per_step"]
    assert early.step_time_s < late.step_time_s


# ------------------------------------------------------------------------------ disaggregation


def test_disaggregated_serving_plan_is_capplan_disagg_size_pools():
    """The plan's pools are :func:`capplan.disagg.size_pools` called directly on a TP4 fp8 replica
    of Llama-3.1-70B with the sample's mean prompt and answer, the KV transfer of that prompt over
    the network, and the workload's TTFT and TPOT targets."""
    from capplan import disagg
    from capplan.benchmark import server_for
    from capplan.engine import default_engine

    w, m = load_policy("disagg-serving")
    h = load_hardware("h100-sxm")
    assert w.serving.disaggregated
    inputs = PlanInputs(hardware=h, model=m, tp=4, weight_dtype="fp8", kv_dtype="fp8", disaggregated=True,
                        prefill_decode_ratios=(2.0,))
    plan = plan_serving(w, inputs, 20000)
    mix = serving_mix(w, 20000)
    P, O = float(np.mean(mix.prompt_tokens)), float(np.mean(mix.output_tokens))
    server = server_for(m, h, tp=4, weight_dtype="fp8", kv_dtype="fp8", engine=default_engine())  # the plan's engine terms
    x = disagg.kv_transfer_s(m, h, P, "fp8", decode_tp=4)
    ref = disagg.size_pools(server, server, 10.0, P, O, 1.5, 0.04, transfer_s=x, prefill_gpus_per_instance=4,
                            decode_gpus_per_instance=4)
    f = plan.disaggregated
    for key, value in ref.as_dict().items():
        assert f[key] == (pytest.approx(value, rel=1e-12) if isinstance(value, float) else value), key
    assert f["gpus"] == ref.prefill_gpus + ref.decode_gpus and f["aggregated_plan_gpus"] == plan.gpus
    ratio2 = disagg.pools_at_ratio(server, server, 10.0, P, O, 2.0, 1.5, 0.04, transfer_s=x, prefill_gpus_per_instance=4,
                                   decode_gpus_per_instance=4)
    assert f["by_ratio"][0]["prefill_gpus"] == ratio2.prefill_gpus and f["by_ratio"][0]["tpot_s"] == pytest.approx(ratio2.tpot_s)
    assert ratio2.prefill_gpus / ratio2.decode_gpus >= 2.0 and ratio2.ttft_s <= 1.5 and ratio2.tpot_s <= 0.04


def test_disaggregated_serving_example_prints_both_layouts(runner):
    """``capplan plan disagg-serving`` (``serving.disaggregated: true``) prints the pools beside
    the aggregated fleet; ``--aggregated`` leaves them out of the JSON."""
    result = runner.invoke(app, ["plan", "disagg-serving", "-H", "h100-sxm", "--conversations", "20000"])
    assert result.exit_code == 0, result.output
    assert "disaggregated prefill/decode pools" in result.output and "prefill : decode GPUs" in result.output
    plain = _json(runner, ["plan", "disagg-serving", "-H", "h100-sxm", "--conversations", "20000", "--aggregated"])[0]
    assert "disaggregated" not in plain


def test_rl_disaggregated_reports_the_rollout_pool_ratio():
    """``--disaggregated`` on an RL workload reports :func:`capplan.disagg.rollout_pool_ratio` for
    its mean invocation and leaves the step (planned on aggregated replicas) unchanged."""
    from capplan.disagg import rollout_pool_ratio
    from capplan.plan.features import replica_server
    from capplan.plan.replica import replica_setup
    from capplan.plan.work import prepare

    plain, inputs = _rl("agentic-tool-rl")
    pooled, _ = _rl("agentic-tool-rl", disaggregated=True)
    f = pooled.disaggregated
    assert pooled.step_time_s == plain.step_time_s
    w, _ = load_policy("agentic-tool-rl")
    prepared = prepare(w, inputs.model, 2000)
    setup = replica_setup(w, prepared, inputs.model, inputs.hardware, 1, time_scale=pooled.rollout_slowdown)
    server = replica_server(setup, None)
    assert f["prefill_instances_per_decode_instance"] == pytest.approx(
        rollout_pool_ratio(server, server, f["prompt_tokens"], f["output_tokens"]), rel=1e-12)


# ------------------------------------------------------------------------------ CPU KV tier


def test_cpu_kv_tier_gives_back_contexts_the_gpu_lost():
    """An agentic workload on replicas with 40% of their memory thrashes (positions recomputed
    after eviction and preemption). A 200 GiB tier per GPU holds what does not fit; loading a
    position (~2 us over PCIe) beats prefilling it again, so the recomputed positions fall, the
    loaded ones appear, and the step is shorter; a 1 GiB tier holds little and helps little."""
    w, m = load_policy("agentic-tool-rl")
    h = load_hardware("h100-sxm")

    def plan(gib):
        return plan_workload(w, PlanInputs(hardware=h, model=m, trainer_gpus=8, inference_gpus=2, gpu_mem_util=0.4, mode="sync",
                                           kv_offload_gib=gib), conversations=2000)

    none, small, big = plan(None), plan(1.0), plan(200.0)
    assert none.recompute_fraction > 0.5 and none.kv_offload is None
    assert big.kv_offload["load_beats_recompute"] and big.kv_offload["loaded_tokens_per_step"] > 0
    assert big.recompute_tokens_per_step < 0.1 * none.recompute_tokens_per_step
    assert big.step_time_s < 0.9 * none.step_time_s
    assert none.step_time_s >= small.step_time_s >= big.step_time_s
    assert big.ledger_per_step["loaded_from_cpu_tier"]["total"] == pytest.approx(big.kv_offload["loaded_tokens_per_step"])
    assert big.kv_offload["break_even_tokens"] >= 1


# ------------------------------------------------------------------------------ sweep


def _csv(path) -> list[dict]:
    return list(csv.DictReader(io.StringIO(path.read_text())))


@pytest.mark.parametrize(
    "dimension, values, plan_flags",
    [
        (["--ep", "1,8"], [("ep", "1"), ("ep", "8")], [[], ["--ep", "8"]]),
        (["--spec-method", "eagle3", "--acceptance-rate", "0.7", "--spec-tokens", "1,4"],
         [("spec_num_speculative_tokens", "1"), ("spec_num_speculative_tokens", "4")],
         [["--spec-method", "eagle3", "--acceptance-rate", "0.7", "--spec-tokens", "1"],
          ["--spec-method", "eagle3", "--acceptance-rate", "0.7", "--spec-tokens", "4"]]),
    ],
    ids=["ep", "spec-tokens"],
)
def test_sweep_feature_dimension_equals_plan_cell_by_cell(runner, tmp_path, dimension, values, plan_flags):
    """Each sweep row of an ``--ep`` or ``--spec-tokens`` grid is ``capplan plan`` of that cell with
    both GPU counts given (sync): the same step time, trained tokens/s and decode batch."""
    out = tmp_path / "grid.csv"
    common = ["reasoning-rl-olmo3-7b", "-m", "qwen3-30b-a3b", "-H", "h100-sxm", "--tp", "1", "--conversations", "2000"]
    result = runner.invoke(app, ["sweep", *common, *dimension, "--inference-gpus", "16,56", "--trainer-gpus", "16", "-o", str(out)])
    assert result.exit_code == 0, result.output
    rows = _csv(out)
    assert len(rows) == 4
    for (column, value), flags in zip(values, plan_flags):
        for gpus in ("16", "56"):
            row = next(r for r in rows if r[column] == value and r["inference_gpus"] == gpus)
            plan = _json(runner, ["plan", *common, *flags, "--inference-gpus", gpus, "--trainer-gpus", "16", "--mode", "sync"])[0]
            assert float(row["step_time_s"]) == pytest.approx(plan["step_time_s"], rel=1e-9)
            assert float(row["trained_tokens_per_s"]) == pytest.approx(plan["trained_tokens_per_s"], rel=1e-9)
            assert float(row["decode_batch_sequences"]) == pytest.approx(plan["decode_batch"], rel=1e-9)
            if column == "spec_num_speculative_tokens":
                assert float(row["spec_speedup"]) == pytest.approx(plan["speculative"]["speedup"], rel=1e-9)


def test_sweep_reads_the_workloads_engine_block(runner, tmp_path, write_yaml):
    """A workload that sets ``tensor_parallel_size: 2`` sweeps tp 2 without ``--tp``, and tp 1
    with ``--tp 1`` (a swept flag gives its own values)."""
    text = open("workloads/reasoning-rl-olmo3-7b.yaml").read() + "\nengine:\n  tensor_parallel_size: 2\n"
    w = write_yaml(text)
    for flags, tp in (([], "2"), (["--tp", "1"], "1")):
        out = tmp_path / f"g{tp}.csv"
        result = runner.invoke(app, ["sweep", str(w), "-H", "h100-sxm", *flags, "--inference-gpus", "8", "--trainer-gpus", "16",
                                     "--conversations", "1000", "-o", str(out)])
        assert result.exit_code == 0, result.output
        assert {r["tp"] for r in _csv(out)} == {tp}


def test_plain_sweep_keeps_its_columns(runner, tmp_path):
    """Without a feature the grid's columns are :data:`capplan.plan.grid.COLUMNS`, unchanged;
    with one, :data:`~capplan.plan.grid.FEATURE_COLUMNS` follow them."""
    from capplan.plan.grid import COLUMNS, FEATURE_COLUMNS

    for flags, columns in (([], COLUMNS), (["--ep", "1,8"], COLUMNS + FEATURE_COLUMNS)):
        out = tmp_path / "g.csv"
        result = runner.invoke(app, ["sweep", "reasoning-rl-olmo3-7b", "-m", "qwen3-30b-a3b", "-H", "h100-sxm", *flags,
                                     "--inference-gpus", "8", "--trainer-gpus", "16", "--conversations", "1000", "-o", str(out),
                                     "--force"])
        assert result.exit_code == 0, result.output
        assert out.read_text().splitlines()[0].split(",") == columns


# ------------------------------------------------------------------------------ what other commands do with the keys


def test_commands_that_do_not_model_a_feature_say_so(runner):
    """``capplan simulate`` does not model speculative decoding: given a workload with a
    ``speculative:`` block it refuses in one line (never silently another setup), and simulates
    plain decoding when asked with ``--spec-method none``."""
    args = ["simulate", "eagle3-serving", "-H", "h100-sxm", "--requests", "200", "--inference-replicas", "1"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert "Error: workload eagle3-serving sets speculative: speculative decoding is not simulated" in result.stderr
    result = runner.invoke(app, [*args, "--spec-method", "none"])
    assert result.exit_code == 0, result.output


def test_plan_csv_gains_feature_columns_only_with_a_feature(runner):
    """A serving plan's CSV keeps :data:`SERVING_CSV_COLUMNS`; with speculative decoding the
    feature columns follow, the speed-up among them."""
    from capplan.cli.plan_cmd import SERVING_CSV_COLUMNS

    plain = runner.invoke(app, ["plan", "chat-serving", "-H", "h100-sxm", "--format", "csv", "--conversations", "5000"])
    assert plain.stdout.splitlines()[0].split(",") == [c for c, _ in SERVING_CSV_COLUMNS]
    spec = runner.invoke(app, ["plan", "eagle3-serving", "-H", "h100-sxm", "--format", "csv", "--conversations", "5000"])
    header = spec.stdout.splitlines()[0].split(",")
    row = dict(zip(header, spec.stdout.splitlines()[1].split(",")))
    assert header[: len(SERVING_CSV_COLUMNS)] == [c for c, _ in SERVING_CSV_COLUMNS]
    assert row["spec_method"] == "eagle3" and float(row["spec_speedup"]) > 1 and math.isfinite(float(row["spec_tokens_per_step"]))
