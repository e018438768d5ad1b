"""Predicted against measured, row by row and summarised: the ``capplan accuracy`` report.

Signed error is ``predicted / measured - 1`` for rates and quantities (tokens/s, KV tokens) and
``measured / predicted - 1`` for durations (TTFT, ITL, step times), so a positive error always
means capplan is optimistic (it promises more throughput or less time than was measured).
Absolute error is the absolute value of the signed one.
"""

from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass, field
from statistics import median
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from capplan.accuracy.corpus import CorpusRow
    from capplan.engine import EngineProfile


@dataclass(frozen=True)
class RowResult:
    """One corpus row with capplan's prediction (the JSON contract of ``capplan accuracy``)."""

    id: str
    source: str
    kind: str
    metric: str
    unit: str
    hardware: str
    model: str
    engine_profile: str
    predicted: float | None
    measured: float
    signed_error: float | None
    abs_error: float | None
    held_out: bool
    citation: str
    unsupported: str = ""
    assumed: list[str] = field(default_factory=list)
    feature: str = ""
    """The engine feature the row exercises (corpus ``feature`` column, else one its settings
    imply: ``fp4`` for nvfp4/mxfp4 weights, ``moe_ep`` for expert parallelism); empty for plain
    serving."""
    moe: bool = False
    """Whether the row's model is a mixture of experts (dense and MoE errors are reported apart)."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def row_is_moe(row: Any) -> bool:
    """Whether a corpus row's model is a mixture of experts: the row's ``moe`` column where it has
    one, else the model preset's (rows of ``rl_steps.csv`` and ``kv_capacity.csv`` name a preset)."""
    flag = str(row.get("moe") or "").lower()
    if flag in ("true", "false"):
        return flag == "true"
    name = row.get("model")
    if not name:
        return False
    from capplan.errors import CapplanError
    from capplan.modelspec import load_model_spec

    try:
        return load_model_spec(str(name)).moe is not None
    except CapplanError:
        return False


def row_feature(row: Any) -> str:
    """The feature a corpus row exercises (see :attr:`RowResult.feature`)."""
    f = row.get("feature")
    if f:
        return str(f)
    if (row.get("weight_dtype") or "").split(" ")[0] in ("nvfp4", "mxfp4"):
        return "fp4"
    ep = row.number("ep")
    if ep is not None and ep > 1:
        return "moe_ep"
    return ""


@dataclass(frozen=True)
class Summary:
    """Error statistics of a set of predicted rows (fractions)."""

    n: int
    median_abs_error: float | None
    median_signed_error: float | None
    mean_abs_error: float | None
    mean_signed_error: float | None
    max_abs_error: float | None
    within_2x: float | None
    """Fraction of rows with predicted/measured within a factor of 2."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class AccuracyReport:
    """Every row and the summaries (JSON: ``rows`` and ``summary``)."""

    rows: list[RowResult]
    engines: dict[str, str]
    """Engine profile used per engine family (KV rows from vLLM start-up logs: per version)."""

    def summary(self, where: Callable[[RowResult], bool] = lambda r: True) -> Summary:
        return summarize([r for r in self.rows if where(r)])

    def groups(self, key: Callable[[RowResult], str], where: Callable[[RowResult], bool] = lambda r: True) -> dict[str, Summary]:
        out: dict[str, list[RowResult]] = {}
        for r in self.rows:
            if where(r) and r.signed_error is not None:
                out.setdefault(key(r), []).append(r)
        return {k: summarize(v) for k, v in sorted(out.items())}

    def as_dict(self) -> dict[str, Any]:
        from capplan.accuracy.coverage import architecture

        return {
            "engines": self.engines,
            "rows": [r.as_dict() for r in self.rows],
            "summary": {
                "all": self.summary().as_dict(),
                "held_out": self.summary(lambda r: r.held_out).as_dict(),
                "by_kind": {k: v.as_dict() for k, v in self.groups(lambda r: r.kind).items()},
                "by_metric": {k: v.as_dict() for k, v in self.groups(lambda r: f"{r.kind}:{r.metric}").items()},
                "by_source": {k: v.as_dict() for k, v in self.groups(lambda r: r.source).items()},
                "by_hardware": {k: v.as_dict() for k, v in self.groups(lambda r: r.hardware).items()},
                "by_feature": {k: v.as_dict() for k, v in self.groups(lambda r: r.feature or "none").items()},
                "by_moe": {k: v.as_dict() for k, v in self.groups(lambda r: architecture(r.moe)).items()},
            },
            "unsupported": len([r for r in self.rows if r.predicted is None]),
            "saturated": self.saturated(),
        }

    def beyond_factor(self, factor: float, where: Callable[[RowResult], bool] = lambda r: True) -> list[RowResult]:
        """Predicted rows off by more than ``factor`` either way (:func:`within_factor` false),
        among those ``where`` keeps."""
        return [r for r in self.rows if where(r) and within_factor(r, factor) is False]

    def saturated(self) -> dict[str, Any]:
        """Latency rows the model finds saturated (latency without bound) though the source
        measured a figure: misses the error summaries leave out, counted apart (``n``,
        ``held_out``, ``ids``)."""
        from capplan.accuracy.predict import SATURATED

        rows = [r for r in self.rows if r.predicted is None and r.unsupported.startswith(SATURATED)]
        return {"n": len(rows), "held_out": sum(r.held_out for r in rows), "ids": [r.id for r in rows]}


def signed_error(predicted: float, measured: float, is_time: bool) -> float:
    """+ = optimistic: ``measured / predicted - 1`` for durations, ``predicted / measured - 1`` otherwise.

    >>> signed_error(90.0, 100.0, is_time=True)  # predicted 90 ms, took 100 ms: optimistic
    0.11111111111111116
    >>> signed_error(120.0, 100.0, is_time=False)  # predicted 120 tokens/s, measured 100
    0.19999999999999996
    """
    return measured / predicted - 1.0 if is_time else predicted / measured - 1.0


def within_factor(row: RowResult, factor: float) -> bool | None:
    """Whether a row's prediction is within ``factor`` of its measurement either way
    (``predicted / measured`` in ``[1 / factor, factor]``); ``None`` for a row not predicted.

    >>> r = RowResult("r", "s", "serving", "ttft_ms", "ms", "h100-sxm", "m", "vllm", 250.0, 100.0, 1.5, 1.5, True, "c")
    >>> within_factor(r, 2.0), within_factor(r, 3.0)
    (False, True)
    """
    if row.signed_error is None or not row.predicted or not row.measured:
        return None
    return 1.0 / factor <= row.predicted / row.measured <= factor


def summarize(rows: list[RowResult]) -> Summary:
    """Median / mean / max of the errors of the predicted rows among ``rows``."""
    e = [r.signed_error for r in rows if r.signed_error is not None]
    if not e:
        return Summary(0, None, None, None, None, None, None)
    a = [abs(x) for x in e]
    flags = [w for w in (within_factor(r, 2.0) for r in rows) if w is not None]
    within = sum(flags) / len(flags) if flags else None
    return Summary(len(e), median(a), median(e), sum(a) / len(a), sum(e) / len(e), max(a), within)


def run_accuracy(
    rows: "list[CorpusRow] | None" = None,
    engines: "dict[str, EngineProfile | None] | None" = None,
    default_engine: "EngineProfile | None" = None,
) -> AccuracyReport:
    """Predict every row with the engine profile of its engine family.

    Parameters
    ----------
    rows
        Corpus rows (default: the shipped corpus).
    engines
        Engine profile per family (``vllm``, ``sglang``, ``trtllm``, ``other``); a family not
        given uses ``default_engine``.
    """
    from capplan.accuracy.corpus import load_corpus
    from capplan.accuracy.predict import Prediction, engine_family, predict_kv, predict_serving
    from capplan.accuracy.rl import predict_rl, predict_trainer, predict_weight_sync
    from capplan.hardware import DtypeFallbackWarning

    rows = load_corpus() if rows is None else rows
    engines = engines or {}
    used: dict[str, str] = {}
    out = []
    for row in rows:
        family = engine_family(row.get("engine"))
        start_up_log = row.kind == "kv" and family == "vllm"
        key = kv_profile_name(row) if start_up_log else time_profile_name(row, family)
        engine = engines.get(key, engines.get(family, default_engine))
        if start_up_log and key != family:  # a vLLM start-up log: the profile of its version range
            used["vllm start-up logs"] = "the profile of the log's vLLM version"
        elif key != family:  # a release whose kernels the family profile does not describe
            used[f"{family} rows of the {key} releases"] = engine.name if engine is not None else "hardware assumptions"
        else:
            used[family] = engine.name if engine is not None else "hardware assumptions"
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", DtypeFallbackWarning)
            if row.kind == "serving":
                p = predict_serving(row, engine)
            elif row.kind == "kv":
                p = predict_kv(row, engine)
            elif row.kind == "rl":
                p = predict_rl(row, engine)
            elif row.kind == "trainer":
                p = predict_trainer(row)
            elif row.kind == "weight_sync":
                p = predict_weight_sync(row)
            else:
                p = Prediction(None, f"{row.kind} rows are not predicted")
        # a dtype the chip prices on another unit is an assumption of that row, not a warning to the reader
        fallbacks = [str(w.message) for w in caught if issubclass(w.category, DtypeFallbackWarning)]
        err = signed_error(p.value, row.measured, row.is_time) if p.value else None
        out.append(RowResult(
            id=row.id, source=row.source, kind=row.kind, metric=row.metric, unit=row.unit,
            hardware=row.get("hardware") or "", model=row.get("model") or "", engine_profile=p.engine_profile,
            predicted=p.value, measured=row.measured, signed_error=err, abs_error=abs(err) if err is not None else None,
            held_out=row.held_out, citation=row.citation, unsupported=p.reason, assumed=[*p.assumed, *dict.fromkeys(fallbacks)],
            feature=row_feature(row), moe=row_is_moe(row),
        ))
    return AccuracyReport(out, used)


FAMILY_PROFILES = {"vllm": "vllm", "sglang": "sglang", "trtllm": "trtllm", "other": "vllm"}
"""Bundled engine profile that predicts the serving rows of each engine family (``other``:
engines without a profile of their own, e.g. gpt-fast, are priced as vLLM)."""

VLLM_VERSION_PROFILES = [((0, 11, 0), "vllm-0.10"), ((0, 16, 99), "vllm-0.15"), ((0, 19, 99), "vllm-0.19"), ((9, 0, 0), "vllm-latest")]
"""Which vLLM profile reproduces a start-up log of each version: the first whose upper bound
the log's version does not exceed. ``latest`` container images of early 2026 (the llm-d logs)
are 0.14-0.15 and count as ``vllm-0.15``."""


TRTLLM_VERSION_PROFILES = [((0, 6, 99), "trtllm-0.6"), ((9, 0, 0), "trtllm")]
"""Which TensorRT-LLM profile prices a row's times, by release: the first whose upper bound the
row's version does not exceed (``trtllm-0.6``: releases before the XQA kernel). A row that
states no version takes the family profile."""

RELEASE_PROFILES = {"trtllm": TRTLLM_VERSION_PROFILES}
"""Families whose serving rows are priced by the profile of their release, not the family's."""


def _by_version(version: tuple[int, int, int], table: list[tuple[tuple[int, int, int], str]]) -> str:
    """The profile of ``table`` (upper bound, name), in order, whose bound ``version`` does not
    exceed; a version past every bound (a future release) takes the last."""
    return next((name for top, name in table if version <= top), table[-1][1])


def time_profile_name(row: Any, family: str) -> str:
    """The bundled profile that prices a serving row's times: its family's, except in a family of
    :data:`RELEASE_PROFILES` (TensorRT-LLM up to 0.6, :data:`TRTLLM_VERSION_PROFILES`)."""
    from capplan.accuracy.predict import release_version

    v = release_version(row.get("engine_version"))
    if family not in RELEASE_PROFILES or v is None:
        return family
    return _by_version(v, RELEASE_PROFILES[family])


def kv_profile_name(row: Any) -> str:
    """The engine profile that reproduces a vLLM start-up log (by its version)."""
    from capplan.accuracy.predict import release_version

    text = row.get("engine_version") or ""
    v = release_version(text)
    if v is None:
        return "vllm-0.15" if "latest" in text else "vllm"
    return _by_version(v, VLLM_VERSION_PROFILES)


def default_engines(override: str | None = None) -> "dict[str, EngineProfile | None]":
    """The engine profile of each family (and of each vLLM version's KV rows, keyed by profile
    name): the bundled ones, or ``override`` for all of them."""
    from capplan.engine import list_engines, load_engine

    names = set(FAMILY_PROFILES.values()) | {n for _, n in VLLM_VERSION_PROFILES}
    names |= {n for table in RELEASE_PROFILES.values() for _, n in table}
    if override is not None:
        eng = load_engine(override)
        return {k: eng for k in [*FAMILY_PROFILES, *names]}
    bundled = set(list_engines())
    cache: dict[str, EngineProfile] = {}

    def get(name: str) -> "EngineProfile":
        return cache.setdefault(name, load_engine(name if name in bundled else "vllm"))

    out: dict[str, EngineProfile | None] = {f: get(n) for f, n in FAMILY_PROFILES.items()}
    out.update({n: get(n) for n in names})
    return out
