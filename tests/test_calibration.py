"""Behaviour calibration: logged values, the fitted map against closed forms, its interval, and named errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

from adwm.config import load_config
from adwm.data.schema import Episode, StepRecord
from adwm.policies.config import PolicyConfig
from adwm.simulation.calibration import check_calibration, fit_calibration, logged_values
from adwm.stages.evaluate import behaviour_policies


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


def agent(name: str, model: str = "", eps: float = 0.0, kind: str = "llm") -> PolicyConfig:
    return PolicyConfig(name=name, kind=kind, model=model, eps=eps)


# three behaviour agents on two checkpoints, simulated with 95% intervals of half-width 0.02
BEHAVIOUR = [agent("p", "ckpt/a"), agent("q", "ckpt/a", eps=0.3), agent("r", "ckpt/b")]
SIM = {n: {"J_hat_sim": j, "ci_sim": [j - 0.02, j + 0.02]} for n, j in [("p", 0.20), ("q", 0.30), ("r", 0.40)]}
LOGGED = {"p": {"J": 0.15, "se": 0.01}, "q": {"J": 0.32, "se": 0.01}, "r": {"J": 0.49, "se": 0.01}}
GAPS = {"p": -0.05, "q": 0.02, "r": 0.09}
VAR = 0.01**2 + (0.02 / norm.ppf(0.975)) ** 2  # each gap's: logged se^2 + simulated se^2


def test_backbone_calibration_uses_the_gap_of_the_behaviour_agents_on_the_same_checkpoint():
    cal = fit_calibration("backbone", BEHAVIOUR, SIM, LOGGED, 0.95)
    mean_all = sum(GAPS.values()) / 3
    assert cal.offset(agent("e", "ckpt/a")) == pytest.approx((GAPS["p"] + GAPS["q"]) / 2)
    assert cal.offset(agent("e", "ckpt/b")) == pytest.approx(GAPS["r"])
    # the uniform share of an eps-greedy policy takes the mean gap of all behaviour agents
    assert cal.offset(agent("e", "ckpt/b", eps=0.25)) == pytest.approx(0.75 * GAPS["r"] + 0.25 * mean_all)
    assert cal.offset(agent("e", "ckpt/b", eps=1.0)) == pytest.approx(mean_all)
    # a checkpoint no behaviour agent runs, or no model at all: the mean gap
    assert cal.offset(agent("e", "ckpt/c")) == pytest.approx(mean_all)
    assert cal.offset(agent("e", kind="uniform")) == pytest.approx(mean_all)
    # the offset's standard error: sqrt(sum_i w_i^2 var_i)
    assert cal.se(agent("e", "ckpt/a")) == pytest.approx(math.sqrt(2 * 0.25 * VAR))
    assert cal.se(agent("e", "ckpt/c")) == pytest.approx(math.sqrt(3 * VAR / 9))


def test_model_share_calibration_puts_each_gap_down_to_the_agents_model_share():
    cal = fit_calibration("model_share", BEHAVIOUR, SIM, LOGGED, 0.95)
    # ckpt/a: gap_p = 1.0 g, gap_q = 0.7 g -> least squares g = (-0.05 + 0.7 * 0.02) / (1 + 0.49)
    g_a = -0.036 / 1.49
    assert cal.offset(agent("e", "ckpt/a")) == pytest.approx(g_a)
    assert cal.offset(agent("e", "ckpt/a", eps=0.5)) == pytest.approx(0.5 * g_a)
    # the uniform share reads nothing: uncalibrated
    assert cal.offset(agent("e", "ckpt/b", eps=0.25)) == pytest.approx(0.75 * 0.09)
    assert cal.offset(agent("e", "ckpt/b", eps=1.0)) == 0.0
    assert cal.offset(agent("e", kind="uniform")) == 0.0
    # a checkpoint no behaviour agent runs: the mean of gap / model share
    assert cal.offset(agent("e", "ckpt/c")) == pytest.approx((-0.05 + 0.02 / 0.7 + 0.09) / 3)
    assert cal.se(agent("e", "ckpt/a")) == pytest.approx(math.sqrt(VAR / 1.49))
    # an all-uniform behaviour agent carries no model share and no weight
    uniform_b = [*BEHAVIOUR, agent("u", "ckpt/a", eps=1.0)]
    sim = {**SIM, "u": {"J_hat_sim": 0.1, "ci_sim": [0.08, 0.12]}}
    cal = fit_calibration("model_share", uniform_b, sim, {**LOGGED, "u": {"J": 0.5, "se": 0.01}}, 0.95)
    assert cal.offset(agent("e", "ckpt/a")) == pytest.approx(g_a)


def test_shift_adds_the_mean_gap_to_every_policy_and_the_interval_widens():
    cal = fit_calibration("shift", BEHAVIOUR, SIM, LOGGED, 0.95)
    mean_all = sum(GAPS.values()) / 3
    for policy in (agent("e", "ckpt/a"), agent("e", "ckpt/b", eps=0.5), agent("e", kind="uniform")):
        assert cal.offset(policy) == pytest.approx(mean_all)
    lo, hi = cal.interval(agent("e", "ckpt/a"), [0.25, 0.36], 0.95)
    extra = norm.ppf(0.975) * math.sqrt(VAR / 3)
    centre = 0.305 + mean_all
    assert lo == pytest.approx(centre - math.hypot(0.055, extra)) and hi == pytest.approx(
        centre + math.hypot(0.055, extra)
    )
    assert cal.to_dict()["gaps"]["r"]["gap"] == pytest.approx(GAPS["r"])


def test_none_leaves_values_and_intervals_alone():
    cal = fit_calibration("none", [], {}, {}, 0.95)
    policy = agent("e", "ckpt/a")
    assert cal.offset(policy) == 0.0 and cal.interval(policy, [0.25, 0.36], 0.95) == pytest.approx([0.25, 0.36])


def test_bad_calibration_settings_are_named():
    expected = r"evaluate.calibration: expected one of \['none', 'shift', 'backbone', 'model_share'\]"
    with pytest.raises(ValueError, match=expected):
        check_calibration("affine")
    with pytest.raises(ValueError, match="collect.behaviour lists no behaviour agent"):
        fit_calibration("backbone", [], {}, {}, 0.95)


def test_a_behaviour_agent_missing_from_the_log_is_named():
    behaviour = "collect.behaviour=[{policy: {name: u, kind: uniform}}, {policy: {name: v, kind: uniform}}]"
    logged = logged_values([episode("u", [1.0])], 0.95)
    with pytest.raises(ValueError, match=r"collect.behaviour\[1\].policy.name: no episodes of 'v' in the log 'L'"):
        behaviour_policies(load_config([behaviour]), logged, "L")
    found = behaviour_policies(load_config(["collect.behaviour=[{policy: {name: u}}]"]), logged, "L")
    assert [p.name for p in found] == ["u"]
