"""``capplan roofline``: step time, tokens/s, intensity and bound of engine steps."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from capplan.cli.registry import CommandSet
from capplan.cli.common import (
    BlockSizeOpt,
    DtypeOpt,
    EngineOpt,
    Format,
    FormatOpt,
    ForceOpt,
    GpuMemUtilOpt,
    KVDtypeOpt,
    MaxModelLenOpt,
    MaxNumSeqsOpt,
    EnforceEagerOpt,
    OutputOpt,
    PPOpt,
    PrefixCachingOpt,
    TPOpt,
    call,
    console,
    dtype_name,
    emit,
    fail,
    file_console,
    load_engine_option,
    parse_ints,
    pick_format,
    safe,
    warn,
    AcceptanceLengthOpt,
    AcceptanceOpt,
    AlltoallModeOpt,
    DpOpt,
    DraftModelOpt,
    EpOpt,
    ExpertDtypeOpt,
    GemmDtypeOpt,
    KVScaleOpt,
    RedundantOpt,
    SpecMethodOpt,
    SpecTokensOpt,
    TwoBatchOverlapOpt,
    layout_options,
    spec_inputs,
    warn_known_error,
)

if TYPE_CHECKING:
    from capplan.hardware import HardwareProfile
    from capplan.modelspec import ModelSpec
    from capplan.roofline import RooflineInputs

commands = CommandSet()
"""This module's commands (registered by :mod:`capplan.cli.app`)."""


PLOT_HINT = "pip install 'capplan[plot]'"


def _rf_help(field: str) -> str:
    from capplan.options import field_help

    text = field_help("capplan.roofline", "RooflineInputs", field)
    return text + " Default: the profile's." if field.endswith(("efficiency", "latency_us", "overhead_s")) else text


class Kind(str, Enum):
    decode = "decode"
    prefill = "prefill"
    score = "score"
    mixed = "mixed"


@commands.command(
    "roofline",
    help=(
        "Price engine steps with a roofline: FLOPs and HBM bytes per GPU, step time = max(compute, "
        "memory) + tensor-parallel communication + a fixed overhead, tokens/s, arithmetic intensity, "
        "the bound (compute or memory), MBU and MFU. One row per batch x context (x prompt) combination. "
        "Efficiencies and host times default to the engine profile's time terms (--engine).\n\n"
        "Kinds: decode (one new position per sequence after CONTEXT cached), prefill (PROMPT positions "
        "after CONTEXT cached, default 0), score (a known record of PROMPT positions forwarded once, "
        "logits at every position), mixed (BATCH decodes plus one prompt chunk under --token-budget).\n\n"
        "Examples:\n\n\b\n"
        "  capplan roofline -m llama-3.1-8b --hardware h100-sxm\n"
        "  capplan roofline -m llama-3.1-70b --hardware h100-sxm --tp 4 --weight-dtype fp8 --kv-dtype fp8\n"
        "  capplan roofline -m qwen3-30b-a3b --hardware h100-sxm --kind prefill --prompt 512,2048,8192 --batch 1,4\n"
        "  capplan roofline -m llama-3.1-8b --hardware h100-sxm --format json --plot roofline.png\n"
        "  capplan roofline -m deepseek-v3 --hardware h200 --tp 1 --ep 16 --weight-dtype fp8 --batch 64,256   # expert parallelism\n"
        "  capplan roofline -m llama-3.1-8b --hardware h100-sxm --spec-method eagle3 --spec-tokens 3 --acceptance-rate 0.7"
    ),
)
def roofline(
    model: Annotated[str, typer.Option("--model", "-m", help="Model preset name or model YAML path.")],
    hardware: Annotated[str, typer.Option("--hardware", "-H", help="Hardware profile name or YAML path.")],
    tp: TPOpt = 1,
    pp: PPOpt = 1,
    weight_dtype: DtypeOpt = "bf16",
    kv_dtype: KVDtypeOpt = "bf16",
    engine: EngineOpt = None,
    gpu_mem_util: GpuMemUtilOpt = None,
    max_num_seqs: MaxNumSeqsOpt = None,
    enforce_eager: EnforceEagerOpt = None,
    block_size: BlockSizeOpt = None,
    max_model_len: MaxModelLenOpt = None,
    prefix_caching: PrefixCachingOpt = None,
    batch: Annotated[str, typer.Option("--batch", help="Comma-separated batch sizes [sequences].")] = "1,8,64,256",
    context: Annotated[
        str | None,
        typer.Option("--context", help="Comma-separated cached positions per sequence (default 2048,8192; 0 for prefill)."),
    ] = None,
    prompt: Annotated[
        str | None, typer.Option("--prompt", help="Comma-separated prompt/record lengths [positions] (prefill, score, mixed; "
                                 "default 2048).")
    ] = None,
    kind: Annotated[Kind, typer.Option("--kind", help="decode, prefill, score or mixed.")] = Kind.decode,
    token_budget: Annotated[
        int,
        typer.Option(
            "--max-num-batched-tokens", "--token-budget",
            help="Positions a step may forward [positions] (vLLM max_num_batched_tokens; default 8192): a mixed step's "
            "budget, and the activation peak of the memory check; a prefill, score or decode step above it is refused.", min=1,
        ),
    ] = None,
    gemm_dtype: GemmDtypeOpt = None,
    compute_efficiency: Annotated[float | None, typer.Option(help=_rf_help("compute_efficiency"))] = None,
    bandwidth_efficiency: Annotated[float | None, typer.Option(help=_rf_help("bandwidth_efficiency"))] = None,
    interconnect_efficiency: Annotated[float | None, typer.Option(help=_rf_help("interconnect_efficiency"))] = None,
    allreduce_latency_us: Annotated[float | None, typer.Option(help=_rf_help("allreduce_latency_us"))] = None,
    step_overhead_s: Annotated[float | None, typer.Option(help=_rf_help("step_overhead_s"))] = None,
    ep: EpOpt = 1,
    dp: DpOpt = None,
    expert_dtype: ExpertDtypeOpt = None,
    redundant_experts: RedundantOpt = 0,
    kv_scale: KVScaleOpt = "tensor",
    two_batch_overlap: TwoBatchOverlapOpt = False,
    alltoall_mode: AlltoallModeOpt = "auto",
    spec_method: SpecMethodOpt = None,
    spec_tokens: SpecTokensOpt = None,
    acceptance_rate: AcceptanceOpt = None,
    acceptance_length: AcceptanceLengthOpt = None,
    draft_model: DraftModelOpt = None,
    format: FormatOpt = None,
    output: OutputOpt = None,
    force: ForceOpt = False,
    plot: Annotated[
        Path | None,
        typer.Option("--plot", help=f"Also draw the roofline and decode tokens/s vs batch to a .png or .svg ({PLOT_HINT}).", dir_okay=False),
    ] = None,
) -> None:
    from capplan.hardware import load_hardware
    from capplan.modelspec import load_model_spec
    from capplan.roofline import RooflineInputs, roofline_rows

    format = pick_format(format, output)
    from capplan.output import ensure_distinct

    call(lambda: ensure_distinct({"--output": output, "--plot": plot}))
    if pp != 1:
        raise fail(f"--pipeline-parallel-size {pp}: roofline prices the steps of one pipeline stage set; give 1 (capplan kv models the memory of pipeline stages)")
    if prefix_caching is not None:
        raise fail("--enable-prefix-caching/--no-enable-prefix-caching does not apply to roofline: give the cached prefix of each step with --context")
    batches = parse_ints(batch, "--batch", 1)
    contexts = parse_ints(context, "--context", 0) if context is not None else ([0] if kind in (Kind.prefill, Kind.score) else [2048, 8192])
    if prompt is not None and kind is Kind.decode:
        raise fail("--prompt does not apply to --kind decode (one new position per sequence after --context); "
                   "give --kind prefill, score or mixed")
    prompts = parse_ints(prompt if prompt is not None else "2048", "--prompt", 1)
    for flag, given, values in (("--batch", batch, batches), ("--context", context, contexts), ("--prompt", prompt, prompts)):
        if not values:
            raise fail(f"{flag} {given!r}: give at least one value, e.g. 1,8,64")
    from capplan.units import MAX_CONTEXT_TOKENS

    for flag, values, low in (("--context", contexts, 0), ("--prompt", prompts, 1)):  # the cap kv and the workloads take
        if max(values) > MAX_CONTEXT_TOKENS:
            raise fail(f"{flag} {max(values)}: must be in [{low}, {MAX_CONTEXT_TOKENS:,}] tokens")
    if len(batches) * len(contexts) * len(prompts) > MAX_ROWS:
        raise fail(
            f"--batch x --context x --prompt: {len(batches) * len(contexts) * len(prompts):,} rows, above {MAX_ROWS:,}; "
            "give fewer values"
        )
    if max_model_len is not None:
        longest = max(contexts) + (max(prompts) if kind is not Kind.decode else 1)
        if longest > max_model_len:
            raise fail(
                f"--max-model-len {max_model_len:,}: a {kind.value} step reaches {longest:,} positions (--context + --prompt); "
                "lower --context/--prompt or raise --max-model-len"
            )
    if token_budget is not None and kind is not Kind.mixed:
        widest = max(batches) * (1 if kind is Kind.decode else max(prompts))
        if widest > token_budget:
            raise fail(f"--max-num-batched-tokens {token_budget:,}: a {kind.value} step of {widest:,} positions (--batch x "
                       f"{'1' if kind is Kind.decode else '--prompt'}) exceeds it, and a {kind.value} step is priced whole; "
                       "give --kind mixed to price chunks under the budget, or a budget of at least the step")
    token_budget = 8192 if token_budget is None else token_budget
    if plot is not None:
        _check_plot_path(plot, force)
    spec = call(lambda: load_model_spec(model))
    hw = call(lambda: load_hardware(hardware))
    engine_profile = warn_known_error(load_engine_option(engine, enforce_eager), [hw.name], spec)
    inp = call(
        lambda: RooflineInputs(
            tp=tp, weight_dtype=dtype_name(weight_dtype), kv_dtype=dtype_name(kv_dtype),
            compute_efficiency=compute_efficiency, bandwidth_efficiency=bandwidth_efficiency,
            interconnect_efficiency=interconnect_efficiency, allreduce_latency_us=allreduce_latency_us,
            step_overhead_s=step_overhead_s, engine=engine_profile,
            **layout_options(ep, dp, expert_dtype, redundant_experts, kv_scale, two_batch_overlap, alltoall_mode, gemm_dtype),
        )
    )
    sinp = spec_inputs(spec_method, spec_tokens, acceptance_rate, acceptance_length, draft_model)
    if sinp is not None and kind is not Kind.decode:
        raise fail(f"--spec-method prices verify steps against decode steps: give --kind decode (not {kind.value})")
    import warnings

    from capplan.hardware import DtypeFallbackWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DtypeFallbackWarning)
        rows = call(lambda: roofline_rows(spec, hw, inp, kind.value, batches, contexts, prompts, token_budget))
    for message in dict.fromkeys(str(w.message) for w in caught if issubclass(w.category, DtypeFallbackWarning)):
        typer.echo(f"Warning: {message}", err=True)
    spec_table = None
    if sinp is not None:
        from capplan.speculative import spec_rows

        spec_table = call(lambda: spec_rows(spec, hw, inp, sinp, batches, contexts))
        for row, extra in zip(rows, spec_table):
            row.update({f"spec_{k}": v for k, v in extra.items() if k not in ("batch", "context")})
    fits = _memory_fit(spec, hw, inp, rows, gpu_mem_util, block_size, max_num_seqs, token_budget)
    bad = [f for f in fits if f]
    if bad and format is not Format.table:
        warn(f"{len(bad)} of {len(rows)} rows do not fit on {hw.name} at tp {tp}: {bad[0]} (first); their figures are not achievable")
    if format is Format.json:
        from capplan.output import to_json

        emit(to_json([{**r, "fits": not why, "fit_reason": why} for r, why in zip(rows, fits)]), output, force)
    elif format is Format.csv:
        from capplan.output import to_csv
        from capplan.roofline import ROW_KEYS

        keys = list(ROW_KEYS) + [k for k in rows[0] if k.startswith("spec_")]
        emit(to_csv([*keys, "fits", "fit_reason"], ([*(r[k] for k in keys), not why, why] for r, why in zip(rows, fits))),
             output, force)
    else:
        _table(spec, hw, inp, rows, contexts, output, force, fits, spec_table)
    if plot is not None:
        from capplan.plots import plot_roofline

        curves = _decode_curves(spec, hw, inp, rows, batches, contexts)
        call(lambda: plot_roofline(spec, hw, inp, rows, curves, plot, force=force))
        typer.echo(f"wrote {plot}", err=True)


MAX_ROWS = 100_000
"""Most rows one roofline call prints [rows]."""


def _memory_fit(
    spec: "ModelSpec", hw: "HardwareProfile", inp: "RooflineInputs", rows: list[dict[str, Any]],
    gpu_mem_util: float | None, block_size: int | None, max_num_seqs: int | None, token_budget: int,
) -> list[str]:
    """Per row, why its batch cannot be held on the GPU ("" when it can): the KV positions its
    sequences hold against the KV capacity of the same configuration (:func:`capplan.kv.compute_kv`),
    and the batch against ``--max-num-seqs`` when given."""
    from capplan.errors import DoesNotFitError, InputError
    from capplan.kv import KVInputs, compute_kv

    try:
        kv = compute_kv(spec, hw, KVInputs(
            tp=inp.tp, kv_dtype=inp.kv_dtype, weight_dtype=inp.weight_dtype, gpu_mem_util=gpu_mem_util,
            block_size=block_size, max_num_seqs=max_num_seqs, max_batched_tokens=token_budget, engine=inp.engine,
            ep=inp.ep, dp=inp.dp, expert_dtype=inp.expert_dtype, redundant_experts=inp.redundant_experts, kv_scale=inp.kv_scale,
        ))
    except DoesNotFitError:
        return ["the weights alone exceed the memory budget"] * len(rows)
    except InputError as exc:
        raise fail(str(exc)) from None
    out = []
    for row in rows:
        held = row["batch"] * (row["context"] + row["prompt"] + (1 if row["kind"] == "decode" else 0))
        if row["kind"] == "mixed":
            held = row["batch"] * (row["context"] + 1) + row["prompt"]
        if max_num_seqs is not None and row["batch"] > max_num_seqs:
            out.append(f"batch {row['batch']:,} > --max-num-seqs {max_num_seqs:,}")
        elif held > kv.kv_capacity_tokens:
            out.append(f"batch {row['batch']:,} holds {held:,} KV positions, capacity {kv.kv_capacity_tokens:,}")
        else:
            out.append("")
    return out


def _check_plot_path(path: Path, force: bool) -> None:
    if path.suffix.lower() not in (".png", ".svg"):
        raise fail(f"--plot {path}: give a .png or .svg file name")
    from capplan.output import ensure_new

    call(lambda: ensure_new(path, force))
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise fail(f"--plot needs matplotlib, which is not installed; install it with: {PLOT_HINT}") from None


def _table(
    spec: "ModelSpec", hw: "HardwareProfile", inp: "RooflineInputs", rows: list[dict[str, Any]], contexts: list[int],
    output: Path | None, force: bool, fits: list[str] | None = None, spec_table: list[dict[str, Any]] | None = None,
) -> None:
    from rich import box
    from rich.table import Table

    from capplan.roofline import critical_decode_batch, ridge_point

    r = inp.resolved(hw)
    con = console() if output is None else file_console()
    kind = rows[0]["kind"]
    rate = "tok/s"
    meaning = {
        "decode": "tok/s = output tokens/s; step = time per output token",
        "prefill": "tok/s = prompt positions/s; step = time to first token",
        "score": "tok/s = scored positions/s",
        "mixed": "tok/s = decoded + prefilled positions/s; prompt = the chunk prefilled",
    }[kind]
    t = Table(
        title=safe(
            f"{spec.name} on {hw.name}, TP{inp.tp}, weights {inp.weight_dtype} (GEMMs on {r.gemm_dtype}), "
            f"KV {inp.kv_dtype}, engine profile {inp.profile().name}: {kind} steps"
        ),
        caption=f"ctx = cached positions before the step; TFLOP and GB per GPU, tok/s for the whole TP group; {meaning}.",
        title_justify="left",
        caption_justify="left",
        box=box.SIMPLE_HEAD,
        collapse_padding=True,
        pad_edge=False,
    )
    cols = ["batch"] + (["ctx"] if kind != "score" else []) + (["prompt"] if kind != "decode" else [])
    cols += ["step ms", rate, "TFLOP", "GB", "FLOP/B", "bound", "MBU", "MFU"]
    fits = fits or [""] * len(rows)
    if any(fits):
        cols.append("fits")
    for col in cols:
        t.add_column(col, justify="left" if col in ("bound", "fits") else "right", no_wrap=True)
    for row, why in zip(rows, fits):
        cells = {
            "batch": f"{row['batch']:,}", "ctx": f"{row['context']:,}", "prompt": f"{row['prompt']:,}",
            "step ms": f"{row['step_time_s'] * 1e3:,.2f}", rate: f"{row['tokens_per_s']:,.0f}",
            "TFLOP": f"{row['flops'] / 1e12:,.2f}", "GB": f"{row['bytes'] / 1e9:,.1f}",
            "FLOP/B": f"{row['arithmetic_intensity']:,.1f}", "bound": row["bound"],
            "MBU": f"{row['mbu']:.0%}", "MFU": f"{row['mfu']:.0%}",
            "fits": "no" if why else "yes",
        }
        t.add_row(*(cells[c] for c in cols), style="dim" if why else None)
    con.print(t)
    if any(fits):
        first = next(w for w in fits if w)
        con.print(
            f"{sum(1 for w in fits if w)} row(s) do not fit on {safe(hw.name)} at TP{inp.tp} (e.g. {safe(first)}): "
            "their step times are a roofline bound, not a configuration an engine can run."
        )
    raw = ridge_point(hw, r.gemm_dtype or "bf16")
    derated = ridge_point(hw, r.gemm_dtype or "bf16", r.compute_efficiency or 1, r.bandwidth_efficiency or 1)
    con.print(
        f"Ridge point ({r.gemm_dtype}): {raw:,.0f} FLOP/B at datasheet peak and bandwidth, {derated:,.0f} FLOP/B "
        f"with GEMM efficiency {r.compute_efficiency:.3g} and bandwidth efficiency {r.bandwidth_efficiency:.3g} "
        f"(engine profile {safe(inp.profile().name)})."
    )
    if kind in ("decode", "mixed"):
        crit = critical_decode_batch(spec, hw, inp, contexts)
        parts = [f"context {c:,}: {'none, memory-bound at every batch' if b == float('inf') else f'{int(b):,}'}" for c, b in zip(contexts, crit)]
        con.print("Critical decode batch (smallest batch at which decode turns compute-bound): " + "; ".join(parts) + ".")
    con.print(
        f"Per step: {r.step_overhead_s * 1e3:.3g} ms fixed host time; TP all-reduce latency {r.allreduce_latency_us:.3g} us, "
        f"interconnect efficiency {r.interconnect_efficiency:.3g} (engine profile {safe(inp.profile().name)}, "
        f"{safe(inp.profile().calibration)}; override with the flags)."
    )
    from capplan.roofline import gqa_group, kv_reads_per_step

    reread, group = inp.profile().time_on(hw.name).gqa_kv_reread, gqa_group(spec, inp.tp)
    if reread > 0 and group > 1:
        con.print(f"Attention over cached positions reads each K/V head {kv_reads_per_step(group, reread):.3g} times a step "
                  f"({group:.3g} query heads share one on a GPU; gqa_kv_reread {reread:.3g} in engine profile "
                  f"{safe(inp.profile().name)}).")
    if inp.ep > 1 or (inp.dp or 1) > 1:
        from capplan.kv import resolve_dp

        con.print(f"Expert parallelism {inp.ep} over tp x dp = {inp.tp} x {resolve_dp(inp.tp, inp.ep, inp.dp)} GPUs: batch and "
                  "tok/s are one data-parallel rank's; the MoE layers see every rank's tokens and add a dispatch and a combine "
                  f"all-to-all{' (overlapped by two-batch overlap)' if inp.two_batch_overlap else ''}.")
    if spec_table:
        s0 = spec_table[0]
        st = Table(title=f"Speculative decoding: {s0['method']}, {s0['num_speculative_tokens']} drafted, "
                         f"{s0['tokens_per_step']:.2f} tokens per verify step (times in ms)", title_justify="left",
                   box=box.SIMPLE_HEAD, collapse_padding=True, pad_edge=False)
        for col in ("batch", "ctx", "decode", "verify", "draft", "per tok", "speed-up", "bound"):
            st.add_column(col, justify="left" if col == "bound" else "right", no_wrap=True)
        for x in spec_table:
            st.add_row(f"{x['batch']:,}", f"{x['context']:,}", f"{x['decode_step_s'] * 1e3:,.2f}", f"{x['verify_step_s'] * 1e3:,.2f}",
                       f"{x['draft_s'] * 1e3:,.2f}", f"{x['time_per_token_s'] * 1e3:,.2f}", f"{x['speedup']:.2f}x", x["verify_bound"])
        con.print(st)
    if output is not None:
        emit(con.file.getvalue(), output, force)  # type: ignore[attr-defined]


def _decode_curves(
    spec: "ModelSpec", hw: "HardwareProfile", inp: "RooflineInputs", rows: list[dict[str, Any]], batches: list[int], contexts: list[int]
) -> list[tuple[int, Any, Any]]:
    """``(context, batch, tokens_per_s)`` of the plot's decode-throughput panel: one curve per
    context (per prompt length for prefill and score rows), batches 1 .. twice the largest."""
    import numpy as np

    from capplan.roofline import decode_step

    batch = np.unique(np.geomspace(1, max(max(batches), 2) * 2, 40).round())
    decode_contexts = contexts if rows[0]["kind"] in ("decode", "mixed") else sorted({row["prompt"] for row in rows})
    return [(c, batch, batch / decode_step(spec, hw, inp, batch, c).step_time_s) for c in decode_contexts]
