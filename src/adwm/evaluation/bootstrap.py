"""The one bootstrap: resamples drawn as multinomial counts over the resampling units, and percentile
intervals. The counts form serves every caller: a mean is `counts @ values / n`, and the weighted
off-policy estimators read the counts as episode weights in log space (no resampled copies are made).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np


@lru_cache(maxsize=8)
def resample_counts(n: int, n_boot: int, seed: int) -> np.ndarray:
    """(n_boot, n) multinomial counts: how often each of n units appears in each resample. Read-only and
    kept: every estimator of every policy of a log draws the same resamples."""
    if n < 1 or n_boot < 1:
        raise ValueError(f"bootstrap: expected at least one unit and one resample, got n={n}, n_boot={n_boot}")
    counts = np.random.default_rng(seed).multinomial(n, np.full(n, 1.0 / n), size=n_boot)
    counts.flags.writeable = False
    return counts


def percentile_interval(values: np.ndarray, level: float) -> tuple[float, float, int]:
    """(low, high, number of undefined resamples) of the finite resampled `values` at `level`."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"bootstrap: the interval's level must lie in (0, 1), got {level}")
    ok = values[np.isfinite(values)]
    if len(ok) == 0:
        return float("nan"), float("nan"), len(values)
    lo, hi = np.quantile(ok, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi), int(len(values) - len(ok))


def mean_interval(values, n_boot: int, level: float, seed: int) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean of `values` (the resampling unit: one value)."""
    v = np.asarray(values, dtype=np.float64)
    means = resample_counts(len(v), n_boot, seed) @ v / len(v)
    means = np.clip(means, v.min(), v.max())  # a mean of resampled values lies within them (up to rounding)
    lo, hi, _ = percentile_interval(means, level)
    return lo, hi
