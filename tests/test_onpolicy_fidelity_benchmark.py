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
            # where the simulated value parts from what its actions are worth: the parts add up to the whole
            gaps = sum(row[f"gap_{where}"] for where in bench.GAP_KINDS)
            assert gaps == pytest.approx(row["J_hat_sim"] - row["real_return"], abs=1e-6)
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


def test_a_world_that_replays_its_own_log_is_in_step_with_the_real_one_and_pays_what_it_pays():
    """benchmarks/world_divergence.py: the log's own episodes replayed with their actions from their own
    starts are the logged successors every step, never leave the real state and pay exactly its rewards."""
    import random

    from adwm.data.schema import Episode, StepRecord
    from adwm.simulation.worlds import LoggedStart

    bench = benchmark_module("world_divergence")
    env, rng, log = make_env(OmegaConf.to_object(load_config([]).env)), random.Random(0), []
    for seed in range(5):
        r = env.reset(seed)
        obs, adm, steps, done = r.observation, r.admissible, [], False
        while not done:
            gold = env.gold_actions()
            action = gold[0] if gold and rng.random() < 0.7 else rng.choice(adm)
            st = env.step(action)
            steps.append(StepRecord(obs, action, st.reward, st.done, adm))
            obs, adm, done = st.observation, st.admissible, st.done
        log.append(Episode("builtin", seed, r.task, "player", steps, obs))
    world = bench._TracedAnalogy(log)
    shadowed = bench.Shadowed(
        world, lambda: make_env(OmegaConf.to_object(load_config([]).env)), bench._body(world.opening), 0.9
    )
    draws = np.random.default_rng(0)
    for ep in log:
        state = shadowed.start(LoggedStart(ep.task, ep.steps[0].observation, ep.steps[0].admissible, ep.seed))
        for step in ep.steps:
            state, _, _ = shadowed.step(state, step.action, draws)
    report = shadowed.report()
    assert set(report) == {"logged"} and report["logged"]["steps"] == sum(len(ep.steps) for ep in log)
    assert report["logged"]["in_step"] == report["logged"]["kept"] == report["logged"]["same_list"] == 1.0
    assert report["logged"]["refused"] == 0.0 and report["logged"]["paid_minus_real"] == pytest.approx(0.0)
    # per template: every step once, in step, paying what the real world paid; no list lacked or added anything
    by = shadowed.report_by_template()
    assert sum(t["steps"] for t in by["steps"].values()) == report["logged"]["steps"] and by["lists"] == {}
    assert all(k.startswith("logged | ") and k.endswith(" | in") for k in by["steps"])
    assert all(t["paid_minus_real"] == pytest.approx(0.0) for t in by["steps"].values())
