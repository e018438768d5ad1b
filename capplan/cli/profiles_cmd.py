"""``capplan profiles`` (list, show) and ``capplan model import``."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from capplan.cli.common import ForceOpt, call, console, emit, fail, safe

profiles_app = typer.Typer(
    help=(
        "List and show the bundled hardware profiles, model presets and engine profiles.\n\n"
        "Examples:\n\n"
        "\b\n"
        "  capplan profiles list\n"
        "  capplan profiles list models\n"
        "  capplan profiles list engines\n"
        "  capplan profiles show vllm-0.19\n"
        "  capplan profiles show h100-sxm\n"
        "  capplan profiles show deepseek-v3"
    ),
    no_args_is_help=True,
    rich_markup_mode=None,
)

model_app = typer.Typer(
    help=(
        "Model profiles from Hugging Face configs.\n\n"
        "Example:\n\n"
        "\b\n"
        "  capplan model import config.json --name my-llama --output models/my-llama.yaml"
    ),
    no_args_is_help=True,
    rich_markup_mode=None,
)


class ProfileKind(str, Enum):
    all = "all"
    hardware = "hardware"
    models = "models"
    engines = "engines"


@profiles_app.command(
    "list",
    help=(
        "List bundled hardware profiles, model presets and/or engine profiles in tables.\n\n"
        "Examples:\n\n"
        "\b\n"
        "  capplan profiles list\n"
        "  capplan profiles list hardware"
    ),
)
def list_(kind: Annotated[ProfileKind, typer.Argument(help="hardware, models, engines or all.")] = ProfileKind.all) -> None:
    from rich.table import Table

    from capplan.hardware import list_hardware
    from capplan.modelspec import list_models, load_model_spec

    con = console()
    if kind in (ProfileKind.all, ProfileKind.hardware):
        t = Table(title="Hardware profiles (GiB = 2^30 B; GB/s and TFLOP/s decimal; dense peaks)", title_justify="left")
        for col in ("name", "memory\n[GiB]", "HBM\n[GB/s]", "bf16\n[TFLOP/s]", "fp8\n[TFLOP/s]", "GPUs/\nnode", "intra-node\n[GB/s]"):
            t.add_column(col, justify="left" if col == "name" else "right", no_wrap=col == "name")
        for h in list_hardware():
            fp8 = h.peak_tflops.get("fp8")
            t.add_row(
                h.name,
                f"{h.mem_total_gib:.2f}",
                f"{h.hbm_bandwidth_gbps:,.0f}",
                f"{h.peak_tflops.get('bf16', 0):,.1f}",
                f"{fp8:,.1f}" if fp8 else "-",
                str(h.gpus_per_node),
                f"{h.intra_node_bandwidth_gbps:,.0f}",
            )
        con.print(t)
    if kind in (ProfileKind.all, ProfileKind.models):
        t = Table(title="Model presets (parameters in billions, derived from the architecture)", title_justify="left")
        for col in ("name", "layers", "hidden", "heads/kv", "attention", "total", "active"):
            t.add_column(col, justify="left" if col in ("name", "attention") else "right", no_wrap=col == "name")
        for name in list_models():
            s = load_model_spec(name)
            attn = "MLA" if s.mla else ("GQA" if s.num_kv_heads < s.num_attention_heads else "MHA")
            if s.sliding_window:
                attn += f"+SW{s.sliding_window.window_tokens}"
            if s.moe:
                attn += f", MoE {s.moe.experts_per_token}/{s.moe.num_experts}"
            t.add_row(
                s.name,
                str(s.num_layers),
                f"{s.hidden_size:,}",
                f"{s.num_attention_heads}/{s.num_kv_heads}",
                attn,
                f"{s.total_params() / 1e9:,.2f}",
                f"{s.active_params() / 1e9:,.2f}",
            )
        con.print(t)
    if kind in (ProfileKind.all, ProfileKind.engines):
        from capplan.engine import list_engines, load_engine

        t = Table(title="Engine profiles (--engine NAME; what an engine adds to the chip: memory and time terms)",
                  title_justify="left")
        for col in ("name", "engine", "versions", "calibration", "description"):
            t.add_column(col, no_wrap=col == "name", overflow="fold")
        for name in list_engines():
            e = load_engine(name)
            t.add_row(e.name, e.engine, safe(e.version), safe(e.calibration or "-"), safe(e.description))
        con.print(t)


def _looks_like_workload(path: Path) -> bool:
    """Whether ``path`` is a YAML mapping with a workload's keys (``method``, ``conversation``)."""
    from capplan.errors import CapplanError
    from capplan.yamlio import read_yaml

    try:
        data, _ = read_yaml(path)
    except CapplanError:  # unreadable: the profile loader's own message says why
        return False
    return isinstance(data, dict) and {"method", "conversation"} <= set(data)


@profiles_app.command(
    "show",
    help=(
        "Show one hardware profile, model preset or engine profile with every field and its source "
        "(an engine profile's fitted terms: how many corpus rows fitted them).\n\n"
        "Examples:\n\n"
        "\b\n"
        "  capplan profiles show h100-sxm\n"
        "  capplan profiles show vllm-0.19\n"
        "  capplan profiles show qwen3-30b-a3b"
    ),
)
def show(name: Annotated[str, typer.Argument(help="Profile or preset name, or a path to one.")]) -> None:
    from rich.table import Table

    from capplan.engine import load_engine
    from capplan.errors import NotFoundError
    from capplan.hardware import load_hardware
    from capplan.modelspec import load_model_spec

    obj = None
    for loader in (load_hardware, load_model_spec, load_engine):
        try:
            obj = loader(name)
            break
        except NotFoundError:
            continue
        except Exception as exc:  # a real file of the other kind fails validation; try the next kind
            from capplan.errors import CapplanError

            if not isinstance(exc, CapplanError):
                raise
            last = exc
            continue
    if obj is None:
        from capplan.engine import list_engines
        from capplan.hardware import list_hardware
        from capplan.modelspec import list_models

        if Path(name).is_file():
            if _looks_like_workload(Path(name)):
                raise fail(f"{name}: a workload file, not a hardware profile, model preset or engine profile "
                           "(capplan workloads show or capplan validate read it)")
            raise fail(str(last))  # noqa: F821
        names = [h.name for h in list_hardware()] + list_models() + list_engines()
        raise fail(f"{name[:80]}: no hardware profile, model preset or engine profile of that name; known: {', '.join(names)}")
    data = obj.model_dump(exclude_none=True)
    sources = data.pop("sources", {})
    for term, rows in data.pop("fitted_on", {}).items():  # an engine profile's fitted terms: the row count
        sources.setdefault(term, f"fitted on {len(rows):,} validation corpus rows (fitted_on)")
    con = console()
    t = Table(title=safe(name), title_justify="left", show_lines=False)
    t.add_column("field")
    t.add_column("value", overflow="fold")
    t.add_column("source", overflow="fold", style="dim")

    def walk(prefix: str, value: object) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(f"{prefix}.{k}" if prefix else k, v)
        else:
            parts = prefix.split(".")  # the most specific source: memory.max_num_seqs for memory.max_num_seqs.large
            src = next((sources[k] for k in (".".join(parts[:i]) for i in range(len(parts), 0, -1)) if k in sources), "")
            t.add_row(safe(prefix), safe(value), safe(src))

    walk("", data)
    if hasattr(obj, "total_params"):
        t.add_row("derived total params", f"{obj.total_params():,}", "capplan.modelspec.total_params")
        t.add_row("derived active params", f"{obj.active_params():,}", "capplan.modelspec.active_params")
    con.print(t)


@model_app.command(
    "import",
    help=(
        "Turn a Hugging Face config.json into a capplan model profile (YAML).\n\n"
        "Supported: Llama, Mistral, Qwen2, Qwen3, Qwen3-MoE, Gemma-2, DeepSeek-V3, OLMo 2 and OLMo 3 "
        "architectures. Writes to --output (never overwriting without --force) or prints.\n\n"
        "Examples:\n\n"
        "\b\n"
        "  capplan model import config.json --name my-llama\n"
        "  capplan model import config.json --name my-llama --output models/my-llama.yaml\n"
        "  capplan kv --model models/my-llama.yaml --hardware h100-sxm"
    ),
)
def import_(
    config: Annotated[Path, typer.Argument(help="Path to a config.json.", exists=True, dir_okay=False)],
    name: Annotated[str | None, typer.Option("--name", help="Profile name (default: the parent folder's name, lower case).")] = None,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write the YAML here.", dir_okay=False)] = None,
    force: ForceOpt = False,
) -> None:
    import json
    import re

    from capplan.errors import InputError
    from capplan.hf_import import spec_from_hf_config, spec_to_yaml
    from capplan.yamlio import read_text_limited

    text = call(lambda: read_text_limited(config, "config.json"))
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise fail(f"{config}: not valid JSON at line {exc.lineno}: {exc.msg}") from None
    except (ValueError, RecursionError) as exc:  # nesting beyond the parser's depth, a 5,000-digit number
        what = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)[:100]
        raise fail(f"{config}: not a readable JSON file ({what})") from None
    if name is not None and not name.strip():
        raise fail("--name '': give a profile name (lower case letters, digits, '.', '-' or '_'), or leave --name out for the folder's")
    chosen = (name or config.resolve().parent.name or "imported-model").lower().replace("_", "-")
    if not re.fullmatch(r"[a-z0-9][a-z0-9._-]*", chosen):
        flag = "--name" if name else f"the folder name {config.resolve().parent.name!r} (the default --name)"
        raise fail(f"{flag}: a profile name is lower case letters, digits, '.', '-' or '_'; pass --name, e.g. --name my-llama")

    def build() -> str:
        spec = spec_from_hf_config(data, chosen, str(config))
        return spec_to_yaml(spec)

    try:
        text = build()
    except InputError as exc:
        raise fail(str(exc)) from None
    emit(text, output, force)
