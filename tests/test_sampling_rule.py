"""The one sampling rule: simulation, continuation guidance and the off-policy baselines read the same
probabilities for the same state, and they are the closed-form softmax / argmax / eps mixture."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from adwm.ope.logged import policy_distributions
from adwm.policies.base import AgentState
from adwm.policies.config import PolicyConfig
from adwm.policies.sampling import action_log_probs, candidate_log_probs


class _Scores:
    """Stands in for the OPE score cache: the agent's scores of each state's admissible actions."""

    def __init__(self, scores: list[np.ndarray]) -> None:
        self._scores = scores

    def scores(self, pcfg, states):
        return self._scores


def reference(scores: np.ndarray, temperature: float, eps: float) -> np.ndarray:
    """Probabilities written out independently: softmax(s / T) or uniform over the argmax set, mixed with eps."""
    n = len(scores)
    if temperature == 0:
        best = scores == scores.max()
        base = best / best.sum()
    else:
        e = np.exp((scores - scores.max()) / temperature)
        base = e / e.sum()
    return (1 - eps) * base + eps / n


CASES = [(1.0, 0.0), (0.5, 0.25), (2.0, 0.75), (0.0, 0.0), (0.0, 0.3), (1.0, 1.0)]


@pytest.mark.parametrize("temperature,eps", CASES)
def test_simulation_and_ope_get_identical_probabilities(temperature, eps):
    rng = np.random.default_rng(3)
    scores = [rng.normal(size=n) * 4 for n in (2, 5, 9)]
    scores[1][3] = scores[1][1] = scores[1].max() + 1.0  # a tie for the argmax
    states = [AgentState("task", "obs", [], [f"a{i}" for i in range(len(s))]) for s in scores]
    pcfg = PolicyConfig(name="p", model="m", temperature=temperature, eps=eps)
    ope = policy_distributions(pcfg, states, _Scores(scores))
    for s, logp_ope in zip(scores, ope):
        logp_sim = action_log_probs(torch.from_numpy(s), pcfg).numpy()
        assert np.array_equal(logp_sim, logp_ope)  # bit for bit: one rule
        np.testing.assert_allclose(np.exp(logp_sim), reference(s, temperature, eps), rtol=1e-12, atol=1e-15)


def test_a_uniform_policy_ignores_its_scores_on_both_sides():
    scores = [np.array([3.0, -1.0, 0.5])]
    states = [AgentState("t", "o", [], ["x", "y", "z"])]
    pcfg = PolicyConfig(name="u", kind="uniform")
    ope = policy_distributions(pcfg, states, _Scores(scores))[0]
    sim = action_log_probs(torch.from_numpy(scores[0]), pcfg).numpy()
    assert np.array_equal(ope, sim) and np.allclose(np.exp(sim), 1 / 3)


def test_the_rule_is_differentiable_in_the_scores():
    s = torch.tensor([0.2, 1.0, -0.5], dtype=torch.float64, requires_grad=True)
    candidate_log_probs(s, 1.0, 0.2)[1].backward()
    assert s.grad is not None and s.grad[1] > 0 > s.grad[0]


def test_an_eps_outside_the_unit_interval_is_a_named_error():
    with pytest.raises(ValueError, match=r"eps: expected a value in \[0, 1\], got 1.5 \(policy 'p'\)"):
        dataclasses.replace(PolicyConfig(name="p"), eps=1.5)
