"""Fitting an engine profile's time terms to measurements by bounded least squares.

The residual of a row is ``log(predicted / measured)``: ratios, so a 10 ms and a 10 s
measurement weigh alike, and over- and under-prediction by the same factor weigh alike. The fit
is :func:`scipy.optimize.least_squares` with box bounds (every term stays physical) and a soft-L1
loss, so one odd row cannot drag every term. The corpus fit (``validation/fit_engines.py``) and
``capplan calibrate`` (a user's own benchmark files) both call :func:`fit_time_terms`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from capplan.errors import InputError

if TYPE_CHECKING:
    from capplan.engine import EngineProfile

BOUNDS: dict[str, tuple[float, float]] = {
    "bandwidth_efficiency": (0.3, 0.95),
    "gemm_efficiency": (0.3, 0.85),
    "gemm_half_tokens": (0.0, 4096.0),
    "attention_efficiency": (0.1, 0.85),
    "moe_gemm_efficiency": (0.1, 1.0),
    "step_overhead_s": (0.0, 0.02),
    "per_sequence_s": (0.0, 1e-4),
    "request_overhead_s": (0.0, 0.1),
    "interconnect_efficiency": (0.2, 0.9),
    "allreduce_latency_us": (2.0, 100.0),
}
"""Bounds of every fittable time term: physical ranges. Streaming kernels reach at most ~95% of
datasheet bandwidth and tuned GEMMs ~85% of dense peak (FlashAttention-3 reports 75%); host
times stay below what any published engine shows (20 ms a step, 100 us a sequence, 100 ms a
request); an NVLink all-reduce costs 2-100 us."""

PRIOR_WEIGHT = 0.05
"""Weight of the pull towards the starting values, per term, relative to one row's log-ratio
residual over the term's range (a weak ridge prior that keeps terms no row constrains where
they started)."""


@dataclass(frozen=True)
class FitResult:
    """A fitted engine profile and how well it fits."""

    engine: "EngineProfile"
    """The profile with the fitted terms (``fitted_on`` records the row ids)."""
    terms: dict[str, float]
    """Fitted value of each term."""
    residuals_before: list[float]
    """``log(predicted / measured)`` of each row before the fit."""
    residuals_after: list[float]
    """... and after it."""
    row_ids: list[str]
    """The rows fitted, in the order of the residuals."""

    @property
    def median_abs_error_before(self) -> float:
        return _median([abs(math.expm1(r)) for r in self.residuals_before])

    @property
    def median_abs_error_after(self) -> float:
        return _median([abs(math.expm1(r)) for r in self.residuals_after])


def _median(xs: list[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return (s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2) if n else float("nan")


def _evaluate(row: Any, engine: "EngineProfile") -> float:
    """A row's prediction, or its measurement (residual 0) where these terms make it unsupported."""
    try:
        return float(row.evaluate(engine))
    except Exception:  # noqa: BLE001 (e.g. a rate the trial terms cannot serve)
        return float(row.row.measured)


def with_time_terms(engine: "EngineProfile", values: dict[str, float], hardware: str | None = None) -> "EngineProfile":
    """A copy of ``engine`` with time terms replaced (on one hardware's overrides if given)."""
    from capplan.engine import TimeOverrides

    if hardware is None:
        return engine.model_copy(update={"time": engine.time.model_copy(update=values)})
    current = engine.hardware.get(hardware, TimeOverrides())
    hw = dict(engine.hardware)
    hw[hardware] = current.model_copy(update=values)
    return engine.model_copy(update={"hardware": hw})


def fit_time_terms(
    engine: "EngineProfile",
    rows: Sequence[Any],
    terms: Sequence[str],
    hardware: str | None = None,
    max_evaluations: int = 400,
    prior_weight: float = PRIOR_WEIGHT,
) -> FitResult:
    """Fit ``terms`` of ``engine``'s time terms to ``rows``.

    Parameters
    ----------
    engine
        Starting profile (its values are the first guess, clipped to :data:`BOUNDS`).
    rows
        Prepared rows: objects with ``evaluate(engine) -> predicted`` and ``row.measured`` /
        ``row.id`` (:class:`capplan.accuracy.predict.PreparedServing`).
    terms
        Names of the time terms to fit (keys of :data:`BOUNDS`).
    hardware
        Fit the terms as this hardware profile's overrides instead of the engine's own.
    prior_weight
        Weight of the pull towards the starting values (:data:`PRIOR_WEIGHT`); a caller that
        fits only terms its rows constrain can make it small so exact data are fitted exactly.

    Raises
    ------
    InputError
        No rows, fewer rows than terms, or an unknown term.
    """
    import numpy as np
    from scipy.optimize import least_squares

    bad = [t for t in terms if t not in BOUNDS]
    if bad:
        raise InputError(f"cannot fit {', '.join(bad)} (fittable: {', '.join(BOUNDS)})")
    if len(rows) < len(terms):
        raise InputError(f"{len(rows)} measurement(s) cannot fit {len(terms)} term(s): give at least one per term")
    base = engine.time_on(hardware) if hardware else engine.time
    lo = np.array([BOUNDS[t][0] for t in terms])
    hi = np.array([BOUNDS[t][1] for t in terms])
    scale = np.maximum(hi - lo, 1e-12)
    x0 = np.clip(np.array([float(getattr(base, t)) for t in terms]), lo, hi)
    measured = np.array([r.row.measured for r in rows])

    def profile(x: "np.ndarray") -> "EngineProfile":
        return with_time_terms(engine, {t: float(v) for t, v in zip(terms, x)}, hardware)

    u0 = (x0 - lo) / scale

    def fit_residuals(u: "np.ndarray") -> "np.ndarray":
        eng = profile(lo + u * scale)
        pred = np.array([_evaluate(r, eng) for r in rows])
        return np.log(np.maximum(pred, 1e-12) / measured)

    def residuals(u: "np.ndarray") -> "np.ndarray":
        return np.concatenate([fit_residuals(u), prior_weight * (u - u0)])

    before = fit_residuals(u0)
    sol = least_squares(residuals, u0, bounds=(0.0, 1.0), loss="soft_l1", f_scale=0.2, max_nfev=max_evaluations,
                        diff_step=1e-3)
    x = lo + sol.x * scale
    fitted = profile(x)
    ids = [r.row.id for r in rows]
    fitted_on = dict(fitted.fitted_on)
    for t in terms:
        fitted_on[f"hardware.{hardware}.{t}" if hardware else f"time.{t}"] = ids
    fitted = fitted.model_copy(update={"fitted_on": fitted_on})
    return FitResult(fitted, {t: float(v) for t, v in zip(terms, x)}, before.tolist(), fit_residuals(sol.x).tolist(), ids)
