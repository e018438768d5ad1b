"""``capplan sweep``: every hardware x tp x dtype x GPU-split combination of a plan."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from capplan.cli.registry import CommandSet
from capplan.cli.common import EngineOpt, ForceOpt, call, console, dtype_name, fail, load_engine_option, parse_ints, parse_names

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


def render(grid: "pd.DataFrame", top_rows: "pd.DataFrame", subject: str, objective: str, priced: bool) -> None:
    """Print the best rows as a table (and why nothing is feasible, when nothing is)."""
    from rich.table import Table

    out = console()
    table = Table(
        title=f"{subject}: best {len(top_rows)} of {len(grid):,} combinations "
        f"({int(grid['feasible'].sum()):,} feasible), by {objective}",
        title_justify="left",
    )
    columns = [
        ("step\n[s]", "step_time_s", lambda v: f"{v:,.0f}"),
        ("trained\ntok/s", "trained_tokens_per_s", lambda v: f"{v:,.0f}"),
        ("per GPU\n[tok/s]", "trained_tokens_per_s_per_gpu", lambda v: f"{v:,.1f}"),
        ("node\nratio", "node_ratio", lambda v: f"{v:,.2f}"),
        ("trainer\nidle", "trainer_idle_fraction", lambda v: f"{v:.0%}"),
    ]
    if priced:
        columns.append(("USD per M\ntrained", "cost_per_million_trained_tokens_usd", lambda v: f"{v:,.2f}"))
    table.add_column("GPU, tp,\nKV/weights", no_wrap=True)
    table.add_column("GPUs\ninf+train", justify="right", no_wrap=True)
    for label, _, _ in columns:
        table.add_column(label, justify="right", no_wrap=True)
    for _, row in top_rows.iterrows():
        config = f"{row['hardware']} tp{row['tp']} {row['kv_dtype']}/{row['weight_dtype']}"
        gpus = f"{row['inference_gpus']:,}+{row['trainer_gpus']:,}"
        table.add_row(config, gpus, *(fmt(row[column]) for _, column, fmt in columns))
    out.print(table)
    if top_rows.empty:
        reasons = grid.loc[~grid["feasible"], "reason"].drop_duplicates().head(3).tolist()
        out.print("No feasible combination: " + "; ".join(reasons))


@commands.command(
    "sweep",
    help=(
        "Plan every combination of hardware, tensor-parallel degree, KV and weight dtype, inference "
        "GPUs and trainer GPUs, vectorised; print the best few by the objective and write the full "
        "grid to CSV.\n\n"
        "Objectives: per-gpu (trained tokens/s per GPU, default), throughput (trained tokens/s), "
        "cost (USD per million trained tokens; needs --gpu-hour-price).\n\n"
        "Examples:\n\n"
        "\b\n"
        "  capplan sweep reasoning-rl-olmo3-7b --hardware h100-sxm,h200,b200 --tp 1,2,4,8 --kv-dtype bf16,fp8\n"
        "  capplan sweep agentic-tool-rl --hardware h100-sxm --tp 1,2 --inference-gpus 8:256:8 \\\n"
        "      --trainer-gpus 8,16,32 --output grid.csv\n"
        "  capplan sweep reasoning-rl-olmo3-32b --hardware h100-sxm,b200 --tp 8 --gpu-hour-price 2.5 --objective cost"
    ),
)
def sweep_cmd(
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
    inference_gpus: Annotated[
        list[str] | None, typer.Option("--inference-gpus", help="Inference GPU counts: list or start:stop:step.")
    ] = None,
    trainer_gpus: Annotated[
        list[str] | None, typer.Option("--trainer-gpus", help="Trainer GPU counts: list or start:stop:step.")
    ] = None,
    trainer_hardware: Annotated[str | None, typer.Option("--trainer-hardware", help="Trainer profile (default: each --hardware).")] = None,
    model: Annotated[str | None, typer.Option("--model", "-m", help="Model preset or path (default: the workload's).")] = None,
    mode: Annotated[str, typer.Option("--mode", help="sync or async.")] = "sync",
    gpu_hour_price: Annotated[float | None, typer.Option("--gpu-hour-price", help="USD per GPU-hour, for cost columns.", min=0)] = None,
    objective: Annotated[Objective, typer.Option("--objective", help="Rank by per-gpu, throughput or cost.")] = Objective.per_gpu,
    top: Annotated[int, typer.Option("--top", help="Rows to show.", min=1)] = 10,
    conversations: Annotated[int | None, typer.Option("--conversations", help="Monte Carlo sample size.", min=1)] = None,
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="Write the full grid as CSV, or by extension .parquet or .json.", dir_okay=False),
    ] = None,
    force: ForceOpt = False,
) -> None:
    import sys

    from capplan.hardware import load_hardware
    from capplan.plan import best, sweep
    from capplan.plan.inputs import load_policy

    if objective is Objective.cost and gpu_hour_price is None:
        raise fail("--objective cost needs --gpu-hour-price")
    loaded_workload, spec = call(lambda: load_policy(workload, model))
    profiles = [call(lambda: load_hardware(name)) for name in parse_names(hardware)]
    trainer_profile = call(lambda: load_hardware(trainer_hardware)) if trainer_hardware else None
    tps = parse_ints(tp, "--tensor-parallel-size") or [1]
    kv_dtypes = [dtype_name(d) for d in parse_names(kv_dtype)] or ["bf16"]
    weight_dtypes = [dtype_name(d) for d in parse_names(weight_dtype)] or ["bf16"]
    engine_profile = load_engine_option(engine)
    progress = None
    if sys.stderr.isatty():
        from rich.progress import Progress

        progress = Progress(console=console(stderr=True), transient=True)
        task = progress.add_task("sweeping", total=len(profiles) * len(tps) * len(kv_dtypes) * len(weight_dtypes))
        progress.start()

    def tick(done: int, total: int) -> None:
        if progress is not None:
            progress.update(task, completed=done)

    try:
        grid = call(
            lambda: sweep(
                loaded_workload, spec, profiles, tps, kv_dtypes, weight_dtypes,
                inference_gpus=parse_ints(inference_gpus, "--inference-gpus") or None,
                trainer_gpus=parse_ints(trainer_gpus, "--trainer-gpus") or None,
                trainer_hardware=trainer_profile, mode=mode, gpu_hour_price=gpu_hour_price,
                conversations=conversations, on_config=tick, engine=engine_profile,
            )
        )
    finally:
        if progress is not None:
            progress.stop()
    if output is not None:
        write_grid(grid, output, force)
    render(grid, best(grid, objective.value, top), f"{loaded_workload.name} on {spec.name}", objective.value, gpu_hour_price is not None)
