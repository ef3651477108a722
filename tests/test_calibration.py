"""Behaviour calibration: logged values, the fitted map against closed forms, its interval, and named errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

from adwm.config import load_config
from adwm.data.schema import Episode, StepRecord
from adwm.evaluate import behaviour_policies
from adwm.evaluation.calibration import check_calibration, fit_calibration, logged_values


def episode(policy: str, rewards: list[float]) -> Episode:
    steps = [StepRecord("o", "a", r, k == len(rewards) - 1) for k, r in enumerate(rewards)]
    return Episode("builtin", 0, "task", policy, steps, "end")


def test_logged_values_are_each_policys_mean_discounted_return():
    eps = [episode("a", [0.0, 1.0]), episode("a", [1.0]), episode("b", [0.0, 0.0, 0.5])]
    values = logged_values(eps, 0.9)
    # a: returns 0.9 and 1.0; b: 0.5 * 0.81
    assert values["a"]["J"] == pytest.approx(0.95) and values["a"]["n"] == 2
    assert values["a"]["se"] == pytest.approx(np.std([0.9, 1.0], ddof=1) / math.sqrt(2))
    assert values["b"]["J"] == pytest.approx(0.405) and math.isnan(values["b"]["se"])


SIM = {  # simulated values of three behaviour agents, with 95% intervals of half-width 0.02
    "p": {"J_hat_sim": 0.20, "ci_sim": [0.18, 0.22]},
    "q": {"J_hat_sim": 0.30, "ci_sim": [0.28, 0.32]},
    "r": {"J_hat_sim": 0.40, "ci_sim": [0.38, 0.42]},
}
LOGGED = {"p": {"J": 0.15, "se": 0.01}, "q": {"J": 0.32, "se": 0.01}, "r": {"J": 0.49, "se": 0.01}}


def test_shift_adds_the_mean_gap_between_logged_and_simulated_values():
    cal = fit_calibration("shift", SIM, LOGGED, 0.95)
    gap = ((0.15 - 0.20) + (0.32 - 0.30) + (0.49 - 0.40)) / 3
    assert cal.a == pytest.approx(gap) and cal.b == 1.0
    assert cal(0.25) == pytest.approx(0.25 + gap)
    se_sim = 0.02 / norm.ppf(0.975)
    assert cal.se(0.25) == pytest.approx(math.sqrt(3 * (0.01**2 + se_sim**2)) / 3)


def test_affine_is_the_least_squares_line_and_its_interval_widens_away_from_the_data():
    cal = fit_calibration("affine", SIM, LOGGED, 0.95)
    x, y = np.array([0.2, 0.3, 0.4]), np.array([0.15, 0.32, 0.49])
    slope = ((x - x.mean()) * (y - y.mean())).sum() / ((x - x.mean()) ** 2).sum()
    assert cal.b == pytest.approx(slope) and cal.a == pytest.approx(y.mean() - slope * x.mean())
    assert cal.se(0.3) < cal.se(0.6)  # the fitted line is surest at the mean of the behaviour agents
    lo, hi = cal.interval(0.3, [0.28, 0.32], 0.95)
    assert lo < cal.b * 0.28 + cal.a and hi > cal.b * 0.32 + cal.a  # the mapped interval, widened


def test_none_leaves_values_and_intervals_alone():
    cal = fit_calibration("none", {}, {}, 0.95)
    assert cal(0.3) == 0.3 and cal.interval(0.3, [0.25, 0.36], 0.95) == pytest.approx([0.25, 0.36])


def test_bad_calibration_settings_are_named():
    with pytest.raises(ValueError, match=r"evaluate.calibration: expected one of \['none', 'shift', 'affine'\]"):
        check_calibration("linear")
    with pytest.raises(ValueError, match="evaluate.calibration=affine: needs two or more behaviour agents"):
        fit_calibration("affine", {"p": SIM["p"]}, LOGGED, 0.95)
    with pytest.raises(ValueError, match="collect.behaviour lists no behaviour agent"):
        fit_calibration("shift", {}, {}, 0.95)


def test_a_behaviour_agent_missing_from_the_log_is_named():
    cfg = load_config(["collect.behaviour=[{policy: {name: u, kind: uniform}}, {policy: {name: v, kind: uniform}}]"])
    logged = logged_values([episode("u", [1.0])], 0.95)
    with pytest.raises(ValueError, match=r"collect.behaviour\[1\].policy.name: no episodes of 'v' in the log 'L'"):
        behaviour_policies(cfg, logged, "L")
    assert [
        p.name for p in behaviour_policies(load_config(["collect.behaviour=[{policy: {name: u}}]"]), logged, "L")
    ] == ["u"]
