"""Ranking and error metrics of estimates J_hat against true values J over a policy family.

A constant or non-finite estimator scores NaN (a failure), never 0: rank
correlations are undefined without variation, and a NaN estimate must not pass
as a neutral one.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from adwm.evaluation.bootstrap import mean_interval


def _valid(j_true: np.ndarray, j_hat: np.ndarray) -> bool:
    return bool(np.all(np.isfinite(j_hat)) and np.ptp(j_hat) > 0 and np.ptp(j_true) > 0 and len(j_true) >= 2)


def spearman(j_true, j_hat) -> float:
    """Spearman rho with average ranks for ties."""
    t, h = np.asarray(j_true, float), np.asarray(j_hat, float)
    return float(stats.spearmanr(t, h).statistic) if _valid(t, h) else float("nan")


def kendall(j_true, j_hat) -> float:
    """Kendall tau-b."""
    t, h = np.asarray(j_true, float), np.asarray(j_hat, float)
    return float(stats.kendalltau(t, h).statistic) if _valid(t, h) else float("nan")


def regret_at_1(j_true, j_hat) -> float:
    """True value lost by deploying the estimator's top policy instead of the best one, over the true
    value range (0 = it picked the best); ties in the estimate count as their mean true value."""
    t, h = np.asarray(j_true, float), np.asarray(j_hat, float)
    if not _valid(t, h):
        return float("nan")
    picked = t[h == h.max()].mean()
    return float((t.max() - picked) / np.ptp(t))


def regret_at_k(j_true, j_hat, k: int) -> float:
    """True value lost by the best of the estimator's top k policies (all policies tied with the k-th
    estimate count as picked), over the true value range; regret@1 when ties do not matter."""
    t, h = np.asarray(j_true, float), np.asarray(j_hat, float)
    if not _valid(t, h):
        return float("nan")
    if k < 1:
        raise ValueError(f"regret@k: k must be >= 1, got {k}")
    kth = np.sort(h)[::-1][min(k, len(h)) - 1]
    return float((t.max() - t[h >= kth].max()) / np.ptp(t))


def relative_error(j_true, j_hat) -> float:
    """Mean |J_hat - J| / |J| over the policies with J != 0."""
    t, h = np.asarray(j_true, float), np.asarray(j_hat, float)
    keep = t != 0
    if not _valid(t, h) or not keep.any():
        return float("nan")
    return float(np.mean(np.abs(h[keep] - t[keep]) / np.abs(t[keep])))


def nrmse(j_true, j_hat) -> float:
    """RMSE of J_hat against J divided by the true value range."""
    t, h = np.asarray(j_true, float), np.asarray(j_hat, float)
    if not _valid(t, h):  # a constant estimator is a failure on every metric
        return float("nan")
    return float(np.sqrt(np.mean((h - t) ** 2)) / np.ptp(t))


def family_metrics(j_true, j_hat) -> dict[str, float]:
    return {
        "spearman": spearman(j_true, j_hat),
        "kendall": kendall(j_true, j_hat),
        "regret_at_1": regret_at_1(j_true, j_hat),
        "nrmse": nrmse(j_true, j_hat),
        "regret_at_3": regret_at_k(j_true, j_hat, 3),
        "relative_error": relative_error(j_true, j_hat),
    }


def mean_ci(values, n_boot: int = 2000, level: float = 0.95, seed: int = 0, unit: str = "seed") -> dict:
    """Mean of a metric over runs with a percentile bootstrap CI (the resampling unit is one run, named by
    `unit`). NaN values are failures: they are counted, and the mean and CI use the finite values."""
    v = np.asarray(values, float)
    ok = v[np.isfinite(v)]
    out = {
        "mean": float("nan"),
        "low": float("nan"),
        "high": float("nan"),
        "n": len(ok),
        "failures": int(len(v) - len(ok)),
    }
    out |= {"n_boot": n_boot, "unit": unit}
    if len(ok) == 0:
        return out
    out["mean"] = float(ok.mean())
    out["low"], out["high"] = mean_interval(ok, n_boot, level, seed)
    return out
