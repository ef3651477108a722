"""Family metrics against hand-computed values; constant or NaN estimators score NaN."""

from __future__ import annotations

import math

import numpy as np
import pytest

from adwm.evaluation.metrics import family_metrics, kendall, nrmse, regret_at_1, spearman


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
