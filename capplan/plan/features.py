"""The engine features of a plan as it reports them: expert/data-parallel instances, speculative decoding, disaggregated pools and the CPU KV tier.

Each function returns the JSON object of one feature (``None`` when the feature is off, so a
plain plan's JSON is unchanged) and the sentences the plan states about it. The features
themselves are priced where the plan's steps are (:mod:`capplan.plan.replica`: the layout, the
speculative decode step, the drafter's KV and the CPU tier; :mod:`capplan.plan.rollout`: loads
from the tier instead of recomputation); here they are described.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from capplan.benchmark import RequestMix, Server
    from capplan.plan.inputs import PlanInputs
    from capplan.plan.replica import ReplicaSetup
    from capplan.plan.work import StepWork
    from capplan.speculative import SpecMemory, SpeculativePricer
    from capplan.workload import Workload


def layout_figures(inputs: "PlanInputs", inference_gpus: int) -> dict[str, Any]:
    """``ep``, ``dp`` and the instances of ``tp x dp`` GPUs (empty without expert or data parallelism).

    Parameters
    ----------
    inference_gpus : int
        Inference GPUs of the plan [GPUs].
    """
    dp = inputs.data_parallel
    if inputs.ep == 1 and dp == 1:
        return {}
    return {"ep": inputs.ep, "dp": dp, "instance_gpus": inputs.instance_gpus,
            "inference_instances": inference_gpus // inputs.instance_gpus}


def layout_sentence(inputs: "PlanInputs", inference_gpus: int, replicas_word: str = "replicas") -> str:
    """What an instance is under expert or data parallelism, in words ("" without either)."""
    f = layout_figures(inputs, inference_gpus)
    if not f:
        return ""
    experts = f"expert parallelism {f['ep']} over" if f["ep"] > 1 else "data parallelism over"
    return (f"an instance is tp x dp = {inputs.tp} x {f['dp']} = {f['instance_gpus']} GPUs ({experts} them; each data-parallel rank of "
            f"tp {inputs.tp} GPUs runs its own sequences and KV cache and is one of the {replicas_word} counted here): "
            f"{inference_gpus:,} GPUs = {f['inference_instances']:,} instance(s) = {inference_gpus // inputs.tp:,} rank(s)")


def speculative_figures(
    pricer: "SpeculativePricer | None", memory: "SpecMemory | None", inputs: "PlanInputs", batch: float, context: float,
    time_scale: float = 1.0,
) -> dict[str, Any] | None:
    """The speculative-decoding object of a plan: the setting, where its acceptance comes from,
    tokens per verify step, and the decode step with and without it at the plan's batch.

    Parameters
    ----------
    pricer : SpeculativePricer
        The replica's decode prices (``None``: plain decoding).
    memory : SpecMemory
        The drafter's share of the KV budget.
    batch : float
        The plan's decode batch per replica [sequences].
    context : float
        The mean context of a decode step [positions].

    Notes
    -----
    ``speedup = t_decode(B, c) / ((t_verify(B, c) + t_draft(B, c)) / E)`` at the plan's batch ``B``
    (:func:`capplan.speculative.spec_step`): the decode throughput of a replica at that batch is
    ``speedup`` times the plain one.
    """
    s = inputs.speculative
    if s is None or pricer is None:
        return None
    b = max(float(batch), 1.0)
    scale = time_scale
    plain = float(pricer.target.decode(b, context).step_time_s) * scale
    per_token = float(pricer.decode(b, context).step_time_s) * scale
    verify = float(pricer.verify(b, context).step_time_s) * scale
    draft = float(pricer.draft_s(b, context)) * scale
    out: dict[str, Any] = {
        "method": s.method, "num_speculative_tokens": s.num_speculative_tokens,
        "acceptance_rate": s.acceptance_rate, "acceptance_length": s.acceptance_length,
        "acceptance_source": inputs.speculative_source or "given", "tokens_per_step": s.tokens_per_step,
        "positions_verified_per_sequence": s.positions_verified, "decode_batch": b, "decode_context_tokens": float(context),
        "decode_step_s": plain, "verify_step_s": verify, "draft_s": draft, "time_per_token_s": per_token,
        "speedup": plain / per_token if per_token > 0 else 0.0,
    }
    if inputs.acceptance_step is not None:
        out["acceptance_step"] = inputs.acceptance_step
    if s.draft_model:
        out["draft_model"] = s.draft_model
    if memory is not None:
        m = memory
        out.update({"draft_weights_gib_per_gpu": m.draft_weights_gib_per_gpu,
                    "draft_kv_bytes_per_token_per_gpu": m.draft_kv_bytes_per_token_per_gpu,
                    "kv_capacity_tokens": m.kv_capacity_tokens, "kv_capacity_tokens_without": m.kv_capacity_tokens_without})
    return out


def speculative_sentence(f: dict[str, Any] | None) -> str:
    """The speculative-decoding object in words ("" without it)."""
    if not f:
        return ""
    acceptance = (f"acceptance {f['acceptance_rate']:.3g} per token" if f.get("acceptance_rate") is not None
                  else f"acceptance length {f['acceptance_length']:.3g}")
    memory = ""
    if "kv_capacity_tokens" in f:
        memory = (f"; the drafter takes {f['draft_weights_gib_per_gpu']:.2f} GiB and {f['draft_kv_bytes_per_token_per_gpu']:,.0f} B a "
                  f"position per GPU: KV capacity {f['kv_capacity_tokens']:,} positions ({f['kv_capacity_tokens_without']:,} without)")
    return (f"speculative decoding: {f['method']}, {f['num_speculative_tokens']} drafted, {acceptance} ({f['acceptance_source']}) = "
            f"{f['tokens_per_step']:.2f} tokens per verify step; at batch {f['decode_batch']:,.1f} and context "
            f"{f['decode_context_tokens']:,.0f} a token takes {f['time_per_token_s'] * 1e3:.2f} ms against {f['decode_step_s'] * 1e3:.2f} ms "
            f"plain ({f['speedup']:.2f}x decode throughput){memory}")


def offload_figures(setup: "ReplicaSetup", loaded_tokens: float, recomputed_tokens: float) -> dict[str, Any] | None:
    """The CPU KV tier of a plan: its capacity, load time, break-even prefix, and the positions it
    gave back per step instead of recomputing them (``None`` without a tier).

    Parameters
    ----------
    loaded_tokens, recomputed_tokens : float
        Positions loaded from the tier and prefilled again per step, all replicas [positions].
    """
    tier = setup.offload
    if tier is None:
        return None
    rules = setup.kv_rules
    recompute_per_token = rules.recompute_s_per_token if rules is not None else 0.0
    return {
        **tier.as_dict(), "recompute_s_per_token": recompute_per_token,
        "load_beats_recompute": tier.load_s_per_token < recompute_per_token,
        "loaded_tokens_per_step": float(loaded_tokens), "recomputed_tokens_per_step": float(recomputed_tokens),
    }


def offload_sentence(f: dict[str, Any] | None) -> str:
    """The CPU KV tier in words ("" without one)."""
    if not f:
        return ""
    if "load_beats_recompute" not in f:  # a serving plan's tier: reported only
        return (f"CPU KV tier: {f['host_kv_gib_per_gpu']:g} GiB per GPU holds {f['capacity_tokens']:,} positions a replica over a "
                f"{f['host_link_bandwidth_gbps']:g} GB/s host link; a request alone loads a cached prefix faster than it recomputes it "
                f"from {f['break_even_tokens']:,} positions")
    use = (f"lost contexts (retained prefixes evicted during tool waits, preempted sequences) are loaded back from it at "
           f"{f['load_s_per_token'] * 1e6:.2f} us a position instead of recomputed at {f['recompute_s_per_token'] * 1e6:.2f} us: "
           f"{f['loaded_tokens_per_step']:,.0f} positions a step loaded, {f['recomputed_tokens_per_step']:,.0f} still recomputed"
           if f["load_beats_recompute"] else
           f"loading a position ({f['load_s_per_token'] * 1e6:.2f} us) is not faster than recomputing it "
           f"({f['recompute_s_per_token'] * 1e6:.2f} us), so the plan recomputes")
    return (f"CPU KV tier: {f['host_kv_gib_per_gpu']:g} GiB per GPU holds {f['capacity_tokens']:,} positions a replica over a "
            f"{f['host_link_bandwidth_gbps']:g} GB/s host link; a request alone loads a cached prefix faster than it recomputes it "
            f"from {f['break_even_tokens']:,} positions; {use}")


def replica_server(setup: "ReplicaSetup", engine: Any) -> "Server":
    """A :class:`capplan.benchmark.Server` of the replica's step prices (speculative when the
    replica decodes speculatively) and KV capacity."""
    from capplan.benchmark import Server
    from capplan.engine import default_engine
    from capplan.roofline import step_pricer

    replica, kv = setup.replica, setup.kv
    t = (engine or default_engine()).time_on(replica.hw.name)
    pricer: Any = replica.speculative or step_pricer(replica.spec, replica.hw, replica.roofline_inputs)
    return Server(pricer, kv.max_num_seqs, kv.max_batched_tokens, kv.kv_capacity_tokens, **t.schedule())


def rollout_pools(setup: "ReplicaSetup", work: "StepWork", inputs: "PlanInputs") -> dict[str, Any]:
    """RL rollouts on disaggregated pools: prefill instances per decode instance that keep the
    decoders at their full batch (:func:`capplan.disagg.rollout_pool_ratio`), with the invocation
    shape it is priced at.

    Notes
    -----
    The prompt is an invocation's mean input, ``(prefill forwarded + reused prefix) / invocations``
    (a reused prefix priced as prefilled: an upper bound on the prefill pool), the output its mean
    sampled tokens.
    """
    from capplan.disagg import rollout_pool_ratio

    invocations = max(work.invocations, 1e-9)
    prompt = max((work.prefill_tokens + work.prefill_kv_read) / invocations, 1.0)
    output = max(work.sampled_tokens / invocations, 1.0)
    server = replica_server(setup, inputs.engine)
    ratio = rollout_pool_ratio(server, server, prompt, output)
    return {"prefill_instances_per_decode_instance": ratio, "prompt_tokens": prompt, "output_tokens": output,
            "instance_gpus": inputs.instance_gpus}


def rollout_pools_sentence(f: dict[str, Any] | None) -> str:
    """The RL pool ratio in words ("" without it)."""
    if not f:
        return ""
    return (f"disaggregated rollouts: {f['prefill_instances_per_decode_instance']:.3g} prefill instance(s) per decode instance keep the "
            f"decoders at their full batch (invocations of {f['prompt_tokens']:,.0f} input and {f['output_tokens']:,.0f} sampled tokens; "
            "capplan.disagg.rollout_pool_ratio); the step above is planned on aggregated replicas")


def serving_pools(workload: "Workload", inputs: "PlanInputs", server: "Server", mix: "RequestMix",
                  aggregated_gpus: int) -> dict[str, Any]:
    """A serving workload on disaggregated prefill and decode pools (:func:`capplan.disagg.size_pools`)
    beside aggregated instances meeting the same targets by the mean
    (:func:`capplan.disagg.compare_aggregated`) and the plan's own aggregated fleet; and, for each
    of ``inputs.prefill_decode_ratios``, the smallest pools of that ratio (:func:`capplan.disagg.pools_at_ratio`).

    Notes
    -----
    Every pool instance is one replica of the plan (``tp`` GPUs: a data-parallel rank under
    expert parallelism, rounded up to whole instances of ``tp x dp``). Requests are priced at the
    mean prompt and output of the workload's sample; the KV of each prompt goes over the
    network (:func:`capplan.disagg.kv_transfer_s`). Targets are met by the mean (the aggregated
    plan's, at the workload's percentile).

    Raises
    ------
    InputError
        A target no pool size meets.
    """
    import math

    import numpy as np

    from capplan import disagg

    s = workload.serving
    assert s is not None
    prompt = float(np.mean(mix.prompt_tokens))
    output = float(np.mean(mix.output_tokens))
    tp = inputs.tp
    x = disagg.kv_transfer_s(inputs.model, inputs.hardware, prompt, inputs.kv_dtype, decode_tp=tp, engine=inputs.engine,
                             kv_scale=inputs.kv_scale)
    lam = s.arrival_rate_per_s
    plan = disagg.size_pools(server, server, lam, prompt, output, s.ttft_target_s, s.tpot_target_s, transfer_s=x,
                             prefill_gpus_per_instance=tp, decode_gpus_per_instance=tp)
    unit = inputs.instance_gpus

    def whole(gpus: int) -> int:
        return math.ceil(gpus / unit) * unit

    compared = disagg.compare_aggregated(server, plan, int(round(prompt)), int(round(output)), s.ttft_target_s, s.tpot_target_s,
                                         gpus_per_instance=tp)
    out: dict[str, Any] = {
        **plan.as_dict(), "prefill_gpus": whole(plan.prefill_gpus), "decode_gpus": whole(plan.decode_gpus),
        "gpus": whole(plan.prefill_gpus) + whole(plan.decode_gpus), "prompt_tokens": prompt, "output_tokens": output,
        "targets_by": "mean", "aggregated_by_mean_instances": compared.aggregated_instances,
        "aggregated_by_mean_gpus": whole(compared.aggregated_gpus), "aggregated_by_mean_ttft_s": compared.aggregated_ttft_s,
        "aggregated_by_mean_tpot_s": compared.aggregated_tpot_s, "aggregated_plan_gpus": aggregated_gpus,
    }
    if unit != tp:
        out["prefill_to_decode_gpu_ratio"] = out["prefill_gpus"] / out["decode_gpus"]
    if inputs.prefill_decode_ratios:
        rows = []
        for r in inputs.prefill_decode_ratios:
            p = disagg.pools_at_ratio(server, server, lam, prompt, output, r, s.ttft_target_s, s.tpot_target_s, transfer_s=x,
                                      prefill_gpus_per_instance=tp, decode_gpus_per_instance=tp)
            rows.append({"ratio": r, **p.as_dict(), "gpus": whole(p.prefill_gpus) + whole(p.decode_gpus)})
        out["by_ratio"] = rows
    return out


def serving_pools_lines(f: dict[str, Any] | None) -> list[str]:
    """The disaggregated pools in words (no lines without them)."""
    if not f:
        return []
    lines = [
        f"disaggregated (capplan.disagg, targets by the mean): prefill {f['prefill_gpus']:,} GPUs : decode {f['decode_gpus']:,} GPUs "
        f"= {f['gpus']:,} GPUs (ratio {f['prefill_to_decode_gpu_ratio']:.2f}); prefill at {f['prefill_utilisation']:.0%} load, "
        f"TTFT {f['ttft_s'] * 1e3:,.0f} ms (KV transfer {f['kv_transfer_s'] * 1e3:,.1f} ms), TPOT {f['tpot_s'] * 1e3:,.1f} ms at "
        f"{f['decode_batch']:,.0f} sequences per decode replica ({f['decode_limited_by']})",
        f"aggregated, the same targets by the mean: {f['aggregated_by_mean_gpus']:,} GPUs, TTFT {f['aggregated_by_mean_ttft_s'] * 1e3:,.0f} ms, "
        f"TPOT {f['aggregated_by_mean_tpot_s'] * 1e3:,.1f} ms; the aggregated plan above (targets at its percentile, queueing): "
        f"{f['aggregated_plan_gpus']:,} GPUs",
    ]
    for r in f.get("by_ratio", []):
        lines.append(
            f"at prefill:decode {r['ratio']:g}: {r['prefill_gpus']:,} : {r['decode_gpus']:,} GPUs ({r['gpus']:,}), TTFT {r['ttft_s'] * 1e3:,.0f} ms, "
            f"TPOT {r['tpot_s'] * 1e3:,.1f} ms ({r['decode_limited_by']})"
        )
    return lines


def feature_assumptions(inputs: "PlanInputs", setup: "ReplicaSetup | None" = None) -> list[str]:
    """The assumptions behind the engine features in use (none for a plain plan)."""
    out = []
    if inputs.ep > 1 or inputs.data_parallel > 1:
        out.append(
            f"expert/data parallelism: the {inputs.data_parallel} data-parallel rank(s) of an instance run the same steps, each over its "
            "own sequences; the MoE layers see every rank's tokens, with the engine profile's all-to-all efficiency and load imbalance"
            + ("; two-batch overlap hides part of the all-to-all" if inputs.two_batch_overlap else "")
        )
    if inputs.speculative is not None:
        out.append(
            "speculative decoding: a decode step is priced per output token as (verify + draft) / E with E = (1 - a^(k+1)) / (1 - a) "
            "(Leviathan et al. 2023) and its verify step takes k + 1 positions of each decoding sequence from the scheduler's token "
            "budget; the drafter's weights and KV come out of the KV budget; the k drafted positions a sequence holds while they are "
            "verified are not counted in its KV"
        )
    if setup is not None and setup.offload is not None:
        out.append(
            "CPU KV tier: a position loaded back from host memory is charged in series with the replica's work at the host link's "
            "speed (an upper bound: an engine overlaps the copies with other sequences' steps), and only when that is faster than "
            "prefilling it again"
        )
    return out


def feature_explain(speculative: dict[str, Any] | None, offload: dict[str, Any] | None) -> list[str]:
    """The engine features' formulas with their numbers (``--explain``)."""
    out = []
    if speculative:
        f = speculative
        a = f["acceptance_rate"]
        e_formula = (f"(1 - {a:g}^{f['num_speculative_tokens'] + 1}) / (1 - {a:g})" if a is not None and a < 1 else "given")
        out.append(
            f"speculative decode per token = (verify of {f['decode_batch']:,.1f} x {f['positions_verified_per_sequence']} positions "
            f"{f['verify_step_s'] * 1e3:.2f} ms + {f['num_speculative_tokens']} drafts {f['draft_s'] * 1e3:.2f} ms) / E {e_formula} = "
            f"{f['tokens_per_step']:.3f} -> {f['time_per_token_s'] * 1e3:.2f} ms; plain decode step {f['decode_step_s'] * 1e3:.2f} ms: "
            f"x{f['speedup']:.2f} decode throughput at context {f['decode_context_tokens']:,.0f}"
        )
    if offload:
        f = offload
        out.append(
            f"CPU KV tier = {f['host_kv_gib_per_gpu']:g} GiB x 2^30 / KV bytes a position per GPU = {f['capacity_tokens']:,} positions; "
            f"load {f['load_s_per_token'] * 1e6:.3f} us a position (host link {f['host_link_bandwidth_gbps']:g} GB/s x the engine "
            f"profile's efficiency, and one copy latency a block: capplan.offload.kv_load_s); a request alone loads a cached prefix faster than it recomputes it from {f['break_even_tokens']:,} "
            "positions (capplan.offload.break_even_tokens)"
            + (f"; a position recomputed costs {f['recompute_s_per_token'] * 1e6:.3f} us, so {f['loaded_tokens_per_step']:,.0f} "
               "positions a step are loaded instead" if "loaded_tokens_per_step" in f else "")
        )
    return out
