"""How the evaluated agent reads a simulated latent state: the text of the nearest logged observation (the
default, `ablation.projector=false`: with snapping, the observation the state is), or soft tokens through
the projector (`ablation.projector=true`, the paper's G_psi)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
import torch

from adwm.policies.base import AgentState
from adwm.policies.llm import LLMPolicy


class LatentReader(Protocol):
    def scores(self, z: torch.Tensor, tasks: list[str], candidates: list[list[str]]) -> list[torch.Tensor]:
        """Summed token log-likelihood of each candidate for the agent in latent state z (B, L, d)."""

    def write(self, z: torch.Tensor, tasks: list[str], rngs: Sequence[np.random.Generator]) -> list[str]:
        """The action the agent writes in latent state z (B, L, d) (free-form logs), one generator a state."""


class SoftTokenReader:
    """pi_e reads G_psi(z) as soft tokens; differentiable in z (continuation guidance needs it)."""

    def __init__(self, projector) -> None:
        self.projector = projector

    def scores(self, z: torch.Tensor, tasks: list[str], candidates: list[list[str]]) -> list[torch.Tensor]:
        return self.projector.soft_scores(z, tasks, candidates)

    def write(self, z: torch.Tensor, tasks: list[str], rngs: Sequence[np.random.Generator]) -> list[str]:
        return self.projector.write(z, tasks, rngs)


class NearestTextReader:
    """pi_e reads the text of the nearest logged observation (no projector); not differentiable, so a gradient
    through the agent's reading (guidance.continuation=full with guidance.method=gradient) needs the projector."""

    def __init__(self, world_model, policy: LLMPolicy) -> None:
        bank = world_model.proposal_bank
        if bank is None or bank.texts is None:
            raise RuntimeError("ablation.projector=false: the world model has no bank of logged texts (fit builds it)")
        self.world_model, self.policy, self.texts = world_model, policy, bank.texts

    @torch.no_grad()
    def scores(self, z: torch.Tensor, tasks: list[str], candidates: list[list[str]]) -> list[torch.Tensor]:
        nearest = self.world_model.proposal_bank.nearest(z).tolist()
        states = [AgentState(t, self.texts[i], [], list(c)) for t, i, c in zip(tasks, nearest, candidates)]
        return [torch.as_tensor(s, dtype=torch.float32) for s in self.policy.action_scores(states)]

    @torch.no_grad()
    def write(self, z: torch.Tensor, tasks: list[str], rngs: Sequence[np.random.Generator]) -> list[str]:
        nearest = self.world_model.proposal_bank.nearest(z).tolist()
        states = [AgentState(t, self.texts[i], [], None) for t, i in zip(tasks, nearest)]
        return self.policy.write([self.policy.prompt_ids(s) for s in states], rngs)
