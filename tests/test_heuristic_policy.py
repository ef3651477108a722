"""The scripted heuristic player (`kind: heuristic`): rule scores against hand-computed values, its exact
log-probabilities in a collected log, and named errors where it cannot go."""

from __future__ import annotations

import numpy as np
import pytest

from adwm.config import ConfigError, load_config
from adwm.data.schema import read_episodes
from adwm.envs import EnvConfig
from adwm.evaluation.family import family_policies
from adwm.policies.base import AgentState
from adwm.policies.config import PolicyConfig
from adwm.policies.factory import build_policy
from adwm.policies.heuristic import HeuristicPolicy
from adwm.stages.collect import collect
from adwm.stages.config import BehaviourEntry, CollectConfig

STATE = AgentState(
    "Put the apple in the fridge.",
    "You are in the kitchen.",
    [("You are in the hall.", "go to the kitchen"), ("You are in the kitchen.", "open the fridge")],
    ["take the apple", "look", "open the fridge", "go to the hallway", "put the apple in the fridge"],
)


def test_scores_are_relevance_minus_repeats_and_looking():
    # task words {put, apple, fridge}: take the apple 1; look -0.5; open the fridge 1 - 1 (taken);
    # go to the hallway 0; put the apple in the fridge 3
    policy = HeuristicPolicy("h", temperature=1.0)
    np.testing.assert_allclose(policy.scores(STATE), [1.0, -0.5, 0.0, 0.0, 3.0])
    expected = np.array([1.0, -0.5, 0.0, 0.0, 3.0])
    expected = expected - np.log(np.exp(expected).sum())
    np.testing.assert_allclose(policy.log_distributions([STATE])[0], expected)
    cold = HeuristicPolicy("h", temperature=0.0).log_distributions([STATE])[0]  # greedy, no uniform share
    assert cold[4] == 0.0 and np.all(np.isneginf(cold[:4]))
    warm = build_policy(PolicyConfig(name="h", kind="heuristic", temperature=2.0))
    assert warm.log_probs([STATE], ["put the apple in the fridge"])[0] == pytest.approx(
        3 / 2 - np.log(np.exp(np.array([1.0, -0.5, 0.0, 0.0, 3.0]) / 2).sum())
    )


def test_a_heuristic_log_carries_its_exact_log_probabilities(tmp_path):
    player = PolicyConfig(name="scripted", kind="heuristic", temperature=0.5)
    cfg = CollectConfig(n_episodes=6, n_envs=3, out=str(tmp_path / "log.jsonl"), behaviour=[BehaviourEntry(player)])
    episodes = read_episodes(collect(cfg, EnvConfig(max_steps=10), seed=0, progress=False), privileged=True)
    policy = HeuristicPolicy("scripted", 0.5)
    assert len(episodes) == 6
    for ep in episodes:
        history = []
        for step in ep.steps:
            state = AgentState(ep.task, step.observation, list(history), step.admissible)
            assert step.behavior_logprob == pytest.approx(policy.log_probs([state], [step.action])[0])
            history.append((step.observation, step.action))


def test_a_heuristic_player_is_refused_where_it_cannot_run():
    with pytest.raises(ValueError, match="family: policy 'h' is a heuristic player"):
        family_policies(PolicyConfig(name="p"), load_config(["family.off_path=[{name: h, kind: heuristic}]"]).family)
    with pytest.raises(ConfigError, match="kind: expected one of"):
        load_config(["policy.kind=scripted"])


def test_calibration_refuses_a_heuristic_behaviour_agent_by_name():
    from adwm.stages.evaluate import behaviour_policies

    cfg = load_config(["collect.behaviour=[{policy: {name: scripted, kind: heuristic, temperature: 0.5}}]"])
    with pytest.raises(ValueError, match=r"collect.behaviour\[0\].policy.kind: 'scripted' is a heuristic player"):
        behaviour_policies(cfg, {"scripted": {"J": 0.1}}, "log.jsonl")


@pytest.mark.ci
@pytest.mark.slow  # ~80 s: a smoke main job; in the CI selection
def test_the_main_job_runs_on_a_log_written_by_heuristic_players(tmp_path):
    """Behaviour of another family end to end: the evaluated LLM agents are estimated from a log that only
    the scripted players wrote (calibration off), every baseline with exact and estimated propensities,
    and the summary states the log's overlap with each evaluated policy."""
    import json

    from adwm.cli import main

    args = ["quickstart", "experiment=smoke", "collect=heuristic_players", "evaluate.calibration=none"]
    assert main([*args, f"run.root={tmp_path}"]) == 0
    episodes = read_episodes(tmp_path / "collect" / "episodes.jsonl", privileged=True)
    assert {e.policy for e in episodes} <= {"heuristic_t0.3", "heuristic_t1"}
    summary = json.loads((tmp_path / "quickstart" / "summary.json").read_text())
    for p in summary["policies"]:
        assert np.isfinite(p["estimates"]["adwm"]) and np.isfinite(p["estimates"]["wis_est"])
        assert 0 < p["ess"]["is"] <= p["n_episodes"] == len(episodes)
