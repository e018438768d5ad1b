"""Which engine-profile terms a set of observations constrains, and why a requested one cannot be fitted.

A term can be fitted only when the data move it independently of the others; otherwise the fit
trades one term against another and the result means nothing. The rules, by kind of data:

* a decode measurement (ITL, TPOT, output tokens/s, a step time) constrains
  ``bandwidth_efficiency``; decode measurements at two or more settings (concurrency, context,
  lengths) also separate ``step_overhead_s``; at three or more settings spanning two or more
  batch sizes also ``per_sequence_s`` (time per sequence in a step);
* a TTFT measurement constrains ``gemm_efficiency`` (prefill is compute-bound); TTFT at two or
  more settings also separates ``request_overhead_s``;
* ``attention_efficiency`` and ``gemm_half_tokens`` need TTFT or throughput, the all-reduce terms
  measurements at tensor-parallel size 2 or more, ``moe_gemm_efficiency`` a mixture-of-experts
  model; none is fitted unless named in ``--terms``;
* a vLLM start-up log constrains one memory number (what the engine keeps besides weights,
  activations and KV): ``sampler_bytes_per_seq_vocab`` (``flashinfer_sampler_bytes_per_seq_vocab``
  when the log's sampler runs FlashInfer's top-k/top-p kernels; logs on both paths fit both), or,
  when the forward pass and not the sampler sets the log's activation peak, its layout's
  non-torch term; each further log adds one term (``non_torch_gib_single`` / ``_nvlink`` /
  ``_pcie`` for its parallel layout).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from capplan.accuracy.fit import BOUNDS
from capplan.engine import SAMPLER_TERMS
from capplan.errors import InputError

TIME_TERMS: tuple[str, ...] = tuple(BOUNDS)
"""Every fittable time term (:data:`capplan.accuracy.fit.BOUNDS`)."""

MEMORY_TERMS: tuple[str, ...] = ("sampler_bytes_per_seq_vocab", "flashinfer_sampler_bytes_per_seq_vocab", "non_torch_gib_single",
                                 "non_torch_gib_nvlink", "non_torch_gib_pcie")
"""Fittable memory terms (:func:`capplan.accuracy.refit.fit_memory_terms`), in the order one
start-up log after another constrains them."""

DECODE_METRICS = frozenset({"itl_ms", "tpot_ms", "step_time_ms", "output_tokens_per_s", "e2e_latency_s"})
"""Metrics that measure decode steps."""
PREFILL_METRICS = frozenset({"ttft_ms"})
"""Metrics that measure prefill (time to first token)."""

TTFT_TERMS = ("gemm_efficiency", "request_overhead_s", "gemm_half_tokens", "attention_efficiency")
"""Time terms that need a TTFT (or, for the kernel efficiencies, a throughput) measurement."""


@dataclass(frozen=True)
class DataShape:
    """What a set of observations varies: the settings its decode and prefill points cover."""

    decode_settings: frozenset[tuple]
    """Distinct settings (model, tp, scenario, concurrency or batch, lengths or context) of decode points."""
    decode_batches: frozenset[float]
    """Distinct batch sizes / concurrencies of decode points (open-loop rates count as their own)."""
    prefill_settings: frozenset[tuple]
    """Distinct settings of TTFT points."""
    throughput_points: int
    """Points with an output-token rate."""
    tps: frozenset[int]
    """Tensor-parallel sizes of the time points."""
    moe: bool
    """A mixture-of-experts model is among the time points."""
    logs: int
    """Start-up logs (KV memory points, counted once per log)."""
    log_layouts: frozenset[str]
    """Parallel layouts of the logs: ``single``, ``nvlink`` or ``pcie``."""
    log_samplers: frozenset[str]
    """Sampler warm-up paths (``pytorch`` or ``flashinfer``) of the logs whose activation peak the
    sampler sets (a log whose forward pass peaks higher does not constrain its sampler term)."""
    time_points: int
    """Time points in all."""


def _setting(fields: dict[str, Any]) -> tuple:
    """A point's setting without the metric."""
    keys = ("model", "tp", "scenario", "concurrency", "batch", "request_rate", "input_tokens", "output_tokens", "context_tokens")
    return tuple(round(v, 6) if isinstance(v, float) else v for v in (fields.get(k) for k in keys))


def _batch(fields: dict[str, Any]) -> Any:
    for k in ("batch", "concurrency"):
        if fields.get(k) is not None:
            return float(fields[k])
    return ("rate", fields.get("request_rate"))


def data_shape(time_rows: Sequence[Any], kv_logs: Sequence[Any], moe_models: set[str]) -> DataShape:
    """Summarise time points (corpus rows) and start-up logs (``(file, tp, layout, sampler path,
    whether the sampler sets the log's activation peak)`` tuples)."""
    decode = [r for r in time_rows if r.metric in DECODE_METRICS]
    prefill = [r for r in time_rows if r.metric in PREFILL_METRICS]
    return DataShape(
        decode_settings=frozenset(_setting(r.fields) for r in decode),
        decode_batches=frozenset(_batch(r.fields) for r in decode),
        prefill_settings=frozenset(_setting(r.fields) for r in prefill),
        throughput_points=sum(1 for r in time_rows if r.metric == "output_tokens_per_s"),
        tps=frozenset(int(r.fields.get("tp") or 1) for r in time_rows),
        moe=any(r.fields.get("model") in moe_models for r in time_rows),
        logs=len(kv_logs),
        log_layouts=frozenset(layout for _, _, layout, _, _ in kv_logs),
        log_samplers=frozenset(path for _, _, _, path, sets_peak in kv_logs if sets_peak),
        time_points=len(time_rows),
    )


def default_terms(shape: DataShape) -> tuple[list[str], list[str]]:
    """The time and memory terms the data constrain (module notes)."""
    time: list[str] = []
    if shape.decode_settings:
        time.append("bandwidth_efficiency")
        if len(shape.decode_settings) >= 2:
            time.append("step_overhead_s")
        if len(shape.decode_settings) >= 3 and len(shape.decode_batches) >= 2:
            time.append("per_sequence_s")
    if shape.prefill_settings:
        time.append("gemm_efficiency")
        if len(shape.prefill_settings) >= 2:
            time.append("request_overhead_s")
    memory = _memory_defaults(shape)
    return time[: shape.time_points], memory


def _memory_defaults(shape: DataShape) -> list[str]:
    if not shape.logs:
        return []
    # a log constrains its sampler term where the sampler sets its peak, else its layout's non-torch term
    out = [SAMPLER_TERMS[path] for path in ("pytorch", "flashinfer") if path in shape.log_samplers]
    for layout in ("single", "nvlink", "pcie"):
        if layout in shape.log_layouts:
            out.append(f"non_torch_gib_{layout}")
    return out[: shape.logs]


def _batch_text(b: Any) -> str:
    return f"rate {b[1]:g}/s" if isinstance(b, tuple) else f"batch {b:g}"


def check_terms(terms: Sequence[str], shape: DataShape) -> tuple[list[str], list[str]]:
    """Split ``terms`` into time and memory terms, refusing any the data cannot constrain.

    Raises
    ------
    InputError
        An unknown term, or one the data do not constrain: the message names what is missing
        and how to get it.
    """
    if not terms:
        return [], []
    unknown = [t for t in terms if t not in TIME_TERMS and t not in MEMORY_TERMS]
    if unknown:
        raise InputError(f"--terms {unknown[0]}: not a fittable term (time: {', '.join(TIME_TERMS)}; "
                         f"memory: {', '.join(MEMORY_TERMS)})")
    time = [t for t in terms if t in TIME_TERMS]
    memory = [t for t in terms if t in MEMORY_TERMS]
    without = "or --terms without it"
    drop = "--terms without it"
    for t in time:
        if t in ("bandwidth_efficiency", "step_overhead_s", "per_sequence_s") and not shape.decode_settings:
            raise InputError(f"no decode measurement (ITL, TPOT, output tokens/s or a step time): cannot fit {t} "
                             f"(give a benchmark result or a step-time CSV, {without})")
        if t == "per_sequence_s" and len(shape.decode_batches) < 2:
            b = next(iter(shape.decode_batches))
            raise InputError(f"all points at {_batch_text(b)}: cannot fit per_sequence_s (give measurements at two or "
                             f"more concurrencies, {without})")
        if t in ("gemm_efficiency", "request_overhead_s") and not shape.prefill_settings:
            raise InputError(f"no TTFT measurement: cannot fit {t} (give a benchmark result with a mean TTFT, {without})")
        if t in ("gemm_half_tokens", "attention_efficiency") and not shape.prefill_settings and not shape.throughput_points:
            raise InputError(f"no TTFT or throughput measurement: cannot fit {t} (give a benchmark result, {without})")
        if t in ("interconnect_efficiency", "allreduce_latency_us") and shape.tps <= {1}:
            raise InputError(f"all points at tensor-parallel size 1: cannot fit {t} (no all-reduce runs at tp 1; give "
                             f"measurements at --tp 2 or more, {without})")
        if t == "moe_gemm_efficiency" and not shape.moe:
            raise InputError(f"no mixture-of-experts model among the points: cannot fit moe_gemm_efficiency ({drop})")
    if {"bandwidth_efficiency", "step_overhead_s"} <= set(time) and len(shape.decode_settings) < 2:
        raise InputError("all decode points at one setting: cannot fit both bandwidth_efficiency and step_overhead_s "
                         "(give measurements at two or more concurrencies or contexts, or --terms with one of them)")
    if {"gemm_efficiency", "request_overhead_s"} <= set(time) and len(shape.prefill_settings) < 2:
        raise InputError("all TTFT points at one setting: cannot fit both gemm_efficiency and request_overhead_s "
                         "(give TTFT at two or more concurrencies or prompt lengths, or --terms with one of them)")
    for t in memory:
        if not shape.logs:
            raise InputError(f"no vLLM start-up log among the files: cannot fit {t} (give the server's start-up log, {without})")
        path = next((p for p, term in SAMPLER_TERMS.items() if term == t), None)
        if path and path not in shape.log_samplers:
            raise InputError(f"no start-up log whose peak the {'FlashInfer' if path == 'flashinfer' else 'PyTorch'} sampler sets: "
                             f"cannot fit {t} ({drop})")
        layout = t.rsplit("_", 1)[-1] if t.startswith("non_torch") else None
        if layout and layout not in shape.log_layouts:
            what = "one GPU" if layout == "single" else f"tensor-parallel size 2 or more over {'NVLink' if layout == 'nvlink' else 'PCIe'}"
            raise InputError(f"no start-up log at {what}: cannot fit {t} ({drop})")
    if len(memory) > shape.logs:
        raise InputError(f"{shape.logs} start-up log(s) cannot fit {len(memory)} memory terms: each log constrains one "
                         "(give more logs, or fewer memory --terms)")
    if len(time) > shape.time_points:
        raise InputError(f"{shape.time_points} time measurement(s) cannot fit {len(time)} time terms: give at least one per term")
    return time, memory
