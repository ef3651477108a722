"""Heads on latents: reward, termination, action posterior P(a | z', h), candidate-action proposal.

The action heads score actions by a dot product with the action encoder's
embedding of their text, so they work over any action vocabulary, including
actions added after training.
"""

from __future__ import annotations

import torch
from torch import nn


def _mlp(d_in: int, d_out: int, hidden: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Linear(d_in, hidden), nn.GELU(), nn.Linear(hidden, hidden), nn.GELU(), nn.Linear(hidden, d_out)
    )


class Heads(nn.Module):
    def __init__(self, d_z_flat: int, d_context: int, d_action: int, hidden: int = 256) -> None:
        super().__init__()
        self.reward = _mlp(d_z_flat + d_context + d_action, 1, hidden)
        self.termination = _mlp(d_z_flat + d_context + d_action, 1, hidden)
        self.posterior = _mlp(d_z_flat + d_context, d_action, hidden)
        self.proposal = _mlp(d_z_flat, d_action, hidden)
        self.proposal_bias = nn.Parameter(torch.zeros(1))

    def transition(self, z_next: torch.Tensor, c: torch.Tensor, a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Reward and termination logit of (h_t, a_t) -> z_{t+1}; z_next (B, L, d_z) -> (B,), (B,)."""
        x = torch.cat([z_next.flatten(1), c, a], dim=-1)
        return self.reward(x).squeeze(-1), self.termination(x).squeeze(-1)

    def action_posterior(self, z_next: torch.Tensor, c: torch.Tensor, vocab: torch.Tensor) -> torch.Tensor:
        """Logits of P(a | z_{t+1}, h_t) over `vocab` (V, d_a) embeddings -> (B, V)."""
        return self.posterior(torch.cat([z_next.flatten(1), c], dim=-1)) @ vocab.T

    def proposal_logits(self, z: torch.Tensor, vocab: torch.Tensor) -> torch.Tensor:
        """Independent logits that each action of `vocab` is admissible in latent state z -> (B, V)."""
        return self.proposal(z.flatten(1)) @ vocab.T + self.proposal_bias
