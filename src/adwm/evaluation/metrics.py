"""Ranking and error metrics of estimates J_hat against true values J over a policy family.

A constant or non-finite estimator scores NaN (a failure), never 0: rank
correlations are undefined without variation, and a NaN estimate must not pass
as a neutral one.
"""

from __future__ import annotations

import numpy as np
from scipy import stats


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


def nrmse(j_true, j_hat) -> float:
    """RMSE of J_hat against J divided by the true value range."""
    t, h = np.asarray(j_true, float), np.asarray(j_hat, float)
    if not _valid(t, h):  # DESIGN section 4: a constant estimator is a failure on every metric
        return float("nan")
    return float(np.sqrt(np.mean((h - t) ** 2)) / np.ptp(t))


def family_metrics(j_true, j_hat) -> dict[str, float]:
    return {
        "spearman": spearman(j_true, j_hat),
        "kendall": kendall(j_true, j_hat),
        "regret_at_1": regret_at_1(j_true, j_hat),
        "nrmse": nrmse(j_true, j_hat),
    }
