"""The estimated behaviour policy (ope/behaviour.py) and the `<name>_est` baselines: consistent on the
tabular MDP as the log grows, and a log with no behaviour probabilities through fit, evaluate and ope."""

from __future__ import annotations

import json

import numpy as np
import pytest

from adwm.ope import ImportanceSampling, OPEData
from adwm.ope.behaviour import _runs, fit_behaviour
from adwm.ope.features import StepFeatures
from adwm.policies.base import AgentState
from tabular_mdp import random_mdp, sample


def _tabular_states(mdp, log):
    """The logged steps as agent states of texts ('s0', 'a1', ...) with one-hot embeddings, so that the
    conditional logit is a table of per-(state, action) logits."""
    actions = [f"a{j}" for j in range(mdp.n_actions)]
    vocab = ["task", *(f"s{i}" for i in range(mdp.n_states)), *actions]

    def one_hot(texts):
        return np.eye(len(vocab))[[vocab.index(t) for t in texts]]

    ep, t = np.nonzero(log.mask)
    states = [AgentState("task", f"s{log.s[i, k]}", [("", "")] * int(k), list(actions)) for i, k in zip(ep, t)]
    taken = [f"a{log.a[i, k]}" for i, k in zip(ep, t)]
    return StepFeatures(states, taken, mdp.horizon, one_hot), taken, ep, t


def _estimated_is(mdp, log, pi_e, lp_b_hat):
    ep, t = np.nonzero(log.mask)
    lr = np.zeros(log.mask.shape)
    lr[ep, t] = np.log(pi_e[log.s[ep, t], log.a[ep, t]]) - lp_b_hat
    data = OPEData(np.where(log.mask, log.r, 0.0), log.mask, lr, mdp.gamma)
    return ImportanceSampling(per_decision=True).estimate(data)


def test_estimated_behaviour_converges_on_the_tabular_mdp_and_so_does_its_pdis():
    mdp = random_mdp(3, n_states=3, n_actions=3, horizon=4)
    pi_b = np.array([[0.6, 0.3, 0.1], [0.2, 0.5, 0.3], [0.1, 0.1, 0.8]])
    pi_e = np.array([[0.1, 0.2, 0.7], [0.6, 0.2, 0.2], [0.3, 0.4, 0.3]])
    truth = mdp.value(pi_e)
    gaps, errors = [], []
    for n in (40, 4000):
        log = sample(mdp, pi_b, n, np.random.default_rng(n))
        features, taken, ep, t = _tabular_states(mdp, log)
        fit = fit_behaviour(features, taken, l2=1.0)
        true_lp = np.log(pi_b[log.s[ep, t], log.a[ep, t]])
        # the unpenalised optimum is the empirical frequency of each action in each state
        counts = np.zeros((mdp.n_states, mdp.n_actions))
        np.add.at(counts, (log.s[ep, t], log.a[ep, t]), 1)
        freq = np.log(counts / counts.sum(1, keepdims=True))[log.s[ep, t], log.a[ep, t]]
        gaps.append(np.abs(np.exp(fit.log_probs) - np.exp(true_lp)).max())  # probabilities
        errors.append(abs(_estimated_is(mdp, log, pi_e, fit.log_probs) - truth))
        if n == 4000:
            assert np.abs(fit.log_probs - freq).max() < 0.02  # the penalty's pull vanishes as the log grows
            assert fit.nll == pytest.approx(-true_lp.mean(), abs=0.02)
    assert gaps[1] < 0.03 < gaps[0] and gaps[1] < gaps[0] / 2
    assert errors[1] < 0.05 and errors[1] < errors[0]


def test_chunks_of_the_log_add_up_to_the_whole():
    """The fit scores a chunk's distinct observations and tasks once and adds gradients over chunks: a
    chunk of a few states must reach the fit of one chunk holding the whole log."""
    mdp = random_mdp(5, n_states=4, n_actions=3, horizon=3)
    log = sample(mdp, np.full((4, 3), 1 / 3), 60, np.random.default_rng(5))
    features, taken, _, _ = _tabular_states(mdp, log)
    whole = fit_behaviour(features, taken)
    chunked = fit_behaviour(features, taken, chunk=7)  # two states a chunk (three candidate actions)
    np.testing.assert_allclose(chunked.log_probs, whole.log_probs, atol=1e-6)


def test_an_action_off_the_list_stays_possible_and_bad_settings_are_named():
    states = [AgentState("t", "o", [], ["x", "y"]), AgentState("t", "o", [], ["x", "y"])]
    vocab = ["t", "o", "x", "y", "z"]
    features = StepFeatures(states, ["x", "z"], 2, lambda texts: np.eye(5)[[vocab.index(t) for t in texts]])
    fit = fit_behaviour(features, ["x", "z"])
    assert np.all(np.isfinite(fit.log_probs)) and np.all(fit.log_probs < 0)
    with pytest.raises(ValueError, match="ope.behaviour_l2: expected > 0"):
        fit_behaviour(features, ["x", "z"], l2=0.0)
    with pytest.raises(ValueError, match="2 logged states but 1 actions"):
        fit_behaviour(features, ["x"])


@pytest.mark.ci
@pytest.mark.slow  # fit, evaluate and ope on the smoke run's log stripped of its probabilities (~1 min)
def test_a_log_without_behaviour_probabilities_goes_through_fit_evaluate_and_ope(smoke_run, tmp_path, one_thread):
    from adwm.cli import main

    stripped = tmp_path / "no_logprobs.jsonl"
    with open(smoke_run / "collect" / "episodes.jsonl") as src, open(stripped, "w") as out:
        for line in src:
            ep = json.loads(line)
            for step in ep["steps"]:
                step.pop("behavior_logprob", None)
            out.write(json.dumps(ep) + "\n")
    common = [
        "experiment=smoke",
        f"run.root={tmp_path / 'run'}",
        f"agent.dir={smoke_run / 'agents'}",
        f"collect.out={stripped}",
        f"ground_truth.out={smoke_run / 'ground_truth' / 'ground_truth.json'}",
        "evaluate.calibration=none",  # calibration needs the behaviour agents, which a user of such a log lacks
    ]
    assert main(["fit", *common]) == 0
    assert main(["evaluate", *common]) == 0
    assert main(["ope", *common]) == 0
    estimates = json.loads((tmp_path / "run" / "evaluate" / "estimates.json").read_text())["estimates"]
    assert all(np.isfinite(e["J_hat_sim"]) for e in estimates.values())
    ope = json.loads((tmp_path / "run" / "ope" / "estimates.json").read_text())
    for name, entry in ope["estimates"].items():
        est = entry["estimators"]
        assert est["is"]["J_hat"] is None and est["is"]["flag"] == "missing_behaviour_logprob", name  # NaN: null
        for e in ("is_est", "pdis_est", "wis_est", "wpdis_est", "dr_est", "wdr_est"):
            assert np.isfinite(est[e]["J_hat"]) and 1 <= est[e]["ess"] <= entry["n_episodes"], (name, e)
        assert entry["behaviour_model"]["logged_steps_with_behaviour_logprob"] == 0
    assert "is_est" in ope["metrics"]


def test_runs_of_steps_that_list_other_actions_reach_the_fit_of_the_whole_log():
    """Each run of steps scores only the actions its steps list: runs with different lists must reach the
    fit that scores every action of the log at once, and, with one-hot texts, the frequency of each
    action within its state's list (the unpenalised optimum, computed here by counting)."""
    rng = np.random.default_rng(3)
    lists = {"s0": ["a", "b"], "s1": ["c", "d", "e"]}
    probs = {"s0": [0.7, 0.3], "s1": [0.2, 0.3, 0.5]}
    vocab = ["task", "s0", "s1", "a", "b", "c", "d", "e"]
    kinds = ["s0"] * 600 + ["s1"] * 600
    taken = [str(rng.choice(lists[k], p=probs[k])) for k in kinds]
    states = [AgentState("task", k, [], lists[k]) for k in kinds]
    features = StepFeatures(states, taken, 1, lambda texts: np.eye(len(vocab))[[vocab.index(t) for t in texts]])
    whole = fit_behaviour(features, taken, chunk=10**9)  # one run, every action of the log
    runs = fit_behaviour(features, taken, chunk=8)  # runs of two or three steps with their own lists
    np.testing.assert_allclose(runs.log_probs, whole.log_probs, atol=1e-6)
    counts = {(k, a): 0 for k in lists for a in lists[k]}
    for k, a in zip(kinds, taken):
        counts[k, a] += 1
    freq = [np.log(counts[k, a] / kinds.count(k)) for k, a in zip(kinds, taken)]
    assert np.abs(runs.log_probs - freq).max() < 0.02
    assert [(start, stop, len(v)) for start, stop, v in _runs([[0, 1], [0, 1], [2, 3, 4], [9]], 8)] == [
        (0, 2, 2),  # a third step would make 3 steps x 5 actions > 8
        (2, 4, 4),  # 2 steps x 4 actions = 8
    ]
