"""``capplan simulate``: a discrete-event simulation of rollout and training, queue by queue.

The analytic plan (:mod:`capplan.plan`) estimates averages. The simulator plays a workload's
sampled conversations through inference replicas with continuous (or static) batching,
environment workers and a trainer. It shows what the averages hide: queues, tails, KV pressure
and preemption, trainer stalls, and the gap between *completed* and *accepted* throughput when
a freshness bound rejects stale trajectories.

Inputs come from the other modules and are not re-derived here:

* the conversations from :func:`capplan.ledger.sample_conversations` (the same draws, hence the
  same token counters, as ``capplan ledger``), and each invocation's cache hit from
  :func:`capplan.ledger.count_positions`;
* the KV budget, ``max_num_seqs`` and the scheduler token budget from
  :func:`capplan.kv.compute_kv`;
* each engine step's time from :func:`capplan.roofline.engine_step`, through coefficients
  probed once (:mod:`capplan.sim.stepcost`);
* the trainer's step time and the weight sync from :mod:`capplan.trainer`.

The model itself is described in :mod:`capplan.sim.engine` and ``docs/simulate.md``.

Examples
--------
>>> from capplan.workload import load_workload
>>> from capplan.hardware import load_hardware
>>> r = simulate(load_workload("seed-replay-auto"), load_hardware("h100-sxm"), SimConfig(steps=2),
...              model="llama-3.1-8b")
>>> r.summary["accepted_trajectories"], r.summary["rejected_stale_fraction"]
(2, 0.0)
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Literal

from capplan.errors import InputError

if TYPE_CHECKING:
    import numpy as np

    from capplan.hardware import HardwareProfile
    from capplan.modelspec import ModelSpec
    from capplan.sim.engine import Core
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


@dataclass(frozen=True)
class SimConfig:
    """How to run a simulation (everything besides the workload and the hardware)."""

    tp: int = 1
    """Tensor-parallel degree of each inference replica [GPUs]."""
    inference_replicas: int = 1
    """Inference engine replicas [count]."""
    env_workers: int | None = None
    """Environment workers executing tool calls; ``None`` = one per call (no queueing)."""
    trainer_gpus: int | None = None
    """Trainer GPUs; ``None`` = the fewest that hold the sharded state
    (:func:`capplan.trainer.min_trainer_gpus`), or enough for ``training.step_time_target_s``."""
    mode: Literal["sync", "async"] = "sync"
    """``sync``: generation pauses while the trainer updates and pushes weights. ``async``:
    generation continues; trajectories more than ``max_staleness`` versions old are rejected."""
    max_staleness: int = 1
    """Async freshness bound K [policy versions]."""
    sampling: Literal["active", "oversample"] = "active"
    """``active``: the batch is filled continuously from finished groups, filtered groups are
    replaced. ``oversample``: each update dispatches ``oversample x prompts_per_step`` groups and
    trains on the unfiltered ones (at most ``prompts_per_step``)."""
    oversample: float | None = None
    """Groups dispatched per update / prompts per step with ``sampling='oversample'``; default
    ``1 / (1 - filtered_group_fraction)``."""
    static_batching: bool = False
    """Admit a new batch only when the previous one has finished (for comparison)."""
    inflight_updates: bool = False
    """Async: replicas load new weights at their next step boundary, keeping running sequences
    and their KV, instead of draining their running invocations first."""
    steps: int = 10
    """Trainer updates to simulate; the run ends when the last one finishes."""
    seed: int | None = None
    """Seed of every random draw; default ``sampling.seed`` of the workload."""
    kv_dtype: str = "bf16"
    weight_dtype: str = "bf16"
    gpu_mem_util: float = 0.9
    max_num_seqs: int | None = None
    """Scheduler cap on running sequences per replica; default vLLM's for the GPU class."""
    max_batched_tokens: int | None = None
    """Scheduler token budget per step; default vLLM's for the GPU class."""
    max_inflight_groups: int | None = None
    """Async: keep at most this many prompt groups generating, whatever their age; default
    AReaL's staleness gate, ``dispatched - rejected <= (K + version + 1) x prompts_per_step``
    groups, which ties production to the bound."""
    chunk_conversations: int = 8192
    """Conversations drawn at a time (the draw of chunk ``c`` depends only on the seed and ``c``)."""

    def validate(self, workload: "Workload") -> None:
        if self.mode not in ("sync", "async"):
            raise InputError(f"--mode {self.mode}: allowed: sync, async")
        if self.sampling not in ("active", "oversample"):
            raise InputError(f"--sampling {self.sampling}: allowed: active, oversample")
        for name in ("inference_replicas", "steps", "tp", "chunk_conversations"):
            if getattr(self, name) < 1:
                raise InputError(f"--{name.replace('_', '-')} {getattr(self, name)}: must be >= 1")
        if self.max_staleness < 0:
            raise InputError(f"--max-staleness {self.max_staleness}: must be >= 0")
        if self.env_workers is not None and self.env_workers < 1:
            raise InputError(f"--env-workers {self.env_workers}: must be >= 1 (omit it for one worker per call)")
        if self.trainer_gpus is not None and self.trainer_gpus < 1:
            raise InputError(f"--trainer-gpus {self.trainer_gpus}: must be >= 1")
        if self.inflight_updates and self.mode != "async":
            raise InputError("--inflight-updates needs --mode async (a synchronous update has nothing in flight)")
        if self.max_inflight_groups is not None:
            if self.max_inflight_groups < 1:
                raise InputError(f"--max-inflight-groups {self.max_inflight_groups}: must be >= 1")
            if self.mode != "async" or self.sampling != "active":
                raise InputError("--max-inflight-groups needs --mode async and --sampling active")
        if self.oversample is not None and self.oversample < 1:
            raise InputError(f"--oversample {self.oversample}: must be >= 1")
        if not workload.has_rollout or not workload.has_trainer:
            raise InputError(
                f"workload {workload.name}: method {workload.method} has "
                f"{'no rollout engine' if not workload.has_rollout else 'no trainer'}; simulate needs both "
                "(distillation, outcome-rl or multi-turn-rl)"
            )


@dataclass
class SimResult:
    """One simulation: the summary (JSON contract), queue statistics, the timeline, and the detail.

    ``conversations`` holds per-conversation arrays (for tests and the trajectory log) and is not
    part of the JSON.
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
    _core: Any = field(default=None, repr=False)

    def as_dict(self, timeline: bool = True) -> dict[str, Any]:
        """The JSON contract (see ``docs/simulate.md``)."""
        d: dict[str, Any] = {
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
            d["timeline"] = self.timeline
        return d


# ---------------------------------------------------------------------------------------------


def _derive_seed(seed: int, *parts: int) -> int:
    import numpy as np

    return int(np.random.SeedSequence([seed, *parts]).generate_state(1, np.uint64)[0] >> np.uint64(1))


def _drawer(workload: "Workload", n_chunk: int, seed: int) -> Callable[[int], dict[str, Any]]:
    """Chunk ``c`` of conversations: ``sample_conversations`` with a seed derived from ``(seed, c)``."""
    import numpy as np

    from capplan.ledger import count_positions, sample_conversations

    G = workload.volume.samples_per_prompt
    n = max(G, (n_chunk // G) * G)
    f = workload.training.filtered_group_fraction

    def draw(c: int) -> dict[str, Any]:
        conv = sample_conversations(workload, n=n, seed=_derive_seed(seed, c, 0))
        counts, aux = count_positions(workload, conv)
        filt = np.random.default_rng(_derive_seed(seed, c, 1)).random(n // G) < f
        trained = counts["trained"].sum(1)
        return {
            "prompt": conv.prompt.tolist(),
            "actions": conv.actions.tolist(),
            "tools": conv.tools.tolist(),
            "waits": conv.waits_s.tolist(),
            "invoked": conv.invoked.tolist(),
            "called": conv.tool_called.tolist(),
            "inputs": conv.inputs.tolist(),
            "claims": np.minimum(aux["claimed"], conv.inputs).tolist(),
            "record_length": conv.record_length.tolist(),
            "truncated": conv.truncated.tolist(),
            "sampled": conv.actions.sum(1).tolist(),
            "trained": trained.tolist(),
            "filtered": filt.tolist(),
            "kv_max_positions": int(conv.record_length.max()),
            "ledger": {k: v for k, v in counts.items()},
        }

    return draw


def _setup(
    workload: "Workload", spec: "ModelSpec", hw: "HardwareProfile", thw: "HardwareProfile", cfg: SimConfig
) -> tuple[Any, dict[str, Any], list[str]]:
    """Engine constants from the KV calculator, the roofline model and the trainer model."""
    import numpy as np

    from capplan.kv import KVInputs, compute_kv, kv_bytes_per_token_per_layer
    from capplan.roofline import RooflineInputs
    from capplan.sim.engine import EngineSetup
    from capplan.sim.stepcost import step_coefficients
    from capplan.trainer import (
        TRAIN_MFU,
        min_trainer_gpus,
        trainer_step_time_s,
        training_flops,
        weight_sync_time_s,
    )

    kv = compute_kv(
        spec, hw,
        KVInputs(tp=cfg.tp, kv_dtype=cfg.kv_dtype, weight_dtype=cfg.weight_dtype, gpu_mem_util=cfg.gpu_mem_util,
                 max_num_seqs=cfg.max_num_seqs, max_batched_tokens=cfg.max_batched_tokens),
    )
    coeffs = step_coefficients(spec, hw, RooflineInputs(tp=cfg.tp, weight_dtype=cfg.weight_dtype, kv_dtype=cfg.kv_dtype))
    kinds = spec.layer_kinds()
    per_layer = kv_bytes_per_token_per_layer(spec, cfg.kv_dtype, cfg.tp)
    full_b = sum(k == "full" for k in kinds) * per_layer
    window_b = sum(k == "sliding" for k in kinds) * per_layer
    state_b = 0.0
    if spec.linear_attention is not None:
        state_b = sum(k == "linear" for k in kinds) * spec.linear_attention.state_elements_per_layer / cfg.tp * 2
    cap = kv.kv_capacity_tokens * kv.kv_bytes_per_token_per_gpu
    sync_s = weight_sync_time_s(spec, hw, cfg.tp)
    tr = workload.training
    gpus_min = min_trainer_gpus(spec, thw)
    gpus = cfg.trainer_gpus
    sizing = "given"
    if gpus is None:
        gpus, sizing = gpus_min, "fewest GPUs that hold the sharded training state"
        if tr.step_time_target_s is not None:
            from capplan.ledger import sample_conversations

            conv = sample_conversations(workload, n=workload.volume.conversations_per_step, seed=0)
            flops = training_flops(spec, conv.record_length, tr.recompute_logprobs, tr.reference_forward)
            per_gpu = trainer_step_time_s(flops, thw, 1)
            gpus = max(gpus_min, math.ceil(per_gpu / tr.step_time_target_s))
            sizing = f"sized for the workload's {tr.step_time_target_s:g} s step-time target"
    elif gpus < gpus_min:
        from capplan.errors import DoesNotFitError

        raise DoesNotFitError(
            f"--trainer-gpus {gpus}: {spec.name}'s sharded training state needs at least {gpus_min} {thw.name} GPUs"
        )

    def trainer_time(lengths: "np.ndarray") -> float:
        flops = training_flops(spec, lengths, tr.recompute_logprobs, tr.reference_forward)
        return trainer_step_time_s(flops, thw, gpus)

    setup = EngineSetup(
        coeffs=coeffs,
        kv_capacity_bytes=float(cap),
        kv_full_bytes=float(full_b),
        kv_window_bytes=float(window_b),
        kv_state_bytes=float(state_b),
        max_num_seqs=kv.max_num_seqs,
        max_batched_tokens=kv.max_batched_tokens,
        weight_sync_s=float(sync_s),
        trainer_time=trainer_time,
    )
    info = {
        "kv_capacity_tokens": kv.kv_capacity_tokens,
        "kv_budget_gib_per_gpu": kv.kv_budget_gib_per_gpu,
        "max_num_seqs": kv.max_num_seqs,
        "max_batched_tokens": kv.max_batched_tokens,
        "trainer_gpus": gpus,
        "trainer_gpus_sizing": sizing,
        "weight_sync_s": sync_s,
        "single_decode_step_s": coeffs.step_time(1, 1, 1, 1, 0, 0, 1),
    }
    notes = [
        f"engine steps priced by the roofline model with {hw.name}'s assumptions block "
        f"(compute {hw.assumptions.compute_efficiency:g}, bandwidth {hw.assumptions.bandwidth_efficiency:g}, "
        f"step overhead {hw.assumptions.step_overhead_s:g} s)",
        f"trainer: {gpus} x {thw.name}, MFU {TRAIN_MFU:g} (capplan.trainer); weight push {sync_s:.2f} s per update",
        "KV accounted in bytes per GPU without block rounding; an admitted invocation reserves its whole input",
        "a preempted sequence is recomputed (prefilled again) from scratch when readmitted",
        "each conversation stays on one replica; new conversations go to the replica with the fewest",
        "async without in-flight updates: a replica finishes its running invocations, then loads the weights "
        "(paused for the weight push time); with in-flight updates it loads them at its next step boundary",
        "the trainer is busy for the weight push after each update",
    ]
    return setup, info, notes


def simulate(
    workload: "Workload",
    hardware: "HardwareProfile",
    config: SimConfig = SimConfig(),
    *,
    model: "str | ModelSpec | None" = None,
    trainer_hardware: "HardwareProfile | None" = None,
    progress: Callable[[int, int], None] | None = None,
) -> SimResult:
    """Simulate ``config.steps`` trainer updates of ``workload`` on ``hardware``.

    Parameters
    ----------
    workload : Workload
        A workload with a rollout and a trainer (distillation, outcome-rl, multi-turn-rl).
    hardware : HardwareProfile
        Inference GPUs (and trainer GPUs unless ``trainer_hardware`` is given).
    config : SimConfig
        Replicas, mode, staleness, batching, steps, seed.
    model : str or ModelSpec, optional
        Overrides the workload's ``model``.
    progress : callable, optional
        Called with ``(updates_done, updates_total)`` after each update.

    Returns
    -------
    SimResult

    Raises
    ------
    InputError
        Invalid configuration, a workload without a rollout or trainer, no model, a stalled run.
    DoesNotFitError
        The model or one conversation's KV does not fit a replica.

    Notes
    -----
    Throughputs are counts over the simulated time ``T`` (start to the end of the last
    update): ``completed_trajectories_per_s = completed / T``, ``accepted_... = accepted / T``;
    tokens are sampled (policy) tokens of those trajectories. The same seed gives the same
    result, bit for bit.
    """
    from capplan.modelspec import ModelSpec, load_model_spec
    from capplan.sim.engine import Core, EngineOptions

    config.validate(workload)
    if model is None:
        if workload.model is None:
            raise InputError(f"workload {workload.name} names no model: give --model")
        model = workload.model
    spec = model if isinstance(model, ModelSpec) else load_model_spec(model)
    thw = trainer_hardware or hardware
    seed = workload.sampling.seed if config.seed is None else config.seed
    f = workload.training.filtered_group_fraction
    oversample = config.oversample if config.oversample is not None else 1.0 / (1.0 - f)
    setup, info, notes = _setup(workload, spec, hardware, thw, config)
    opts = EngineOptions(
        replicas=config.inference_replicas,
        env_workers=config.env_workers,
        mode=config.mode,
        max_staleness=config.max_staleness,
        sampling=config.sampling,
        oversample=oversample,
        static_batching=config.static_batching,
        inflight_updates=config.inflight_updates,
        steps=config.steps,
        seed=seed,
        max_inflight_groups=config.max_inflight_groups,
    )
    core = Core(workload, setup, opts, _drawer(workload, config.chunk_conversations, seed), progress)
    core.run()
    return _result(workload, spec, hardware, thw, config, seed, oversample, info, notes, core)


def _pct(values: "np.ndarray | list[float]", q: float) -> float:
    import numpy as np

    a = np.asarray(values, dtype=float)
    return float(np.percentile(a, q)) if a.size else 0.0


def _result(workload, spec, hw, thw, config, seed, oversample, info, notes, core: "Core") -> SimResult:  # noqa: ANN001
    import numpy as np

    from capplan.sim.engine import OUT_ACCEPTED, OUT_FILTERED, OUT_NONE, OUT_STALE, OUT_SURPLUS

    T = float(core.horizon or core.t)
    reps = core.reps
    # a run in progress at the horizon counts as busy up to the horizon
    busy = 0.0
    batch_s = 0.0
    for r in reps:
        b, bs = r.busy_s, r.batch_s
        if r.busy:
            part = min(T - r.t0, r.dt)
            b += part
            bs += (r.B + len(r.chunks)) * part
        busy += b
        batch_s += bs
    n = core.n_drawn
    started = np.array([not math.isnan(x) for x in core.c_start[:n]])
    outcome = np.array(core.c_outcome[:n], dtype=np.int8)
    completed = np.array([not math.isnan(x) for x in core.c_end[:n]])
    rejected = {k: int(v) for k, v in core.rejected.items()}
    accepted = core.accepted
    unfinished = int((started & (outcome == OUT_NONE)).sum())
    lags = np.asarray(core.accepted_lags, dtype=float)
    samples = core.samples
    cols = list(zip(*samples)) if samples else [[] for _ in TIMELINE_KEYS]
    timeline = {k: [float(x) for x in col] for k, col in zip(TIMELINE_KEYS, cols)}
    queues = {}
    for q in QUEUES:
        vals = timeline[q]
        queues[q] = {"p50": _pct(vals, 50), "p95": _pct(vals, 95), "max": float(max(vals)) if vals else 0.0}
    kv = core.kv_samples

    # token counters: the engine's forwarded positions against the ledger's for the same conversations
    led = {k: np.concatenate([c[k] for c in core.ledger_chunks])[:n] for k in core.ledger_chunks[0]}
    fwd = sum(r.tokens for r in reps)
    c_pre = np.asarray(core.c_prefill[:n])
    c_rec = np.asarray(core.c_recompute[:n])
    c_dec = np.asarray(core.c_decode[:n])
    done = completed
    counters = {
        "engine_forwarded": int(fwd),
        "prefill_forwarded": int(c_pre.sum()),
        "decode_forwarded": int(c_dec.sum()),
        "recompute_forwarded": int(c_rec.sum()),
        "completed_prefill_forwarded": int((c_pre - c_rec)[done].sum()),
        "completed_decode_forwarded": int(c_dec[done].sum()),
        "ledger_prefill_forwarded": int(led["prefill_forwarded"][done].sum()),
        "ledger_cache_hit": int(led["cache_hit"][done].sum()),
        "ledger_decode_forwarded": int(led["decode_forwarded"][done].sum()),
        "ledger_sampled": int(led["sampled"][done].sum()),
        "ledger_trained_accepted": int(led["trained"][outcome == OUT_ACCEPTED].sum()),
    }
    completed_n = core.completed
    summary = {
        "simulated_s": T,
        "updates": core.version,
        "started_trajectories": int(started.sum()),
        "completed_trajectories": completed_n,
        "accepted_trajectories": accepted,
        "rejected_stale_trajectories": rejected[OUT_STALE],
        "rejected_filtered_trajectories": rejected[OUT_FILTERED],
        "rejected_surplus_trajectories": rejected[OUT_SURPLUS],
        "unfinished_trajectories": unfinished,
        "pending_trajectories": completed_n - accepted - sum(rejected.values()),
        "completed_trajectories_per_s": completed_n / T if T > 0 else 0.0,
        "accepted_trajectories_per_s": accepted / T if T > 0 else 0.0,
        "completed_tokens_per_s": core.completed_tokens / T if T > 0 else 0.0,
        "accepted_tokens_per_s": core.accepted_tokens / T if T > 0 else 0.0,
        "trained_tokens_per_s": core.trained_tokens / T if T > 0 else 0.0,
        "trainer_idle_fraction": max(0.0, 1.0 - (core.train_s + core.sync_s) / T) if T > 0 else 0.0,
        "trainer_busy_fraction": core.train_s / T if T > 0 else 0.0,
        "trainer_sync_fraction": core.sync_s / T if T > 0 else 0.0,
        "replica_utilisation": busy / (len(reps) * T) if T > 0 else 0.0,
        "mean_running_batch": batch_s / busy if busy > 0 else 0.0,
        "kv_occupancy_p50": _pct(kv, 50),
        "kv_occupancy_p95": _pct(kv, 95),
        "preemptions": core.preemptions,
        "recompute_tokens": int(c_rec.sum()),
        "retained_kv_evictions": core.evictions,
        "rejected_stale_fraction": rejected[OUT_STALE] / completed_n if completed_n else 0.0,
        "mean_policy_lag": float(lags.mean()) if lags.size else 0.0,
        "max_policy_lag": int(lags.max()) if lags.size else 0,
        "engine_steps": int(sum(r.nsteps for r in reps)),
        "engine_forwarded_tokens": int(fwd),
    }
    cfg = {
        "tp": config.tp,
        "inference_replicas": config.inference_replicas,
        "env_workers": config.env_workers,
        "mode": config.mode,
        "max_staleness": config.max_staleness if config.mode == "async" else 0,
        "max_inflight_groups": config.max_inflight_groups,
        "sampling": config.sampling,
        "oversample": oversample if config.sampling == "oversample" else None,
        "static_batching": config.static_batching,
        "inflight_updates": config.inflight_updates,
        "steps": config.steps,
        "seed": seed,
        "kv_dtype": config.kv_dtype,
        "weight_dtype": config.weight_dtype,
    }
    conversations = {
        "n": n,
        "started": started,
        "completed": completed,
        "outcome": outcome,
        "start_s": np.asarray(core.c_start[:n]),
        "end_s": np.asarray(core.c_end[:n]),
        "policy_version": np.asarray(core.c_vmin[:n]),
        "trainer_version": np.asarray(core.c_tv[:n]),
        "prefill_forwarded": c_pre - c_rec,
        "recompute_forwarded": c_rec,
        "decode_forwarded": c_dec,
        "ledger": led,
    }
    return SimResult(
        workload=workload.name,
        model=spec.name,
        hardware=hw.name,
        trainer_hardware=thw.name,
        config=cfg,
        setup=info,
        summary=summary,
        queues=queues,
        lag_histogram={str(k): v for k, v in sorted(core.lags.items())},
        token_counters=counters,
        updates=core.update_log,
        timeline=timeline,
        assumptions=notes,
        conversations=conversations,
        _core=core,
    )


# --------------------------------------------------------------------------------------------- sweeps


def sweep_staleness(
    workload: "Workload",
    hardware: "HardwareProfile",
    config: SimConfig,
    bounds: list[int],
    *,
    model: "str | ModelSpec | None" = None,
    trainer_hardware: "HardwareProfile | None" = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[SimResult]:
    """One synchronous run, then one asynchronous run per staleness bound, on the same tasks."""
    runs = [replace(config, mode="sync", max_inflight_groups=None, inflight_updates=False)]
    runs += [replace(config, mode="async", max_staleness=k) for k in bounds]
    total = len(runs) * config.steps
    out = []
    for n, cfg in enumerate(runs):
        cb = None if progress is None else (lambda d, t, n=n: progress(n * config.steps + d, total))
        out.append(simulate(workload, hardware, cfg, model=model, trainer_hardware=trainer_hardware, progress=cb))
    return out


# --------------------------------------------------------------------------------------------- outputs


def trajectory_records(result: SimResult, workload: "Workload") -> Iterator[dict[str, Any]]:
    """Completed trajectories as records of ``capplan ledger reconcile``'s own format, by end time.

    Log-probs are placeholders (``0.0`` for every sampled position): the simulator models that a
    behaviour log-prob is stored, not its value. ``outcome`` (accepted, rejected_stale,
    rejected_filtered, rejected_surplus, unfinished = not yet ingested) and ``simulated`` are
    extra fields the reconciler ignores.
    """
    from capplan.records import trajectory_record
    from capplan.sim.engine import OUTCOME_NAMES

    core = result._core
    conv = result.conversations
    order = sorted((t, i) for i, t in enumerate(core.c_end[: conv["n"]]) if not math.isnan(t))
    for t, i in order:
        inv = core.invoked[i]
        n_inv = next((j for j, x in enumerate(inv) if not x), len(inv))
        hits = core.c_hits[i]
        extra: dict[str, Any] = {"outcome": OUTCOME_NAMES[core.c_outcome[i]], "end_s": t, "simulated": True}
        if core.c_tv[i] >= 0:
            extra["trainer_version"] = core.c_tv[i]
        yield trajectory_record(
            i,
            core.prompt[i],
            [(core.actions[i][j], core.tools[i][j]) for j in range(n_inv)],
            hits,
            loss_on=workload.training.loss_on,
            truncated=core.truncated[i],
            drop_truncated=workload.training.drop_truncated,
            policy_version=core.c_vmin[i],
            tool_wait_s=round(sum(core.waits[i][:n_inv]), 6),
            logprob=0.0,
            extra=extra,
        )


def write_trajectories(result: SimResult, workload: "Workload", path: str | Path, force: bool = False) -> Path:
    """Write :func:`trajectory_records` as JSONL, atomically (never over a file without ``force``)."""
    from capplan.output import write_atomic

    dumps = json.JSONEncoder(separators=(",", ":")).encode
    text = "".join(dumps(r) + "\n" for r in trajectory_records(result, workload))
    return write_atomic(path, text, force=force)


def plot_timeline(result: SimResult, path: str | Path, force: bool = False) -> Path:
    """Plot running batch, KV occupancy, queues and the trainer's state over time (PNG/SVG/PDF).

    Raises
    ------
    InputError
        matplotlib is missing (install the ``plot`` extra), or the file exists without ``force``.
    """
    plt = _pyplot()
    path = Path(path)
    if path.exists() and not force:
        from capplan.errors import OutputExistsError

        raise OutputExistsError(f"{path}: file exists; pass --force to overwrite it")
    tl = result.timeline
    t = tl["t_s"]
    fig, ax = plt.subplots(4, 1, figsize=(9, 8), sharex=True)
    cfg = result.config
    mode = cfg["mode"] + (f", K={cfg['max_staleness']}" if cfg["mode"] == "async" else "")
    fig.suptitle(
        f"{result.workload} on {cfg['inference_replicas']} x {result.hardware} (tp {cfg['tp']}), {mode}"
        f"{', static batching' if cfg['static_batching'] else ''}",
        fontsize=10,
    )
    ax[0].step(t, tl["running_batch"], where="post", lw=0.8)
    ax[0].set_ylabel("running batch\n(per replica)")
    ax[1].step(t, [100 * x for x in tl["kv_occupancy"]], where="post", lw=0.8, color="tab:orange")
    ax[1].set_ylabel("KV occupancy [%]")
    ax[1].set_ylim(0, 105)
    for q, c in (("task", "tab:gray"), ("inference_waiting", "tab:red"), ("environment_waiting", "tab:purple"),
                 ("tool_executing", "tab:green"), ("result", "tab:blue")):
        ax[2].step(t, tl[q], where="post", lw=0.8, label=q.replace("_", " "), color=c)
    ax[2].set_ylabel("queue length")
    ax[2].legend(fontsize=7, ncol=5, loc="lower right", bbox_to_anchor=(1.0, 1.0), frameon=False)
    st = tl["trainer_state"]
    ax[3].fill_between(t, [1 if s == 1 else 0 for s in st], step="post", color="tab:green", alpha=0.6, label="training")
    ax[3].fill_between(t, [1 if s == 2 else 0 for s in st], step="post", color="tab:olive", alpha=0.6, label="pushing weights")
    ax[3].set_yticks([])
    ax[3].set_ylabel("trainer")
    ax[3].legend(fontsize=7, loc="lower right", bbox_to_anchor=(1.0, 1.0), ncol=2, frameon=False)
    ax[3].set_xlabel("simulated time [s]")
    fig.tight_layout()
    return _save_figure(fig, path, force)


def plot_sweep(results: list[SimResult], path: str | Path, force: bool = False) -> Path:
    """Bar chart of completed and accepted trajectories/s per run of :func:`sweep_staleness`."""
    plt = _pyplot()
    names = ["sync" if r.config["mode"] == "sync" else f"async K={r.config['max_staleness']}" for r in results]
    comp = [r.summary["completed_trajectories_per_s"] for r in results]
    acc = [r.summary["accepted_trajectories_per_s"] for r in results]
    idle = [100 * r.summary["trainer_idle_fraction"] for r in results]
    x = list(range(len(results)))
    fig, ax = plt.subplots(figsize=(8, 4.2))
    ax.bar([i - 0.2 for i in x], comp, width=0.4, label="completed", color="tab:gray")
    ax.bar([i + 0.2 for i in x], acc, width=0.4, label="accepted", color="tab:blue")
    for i, r in enumerate(results):
        stale = r.summary["rejected_stale_fraction"]
        if stale > 0:
            ax.annotate(f"stale {stale:.0%}", (i + 0.2, acc[i]), textcoords="offset points", xytext=(0, 3),
                        ha="center", fontsize=8)
    ax.set_xticks(x, names)
    ax.set_ylabel("trajectories / simulated s")
    ax2 = ax.twinx()
    ax2.plot(x, idle, "o-", color="tab:red", label="trainer idle")
    ax2.set_ylabel("trainer idle [%]", color="tab:red")
    ax2.set_ylim(0, 100)
    r0 = results[0]
    ax.set_title(
        f"{r0.workload} on {r0.config['inference_replicas']} x {r0.hardware}: completed vs accepted, same tasks",
        fontsize=10,
    )
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=3, frameon=False)
    fig.tight_layout()
    return _save_figure(fig, path, force)


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise InputError("plotting needs matplotlib: pip install 'capplan[plot]'") from None
    return plt


def _save_figure(fig: Any, path: str | Path, force: bool) -> Path:
    """Save ``fig`` atomically (format from the suffix); never over a file without ``force``."""
    import io
    import os
    import tempfile

    from capplan.errors import OutputExistsError

    plt = _pyplot()
    path = Path(path)
    if path.exists() and not force:
        plt.close(fig)
        raise OutputExistsError(f"{path}: file exists; pass --force to overwrite it")
    buf = io.BytesIO()
    fig.savefig(buf, format=path.suffix.lstrip(".").lower() or "png", dpi=110)
    plt.close(fig)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(buf.getvalue())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
