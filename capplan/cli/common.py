"""Helpers shared by every command: options, error conversion, output."""

from __future__ import annotations

import math

import sys
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Callable, Iterable, Iterator, TypeVar

import typer

from capplan.units import dtype_name  # noqa: F401  (re-exported: the commands spell dtypes through it)

if TYPE_CHECKING:
    from rich.console import Console

    from capplan.modelspec import ModelSpec

T = TypeVar("T")


class Format(str, Enum):
    """Output formats shared by the tabular commands."""

    table = "table"
    csv = "csv"
    json = "json"


FormatOpt = Annotated[
    Format | None,
    typer.Option(
        "--format", "-f",
        help="Output format: a rich table, CSV (long format) or JSON [default: the --output file's extension "
        "(.csv, .json), else table].",
        show_default=False,
    ),
]
OutputOpt = Annotated[
    Path | None,
    typer.Option(
        "--output", "-o",
        help="Write to this file (atomically; '-' is standard output) instead of standard output; "
        ".csv and .json choose the format.",
        dir_okay=False,
    ),
]

EXTENSION_FORMATS = {".csv": "csv", ".json": "json", ".parquet": "parquet", ".png": "png", ".svg": "svg"}
"""Output file extensions that name a format."""


def pick_format(format: "Format | None", output: Path | None, allowed: tuple[str, ...] = ("csv", "json")) -> Format:
    """The output format: ``--format`` if given, else the ``--output`` file's extension, else table.

    An extension that names a format this command cannot write, or one that contradicts an
    explicit ``--format``, is a one-line error (exit 2): ``-o x.csv`` never holds a box-drawn table.
    """
    ext = EXTENSION_FORMATS.get(output.suffix.lower()) if output is not None and str(output) != "-" else None
    if ext is not None and ext not in allowed:
        raise fail(f"--output {output}: this command cannot write {ext}; give a .{' or .'.join(allowed)} file or no extension")
    if format is None:
        return Format(ext) if ext is not None else Format.table
    if ext is not None and ext != format.value:
        raise fail(f"--output {output} is a .{ext} file but --format is {format.value}; drop one or make them agree")
    return format
ForceOpt = Annotated[bool, typer.Option("--force", help="Overwrite an existing --output file.")]


def _kv_help(field: str, extra: str = "") -> str:
    from capplan.options import field_help

    return field_help("capplan.kv", "KVInputs", field) + extra


# Engine settings under vLLM's engine-argument names (``vllm serve --help``), with capplan's
# earlier short names kept as aliases. One definition each, shared by every command that
# models an engine.
TPListOpt = Annotated[
    list[str] | None,
    typer.Option("--tensor-parallel-size", "-tp", "--tp", help=_kv_help("tp", " A list (1,2,4) gives one row each.")),
]
TPOpt = Annotated[int, typer.Option("--tensor-parallel-size", "-tp", "--tp", help=_kv_help("tp"), min=1)]
PPOpt = Annotated[int, typer.Option("--pipeline-parallel-size", "-pp", "--pp", help=_kv_help("pp"), min=1)]
KVDtypeOpt = Annotated[
    str,
    typer.Option(
        "--kv-cache-dtype", "--kv-dtype",
        help=_kv_help("kv_dtype", " One of bf16, fp16, fp8, int8, int4 (vLLM spellings auto, bfloat16, float16, fp8_e4m3, fp8_e5m2 accepted)."),
    ),
]
DtypeOpt = Annotated[
    str,
    typer.Option(
        "--dtype", "--weight-dtype",
        help=_kv_help("weight_dtype", " One of bf16, fp16, fp8, int8, int4, nvfp4, mxfp4 (vLLM spellings auto, bfloat16, float16, half accepted)."),
    ),
]
GpuMemUtilOpt = Annotated[
    float | None, typer.Option("--gpu-memory-utilization", "--gpu-mem-util", help=_kv_help("gpu_mem_util"))
]
MaxNumSeqsOpt = Annotated[int | None, typer.Option("--max-num-seqs", help=_kv_help("max_num_seqs"), min=1)]
MaxBatchedTokensOpt = Annotated[
    int | None,
    typer.Option("--max-num-batched-tokens", "--max-batched-tokens", help=_kv_help("max_batched_tokens"), min=1),
]
BlockSizeOpt = Annotated[int | None, typer.Option("--block-size", help=_kv_help("block_size"), min=1)]
MaxModelLenOpt = Annotated[
    int | None,
    typer.Option(
        "--max-model-len",
        help="Longest context a sequence may reach [tokens] (vLLM --max-model-len): caps the workload's "
        "conversation.max_context; a response that would pass it is truncated there.",
        min=1,
    ),
]
PrefixCachingOpt = Annotated[
    bool | None,
    typer.Option(
        "--enable-prefix-caching/--no-enable-prefix-caching",
        help="Automatic prefix caching (vLLM): on sets the workload's cache.reuse to auto (each invocation reuses "
        "the prefix earlier ones computed), off to none [default: the workload's cache.reuse].",
        show_default=False,
    ),
]


def _rf_help(field: str) -> str:
    from capplan.options import field_help

    return field_help("capplan.roofline", "RooflineInputs", field)


def _spec_help(field: str) -> str:
    from capplan.options import field_help

    return field_help("capplan.speculative", "SpecInputs", field)


# Engine features (expert parallelism, quantisation scales, speculative decoding, a CPU KV tier):
# one definition each, shared by kv, roofline, plan and sweep.
EpOpt = Annotated[int, typer.Option("--ep", "--expert-parallel-size", help=_kv_help("ep"), min=1)]
DpOpt = Annotated[int | None, typer.Option("--dp", "--data-parallel-size", help=_kv_help("dp"), min=1)]
ExpertDtypeOpt = Annotated[str | None, typer.Option("--expert-dtype", help=_kv_help("expert_dtype"))]
RedundantOpt = Annotated[int, typer.Option("--redundant-experts", help=_kv_help("redundant_experts"), min=0)]
KVScaleOpt = Annotated[str, typer.Option("--kv-scale", help=_kv_help("kv_scale"))]
TwoBatchOverlapOpt = Annotated[bool, typer.Option("--two-batch-overlap", help=_rf_help("two_batch_overlap"))]
AlltoallModeOpt = Annotated[str, typer.Option("--alltoall-mode", help=_rf_help("alltoall_mode"))]
GemmDtypeOpt = Annotated[str | None, typer.Option("--gemm-dtype", help=_rf_help("gemm_dtype"))]
SpecMethodOpt = Annotated[str | None, typer.Option("--spec-method", help=_spec_help("method"))]
SpecTokensOpt = Annotated[int | None, typer.Option("--spec-tokens", help=_spec_help("num_speculative_tokens"))]
AcceptanceOpt = Annotated[float | None, typer.Option("--acceptance-rate", help=_spec_help("acceptance_rate"))]
AcceptanceLengthOpt = Annotated[float | None, typer.Option("--acceptance-length", help=_spec_help("acceptance_length"))]
DraftModelOpt = Annotated[str | None, typer.Option("--draft-model", help=_spec_help("draft_model"))]
KVOffloadGibOpt = Annotated[
    float | None,
    typer.Option(
        "--kv-offload-gib", "--offload-gib",
        help="Host memory per GPU given to a CPU KV tier [GiB] (vLLM's OffloadingConnector, --kv-offloading-size, which "
        "counts a whole instance; LMCache; SGLang's hierarchical cache): the positions it holds, when loading a cached "
        "prefix from it beats recomputing it (capplan.offload).",
    ),
]


def spec_inputs(method: str | None, tokens: int | None, rate: float | None, length: float | None, draft: str | None) -> "Any":
    """The speculative-decoding setting of the ``--spec-*`` flags, or ``None`` without ``--spec-method``.

    A ``--spec-*`` flag without ``--spec-method``, ``--spec-method`` without ``--spec-tokens``,
    or a value out of range is a one-line error naming the flag (exit 2).
    """
    if method is None:
        if any(v is not None for v in (tokens, rate, length, draft)):
            raise fail("--spec-tokens, --acceptance-rate, --acceptance-length and --draft-model need --spec-method")
        return None
    from capplan.speculative import SpecInputs

    if tokens is None:
        raise fail(f"--spec-method {method} needs --spec-tokens (tokens drafted per verify step, >= 1)")
    return call(lambda: SpecInputs(method=method, num_speculative_tokens=tokens, acceptance_rate=rate,
                                   acceptance_length=length, draft_model=draft))


def layout_options(
    ep: int = 1, dp: int | None = None, expert_dtype: str | None = None, redundant: int = 0, kv_scale: str = "tensor",
    tbo: bool = False, a2a: str = "auto", gemm_dtype: str | None = None,
) -> dict[str, Any]:
    """The expert/data-parallel, quantisation and overlap options that differ from their defaults,
    as keyword arguments of :class:`capplan.kv.KVInputs` / :class:`capplan.roofline.RooflineInputs`
    (so a plain configuration builds exactly the option object it always did)."""
    out: dict[str, Any] = {}
    for key, value, plain in (("ep", ep, 1), ("dp", dp, None), ("redundant_experts", redundant, 0), ("kv_scale", kv_scale, "tensor"),
                              ("two_batch_overlap", tbo, False), ("alltoall_mode", a2a, "auto")):
        if value != plain:
            out[key] = value
    if expert_dtype is not None:
        out["expert_dtype"] = dtype_name(expert_dtype)
    if gemm_dtype is not None:
        out["gemm_dtype"] = dtype_name(gemm_dtype)
    return out


ENGINE_KEYS: dict[str, str] = {
    "tp": "tensor_parallel_size", "pp": "pipeline_parallel_size", "gpu_memory_utilization": "gpu_memory_utilization",
    "kv_dtype": "kv_cache_dtype", "weight_dtype": "dtype", "max_model_len": "max_model_len", "max_num_seqs": "max_num_seqs",
    "max_num_batched_tokens": "max_num_batched_tokens", "max_batched_tokens": "max_num_batched_tokens",
    "block_size": "block_size", "prefix_caching": "enable_prefix_caching", "engine": "profile",
    "gpu_mem_util": "gpu_memory_utilization", "context": "max_model_len", "enforce_eager": "enforce_eager",
}
"""Command parameter -> the key of a workload's ``engine:`` block that supplies its default."""


FEATURE_SETTINGS: tuple[str, ...] = (
    "engine.data_parallel_size", "engine.enable_expert_parallel", "engine.num_redundant_experts", "engine.enable_dbo",
    "engine.kv_offloading_size", "speculative", "serving.disaggregated",
)
"""Workload keys of the engine features (:func:`engine_features`, the ``speculative:`` block,
``serving.disaggregated``): ``capplan plan`` and ``capplan sweep`` read them."""


def unread_features(workload: "Any") -> list[str]:
    """The engine-feature keys ``workload`` sets (:data:`FEATURE_SETTINGS`), as written in the file."""
    out = []
    for key in FEATURE_SETTINGS:
        node: Any = workload
        for part in key.split("."):
            node = getattr(node, part, None)
            if node is None:
                break
        if node not in (None, False) and not (key == "engine.data_parallel_size" and node == 1):
            out.append(key)
    return out


def engine_defaults(ctx: typer.Context, workload: "Any", features: bool = False, **values: Any) -> dict[str, Any]:
    """``values`` (command parameters named as in :data:`ENGINE_KEYS`) with each one the user did
    not give on the command line replaced by the workload's ``engine:`` key, when it sets one:
    a flag wins over the file, the file over the command's default.

    A command that does not model the engine features (``features`` false) warns when the
    workload sets one (:func:`unread_features`): its figures are without it, never silently."""
    if not features:
        unread = unread_features(workload)
        if unread:
            warn(f"workload {getattr(workload, 'name', '?')}: {', '.join(unread)} {'is' if len(unread) == 1 else 'are'} not read by "
                 f"capplan {ctx.info_name}, so its figures are without {'it' if len(unread) == 1 else 'them'} (capplan plan and capplan "
                 "sweep read them; give the matching flags where this command has them)")
    block = getattr(workload, "engine", None)
    if block is None:
        return values
    out = dict(values)
    for name in values:
        source = ctx.get_parameter_source(name)
        from_file = getattr(block, ENGINE_KEYS[name])
        if from_file is not None and (source is None or source.name not in ("COMMANDLINE", "ENVIRONMENT")):
            out[name] = from_file
            if name == "engine":
                from capplan.engine import load_engine
                from capplan.errors import InputError, NotFoundError

                try:
                    load_engine(from_file)
                except (InputError, NotFoundError) as err:
                    raise fail(f"workload {workload.name}, engine.profile: {err}") from None
    return out


def _given(ctx: typer.Context, name: str) -> bool:
    source = ctx.get_parameter_source(name)
    return source is not None and source.name in ("COMMANDLINE", "ENVIRONMENT")


def engine_features(
    ctx: typer.Context, workload: "Any", tp: int, ep: int = 1, dp: int | None = None, redundant_experts: int = 0,
    two_batch_overlap: bool = False, kv_offload_gib: float | None = None,
) -> dict[str, Any]:
    """The feature settings of a command (parameters ``ep``, ``dp``, ``redundant_experts``,
    ``two_batch_overlap``, ``kv_offload_gib``) with the workload's ``engine:`` keys as defaults
    (a flag wins): ``data_parallel_size``, ``enable_expert_parallel`` (``ep = tp x dp``),
    ``num_redundant_experts``, ``enable_dbo`` and ``kv_offloading_size`` (GiB per instance, so
    ``/ (tp x dp)`` per GPU)."""
    out: dict[str, Any] = {"ep": ep, "dp": dp, "redundant_experts": redundant_experts, "two_batch_overlap": two_batch_overlap,
                           "kv_offload_gib": kv_offload_gib}
    block = getattr(workload, "engine", None)
    if block is None:
        return out
    if not _given(ctx, "dp") and block.data_parallel_size is not None:
        out["dp"] = block.data_parallel_size
    if not _given(ctx, "ep") and block.enable_expert_parallel is not None:
        out["ep"] = tp * (out["dp"] or 1) if block.enable_expert_parallel else 1
    if not _given(ctx, "redundant_experts") and block.num_redundant_experts is not None:
        out["redundant_experts"] = block.num_redundant_experts
    if not _given(ctx, "two_batch_overlap") and block.enable_dbo is not None:
        out["two_batch_overlap"] = block.enable_dbo
    if not _given(ctx, "kv_offload_gib") and block.kv_offloading_size is not None:
        from capplan.kv import resolve_dp

        out["kv_offload_gib"] = block.kv_offloading_size / (tp * resolve_dp(tp, out["ep"], out["dp"]))
    return out


def check_engine_layout(ctx: typer.Context, ref: str, workload: "Any", spec: "Any", tp: int, pp: int, f: dict[str, Any]) -> None:
    """Refuse a tensor/pipeline/expert-parallel layout ``spec`` cannot run (:func:`capplan.kv.check_parallelism`,
    :func:`capplan.kv.check_expert_parallelism`) before any work, the one-line error naming what
    set the value: the flag, or ``ref: engine.KEY`` when the workload file ``ref`` did (a flag
    wins over the file, :func:`engine_defaults`). ``engine.enable_expert_parallel: true`` on a
    dense model is refused even where it gives ``ep = tp x dp = 1``. ``f`` is
    :func:`engine_features`'s result."""
    from capplan.kv import check_expert_parallelism, check_parallelism, resolve_dp

    block = getattr(workload, "engine", None)
    where: dict[str, str] = {}
    for name, key in (("tp", "tensor_parallel_size"), ("pp", "pipeline_parallel_size"), ("dp", "data_parallel_size"),
                      ("ep", "enable_expert_parallel"), ("redundant_experts", "num_redundant_experts")):
        if block is not None and getattr(block, key) is not None and not _given(ctx, name):
            where[name] = f"{ref}: engine.{key}"
    asked = "ep" in where and bool(block.enable_expert_parallel)
    call(lambda: check_parallelism(spec, tp, pp, where=where))
    call(lambda: check_expert_parallelism(spec, tp, resolve_dp(tp, f["ep"], f["dp"]), f["ep"], f["redundant_experts"],
                                          expert_parallel=asked, where=where))


def warn(message: str) -> None:
    """Print ``Warning: message`` (one line, user text escaped) on standard error."""
    from capplan.output import printable

    typer.echo(f"Warning: {printable(str(message))}", err=True)


def engine_settings(
    profile: "Any",
    *,
    gpu_memory_utilization: float | None = None,
    block_size: int | None = None,
    max_num_seqs: int | None = None,
    max_num_batched_tokens: int | None = None,
) -> "Any":
    """``profile`` (an :class:`~capplan.engine.EngineProfile`) with vLLM engine arguments applied
    (:meth:`~capplan.engine.EngineProfile.with_settings`); a value out of range is a one-line
    error naming the flag."""
    return call(lambda: profile.with_settings(
        gpu_memory_utilization=gpu_memory_utilization, block_size=block_size, max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
    ))


def workload_settings(workload: "Any", *, prefix_caching: bool | None = None, max_model_len: int | None = None) -> "Any":
    """``workload`` with vLLM's ``--enable-prefix-caching`` (cache reuse auto or none) and
    ``--max-model-len`` (a cap on ``conversation.max_context``) applied, validated again."""
    if prefix_caching is None and max_model_len is None:
        return workload
    from capplan.yamlio import validate_data

    data = workload.model_dump(by_alias=True, exclude_none=True, exclude_unset=True)  # what the file gave
    if prefix_caching is not None:
        data["cache"] = {**data.get("cache", {}), "reuse": "auto" if prefix_caching else "none"}
        data["cache"].pop("reused_prefix_tokens", None)
    if max_model_len is not None:
        conv = data["conversation"]
        current = conv.get("max_context")
        conv["max_context"] = max_model_len if current is None else min(current, max_model_len)
    return call(lambda: validate_data(f"{workload.name} with --max-model-len/--enable-prefix-caching", data, type(workload)))

EngineOpt = Annotated[
    str | None,
    typer.Option(
        "--engine",
        help="Engine profile (a bundled name such as vllm-0.19, sglang, trtllm, or a YAML file from capplan calibrate) "
        "whose memory and step-time terms price the engine; default vllm-0.19. capplan profiles list engines.",
    ),
]


EnforceEagerOpt = Annotated[
    bool | None,
    typer.Option(
        "--enforce-eager/--no-enforce-eager",
        help="Eager-mode PyTorch without CUDA graphs (vLLM --enforce-eager): every step pays the host time of "
             "launching each layer's kernels (the engine profile's eager_s_per_layer) and no CUDA-graph memory is "
             "reserved [default: the workload's engine.enforce_eager, else off].",
    ),
]


SchedulerPolicyOpt = Annotated[
    str | None,
    typer.Option(
        "--scheduler-policy",
        help="How a request is admitted against the KV cache (trtllm-bench --scheduler_policy, TensorRT-LLM's "
             "capacity_scheduler_policy): guaranteed_no_evict reserves its prompt and whole output and never preempts; "
             "max_utilization admits on the KV it holds and preempts when the cache runs out (vLLM, SGLang) "
             "[default: the engine profile's time.capacity_scheduler_policy].",
    ),
]


def load_engine_option(name: str | None, enforce_eager: bool | None = None, scheduler_policy: str | None = None) -> "Any":
    """The engine profile a command runs with: ``--engine`` (name or file), else the default;
    ``--enforce-eager`` and ``--scheduler-policy`` applied
    (:meth:`~capplan.engine.EngineProfile.with_settings`)."""
    from capplan.engine import default_engine, load_engine

    profile = call(lambda: load_engine(name)) if name is not None else default_engine()
    if enforce_eager is None and scheduler_policy is None:
        return profile
    return call(lambda: profile.with_settings(enforce_eager=enforce_eager, capacity_scheduler_policy=scheduler_policy))


def warn_known_error(profile: Any, hardware: Iterable[str], spec: "ModelSpec | None") -> Any:
    """Warn on standard error, once per chip in ``hardware`` (profile names), where the shipped
    corpus' published serving rows of ``profile``'s engine for models of ``spec``'s architecture
    (dense or MoE; ``None``: no model named yet, no warning) show a large or one-sided error
    (:func:`capplan.accuracy.coverage.known_error`); a profile the user calibrated is not the one
    those rows tested, so it is not warned about. Returns ``profile``."""
    if spec is not None and profile.corpus_fitted:
        from capplan.accuracy.coverage import known_error

        for name in dict.fromkeys(hardware):
            c = known_error(profile.engine, name, spec.moe is not None)
            if c is not None:
                warn(f"engine profile {profile.name}: {c.sentence()}")
    return profile


def console(stderr: bool = False) -> "Console":
    """A rich console (lazy import)."""
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, soft_wrap=False)


@contextmanager
def progress_bar(label: str, total: int | None = None, *, bytes: bool = False, show: bool = True) -> Iterator[Callable[[int, int], None] | None]:
    """The one progress bar of every command: a transient rich bar on standard error, when it is a terminal.

    Yields ``update(done, total)`` (``total`` may change as the work is counted), or ``None``
    when standard error is not a terminal or ``show`` is false, so callers pass it on as a
    library's ``progress`` callback unchanged. ``label`` is printed before the bar; ``bytes``
    shows done/total as file sizes instead of counts.
    """
    if not show or not sys.stderr.isatty():
        yield None
        return
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )
    from rich.markup import escape

    count = DownloadColumn() if bytes else MofNCompleteColumn()
    bar = Progress(TextColumn(escape(label)), BarColumn(), count, TimeElapsedColumn(), TimeRemainingColumn(),
                   console=console(stderr=True), transient=True)
    task = bar.add_task(label, total=total)

    def update(done: int, total: int) -> None:
        bar.update(task, completed=done, total=total)

    bar.start()
    try:
        yield update
    finally:
        bar.stop()


def file_console(width: int = 120) -> "Console":
    """A plain-text rich console that renders into a string buffer (for ``--output``)."""
    import io

    from rich.console import Console

    return Console(file=io.StringIO(), width=width, highlight=False, color_system=None)


def fail(message: str, code: int = 2) -> "typer.Exit":
    """Print ``Error: message`` on standard error (one line: control characters and line
    breaks of user text escaped) and return the exit to raise."""
    from capplan.output import printable

    typer.echo(f"Error: {printable(str(message))}", err=True)
    return typer.Exit(code)


def safe(text: object) -> str:
    """User text made inert for a rich renderer: control characters escaped (:func:`capplan.output.printable`),
    then rich markup (``[bold]``, ``[link=...]``) escaped so it prints as written."""
    from rich.markup import escape

    from capplan.output import printable

    return escape(printable(str(text)))


def call(fn: Callable[[], T]) -> T:
    """Run a library call, turning capplan's expected errors into one line and exit code 2."""
    from capplan.errors import CapplanError

    try:
        return fn()
    except CapplanError as exc:
        raise fail(str(exc)) from None


def emit(text: str, output: Path | None, force: bool) -> None:
    """Send rendered CSV/JSON/text to ``output`` (atomically) or standard output (``None`` or ``-``)."""
    from capplan.output import is_special, write_atomic

    if output is None or str(output) == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    special = is_special(output)
    path = call(lambda: write_atomic(output, text, force=force))
    if not special:
        typer.echo(f"wrote {path}", err=True)


def fmt_num(value: float | int, digits: int = 1) -> str:
    """Thousands-separated integer, or a float with ``digits`` decimals."""
    if isinstance(value, int) or float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,.{digits}f}"


MAX_LIST_VALUES = 100_000
"""Most values a list or range flag may expand to (a typo such as 1:10000000 is refused)."""


def parse_ints(values: list[str] | str | None, flag: str, minimum: int = 1, maximum: int | None = None) -> list[int]:
    """The one list/range parser of integer flags: ``--flag 1,2 --flag 4`` and ranges
    ``8:512:8`` (start:stop:step, stop included).

    A bad item, an empty or reversed range, a step below 1, a value below ``minimum`` or above
    ``maximum``, or more than :data:`MAX_LIST_VALUES` values is a one-line error naming the flag.
    """
    out: list[int] = []
    for given_value in [values] if isinstance(values, str) else values or []:
        items = str(given_value).split(",")
        if any(not x.strip() for x in items) and any(x.strip() for x in items):  # wholly empty: the caller's message
            raise fail(f"{flag} {given_value!r}: an empty item; expected integers, a list (1,2,4) or a range (8:512:8)")
    for item in parse_names(values):
        try:
            if ":" in item:
                parts = [int(x) for x in item.split(":")]
                if len(parts) not in (2, 3):
                    raise ValueError
                start, stop, step = parts[0], parts[1], (parts[2] if len(parts) == 3 else 1)
                if step < 1:
                    raise fail(f"{flag} {item!r}: a range's step must be >= 1 (start:stop:step, stop included)")
                if stop < start:
                    raise fail(f"{flag} {item!r}: empty range, stop is below start (start:stop:step, stop included)")
                if (stop - start) // step + 1 + len(out) > MAX_LIST_VALUES:
                    raise fail(f"{flag} {item!r}: more than {MAX_LIST_VALUES:,} values; narrow the range or raise the step")
                out.extend(range(start, stop + 1, step))
            else:
                out.append(int(item))
        except ValueError:
            raise fail(f"{flag} {item!r}: expected integers, a list (1,2,4) or a range (8:512:8)") from None
    if len(out) > MAX_LIST_VALUES:
        raise fail(f"{flag}: more than {MAX_LIST_VALUES:,} values")
    bad = [x for x in out if x < minimum or (maximum is not None and x > maximum)]
    if bad:
        allowed = f">= {minimum}" if maximum is None else f"in [{minimum:,}, {maximum:,}]"
        raise fail(f"{flag} {bad[0]}: every value must be an integer {allowed}")
    return out


GPU_HOUR_PRICE_RANGE = (0.0001, 10_000.0)
"""Prices ``--gpu-hour-price`` takes [USD per GPU-hour] (plan and sweep)."""


def check_gpu_hour_price(value: float, given: str | None = None) -> float:
    """``value`` if it is a finite price in :data:`GPU_HOUR_PRICE_RANGE`, else a one-line error
    quoting ``given`` (the text typed, default the value)."""
    low, high = GPU_HOUR_PRICE_RANGE
    if not (math.isfinite(value) and low <= value <= high):
        raise fail(f"--gpu-hour-price {given if given is not None else f'{value:g}'}: a price is a finite number of USD "
                   f"per GPU-hour in [{low:g}, {high:,.0f}]")
    return value


def require_yaml_output(output: Path | None, what: str, suffix_optional: bool = False) -> None:
    """Refuse an ``--output`` name that is not ``.yaml``/``.yml`` for a YAML file (``what``: what
    it is and who reads it back, for the message; ``suffix_optional``: a name without an
    extension, such as a device, is taken)."""
    if output is None or str(output) == "-" or (suffix_optional and not output.suffix):
        return
    if output.suffix.lower() not in (".yaml", ".yml"):
        raise fail(f"--output {output}: {what}")


def parse_names(values: list[str] | str | None) -> list[str]:
    """``--flag a,b --flag c`` as ``['a', 'b', 'c']``."""
    if isinstance(values, str):
        values = [values]
    return [x.strip() for v in values or [] for x in str(v).split(",") if x.strip()]
