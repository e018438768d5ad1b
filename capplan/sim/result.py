"""A simulation's result: :class:`SimResult` (the JSON contract) and its assembly from the finished event loop."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

    from capplan.hardware import HardwareProfile
    from capplan.modelspec import ModelSpec
    from capplan.sim.config import RunOptions, SimConfig
    from capplan.sim.conversations import ConversationTable
    from capplan.sim.loop import Simulation
    from capplan.sim.setup import SetupReport
    from capplan.workload import Workload

SUMMARY_KEYS: tuple[str, ...] = (
    "simulated_s",
    "updates",
    "started_trajectories",
    "completed_trajectories",
    "accepted_trajectories",
    "rejected_stale_trajectories",
    "rejected_filtered_trajectories",
    "rejected_surplus_trajectories",
    "unfinished_trajectories",
    "pending_trajectories",
    "completed_trajectories_per_s",
    "accepted_trajectories_per_s",
    "completed_tokens_per_s",
    "accepted_tokens_per_s",
    "trained_tokens_per_s",
    "trainer_idle_fraction",
    "trainer_busy_fraction",
    "trainer_sync_fraction",
    "replica_utilisation",
    "mean_running_batch",
    "kv_occupancy_p50",
    "kv_occupancy_p95",
    "preemptions",
    "recompute_tokens",
    "retained_kv_evictions",
    "rejected_stale_fraction",
    "mean_policy_lag",
    "max_policy_lag",
    "engine_steps",
    "engine_forwarded_tokens",
    "steady_window",
    "step_time_s",
    "steady_trained_tokens_per_s",
    "steady_trainer_idle_fraction",
    "stale_fraction",
    "recompute_fraction",
    "inference_idle_fraction",
)
"""Scalar figures of a simulation, in order (the JSON contract; units in ``docs/simulate.md``)."""

QUEUES: tuple[str, ...] = ("task", "inference_waiting", "running", "environment_waiting", "tool_executing", "result")
"""Queues sampled over time: new conversations not yet admitted, later turns (and recomputes)
waiting for admission, sequences admitted to an engine (prefilling or decoding), tool calls
waiting for an environment worker, tool calls executing, finished trajectories waiting for the
trainer [count]."""

TIMELINE_KEYS: tuple[str, ...] = (
    "t_s", "running_batch", "kv_occupancy", *QUEUES, "trainer_state", "policy_version",
    "completed_trajectories", "accepted_trajectories",
)
"""Per-sample series of ``timeline`` in the JSON (``running_batch`` and ``kv_occupancy`` are means
over replicas; ``trainer_state`` 0 waiting for data, 1 training, 2 pushing weights; the last two
are cumulative counts)."""


@dataclass
class SimResult:
    """One simulation: the summary (JSON contract), queue statistics, the timeline, and the detail.

    ``conversations`` holds per-conversation arrays (for tests) and ``table`` the simulated
    conversations' compact columns (for the trajectory log, which draws the turns again); neither
    is part of the JSON.
    """

    workload: str
    model: str
    hardware: str
    trainer_hardware: str
    config: dict[str, Any]
    setup: dict[str, Any]
    summary: dict[str, Any]
    queues: dict[str, dict[str, float]]
    lag_histogram: dict[str, int]
    token_counters: dict[str, int]
    updates: list[dict[str, float]]
    timeline: dict[str, list[float]]
    assumptions: list[str]
    conversations: dict[str, Any] = field(default_factory=dict, repr=False)
    table: "ConversationTable | None" = field(default=None, repr=False)

    def as_dict(self, timeline: bool = True) -> dict[str, Any]:
        """The JSON contract (see ``docs/simulate.md``)."""
        doc: dict[str, Any] = {
            "workload": self.workload,
            "model": self.model,
            "hardware": self.hardware,
            "trainer_hardware": self.trainer_hardware,
            "config": self.config,
            "setup": self.setup,
            **self.summary,
            "queues": self.queues,
            "lag_histogram": self.lag_histogram,
            "token_counters": self.token_counters,
            "update_log": self.updates,
            "assumptions": self.assumptions,
        }
        if timeline:
            doc["timeline"] = self.timeline
        return doc


def _percentile(values: "np.ndarray | list[float]", q: float) -> float:
    import numpy as np

    a = np.asarray(values, dtype=float)
    return float(np.percentile(a, q)) if a.size else 0.0


def _per_s(count: float, horizon_s: float) -> float:
    return count / horizon_s if horizon_s > 0 else 0.0


def setup_sync_s(sim: "Simulation") -> float:
    """The weight push (or reshard) after each update [s]."""
    return float(sim.setup.weight_sync_s)


def steady_updates_needed(mode: str, max_staleness: int) -> int:
    """Updates a run needs for a steady window (``summary["steady_window"]``): two, after the
    ``2 (K + 1)`` warm-up ones in async (the steps in flight cycle twice)."""
    return 2 * (max_staleness + 1) + 2 if mode == "async" else 2


def build_result(
    workload: "Workload",
    spec: "ModelSpec",
    hw: "HardwareProfile",
    trainer_hw: "HardwareProfile",
    config: "SimConfig",
    options: "RunOptions",
    report: "SetupReport",
    notes: list[str],
    sim: "Simulation",
) -> SimResult:
    """Assemble the :class:`SimResult` of a finished simulation."""
    import numpy as np

    from capplan.sim.conversations import OUTCOME_ACCEPTED, OUTCOME_FILTERED, OUTCOME_STALE, OUTCOME_SURPLUS, OUTCOME_UNFINISHED

    controller = sim.controller
    table = sim.table
    horizon_s = float(controller.horizon or sim.now)
    replicas = sim.replicas
    busy_s = 0.0
    sequence_s = 0.0
    for replica in replicas:
        replica_busy_s, replica_sequence_s = replica.busy_until(horizon_s)
        busy_s += replica_busy_s
        sequence_s += replica_sequence_s
    n = table.count
    start_s = np.frombuffer(table.start_s, dtype=np.float64)[:n]
    end_s = np.frombuffer(table.end_s, dtype=np.float64)[:n]
    started = ~np.isnan(start_s)
    outcome = np.frombuffer(table.outcome, dtype=np.int8)[:n]
    completed = ~np.isnan(end_s)
    rejected = {k: int(v) for k, v in controller.rejected.items()}
    accepted = controller.accepted
    unfinished = int((started & (outcome == OUTCOME_UNFINISHED)).sum())
    lags = np.asarray(controller.accepted_lags, dtype=float)
    samples = sim.samples
    columns = list(zip(*samples)) if samples else [[] for _ in TIMELINE_KEYS]
    timeline = {k: [float(x) for x in column] for k, column in zip(TIMELINE_KEYS, columns)}
    queues = {}
    for q in QUEUES:
        values = timeline[q]
        queues[q] = {"p50": _percentile(values, 50), "p95": _percentile(values, 95), "max": float(max(values)) if values else 0.0}
    kv = sim.kv_samples

    # token counters: the engine's forwarded positions against the ledger's for the same conversations
    ledger = {k: np.frombuffer(column, dtype=np.int64).reshape(-1, 3)[:n] for k, column in table.ledger.items()}
    forwarded = sum(r.forwarded_tokens for r in replicas)
    prefill = np.frombuffer(table.prefill_forwarded, dtype=np.int64)[:n]
    recompute = np.frombuffer(table.recompute_forwarded, dtype=np.int64)[:n]
    decode = np.frombuffer(table.decode_forwarded, dtype=np.int64)[:n]
    done = completed
    counters = {
        "engine_forwarded": int(forwarded),
        "prefill_forwarded": int(prefill.sum()),
        "decode_forwarded": int(decode.sum()),
        "recompute_forwarded": int(recompute.sum()),
        "score_forwarded": int(np.frombuffer(table.score_forwarded, dtype=np.int64)[:n].sum()),
        "completed_prefill_forwarded": int((prefill - recompute)[done].sum()),
        "completed_decode_forwarded": int(decode[done].sum()),
        "ledger_prefill_forwarded": int(ledger["prefill_forwarded"][done].sum()),
        "ledger_cache_hit": int(ledger["cache_hit"][done].sum()),
        "ledger_decode_forwarded": int(ledger["decode_forwarded"][done].sum()),
        "ledger_sampled": int(ledger["sampled"][done].sum()),
        "ledger_trained_accepted": int(ledger["trained"][outcome == OUTCOME_ACCEPTED].sum()),
    }
    completed_n = controller.completed
    log = controller.update_log
    ends = [u["start_s"] + u["train_s"] for u in log]
    # the steady window: from the end of the first update (async: once the K + 1 steps the gate
    # lets in flight have cycled twice, when there are enough updates) to the end of the last
    warm_up = steady_updates_needed(options.mode, options.max_staleness) - 2
    first = max(min(warm_up, len(ends) - 2), 0)
    steady_window = len(ends) - 2 >= warm_up and len(ends) >= 2 and ends[-1] > ends[first]
    if len(ends) >= 2 and ends[-1] > ends[first]:
        span = ends[-1] - ends[first]
        steady_step = span / (len(ends) - 1 - first)
        steady_rate = sum(u["trained_tokens"] for u in log[first + 1:]) / span
        # the trainer's busy time inside the span: the updates after the first and the pushes before them
        steady_busy = sum(u["train_s"] for u in log[first + 1:]) + setup_sync_s(sim) * (len(ends) - 1 - first)
        steady_idle = max(0.0, 1.0 - steady_busy / span)
        steady_lags = np.asarray([lag for lags in controller.update_lags[first + 1:] for lag in lags], dtype=float)
    else:
        steady_step = horizon_s / max(len(ends), 1)
        steady_rate = _per_s(controller.trained_tokens, horizon_s)
        steady_idle = max(0.0, 1.0 - (controller.train_s + controller.sync_s) / horizon_s) if horizon_s > 0 else 0.0
        steady_lags = lags
    summary = {
        "simulated_s": horizon_s,
        "updates": controller.version,
        "started_trajectories": int(started.sum()),
        "completed_trajectories": completed_n,
        "accepted_trajectories": accepted,
        "rejected_stale_trajectories": rejected[OUTCOME_STALE],
        "rejected_filtered_trajectories": rejected[OUTCOME_FILTERED],
        "rejected_surplus_trajectories": rejected[OUTCOME_SURPLUS],
        "unfinished_trajectories": unfinished,
        "pending_trajectories": completed_n - accepted - sum(rejected.values()),
        "completed_trajectories_per_s": _per_s(completed_n, horizon_s),
        "accepted_trajectories_per_s": _per_s(accepted, horizon_s),
        "completed_tokens_per_s": _per_s(controller.completed_tokens, horizon_s),
        "accepted_tokens_per_s": _per_s(controller.accepted_tokens, horizon_s),
        "trained_tokens_per_s": _per_s(controller.trained_tokens, horizon_s),
        "trainer_idle_fraction": max(0.0, 1.0 - (controller.train_s + controller.sync_s) / horizon_s) if horizon_s > 0 else 0.0,
        "trainer_busy_fraction": _per_s(controller.train_s, horizon_s),
        "trainer_sync_fraction": _per_s(controller.sync_s, horizon_s),
        "replica_utilisation": busy_s / (len(replicas) * horizon_s) if horizon_s > 0 else 0.0,
        "mean_running_batch": sequence_s / busy_s if busy_s > 0 else 0.0,
        "kv_occupancy_p50": _percentile(kv, 50),
        "kv_occupancy_p95": _percentile(kv, 95),
        "preemptions": sum(r.preemptions for r in replicas),
        "recompute_tokens": int(recompute.sum()),
        "retained_kv_evictions": sum(r.evictions for r in replicas),
        "rejected_stale_fraction": rejected[OUTCOME_STALE] / completed_n if completed_n else 0.0,
        "mean_policy_lag": float(lags.mean()) if lags.size else 0.0,
        "max_policy_lag": int(lags.max()) if lags.size else 0,
        "engine_steps": int(sum(r.steps_done + r.prompt_steps for r in replicas)),
        "engine_forwarded_tokens": int(forwarded),
        "steady_window": steady_window,
        "step_time_s": steady_step,
        "steady_trained_tokens_per_s": steady_rate,
        "steady_trainer_idle_fraction": steady_idle,
        "stale_fraction": float((steady_lags >= 1).mean()) if steady_lags.size else 0.0,
        "recompute_fraction": int(recompute.sum()) / forwarded if forwarded else 0.0,
        "inference_idle_fraction": 1.0 - busy_s / (len(replicas) * horizon_s) if horizon_s > 0 else 0.0,
    }
    if config.kv_offload_gib is not None:  # the CPU KV tier's figures, only with a tier
        summary.update(offload_summary(replicas, sim.setup.offload))
    run_config = {
        "tp": config.tp,
        "inference_replicas": config.inference_replicas,
        "env_workers": config.env_workers,
        "mode": config.mode,
        "max_staleness": options.max_staleness,
        "max_inflight_groups": config.max_inflight_groups,
        "sampling": config.sampling,
        "oversample": options.oversample if config.sampling == "oversample" else None,
        "static_batching": config.static_batching,
        "inflight_updates": options.inflight_updates,
        "weight_sync": config.weight_sync,
        "steps": config.steps,
        "seed": options.seed,
        "kv_dtype": config.kv_dtype,
        "weight_dtype": config.weight_dtype,
        **config.layout(),  # engine features, only when set (a plain run's keys are unchanged)
        **_feature_config(config),
    }
    conversations = {
        "n": n,
        "started": started,
        "completed": completed,
        "outcome": outcome,
        "start_s": start_s,
        "end_s": end_s,
        "policy_version": np.frombuffer(table.policy_version, dtype=np.int32)[:n].astype(np.int64),
        "trainer_version": np.frombuffer(table.trainer_version, dtype=np.int32)[:n].astype(np.int64),
        "prefill_forwarded": prefill - recompute,
        "recompute_forwarded": recompute,
        "decode_forwarded": decode,
        "ledger": ledger,
    }
    return SimResult(
        workload=workload.name,
        model=spec.name,
        hardware=hw.name,
        trainer_hardware=trainer_hw.name,
        config=run_config,
        setup=report.as_dict(),
        summary=summary,
        queues=queues,
        lag_histogram={str(k): v for k, v in sorted(controller.lags.items())},
        token_counters=counters,
        updates=controller.update_log,
        timeline=timeline,
        assumptions=notes,
        conversations=conversations,
        table=table,
    )


OFFLOAD_SUMMARY_KEYS: tuple[str, ...] = (
    "kv_offload_stores",
    "kv_offload_loads",
    "kv_offload_loaded_tokens",
    "kv_offload_loaded_gib_per_gpu",
    "kv_offload_load_s",
)
"""Summary figures of a run with a CPU KV tier, after :data:`SUMMARY_KEYS` (units in ``docs/simulate.md``)."""


def offload_summary(replicas: Any, offload: Any) -> dict[str, Any]:
    """The CPU KV tier's counters summed over the replicas (:data:`OFFLOAD_SUMMARY_KEYS`)."""
    loaded = int(sum(r.tier_loaded_tokens for r in replicas))
    per_token = offload.bytes_per_token if offload is not None else 0.0
    return {
        "kv_offload_stores": int(sum(r.tier_stores for r in replicas)),
        "kv_offload_loads": int(sum(r.tier_loads for r in replicas)),
        "kv_offload_loaded_tokens": loaded,
        "kv_offload_loaded_gib_per_gpu": loaded * per_token / 2**30,
        "kv_offload_load_s": float(sum(r.tier_load_s for r in replicas)),
    }


def _feature_config(config: "SimConfig") -> dict[str, Any]:
    """Speculative decoding and the CPU KV tier of ``config``, only when set."""
    out: dict[str, Any] = {}
    if config.speculative is not None:
        out["speculative"] = config.speculative.model_dump(exclude_none=True)
        if config.acceptance_by_step is not None:
            out["speculative"]["acceptance_by_step"] = [list(p) for p in config.acceptance_by_step]
    if config.kv_offload_gib is not None:
        out["kv_offload_gib"] = config.kv_offload_gib
    return out
