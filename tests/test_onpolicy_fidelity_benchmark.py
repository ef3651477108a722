"""benchmarks/onpolicy_fidelity.py on the smoke run: every policy's simulated actions replayed in the real
environment for two snapping rules, the figures in range, and the refusal it counts is the world's own."""

from __future__ import annotations

import numpy as np
import pytest
from omegaconf import OmegaConf

from adwm.config import load_config
from adwm.envs.registry import make_env
from adwm.runtime.atomic import read_json
from helpers import benchmark_module


@pytest.mark.slow  # seven policies simulated twice on the smoke run's world model
def test_simulated_actions_are_replayed_in_the_real_world_for_each_snapping_rule(smoke_run, one_thread):
    bench = benchmark_module("onpolicy_fidelity")
    cfg = load_config(["experiment=smoke", f"run.root={smoke_run}", "evaluate.calibration=none"])
    truth = read_json(smoke_run / "ground_truth" / "ground_truth.json")
    results = {rule: bench.measure(cfg, rule) for rule in ("none", "state")}
    for result in results.values():
        assert set(result["policies"]) == set(truth)
        for name, row in result["policies"].items():
            assert row["J"] == truth[name]["J"]
            assert 0 <= row["refused"] <= 1 and 0 <= row["state_acc@1"] <= 1  # every rollout takes a step
            assert all(0 <= row[f"state_acc@{k}"] <= 1 for k in (5, 10) if f"state_acc@{k}" in row)
            assert np.isfinite(row["J_hat_sim"]) and row["real_return"] >= 0  # builtin never pays less than 0
            # every rollout's first step starts in step with the real world (the same logged observation)
            assert row["steps_logged"] + row["steps_novel"] >= cfg.evaluate.simulate.n_rollouts
            assert all(0 <= row[f"kept_{kind}"] <= 1 for kind in ("logged", "novel") if row[f"steps_{kind}"])
        assert -1 <= result["spearman"] <= 1 and result["nrmse"] >= 0
    # the rule changes which states the rollouts read, so what their actions are worth in the real world
    rows = [(results["none"]["policies"][n], results["state"]["policies"][n]) for n in truth]
    assert any(a["refused"] != b["refused"] for a, b in rows)


def test_a_refused_action_is_what_the_real_builtin_world_says_it_is():
    """The refusal the benchmark counts is the environment's own flag: an action outside the admissible list."""
    env = make_env(OmegaConf.to_object(load_config([]).env))
    r = env.reset(0)
    assert env.step(r.admissible[0]).info["admissible_action"] is True
    assert env.step("take the unicorn").info["admissible_action"] is False
