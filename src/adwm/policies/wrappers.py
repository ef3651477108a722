"""Policy wrappers: epsilon-greedy mixing with a uniform choice."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from adwm.policies.base import AgentState, Policy, require_admissible


class EpsilonGreedy(Policy):
    """With probability eps a uniform admissible action, else the base policy's.

    pi(a|s) = (1 - eps) * base(a|s) + eps / |A(s)|; for a greedy base the
    agent's choice gets 1 - eps + eps/|A|. Sampling draws the branch first, so
    the base model runs only for states on its branch.
    """

    def __init__(self, base: Policy, eps: float, name: str | None = None) -> None:
        if not 0.0 <= eps <= 1.0:
            raise ValueError(f"eps must lie in [0, 1], got {eps}")
        self.base, self.eps = base, eps
        self.name = name or f"{base.name}_eps{eps:g}"

    def log_distributions(self, states: Sequence[AgentState]) -> list[np.ndarray]:
        require_admissible(states, "epsilon-greedy")
        uniform = [np.full(len(s.admissible), -np.log(len(s.admissible))) for s in states]
        if self.eps == 1.0:
            return uniform
        base = self.base.log_distributions(states)
        if self.eps == 0.0:
            return base
        log_eps, log_keep = np.log(self.eps), np.log1p(-self.eps)
        return [np.logaddexp(log_keep + b, log_eps + u) for b, u in zip(base, uniform)]

    def act(self, states: Sequence[AgentState], rngs: Sequence[np.random.Generator]) -> list[str]:
        require_admissible(states, "epsilon-greedy")
        explore = [r.random() < self.eps for r in rngs]
        actions: list[str | None] = [None] * len(states)
        for i, (s, r) in enumerate(zip(states, rngs)):
            if explore[i]:
                actions[i] = s.admissible[int(r.integers(len(s.admissible)))]
        rest = [i for i, e in enumerate(explore) if not e]
        if rest:
            chosen = self.base.act([states[i] for i in rest], [rngs[i] for i in rest])
            for i, a in zip(rest, chosen):
                actions[i] = a
        return actions  # type: ignore[return-value]
