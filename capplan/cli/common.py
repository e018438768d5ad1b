"""Helpers shared by every command: options, error conversion, output."""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Callable, TypeVar

import typer

if TYPE_CHECKING:
    from rich.console import Console

T = TypeVar("T")


class Format(str, Enum):
    """Output formats shared by the tabular commands."""

    table = "table"
    csv = "csv"
    json = "json"


FormatOpt = Annotated[
    Format, typer.Option("--format", "-f", help="Output format: a rich table, CSV (long format) or JSON.")
]
OutputOpt = Annotated[
    Path | None,
    typer.Option("--output", "-o", help="Write to this file (atomically) instead of standard output.", dir_okay=False),
]
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

EngineOpt = Annotated[
    str | None,
    typer.Option(
        "--engine",
        help="Engine profile (a bundled name such as vllm-0.19, sglang, trtllm, or a YAML file from capplan calibrate) "
        "whose memory and step-time terms price the engine; default vllm-0.19. capplan profiles list engines.",
    ),
]


def load_engine_option(name: str | None) -> "Any":
    """The engine profile a command runs with: ``--engine`` (name or file), else the default."""
    from capplan.engine import default_engine, load_engine

    return call(lambda: load_engine(name)) if name is not None else default_engine()


DTYPE_SPELLINGS = {"auto": "bf16", "bfloat16": "bf16", "float16": "fp16", "half": "fp16", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8"}
"""vLLM's dtype spellings and the capplan dtype each means (``auto``: the checkpoint's 16-bit dtype)."""


def dtype_name(value: str) -> str:
    """capplan's dtype name for a capplan or vLLM spelling (unknown names pass through, to be
    refused with the allowed list by the option model)."""
    return DTYPE_SPELLINGS.get(value.strip().lower(), value.strip().lower())


def console(stderr: bool = False) -> "Console":
    """A rich console (lazy import)."""
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, soft_wrap=False)


def file_console(width: int = 120) -> "Console":
    """A plain-text rich console that renders into a string buffer (for ``--output``)."""
    import io

    from rich.console import Console

    return Console(file=io.StringIO(), width=width, highlight=False, color_system=None)


def fail(message: str, code: int = 2) -> "typer.Exit":
    """Print ``Error: message`` on standard error and return the exit to raise."""
    typer.echo(f"Error: {message}", err=True)
    return typer.Exit(code)


def call(fn: Callable[[], T]) -> T:
    """Run a library call, turning capplan's expected errors into one line and exit code 2."""
    from capplan.errors import CapplanError

    try:
        return fn()
    except CapplanError as exc:
        raise fail(str(exc)) from None


def emit(text: str, output: Path | None, force: bool) -> None:
    """Send rendered CSV/JSON/text to ``output`` (atomically) or standard output."""
    from capplan.output import write_atomic

    if output is None:
        sys.stdout.write(text)
        return
    path = call(lambda: write_atomic(output, text, force=force))
    typer.echo(f"wrote {path}", err=True)


def fmt_num(value: float | int, digits: int = 1) -> str:
    """Thousands-separated integer, or a float with ``digits`` decimals."""
    if isinstance(value, int) or float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,.{digits}f}"


MAX_LIST_VALUES = 100_000
"""Most values a list or range flag may expand to (a typo such as 1:10000000 is refused)."""


def parse_ints(values: list[str] | str | None, flag: str, minimum: int = 1) -> list[int]:
    """The one list/range parser of integer flags: ``--flag 1,2 --flag 4`` and ranges
    ``8:512:8`` (start:stop:step, stop included).

    A bad item, an empty or reversed range, a step below 1, a value below ``minimum`` or more
    than :data:`MAX_LIST_VALUES` values is a one-line error naming the flag.
    """
    out: list[int] = []
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
    bad = [x for x in out if x < minimum]
    if bad:
        raise fail(f"{flag} {bad[0]}: every value must be an integer >= {minimum}")
    return out


def parse_names(values: list[str] | str | None) -> list[str]:
    """``--flag a,b --flag c`` as ``['a', 'b', 'c']``."""
    if isinstance(values, str):
        values = [values]
    return [x.strip() for v in values or [] for x in str(v).split(",") if x.strip()]
