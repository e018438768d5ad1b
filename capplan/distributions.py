"""Token-count and wait-time distributions used by workload files.

A workload field that takes a count or a wait accepts either a plain number (fixed) or a
mapping with a ``dist`` key::

    action_tokens: 4                                   # fixed
    action_tokens: {dist: uniform, low: 100, high: 400}
    action_tokens: {dist: lognormal, mean: 14628, p95: 30000, max: 32768}
    action_tokens: {dist: lognormal, mean: 900, sigma: 0.8}
    action_tokens: {dist: empirical, samples: [120, 340, 95, 1200]}

Sampling is vectorised and seeded (``numpy.random.Generator``); integer fields are rounded to
the nearest integer and clipped to ``[min, max]`` where given. ``min`` must be <= ``max``, and
the clip bounds must hold the distribution's centre (a fixed value, a lognormal's or empirical
mean) or overlap a uniform's ``[low, high]``: otherwise nearly every sample would be clipped.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

if TYPE_CHECKING:  # numpy is imported lazily so that ``capplan --help`` stays fast
    import numpy as np

#: z-score of the 95th percentile of a standard normal distribution.
Z95 = 1.6448536269514722

MAX_VALUE = 10_000_000.0
"""Largest value a count or wait may take [tokens or seconds]: 10M tokens is the largest context
capplan accepts, 10M seconds is 116 days; anything above is a typo."""
MAX_SIGMA = 5.0
"""Largest log-space sigma of a lognormal [dimensionless]: at 5 the mean sits above the 99.99th
percentile of the median's scale, far past any measured token-length spread."""
MAX_EMPIRICAL_SAMPLES = 1_000_000
"""Most observed values an empirical distribution may list [values]."""


class _Dist(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    min: float | None = Field(default=None, ge=0, le=MAX_VALUE)
    """Lower clip applied to every sample (optional)."""
    max: float | None = Field(default=None, ge=0, le=MAX_VALUE)
    """Upper clip applied to every sample (optional), e.g. a generation-length limit."""

    @model_validator(mode="after")
    def _bounds(self) -> "_Dist":
        lo, hi = self.min, self.max
        if lo is not None and hi is not None and lo > hi:
            raise ValueError(f"min ({lo:g}) must be <= max ({hi:g})")
        if lo is not None or hi is not None:
            self._check_within(-math.inf if lo is None else lo, math.inf if hi is None else hi)
        return self

    def _check_within(self, lo: float, hi: float) -> None:
        """Refuse a distribution whose clip bounds ``[lo, hi]`` contradict its own parameters."""

    @staticmethod
    def _span(lo: float, hi: float) -> str:
        if math.isinf(lo):
            return f"<= max ({hi:g})"
        if math.isinf(hi):
            return f">= min ({lo:g})"
        return f"within [min, max] = [{lo:g}, {hi:g}]"

    @property
    def is_fixed(self) -> bool:
        return False

    def _clip(self, x: "np.ndarray") -> "np.ndarray":
        import numpy as np

        if self.min is not None or self.max is not None:
            x = np.clip(x, self.min if self.min is not None else -np.inf, self.max if self.max is not None else np.inf)
        return x

    def upper_bound(self) -> float:
        """Largest value a sample can take (``inf`` when unbounded)."""
        return self.max if self.max is not None else math.inf


class Fixed(_Dist):
    """Always the same value."""

    dist: Literal["fixed"] = "fixed"
    """Distribution kind (the tag that selects this form)."""
    value: float = Field(ge=0, le=MAX_VALUE)
    """The value [tokens or seconds]."""

    def _check_within(self, lo: float, hi: float) -> None:
        if not lo <= self.value <= hi:
            raise ValueError(f"fixed value ({self.value:g}) must be {self._span(lo, hi)}")

    @property
    def is_fixed(self) -> bool:
        return True

    def mean(self) -> float:
        return self.value

    def upper_bound(self) -> float:
        return self.value

    def sample(self, rng: "np.random.Generator", n: int) -> "np.ndarray":
        import numpy as np

        return np.full(n, self.value, dtype=float)


class Uniform(_Dist):
    """Uniform on ``[low, high]`` (integers are rounded after sampling)."""

    dist: Literal["uniform"] = "uniform"
    """Distribution kind (the tag that selects this form)."""
    low: float = Field(ge=0, le=MAX_VALUE)
    """Lower end [tokens or seconds]."""
    high: float = Field(ge=0, le=MAX_VALUE)
    """Upper end [tokens or seconds]."""

    @model_validator(mode="after")
    def _order(self) -> "Uniform":
        if self.high < self.low:
            raise ValueError(f"uniform high ({self.high:g}) must be >= low ({self.low:g})")
        return self

    def _check_within(self, lo: float, hi: float) -> None:
        if self.high < lo or self.low > hi:
            raise ValueError(
                f"uniform [low, high] = [{self.low:g}, {self.high:g}] must overlap min/max (samples {self._span(lo, hi)}); "
                "outside it every sample is clipped to one value"
            )

    def mean(self) -> float:
        return (self.low + self.high) / 2

    def upper_bound(self) -> float:
        return min(self.high, self.max) if self.max is not None else self.high

    def sample(self, rng: "np.random.Generator", n: int) -> "np.ndarray":
        return self._clip(rng.uniform(self.low, self.high, n))


class Lognormal(_Dist):
    """Lognormal given its mean and either its 95th percentile or the log-space sigma.

    With mean ``m`` and p95 ``q``: ``ln q = mu + 1.645 sigma`` and ``ln m = mu + sigma^2 / 2``,
    so ``sigma^2 / 2 - 1.645 sigma + ln(q / m) = 0``; the smaller root is taken (it exists when
    ``ln(q/m) <= 1.645^2 / 2``, i.e. ``q <= 3.87 m``). The mean and p95 describe the
    distribution *before* clipping to ``max``.
    """

    dist: Literal["lognormal"] = "lognormal"
    """Distribution kind (the tag that selects this form)."""
    mean_: float = Field(alias="mean", gt=0, le=MAX_VALUE)
    """Mean of the distribution before clipping [tokens or seconds]."""
    p95: float | None = Field(default=None, gt=0, le=MAX_VALUE)
    """95th percentile before clipping [tokens or seconds]; give this or ``sigma``."""
    sigma: float | None = Field(default=None, gt=0, le=MAX_SIGMA)
    """Standard deviation of the log [dimensionless]; give this or ``p95``."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, allow_inf_nan=False)

    @model_validator(mode="after")
    def _shape(self) -> "Lognormal":
        if (self.p95 is None) == (self.sigma is None):
            raise ValueError("lognormal needs exactly one of p95 or sigma besides mean")
        if self.p95 is not None:
            if self.p95 < self.mean_:
                raise ValueError(f"lognormal p95 ({self.p95:g}) must be >= mean ({self.mean_:g})")
            if math.log(self.p95 / self.mean_) > Z95**2 / 2:
                raise ValueError(
                    f"lognormal p95 ({self.p95:g}) is more than {math.exp(Z95**2 / 2):.2f} x the mean "
                    f"({self.mean_:g}): no lognormal has that shape; give sigma instead"
                )
        return self

    def _check_within(self, lo: float, hi: float) -> None:
        if not lo <= self.mean_ <= hi:
            raise ValueError(f"lognormal mean ({self.mean_:g}) must be {self._span(lo, hi)}")

    def log_params(self) -> tuple[float, float]:
        """Return ``(mu, sigma)`` of the underlying normal."""
        if self.sigma is not None:
            s = self.sigma
        else:
            assert self.p95 is not None
            c = math.log(self.p95 / self.mean_)
            s = Z95 - math.sqrt(max(Z95**2 - 2 * c, 0.0))
        return math.log(self.mean_) - s * s / 2, s

    def mean(self) -> float:
        return self.mean_

    def sample(self, rng: "np.random.Generator", n: int) -> "np.ndarray":
        mu, s = self.log_params()
        return self._clip(rng.lognormal(mu, s, n))


def clipped_lognormal_mean(mean: float, sigma: float, cap: float) -> float:
    """Mean of ``min(X, cap)`` for a lognormal ``X`` of mean ``mean`` and log-space ``sigma``.

    ``E[min(X, c)] = m Phi((ln c - mu - s^2) / s) + c (1 - Phi((ln c - mu) / s))`` with
    ``mu = ln m - s^2 / 2``.

    >>> round(clipped_lognormal_mean(2999, 0.6, 3896))  # NeMo RL's Qwen3-30B rows: 15% below the mean
    2561
    """
    mu = math.log(mean) - sigma * sigma / 2
    z = (math.log(cap) - mu) / sigma
    return mean * _phi(z - sigma) + cap * (1 - _phi(z))


def lognormal_mean_before_clip(clipped_mean: float, sigma: float, cap: float) -> float:
    """The mean before clipping of a lognormal with log-space ``sigma`` whose samples, clipped at
    ``cap``, average ``clipped_mean`` (a published mean length is measured after the engine's
    generation limit cut the long ones); the inverse of :func:`clipped_lognormal_mean`.

    Raises ``ValueError`` unless ``0 < clipped_mean < cap``.

    >>> round(lognormal_mean_before_clip(2561, 0.6, 3896))
    2999
    """
    if not 0 < clipped_mean < cap:
        raise ValueError(f"a clipped mean ({clipped_mean:g}) must lie between 0 and the cap ({cap:g})")
    lo, hi = math.log(clipped_mean), math.log(clipped_mean) + 20 * sigma + 20
    for _ in range(200):  # bisection on the log of the mean: the clipped mean rises with it
        mid = (lo + hi) / 2
        if clipped_lognormal_mean(math.exp(mid), sigma, cap) < clipped_mean:
            lo = mid
        else:
            hi = mid
    return math.exp((lo + hi) / 2)


def _phi(z: float) -> float:
    """Standard normal cumulative distribution function."""
    return 0.5 * math.erfc(-z / math.sqrt(2))


class Empirical(_Dist):
    """Draw uniformly, with replacement, from a list of observed values."""

    dist: Literal["empirical"] = "empirical"
    """Distribution kind (the tag that selects this form)."""
    samples: list[float] = Field(min_length=1, max_length=MAX_EMPIRICAL_SAMPLES)
    """Observed values [tokens or seconds]; each must be >= 0."""

    @model_validator(mode="after")
    def _nonneg(self) -> "Empirical":
        bad = [v for v in self.samples if not 0 <= v <= MAX_VALUE]
        if bad:
            raise ValueError(f"empirical samples must be in [0, {MAX_VALUE:,.0f}], got {bad[0]:g}")
        return self

    def _check_within(self, lo: float, hi: float) -> None:
        mean = sum(self.samples) / len(self.samples)
        if not lo <= mean <= hi:
            raise ValueError(f"empirical samples' mean ({mean:g}) must be {self._span(lo, hi)}")

    def mean(self) -> float:
        return sum(self.samples) / len(self.samples)

    def upper_bound(self) -> float:
        top = max(self.samples)
        return min(top, self.max) if self.max is not None else top

    def sample(self, rng: "np.random.Generator", n: int) -> "np.ndarray":
        import numpy as np

        return self._clip(rng.choice(np.asarray(self.samples, dtype=float), n))


def _coerce(value: Any) -> Any:
    """Accept a bare number as a fixed distribution."""
    if isinstance(value, bool):
        raise ValueError("expected a number or a distribution mapping, got a boolean")
    if isinstance(value, (int, float)):
        if not math.isfinite(value):
            raise ValueError(f"must be a finite number, got {value}")
        if value < 0:
            raise ValueError(f"must be >= 0, got {value:g}")
        if value > MAX_VALUE:
            raise ValueError(f"must be <= {MAX_VALUE:,.0f} (10M tokens or seconds), got {value:g}")
        return {"dist": "fixed", "value": value}
    if isinstance(value, dict) and "dist" not in value:
        raise ValueError(
            "a distribution mapping needs a 'dist' key (fixed, uniform, lognormal or empirical)"
        )
    return value


Distribution = Annotated[
    Union[Fixed, Uniform, Lognormal, Empirical],
    Field(discriminator="dist"),
    BeforeValidator(_coerce),
]
"""A count or wait: a plain number, or ``{dist: fixed|uniform|lognormal|empirical, ...}``."""
