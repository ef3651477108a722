"""Family metrics against hand-computed values; constant or NaN estimators score NaN."""

from __future__ import annotations

import math

import numpy as np
import pytest

from adwm.evaluation.metrics import (
    family_metrics,
    kendall,
    mean_ci,
    nrmse,
    regret_at_1,
    regret_at_k,
    relative_error,
    spearman,
)


def test_reference_values():
    true, est = [1.0, 2.0, 3.0, 4.0], [1.0, 3.0, 2.0, 4.0]
    assert spearman(true, est) == pytest.approx(1 - 6 * 2 / (4 * 15))  # one swapped neighbour pair
    assert kendall(true, est) == pytest.approx((5 - 1) / 6)  # 5 concordant, 1 discordant pair
    assert regret_at_1([0.1, 0.5, 0.3], [0.2, 0.1, 0.9]) == pytest.approx((0.5 - 0.3) / 0.4)
    assert regret_at_1([0.1, 0.5, 0.3], [0.2, 0.9, 0.1]) == 0.0
    assert nrmse([0.0, 0.5, 1.0], [0.1, 0.5, 0.7]) == pytest.approx(math.sqrt((0.01 + 0.09) / 3) / 1.0)


def test_ties_use_average_ranks():
    # ranks of est: [1.5, 1.5, 3]; of true: [1, 2, 3] -> Pearson of the ranks
    r = np.corrcoef([1.5, 1.5, 3.0], [1.0, 2.0, 3.0])[0, 1]
    assert spearman([0.1, 0.2, 0.3], [5.0, 5.0, 7.0]) == pytest.approx(r)


@pytest.mark.parametrize("est", [[0.3, 0.3, 0.3], [0.1, float("nan"), 0.2]])
def test_constant_or_nan_estimator_is_a_failure_not_zero(est):
    out = family_metrics([0.1, 0.2, 0.3], est)
    assert all(math.isnan(v) for v in out.values())


def test_regret_at_k_and_relative_error():
    true, est = [0.1, 0.5, 0.3, 0.2], [0.9, 0.1, 0.8, 0.7]  # the estimator ranks the best policy last
    assert regret_at_k(true, est, 1) == pytest.approx((0.5 - 0.1) / 0.4)
    assert regret_at_k(true, est, 2) == pytest.approx((0.5 - 0.3) / 0.4)
    assert regret_at_k(true, est, 4) == 0.0
    assert regret_at_k(true, est, 1) == regret_at_1(true, est)
    assert regret_at_k([0.1, 0.5, 0.3], [0.9, 0.2, 0.2], 2) == 0.0  # ties with the 2nd estimate count as picked
    assert relative_error([0.5, 0.25, 0.0], [0.25, 0.5, 0.3]) == pytest.approx((0.5 + 1.0) / 2)  # J = 0 skipped


def test_mean_ci_over_seeds_counts_failures():
    out = mean_ci([0.8, 0.6, float("nan"), 0.7], n_boot=500, seed=0)
    assert out["mean"] == pytest.approx(0.7) and out["failures"] == 1 and out["n"] == 3 and out["unit"] == "seed"
    assert 0.6 <= out["low"] <= 0.7 <= out["high"] <= 0.8
    assert mean_ci([0.8, 0.6, 0.7], n_boot=500, seed=0) == mean_ci([0.8, 0.6, 0.7], n_boot=500, seed=0)
    assert math.isnan(mean_ci([float("nan")])["mean"])
