"""Calibrating an engine profile on a user's benchmark files: resolve, prepare, fit, report.

:func:`calibrate` reads every file (:mod:`capplan.calibrate.readers`), fills in the model and
hardware each point ran on (the file's own model when it names a bundled preset, else the
flags), prices every point with the base engine profile through the same library calls the
validation corpus uses (:func:`capplan.accuracy.predict.prepare_serving` for benchmark points, a
decode step of :class:`capplan.roofline.StepPricer` for step times,
:func:`capplan.accuracy.predict.prepare_kv` for start-up logs), fits the terms the data constrain
(:mod:`capplan.calibrate.terms`) -- memory terms by
:func:`capplan.accuracy.refit.fit_memory_terms`, then time terms by
:func:`capplan.accuracy.fit.fit_time_terms` -- and returns each point's prediction before and
after with the profile that results.

Closed-loop benchmarks (a fixed number of clients) come in two shapes. When every request has
the same prompt and output length (``--random-input-len`` style data), the clients start
together, finish together and send their next requests together: the run is a sequence of
**waves**, each a static batch whose prompts are prefilled together (TTFT is the whole wave's
prefill). With varied lengths the clients drift apart into the **steady** state of
:func:`capplan.benchmark.closed_loop`. ``arrivals="auto"`` takes waves when the file shows equal
lengths, steady when it shows varied ones, and, when the file does not say (a ``vllm bench
serve`` file without ``--save-detailed``), fits both and keeps the one that fits better (the
report says which).
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from statistics import median
from typing import TYPE_CHECKING, Any, Literal, Sequence

from capplan.errors import CapplanError, InputError

if TYPE_CHECKING:
    from capplan.accuracy.corpus import CorpusRow
    from capplan.calibrate.readers import FileData
    from capplan.engine import EngineProfile

Arrivals = Literal["auto", "waves", "steady"]

PRIOR_WEIGHT = 0.001
"""Pull of the time fit towards the base profile's values (:func:`capplan.accuracy.fit.fit_time_terms`):
50 times weaker than the corpus fit's, because only terms the data constrain are fitted
(:mod:`capplan.calibrate.terms`); it only steadies the solver."""


@dataclass(frozen=True)
class CalibrateSettings:
    """How to read the files and what to fit (the flags of ``capplan calibrate``)."""

    model: str | None = None
    """Model preset (name or file) of the files that name no bundled model; a file's own model wins."""
    hardware: str | None = None
    """Hardware profile (name or file) the measurements ran on; none of the formats names it."""
    tp: int | None = None
    """Tensor-parallel size of the benchmarked server (a start-up log's own value wins) [GPUs]; default 1."""
    weight_dtype: str | None = None
    """Weight dtype of the benchmarked server (a start-up log's own value wins); default bf16."""
    kv_dtype: str | None = None
    """KV-cache dtype of the benchmarked server (a start-up log's own value wins); default the 16-bit weight dtype."""
    engine: str | None = None
    """Engine profile (name or file) to start from; default: the profile of a start-up log's vLLM version, else vllm-0.19."""
    terms: tuple[str, ...] | None = None
    """Terms to fit (time terms, and memory terms with a start-up log); default: every term the data constrain; 'none' fits nothing and only compares the --engine profile with the files."""
    arrivals: Arrivals = "auto"
    """Closed-loop benchmarks as waves (equal lengths: clients start and finish together), steady (staggered clients) or auto (from the file's lengths; the better fit when it does not say)."""
    name: str = "calibrated"
    """Name of the written profile (lower case, digits, '.', '-')."""


@dataclass(frozen=True)
class PointResult:
    """One measured value with its prediction before and after the fit."""

    id: str
    """``<file>:<point>:<metric>``."""
    file: str
    format: str
    kind: str
    """``serving``, ``step`` or ``kv``."""
    metric: str
    unit: str
    setting: str
    """The setting priced, in words (``waves of 8, 1024 in / 128 out``)."""
    measured: float
    before: float | None
    """Prediction with the base profile (``None``: not predicted)."""
    after: float | None
    """Prediction with the calibrated profile."""
    fitted: bool
    """Whether the fit used the point."""

    @property
    def error_before(self) -> float | None:
        """``before / measured - 1``."""
        return None if self.before is None else self.before / self.measured - 1.0

    @property
    def error_after(self) -> float | None:
        """``after / measured - 1``."""
        return None if self.after is None else self.after / self.measured - 1.0

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "error_before": self.error_before, "error_after": self.error_after}


MAX_FIT_ERROR = 0.5
"""Median ``|predicted / measured - 1|`` of the points above which a fit is refused: a profile that
far from its own data describes neither."""


@dataclass(frozen=True)
class TermResult:
    """One fitted term."""

    name: str
    """Dotted name (``time.bandwidth_efficiency``, ``memory.sampler_bytes_per_seq_vocab``)."""
    before: float
    """Value in the base profile."""
    after: float
    """Fitted value."""


@dataclass(frozen=True)
class Calibration:
    """The result of :func:`calibrate`."""

    engine: "EngineProfile"
    """The calibrated profile."""
    base: str
    """Name of the profile it started from."""
    files: list[str]
    """The input files, as given."""
    points: list[PointResult]
    terms: list[TermResult]
    notes: list[str] = field(default_factory=list)
    """Where the model, hardware and settings came from; what was assumed or left out."""
    skipped: list[tuple[str, str]] = field(default_factory=list)
    """Points capplan cannot price, with the reason."""

    def _median(self, attr: str) -> float | None:
        errs = [abs(getattr(p, attr)) for p in self.points if p.error_before is not None and p.error_after is not None]
        return median(errs) if errs else None

    @property
    def median_abs_error_before(self) -> float | None:
        """Median ``|predicted / measured - 1|`` over the priced points, with the base profile."""
        return self._median("error_before")

    @property
    def median_abs_error_after(self) -> float | None:
        """... and with the calibrated profile."""
        return self._median("error_after")

    def fit_failure(self) -> str | None:
        """Why the fitted profile does not describe the data, or ``None``: after the fit the median
        error of the points is still above :data:`MAX_FIT_ERROR` (measurements in the wrong unit,
        or a setting capplan priced differently from the run), with the terms that ended on a bound."""
        from capplan.accuracy.fit import BOUNDS

        after = self.median_abs_error_after
        if not self.terms or after is None or after <= MAX_FIT_ERROR:
            return None
        at_bound = [t.name for t in self.terms
                    if any(math.isclose(t.after, b, rel_tol=1e-9, abs_tol=1e-15) for b in BOUNDS.get(t.name.removeprefix("time."), ()))]
        bounds = f"; at a bound: {', '.join(at_bound)}" if at_bound else ""
        return (f"the fit leaves the points {after:.0%} off (median |predicted / measured - 1|, allowed at most "
                f"{MAX_FIT_ERROR:.0%}{bounds}): check the measurements' units and the run's settings")

    def as_dict(self) -> dict[str, Any]:
        return {
            "profile": self.engine.name, "base": self.base, "files": self.files, "fit_failure": self.fit_failure(),
            "median_abs_error_before": self.median_abs_error_before, "median_abs_error_after": self.median_abs_error_after,
            "terms": [asdict(t) for t in self.terms], "points": [p.as_dict() for p in self.points],
            "notes": self.notes, "skipped": [{"id": i, "reason": r} for i, r in self.skipped],
        }


# ---------------------------------------------------------------------------------------------
# Resolving the model, hardware and settings of every point
# ---------------------------------------------------------------------------------------------

_SUFFIXES = ("-instruct", "-chat", "-hf", "-it", "-base")


def _norm(name: str) -> str:
    s = name.strip().rstrip("/").split("/")[-1].lower()
    for suffix in _SUFFIXES:
        if s.endswith(suffix):
            s = s[: -len(suffix)]
    return s


def model_preset_for(named: str | None) -> str | None:
    """The bundled model preset a file's model text names (``meta-llama/Llama-3.1-8B-Instruct``
    -> ``llama-3.1-8b``): the last path component, lower case, without ``-Instruct`` / ``-chat``
    / ``-hf`` / ``-it``, equal to a preset's name or to its ``hf_id``'s last component so reduced."""
    if not named:
        return None
    return _preset_keys().get(_norm(named))


@lru_cache(maxsize=1)
def _preset_keys() -> dict[str, str]:
    """Reduced preset names and ``hf_id`` names -> preset name (names win)."""
    from capplan.modelspec import list_models, load_model_spec

    out: dict[str, str] = {}
    for name in list_models():
        hf = load_model_spec(name).hf_id
        if hf:
            out.setdefault(_norm(hf), name)
    out.update({name: name for name in list_models()})
    return out


def _labels(paths: Sequence[Path]) -> list[str]:
    """Point-id prefixes: file names, or the paths as given where two files share a name."""
    names = [p.name for p in paths]
    return [p.name if names.count(p.name) == 1 else str(p) for p in paths]


def _dtype(value: str | None, default: str) -> str:
    from capplan.accuracy.predict import dtype_of

    return dtype_of(value) or default if value else default


def resolve_rows(data: "FileData", settings: CalibrateSettings) -> tuple[list["CorpusRow"], list[str]]:
    """The file's rows with ``model``, ``hardware``, ``tp`` and dtypes filled in, and notes saying
    where each came from.

    Raises
    ------
    InputError
        No model (the file names none capplan knows and ``--model`` is not given) or no hardware.
    """
    from capplan.accuracy.predict import KV_DTYPES, WEIGHT_DTYPES
    from capplan.hardware import load_hardware
    from capplan.modelspec import load_model_spec

    notes: list[str] = []
    label = data.rows[0].id.split(":")[0] if data.rows else data.path.name
    named = next((r.fields.get("model_named") for r in data.rows if r.fields.get("model_named")), None)
    preset = model_preset_for(named)
    if preset is not None:
        model = preset
        if settings.model and load_model_spec(settings.model).name != preset:
            notes.append(f"{label}: model {preset} (the file names {named}; --model {settings.model} applies to files naming none)")
        else:
            notes.append(f"{label}: model {preset} (the file names {named})")
    elif settings.model:
        model = settings.model
        why = f"the file's {named!r} is no bundled preset" if named else "the file names no model"
        notes.append(f"{label}: model {load_model_spec(model).name} from --model ({why})")
    else:
        what = f"names {named!r}, which is no bundled model preset" if named else "names no model"
        raise InputError(f"{data.path}: the file {what}; give --model")
    if not settings.hardware:
        raise InputError(f"{data.path}: the file does not name the hardware; give --hardware (capplan profiles list hardware)")
    hw = settings.hardware
    notes.append(f"{label}: hardware {load_hardware(hw).name} from --hardware")
    if data.settings:
        tp = int(data.settings.get("tp") or 1)
        w = data.settings.get("weight_dtype") or "bf16"
        kv = data.settings.get("kv_dtype") or w
        said = {"--tp": (settings.tp, tp), "--dtype": (_dtype(settings.weight_dtype, w), w),
                "--kv-cache-dtype": (_dtype(settings.kv_dtype, kv), kv)}
        differ = [f"{flag} {given}" for flag, (given, own) in said.items() if given is not None and given != own]
        notes.append(f"{label}: tp {tp}, {w} weights, {kv} KV from the log" + (f" ({', '.join(differ)} not applied)" if differ else ""))
    else:
        tp = settings.tp or 1
        w = _dtype(settings.weight_dtype, "bf16")
        kv = _dtype(settings.kv_dtype, "fp16" if w == "fp16" else "bf16")
    for flag, value, allowed in (("--dtype", w, WEIGHT_DTYPES), ("--kv-cache-dtype", kv, KV_DTYPES)):
        if value not in allowed:
            where = f"{data.path}: the log's {flag[2:]}" if data.settings else flag
            raise InputError(f"{where} {value}: not modelled (one of {', '.join(sorted(allowed))})")
    rows = [replace(r, fields={**r.fields, "model": model, "hardware": hw, "tp": tp, "weight_dtype": w, "kv_dtype": kv})
            for r in data.rows]
    return rows, notes + list(data.notes)


# ---------------------------------------------------------------------------------------------
# Prepared points
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PreparedStep:
    """A measured decode step, ready to be priced at any time terms."""

    row: "CorpusRow"
    pricer: Any
    """:class:`capplan.roofline.StepPricer` of the row's model, hardware and dtypes."""

    def evaluate(self, engine: "EngineProfile | None" = None) -> float:
        """The predicted step time [ms] with ``engine``'s time terms (default: the pricer's)."""
        p = self.pricer if engine is None else self.pricer.with_inputs(self.pricer.inp.model_copy(update={"engine": engine}))
        return float(p.decode(self.row.fields["batch"], self.row.fields["context_tokens"]).step_time_s) * 1e3


def _prepare_step(row: "CorpusRow", engine: "EngineProfile") -> PreparedStep:
    from capplan.hardware import load_hardware
    from capplan.modelspec import load_model_spec
    from capplan.roofline import RooflineInputs, StepPricer

    f = row.fields
    pricer = StepPricer(load_model_spec(f["model"]), load_hardware(f["hardware"]),
                        RooflineInputs(tp=f["tp"], weight_dtype=f["weight_dtype"], kv_dtype=f["kv_dtype"], engine=engine))
    return PreparedStep(row, pricer)


def _as_corpus_fields(row: "CorpusRow", engine: "EngineProfile", waves: bool) -> "CorpusRow":
    """A serving row in the exact shape :func:`prepare_serving` reads (waves: a static batch)."""
    f = {**row.fields, "engine": engine.engine}
    if waves and f.get("scenario") == "concurrency":
        f.update(scenario="static_batch", batch=f["concurrency"])
    return replace(row, fields=f)


def _setting_text(row: "CorpusRow", waves: bool) -> str:
    f = row.fields
    if row.kind == "step":
        return f"batch {f['batch']:g}, context {f['context_tokens']:g}"
    if row.kind == "kv":
        return f"start-up, tp {f['tp']}"
    lengths = f"{f['input_tokens']:.0f} in / {f['output_tokens']:.0f} out"
    if f.get("scenario") in ("concurrency", "static_batch"):
        return f"{'waves of' if waves else 'steady'} {f['concurrency']:g}, {lengths}"
    rate = f.get("request_rate")
    if rate == math.inf:
        n = f.get("num_prompts")
        return f"all {n:,} at once, {lengths}" if n else f"all at once, {lengths}"
    return f"{rate:g} req/s, {lengths}"


def _log_overrides(files: list["FileData"], rows_by_file: list[list["CorpusRow"]]) -> dict[tuple[str, int], dict[str, Any]]:
    """Scheduler limits and KV capacity a start-up log states, keyed by (model, tp)."""
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for data, rows in zip(files, rows_by_file):
        if data.settings and rows:
            f = rows[0].fields
            out[(f["model"], int(f["tp"]))] = {"file": data.path.name, **data.settings}
    return out


def _apply_log(prepared: Any, log: dict[str, Any]) -> Any:
    s = prepared.server
    update = {}
    if log.get("max_num_seqs"):
        update["max_num_seqs"] = int(log["max_num_seqs"])
    if log.get("max_num_batched_tokens"):
        update["max_num_batched_tokens"] = int(log["max_num_batched_tokens"])
    if log.get("kv_cache_tokens"):
        update["kv_capacity_tokens"] = int(log["kv_cache_tokens"])
    return replace(prepared, server=replace(s, **update)) if update else prepared


def _sampler_peak_counts(prepared: Any, base: "EngineProfile", path: str) -> bool:
    """Whether a start-up log's KV budget moves with its sampler term (the sampler warm-up, not the
    forward pass, sets its activation peak at the base profile's value)."""
    from capplan.engine import SAMPLER_TERMS

    term = SAMPLER_TERMS[path]
    more = base.model_copy(update={"memory": base.memory.model_copy(update={term: getattr(base.memory, term) + 1.0})})
    return prepared.evaluate(more) != prepared.evaluate(base)


def _layout(row: "CorpusRow") -> str:
    from capplan.hardware import load_hardware

    if int(row.fields.get("tp") or 1) * int(row.fields.get("pp") or 1) == 1:
        return "single"
    hw = load_hardware(row.fields["hardware"])
    return "nvlink" if hw.intra_node_bandwidth_gbps >= 100 else "pcie"


# ---------------------------------------------------------------------------------------------
# The calibration
# ---------------------------------------------------------------------------------------------


def _base_engine(settings: CalibrateSettings, files: list["FileData"]) -> tuple["EngineProfile", str]:
    from capplan.accuracy.report import kv_profile_name
    from capplan.engine import DEFAULT_ENGINE, load_engine

    if settings.engine:
        eng = load_engine(settings.engine)
        return eng, f"base profile {eng.name} (--engine {settings.engine})"
    versions = [d.settings.get("engine_version") for d in files if d.settings.get("engine_version")]
    if versions:
        name = kv_profile_name({"engine_version": versions[0]})
        return load_engine(name), f"base profile {name} (the start-up log's vLLM {versions[0]})"
    return load_engine(DEFAULT_ENGINE), f"base profile {DEFAULT_ENGINE} (the default; --engine chooses another)"


def calibrate(paths: Sequence[str | Path], settings: CalibrateSettings) -> Calibration:
    """Fit an engine profile's terms to the measurements in ``paths``.

    Parameters
    ----------
    paths
        Benchmark result files (any format of :mod:`capplan.calibrate.readers`).
    settings
        Model, hardware, engine settings, terms and arrivals (:class:`CalibrateSettings`).

    Returns
    -------
    Calibration
        The calibrated profile, each point's prediction before and after, the fitted terms and
        notes on where every setting came from.

    Raises
    ------
    InputError
        A file capplan cannot read, a missing model or hardware, no point capplan can price, or
        terms the data do not constrain (:func:`capplan.calibrate.terms.check_terms`).
    """
    from capplan.calibrate.readers import read_file
    from capplan.hardware import load_hardware

    if not paths:
        raise InputError("no input files: give one or more benchmark results, start-up logs or step-time CSVs")
    if not re.fullmatch(r"[a-z0-9][a-z0-9.\-]*", settings.name):
        raise InputError(f"profile name {settings.name!r}: use lower-case letters, digits, '.' and '-'")
    paths = [Path(p) for p in paths]
    twice = next((p for i, p in enumerate(paths) if p.resolve() in {q.resolve() for q in paths[:i]}), None)
    if twice is not None:
        raise InputError(f"{twice}: given twice; give each file once")
    files = [read_file(p, label) for p, label in zip(paths, _labels(paths))]
    notes: list[str] = []
    rows_by_file = []
    for data in files:
        if not data.rows:
            raise InputError(f"{data.path}: no measured value capplan can use ({'; '.join(data.notes) or 'empty'})")
        rows, n = resolve_rows(data, settings)
        rows_by_file.append(rows)
        notes += n
    notes = _merge_notes(notes)
    base, why = _base_engine(settings, files)
    notes.insert(0, why)
    hw = load_hardware(rows_by_file[0][0].fields["hardware"]).name
    if hw in base.hardware:
        # the chip's overrides become the starting terms: the fitted ones replace them, the others
        # keep the chip's values (not the family's)
        hardware = {k: v for k, v in base.hardware.items() if k != hw}
        base = base.model_copy(update={"time": base.time_on(hw), "hardware": hardware})
        notes.append(f"the base profile's {hw} overrides are folded into its time terms: the calibrated terms replace them, "
                     f"the others keep their {hw} values")
    rows = [r for rs in rows_by_file for r in rs]
    lengths_unknown = any(r.fields.get("closed_loop") and r.fields.get("lengths") is None for r in rows)
    if settings.arrivals == "auto" and lengths_unknown:
        a = _calibrate_once(files, rows_by_file, rows, base, settings, unknown_as_waves=True)
        b = _calibrate_once(files, rows_by_file, rows, base, settings, unknown_as_waves=False)
        unknown = sorted({r.fields["file"] for r in rows if r.fields.get("closed_loop") and r.fields.get("lengths") is None})
        ea, eb = (_median_error(c.points, unknown) for c in (a, b))
        best, (e_best, e_other) = (a, (ea, eb)) if ea <= eb else (b, (eb, ea))
        which, other = ("waves", "steady") if best is a else ("steady", "waves")
        note = (f"{', '.join(Path(u).name for u in unknown)}: the file does not show whether lengths vary; priced as {which} "
                f"(median error of its points{' after the fit' if best.terms else ''} {_pct(e_best)} against "
                f"{_pct(e_other)} as {other}; "
                "--arrivals fixes it)")
        return replace(best, notes=notes + [note] + best.notes)
    out = _calibrate_once(files, rows_by_file, rows, base, settings, unknown_as_waves=settings.arrivals == "waves")
    return replace(out, notes=notes + out.notes)


def _merge_notes(notes: list[str]) -> list[str]:
    """``a.json: X`` and ``b.json: X`` as one ``a.json, b.json: X`` (order kept)."""
    groups: dict[str, list[str]] = {}
    for n in notes:
        label, sep, rest = n.partition(": ")
        groups.setdefault(rest if sep else n, []).append(label if sep else "")
    return [f"{', '.join(dict.fromkeys(labels))}: {rest}" if labels[0] else rest for rest, labels in groups.items()]


def _median_error(points: list[PointResult], files: list[str]) -> float:
    errs = [abs(p.error_after) for p in points if p.file in files and p.error_after is not None]
    return median(errs) if errs else math.inf


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1%}"


def _calibrate_once(files: list["FileData"], rows_by_file: list[list["CorpusRow"]], rows: list["CorpusRow"],
                    base: "EngineProfile", settings: CalibrateSettings, unknown_as_waves: bool) -> Calibration:
    from capplan.accuracy.fit import fit_time_terms, with_time_terms
    from capplan.accuracy.predict import Unsupported, prepare_kv
    from capplan.accuracy.refit import fit_memory_terms, with_sampler_paths
    from capplan.calibrate.terms import check_terms, data_shape, default_terms
    from capplan.hardware import load_hardware
    from capplan.modelspec import load_model_spec

    notes: list[str] = []
    skipped: list[tuple[str, str]] = []

    def waves_for(r: "CorpusRow") -> bool:
        if not r.fields.get("closed_loop"):
            return False
        if settings.arrivals != "auto":
            return settings.arrivals == "waves"
        lengths = r.fields.get("lengths")
        return unknown_as_waves if lengths is None else lengths == "fixed"

    # start-up logs: KV points priced with the logged settings and the logged weights
    kv_prepared: list[Any] = []
    for r in (r for r in rows if r.kind == "kv"):
        f = {"engine_version": "latest", **r.fields, "engine": "vllm"}
        try:
            p = prepare_kv(replace(r, fields=f), base)
        except (Unsupported, CapplanError) as exc:
            skipped.append((r.id, str(exc)))
            continue
        if r.fields.get("weights_gib"):
            p = replace(p, inputs=p.inputs.model_copy(update={"weights_gib": float(r.fields["weights_gib"])}))
        kv_prepared.append(p)
    logs: dict[str, Any] = {}
    for p in kv_prepared:
        logs.setdefault(p.row.fields["file"], p)
    paths = {file: base.memory.sampler_path(p.inputs.sampler) for file, p in logs.items()}
    seeded = with_sampler_paths(base, set(paths.values()))
    if seeded is not base:
        base = seeded
        notes.append(f"{base.name} has no FlashInfer sampler term: the logs that run FlashInfer's sampler start from its "
                     "PyTorch sampler's bytes per entry")
    kv_logs = [(file, int(p.row.fields["tp"]), _layout(p.row), paths[file], _sampler_peak_counts(p, base, paths[file]))
               for file, p in logs.items()]
    graph = None if settings.terms == () else _logged_graph(files, notes)
    start = base if graph is None else base.model_copy(
        update={"memory": base.memory.model_copy(update={"cudagraph_gib": graph[0]})})

    time_rows = [r for r in rows if r.kind in ("serving", "step")]
    overrides = _log_overrides(files, rows_by_file)
    time_prepared, why_not = _prepare_time(time_rows, base, overrides, waves_for, notes)
    skipped += why_not
    moe = {r.fields["model"] for r in time_rows if load_model_spec(r.fields["model"]).moe is not None}
    shape = data_shape([p.row for p, _ in time_prepared], kv_logs, moe)
    if settings.terms is not None:
        time_terms, memory_terms = check_terms(settings.terms, shape)
    else:
        time_terms, memory_terms = default_terms(shape)
    if not time_prepared and not kv_prepared:
        reasons = "".join(f"; {i}: {why}" for i, why in skipped[:3])
        raise InputError(f"no point capplan can price{reasons}")
    if not time_terms and not memory_terms and settings.terms != ():
        reasons = "".join(f"; {i}: {why}" for i, why in skipped[:3])
        raise InputError("no point capplan can price constrains a term (give a benchmark result, a step-time CSV or a "
                         f"vLLM start-up log with its KV lines){reasons}")

    engine = start
    mem_values: dict[str, float] = {}
    if memory_terms:
        engine, mem_values = fit_memory_terms(start, kv_prepared, memory_terms)
        fitted_on = dict(engine.fitted_on)
        for t in mem_values:
            fitted_on[f"memory.{t}"] = [p.row.id for p in kv_prepared]
        engine = engine.model_copy(update={"fitted_on": fitted_on})
    if memory_terms or graph is not None:
        time_prepared, _ = _prepare_time([p.row for p, _ in time_prepared], engine, overrides, waves_for, [])
    time_values: dict[str, float] = {}
    if time_terms:
        result = fit_time_terms(engine, [p for p, _ in time_prepared], time_terms, prior_weight=PRIOR_WEIGHT)
        time_values = {t: _snap(t, v) for t, v in result.terms.items()}
        engine = with_time_terms(result.engine, time_values)

    def predict(p: Any, eng: "EngineProfile") -> float | None:
        try:
            return float(p.evaluate(eng))
        except (Unsupported, CapplanError):
            return None

    points: list[PointResult] = []
    for p, waves in time_prepared:
        points.append(_point(p.row, _setting_text(p.row, waves), predict(p, base), predict(p, engine), bool(time_values)))
    for p in kv_prepared:
        points.append(_point(p.row, _setting_text(p.row, False), predict(p, base), predict(p, engine), bool(mem_values)))
    order = {r.id: i for i, r in enumerate(rows)}
    points.sort(key=lambda pt: order.get(pt.id, 0))

    terms = [TermResult(f"memory.{t}", float(getattr(base.memory, t)), v) for t, v in mem_values.items()]
    terms += [TermResult(f"time.{t}", float(getattr(base.time, t)), v) for t, v in time_values.items()]
    names = [str(d.path) for d in files]
    hardware = sorted({load_hardware(r.fields["hardware"]).name for r in rows})
    engine = _finish_profile(engine, base, settings, names, files, hardware, terms)
    if graph is not None:
        engine = engine.model_copy(update={"sources": {**engine.sources, "memory.cudagraph_gib": graph[1]}})
    return Calibration(engine, base.name, names, points, terms, notes, skipped)


def _logged_graph(files: list["FileData"], notes: list[str]) -> tuple[float, str] | None:
    """The CUDA-graph estimate the start-up logs printed and took out of their KV budget (vLLM 0.20
    and later), as the calibrated profile's ``memory.cudagraph_gib`` with its source; the largest
    when the logs differ (a note says so); ``None`` when no log shows one."""
    read = {d.path.name: float(d.settings["cudagraph_gib"]) for d in files if d.settings.get("cudagraph_gib") is not None}
    if not read:
        return None
    value = max(read.values())
    named = ", ".join(f"{name} {v:g} GiB" for name, v in read.items())
    if max(read.values()) - min(read.values()) > 0.01:
        notes.append(f"the start-up logs print different CUDA-graph estimates ({named}); the profile keeps the largest, "
                     f"{value:g} GiB, which under-counts none of them")
    notes.append(f"memory.cudagraph_gib {value:g} GiB: the 'Estimated CUDA graph memory' the start-up log took out of its "
                 "KV budget (read from the log, not fitted)")
    return value, f"read from the start-up log ({named}): 'Estimated CUDA graph memory: X GiB total', subtracted from the KV budget"


def _prepare_time(rows: list["CorpusRow"], engine: "EngineProfile", overrides: dict[tuple[str, int], dict[str, Any]],
                  waves_for: Any, notes: list[str]) -> tuple[list[tuple[Any, bool]], list[tuple[str, str]]]:
    """Benchmark and step points ready to be priced at any time terms, and those capplan cannot price."""
    from capplan.accuracy.predict import Unsupported, prepare_serving

    out: list[tuple[Any, bool]] = []
    skipped: list[tuple[str, str]] = []
    replayed_runs: set[str] = set()  # one note a run
    for r in rows:
        waves = waves_for(r)
        try:
            if r.kind == "step":
                p: Any = _prepare_step(r, engine)
            else:
                p = replace(prepare_serving(_as_corpus_fields(r, engine, waves), engine), replay=True)
                log = overrides.get((r.fields["model"], int(r.fields["tp"])))
                if log is not None:
                    p = _apply_log(p, log)
                    note = f"{r.id.split(':')[0]}: scheduler limits and KV capacity from {log['file']} (same model and tp)"
                    if note not in notes:
                        notes.append(note)
            if r.kind == "step":
                p.evaluate(engine)
            else:
                _, replayed = p.priced(engine)
                run = r.id.rsplit(":", 1)[0]
                if replayed and run not in replayed_runs:
                    replayed_runs.add(run)
                    notes.append(f"{run}: {replayed}")
        except (Unsupported, CapplanError) as exc:
            skipped.append((r.id, str(exc)))
            continue
        out.append((p, waves))
    return out, skipped


def _snap(term: str, value: float) -> float:
    """A fitted value within a millionth of its range from a bound, as the bound (``0`` not ``3e-12``)."""
    from capplan.accuracy.fit import BOUNDS

    lo, hi = BOUNDS[term]
    tol = 1e-6 * (hi - lo)
    return lo if value - lo <= tol else hi if hi - value <= tol else value


def _point(row: "CorpusRow", setting: str, before: float | None, after: float | None, fitted: bool) -> PointResult:
    return PointResult(row.id, row.fields["file"], row.source, row.kind, row.metric, row.unit, setting, row.measured,
                       before, after, fitted)


def _finish_profile(engine: "EngineProfile", base: "EngineProfile", settings: CalibrateSettings, names: list[str],
                    files: list["FileData"], hw: list[str], terms: list[TermResult]) -> "EngineProfile":
    """Name, version, description, calibration and sources of the calibrated profile."""
    versions = [d.settings.get("engine_version") for d in files if d.settings.get("engine_version")]
    fitted = {t.name for t in terms}
    sources = {k: v for k, v in base.sources.items() if k not in fitted}
    description = (f"{base.name} calibrated on {', '.join(Path(n).name for n in names)}"
                   + (f" ({', '.join(hw)})" if hw else "") + f": {', '.join(sorted(fitted)) or 'no term'} fitted.")
    return engine.model_copy(update={
        "name": settings.name, "version": versions[0] if versions else base.version, "description": description,
        "calibration": ", ".join(names), "sources": sources,
    })


def profile_yaml(cal: Calibration, command: str = "capplan calibrate") -> str:
    """The calibrated profile as YAML, with a header saying how it was made.

    Floats are written with 6 significant digits (small terms such as ``per_sequence_s`` keep
    their precision); the file loads with :func:`capplan.engine.load_engine`.
    """
    import yaml

    data = cal.engine.model_dump(mode="json")
    for section in ("memory", "time"):
        data[section] = {k: (float(f"{v:.6g}") if isinstance(v, float) else v) for k, v in data[section].items()}
    header = (
        f"# {cal.engine.name}: {cal.engine.description}\n"
        f"# Written by `{command}`. Terms whose `fitted_on` names points of those files were fitted on them\n"
        f"# (median |predicted/measured - 1| {_pct(cal.median_abs_error_before)} with {cal.base}, "
        f"{_pct(cal.median_abs_error_after)} after); the others are {cal.base}'s, with its `sources` / `fitted_on`.\n"
    )
    return header + yaml.safe_dump(data, sort_keys=False, width=120)
