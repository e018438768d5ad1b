"""``capplan sweep``: every hardware x tp x dtype x GPU-split combination of a plan."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from capplan.cli.registry import CommandSet
from capplan.cli.common import (
    check_gpu_hour_price,
    BlockSizeOpt,
    EngineOpt,
    ForceOpt,
    GpuMemUtilOpt,
    MaxModelLenOpt,
    MaxNumSeqsOpt,
    EnforceEagerOpt,
    SchedulerPolicyOpt,
    PrefixCachingOpt,
    call,
    console,
    dtype_name,
    emit,
    engine_settings,
    fail,
    load_engine_option,
    parse_ints,
    parse_names,
    progress_bar,
    safe,
    workload_settings,
    AcceptanceLengthOpt,
    AcceptanceOpt,
    AlltoallModeOpt,
    DraftModelOpt,
    ExpertDtypeOpt,
    GemmDtypeOpt,
    KVOffloadGibOpt,
    KVScaleOpt,
    RedundantOpt,
    SpecMethodOpt,
    TwoBatchOverlapOpt,
    _kv_help,
    _spec_help,
    engine_defaults,
    engine_features,
    layout_options,
    warn_known_error,
)

if TYPE_CHECKING:
    import pandas as pd


commands = CommandSet()
"""This module's commands (registered by :mod:`capplan.cli.app`)."""


class Objective(str, Enum):
    per_gpu = "per-gpu"
    throughput = "throughput"
    cost = "cost"


def write_grid(grid: "pd.DataFrame", output: Path, force: bool) -> None:
    """Write the full grid by the extension of ``output``: ``.parquet``, ``.json`` or spreadsheet-safe
    CSV, streamed in chunks (``capplan.output.write_frame``)."""
    from capplan.output import write_frame

    path = call(lambda: write_frame(grid, output, force=force))
    typer.echo(f"wrote {path}", err=True)


def parse_prices(values: list[str] | None) -> "float | dict[str, float] | None":
    """``--gpu-hour-price 2.5`` (every profile) or ``--gpu-hour-price h100-sxm=2.5,h200=3.1`` (per profile)."""
    import math

    items = parse_names(values)
    if not items:
        return None
    if len(items) == 1 and "=" not in items[0]:
        pairs = {"": items[0]}
    else:
        pairs = {}
        for item in items:
            name, sep, price = item.partition("=")
            if not sep or not name.strip():
                raise fail(f"--gpu-hour-price {item!r}: give one price (2.5) or HARDWARE=PRICE pairs (h100-sxm=2.5,h200=3.1)")
            pairs[name.strip()] = price
    out: dict[str, float] = {}
    for name, text in pairs.items():
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        out[name] = check_gpu_hour_price(value, repr(text))
    return out[""] if "" in out else out


def _feature_settings(
    ctx: typer.Context, workload: Any, spec: Any, tps: list[int], ep: list[str] | None, redundant_experts: int,
    two_batch_overlap: bool, kv_offload_gib: float | None,
) -> tuple[list[int | None], int | None, dict[str, Any]]:
    """The expert-parallel degrees to sweep (``None``: ``tp x dp`` of the workload's engine block),
    the fixed data-parallel size, and the other feature settings with the engine block's defaults.

    A degree no configuration can take (``--ep 3`` for 64 experts, ``--ep`` on a dense model) is a
    one-line error; a degree only some ``tp`` can take leaves the others infeasible rows."""
    from capplan.kv import check_expert_parallelism

    f = engine_features(ctx, workload, tps[0], redundant_experts=redundant_experts, two_batch_overlap=two_batch_overlap,
                        kv_offload_gib=kv_offload_gib)
    if ep is not None:
        eps: list[int | None] = list(parse_ints(ep, "--ep"))
        dp_fixed = None
        for value in eps:
            assert value is not None
            if spec.moe is None and value > 1 or (spec.moe is not None and value > 1 and (spec.moe.num_experts + f["redundant_experts"]) % value):
                call(lambda: check_expert_parallelism(spec, value, 1, value, f["redundant_experts"]))
    else:
        block = getattr(workload, "engine", None)
        dp_fixed = block.data_parallel_size if block is not None else None
        eps = [None] if block is not None and block.enable_expert_parallel else [1]
    if f["kv_offload_gib"] is not None and kv_offload_gib is None and len(tps) > 1:
        raise fail(f"workload {workload.name}: engine.kv_offloading_size is GiB per instance, which differs between the swept "
                   "--tensor-parallel-size values; give --kv-offload-gib (per GPU)")
    return eps, dp_fixed, f


def render(grid: "pd.DataFrame", top_rows: "pd.DataFrame", subject: str, objective: str, priced: bool) -> None:
    """Print the best rows as a table (and why nothing is feasible, when nothing is)."""
    from rich import box
    from rich.table import Table

    out = console()
    table = Table(
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
        title=f"{safe(subject)}: best {len(top_rows)} of {len(grid):,} combinations "
        f"({int(grid['feasible'].sum()):,} feasible), by {objective}",
        title_justify="left",
    )
    columns = [
        ("step\n[s]", "step_time_s", lambda v: f"{v:,.0f}" if v >= 100 else f"{v:.3g}"),
        ("trained\ntok/s", "trained_tokens_per_s", lambda v: f"{v:,.0f}"),
        ("per GPU\n[tok/s]", "trained_tokens_per_s_per_gpu", lambda v: f"{v:,.1f}"),
        ("node\nratio", "node_ratio", lambda v: f"{v:,.2f}"),
        ("trainer\nidle", "trainer_idle_fraction", lambda v: f"{v:.0%}"),
    ]
    if priced:
        columns.append(("USD/M\ntrained", "cost_per_million_trained_tokens_usd", lambda v: f"{v:,.2f}"))
    # fold, never an ellipsis: at 80 columns a long profile name wraps rather than losing its end
    def words(label: str) -> int:
        return max(len(w) for w in label.split())

    table.add_column("GPU, tp,\nKV/weights", overflow="fold", min_width=words("KV/weights"))
    table.add_column("GPUs\ninf+train", justify="right", overflow="fold", min_width=words("inf+train"))
    for label, _, _ in columns:
        table.add_column(label, justify="right", overflow="fold", min_width=words(label))
    for _, row in top_rows.iterrows():
        config = safe(f"{row['hardware']} tp{row['tp']}{_feature_label(row)} {row['kv_dtype']}/{row['weight_dtype']}")
        colocated = row["trainer_gpus"] > 0 and row["total_gpus"] == row["inference_gpus"]  # the same GPUs do both
        gpus = f"{row['inference_gpus']:,} (both)" if colocated else f"{row['inference_gpus']:,}+{row['trainer_gpus']:,}"
        table.add_row(config, gpus, *(_blank_or(fmt, row[column]) for _, column, fmt in columns))
    out.print(table)
    if top_rows.empty:
        reasons = grid.loc[~grid["feasible"].astype(bool), "reason"].drop_duplicates().head(3).tolist()
        out.print("No feasible combination: " + safe("; ".join(reasons)))


def _feature_label(row: Any) -> str:
    """`` ep16`` / `` k3`` in a row's configuration label when the grid has the feature columns."""
    out = ""
    if "ep" in row.index and row["ep"] == row["ep"] and int(row["ep"]) > 1:
        out += f" ep{int(row['ep'])}"
    if "spec_method" in row.index and row["spec_method"]:
        out += f" {row['spec_method']} k{int(row['spec_num_speculative_tokens'])}"
    return out


def _blank_or(fmt, value) -> str:  # noqa: ANN001
    """A formatted figure, or blank when it is missing (an unpriced cost)."""
    return "" if value is None or value != value else fmt(value)


@commands.command(
    "sweep",
    help=(
        "Plan every combination of hardware, tensor-parallel degree, KV and weight dtype, inference "
        "GPUs and trainer GPUs, vectorised; print the best few by the objective and write the full "
        "grid to CSV.\n\n"
        "Objectives: per-gpu (trained tokens/s per GPU, default), throughput (trained tokens/s), "
        "cost (USD per million trained tokens; needs a GPU-hour price for every profile: --gpu-hour-price, one "
        "price or HARDWARE=PRICE pairs, else the profile's price_usd_per_gpu_hour). Infeasible rows keep their "
        "reason and have blank figures; when no row is feasible the command exits 3 (the table and --output "
        "still written).\n\n"
        "Examples:\n\n"
        "\b\n"
        "  capplan sweep reasoning-rl-olmo3-7b --hardware h100-sxm,h200,b200 --tp 1,2,4,8 --kv-dtype bf16,fp8\n"
        "  capplan sweep agentic-tool-rl --hardware h100-sxm --tp 1,2 --inference-gpus 8:256:8 \\\n"
        "      --trainer-gpus 8,16,32 --output grid.csv\n"
        "  capplan sweep reasoning-rl-olmo3-32b --hardware h100-sxm,b200 --tp 8 --gpu-hour-price h100-sxm=2.5,b200=4 --objective cost\n"
        "  capplan sweep reasoning-rl-olmo3-7b --hardware h100-sxm --max-total-gpus 16 --max-num-seqs 256\n"
        "  capplan sweep reasoning-rl-olmo3-7b -m qwen3-30b-a3b -H h100-sxm --tp 1,2 --ep 1,8 --inference-gpus 8:64:8\n"
        "  capplan sweep reasoning-rl-olmo3-7b -H h100-sxm --spec-method eagle3 --spec-tokens 1:5 --acceptance-rate 0.7\n\n"
        "The workload's engine: block gives the settings not swept (a flag of the same name wins). A serving workload is "
        "planned with capplan plan (its prefill:decode ratio with --disaggregated --prefill-decode-ratio)."
    ),
)
def sweep_cmd(
    ctx: typer.Context,
    workload: Annotated[str, typer.Argument(help="Workload file or bundled name.")],
    hardware: Annotated[list[str], typer.Option("--hardware", "-H", help="Hardware profiles, e.g. h100-sxm,h200.")],
    tp: Annotated[
        list[str] | None, typer.Option("--tensor-parallel-size", "-tp", "--tp", help="Tensor-parallel degrees, e.g. 1,2,4,8.")
    ] = None,
    kv_dtype: Annotated[
        list[str] | None, typer.Option("--kv-cache-dtype", "--kv-dtype", help="KV dtypes, e.g. bf16,fp8.")
    ] = None,
    weight_dtype: Annotated[
        list[str] | None, typer.Option("--dtype", "--weight-dtype", help="Weight dtypes, e.g. bf16,fp8.")
    ] = None,
    engine: EngineOpt = None,
    gpu_memory_utilization: GpuMemUtilOpt = None,
    max_num_seqs: MaxNumSeqsOpt = None,
    enforce_eager: EnforceEagerOpt = None,
    scheduler_policy: SchedulerPolicyOpt = None,
    max_num_batched_tokens: Annotated[
        int | None,
        typer.Option("--max-num-batched-tokens", "--max-batched-tokens", help="Scheduler token budget per step [tokens] (vLLM).", min=1),
    ] = None,
    block_size: BlockSizeOpt = None,
    max_model_len: MaxModelLenOpt = None,
    prefix_caching: PrefixCachingOpt = None,
    pp: Annotated[int, typer.Option("--pipeline-parallel-size", "-pp", "--pp", help="Pipeline-parallel degree; sweep models 1 only.", min=1)] = 1,
    inference_gpus: Annotated[
        list[str] | None, typer.Option("--inference-gpus", help="Inference GPU counts: list or start:stop:step.")
    ] = None,
    trainer_gpus: Annotated[
        list[str] | None, typer.Option("--trainer-gpus", help="Trainer GPU counts: list or start:stop:step.")
    ] = None,
    trainer_hardware: Annotated[str | None, typer.Option("--trainer-hardware", help="Trainer profile (default: each --hardware).")] = None,
    model: Annotated[str | None, typer.Option("--model", "-m", help="Model preset or path (default: the workload's).")] = None,
    mode: Annotated[str, typer.Option("--mode", help="colocated, sync or async.")] = "sync",
    max_staleness: Annotated[
        int, typer.Option("--max-staleness", help="Async: the staleness bound K (policy versions a trajectory may lag).", min=0)
    ] = 1,
    gpu_hour_price: Annotated[
        list[str] | None,
        typer.Option(
            "--gpu-hour-price",
            help="USD per GPU-hour for the cost columns: one price (2.5) or per profile (h100-sxm=2.5,h200=3.1); "
            "a profile not named uses its own price_usd_per_gpu_hour when it has one.",
        ),
    ] = None,
    max_total_gpus: Annotated[
        int | None, typer.Option("--max-total-gpus", help="Rows using more GPUs (inference + trainer) are infeasible.", min=1)
    ] = None,
    max_grid_cells: Annotated[
        int, typer.Option("--max-grid-cells", help="Refuse a grid of more rows than this (raise it deliberately).", min=1)
    ] = 250_000,  # capplan.plan.grid.MAX_GRID_CELLS (not imported here: --help stays fast)
    objective: Annotated[Objective, typer.Option("--objective", help="Rank by per-gpu, throughput or cost.")] = Objective.per_gpu,
    top: Annotated[int, typer.Option("--top", help="Rows to show.", min=1)] = 10,
    conversations: Annotated[int | None, typer.Option("--conversations", help="Monte Carlo sample size.", min=1)] = None,
    ep: Annotated[
        list[str] | None,
        typer.Option("--ep", "--expert-parallel-size", help=_kv_help("ep", " A list (1,8,16) is a dimension of the grid; dp = ep / tp."))
    ] = None,
    expert_dtype: ExpertDtypeOpt = None,
    redundant_experts: RedundantOpt = 0,
    kv_scale: KVScaleOpt = "tensor",
    two_batch_overlap: TwoBatchOverlapOpt = False,
    alltoall_mode: AlltoallModeOpt = "auto",
    gemm_dtype: GemmDtypeOpt = None,
    spec_method: SpecMethodOpt = None,
    spec_tokens: Annotated[
        list[str] | None,
        typer.Option("--spec-tokens", help=_spec_help("num_speculative_tokens") + " A list (1,3,5) or range (1:5) is a dimension of the grid."),
    ] = None,
    acceptance_rate: AcceptanceOpt = None,
    acceptance_length: AcceptanceLengthOpt = None,
    draft_model: DraftModelOpt = None,
    acceptance_step: Annotated[
        int | None,
        typer.Option("--acceptance-step", help="The trainer step at which to read the workload's speculative.acceptance_by_step "
                     "[steps]; default 0.", min=0),
    ] = None,
    kv_offload_gib: KVOffloadGibOpt = None,
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="Write the full grid as CSV, or by extension .parquet or .json.", dir_okay=False),
    ] = None,
    force: ForceOpt = False,
) -> None:
    from capplan.hardware import load_hardware
    from capplan.plan import best, sweep
    from capplan.plan.grid import check_grid_size, hourly_price
    from capplan.plan.inputs import load_policy
    from capplan.units import KV_DTYPE_BYTES, WEIGHT_DTYPE_BYTES
    from capplan.workload import check_sample_size

    if output is not None and output.suffix.lower() in (".png", ".svg"):
        raise fail(f"--output {output}: sweep writes the grid as .csv, .json or .parquet")
    prices = parse_prices(gpu_hour_price)
    names = parse_names(hardware)
    if not names:
        raise fail("--hardware: give at least one hardware profile, e.g. -H h100-sxm,h200")
    from capplan.cli.method_flags import ASYNC_FLAGS, given, mode_flag_error

    clash = mode_flag_error(mode, given(ctx, ASYNC_FLAGS), max_staleness=max_staleness)
    if clash:
        raise fail(clash)
    loaded_workload, spec = call(lambda: load_policy(workload, model, draft_model is not None))
    if loaded_workload.method == "serving":
        from capplan.cli.method_flags import SWEEP_SERVING_ERROR

        raise fail(f"workload {loaded_workload.name} (method serving): {SWEEP_SERVING_ERROR}")
    if not loaded_workload.has_rollout:  # sft: the grid is trainer sizes alone
        engine_only = given(ctx, ["inference_gpus", "tp", "kv_dtype", "weight_dtype"])
        if engine_only:
            raise fail(f"{next(iter(engine_only.values()))} does not apply to {loaded_workload.name} (method "
                       f"{loaded_workload.method}): the workload has no inference engine, so sweep varies the trainer GPUs alone")
    # the workload's engine: block gives what is not swept; a flag wins
    e = engine_defaults(
        ctx, loaded_workload, features=True, tp=tp, pp=pp, kv_dtype=kv_dtype, weight_dtype=weight_dtype, engine=engine,
        gpu_memory_utilization=gpu_memory_utilization, max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
        block_size=block_size, max_model_len=max_model_len, prefix_caching=prefix_caching, enforce_eager=enforce_eager,
    )
    tp = [str(e["tp"])] if isinstance(e["tp"], int) else e["tp"]
    kv_dtype = [e["kv_dtype"]] if isinstance(e["kv_dtype"], str) else e["kv_dtype"]
    weight_dtype = [e["weight_dtype"]] if isinstance(e["weight_dtype"], str) else e["weight_dtype"]
    pp, engine, gpu_memory_utilization, max_num_seqs = e["pp"], e["engine"], e["gpu_memory_utilization"], e["max_num_seqs"]
    max_num_batched_tokens, block_size, max_model_len, prefix_caching = (
        e["max_num_batched_tokens"], e["block_size"], e["max_model_len"], e["prefix_caching"])
    if pp != 1:
        raise fail(f"--pipeline-parallel-size {pp}: sweep models one pipeline stage (1); capplan kv gives pipeline-parallel memory")
    tps = parse_ints(tp, "--tensor-parallel-size") or [1]
    kv_dtypes = list(dict.fromkeys(dtype_name(d) for d in parse_names(kv_dtype))) or ["bf16"]  # aliases (fp8_e4m3) once
    weight_dtypes = list(dict.fromkeys(dtype_name(d) for d in parse_names(weight_dtype))) or ["bf16"]
    eps, dp_fixed, features = _feature_settings(
        ctx, loaded_workload, spec, tps, ep, redundant_experts, two_batch_overlap, kv_offload_gib)
    token_list = parse_ints(spec_tokens, "--spec-tokens") or [None]
    from capplan.plan.inputs import speculative_setting

    sinp, _ = call(lambda: speculative_setting(
        loaded_workload.speculative, spec_method, token_list[0], acceptance_rate, acceptance_length, draft_model, acceptance_step))
    if sinp is None:
        token_list = [None]
    layout = layout_options(1, None, expert_dtype, features["redundant_experts"], kv_scale, features["two_batch_overlap"],
                            alltoall_mode, gemm_dtype)
    for flag, given, table in (("--kv-cache-dtype", kv_dtypes, KV_DTYPE_BYTES), ("--dtype", weight_dtypes, WEIGHT_DTYPE_BYTES)):
        bad = [d for d in given if d not in table]
        if bad:
            raise fail(f"{flag} {bad[0]}: unknown dtype (allowed: {', '.join(table)})")
    from capplan.units import MAX_GPUS

    if mode == "colocated" and trainer_gpus:
        raise fail("--trainer-gpus with --mode colocated: the same GPUs generate and train; give --inference-gpus only")
    inference_list = parse_ints(inference_gpus, "--inference-gpus", maximum=MAX_GPUS) or None
    trainer_list = parse_ints(trainer_gpus, "--trainer-gpus", maximum=MAX_GPUS) or None
    per_config = len(names) * len(tps) * len(kv_dtypes) * len(weight_dtypes) * len(eps) * len(token_list)
    # a default axis is a doubling series: at most 32 inference and 10 trainer counts
    call(lambda: check_grid_size(per_config * len(inference_list or range(32)) * len(trainer_list or range(10)), max_grid_cells))
    loaded_workload = workload_settings(loaded_workload, prefix_caching=prefix_caching, max_model_len=max_model_len)
    call(lambda: check_sample_size(loaded_workload, conversations))
    profiles = [call(lambda: load_hardware(name)) for name in names]
    trainer_profile = call(lambda: load_hardware(trainer_hardware)) if trainer_hardware else None
    if isinstance(prices, dict):
        unknown = sorted(set(prices) - {p.name for p in profiles} - ({trainer_profile.name} if trainer_profile else set()))
        if unknown:
            raise fail(f"--gpu-hour-price {unknown[0]}=...: not among the swept profiles ({', '.join(p.name for p in profiles)})")
    priced = all(
        hourly_price(p, prices) is not None for p in [*profiles, *([trainer_profile] if trainer_profile else [])]
    )
    if objective is Objective.cost and not priced:
        missing = [p.name for p in profiles if hourly_price(p, prices) is None]
        raise fail(
            f"--objective cost needs a GPU-hour price for every profile (no price for {', '.join(missing) or 'the trainer hardware'}): "
            "pass --gpu-hour-price 2.5 or HARDWARE=PRICE pairs"
        )
    engine_profile = engine_settings(
        warn_known_error(load_engine_option(engine, e["enforce_eager"], scheduler_policy), [p.name for p in profiles], spec),
        gpu_memory_utilization=gpu_memory_utilization, block_size=block_size,
        max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
    )
    total = len(profiles) * len(tps) * len(kv_dtypes) * len(weight_dtypes) * len(eps) * len(token_list)
    with progress_bar("sweeping", total) as progress:
        grid = call(
            lambda: sweep(
                loaded_workload, spec, profiles, tps, kv_dtypes, weight_dtypes,
                inference_gpus=inference_list, trainer_gpus=trainer_list,
                trainer_hardware=trainer_profile, mode=mode, gpu_hour_price=prices,
                conversations=conversations, on_config=progress, engine=engine_profile,
                max_total_gpus=max_total_gpus, max_cells=max_grid_cells, max_staleness=max_staleness,
                eps=eps, dp=dp_fixed, spec_tokens=token_list, speculative=sinp, layout=layout,
                kv_offload_gib=features["kv_offload_gib"],
            )
        )
    if output is not None:
        write_grid(grid, output, force)
    render(grid, best(grid, objective.value, top), f"{loaded_workload.name} on {spec.name}", objective.value, priced)
    if priced:
        shown = sorted({(p.name, hourly_price(p, prices)) for p in [*profiles, *([trainer_profile] if trainer_profile else [])]})
        origin = "--gpu-hour-price" if prices is not None else "the profiles' price_usd_per_gpu_hour"
        console().print(safe("GPU-hour prices (" + origin + "): " + ", ".join(f"{n} ${v:,.2f}" for n, v in shown) + "."))
    if not grid["feasible"].astype(bool).any():  # the table says why; a script sees the exit code (as plan's unmet targets)
        typer.echo("Error: no feasible combination in the grid", err=True)
        raise typer.Exit(3)
