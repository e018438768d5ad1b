"""Reading a user's benchmark files into observation rows in the validation corpus's row shape.

One reader per format, chosen by the file's content (and its extension for CSV):

* ``vllm bench serve`` result JSON (``--save-result``, with or without ``--save-detailed``; also
  the older ``benchmarks/benchmark_serving.py`` output);
* GuideLLM benchmark report JSON (``GenerativeBenchmarksReport``: one observation set per
  benchmark of the sweep);
* AIPerf ``profile_export_aiperf.json`` (the CSV export names no concurrency and is refused);
* a vLLM start-up log (KV memory: ``Available KV cache memory``, ``GPU KV cache size``, with the
  settings the log prints);
* a CSV of measured decode step times with columns ``batch,context_tokens,step_ms``.

Every reader returns :class:`FileData`: :class:`~capplan.accuracy.corpus.CorpusRow` objects whose
``fields`` carry what the file says (``model_named`` is the file's own model text; ``model`` and
``hardware`` are filled in later from the file or the flags by
:func:`capplan.calibrate.run.resolve_rows`). A file that is none of these, or lacks a value a
point needs, raises a one-line :class:`~capplan.errors.InputError` naming the file and the key.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from capplan.accuracy.corpus import CorpusRow
from capplan.errors import InputError

VLLM_BENCH = "vllm bench serve"
GUIDELLM = "GuideLLM"
AIPERF = "AIPerf"
VLLM_LOG = "vLLM start-up log"
STEP_CSV = "step times CSV"

STEP_COLUMNS = ("batch", "context_tokens", "step_ms")
"""Columns of the decode step-time CSV: sequences in the step, mean context per sequence
(positions already cached) [tokens], measured step time [ms]."""


@dataclass(frozen=True)
class FileData:
    """What one input file holds."""

    path: Path
    """The file as given."""
    format: str
    """Which reader read it (:data:`VLLM_BENCH`, :data:`GUIDELLM`, ...)."""
    rows: list[CorpusRow]
    """Observation rows, one per measured value."""
    notes: list[str] = field(default_factory=list)
    """What the reader noticed (a value it could not use, a setting it assumed)."""
    settings: dict[str, Any] = field(default_factory=dict)
    """Engine settings the file states (start-up logs: tp, dtypes, scheduler limits, KV capacity)."""


MAX_STEP_BATCH = 65_536
"""Largest batch a step-time CSV row may give [sequences]: no engine runs more sequences in a step
(vLLM's ``max_num_seqs`` and TensorRT-LLM's ``max_batch_size`` stay in the thousands)."""

MAX_STEP_POINTS = 2_000
"""Most distinct ``(batch, context_tokens)`` points a step-time CSV may give: every fit iteration
prices each point (about 3.5 ms a point over a whole fit), so 2,000 points fit in seconds; a
profiler's raw dump of more is binned first (rows at the same point are merged by :func:`_read_csv`)."""


def read_file(path: str | Path, label: str | None = None) -> FileData:
    """Read one benchmark file of any supported format.

    Parameters
    ----------
    path
        The file.
    label
        Prefix of the point ids (default: the file name).

    Raises
    ------
    InputError
        Unreadable file, unknown format, or a value a point needs is missing.
    """
    path = Path(path)
    label = label or path.name
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise InputError(f"{path}: cannot read the file ({exc.strerror or exc})") from None
    if path.suffix.lower() == ".csv":
        return _read_csv(path, label, text)
    stripped = text.lstrip()
    if stripped.startswith("{") or path.suffix.lower() == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
        if not isinstance(data, dict):
            raise InputError(f"{path}: not a vllm bench serve, GuideLLM or AIPerf result (the JSON is not an object)")
        if isinstance(data.get("benchmarks"), list):
            return read_guidellm(path, label, data)
        if "aiperf_version" in data or "input_config" in data:
            return read_aiperf(path, label, data)
        if "mean_ttft_ms" in data or "max_concurrency" in data:
            return read_vllm_bench(path, label, data)
        raise InputError(f"{path}: not a vllm bench serve, GuideLLM or AIPerf result (no 'mean_ttft_ms' key)")
    if any(marker in text for marker in _LOG_MARKERS):
        return read_vllm_log(path, label, text)
    raise InputError(
        f"{path}: not a recognised input (a vllm bench serve, GuideLLM or AIPerf JSON result, a vLLM start-up "
        f"log, or a CSV with columns {','.join(STEP_COLUMNS)})"
    )


def _row(label: str, point: str, fmt: str, path: Path, metric: str, unit: str, measured: float, kind: str,
         fields: dict[str, Any]) -> CorpusRow:
    return CorpusRow(id=f"{label}:{point}:{metric}", kind=kind, source=fmt, citation=str(path), metric=metric, unit=unit,
                     measured=float(measured), held_out=False, fields={"file": str(path), **fields})


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) or x == math.inf else None


def _positive(path: Path, key: str, value: Any) -> float:
    x = _number(value)
    if x is None or not x > 0:
        raise InputError(f"{path}: {key} {value!r}: expected a number > 0")
    return x


def _run_length(value: Any) -> int | None:
    """How many requests a run sent (``num_prompts``), when the file states a whole number >= 1:
    :mod:`capplan.accuracy.predict` replays a burst, a saturated or short open-loop run and a
    closed-loop run's first wave from it, as it does the corpus's rows."""
    x = _number(value)
    return int(x) if x is not None and x >= 1 and x != math.inf and x == int(x) else None


def _serving_rows(path: Path, label: str, fmt: str, point: str, setup: dict[str, Any],
                  values: list[tuple[str, str, Any]]) -> tuple[list[CorpusRow], list[str]]:
    """Rows of one benchmark run; values that are absent or not positive are left out with a note.

    A run at a finite request rate has no throughput point: it equals the rate times the output
    length whatever the engine's speed (until the engine saturates, when it depends on the run's
    length), so it constrains nothing."""
    rows, notes = [], []
    rate = setup.get("request_rate")
    if setup.get("scenario") == "request_rate" and rate is not None and rate != math.inf:
        values = [v for v in values if v[0] != "output_tokens_per_s"]
    for metric, unit, v in values:
        x = _number(v)
        if x is None or not x > 0 or x == math.inf:
            if v is not None:
                notes.append(f"{label}:{point}: {metric} {v!r} is not a positive number; left out")
            continue
        rows.append(_row(label, point, fmt, path, metric, unit, x, "serving", setup))
    return rows, notes


# ---------------------------------------------------------------------------------------------
# vllm bench serve
# ---------------------------------------------------------------------------------------------


def read_vllm_bench(path: Path, label: str, data: dict[str, Any]) -> FileData:
    """A ``vllm bench serve`` result (``vllm/benchmarks/serve.py``; ``benchmark_serving.py``).

    Concurrency is ``max_concurrency`` (null: unbounded); arrivals ``request_rate`` (``"inf"``:
    all at once) and ``burstiness`` (gamma shape of the gaps: 1, the default, Poisson). Lengths are the means of the per-request
    ``input_lens`` / ``output_lens`` of a detailed file, else ``total_input_tokens / completed``.
    Measured: ``mean_ttft_ms``, ``mean_tpot_ms`` (``mean_itl_ms`` when absent),
    ``output_throughput``. Run length ``num_prompts`` (``completed`` in files without it).
    """
    notes: list[str] = []
    for key in ("completed", "total_input_tokens", "total_output_tokens"):
        if key not in data:
            raise InputError(f"{path}: vllm bench serve result has no '{key}' key")
    completed = _positive(path, "completed", data["completed"])
    ins, outs = data.get("input_lens"), data.get("output_lens")
    if isinstance(ins, list) and isinstance(outs, list) and ins and outs:
        P, O = sum(ins) / len(ins), sum(outs) / len(outs)
        lengths = "fixed" if len(set(ins)) == 1 and len(set(outs)) == 1 else "varying"
    else:
        P = _positive(path, "total_input_tokens", data["total_input_tokens"]) / completed
        O = _positive(path, "total_output_tokens", data["total_output_tokens"]) / completed
        lengths = None
    setup: dict[str, Any] = {"model_named": data.get("model_id") or data.get("tokenizer_id"),
                             "input_tokens": P, "output_tokens": O, "lengths": lengths,
                             "num_prompts": _run_length(data.get("num_prompts")) or _run_length(completed)}
    rate = _number(data.get("request_rate"))
    if data.get("request_rate") is not None and rate is None:
        raise InputError(f"{path}: request_rate {data.get('request_rate')!r}: expected a number or \"inf\"")
    conc = data.get("max_concurrency")
    if rate is not None and rate != math.inf:
        setup.update(scenario="request_rate", request_rate=rate)
        point = f"rate{rate:g}"
        burst = _number(data.get("burstiness"))
        if data.get("burstiness") is not None and not (burst is not None and burst > 0):
            raise InputError(f"{path}: burstiness {data.get('burstiness')!r}: expected a number > 0")
        setup["burstiness"] = 1.0 if burst is None else burst  # vllm bench serve's default: Poisson
        if conc is not None:
            notes.append(f"{label}: max_concurrency {conc} with a finite request rate: priced by the arrival rate alone")
    elif conc is not None:
        setup.update(scenario="concurrency", concurrency=_positive(path, "max_concurrency", conc), closed_loop=True)
        point = f"c{conc}"
    else:
        setup.update(scenario="request_rate", request_rate=math.inf)
        point = "offline"
    tpot = ("tpot_ms", "ms", data["mean_tpot_ms"]) if data.get("mean_tpot_ms") is not None else ("itl_ms", "ms", data.get("mean_itl_ms"))
    values = [("ttft_ms", "ms", data.get("mean_ttft_ms")), tpot, ("output_tokens_per_s", "tokens/s", data.get("output_throughput"))]
    rows, more = _serving_rows(path, label, VLLM_BENCH, point, setup, values)
    return FileData(path, VLLM_BENCH, rows, notes + more)


# ---------------------------------------------------------------------------------------------
# GuideLLM
# ---------------------------------------------------------------------------------------------


def _summary(metrics: dict[str, Any], key: str) -> dict[str, Any] | None:
    """``metrics[key].successful`` (a ``DistributionSummary``), or ``None``."""
    m = metrics.get(key)
    if isinstance(m, dict) and isinstance(m.get("successful"), dict):
        return m["successful"]
    return None


def _spread_free(s: dict[str, Any] | None) -> bool | None:
    if s is None:
        return None
    if s.get("min") is not None and s.get("max") is not None:
        return s["min"] == s["max"]
    sd = _number(s.get("std_dev"))
    return None if sd is None else sd == 0


def read_guidellm(path: Path, label: str, data: dict[str, Any]) -> FileData:
    """A GuideLLM benchmark report: one set of points per entry of ``benchmarks``.

    Strategy from ``benchmarks[].config.strategy`` (0.4 and later) or ``benchmarks[].args.strategy``
    (0.2-0.3): ``synchronous`` is one client, ``concurrent`` ``streams`` clients, ``constant`` /
    ``poisson`` a request ``rate``, ``throughput`` everything at once. Lengths and measured values
    are the ``successful`` means of ``metrics.prompt_token_count``, ``output_token_count``,
    ``time_to_first_token_ms``, ``inter_token_latency_ms`` and ``output_tokens_per_second``
    (``time_per_output_token_ms`` is not used: GuideLLM includes the first token in it). Run
    length ``metrics.request_totals.total``.
    """
    rows: list[CorpusRow] = []
    notes: list[str] = []
    top_model = (((data.get("config") or {}).get("spec") or {}).get("backend") or {}).get("model") or None
    for i, b in enumerate(data["benchmarks"]):
        if not isinstance(b, dict):
            raise InputError(f"{path}: benchmarks[{i}] is not an object")
        cfg = b.get("config") if isinstance(b.get("config"), dict) else {}
        strategy = cfg.get("strategy") or (b.get("args") or {}).get("strategy")
        if not isinstance(strategy, dict) or "type_" not in strategy:
            raise InputError(f"{path}: benchmarks[{i}] has no config.strategy.type_ (GuideLLM report without a strategy)")
        metrics = b.get("metrics")
        if not isinstance(metrics, dict):
            raise InputError(f"{path}: benchmarks[{i}] has no 'metrics' object")
        prompt, output = _summary(metrics, "prompt_token_count"), _summary(metrics, "output_token_count")
        if prompt is None or output is None:
            raise InputError(f"{path}: benchmarks[{i}].metrics has no prompt_token_count / output_token_count")
        kind = strategy["type_"]
        setup: dict[str, Any] = {
            "model_named": (cfg.get("backend") or {}).get("model") or top_model,
            "input_tokens": _positive(path, f"benchmarks[{i}].metrics.prompt_token_count.successful.mean", prompt.get("mean")),
            "output_tokens": _positive(path, f"benchmarks[{i}].metrics.output_token_count.successful.mean", output.get("mean")),
        }
        totals = metrics.get("request_totals")
        setup["num_prompts"] = _run_length(totals.get("total")) if isinstance(totals, dict) else None
        fixed = [_spread_free(prompt), _spread_free(output)]
        setup["lengths"] = None if None in fixed else ("fixed" if all(fixed) else "varying")
        if kind in ("synchronous", "concurrent"):
            streams = 1 if kind == "synchronous" else strategy.get("streams", strategy.get("max_concurrency"))
            setup.update(scenario="concurrency", concurrency=_positive(path, f"benchmarks[{i}].config.strategy.streams", streams),
                         closed_loop=True)
            point = f"{i}-c{streams}"
        elif kind in ("constant", "poisson", "async"):
            rate = _positive(path, f"benchmarks[{i}].config.strategy.rate", strategy.get("rate"))
            setup.update(scenario="request_rate", request_rate=rate)
            point = f"{i}-rate{rate:g}"
            if kind in ("constant", "poisson"):
                setup["burstiness"] = math.inf if kind == "constant" else 1.0
        elif kind == "throughput":
            setup.update(scenario="request_rate", request_rate=math.inf)
            point = f"{i}-throughput"
        else:
            notes.append(f"{label}: benchmarks[{i}] strategy {kind!r} is not modelled; left out")
            continue
        values = []
        for metric, key in (("ttft_ms", "time_to_first_token_ms"), ("itl_ms", "inter_token_latency_ms"),
                            ("output_tokens_per_s", "output_tokens_per_second")):
            s = _summary(metrics, key)
            values.append((metric, "tokens/s" if metric == "output_tokens_per_s" else "ms", s.get("mean") if s else None))
        r, n = _serving_rows(path, label, GUIDELLM, point, setup, values)
        rows += r
        notes += n
    return FileData(path, GUIDELLM, rows, notes)


# ---------------------------------------------------------------------------------------------
# AIPerf
# ---------------------------------------------------------------------------------------------

_MS = {"ms": 1.0, "s": 1e3, "sec": 1e3, "us": 1e-3, "ns": 1e-6}


def _aiperf_value(path: Path, data: dict[str, Any], tag: str, to_ms: bool = False) -> float | None:
    m = data.get(tag)
    if not isinstance(m, dict) or m.get("avg") is None:
        return None
    v = _number(m["avg"])
    if v is None:
        return None
    if to_ms:
        unit = str(m.get("unit", "ms"))
        if unit not in _MS:
            raise InputError(f"{path}: {tag}.unit {unit!r}: expected one of {', '.join(_MS)}")
        v *= _MS[unit]
    return v


def read_aiperf(path: Path, label: str, data: dict[str, Any]) -> FileData:
    """An AIPerf ``profile_export_aiperf.json``.

    Concurrency from ``input_config.phases[].concurrency`` (0.13) or
    ``input_config.loadgen.concurrency`` (0.1.x); a request rate from the same places
    (``request_rate``). Lengths ``input_sequence_length.avg`` / ``output_sequence_length.avg``;
    measured ``time_to_first_token.avg``, ``inter_token_latency.avg`` and
    ``output_token_throughput.avg``. Run length ``request_count.avg``.
    """
    cfg = data.get("input_config") if isinstance(data.get("input_config"), dict) else {}
    phases = [p for p in cfg.get("phases") or [] if isinstance(p, dict) and p.get("kind", "profiling") == "profiling"]
    loadgen = cfg.get("loadgen") if isinstance(cfg.get("loadgen"), dict) else {}
    source = phases[0] if phases else loadgen
    conc, rate = _number(source.get("concurrency")), _number(source.get("request_rate"))
    if not conc and not rate:
        raise InputError(
            f"{path}: AIPerf export names no concurrency or request rate (input_config.phases[].concurrency "
            "or input_config.loadgen.concurrency)"
        )
    P = _aiperf_value(path, data, "input_sequence_length")
    O = _aiperf_value(path, data, "output_sequence_length")
    if not P or not O:
        raise InputError(f"{path}: AIPerf export has no input_sequence_length.avg / output_sequence_length.avg")
    models = ((cfg.get("models") or {}).get("items") or []) if isinstance(cfg.get("models"), dict) else []
    named = (models[0].get("name") if models and isinstance(models[0], dict) else None) or (cfg.get("model_names") or [None])[0]
    spreads = [(data.get(t) or {}).get("std") for t in ("input_sequence_length", "output_sequence_length")]
    lengths = None if None in spreads else ("fixed" if all(s == 0 for s in spreads) else "varying")
    setup: dict[str, Any] = {"model_named": named, "input_tokens": P, "output_tokens": O, "lengths": lengths,
                             "num_prompts": _run_length(_aiperf_value(path, data, "request_count"))}
    notes: list[str] = []
    if rate:
        setup.update(scenario="request_rate", request_rate=rate)
        point = f"rate{rate:g}"
    else:
        setup.update(scenario="concurrency", concurrency=conc, closed_loop=True)
        point = f"c{conc:g}"
    values = [("ttft_ms", "ms", _aiperf_value(path, data, "time_to_first_token", True)),
              ("itl_ms", "ms", _aiperf_value(path, data, "inter_token_latency", True)),
              ("output_tokens_per_s", "tokens/s", _aiperf_value(path, data, "output_token_throughput"))]
    rows, more = _serving_rows(path, label, AIPERF, point, setup, values)
    return FileData(path, AIPERF, rows, notes + more)


# ---------------------------------------------------------------------------------------------
# CSV: decode step times (AIPerf's CSV export is refused)
# ---------------------------------------------------------------------------------------------


def _read_csv(path: Path, label: str, text: str) -> FileData:
    import csv
    import io

    lines = [(n, line) for n, line in enumerate(text.splitlines(), start=1) if line.strip() and not line.lstrip().startswith("#")]
    if not lines:
        raise InputError(f"{path}: empty CSV (expected columns {','.join(STEP_COLUMNS)})")
    header = [h.strip() for h in next(csv.reader([lines[0][1]]))]
    if header[:1] == ["Metric"]:
        raise InputError(f"{path}: AIPerf CSV export has no concurrency; give the JSON export (profile_export_aiperf.json)")
    missing = [c for c in STEP_COLUMNS if c not in header]
    if missing:
        raise InputError(f"{path}: a step-time CSV needs columns {','.join(STEP_COLUMNS)}; missing {', '.join(missing)}")
    points: dict[tuple[float, float], list[tuple[int, float]]] = {}
    reader = csv.DictReader(io.StringIO("\n".join(line for _, line in lines)))
    for (n, line), rec in zip(lines[1:], reader):
        vals = {}
        got = len(next(csv.reader([line])))
        if got != len(header):
            raise InputError(f"{path}:{n}: {got} field(s) where the header names {len(header)} ({','.join(header)})")
        for c in STEP_COLUMNS:
            x = _number((rec.get(c) or "").strip())
            if x is None or not x > 0 or x == math.inf or (c == "context_tokens" and x < 0):
                raise InputError(f"{path}:{n}: {c} {rec.get(c)!r}: expected a number > 0")
            if c == "batch" and (x != int(x) or x > MAX_STEP_BATCH):
                raise InputError(f"{path}:{n}: batch {rec.get(c)!r}: expected a whole number of sequences up to {MAX_STEP_BATCH:,}")
            vals[c] = x
        points.setdefault((vals["batch"], vals["context_tokens"]), []).append((n, vals["step_ms"]))
    if not points:
        raise InputError(f"{path}: no data rows under the header {','.join(header)}")
    if len(points) > MAX_STEP_POINTS:
        raise InputError(f"{path}: {len(points):,} distinct (batch, context_tokens) points; calibrate fits at most "
                         f"{MAX_STEP_POINTS:,}: bin the contexts first (e.g. round context_tokens to a multiple of 256)")
    rows: list[CorpusRow] = []
    notes: list[str] = []
    for (batch, context), obs in points.items():
        step = statistics.median(ms for _, ms in obs)
        rows.append(_row(label, f"{obs[0][0]}", STEP_CSV, path, "step_time_ms", "ms", step, "step",
                         {"model_named": None, "batch": batch, "context_tokens": context, "scenario": "decode_step"}))
    merged = sum(len(obs) for obs in points.values()) - len(points)
    if merged:
        notes.append(f"{merged + len(points):,} rows at {len(points):,} distinct (batch, context_tokens) points: each point "
                     "fitted at the median step_ms of its rows")
    return FileData(path, STEP_CSV, rows, notes)


# ---------------------------------------------------------------------------------------------
# vLLM start-up log
# ---------------------------------------------------------------------------------------------

_LOG_MARKERS = ("GPU KV cache size", "Available KV cache memory", "vLLM API server version", "non-default args",
                "Initializing a V1 LLM engine")
_LINE_START = re.compile(r"^(\(\w+ pid=\d+\)|INFO|WARNING|ERROR|DEBUG|\[|\d{4}-|[A-Z][a-z]+ \d)")

_TORCH_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32", "auto": "bf16"}


def _unwrap(text: str) -> str:
    """Join hard-wrapped log lines: a line that does not start like a log record continues the last."""
    out: list[str] = []
    for line in text.splitlines():
        if out and line and not _LINE_START.match(line):
            out[-1] += line
        else:
            out.append(line)
    return "\n".join(out)


def _search(pattern: str, text: str) -> re.Match[str] | None:
    return re.search(pattern, text)


def _grab(pattern: str, text: str) -> str | None:
    """The first group of the last match (a restarted engine logs again; the last start counts)."""
    found = re.findall(pattern, text)
    return found[-1] if found else None


def _graph_subtracted(text: str, version: str | None) -> bool:
    """Whether the engine took its CUDA-graph estimate out of the KV budget (:func:`read_vllm_log`)."""
    from capplan.accuracy.predict import release_version

    if "CUDA graph memory profiling is enabled" in text:
        return True
    if "CUDA graph memory profiling will be enabled by default" in text:
        return False
    v = release_version(version)
    return v is not None and v >= (0, 20, 0)


def read_vllm_log(path: Path, label: str, text: str) -> FileData:
    """A vLLM (V1) start-up log: the KV budget and capacity it printed, and its settings.

    Points: ``Available KV cache memory: X GiB`` (``available_kv_gib``) and ``GPU KV cache size:
    N tokens`` (``kv_cache_tokens``). Settings: the version (``vLLM API server version`` or
    ``Initializing a V1 LLM engine (vX)``, or ``version X`` of later banners), the ``non-default
    args`` dict (``gpu_memory_utilization``, ``max_num_seqs``, ``max_num_batched_tokens``,
    ``tensor_parallel_size``, ``max_model_len``, ``block_size``, ``kv_cache_dtype``), the engine
    config line (``dtype=``, ``quantization=``, ``kv_cache_dtype=``, ``tensor_parallel_size=``,
    ``max_seq_len=``), ``Chunked prefill is enabled with max_num_batched_tokens=N``,
    ``Model loading took X GiB`` (the weights per GPU), the sampler's top-k/top-p path
    (``Using FlashInfer for top-p & top-k sampling`` or ``Falling back to the PyTorch-native
    implementation``), and ``Estimated CUDA graph memory: X GiB total`` with whether the engine
    took it out of the KV budget (``cudagraph_gib``: only when it did -- the log says ``CUDA graph
    memory profiling is enabled``, or the version is 0.20 or later and the log does not say the
    profiling is still to come, as 0.17-0.19 logs do). Hard-wrapped lines are joined first.
    """
    t = _unwrap(text)
    notes: list[str] = []
    kv_gib = _grab(r"Available KV cache memory: ([\d.]+) GiB", t)
    kv_tokens = _grab(r"GPU KV cache size: ([\d,]+) tokens", t)
    if kv_gib is None and kv_tokens is None:
        raise InputError(f"{path}: vLLM start-up log has no 'Available KV cache memory' or 'GPU KV cache size' line "
                         "(did the engine finish starting?)")
    for what, value, unit in (("Available KV cache memory", kv_gib, "GiB"), ("GPU KV cache size", kv_tokens, "tokens")):
        if value is not None and not float(value.replace(",", "")) > 0:
            raise InputError(f"{path}: '{what}: {value} {unit}': the engine found no memory for a KV cache, so the "
                             "log constrains nothing (allowed: a start-up log whose KV cache is larger than 0)")
    version = (_grab(r"vLLM API server version ([\w.+\-]+)", t) or _grab(r"Initializing a V1 LLM engine \(v([\w.+\-]+)\)", t)
               or _grab(r"\bversion:? v?(\d+\.\d+[\w.+\-]*)", t))
    args = _grab(r"non-default args: (\{.*\})", t) or ""

    def arg(name: str) -> str | None:
        m = re.search(rf"'{name}': ('[^']*'|[\w.\-]+)", args)
        return m.group(1).strip("'") if m else None

    def cfg(name: str) -> str | None:
        return _grab(rf"\b{name}=([\w.\-]+)", t)

    tp = arg("tensor_parallel_size") or cfg("tensor_parallel_size") or "1"
    pp = arg("pipeline_parallel_size") or cfg("pipeline_parallel_size") or "1"
    dtype = (cfg("dtype") or "bfloat16").replace("torch.", "")
    quant = cfg("quantization")
    weight = _TORCH_DTYPES.get(dtype, dtype)
    if quant and quant not in ("None", "none"):
        weight = {"fp8": "fp8", "awq": "int4", "gptq": "int4", "awq_marlin": "int4", "gptq_marlin": "int4"}.get(quant, quant)
    kvd = arg("kv_cache_dtype") or cfg("kv_cache_dtype") or "auto"
    kv_dtype = "fp8" if kvd.startswith("fp8") else (_TORCH_DTYPES.get(dtype, "bf16") if kvd == "auto" else kvd)
    batched = arg("max_num_batched_tokens") or _grab(r"max_num_batched_tokens=(\d+)", t)
    settings: dict[str, Any] = {
        "engine_version": version, "tp": int(tp), "pp": int(pp), "weight_dtype": weight, "kv_dtype": kv_dtype,
        "gpu_memory_utilization": _number(arg("gpu_memory_utilization")),
        "max_num_seqs": _number(arg("max_num_seqs")),
        "max_num_batched_tokens": _number(batched),
        "max_model_len": _number(arg("max_model_len") or cfg("max_seq_len")),
        "block_size": _number(arg("block_size")),
        "weights_gib": _number(_grab(r"Model loading took ([\d.]+) GiB", t)),
        "kv_cache_tokens": _number(kv_tokens.replace(",", "")) if kv_tokens else None,
        "model_named": arg("model") or arg("model_tag") or _grab(r"model='([^']+)'", t),
    }
    if "Using FlashInfer for top-p & top-k sampling" in t:
        settings["sampler"] = "flashinfer"
    elif "Falling back to the PyTorch-native implementation of top-p & top-k sampling" in t:
        settings["sampler"] = "pytorch"
    graph = _number(_grab(r"Estimated CUDA graph memory: ([\d.]+) GiB total", t))
    if graph is not None and _graph_subtracted(t, version):
        settings["cudagraph_gib"] = graph
    blocks = _number(_grab(r"num_gpu_blocks is: (\d+)", t))
    if settings["block_size"] is None and blocks and settings["kv_cache_tokens"]:
        settings["block_size"] = settings["kv_cache_tokens"] / blocks
    if version is None:
        notes.append(f"{label}: the log prints no vLLM version")
    fields = {k: v for k, v in settings.items() if v is not None and k != "kv_cache_tokens"}
    rows = []
    if kv_gib is not None:
        rows.append(_row(label, "startup", VLLM_LOG, path, "available_kv_gib", "GiB", float(kv_gib), "kv", dict(fields)))
    if kv_tokens is not None:
        rows.append(_row(label, "startup", VLLM_LOG, path, "kv_cache_tokens", "tokens", float(kv_tokens.replace(",", "")),
                         "kv", dict(fields)))
    return FileData(path, VLLM_LOG, rows, notes, settings)
