"""Policy wrappers: epsilon-greedy mixing with a uniform choice (the mixture of `policies/sampling.py`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from adwm.policies.base import AgentState, Policy, require_admissible
from adwm.policies.sampling import mix_uniform_np


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
        return [mix_uniform_np(b, u, self.eps) for b, u in zip(base, uniform)]

    def generates(self, state: AgentState) -> bool:
        return self.base.generates(state)

    def act(self, states: Sequence[AgentState], rngs: Sequence[np.random.Generator]) -> list[str]:
        explore = [r.random() < self.eps for r in rngs]
        require_admissible([s for s, e in zip(states, explore) if e], "epsilon-greedy")  # only where it explores
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

    def log_probs(self, states: Sequence[AgentState], actions: Sequence[str]) -> list[float]:
        """log((1 - eps) base(a|s) + eps 1[a in A(s)] / |A(s)|): exact also for a base that writes its
        action (generate mode), whose text may lie outside the admissible list."""
        base = self.base.log_probs(states, actions) if self.eps < 1.0 else None
        return [float(x) for x in eps_mixture(base, states, actions, self.eps)]


def eps_mixture(base, states: Sequence[AgentState], actions: Sequence[str], eps: float) -> np.ndarray:
    """log((1 - eps) base(a|s) + eps 1[a in A(s)] / |A(s)|) per (state, action), from the base policy's
    log-probs `base` (read only for eps < 1); the uniform branch needs each state's admissible list."""
    if eps == 0.0:
        return np.asarray(base, dtype=float)
    require_admissible(states, "epsilon-greedy")
    uniform = np.array([-np.log(len(s.admissible)) if a in s.admissible else -np.inf for s, a in zip(states, actions)])
    if eps == 1.0:
        return uniform
    return mix_uniform_np(np.asarray(base, dtype=float), uniform, eps)
