"""``capplan kv``: the KV-memory budget, capacity and concurrency of a model on a GPU."""

from __future__ import annotations

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
    MaxBatchedTokensOpt,
    MaxNumSeqsOpt,
    EnforceEagerOpt,
    OutputOpt,
    PPOpt,
    PrefixCachingOpt,
    TPListOpt,
    _kv_help,
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
    workload_settings,
    engine_defaults,
    AcceptanceLengthOpt,
    AcceptanceOpt,
    DpOpt,
    DraftModelOpt,
    EpOpt,
    ExpertDtypeOpt,
    KVOffloadGibOpt,
    KVScaleOpt,
    RedundantOpt,
    SpecMethodOpt,
    SpecTokensOpt,
    layout_options,
    spec_inputs,
)

if TYPE_CHECKING:
    from capplan.kv import KVResult


commands = CommandSet()
"""This module's commands (registered by :mod:`capplan.cli.app`)."""


@commands.command(
    "kv",
    help=(
        "KV-cache memory budget, capacity and concurrency of MODEL on HARDWARE.\n\n"
        "Prints the per-GPU budget (usable memory x utilisation - weights - activation peak - "
        "runtime overhead), KV bytes per token, capacity in tokens and paged blocks, and the max "
        "concurrency at each context; several --context / --tp values give one row each. With "
        "--workload, also the resident and runnable conversations that workload allows.\n\n"
        "Examples:\n\n"
        "\b\n"
        "  capplan kv --model llama-3.1-8b --hardware h100-sxm\n"
        "  capplan kv --model llama-3.1-70b --hardware h100-sxm --tp 2,4,8 --context 8192,32768\n"
        "  capplan kv --model qwen3-8b --hardware h100-sxm --workload agentic-tool-rl\n"
        "  capplan kv --model llama-3.1-8b --hardware h100-sxm --usable-mem-gib 79.19 \\\n"
        "      --weights-gib 14.99 --activation-gib 1.19 --runtime-overhead-gib 0.45   # reproduce an engine log\n"
        "  capplan kv --model deepseek-v3 --hardware h200 --tp 1 --ep 16 --weight-dtype fp8   # expert parallelism\n"
        "  capplan kv --model llama-3.1-8b --hardware h100-sxm --spec-method eagle3 --spec-tokens 3 --acceptance-rate 0.7\n"
        "  capplan kv --model llama-3.1-8b --hardware h100-sxm --offload-gib 200   # a CPU KV tier"
    ),
)
def kv(
    cli: typer.Context,
    model: Annotated[str, typer.Option("--model", "-m", help="Model preset name or path to a model YAML.")],
    hardware: Annotated[str, typer.Option("--hardware", "-H", help="Hardware profile name or path.")],
    tp: TPListOpt = None,
    pp: PPOpt = 1,
    kv_dtype: KVDtypeOpt = "bf16",
    weight_dtype: DtypeOpt = "bf16",
    context: Annotated[
        list[str] | None,
        typer.Option(
            "--max-model-len", "--context", "-c",
            help=_kv_help("context", " A list gives one row each (vLLM --max-model-len)."),
        ),
    ] = None,
    gpu_mem_util: GpuMemUtilOpt = None,
    block_size: BlockSizeOpt = None,
    max_batched_tokens: MaxBatchedTokensOpt = None,
    max_num_seqs: MaxNumSeqsOpt = None,
    enforce_eager: EnforceEagerOpt = None,
    engine: EngineOpt = None,
    usable_mem_gib: Annotated[float | None, typer.Option("--usable-mem-gib", help=_kv_help("usable_mem_gib"))] = None,
    weights_gib: Annotated[float | None, typer.Option("--weights-gib", help=_kv_help("weights_gib"))] = None,
    activation_gib: Annotated[float | None, typer.Option("--activation-gib", help=_kv_help("activation_gib"))] = None,
    runtime_overhead_gib: Annotated[
        float | None, typer.Option("--runtime-overhead-gib", help=_kv_help("runtime_overhead_gib"))
    ] = None,
    graph_gib: Annotated[float | None, typer.Option("--graph-gib", help=_kv_help("graph_gib"))] = None,
    sampler: Annotated[
        str | None,
        typer.Option("--sampler", help="Top-k/top-p path of the engine's sampler warm-up, which sizes its memory peak: pytorch, or "
                     "flashinfer (vLLM <= 0.11.0 with FlashInfer installed, or VLLM_USE_FLASHINFER_SAMPLER=1); default the "
                     "engine profile's."),
    ] = None,
    workload: Annotated[
        str | None, typer.Option("--workload", "-w", help="Workload file or name: report its concurrency.")
    ] = None,
    prefix_caching: PrefixCachingOpt = None,
    ep: EpOpt = 1,
    dp: DpOpt = None,
    expert_dtype: ExpertDtypeOpt = None,
    redundant_experts: RedundantOpt = 0,
    kv_scale: KVScaleOpt = "tensor",
    spec_method: SpecMethodOpt = None,
    spec_tokens: SpecTokensOpt = None,
    acceptance_rate: AcceptanceOpt = None,
    acceptance_length: AcceptanceLengthOpt = None,
    draft_model: DraftModelOpt = None,
    offload_gib: KVOffloadGibOpt = None,
    offload: Annotated[bool, typer.Option("--offload", help="Report a CPU KV tier sized by the hardware profile's host memory.")] = False,
    format: FormatOpt = None,
    output: OutputOpt = None,
    force: ForceOpt = False,
) -> None:
    from capplan.hardware import load_hardware
    from capplan.kv import KVInputs, compute_kv, smallest_fitting_tp
    from capplan.modelspec import load_model_spec

    format = pick_format(format, output)
    if offload_gib is not None:
        from capplan.plan.inputs import PlanInputs

        call(lambda: PlanInputs.check(kv_offload_gib=offload_gib))  # plan's range, plan's message
    if prefix_caching is not None and workload is None:
        raise fail("--enable-prefix-caching/--no-enable-prefix-caching applies to a --workload's reuse; the KV budget does not depend on it")
    w = None
    if workload is not None:
        from capplan.workload import load_workload

        w = call(lambda: load_workload(workload, model_given=True, draft_model_given=draft_model is not None))  # -m is required
        if not w.has_rollout:
            raise fail(f"--workload {w.name} (method {w.method}): the workload has no inference engine, so it holds no KV "
                       "cache to size; give a workload that generates (RL, distillation or serving)")
        e = engine_defaults(
            cli, w, tp=tp, pp=pp, kv_dtype=kv_dtype, weight_dtype=weight_dtype, context=context, gpu_mem_util=gpu_mem_util,
            block_size=block_size, max_batched_tokens=max_batched_tokens, max_num_seqs=max_num_seqs, engine=engine,
            prefix_caching=prefix_caching, enforce_eager=enforce_eager,
        )
        tp = [str(e["tp"])] if isinstance(e["tp"], int) else e["tp"]
        context = [str(e["context"])] if isinstance(e["context"], int) else e["context"]
        pp, kv_dtype, weight_dtype, gpu_mem_util = e["pp"], e["kv_dtype"], e["weight_dtype"], e["gpu_mem_util"]
        block_size, max_batched_tokens, max_num_seqs = e["block_size"], e["max_batched_tokens"], e["max_num_seqs"]
        engine, prefix_caching, enforce_eager = e["engine"], e["prefix_caching"], e["enforce_eager"]
    spec = call(lambda: load_model_spec(model))
    hw = call(lambda: load_hardware(hardware))
    tps = parse_ints(tp, "--tensor-parallel-size")
    contexts = parse_ints(context, "--context")
    for flag, given_values, values in (("--tensor-parallel-size", tp, tps), ("--context", context, contexts)):
        if given_values is not None and not values:  # given, but only empty items: not the default
            raise fail(f"{flag} {','.join(given_values) if isinstance(given_values, list) else given_values!r}: give at least one value, e.g. 1,2,4")
    tps = tps or [1]
    engine_profile = load_engine_option(engine, enforce_eager)
    contexts = contexts or [8192]
    rows: list[KVResult] = []
    for t in tps:
        for ctx in contexts:
            inp = call(lambda: KVInputs(
                tp=t,
                pp=pp,
                kv_dtype=dtype_name(kv_dtype),
                weight_dtype=dtype_name(weight_dtype),
                context=ctx,
                block_size=block_size,
                gpu_mem_util=gpu_mem_util,
                max_batched_tokens=max_batched_tokens,
                max_num_seqs=max_num_seqs,
                usable_mem_gib=usable_mem_gib,
                weights_gib=weights_gib,
                activation_gib=activation_gib,
                runtime_overhead_gib=runtime_overhead_gib,
                graph_gib=graph_gib,
                sampler=sampler,
                engine=engine_profile,
                **layout_options(ep, dp, expert_dtype, redundant_experts, kv_scale),
            ))
            row = call(lambda: compute_kv(spec, hw, inp))
            rows.append(row)
            if row.max_concurrent_sequences < 1:
                better = smallest_fitting_tp(spec, hw, inp)
                hint = f"; the smallest that fits one is --tensor-parallel-size {better}" if better else "; no tensor-parallel degree up to 64 fits one"
                warn(
                    f"tp {t}: not one sequence of {ctx:,} tokens fits in the {row.kv_budget_gib_per_gpu:.2f} GiB KV budget "
                    f"per GPU (an engine would refuse to start){hint}"
                )
    for ctx in contexts:
        if ctx > spec.max_position_embeddings:
            warn(
                f"--max-model-len {ctx:,} exceeds {spec.name}'s max_position_embeddings ({spec.max_position_embeddings:,}); "
                "vLLM refuses a longer --max-model-len"
            )
    sinp = spec_inputs(spec_method, spec_tokens, acceptance_rate, acceptance_length, draft_model)
    features = _features(spec, hw, rows, sinp, offload_gib if offload_gib is not None else (None if not offload else -1.0),
                         engine_profile)
    conc = None
    if workload is not None:
        from capplan.concurrency import workload_concurrency

        if prefix_caching is not None:
            w = workload_settings(w, prefix_caching=prefix_caching)
        conc = [call(lambda: workload_concurrency(spec, hw, r, w, max_num_seqs=r.max_num_seqs)) for r in rows]

    if format is Format.json:
        from capplan.output import to_json

        docs = [r.as_dict() for r in rows]
        if conc is not None:
            for d, c in zip(docs, conc):
                d["workload_concurrency"] = c.as_dict()
        for d, f in zip(docs, features):
            d.update(f)
        emit(to_json(docs), output, force)
        return
    if format is Format.csv:
        from capplan.output import to_csv

        docs = [r.as_dict() for r in rows]
        if conc is not None:
            for d, c in zip(docs, conc):
                d.update({f"workload_{k}": v for k, v in c.as_dict().items()})
        for d, f in zip(docs, features):
            for group, values in f.items():
                d.update({f"{group}_{k}": v for k, v in values.items()})
        header = list(docs[0])
        emit(to_csv(header, [[d[k] for k in header] for d in docs]), output, force)
        return
    con = console() if output is None else file_console()
    # the sampler path sizes the activation peak unless it is given
    path = None if activation_gib is not None else engine_profile.memory.sampler_path(sampler)
    render(con, rows, conc, path)
    if any(features):
        render_features(con, rows, features)
    if output is not None:
        emit(con.file.getvalue(), output, force)  # type: ignore[attr-defined]


def render(con, rows, conc, sampler: str | None = None) -> None:  # noqa: ANN001
    from rich.table import Table

    escape = safe
    r0 = rows[0]
    con.print(
        f"{escape(r0.model)} on {escape(r0.hardware)}: kv {r0.kv_dtype}, weights {r0.weight_dtype}, pp {r0.pp}, "
        f"block {r0.block_size} tokens, gpu_mem_util {r0.gpu_mem_util:g}, max batched tokens {r0.max_batched_tokens:,}, "
        f"max seqs {r0.max_num_seqs:,}{f', sampler warm-up {sampler}' if sampler else ''}. GiB = 2^30 bytes."
    )
    con.print(
        f"Engine profile {escape(r0.engine_profile)} ({escape(r0.calibration)})."
    )
    if r0.ep > 1 or r0.dp > 1:
        con.print(f"Expert parallelism {r0.ep}, data-parallel attention {r0.dp}"
                  f"{f', experts in {r0.expert_dtype}' if r0.expert_dtype else ''}: figures are per GPU; an instance of "
                  f"tp x dp = {r0.tp * r0.dp} GPUs holds {r0.dp} x the KV of one rank.")
    t = Table(title="Per-GPU memory budget and KV capacity (one column per configuration)", title_justify="left")
    t.add_column("", no_wrap=True)
    for r in rows:
        t.add_column(f"tp {r.tp}\n{r.context:,} tok", justify="right")
    lines = [
        ("device memory [GiB]", lambda r: f"{r.usable_mem_gib:.2f}"),
        ("x gpu_mem_util [GiB]", lambda r: f"{r.usable_mem_gib * r.gpu_mem_util:.2f}"),
        ("- weights [GiB]", lambda r: f"{r.weights_gib_per_gpu:.2f}"),
        ("- activation peak [GiB]", lambda r: f"{r.activation_gib_per_gpu:.2f}"),
        ("- runtime overhead [GiB]", lambda r: f"{r.runtime_overhead_gib_per_gpu:.2f}"),
        ("- CUDA graphs [GiB]", lambda r: f"{r.graph_gib_per_gpu:.2f}"),
        ("= KV budget [GiB]", lambda r: f"{r.kv_budget_gib_per_gpu:.2f}"),
        ("KV bytes/token, model", lambda r: f"{r.kv_bytes_per_token:,.0f}"),
        ("KV bytes/token, per GPU", lambda r: f"{r.kv_bytes_per_token_per_gpu:,.0f}"),
        ("KV capacity [tokens]", lambda r: f"{r.kv_capacity_tokens:,}"),
        ("KV capacity [blocks]", lambda r: f"{r.kv_capacity_blocks:,}"),
        ("max concurrency [x]", lambda r: f"{r.max_concurrency_x:.2f}"),
        ("max sequences at context", lambda r: f"{r.max_concurrent_sequences:,}"),
    ]
    for label, cell in lines:
        t.add_row(escape(label), *(cell(r) for r in rows), style="bold" if label.startswith("=") else None)
    con.print(t)
    if conc:
        w = Table(title=f"Workload {escape(conc[0].workload)}: conversations per replica", title_justify="left")
        w.add_column("", no_wrap=True)
        for r in rows:
            w.add_column(f"tp {r.tp}", justify="right")
        wl = [
            ("KV during tool wait", lambda c: escape(c.kv_during_tool_wait)),
            ("mean KV held [tokens]", lambda c: f"{c.mean_kv_tokens_held:,.0f}"),
            ("resident conversations", lambda c: f"{c.resident_conversations:,.1f}"),
            ("  runnable (decoding)", lambda c: f"{c.runnable_sequences:,.1f}"),
            ("  waiting on tools", lambda c: f"{c.waiting_conversations:,.1f}"),
            ("resident at p95 peak context", lambda c: f"{c.resident_at_p95_peak:,}"),
            ("decode step [ms]", lambda c: f"{c.decode_step_s * 1e3:.1f}"),
            ("binding limit", lambda c: escape(c.binding)),
        ]
        for label, cell in wl:
            w.add_row(escape(label), *(cell(c) for c in conc))
        con.print(w)
        con.print(
            "Resident = KV capacity / time-averaged KV a conversation holds (Little's law); runnable = resident x "
            "share of its lifetime spent decoding; waiting conversations hold KV (retain) but no decode slot."
        )


def _features(spec: Any, hw: Any, rows: list["KVResult"], sinp: Any, offload_gib: float | None, engine: Any) -> list[dict[str, Any]]:
    """Per row: the drafter's memory (``speculative``) and the CPU tier (``offload``), when asked."""
    out: list[dict[str, Any]] = []
    for r in rows:
        f: dict[str, Any] = {}
        if sinp is not None:
            from capplan.speculative import spec_memory

            f["speculative"] = call(lambda: spec_memory(spec, r, sinp)).as_dict()
        if offload_gib is not None:
            from capplan.errors import InputError
            from capplan.units import GIB

            per_gpu = hw.host_mem_bytes_per_gpu if offload_gib < 0 else offload_gib * GIB
            if per_gpu is None:
                raise call(lambda: (_ for _ in ()).throw(InputError(
                    f"--offload: {hw.name} has no host_mem_gb_per_node in its profile; give --offload-gib")))
            f["offload"] = {
                "host_kv_gib_per_gpu": per_gpu / GIB,
                "host_kv_capacity_tokens": int(per_gpu // r.kv_bytes_per_token_per_gpu),
                "host_link_bandwidth_gbps": hw.host_link_bandwidth_gbps,
            }
        out.append(f)
    return out


def render_features(con, rows, features) -> None:  # noqa: ANN001
    """The drafter's and the CPU tier's lines, one column per configuration."""
    from rich.markup import escape
    from rich.table import Table

    t = Table(title="Engine features (per GPU)", title_justify="left")
    t.add_column("", no_wrap=True)
    for r in rows:
        t.add_column(f"tp {r.tp}\n{r.context:,} tok", justify="right")
    lines: list[tuple[str, Any]] = []
    if "speculative" in features[0]:
        m = features[0]["speculative"]["method"]
        lines += [
            (f"{m} drafter weights [GiB]", lambda f: f"{f['speculative']['draft_weights_gib_per_gpu']:.2f}"),
            (f"{m} drafter KV bytes/token", lambda f: f"{f['speculative']['draft_kv_bytes_per_token_per_gpu']:,.0f}"),
            ("KV capacity with drafter [tokens]", lambda f: f"{f['speculative']['kv_capacity_tokens']:,}"),
            ("drafted positions per sequence", lambda f: f"{f['speculative']['extra_kv_tokens_per_sequence']:,}"),
        ]
    if "offload" in features[0]:
        lines += [
            ("CPU KV tier [GiB]", lambda f: f"{f['offload']['host_kv_gib_per_gpu']:.1f}"),
            ("CPU KV tier [tokens]", lambda f: f"{f['offload']['host_kv_capacity_tokens']:,}"),
        ]
    for label, cell in lines:
        t.add_row(escape(label), *(cell(f) for f in features))
    con.print(t)
