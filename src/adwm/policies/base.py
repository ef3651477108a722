"""The policy contract: batched action distributions, sampling and exact log-probs."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np


@dataclass
class AgentState:
    """What an agent sees before it acts."""

    task: str
    observation: str
    history: list[tuple[str, str]] = field(default_factory=list)  # past (observation, action), oldest first
    admissible: list[str] | None = None  # None: free-form actions


def sample_index(log_probs: np.ndarray, rng: np.random.Generator) -> int:
    """Inverse-CDF draw from a log-probability vector (float64, deterministic per rng)."""
    probs = np.exp(log_probs - log_probs.max())
    cdf = np.cumsum(probs / probs.sum())
    return int(min(np.searchsorted(cdf, rng.random(), side="right"), len(cdf) - 1))


class Policy(ABC):
    """An agent over admissible actions.

    `log_distributions` gives, per state, the log-probabilities over
    `state.admissible` with which `act` samples; `log_probs` reads them off.
    Subclasses for free-form environments override `act` and `log_probs`.
    """

    name: str

    @abstractmethod
    def log_distributions(self, states: Sequence[AgentState]) -> list[np.ndarray]:
        """Per state, float64 log-probabilities over `state.admissible` (sum to 1)."""

    def act(self, states: Sequence[AgentState], rngs: Sequence[np.random.Generator]) -> list[str]:
        """Sample one action per state."""
        dists = self.log_distributions(states)
        return [s.admissible[sample_index(d, r)] for s, d, r in zip(states, dists, rngs)]

    def log_probs(self, states: Sequence[AgentState], actions: Sequence[str]) -> list[float]:
        """log pi(action | state) under exactly the rule `act` samples with."""
        dists = self.log_distributions(states)
        out = []
        for s, d, a in zip(states, dists, actions):
            out.append(float(d[s.admissible.index(a)]) if a in s.admissible else float("-inf"))
        return out

    def log_prob(self, state: AgentState, action: str) -> float:
        return self.log_probs([state], [action])[0]

    def generates(self, state: AgentState) -> bool:
        """Whether this policy writes its action in `state` instead of choosing from `state.admissible`."""
        return False


def require_admissible(states: Sequence[AgentState], who: str) -> None:
    for s in states:
        if s.admissible is None or len(s.admissible) == 0:
            raise ValueError(f"{who} needs a non-empty admissible action list; this environment gives none")


class UniformPolicy(Policy):
    """Uniform choice over the admissible actions."""

    def __init__(self, name: str = "uniform") -> None:
        self.name = name

    def log_distributions(self, states: Sequence[AgentState]) -> list[np.ndarray]:
        require_admissible(states, "uniform policy")
        return [np.full(len(s.admissible), -np.log(len(s.admissible))) for s in states]
