"""``capplan plan``: the capacity plan, capplan's main job."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from capplan.cli.method_flags import WeightSync
from capplan.cli.registry import CommandSet
from capplan.cli.common import (
    check_gpu_hour_price,
    _kv_help,
    BlockSizeOpt,
    call,
    console,
    dtype_name,
    DtypeOpt,
    emit,
    engine_defaults,
    EngineOpt,
    fail,
    ForceOpt,
    Format,
    FormatOpt,
    KVDtypeOpt,
    engine_settings,
    load_engine_option,
    MaxModelLenOpt,
    MaxNumSeqsOpt,
    EnforceEagerOpt,
    SchedulerPolicyOpt,
    PrefixCachingOpt,
    safe,
    TPOpt,
    workload_settings,
    AcceptanceLengthOpt,
    AcceptanceOpt,
    AlltoallModeOpt,
    DpOpt,
    DraftModelOpt,
    EpOpt,
    ExpertDtypeOpt,
    GemmDtypeOpt,
    KVOffloadGibOpt,
    KVScaleOpt,
    RedundantOpt,
    SpecMethodOpt,
    SpecTokensOpt,
    TwoBatchOverlapOpt,
    engine_features,
    check_engine_layout,
    parse_names,
    warn_known_error,
)

if TYPE_CHECKING:
    from capplan.plan import Plan
    from capplan.plan.serving import ServingPlan


commands = CommandSet()
"""This module's commands (registered by :mod:`capplan.cli.app`)."""


MAX_SPLITS = 2048
"""Default limit on the splits ``--total-gpus`` evaluates (about a millisecond each)."""


class Mode(str, Enum):
    auto = "auto"
    colocated = "colocated"
    sync = "sync"
    async_ = "async"


class AsyncIngest(str, Enum):
    groups = "groups"
    batches = "batches"


def _plan_help(field: str) -> str:
    from capplan.options import field_help

    return field_help("capplan.plan.inputs", "PlanInputs", field)


#: Rows of the plan table and CSV: (label with unit, getter). CSV column names derive from them.
ROWS: list[tuple[str, str, Any]] = [
    ("Concurrency", "", None),
    ("KV capacity per replica [tokens]", "kv_capacity_tokens", lambda p: p.kv["kv_capacity_tokens"]),
    ("KV budget per GPU [GiB]", "kv_budget_gib_per_gpu", lambda p: p.kv["kv_budget_gib_per_gpu"]),
    ("resident conversations per replica", "resident_conversations", lambda p: p.concurrency.get("resident_conversations", 0.0)),
    ("waiting on tools per replica", "waiting_conversations", lambda p: p.concurrency.get("waiting_conversations", 0.0)),
    ("decode batch per replica [sequences]", "decode_batch", lambda p: p.decode_batch),
    ("binding limit", "binding_constraint", lambda p: p.binding_constraint),
    ("Work of one trained step", "", None),
    ("conversations generated (filter x)", "conversations_per_step", lambda p: p.conversations_per_step),
    ("prefill [GPU-s]", "prefill_gpu_s", lambda p: p.prefill_gpu_s),
    ("decode [GPU-s]", "decode_gpu_s", lambda p: p.decode_gpu_s),
    ("teacher scoring [GPU-s]", "score_gpu_s", lambda p: p.score_gpu_s),
    ("generated tokens per GPU-s", "rollout_tokens_per_s_per_gpu", lambda p: p.rollout_tokens_per_s_per_gpu),
    ("MBU / MFU of rollout [fraction]", "mbu_mfu", lambda p: f"{p.mbu:.2f} / {p.mfu:.2f}"),
    ("Tail", "", None),
    ("rollout time [s]", "rollout_time_s", lambda p: p.rollout_time_s),
    ("  work at full batch [s]", "rollout_time_work_s", lambda p: p.rollout_time_work_s),
    ("  longest rollout, shrinking batch [s]", "rollout_time_tail_s", lambda p: p.rollout_time_tail_s),
    ("static batching waste [slot-steps]", "static_batching_waste", lambda p: f"{p.static_batching_waste:.1%}"),
    ("static-batching rollout time [s]", "static_rollout_time_s", lambda p: p.static_rollout_time_s),
    ("Trainer", "", None),
    ("trainer FLOPs per step", "trainer_flops", lambda p: f"{p.trainer_flops:.3g}"),
    ("trainer GPUs (min for memory)", "trainer_gpus", lambda p: f"{p.trainer_gpus} ({p.trainer_gpus_min_memory})"),
    ("trainer time [s]", "trainer_time_s", lambda p: p.trainer_time_s),
    ("weight sync [s]", "weight_sync_time_s", lambda p: p.weight_sync_time_s),
    ("Split", "", None),
    ("mode (max staleness)", "mode", lambda p: f"{p.mode} (K {p.max_staleness})" if p.mode == "async" else p.mode),
    ("inference GPUs (replicas)", "inference_gpus", lambda p: f"{p.inference_gpus} ({p.inference_replicas})"),
    ("step time [s]", "step_time_s", lambda p: p.step_time_s),
    ("  set by", "step_bound_by", lambda p: p.step_bound_by or "-"),
    ("  generation [s]", "generation_s", lambda p: p.phases.get("generation_s", 0.0)),
    ("  log-prob recompute + reference [s]", "logprob_s", lambda p: p.phases.get("logprob_s", 0.0) + p.phases.get("reference_s", 0.0)),
    ("  training [s]", "training_s", lambda p: p.phases.get("training_s", 0.0)),
    ("  weight sync / reshard + framework [s]", "weight_sync_s",
     lambda p: f"{_cell(p.phases.get('weight_sync_s', 0.0))} + {_cell(p.phases.get('overhead_s', 0.0))}"),
    ("trained tokens/s", "trained_tokens_per_s", lambda p: p.trained_tokens_per_s),
    ("trained tokens/s per GPU", "trained_tokens_per_s_per_gpu", lambda p: p.trained_tokens_per_s_per_gpu),
    ("node ratio [inference / trainer nodes]", "node_ratio", lambda p: p.node_ratio),
    ("trainer idle [fraction]", "trainer_idle_fraction", lambda p: f"{p.trainer_idle_fraction:.1%}"),
    ("inference idle [fraction]", "inference_idle_fraction", lambda p: f"{p.inference_idle_fraction:.1%}"),
    ("stale, lag >= 1 (mean lag) [fraction]", "stale_fraction", lambda p: f"{p.stale_fraction:.1%} ({p.mean_policy_lag:.2f})"),
    ("recomputed after preemption / eviction [fraction]", "recompute_fraction", lambda p: f"{p.recompute_fraction:.1%}"),
]

#: CSV columns: one row per workload, units in the names, numbers as numbers.
CSV_COLUMNS: list[tuple[str, Any]] = [
    ("workload", lambda p: p.workload),
    ("method", lambda p: p.method),
    ("model", lambda p: p.model),
    ("hardware", lambda p: p.hardware),
    ("trainer_hardware", lambda p: p.trainer_hardware),
    ("tp", lambda p: p.tp),
    ("mode", lambda p: p.mode),
    ("max_staleness", lambda p: p.max_staleness),
    ("kv_capacity_tokens_per_replica", lambda p: p.kv["kv_capacity_tokens"]),
    ("kv_budget_gib_per_gpu", lambda p: p.kv["kv_budget_gib_per_gpu"]),
    ("decode_batch_sequences", lambda p: p.decode_batch),
    ("binding_constraint", lambda p: p.binding_constraint),
    ("conversations_per_step", lambda p: p.conversations_per_step),
    ("prefill_gpu_s", lambda p: p.prefill_gpu_s),
    ("decode_gpu_s", lambda p: p.decode_gpu_s),
    ("score_gpu_s", lambda p: p.score_gpu_s),
    ("rollout_tokens_per_s_per_gpu", lambda p: p.rollout_tokens_per_s_per_gpu),
    ("mbu_fraction", lambda p: p.mbu),
    ("mfu_fraction", lambda p: p.mfu),
    ("rollout_time_s", lambda p: p.rollout_time_s),
    ("rollout_time_work_s", lambda p: p.rollout_time_work_s),
    ("rollout_time_tail_s", lambda p: p.rollout_time_tail_s),
    ("static_batching_waste_fraction", lambda p: p.static_batching_waste),
    ("static_rollout_time_s", lambda p: p.static_rollout_time_s),
    ("trainer_flops", lambda p: p.trainer_flops),
    ("trainer_gpus", lambda p: p.trainer_gpus),
    ("trainer_gpus_min_memory", lambda p: p.trainer_gpus_min_memory),
    ("trainer_time_s", lambda p: p.trainer_time_s),
    ("weight_sync_time_s", lambda p: p.weight_sync_time_s),
    ("inference_gpus", lambda p: p.inference_gpus),
    ("step_time_s", lambda p: p.step_time_s),
    ("trained_tokens_per_s", lambda p: p.trained_tokens_per_s),
    ("node_ratio", lambda p: p.node_ratio),
    ("trainer_idle_fraction", lambda p: p.trainer_idle_fraction),
    ("inference_idle_fraction", lambda p: p.inference_idle_fraction),
    ("stale_fraction", lambda p: p.stale_fraction),
    ("sizing", lambda p: p.sizing),
    ("split_decided_by", lambda p: p.split_decided_by),
    ("step_bound_by", lambda p: p.step_bound_by),
    ("generation_s", lambda p: p.phases.get("generation_s", 0.0)),
    ("logprob_s", lambda p: p.phases.get("logprob_s", 0.0)),
    ("reference_s", lambda p: p.phases.get("reference_s", 0.0)),
    ("training_s", lambda p: p.phases.get("training_s", 0.0)),
    ("overhead_s", lambda p: p.phases.get("overhead_s", 0.0)),
    ("trained_tokens_per_s_per_gpu", lambda p: p.trained_tokens_per_s_per_gpu),
    ("mean_policy_lag", lambda p: p.mean_policy_lag),
    ("recompute_fraction", lambda p: p.recompute_fraction),
    ("trainer_mfu", lambda p: p.trainer_mfu),
    ("weight_sync_pattern", lambda p: p.weight_sync_pattern),
    ("warnings", lambda p: " | ".join(p.warnings)),
]


def _get(d: Any, *keys: str) -> Any:
    """``d[k1][k2]...``, ``None`` where a key is missing (a feature not in use)."""
    for k in keys:
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return d


def _uses_features(plans: list[Any]) -> bool:
    """Whether any plan uses an engine feature (its JSON has a feature key)."""
    return any(p.ep != 1 or p.dp != 1 or p.speculative or p.disaggregated or p.kv_offload for p in plans)


#: CSV columns of the engine features, appended when some plan of the run uses one (the columns
#: of a plain plan are a contract).
FEATURE_CSV_COLUMNS: list[tuple[str, Any]] = [
    ("ep", lambda p: p.ep),
    ("dp", lambda p: p.dp),
    ("instances", lambda p: getattr(p, "inference_instances", None) if hasattr(p, "inference_instances") else p.instances),
    ("spec_method", lambda p: _get(p.speculative, "method")),
    ("spec_num_speculative_tokens", lambda p: _get(p.speculative, "num_speculative_tokens")),
    ("spec_acceptance_rate", lambda p: _get(p.speculative, "acceptance_rate")),
    ("spec_tokens_per_step", lambda p: _get(p.speculative, "tokens_per_step")),
    ("spec_speedup", lambda p: _get(p.speculative, "speedup")),
    ("kv_offload_gib_per_gpu", lambda p: _get(p.kv_offload, "host_kv_gib_per_gpu")),
    ("kv_offload_capacity_tokens", lambda p: _get(p.kv_offload, "capacity_tokens")),
    ("kv_offload_break_even_tokens", lambda p: _get(p.kv_offload, "break_even_tokens")),
]

#: RL plans: the feature columns after :data:`FEATURE_CSV_COLUMNS`.
RL_FEATURE_CSV_COLUMNS: list[tuple[str, Any]] = [
    ("kv_offload_loaded_tokens_per_step", lambda p: _get(p.kv_offload, "loaded_tokens_per_step")),
    ("disagg_prefill_per_decode_instance", lambda p: _get(p.disaggregated, "prefill_instances_per_decode_instance")),
]

#: Serving plans: the feature columns after :data:`FEATURE_CSV_COLUMNS`.
SERVING_FEATURE_CSV_COLUMNS: list[tuple[str, Any]] = [
    ("disagg_prefill_gpus", lambda p: _get(p.disaggregated, "prefill_gpus")),
    ("disagg_decode_gpus", lambda p: _get(p.disaggregated, "decode_gpus")),
    ("disagg_prefill_to_decode_gpu_ratio", lambda p: _get(p.disaggregated, "prefill_to_decode_gpu_ratio")),
    ("disagg_ttft_mean_s", lambda p: _get(p.disaggregated, "ttft_s")),
    ("disagg_tpot_mean_s", lambda p: _get(p.disaggregated, "tpot_s")),
    ("disagg_aggregated_by_mean_gpus", lambda p: _get(p.disaggregated, "aggregated_by_mean_gpus")),
]


def plans_csv(plans: list["Plan"]) -> str:
    """One row per workload; spreadsheet-safe (:func:`capplan.output.to_csv`). The engine-feature
    columns (:data:`FEATURE_CSV_COLUMNS`) follow when a plan uses a feature."""
    from capplan.output import to_csv

    columns = CSV_COLUMNS + (FEATURE_CSV_COLUMNS + RL_FEATURE_CSV_COLUMNS if _uses_features(plans) else [])
    return to_csv([c for c, _ in columns], [[get(p) for _, get in columns] for p in plans])


def _pct_key(p: "ServingPlan") -> str:
    return f"p{p.percentile:g}"


def _ms(v: float | None) -> str:
    return "saturated" if v is None else f"{v * 1e3:,.1f}"


def _ms3(d: dict[str, float | None]) -> str:
    return " / ".join(_ms(d.get(k)) for k in ("p50", "p90", "p99"))


def _target(p: "ServingPlan", d: dict[str, float | None], target: float | None, met: bool) -> str:
    value = _ms(d.get(_pct_key(p)))
    if target is None:
        return f"{value} (no target)"
    return f"{value} ({'meets' if met else 'MISSES'} {target * 1e3:,.1f})"


def _usd(v: float | None, digits: int = 3) -> str:
    return "-" if v is None else f"{v:,.{digits}f}"


#: Rows of the serving table: (label with unit, getter); ``None`` getters are section headings.
SERVING_ROWS: list[tuple[str, Any]] = [
    ("Fleet", None),
    ("replicas x tp = GPUs", lambda p: f"{p.replicas:,} x {p.tp} = {p.gpus:,}"),
    ("binding constraint", lambda p: p.binding_constraint),
    ("arrival rate [req/s]: fleet / replica", lambda p: f"{p.arrival_rate_per_s:,.4g} / {p.per_replica_rate_per_s:,.4g}"),
    ("replica capacity [req/s] (limited by)", lambda p: f"{p.capacity_per_replica_per_s:,.4g} ({p.capacity_limited_by})"),
    ("utilisation (limit)", lambda p: f"{p.utilisation:.1%} ({p.max_utilisation:.0%})"),
    ("decode batch per replica [sequences] (limit)", lambda p: f"{p.decode_batch:,.1f} ({p.batch_limit:,.0f})"),
    ("Latency, queueing included", None),
    ("TTFT p50 / p90 / p99 [ms]", lambda p: _ms3(p.ttft_s)),
    ("TTFT at the target percentile [ms] (target)", lambda p: f"{_pct_key(p)}: " + _target(p, p.ttft_s, p.ttft_target_s, p.ttft_met)),
    ("TPOT p50 / p90 / p99 [ms]", lambda p: _ms3(p.tpot_s)),
    ("TPOT at the target percentile [ms] (target)", lambda p: f"{_pct_key(p)}: " + _target(p, p.tpot_s, p.tpot_target_s, p.tpot_met)),
    ("ITL p50 / p90 / p99 [ms]", lambda p: _ms3(p.itl_s)),
    ("latency p50 / p99 [s]", lambda p: " / ".join("saturated" if p.e2e_s.get(k) is None else f"{p.e2e_s[k]:,.2f}" for k in ("p50", "p99"))),
    ("targets met", lambda p: "yes" if p.targets_met else "NO"),
    ("Throughput and cost", None),
    ("output / input tokens/s per GPU", lambda p: f"{p.output_tokens_per_s_per_gpu:,.0f} / {p.input_tokens_per_s_per_gpu:,.0f}"),
    ("prompt positions from the prefix cache", lambda p: f"{p.cached_prompt_fraction:.1%}"),
    ("price [USD/GPU-hour]", lambda p: _usd(p.price_usd_per_gpu_hour, 2)),
    ("cost per 1M output / input tokens [USD]", lambda p: f"{_usd(p.cost_usd_per_million_output_tokens)} / {_usd(p.cost_usd_per_million_input_tokens)}"),
]

#: CSV columns of serving plans: one row per workload, units in the names, numbers as numbers.
SERVING_CSV_COLUMNS: list[tuple[str, Any]] = [
    ("workload", lambda p: p.workload),
    ("method", lambda p: p.method),
    ("model", lambda p: p.model),
    ("hardware", lambda p: p.hardware),
    ("tp", lambda p: p.tp),
    ("kv_dtype", lambda p: p.kv_dtype),
    ("weight_dtype", lambda p: p.weight_dtype),
    ("engine_profile", lambda p: p.engine_profile),
    ("arrival_rate_per_s", lambda p: p.arrival_rate_per_s),
    ("burstiness", lambda p: p.burstiness),
    ("percentile", lambda p: p.percentile),
    ("replicas", lambda p: p.replicas),
    ("gpus", lambda p: p.gpus),
    ("binding_constraint", lambda p: p.binding_constraint),
    ("per_replica_rate_per_s", lambda p: p.per_replica_rate_per_s),
    ("capacity_per_replica_per_s", lambda p: p.capacity_per_replica_per_s),
    ("capacity_limited_by", lambda p: p.capacity_limited_by),
    ("utilisation_fraction", lambda p: p.utilisation),
    ("decode_batch_sequences", lambda p: p.decode_batch),
    ("batch_limit_sequences", lambda p: p.batch_limit),
    *[(f"{name}_{k}_s", (lambda name, k: lambda p: getattr(p, f"{name}_s").get(k))(name, k))
      for name in ("ttft", "tpot", "itl", "e2e") for k in ("mean", "p50", "p90", "p99")],
    ("ttft_at_percentile_s", lambda p: p.ttft_s.get(_pct_key(p))),
    ("tpot_at_percentile_s", lambda p: p.tpot_s.get(_pct_key(p))),
    ("ttft_target_s", lambda p: p.ttft_target_s),
    ("tpot_target_s", lambda p: p.tpot_target_s),
    ("ttft_met", lambda p: p.ttft_met),
    ("tpot_met", lambda p: p.tpot_met),
    ("utilisation_met", lambda p: p.utilisation_met),
    ("targets_met", lambda p: p.targets_met),
    ("output_tokens_per_s_per_gpu", lambda p: p.output_tokens_per_s_per_gpu),
    ("input_tokens_per_s_per_gpu", lambda p: p.input_tokens_per_s_per_gpu),
    ("cached_prompt_fraction", lambda p: p.cached_prompt_fraction),
    ("price_usd_per_gpu_hour", lambda p: p.price_usd_per_gpu_hour),
    ("cost_usd_per_million_output_tokens", lambda p: p.cost_usd_per_million_output_tokens),
    ("cost_usd_per_million_input_tokens", lambda p: p.cost_usd_per_million_input_tokens),
    ("sizing", lambda p: p.sizing),
    ("warnings", lambda p: " | ".join(p.warnings)),
]


def serving_csv(plans: list["ServingPlan"]) -> str:
    """One row per serving workload (:data:`SERVING_CSV_COLUMNS`); spreadsheet-safe. The
    engine-feature columns follow when a plan uses a feature."""
    from capplan.output import to_csv

    columns = SERVING_CSV_COLUMNS + (FEATURE_CSV_COLUMNS + SERVING_FEATURE_CSV_COLUMNS if _uses_features(plans) else [])
    return to_csv([c for c, _ in columns], [[get(p) for _, get in columns] for p in plans])


def _instances(p: Any) -> str:
    n = p.inference_instances if hasattr(p, "inference_instances") else p.instances
    gpus = p.inference_gpus if hasattr(p, "inference_gpus") else p.gpus
    return f"{n:,} x ({p.tp} x {p.dp}) = {gpus:,}, EP {p.ep}" if (p.ep != 1 or p.dp != 1) else "-"


def _spec_cell(p: Any) -> str:
    f = p.speculative
    if not f:
        return "-"
    a = f"a {f['acceptance_rate']:.3g}" if f.get("acceptance_rate") is not None else f"length {f['acceptance_length']:.3g}"
    return f"{f['method']}, k {f['num_speculative_tokens']}, {a}: {f['tokens_per_step']:.2f}"


def _uses(p: Any, feature: str) -> bool:
    """Whether plan ``p`` uses ``feature`` (``layout``, ``speculative``, ``kv_offload``, ``disaggregated``)."""
    return (p.ep != 1 or p.dp != 1) if feature == "layout" else bool(getattr(p, feature))


#: Table rows of the engine features: (label, feature, getter), shown when some plan uses that feature.
FEATURE_ROWS: list[tuple[str, str, Any]] = [
    ("instances x (tp x dp) = GPUs", "layout", _instances),
    ("speculative: drafter, k, acceptance: tokens/step", "speculative", _spec_cell),
    ("decode per token [ms]: speculative / plain", "speculative", lambda p: "-" if not p.speculative else
     f"{p.speculative['time_per_token_s'] * 1e3:,.2f} / {p.speculative['decode_step_s'] * 1e3:,.2f} ({p.speculative['speedup']:.2f}x)"),
    ("KV capacity with the drafter [tokens]", "speculative", lambda p: "-" if not p.speculative or "kv_capacity_tokens" not in p.speculative
     else f"{p.speculative['kv_capacity_tokens']:,} ({p.speculative['kv_capacity_tokens_without']:,} without)"),
    ("CPU KV tier per GPU [GiB] (positions)", "kv_offload", lambda p: "-" if not p.kv_offload else
     f"{p.kv_offload['host_kv_gib_per_gpu']:g} ({p.kv_offload['capacity_tokens']:,})"),
    ("  load beats recompute from [tokens]", "kv_offload", lambda p: "-" if not p.kv_offload else f"{p.kv_offload['break_even_tokens']:,}"),
]

#: RL plans: feature rows after :data:`FEATURE_ROWS`.
RL_FEATURE_ROWS: list[tuple[str, str, Any]] = [
    ("  loaded from it / recomputed per step [positions]", "kv_offload", lambda p: "-" if not p.kv_offload else
     f"{p.kv_offload['loaded_tokens_per_step']:,.0f} / {p.kv_offload['recomputed_tokens_per_step']:,.0f}"),
    ("prefill per decode instance (disaggregated)", "disaggregated", lambda p: "-" if not p.disaggregated else
     f"{p.disaggregated['prefill_instances_per_decode_instance']:,.3g}"),
]


def _feature_rows(table: Any, plans: list[Any], extra: list[tuple[str, str, Any]] | None = None) -> None:
    """The rows of the engine features some plan of the table uses."""
    from rich.markup import escape

    rows = [(label, get) for label, feature, get in FEATURE_ROWS + (extra or []) if any(_uses(p, feature) for p in plans)]
    if not rows:
        return
    table.add_row("[bold]Engine features[/bold]", *([""] * len(plans)))
    for label, get in rows:
        table.add_row(escape(label), *(safe(str(get(p))) for p in plans))


def render_disaggregated(out: Any, plans: list["ServingPlan"]) -> None:
    """Disaggregated pools beside the aggregated fleets, one table per plan that has them."""
    from rich.markup import escape
    from rich.table import Table

    for p in plans:
        f = p.disaggregated
        if not f:
            continue
        t = Table(title=f"{escape(p.workload)}: disaggregated prefill/decode pools and aggregated replicas; targets by the mean "
                  f"(capplan.disagg), the plan's at p{p.percentile:g}", title_justify="left")
        t.add_column("", no_wrap=True)
        for name in ("disaggregated", "aggregated", f"plan (p{p.percentile:g})"):
            t.add_column(name, justify="right", no_wrap=True)
        rows = [
            ("GPUs", f"{f['gpus']:,}", f"{f['aggregated_by_mean_gpus']:,}", f"{p.gpus:,}"),
            ("prefill : decode GPUs", f"{f['prefill_gpus']:,} : {f['decode_gpus']:,}", "-", "-"),
            ("  ratio", f"{f['prefill_to_decode_gpu_ratio']:.2f}", "-", "-"),
            ("  replicas the targets need", f"{f['prefill_instances']:,.2f} : {f['decode_instances']:,.2f}", "-", "-"),
            ("TTFT [ms]", f"{f['ttft_s'] * 1e3:,.0f}", f"{f['aggregated_by_mean_ttft_s'] * 1e3:,.0f}", _ms(p.ttft_s.get(_pct_key(p)))),
            ("TPOT [ms]", f"{f['tpot_s'] * 1e3:,.1f}", f"{f['aggregated_by_mean_tpot_s'] * 1e3:,.1f}", _ms(p.tpot_s.get(_pct_key(p)))),
            ("load (prefill pool; replica)", f"{f['prefill_utilisation']:.0%}", "-", f"{p.utilisation:.0%}"),
            ("KV transfer [ms]", f"{f['kv_transfer_s'] * 1e3:,.1f}", "-", "-"),
            ("decode batch per replica", f"{f['decode_batch']:,.0f}", "-", f"{p.decode_batch:,.1f}"),
        ]
        for r in f.get("by_ratio", []):
            rows.append((f"at prefill:decode {r['ratio']:g}", f"{r['prefill_gpus']:,} : {r['decode_gpus']:,}", "-", "-"))
            rows.append(("  TTFT / TPOT [ms]", f"{r['ttft_s'] * 1e3:,.0f} / {r['tpot_s'] * 1e3:,.1f}", "-", "-"))
        for row in rows:
            t.add_row(*(escape(c) for c in row))
        out.print(t)
        out.print(f"{escape(p.workload)}: pools sized by capplan.disagg for the mean request ({f['prompt_tokens']:,.0f}-token prompts, "
                  f"{f['output_tokens']:,.0f}-token answers); every pool instance is a replica of tp {p.tp}; TTFT, TPOT and load are "
                  "those of the replicas the targets need (whole replicas run below them; the ratio rows give whole pools); the decode "
                  f"pool's batch is limited by {escape(f['decode_limited_by'])}; the KV of each prompt goes over the network to its "
                  "decode replica.")


def render_serving(plans: list["ServingPlan"], explain: bool) -> None:
    """Print serving plans as one table (a column per workload), their notes and, with ``explain``, the formulas."""
    from rich.markup import escape
    from rich.table import Table

    out = console()
    first = plans[0]
    out.print(
        f"capplan plan (serving) on {first.hardware} (tp {first.tp}, KV {first.kv_dtype}, weights {first.weight_dtype}); "
        f"engine profile {escape(first.engine_profile)} ({escape(first.calibration)}). Requests dealt to replicas round robin; "
        "latencies from the queueing model."
    )
    table = Table(title="Serving plan, one column per workload", title_justify="left")
    table.add_column("", no_wrap=True)
    for p in plans:
        table.add_column(f"{escape(p.workload)}\n({escape(p.model)}, targets at p{p.percentile:g})", justify="right")
    for label, get in SERVING_ROWS:
        if get is None:
            table.add_row(f"[bold]{escape(label)}[/bold]", *([""] * len(plans)))
            continue
        table.add_row(escape(label), *(escape(str(get(p))) for p in plans))
    _feature_rows(table, plans)
    out.print(table)
    render_disaggregated(out, plans)
    for p in plans:
        out.print(f"{escape(p.workload)}: {escape(p.sizing)}.")
        for line in _feature_lines(p):
            out.print(f"{escape(p.workload)}: {escape(line)}.")
        for reason in p.reasons:
            out.print(f"{escape(p.workload)}: [bold]target not met[/bold]: {escape(reason)}.")
        for warning in p.warnings:
            out.print(f"[bold]warning[/bold] {escape(p.workload)}: {escape(warning)}.")
        out.print(f"{escape(p.workload)}: price: {escape(p.price_source)}")
    out.print("Assumptions: " + escape("; ".join(dict.fromkeys(a for p in plans for a in p.assumptions))) + ".")
    if explain:
        for p in plans:
            out.print(f"\n[bold]{escape(p.workload)}: formulas with the numbers substituted[/bold]")
            for line in p.explain:
                out.print("  " + escape(line))


def _ratios(values: list[str] | None) -> list[float]:
    """``--prefill-decode-ratio 1,2 --prefill-decode-ratio 4`` as floats (a one-line error for a non-number)."""
    import math

    out = []
    for item in parse_names(values):
        try:
            value = float(item)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and 0 < value <= 1000):
            raise fail(f"--prefill-decode-ratio {item!r}: a ratio of prefill to decode GPUs is a number in (0, 1,000], e.g. 1,2,4")
        out.append(value)
    return out


def _from_file_note(ctx: typer.Context, workload: Any, f: dict[str, Any], build: Any) -> Any:
    """``build()``, its one-line error prefixed with the workload's engine keys that set the
    expert/data-parallel layout when the flags did not (the message names flags)."""
    from capplan.cli.common import _given
    from capplan.errors import CapplanError

    try:
        return build()
    except CapplanError as exc:
        block = getattr(workload, "engine", None)
        keys = []
        if block is not None:
            for name, key in (("dp", "data_parallel_size"), ("ep", "enable_expert_parallel"), ("redundant_experts", "num_redundant_experts")):
                if getattr(block, key) is not None and not _given(ctx, name):
                    keys.append(f"engine.{key}: {str(getattr(block, key)).lower()}")
        prefix = f"workload {workload.name} sets {', '.join(keys)} (a flag overrides it): " if keys else ""
        raise fail(prefix + str(exc)) from None


def _features(f: dict[str, Any], expert_dtype: str | None, kv_scale: str, alltoall_mode: str, gemm_dtype: str | None) -> dict[str, Any]:
    """The expert/data-parallel, quantisation and overlap keywords of :class:`capplan.plan.PlanInputs`
    that differ from their defaults."""
    from capplan.cli.common import layout_options

    return layout_options(f["ep"], f["dp"], expert_dtype, f["redundant_experts"], kv_scale, f["two_batch_overlap"], alltoall_mode,
                          gemm_dtype)


def _feature_lines(p: Any) -> list[str]:
    """The engine features of one plan in words (:mod:`capplan.plan.features`)."""
    from capplan.plan.features import offload_sentence, rollout_pools_sentence, speculative_sentence

    lines = []
    if p.ep != 1 or p.dp != 1:
        n = p.inference_instances if hasattr(p, "inference_instances") else p.instances
        gpus = p.inference_gpus if hasattr(p, "inference_gpus") else p.gpus
        lines.append(
            f"an instance is tp x dp = {p.tp} x {p.dp} = {p.tp * p.dp} GPUs ({'expert parallelism ' + str(p.ep) if p.ep > 1 else 'data parallelism'}; "
            f"each data-parallel rank of {p.tp} GPU(s) runs its own sequences and KV cache and is one replica here): {gpus:,} GPUs = "
            f"{n:,} instance(s) = {gpus // p.tp:,} replica(s)"
        )
    lines += [x for x in (speculative_sentence(p.speculative), offload_sentence(p.kv_offload)) if x]
    if getattr(p, "method", "") != "serving":
        lines += [x for x in (rollout_pools_sentence(p.disaggregated),) if x]
    elif p.kv_offload:
        lines.append("the CPU KV tier is reported, not used by the serving latency model (it has no prefix that outlives GPU memory)")
    return lines


def _exit_on_unmet_targets(plans: list["ServingPlan"]) -> None:
    """Exit 3, naming why, when a serving plan misses a target (its outputs are already written)."""
    unmet = [p for p in plans if not p.targets_met]
    for p in unmet:
        for reason in p.reasons:
            typer.echo(f"Error: {p.workload}: {reason}", err=True)
    if unmet:
        raise typer.Exit(3)


def _cell(v: Any) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, int):
        return f"{v:,}"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 1:
        return f"{v:,.2f}"
    return f"{v:.3g}"


def render(plans: list["Plan"], explain: bool) -> None:
    """Print the plans as one table (a column per workload), their notes and, with ``explain``, the formulas."""
    from rich.markup import escape
    from rich.table import Table

    out = console()
    first = plans[0]
    modes = ", ".join(dict.fromkeys(p.mode + (f" (max staleness {p.max_staleness})" if p.mode == "async" else "") for p in plans))
    out.print(
        f"capplan plan on {safe(first.hardware)} (tp {first.tp}, KV {first.kv_dtype}, weights {first.weight_dtype}), trainer on "
        f"{safe(first.trainer_hardware)}, mode {modes}; "
        f"engine profile {escape(first.engine_profile)} ({escape(first.calibration)}). GiB = 2^30 B; FLOP/s and bandwidth decimal."
    )
    table = Table(title="Capacity plan, one column per workload", title_justify="left")
    table.add_column("", no_wrap=True)
    for p in plans:
        # fold, never an ellipsis: two workloads must stay distinguishable at 80 columns
        table.add_column(f"{safe(p.workload)}\n({safe(p.method)}, {safe(p.model)})", justify="right", overflow="fold")
    for label, _, get in ROWS:
        if get is None:
            table.add_row(f"[bold]{escape(label)}[/bold]", *([""] * len(plans)))
            continue
        table.add_row(escape(label), *(safe(_cell(get(p))) for p in plans))
    _feature_rows(table, plans, RL_FEATURE_ROWS)
    out.print(table)
    for p in plans:
        for line in _feature_lines(p):
            out.print(f"{safe(p.workload)}: {escape(line)}.")
        if p.serving:
            serving = p.serving
            out.print(
                f"{safe(p.workload)} (serving): {serving['replicas']} replica(s) of tp {p.tp} for {serving['arrival_rate_per_s']:g} req/s; "
                f"at most {serving['per_replica_requests_per_s']:,.1f} req/s per replica (batch {serving['batch_per_replica']:,.0f}), "
                f"operating batch {serving['operating_batch_per_replica']:,.0f}; TTFT {serving['ttft_s'] * 1e3:,.0f} ms, "
                f"TPOT {serving['tpot_s'] * 1e3:,.1f} ms, p{serving.get('percentile', 95):g} latency {serving['latency_s']:,.1f} s; "
                f"binding: {serving['binding_constraint']}"
                f"{'' if serving['feasible'] else ' - the targets cannot be met at this tp'}"
            )
        out.print(f"{safe(p.workload)}: {escape(p.sizing)}.")
        if p.split_decided_by and p.split_decided_by != "the given GPU counts":
            out.print(f"{safe(p.workload)}: the split was decided by {escape(p.split_decided_by)}.")
        if p.mode_choice:
            rows = "; ".join(
                f"{c['mode']} {c['inference_gpus']}:{c['trainer_gpus']} GPUs, {c['step_time_s']:,.0f} s, {c['trained_tokens_per_s']:,.0f} tokens/s"
                for c in p.mode_choice
            )
            out.print(f"{safe(p.workload)}: colocated or split: {escape(rows)} (inference : trainer).")
        for warning in p.warnings:
            out.print(f"[bold]warning[/bold] {safe(p.workload)}: {escape(warning)}.")
        if p.filter_factor > 1:
            out.print(
                f"{safe(p.workload)}: filtering drops {1 - 1 / p.filter_factor:.0%} of prompt groups, so rollout work per "
                f"trained step is x{p.filter_factor:.2f}."
            )
    out.print("Assumptions: " + escape("; ".join(dict.fromkeys(a for p in plans for a in p.assumptions))) + ".")
    if explain:
        for p in plans:
            out.print(f"\n[bold]{safe(p.workload)}: formulas with the numbers substituted[/bold]")
            for line in p.explain:
                out.print("  " + escape(line))


@commands.command(
    "plan",
    help=(
        "Capacity plan for one or more workloads: concurrency limits, prefill/decode/scoring "
        "GPU-seconds, the tail of a synchronous step, the trainer, and the inference-to-trainer "
        "node ratio, in one of three modes: colocated (generation and training time-share the "
        "GPUs), sync (split GPUs, in series) or async (split GPUs, overlapped, staleness bounded by "
        "--max-staleness). Give both GPU counts to evaluate a split, one to size the other for "
        "balance, neither to size both, or --total-gpus to find the split (and, with --mode auto, "
        "the mode) that maximises trained tokens/s. Warns about KV thrash, a tail beyond the "
        "staleness bound and a split far from balance. A serving workload gets a fleet plan instead: the fewest replicas "
        "that meet its arrival rate and its TTFT/TPOT targets at a percentile, queueing included, with cost per million "
        "tokens; a target no fleet meets (or --inference-gpus too few) exits 3, after writing the outputs.\n\n"
        "Examples:\n\n"
        "\b\n"
        "  capplan plan reasoning-rl-olmo3-7b --hardware h100-sxm\n"
        "  capplan plan reasoning-rl-olmo3-32b --hardware h100-sxm --tp 8 --trainer-gpus 64 --inference-gpus 160\n"
        "  capplan plan agentic-tool-rl reasoning-rl-olmo3-7b --hardware h100-sxm --mode async --max-staleness 2\n"
        "  capplan plan reasoning-rl-olmo3-7b --hardware h100-sxm --total-gpus 72 --explain\n"
        "  capplan plan reasoning-rl-olmo3-7b --hardware h100-sxm --total-gpus 16 --mode colocated\n"
        "  capplan plan chat-serving --hardware h100-sxm --format json --output-dir out/"
    ),
)
def plan(
    ctx: typer.Context,
    workloads: Annotated[list[str], typer.Argument(help="Workload files or bundled names.")],
    hardware: Annotated[str, typer.Option("--hardware", "-H", help="Inference hardware profile (name or path).")],
    tp: TPOpt = 1,
    model: Annotated[
        str | None, typer.Option("--model", "-m", help="Model preset or path (default: each workload's model).")
    ] = None,
    trainer_hardware: Annotated[
        str | None, typer.Option("--trainer-hardware", help="Trainer hardware profile (default: --hardware).")
    ] = None,
    trainer_gpus: Annotated[int | None, typer.Option("--trainer-gpus", help="Trainer GPUs (default: sized).", min=1)] = None,
    inference_gpus: Annotated[
        int | None,
        typer.Option("--inference-gpus", help="Inference GPUs (default: sized); for a serving workload, the fleet to evaluate.", min=1),
    ] = None,
    inference_replicas: Annotated[
        int | None,
        typer.Option("--inference-replicas", help="Inference replicas, as capplan simulate counts them: --inference-gpus "
                     "divided by --tensor-parallel-size (give one of the two).", min=1),
    ] = None,
    total_gpus: Annotated[
        int | None, typer.Option("--total-gpus", help="Fixed total: choose the split maximising trained tokens/s.", min=1)
    ] = None,
    mode: Annotated[Mode, typer.Option("--mode", help=_plan_help("mode"))] = Mode.auto,
    max_staleness: Annotated[int, typer.Option("--max-staleness", help=_plan_help("max_staleness"), min=0)] = 1,
    async_ingest: Annotated[
        AsyncIngest, typer.Option("--async-ingest", help=_plan_help("async_ingest"))
    ] = AsyncIngest.groups,
    inflight_updates: Annotated[
        bool, typer.Option("--inflight-updates/--drain-updates", help=_plan_help("inflight_updates"))
    ] = True,
    weight_sync: Annotated[WeightSync, typer.Option("--weight-sync", help=_plan_help("weight_sync"))] = WeightSync.auto,
    trainer_mfu: Annotated[
        float | None, typer.Option("--trainer-mfu", help=_plan_help("trainer_mfu"), min=0.0, max=1.0)
    ] = None,
    rollout_slowdown: Annotated[
        float | None, typer.Option("--rollout-slowdown", help=_plan_help("rollout_slowdown"), min=1.0)
    ] = None,
    step_overhead: Annotated[
        float | None, typer.Option("--step-overhead", help=_plan_help("step_overhead_s"), min=0.0)
    ] = None,
    kv_dtype: KVDtypeOpt = "bf16",
    weight_dtype: DtypeOpt = "bf16",
    gpu_memory_utilization: Annotated[
        float | None, typer.Option("--gpu-memory-utilization", "--gpu-mem-util", help=_kv_help("gpu_mem_util"))
    ] = None,
    engine: EngineOpt = None,
    max_num_seqs: MaxNumSeqsOpt = None,
    enforce_eager: EnforceEagerOpt = None,
    scheduler_policy: SchedulerPolicyOpt = None,
    max_num_batched_tokens: Annotated[
        int | None,
        typer.Option("--max-num-batched-tokens", "--max-batched-tokens", help=_kv_help("max_batched_tokens"), min=1),
    ] = None,
    block_size: BlockSizeOpt = None,
    max_model_len: MaxModelLenOpt = None,
    prefix_caching: PrefixCachingOpt = None,
    pp: Annotated[
        int, typer.Option("--pipeline-parallel-size", "-pp", "--pp", help="Pipeline-parallel degree; plan models 1 only.", min=1)
    ] = 1,
    conversations: Annotated[
        int | None, typer.Option("--conversations", help="Monte Carlo sample size (default: the workload's).", min=1)
    ] = None,
    max_grid_cells: Annotated[
        int,
        typer.Option("--max-grid-cells", help="Most splits --total-gpus may evaluate (one per replica count; raise it deliberately).", min=1),
    ] = MAX_SPLITS,
    gpu_hour_price: Annotated[
        float | None,
        typer.Option(
            "--gpu-hour-price", help="Price of one GPU-hour in USD for a serving plan's cost per million tokens "
            "(default: the workload's serving.price_usd_per_gpu_hour, else the hardware profile's); in [0.0001, 10,000].",
        ),
    ] = None,
    ep: EpOpt = 1,
    dp: DpOpt = None,
    expert_dtype: ExpertDtypeOpt = None,
    redundant_experts: RedundantOpt = 0,
    kv_scale: KVScaleOpt = "tensor",
    two_batch_overlap: TwoBatchOverlapOpt = False,
    alltoall_mode: AlltoallModeOpt = "auto",
    gemm_dtype: GemmDtypeOpt = None,
    spec_method: SpecMethodOpt = None,
    spec_tokens: SpecTokensOpt = None,
    acceptance_rate: AcceptanceOpt = None,
    acceptance_length: AcceptanceLengthOpt = None,
    draft_model: DraftModelOpt = None,
    acceptance_step: Annotated[
        int | None,
        typer.Option("--acceptance-step", help="RL workloads: the trainer step at which to read the workload's "
                     "speculative.acceptance_by_step (it falls as the policy drifts from the drafter) [steps]; default 0.", min=0),
    ] = None,
    disaggregated: Annotated[
        bool | None,
        typer.Option("--disaggregated/--aggregated", help=_plan_help("disaggregated") + " Default: the workload's "
                     "serving.disaggregated (serving), aggregated.", show_default=False),
    ] = None,
    prefill_decode_ratio: Annotated[
        list[str] | None, typer.Option("--prefill-decode-ratio", help=_plan_help("prefill_decode_ratios") + " A list: 1,2,4.")
    ] = None,
    kv_offload_gib: KVOffloadGibOpt = None,
    explain: Annotated[bool, typer.Option("--explain", help="Print every formula with the numbers substituted.")] = False,
    format: FormatOpt = Format.table,
    output_dir: Annotated[
        Path | None,
        typer.Option(
            "--output-dir", help="Write plan.json, and plan.csv (training workloads) and plan-serving.csv (serving workloads), "
            "here (atomically; never overwriting without --force); the table still prints, unless --format json or csv: then "
            "the files replace standard output, which stays empty.", file_okay=False,
        ),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite existing files in --output-dir.")] = False,
) -> None:
    from capplan.hardware import load_hardware
    from capplan.output import ensure_new, to_json, write_atomic
    from capplan.plan import PlanInputs, plan_workload
    from capplan.plan.inputs import load_policy, load_teacher, speculative_setting
    from capplan.plan.serving import plan_serving

    from capplan.cli.method_flags import ASYNC_FLAGS, PLAN_FLAGS, given, method_flag_error, mode_flag_error

    from capplan.workload import check_sample_size

    if gpu_hour_price is not None:
        check_gpu_hour_price(gpu_hour_price)
    if inference_gpus and inference_replicas:
        raise fail("--inference-gpus with --inference-replicas: give one (GPUs = replicas x --tensor-parallel-size)")
    if total_gpus and (trainer_gpus or inference_gpus or inference_replicas):
        counts = "--trainer-gpus" if trainer_gpus else "--inference-gpus" if inference_gpus else "--inference-replicas"
        raise fail(f"--total-gpus with {counts}: give --total-gpus alone (capplan chooses the split) or the GPU counts without it")
    flags = given(ctx, PLAN_FLAGS)
    # reported after the method check, so a flag the workload's method cannot take is named first
    mode_clash = mode_flag_error(mode.value, given(ctx, ASYNC_FLAGS), chooses_mode=bool(total_gpus), max_staleness=max_staleness)
    hw = call(lambda: load_hardware(hardware))
    thw = call(lambda: load_hardware(trainer_hardware)) if trainer_hardware else hw
    plans = []
    for name in workloads:
        workload, spec = call(lambda: load_policy(name, model, draft_model is not None))
        e = engine_defaults(
            ctx, workload, features=True, tp=tp, pp=pp, kv_dtype=kv_dtype, weight_dtype=weight_dtype,
            gpu_memory_utilization=gpu_memory_utilization, engine=engine, max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens, block_size=block_size, max_model_len=max_model_len,
            prefix_caching=prefix_caching, enforce_eager=enforce_eager,
        )
        f = engine_features(ctx, workload, e["tp"], ep=ep, dp=dp, redundant_experts=redundant_experts,
                            two_batch_overlap=two_batch_overlap, kv_offload_gib=kv_offload_gib)
        check_engine_layout(ctx, name, workload, spec, e["tp"], e["pp"], f)
        if total_gpus and total_gpus // e["tp"] > max_grid_cells:
            raise fail(
                f"--total-gpus {total_gpus:,} at tp {e['tp']} means {total_gpus // e['tp']:,} splits to evaluate, above --max-grid-cells "
                f"{max_grid_cells:,}: raise --tensor-parallel-size, give --inference-gpus and --trainer-gpus, or raise --max-grid-cells"
            )
        if e["pp"] != 1:
            raise fail(f"--pipeline-parallel-size {e['pp']}: plan models replicas of one pipeline stage (1); capplan kv gives "
                       "pipeline-parallel memory")
        engine_profile = engine_settings(
            warn_known_error(load_engine_option(e["engine"], e["enforce_eager"], scheduler_policy), [hw.name], spec),
            block_size=e["block_size"],
            max_num_seqs=e["max_num_seqs"],
            max_num_batched_tokens=e["max_num_batched_tokens"],
        )
        workload = workload_settings(workload, prefix_caching=e["prefix_caching"], max_model_len=e["max_model_len"])
        call(lambda: check_sample_size(workload, conversations))
        wrong = method_flag_error(workload.name, workload.method, flags, PLAN_FLAGS) or mode_clash
        if wrong:
            raise fail(wrong)
        teacher = call(lambda: load_teacher(workload))
        sinp, source = call(lambda: speculative_setting(
            workload.speculative if workload.has_rollout else None, spec_method, spec_tokens, acceptance_rate, acceptance_length,
            draft_model, acceptance_step))
        disagg = disaggregated if disaggregated is not None else bool(workload.serving and workload.serving.disaggregated)
        if disagg and not workload.has_rollout:
            raise fail(f"--disaggregated does not apply to {workload.name} (method {workload.method}): it has no inference engine")
        ratios = tuple(_ratios(prefill_decode_ratio))
        inputs = _from_file_note(ctx, workload, f, lambda: PlanInputs(
                hardware=hw, model=spec, trainer_hardware=thw, teacher=teacher, tp=e["tp"], kv_dtype=dtype_name(e["kv_dtype"]),
                weight_dtype=dtype_name(e["weight_dtype"]), gpu_mem_util=e["gpu_memory_utilization"], engine=engine_profile,
                trainer_gpus=trainer_gpus, total_gpus=total_gpus,
                inference_gpus=inference_replicas * e["tp"] if inference_replicas else inference_gpus,
                mode=mode.value, max_staleness=max_staleness, async_ingest=async_ingest.value,  # type: ignore[arg-type]
                inflight_updates=inflight_updates, weight_sync=weight_sync.value,  # type: ignore[arg-type]
                trainer_mfu=trainer_mfu, rollout_slowdown=rollout_slowdown, step_overhead_s=step_overhead,
                speculative=sinp, speculative_source=source,
                acceptance_step=(acceptance_step or 0) if "acceptance_by_step" in source else None,
                disaggregated=disagg, prefill_decode_ratios=ratios, kv_offload_gib=f["kv_offload_gib"],
                **_features(f, expert_dtype, kv_scale, alltoall_mode, gemm_dtype),
            ))
        if workload.method == "serving":
            plans.append(call(lambda: plan_serving(workload, inputs, conversations, gpu_hour_price)))
        else:
            plans.append(call(lambda: plan_workload(workload, inputs, conversations=conversations)))
    docs = [p.as_dict() for p in plans]
    serving = [p for p in plans if p.method == "serving"]
    training = [p for p in plans if p.method != "serving"]
    if format is Format.csv and serving and training and output_dir is None:
        raise fail("serving and training workloads have different CSV columns: plan them in separate runs (or use --output-dir)")
    if output_dir is not None:
        targets = {output_dir / "plan.json": to_json(docs)}
        if training:
            targets[output_dir / "plan.csv"] = plans_csv(training)
        if serving:
            targets[output_dir / "plan-serving.csv"] = serving_csv(serving)
        for path in targets:
            call(lambda: ensure_new(path, force))  # nothing is written unless every file may be
        for path, text in targets.items():
            call(lambda: write_atomic(path, text, force=force))
            typer.echo(f"wrote {path}", err=True)
    if format is not Format.table and output_dir is not None:
        pass  # the files hold the JSON and CSV; standard output stays empty
    elif format is Format.json:
        emit(to_json(docs), None, False)
    elif format is Format.csv:
        emit(serving_csv(serving) if serving else plans_csv(training), None, False)
    else:
        if training:
            render(training, explain)
        if serving:
            render_serving(serving, explain)
    _exit_on_unmet_targets(serving)
