"""Fixed-size histograms of the counted records: the per-record row layout, log-linear bins, percentiles.

Memory stays flat: counted records are rows of integers, folded every :data:`BATCH_ROWS` rows into
exact sums, maxima and histograms that are exact below 2,048 and have a relative bin width of
2^-10 above.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from capplan.ledger import COUNTERS

if TYPE_CHECKING:
    import numpy as np

SUB_BINS = 1024
"""Sub-bins per power of two: relative bin width 2^-10."""
_MAX_EXPONENT = 30  # values up to 2^41 are binned; larger ones land in the last bin
N_BINS = SUB_BINS * (_MAX_EXPONENT + 2)
"""Bins per histogram."""

BATCH_ROWS = 16384
"""Counted records held as rows before they are folded into the histograms [records]."""

# Row of one counted record (a JSON-free internal layout): the counters that cannot be derived from
# others, then per-record facts. scored = scorers x recorded x kept, record length = recorded
# total and response length = recorded action + tool are derived when a batch is folded in.
# Columns: recorded (prompt, action, tool), sampled (3), prefill_forwarded (3), cache_hit (3),
# decode_forwarded (action), trained (3), invocations, tool calls, flags, tool wait [ms].
ROW_ACTION, ROW_TOOL = 1, 2
ROW_DECODE, ROW_TRAINED_PROMPT, ROW_TRAINED_TOOL = 12, 13, 15
ROW_INVOCATIONS, ROW_TOOL_CALLS, ROW_FLAGS, ROW_WAIT_MS = 16, 17, 18, 19
FLAG_TRUNCATED, FLAG_KEPT, FLAG_CACHE_LOGGED = 1, 2, 4
"""Bits of a row's flags: stopped by the length limit, kept for training, logs cache hits."""

# Histogram series: 7 counters x 3 classes, the 7 counter totals, response length, tool wait [ms].
_N_CLASS_SERIES = len(COUNTERS) * 3
SERIES_TOTALS = _N_CLASS_SERIES
"""First of the counter-total series (the recorded total, i.e. the record length, comes first)."""
SERIES_RESPONSE_LENGTH = _N_CLASS_SERIES + 7
SERIES_WAIT_MS = _N_CLASS_SERIES + 8
N_SERIES = _N_CLASS_SERIES + 9


def bin_index(values: "np.ndarray", out: "np.ndarray | None" = None) -> "np.ndarray":
    """Log-linear histogram bin of non-negative integers: exact below ``2 * SUB_BINS``.

    ``bin = SUB_BINS * e + (v >> e)`` with ``e = max(bit_length(v) - 11, 0)``, so each bin above
    2,048 is ``2^e`` wide and its values differ by less than ``2^-10`` relative. ``out`` (which
    may be ``values`` itself) receives the bins.
    """
    import numpy as np

    if out is None:
        out = values.copy()
    elif out is not values:
        np.copyto(out, values)
    big = values >= 2 * SUB_BINS
    if big.any():
        big_values = values[big]
        exponent = np.minimum(np.frexp(big_values.astype(np.float64))[1] - 11, _MAX_EXPONENT)
        out[big] = np.minimum(SUB_BINS * exponent + (big_values >> exponent), N_BINS - 1)
    return out


def bin_value(bins: "np.ndarray") -> "np.ndarray":
    """Representative value of histogram bins: the value itself when exact, else the bin's middle."""
    import numpy as np

    bins = np.asarray(bins, dtype=np.int64)
    exponent = np.maximum(bins // SUB_BINS - 1, 0)
    mantissa = bins - SUB_BINS * exponent
    low = (mantissa << exponent).astype(np.float64)
    return low + ((1 << exponent) - 1) / 2.0


def percentiles(hist: "np.ndarray", qs: tuple[float, ...]) -> list[float]:
    """Percentiles of a binned sample, as ``numpy.percentile`` (linear) on the bins' values.

    Parameters
    ----------
    hist : numpy.ndarray
        Counts per bin (:func:`bin_index`).
    qs : tuple of float
        Percentiles [0-100].
    """
    import numpy as np

    n = int(hist.sum())
    if n == 0:
        return [0.0 for _ in qs]
    cumulative = np.cumsum(hist)
    out = []
    for q in qs:
        rank = (n - 1) * q / 100.0
        lo, hi = math.floor(rank), math.ceil(rank)
        bounds = np.searchsorted(cumulative, [lo, hi], side="right")
        values = bin_value(bounds)
        out.append(float(values[0] + (rank - lo) * (values[1] - values[0])))
    return out


class Accumulator:
    """Folds per-record rows into exact sums, maxima and fixed-size histograms, one batch at a time."""

    def __init__(self, scorers: int, batch: int = BATCH_ROWS) -> None:
        import numpy as np

        self.scorers = scorers
        self.batch = batch
        self.rows: list[tuple[int, ...]] = []
        self.counted = 0
        """Rows folded so far [records]."""
        self.sums = np.zeros(N_SERIES, dtype=np.int64)
        self.maxes = np.zeros(N_SERIES, dtype=np.int64)
        self.hist = np.zeros((N_SERIES, N_BINS), dtype=np.int64)
        self.flag_sums = {"truncated": 0, "kept": 0, "cache_logged": 0}
        self.invocations = 0
        self.tool_calls = 0
        self._series = np.zeros(0, dtype=np.int64)

    def used(self, series: int) -> "np.ndarray":
        """Series ``series``'s histogram up to the bin of its largest value (the bins past it are
        empty: percentiles need not sum them)."""
        import numpy as np

        top = int(bin_index(self.maxes[series:series + 1])[0])
        return self.hist[series, :top + 1]

    def flush(self) -> None:
        """Fold the rows held so far into the sums, maxima and histograms, and empty them in place."""
        import numpy as np

        if not self.rows:
            return
        rows = np.array(self.rows, dtype=np.int64)
        self.rows.clear()
        self.fold(rows)

    def fold(self, rows: "np.ndarray") -> None:
        """Fold an (n, 20) array of rows into the sums, maxima and histograms (faster when the
        array is F-ordered, each column contiguous, as the batch checker makes it)."""
        import numpy as np

        count = rows.shape[0]
        if not count:
            return
        self.counted += count
        by_column = rows.T  # (20, n): each counter's values together (contiguous when the rows are F-ordered)
        flags = by_column[ROW_FLAGS]
        kept = (flags & FLAG_KEPT) != 0
        self.flag_sums["truncated"] += int(np.count_nonzero(flags & FLAG_TRUNCATED))
        self.flag_sums["kept"] += int(np.count_nonzero(kept))
        self.flag_sums["cache_logged"] += int(np.count_nonzero(flags & FLAG_CACHE_LOGGED))
        self.invocations += int(by_column[ROW_INVOCATIONS].sum())
        self.tool_calls += int(by_column[ROW_TOOL_CALLS].sum())
        # the series in a buffer kept from batch to batch (a fresh one costs page faults each batch)
        if self._series.size < N_SERIES * count:
            self._series = np.empty(N_SERIES * (count + count // 4), dtype=np.int64)
        series = self._series[:N_SERIES * count].reshape(N_SERIES, count)
        series[0:12] = by_column[0:12]  # recorded, sampled, prefill_forwarded, cache_hit
        series[12] = 0
        series[13] = by_column[ROW_DECODE]  # decode_forwarded: action positions only
        series[14] = 0
        series[15:18] = by_column[ROW_TRAINED_PROMPT:ROW_TRAINED_TOOL + 1]
        np.multiply(by_column[0:3], self.scorers * kept, out=series[18:21])
        series[SERIES_TOTALS:SERIES_TOTALS + 7] = (
            series[0:_N_CLASS_SERIES:3] + series[1:_N_CLASS_SERIES:3] + series[2:_N_CLASS_SERIES:3]
        )
        series[SERIES_RESPONSE_LENGTH] = by_column[ROW_ACTION] + by_column[ROW_TOOL]
        series[SERIES_WAIT_MS] = by_column[ROW_WAIT_MS]
        self.sums += series.sum(1)
        top = series.max(1)
        np.maximum(self.maxes, top, out=self.maxes)
        # a series all zero in this batch counts in its first bin; the others are binned with one
        # bincount, each given the bins up to its largest only (bins grow with values, so that of
        # its largest value): series k counts into [start[k], start[k] + tops[k]), then lands on
        # its row of the histograms. Values below 2 * SUB_BINS are their own bins.
        used = np.flatnonzero(top > 0)
        self.hist[top == 0, 0] += count
        if not used.size:
            return
        binned = series if used.size == N_SERIES else series[used]
        for k in np.flatnonzero(top[used] >= 2 * SUB_BINS).tolist():
            bin_index(binned[k], out=binned[k])
        tops = bin_index(top[used]) + 1
        start = np.zeros(used.size + 1, dtype=np.int64)
        np.cumsum(tops, out=start[1:])
        binned += start[:-1, None]
        counts = np.bincount(binned.ravel(), minlength=int(start[-1]))
        rows_start = used * N_BINS
        self.hist.ravel()[np.arange(int(start[-1])) + np.repeat(rows_start - start[:-1], tops)] += counts
