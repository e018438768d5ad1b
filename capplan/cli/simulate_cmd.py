"""``capplan simulate``: a discrete-event simulation of rollout, tools and trainer."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from capplan.cli.method_flags import WeightSync
from capplan.cli.registry import CommandSet
from capplan.cli.common import (
    AcceptanceLengthOpt,
    AcceptanceOpt,
    AlltoallModeOpt,
    BlockSizeOpt,
    DpOpt,
    DraftModelOpt,
    DtypeOpt,
    EngineOpt,
    EpOpt,
    ExpertDtypeOpt,
    GemmDtypeOpt,
    KVOffloadGibOpt,
    KVScaleOpt,
    RedundantOpt,
    SpecMethodOpt,
    SpecTokensOpt,
    TwoBatchOverlapOpt,
    Format,
    ForceOpt,
    GpuMemUtilOpt,
    KVDtypeOpt,
    MaxBatchedTokensOpt,
    MaxModelLenOpt,
    MaxNumSeqsOpt,
    EnforceEagerOpt,
    SchedulerPolicyOpt,
    PrefixCachingOpt,
    TPOpt,
    call,
    console,
    dtype_name,
    emit,
    engine_defaults,
    engine_settings,
    fail,
    load_engine_option,
    parse_ints,
    parse_names,
    progress_bar,
    safe,
    warn,
    workload_settings,
    warn_known_error,
)

if TYPE_CHECKING:
    from capplan.modelspec import ModelSpec
    from capplan.sim import SimResult

commands = CommandSet()
"""This module's commands (registered by :mod:`capplan.cli.app`)."""


PLOT_HINT = "pip install 'capplan[plot]'"


class Mode(str, Enum):
    colocated = "colocated"
    sync = "sync"
    async_ = "async"


def _sim_help(field: str) -> str:
    from capplan.options import field_help

    return field_help("capplan.sim.config", "SimConfig", field)


class Executor(str, Enum):
    """Where the points of a --sweep run (see ``capplan.scale``)."""

    process = "process"
    ray = "ray"
    serial = "serial"


class Sampling(str, Enum):
    active = "active"
    oversample = "oversample"


@commands.command(
    "simulate",
    help=(
        "Simulate rollout and training event by event: inference replicas with continuous batching (or "
        "static), KV capacity and preemption, prefix reuse across turns and within a GRPO group, tool calls "
        "on environment workers, and a trainer that ingests finished groups, rejects stale ones and pushes "
        "weights (colocated: reshards them on the same GPUs). Shows the queues, tails and stalls an "
        "average hides, and completed against accepted throughput; its steady step and trained tokens/s "
        "are what `capplan plan` predicts for the same settings.\n\n"
        "Conversations are the workload's own draws (the same as `capplan ledger`); engine steps are priced "
        "by the roofline model, KV capacity by the KV calculator, the trainer by the trainer model. The same "
        "--seed gives the same result.\n\n"
        "Examples:\n\n\b\n"
        "  capplan simulate agentic-tool-rl --hardware h100-sxm --inference-replicas 8 --steps 20\n"
        "  capplan simulate agentic-tool-rl -H h100-sxm --inference-replicas 8 --mode async --max-staleness 1\n"
        "  capplan simulate reasoning-rl-olmo3-7b -H h100-sxm --inference-replicas 56 --trainer-gpus 16 \\\n"
        "      --mode async --inflight-updates --output sim.json --timeline sim.png\n"
        "  capplan simulate agentic-tool-rl -H h100-sxm --inference-replicas 8 --sweep-staleness 0,1,2,4\n"
        "  capplan simulate agentic-tool-rl -H h100-sxm --sweep inference_gpus=8:32:8 --sweep mode=sync,async -o grid.csv\n"
        "  capplan simulate seed-replay-auto -m llama-3.1-8b -H h100-sxm --steps 2 --trajectories t.jsonl\n"
        "  capplan simulate chat-serving -H h100-sxm --requests 100000 --records requests.csv\n"
        "  capplan simulate rag-serving -H h100-sxm --inference-replicas 4 --trace trace.jsonl\n\n"
        "A serving workload runs the serving simulator instead: requests arriving (Poisson or gamma at the workload's "
        "rate, or replayed from --trace) are dealt round robin to --inference-replicas replicas (default: the serving "
        "plan's) that batch them continuously with chunked prefill; it prints TTFT, TPOT, ITL and latency percentiles "
        "and goodput (requests meeting the workload's targets per second)."
    ),
)
def simulate(
    ctx: typer.Context,
    workload: Annotated[str, typer.Argument(help="Workload file or bundled name.")],
    hardware: Annotated[str, typer.Option("--hardware", "-H", help="Inference hardware profile name or path.")],
    model: Annotated[
        str | None, typer.Option("--model", "-m", help="Model preset or path (default: the workload's model).")
    ] = None,
    trainer_hardware: Annotated[
        str | None, typer.Option("--trainer-hardware", help="Trainer hardware profile (default: --hardware).")
    ] = None,
    tp: TPOpt = 1,
    inference_replicas: Annotated[
        int, typer.Option("--inference-replicas", help="Inference engine replicas.", min=1)
    ] = 1,
    inference_gpus: Annotated[
        int | None,
        typer.Option("--inference-gpus", help="Inference GPUs, as capplan plan counts them: --inference-replicas times "
                     "--tensor-parallel-size (give one of the two).", min=1),
    ] = None,
    env_workers: Annotated[
        int | None,
        typer.Option("--env-workers", help="Environment workers running tool calls (default: one per call).", min=1),
    ] = None,
    trainer_gpus: Annotated[
        int | None,
        typer.Option("--trainer-gpus", help="Trainer GPUs (default: the fewest that hold the training state, rounded up "
                     "to whole nodes, or enough for the workload's training.step_time_target_s; colocated: every "
                     "inference GPU).", min=1),
    ] = None,
    mode: Annotated[Mode, typer.Option("--mode", help=_sim_help("mode"))] = Mode.sync,
    max_staleness: Annotated[
        int,
        typer.Option("--max-staleness", help="Async: reject trajectories more than K policy versions old.", min=0),
    ] = 1,
    max_inflight_groups: Annotated[
        int | None,
        typer.Option(
            "--max-inflight-groups",
            help="Async: keep at most N prompt groups generating, whatever their age (default: the staleness "
            "gate, (K + version + 1) x prompts_per_step groups dispatched and not rejected).",
            min=1,
        ),
    ] = None,
    sampling: Annotated[
        Sampling,
        typer.Option(
            "--sampling",
            help="active: fill each batch from finished groups, replacing filtered ones; oversample: dispatch "
            "--oversample x prompts per update and train on what survives the filter.",
        ),
    ] = Sampling.active,
    oversample: Annotated[
        float | None,
        typer.Option("--oversample", help="Groups per update / prompts per step (default 1 / (1 - filtered fraction)).", min=1),
    ] = None,
    static_batching: Annotated[
        bool, typer.Option("--static-batching", help="Admit a batch only when the previous one has finished.")
    ] = False,
    inflight_updates: Annotated[
        bool | None,
        typer.Option("--inflight-updates/--drain-updates", help=_sim_help("inflight_updates"), show_default=False),
    ] = None,
    weight_sync: Annotated[WeightSync, typer.Option("--weight-sync", help=_sim_help("weight_sync"))] = WeightSync.auto,
    trainer_mfu: Annotated[
        float | None, typer.Option("--trainer-mfu", help=_sim_help("trainer_mfu"), min=0.0, max=1.0)
    ] = None,
    rollout_slowdown: Annotated[
        float | None, typer.Option("--rollout-slowdown", help=_sim_help("rollout_slowdown"), min=1.0)
    ] = None,
    step_overhead: Annotated[
        float | None, typer.Option("--step-overhead", help=_sim_help("step_overhead_s"), min=0.0)
    ] = None,
    steps: Annotated[int, typer.Option("--steps", help="Trainer updates to simulate.", min=1)] = 10,
    seed: Annotated[int | None, typer.Option("--seed", help="Seed of every draw (default: the workload's).", min=0)] = None,
    kv_dtype: KVDtypeOpt = "bf16",
    weight_dtype: DtypeOpt = "bf16",
    max_num_seqs: MaxNumSeqsOpt = None,
    enforce_eager: EnforceEagerOpt = None,
    scheduler_policy: SchedulerPolicyOpt = None,
    max_batched_tokens: MaxBatchedTokensOpt = None,
    gpu_memory_utilization: GpuMemUtilOpt = None,
    block_size: BlockSizeOpt = None,
    max_model_len: MaxModelLenOpt = None,
    prefix_caching: PrefixCachingOpt = None,
    pp: Annotated[
        int, typer.Option("--pipeline-parallel-size", "-pp", "--pp", help="Pipeline-parallel degree; simulate models 1 only.", min=1)
    ] = 1,
    engine: EngineOpt = None,
    # engine features (docs/features.md), with plan's flags; _engine_features threads them
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
    kv_offload_gib: KVOffloadGibOpt = None,
    disaggregated: Annotated[
        bool | None,
        typer.Option("--disaggregated/--aggregated", help="--disaggregated is not simulated (capplan plan --disaggregated sizes "
                     "prefill and decode pools); --aggregated simulates a workload with serving.disaggregated on aggregated "
                     "replicas. Default: the workload's serving.disaggregated, refused when true.", show_default=False),
    ] = None,
    sweep_staleness: Annotated[
        str | None,
        typer.Option(
            "--sweep-staleness",
            help="Comma-separated bounds, e.g. 0,1,2,4: one sync run and one async run per bound, in one table.",
        ),
    ] = None,
    sweep: Annotated[
        list[str] | None,
        typer.Option(
            "--sweep",
            help="KEY=V1,V2[,...]: simulate every combination of the swept settings, one task per point, in one table "
            "(repeat for more axes; integers take ranges start:stop:step). Keys: SimConfig fields such as "
            "inference_replicas, inference_gpus, tp, mode, max_staleness, max_num_seqs, max_batched_tokens, "
            "gpu_mem_util, kv_dtype, trainer_gpus, steps, seed, sampling (see docs/simulate.md). Exit 1 when a point fails.",
            metavar="KEY=V1,V2",
        ),
    ] = None,
    executor: Annotated[
        Executor,
        typer.Option(help="Where the --sweep points are simulated: a local process pool, a Ray cluster, or serially."),
    ] = Executor.process,
    workers: Annotated[
        int | None,
        typer.Option(help="Processes (or local Ray CPUs) simulating points at once; default: the CPUs available.", min=1),
    ] = None,
    ray_address: Annotated[
        str | None,
        typer.Option(help="Ray cluster to run on (auto or HOST:PORT; needs --executor ray); default: a local Ray instance."),
    ] = None,
    format: Annotated[
        str, typer.Option("--format", "-f", help="Output format: table or json (no CSV: one run's result is nested; a --sweep grid is a table, "
                     "written as CSV, Parquet or JSON by -o's extension).", metavar="[table|json]")
    ] = "table",
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write the full result as JSON to this file (a --sweep grid: .csv, .parquet or .json).", dir_okay=False)
    ] = None,
    trajectories: Annotated[
        Path | None,
        typer.Option(
            "--trajectories",
            help="Write completed trajectories as JSONL in `capplan ledger reconcile`'s format.",
            dir_okay=False,
        ),
    ] = None,
    timeline: Annotated[
        Path | None,
        typer.Option(
            "--timeline",
            help=f"Plot batch, KV occupancy, queues and trainer state over time (.png/.svg; {PLOT_HINT}); "
            "with --sweep-staleness, throughput against the bound.",
            dir_okay=False,
        ),
    ] = None,
    requests: Annotated[
        int | None, typer.Option("--requests", help="Serving: requests to simulate (default 20,000).", min=1, max=50_000_000)
    ] = None,
    request_rate: Annotated[
        float | None,
        typer.Option("--request-rate", help="Serving: the fleet's arrival rate in requests/s (default: the workload's).", min=1e-9),
    ] = None,
    trace: Annotated[
        Path | None,
        typer.Option(
            "--trace", help="Serving: replay this trace instead of drawing requests (CSV or JSONL with arrival times and "
            "input/output lengths: capplan records, Mooncake, BurstGPT or Azure LLM trace columns).", exists=True, dir_okay=False,
        ),
    ] = None,
    records: Annotated[
        Path | None,
        typer.Option("--records", help="Serving: write one record per request (.csv, else JSONL): times, lengths, SLO met.", dir_okay=False),
    ] = None,
    force: ForceOpt = False,
) -> None:
    from capplan.cli.method_flags import SIMULATE_SERVING_FLAGS, given
    from capplan.hardware import load_hardware
    from capplan.sim import SimConfig
    from capplan.workload import load_workload

    if format not in ("table", "json"):
        raise fail(f"--format {format} is not available for simulate; use table or json")
    format = Format(format)
    from capplan.output import ensure_distinct

    call(lambda: ensure_distinct({"--output": output, "--trajectories": trajectories, "--timeline": timeline, "--records": records}))
    axes = _sweep_axes(ctx, sweep, executor, ray_address, output)
    if axes is None and output is not None and output.suffix.lower() in (".csv", ".parquet", ".png", ".svg"):
        raise fail(f"--output {output}: simulate writes its result as JSON; give a .json file (plots go to --timeline)")
    w = call(lambda: load_workload(workload, model_given=model is not None, draft_model_given=draft_model is not None))
    e = engine_defaults(
        ctx, w, features=True, tp=tp, pp=pp, kv_dtype=kv_dtype, weight_dtype=weight_dtype, gpu_memory_utilization=gpu_memory_utilization,
        engine=engine, max_num_seqs=max_num_seqs, max_batched_tokens=max_batched_tokens, block_size=block_size,
        max_model_len=max_model_len, prefix_caching=prefix_caching, enforce_eager=enforce_eager,
    )
    tp, pp, kv_dtype, weight_dtype = e["tp"], e["pp"], e["kv_dtype"], e["weight_dtype"]
    enforce_eager = e["enforce_eager"]
    gpu_memory_utilization, engine, max_num_seqs = e["gpu_memory_utilization"], e["engine"], e["max_num_seqs"]
    max_batched_tokens, block_size = e["max_batched_tokens"], e["block_size"]
    if pp != 1:
        raise fail(f"--pipeline-parallel-size {pp}: simulate models replicas of one pipeline stage (1); capplan kv gives pipeline-parallel memory")
    w = workload_settings(w, prefix_caching=e["prefix_caching"], max_model_len=e["max_model_len"])
    features = _engine_features(ctx, w, tp, ep, dp, expert_dtype, redundant_experts, kv_scale, two_batch_overlap, alltoall_mode,
                                gemm_dtype, (spec_method, spec_tokens, acceptance_rate, acceptance_length, draft_model),
                                kv_offload_gib, disaggregated)
    model_spec = None
    if model or w.model:  # a layout the model cannot run, named by what set it (flag or engine: key), before any work
        from capplan.cli.common import check_engine_layout, engine_features
        from capplan.modelspec import load_model_spec

        model_spec = call(lambda: load_model_spec(model or w.model))
        check_engine_layout(ctx, workload, w, model_spec, tp, pp, engine_features(
            ctx, w, tp, ep=ep, dp=dp, redundant_experts=redundant_experts, two_batch_overlap=two_batch_overlap,
            kv_offload_gib=kv_offload_gib))
    if inference_gpus is not None:
        if given(ctx, ["inference_replicas"]):
            raise fail("--inference-gpus with --inference-replicas: give one (GPUs = replicas x --tensor-parallel-size)")
        if inference_gpus % tp:
            raise fail(f"--inference-gpus {inference_gpus} is not a multiple of --tensor-parallel-size {tp}")
        instance = tp * _data_parallel(tp, features)
        if inference_gpus % instance:
            raise fail(f"--inference-gpus {inference_gpus}: not a multiple of an instance, --tp x --dp = {tp} x {instance // tp} = {instance}")
        inference_replicas = inference_gpus // tp
    if w.method == "serving":
        if axes is not None:
            raise fail(f"--sweep does not apply to {w.name} (method serving): it sweeps the settings of an RL simulation")
        _simulate_serving(ctx, w, hardware, model, tp, inference_replicas, seed, kv_dtype, weight_dtype, max_num_seqs,
                          max_batched_tokens, engine, format, output, requests, request_rate, trace, records, force, features,
                          enforce_eager, scheduler_policy, model_spec)
        return
    serving_only = given(ctx, SIMULATE_SERVING_FLAGS)
    if serving_only:
        raise fail(f"{next(iter(serving_only.values()))} does not apply to {w.name} (method {w.method}): it drives a serving simulation")
    if sweep_staleness is None and "mode" not in (axes or {}):  # a sweep of modes or bounds runs async points too
        from capplan.cli.method_flags import mode_flag_error

        clash = mode_flag_error(mode.value, given(ctx, ["max_staleness", "inflight_updates"]))
        if clash:
            raise fail(clash)
    bounds = None
    if sweep_staleness is not None:
        bounds = parse_ints(sweep_staleness, "--sweep-staleness", minimum=0)
        if not bounds:
            raise fail(f"--sweep-staleness {sweep_staleness!r}: give at least one bound, e.g. 0,1,2,4")
        if trajectories is not None:
            raise fail("--trajectories writes one run; drop it or --sweep-staleness")
    for path in (output, trajectories, timeline):
        if path is not None and path.exists() and not force:
            raise fail(f"{path}: file exists; pass --force to overwrite it")
    if timeline is not None:
        if timeline.suffix.lower() not in (".png", ".svg"):
            raise fail(f"--timeline {timeline}: give a .png or .svg file name")
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise fail(f"--timeline needs matplotlib, which is not installed; install it with: {PLOT_HINT}") from None

    hw = call(lambda: load_hardware(hardware))
    thw = call(lambda: load_hardware(trainer_hardware)) if trainer_hardware is not None else None
    cfg = call(lambda: SimConfig(
        tp=tp, inference_replicas=inference_replicas, env_workers=env_workers, trainer_gpus=trainer_gpus,
        mode=("async" if bounds is not None else mode.value), max_staleness=max_staleness, max_inflight_groups=max_inflight_groups, sampling=sampling.value, oversample=oversample,  # type: ignore[arg-type]
        static_batching=static_batching, inflight_updates=inflight_updates, steps=steps, seed=seed,
        weight_sync=weight_sync.value, trainer_mfu=trainer_mfu, rollout_slowdown=rollout_slowdown,  # type: ignore[arg-type]
        step_overhead_s=step_overhead,
        kv_dtype=dtype_name(kv_dtype), weight_dtype=dtype_name(weight_dtype), max_num_seqs=max_num_seqs,
        max_batched_tokens=max_batched_tokens, gpu_mem_util=gpu_memory_utilization,
        engine=engine_settings(warn_known_error(load_engine_option(engine, enforce_eager, scheduler_policy), [hw.name], model_spec),
                               block_size=block_size), **features,
    ))
    if bounds is not None:
        _sweep(w, hw, thw, cfg, bounds, model, format, output, timeline, force)
        return
    if axes is not None:
        _grid(w, hw, thw, cfg, axes, model, executor.value, workers, ray_address, format, output, force)
        return
    from capplan.sim import simulate as run

    with progress_bar("simulating updates", steps) as progress:  # --trajectories streams the log to disk as trajectories finish
        result = call(lambda: run(w, hw, cfg, model=model, trainer_hardware=thw, progress=progress,
                                  trajectories=trajectories, force=force))
    for caveat in result.setup.get("caveats", []):
        warn(caveat)
    if not result.summary["steady_window"]:
        warn(_no_steady_window(cfg))
    from capplan.output import to_json

    if format is Format.json:
        emit(to_json(result.as_dict()), None, force)
    else:
        render(result)
    if output is not None:
        emit(to_json(result.as_dict()), output, force)
    if trajectories is not None:
        typer.echo(f"wrote {trajectories}", err=True)
    if timeline is not None:
        from capplan.plots import plot_timeline

        path = call(lambda: plot_timeline(result, timeline, force=force))
        typer.echo(f"wrote {path}", err=True)


def _no_steady_window(cfg: Any, grid_points: list[dict[str, Any]] | None = None) -> str:
    """The warning for runs too short for a steady window (``docs/simulate.md``, ``steady_window``):
    one run, or the points (rows) of a ``--sweep`` grid that had none."""
    from capplan.sim.result import steady_updates_needed

    if grid_points is None:
        need, which = steady_updates_needed(cfg.mode, cfg.max_staleness), f"--steps {cfg.steps}"
    else:
        need = max(steady_updates_needed(p.get("mode", cfg.mode), int(p.get("max_staleness", cfg.max_staleness)))
                   for p in grid_points)
        which = f"{len(grid_points):,} point(s) of the grid"
    return (f"{which}: too few updates for a steady window (async: the first 2 (K + 1) updates are warm-up); the step, "
            f"steady trained tokens/s and idle figures average the warm-up: give --steps {need} or more")


def _engine_features(ctx, w, tp, ep, dp, expert_dtype, redundant_experts, kv_scale, two_batch_overlap, alltoall_mode,  # noqa: ANN001
                     gemm_dtype, spec, kv_offload_gib, disaggregated) -> dict[str, Any]:
    """The engine-feature keywords of :class:`capplan.sim.SimConfig` / ``ServingSimConfig``: the
    flags, with the workload's ``engine:`` keys as defaults (a flag wins, as in ``capplan plan``).
    Speculative decoding (``speculative``, with ``acceptance_by_step`` when the acceptance follows
    the workload's schedule) and the CPU KV tier (``kv_offload_gib``) are simulated for RL
    workloads. A feature the simulator does not model is a one-line error, never a silent other setup."""
    from capplan.cli.common import engine_features, layout_options

    f = engine_features(ctx, w, tp, ep=ep, dp=dp, redundant_experts=redundant_experts, two_batch_overlap=two_batch_overlap,
                        kv_offload_gib=kv_offload_gib)
    src = "the workload's engine.enable_dbo" if f["two_batch_overlap"] and not two_batch_overlap else "--two-batch-overlap"
    if f["two_batch_overlap"]:
        raise fail(f"{src}: the simulator prices a step as max(compute, memory) + communication, which overlapping one "
                   "micro-batch's all-to-all with the other's work is not; capplan plan and capplan roofline price it")
    if disaggregated or (disaggregated is None and w.serving is not None and w.serving.disaggregated):
        flag = "--disaggregated" if disaggregated else f"workload {w.name} sets serving.disaggregated"
        raise fail(f"{flag}: the simulator runs aggregated replicas (prefill and decode on the same GPUs); capplan plan "
                   "--disaggregated sizes the prefill and decode pools and compares them with aggregated ones (--aggregated "
                   "simulates aggregated replicas)")
    out: dict[str, Any] = {}
    block = getattr(w, "speculative", None) if w.has_rollout else None
    if w.method == "serving":
        others = any(v is not None for v in spec[1:])
        if spec[0] == "none":
            if others:
                raise fail("--spec-method none: drop --spec-tokens, --acceptance-rate, --acceptance-length and --draft-model")
        elif spec[0] is not None or others or block is not None:
            flag = "--spec-method" if spec[0] is not None else "--spec-tokens/--acceptance-rate" if others \
                else f"workload {w.name} sets speculative"
            raise fail(f"{flag}: speculative decoding is not simulated for serving workloads (the serving simulator decodes "
                       "one token per sequence per step; the RL simulator simulates it); capplan plan and capplan roofline price "
                       "it (--spec-method none simulates plain decoding)")
        if f["kv_offload_gib"] is not None:
            flag = "--kv-offload-gib" if kv_offload_gib is not None else f"workload {w.name} sets engine.kv_offloading_size"
            raise fail(f"{flag}: the serving simulator keeps no prefixes between requests for a CPU KV tier to hold (the RL "
                       "simulator's tier holds evicted retained prefixes); capplan plan prices the tier's loads")
    else:
        from capplan.plan.inputs import speculative_setting

        setting, source = call(lambda: speculative_setting(block, *spec))
        if setting is not None:
            out["speculative"] = setting
            if source.startswith("the workload's speculative.acceptance_by_step") and block is not None:
                out["acceptance_by_step"] = tuple((float(p.step), float(p.acceptance_rate)) for p in block.acceptance_by_step)
        if f["kv_offload_gib"] is not None:
            out["kv_offload_gib"] = f["kv_offload_gib"]
    return {**call(lambda: layout_options(f["ep"], f["dp"], expert_dtype, f["redundant_experts"], kv_scale, False, alltoall_mode,
                                          gemm_dtype)), **out}


def _data_parallel(tp: int, features: dict[str, Any]) -> int:
    from capplan.kv import resolve_dp

    return resolve_dp(tp, features.get("ep", 1), features.get("dp"))


def _sweep(w, hw, thw, cfg, bounds, model, format, output, timeline, force) -> None:  # noqa: ANN001
    from capplan.output import to_json
    from capplan.plots import plot_sweep
    from capplan.sim import sweep_staleness

    with progress_bar("simulating updates", cfg.steps * (len(bounds) + 1)) as progress:
        results = call(lambda: sweep_staleness(w, hw, cfg, bounds, model=model, trainer_hardware=thw, progress=progress))
    docs = [r.as_dict(timeline=False) for r in results]
    if format is Format.json:
        emit(to_json(docs), None, force)
    else:
        render_sweep(results)
    if output is not None:
        emit(to_json(docs), output, force)
    if timeline is not None:
        path = call(lambda: plot_sweep(results, timeline, force=force))
        typer.echo(f"wrote {path}", err=True)


def _sweep_axes(ctx: typer.Context, sweep: list[str] | None, executor: Executor, ray_address: str | None,
                output: Path | None) -> dict[str, list[Any]] | None:
    """``--sweep KEY=V1,V2`` items as axes (``None`` without --sweep), and the flags that go with them checked."""
    from capplan.cli.method_flags import given
    from capplan.sim.grid import GRID_AXES

    if not sweep:
        runner = given(ctx, ["executor", "workers", "ray_address"])
        if runner:
            raise fail(f"{next(iter(runner.values()))} applies to --sweep only (one simulation runs in this process)")
        return None
    clash = given(ctx, ["sweep_staleness", "trajectories", "timeline"])
    if clash:
        raise fail(f"--sweep with {next(iter(clash.values()))}: give one (a sweep writes one table of points)")
    if ray_address is not None and executor is not Executor.ray:
        raise fail("--ray-address needs --executor ray")
    if output is not None and output.suffix.lower() not in (".csv", ".parquet", ".json"):
        raise fail(f"--output {output}: a --sweep writes .csv, .parquet or .json")
    axes: dict[str, list[Any]] = {}
    for item in sweep:
        key, sep, values = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise fail(f"--sweep {item!r}: give KEY=V1,V2 (keys: {', '.join(GRID_AXES)})")
        if key not in GRID_AXES:
            raise fail(f"--sweep {key}: unknown setting (allowed: {', '.join(GRID_AXES)})")
        if key in axes:
            raise fail(f"--sweep {key} given twice: list its values once ({key}=V1,V2)")
        kind, flag = GRID_AXES[key], f"--sweep {key}"
        if kind == "int":
            axes[key] = parse_ints(values, flag, minimum=0)
        elif kind == "float":
            try:
                axes[key] = [float(v) for v in parse_names(values)]
            except ValueError:
                raise fail(f"{flag}={values}: expected numbers, e.g. {key}=0.8,0.9") from None
        else:
            axes[key] = [dtype_name(v) if key.endswith("dtype") else v for v in parse_names(values)]
        if not axes[key]:
            raise fail(f"{flag}: give at least one value, e.g. {key}=V1,V2")
    if "tp" in axes and given(ctx, ["inference_gpus"]) and not {"inference_gpus", "inference_replicas"} & set(axes):
        raise fail("--inference-gpus with --sweep tp: sweep inference_gpus=N instead (GPUs = replicas x tp at each point)")
    return axes


def _grid(w, hw, thw, cfg, axes, model, executor, workers, ray_address, format, output, force) -> None:  # noqa: ANN001
    """``capplan simulate --sweep``: one task per point (:func:`capplan.sim.grid.simulate_grid`)."""
    from capplan.output import to_json, write_frame
    from capplan.sim.grid import grid_points, simulate_grid

    if output is not None and output.exists() and not force:
        raise fail(f"{output}: file exists; pass --force to overwrite it")
    total = len(call(lambda: grid_points(axes)))
    with progress_bar(f"simulating {total} points ({executor})", total) as progress:
        grid = call(lambda: simulate_grid(w, hw, cfg, axes, model=model, trainer_hardware=thw, executor=executor,
                                          workers=workers, ray_address=ray_address, progress=progress))
    if format is Format.json:
        emit(to_json(grid.as_dict()), None, force)
    else:
        render_grid(grid, f"{w.name} on {hw.name}")
    if output is not None:
        path = call(lambda: write_frame(grid.as_frame(), output, force=force))
        typer.echo(f"wrote {path}", err=True)
    short = [row for row in grid.rows if not row.get("steady_window", True)]
    if short:
        warn(_no_steady_window(cfg, short))
    for failure in grid.failures:
        typer.echo(f"point failed: {failure}", err=True)
    if not grid.ok:
        raise typer.Exit(1)


def render_grid(grid: Any, title: str) -> None:
    """One row per point of a --sweep: the swept settings, then throughput, staleness and lag."""
    from rich import box
    from rich.table import Table

    points = len(grid.rows) + len(grid.failures)
    t = Table(
        title=safe(f"{title}: {points} points on {grid.workers} {grid.executor} worker(s)"),
        caption="trained tok/s and step s: steady state; tok/s: sampled tokens per simulated second (compl. = completed, "
        "acc. = accepted by the trainer); stale: trained off-policy, lag >= 1; lag in policy versions.",
        title_justify="left", caption_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True,
    )
    cols = ("trained\ntok/s", "step\ns", "compl.\ntok/s", "acc.\ntok/s", "trainer\nidle", "stale", "lag\nmean")
    for key in grid.axes:  # names from GRID_AXES: no markup
        t.add_column(key.replace("_", "\n", 1) if len(key) > 8 else key, justify="right", no_wrap=True)
    for col in cols:
        t.add_column(col, justify="right", no_wrap=True)
    for row in grid.rows:
        t.add_row(
            *(safe(row[k]) for k in grid.axes),
            f"{row['steady_trained_tokens_per_s']:,.0f}", f"{row['step_time_s']:,.1f}", f"{row['completed_tokens_per_s']:,.0f}",
            f"{row['accepted_tokens_per_s']:,.0f}", _pct(row["trainer_idle_fraction"]), _pct(row["stale_fraction"]),
            f"{row['mean_policy_lag']:.2f}",
        )
    console().print(t)


def _simulate_serving(ctx, w, hardware, model, tp, inference_replicas, seed, kv_dtype, weight_dtype, max_num_seqs,  # noqa: ANN001
                      max_batched_tokens, engine, format, output, requests, request_rate, trace, records, force,
                      features: dict[str, Any] | None = None, enforce_eager: bool | None = None,
                      scheduler_policy: str | None = None, model_spec: "ModelSpec | None" = None) -> None:
    """``capplan simulate`` on a serving workload (:func:`capplan.sim.serving.simulate_serving`)."""
    from capplan.cli.method_flags import SIMULATE_RL_FLAGS, given
    from capplan.hardware import load_hardware
    from capplan.output import to_json
    from capplan.sim.serving import ServingSimConfig, simulate_serving, write_records

    rl_only = given(ctx, SIMULATE_RL_FLAGS)
    if rl_only:
        raise fail(f"{next(iter(rl_only.values()))} does not apply to {w.name} (method serving): it drives the trainer side "
                   "of an RL simulation")
    if trace is not None:
        drawn = given(ctx, ["requests", "request_rate"])
        if drawn:
            raise fail(f"{next(iter(drawn.values()))} does not apply with --trace: the trace gives the requests and their "
                       "arrival times (drop one)")
    if format is Format.csv:
        raise fail("--format csv is not available for simulate; use table or json (--records writes per-request CSV)")
    for path in (output, records):
        if path is not None and path.exists() and not force:
            raise fail(f"{path}: file exists; pass --force to overwrite it")
    hw = call(lambda: load_hardware(hardware))
    profile = warn_known_error(load_engine_option(engine, enforce_eager, scheduler_policy), [hw.name], model_spec)
    replicas = inference_replicas
    if not given(ctx, ["inference_replicas", "inference_gpus"]) and trace is None:
        replicas = _planned_replicas(w, hw, model_spec, tp, kv_dtype, weight_dtype, profile, features or {})
        typer.echo(f"simulating {replicas} replica(s), the serving plan's fleet (give --inference-replicas for another)", err=True)
    cfg = call(lambda: ServingSimConfig(
        tp=tp, inference_replicas=replicas, requests=requests if requests is not None else 20_000, request_rate_per_s=request_rate,
        seed=seed, kv_dtype=dtype_name(kv_dtype), weight_dtype=dtype_name(weight_dtype), max_num_seqs=max_num_seqs,
        max_batched_tokens=max_batched_tokens, engine=profile, **(features or {}),
    ))
    result = call(lambda: simulate_serving(w, hw, cfg, model=model, trace=trace))
    if format is Format.json:
        emit(to_json(result.as_dict()), None, force)
    else:
        render_serving(result)
    if output is not None:
        emit(to_json(result.as_dict()), output, force)
    if records is not None:
        path = call(lambda: write_records(result, records, force=force))
        typer.echo(f"wrote {path}", err=True)


def _planned_replicas(w, hw, spec, tp, kv_dtype, weight_dtype, profile, features: dict[str, Any]) -> int:  # noqa: ANN001
    """The serving plan's replica count for the simulation's settings (``spec``: the model, loaded
    once by :func:`simulate`; ``None`` when neither the workload nor ``--model`` names one)."""
    from capplan.plan import PlanInputs
    from capplan.plan.serving import plan_serving

    if spec is None:
        raise fail(f"{w.name}: the workload names no model; add 'model:' to it or pass --model")
    inputs = call(lambda: PlanInputs(hardware=hw, model=spec, tp=tp, kv_dtype=dtype_name(kv_dtype),
                                     weight_dtype=dtype_name(weight_dtype), engine=profile, **features))
    return call(lambda: plan_serving(w, inputs, conversations=min(w.sampling.conversations, 20_000))).replicas


def render_serving(result: Any) -> None:
    """Print a serving simulation: the run, the latency percentiles, throughput and goodput."""
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    c, s, st, t = result.config, result.summary, result.setup, result.targets
    con = console()
    con.print(escape(
        f"{result.workload}: {result.model} on {c['inference_replicas']} x {result.hardware} (tp {c['tp']}{_layout_text(c)}), requests dealt "
        f"{c['routing']}; {result.traffic}; {s['requests']:,} requests over {s['simulated_s']:,.1f} simulated s; seed {c['seed']}; "
        f"engine profile {result.engine_profile} ({result.calibration})"
    ))
    con.print(
        f"Per replica: KV {st['kv_capacity_tokens']:,} tokens, max {st['max_num_seqs']:,} sequences, "
        f"{st['max_num_batched_tokens']:,} tokens per step, {'chunked prefill' if st['chunked_prefill'] else 'whole-prompt prefill'}"
        f"{'' if st.get('mixed_prefill', True) else ' in steps apart from decodes'}, "
        f"request overhead {st['request_overhead_s'] * 1e3:,.1f} ms."
    )
    keys = ["mean", *[f"p{p:g}" for p in result.percentiles]]
    lt = Table(title="Latency", title_justify="left", box=box.SIMPLE_HEAD)
    lt.add_column("")
    for k in keys:
        lt.add_column(k, justify="right")
    for name, label, scale, unit in (("ttft_s", "TTFT", 1e3, "ms"), ("tpot_s", "TPOT", 1e3, "ms"), ("itl_s", "ITL", 1e3, "ms"),
                                     ("e2e_s", "latency", 1.0, "s")):
        row = result.latency[name]
        lt.add_row(escape(f"{label} [{unit}]"), *(f"{row[k] * scale:,.{1 if scale > 1 else 2}f}" for k in keys))
    con.print(lt)
    tt = Table(title="Throughput", title_justify="left", box=box.SIMPLE_HEAD, show_header=False)
    tt.add_column("")
    tt.add_column("", justify="right")
    for a, b in (
        ("completed requests/s", f"{s['requests_per_s']:,.3f}"),
        ("output / input tokens/s", f"{s['output_tokens_per_s']:,.0f} / {s['input_tokens_per_s']:,.0f}"),
        ("goodput: requests/s meeting the targets", f"{s['goodput_requests_per_s']:,.3f} ({s['slo_attainment']:.1%})"),
        ("replicas stepping (busy)", f"{s['replica_busy_fraction']:.1%}"),
        ("mean decode batch [sequences]", f"{s['mean_decode_batch']:,.1f}"),
        ("preemptions (recomputed tokens)", f"{s['preemptions']:,} ({s['recomputed_tokens']:,})"),
        ("engine steps", f"{s['engine_steps']:,}"),
    ):
        tt.add_row(escape(a), b)
    con.print(tt)
    key = f"p{t['percentile']:g}"
    parts = []
    for name, label in (("ttft", "TTFT"), ("tpot", "TPOT")):
        target = t[f"{name}_target_s"]
        if target is not None:
            got = result.latency[f"{name}_s"][key]
            parts.append(f"{label} {key} {got * 1e3:,.1f} ms {'meets' if t[f'{name}_met'] else 'MISSES'} its {target * 1e3:,.1f} ms target")
    if parts:
        con.print("Targets: " + "; ".join(parts) + ".")


def _layout_text(c: dict[str, Any]) -> str:
    """The engine features of a run's config in words (empty for a plain run)."""
    parts = [f"{k.replace('_', ' ')} {v}" for k, v in c.items()
             if k in ("ep", "dp", "expert_dtype", "redundant_experts", "kv_scale", "alltoall_mode", "gemm_dtype")]
    return ", " + ", ".join(parts) if parts else ""


def _feature_lines(c: dict[str, Any], st: dict[str, Any], s: dict[str, Any]) -> list[str]:
    """Speculative decoding and the CPU KV tier of an RL simulation, in words (none for a plain run)."""
    out = []
    if "spec_method" in st:
        schedule = " (at step 0; it follows the workload's acceptance schedule)" if "acceptance_by_step" in c.get("speculative", {}) else ""
        out.append(f"Speculative decoding: {st['spec_method']}, {st['spec_tokens']} drafted tokens, {st['spec_tokens_per_step']:.3g} "
                   f"tokens per verify step{schedule}; decode priced per output token; KV {st['kv_capacity_tokens']:,} tokens "
                   f"per replica with the drafter ({st['kv_capacity_tokens_without_spec']:,} without).")
    if "kv_offload_capacity_tokens" in st:
        use = "" if st["kv_offload_used"] else " (not used: loading a position is not faster than prefilling it)"
        out.append(f"CPU KV tier: {st['kv_offload_gib_per_gpu']:g} GiB per GPU, {st['kv_offload_capacity_tokens']:,} tokens{use}; "
                   f"{s['kv_offload_loads']:,} evicted prefixes and preempted contexts loaded back ({s['kv_offload_loaded_tokens']:,} tokens, "
                   f"{s['kv_offload_loaded_gib_per_gpu']:,.1f} GiB per GPU, {s['kv_offload_load_s']:,.2f} s over the "
                   f"{st['host_link_bandwidth_gbps']:g} GB/s host link) instead of recomputed.")
    return out


def _pct(x: float) -> str:
    return f"{x:.1%}"


def render(result: "SimResult") -> None:
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    s, c, st = result.summary, result.config, result.setup
    con = console()
    mode = c["mode"] + (f", max staleness {c['max_staleness']}" if c["mode"] == "async" else "")
    mode += ", in-flight updates" if c["inflight_updates"] and c["mode"] == "async" else ""
    con.print(
        escape(
            f"{result.workload}: {result.model} on {c['inference_replicas']} x {result.hardware} (tp {c['tp']}{_layout_text(c)}), "
            f"trainer {st['trainer_gpus']} x {result.trainer_hardware}; {mode}; "
            f"{'static' if c['static_batching'] else 'continuous'} batching; {c['sampling']} sampling; seed {c['seed']}"
        )
    )
    con.print(
        f"{s['updates']} updates in {s['simulated_s']:,.1f} simulated s; KV {st['kv_capacity_tokens']:,} tokens per "
        f"replica, max {st['max_num_seqs']:,} sequences, {st['max_batched_tokens']:,} tokens per step; "
        f"weight {'reshard' if c['mode'] == 'colocated' else 'push'} {st['weight_sync_s']:.2f} s; steady step "
        f"{s['step_time_s']:,.1f} s, {s['steady_trained_tokens_per_s']:,.0f} trained tokens/s."
    )
    for line in _feature_lines(c, st, s):
        con.print(escape(line))
    t = Table(title="Throughput", title_justify="left", box=box.SIMPLE_HEAD)
    for col in ("", "trajectories", "trajectories/s", "sampled tokens/s"):
        t.add_column(col, justify="left" if not col else "right")
    t.add_row("completed", f"{s['completed_trajectories']:,}", f"{s['completed_trajectories_per_s']:,.3f}",
              f"{s['completed_tokens_per_s']:,.0f}")
    t.add_row("accepted", f"{s['accepted_trajectories']:,}", f"{s['accepted_trajectories_per_s']:,.3f}",
              f"{s['accepted_tokens_per_s']:,.0f}")
    t.add_row("rejected stale", f"{s['rejected_stale_trajectories']:,}", "", "")
    t.add_row("rejected filtered", f"{s['rejected_filtered_trajectories']:,}", "", "")
    if s["rejected_surplus_trajectories"]:
        t.add_row("rejected surplus", f"{s['rejected_surplus_trajectories']:,}", "", "")
    t.add_row("unfinished at the end", f"{s['unfinished_trajectories']:,}", "", "")
    t.add_row("  of which completed, queued", f"{s['pending_trajectories']:,}", "", "")
    con.print(t)
    u = Table(title="Utilisation and staleness", title_justify="left", box=box.SIMPLE_HEAD, show_header=False)
    u.add_column("")
    u.add_column("", justify="right")
    rows = [
        ("trainer idle (waiting for data)", _pct(s["trainer_idle_fraction"])),
        ("trainer training / pushing weights", f"{_pct(s['trainer_busy_fraction'])} / {_pct(s['trainer_sync_fraction'])}"),
        ("replica utilisation (stepping)", _pct(s["replica_utilisation"])),
        ("mean running batch [sequences]", f"{s['mean_running_batch']:,.1f}"),
        ("KV occupancy p50 / p95", f"{_pct(s['kv_occupancy_p50'])} / {_pct(s['kv_occupancy_p95'])}"),
        ("preemptions / retained-KV evictions", f"{s['preemptions']:,} / {s['retained_kv_evictions']:,}"),
        ("recomputed tokens (both)", f"{s['recompute_tokens']:,}"),
        ("rejected as stale", _pct(s["rejected_stale_fraction"])),
        ("trained off-policy, lag >= 1 (steady)", _pct(s["stale_fraction"])),
        ("recomputed / forwarded tokens", _pct(s["recompute_fraction"])),
        ("policy lag mean / max [versions]", f"{s['mean_policy_lag']:.2f} / {s['max_policy_lag']}"),
        ("engine steps (forwarded tokens)", f"{s['engine_steps']:,} ({s['engine_forwarded_tokens']:,})"),
    ]
    for a, b in rows:
        u.add_row(escape(a), b)
    con.print(u)
    q = Table(title="Queue lengths (sampled over time)", title_justify="left", box=box.SIMPLE_HEAD)
    for col in ("queue", "p50", "p95", "max"):
        q.add_column(col, justify="left" if col == "queue" else "right")
    for name, v in result.queues.items():
        q.add_row(name.replace("_", " "), f"{v['p50']:,.0f}", f"{v['p95']:,.0f}", f"{v['max']:,.0f}")
    con.print(q)


def render_sweep(results: list["SimResult"]) -> None:
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    r0 = results[0]
    c = r0.config
    t = Table(
        title=escape(
            f"{r0.workload}: {r0.model} on {c['inference_replicas']} x {r0.hardware} (tp {c['tp']}), "
            f"{c['steps']} updates per run, seed {c['seed']}"
        ),
        caption="Same tasks in every run. compl. = completed, acc. = accepted by the trainer, per simulated "
        "second; tok = sampled tokens; stale = share of completed trajectories rejected as stale; lag in "
        "policy versions.",
        title_justify="left",
        caption_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )
    cols = ("run", "compl.\ntraj/s", "acc.\ntraj/s", "compl.\ntok/s", "acc.\ntok/s", "stale", "trainer\nidle",
            "lag\nmean", "lag\nmax", "sim\ns")
    for col in cols:
        t.add_column(col, justify="left" if col == "run" else "right", no_wrap=True)
    for r in results:
        s, cfg = r.summary, r.config
        name = "sync" if cfg["mode"] == "sync" else f"async K={cfg['max_staleness']}"
        t.add_row(
            name, f"{s['completed_trajectories_per_s']:.3f}", f"{s['accepted_trajectories_per_s']:.3f}",
            f"{s['completed_tokens_per_s']:,.0f}", f"{s['accepted_tokens_per_s']:,.0f}",
            _pct(s["rejected_stale_fraction"]), _pct(s["trainer_idle_fraction"]),
            f"{s['mean_policy_lag']:.2f}", str(s["max_policy_lag"]), f"{s['simulated_s']:,.0f}",
        )
    console().print(t)
