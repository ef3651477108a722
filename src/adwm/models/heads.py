"""Heads on latents: reward, termination, action posterior P(a | z', h), behaviour prior P_b(a | h),
candidate-action proposals
(for a latent state alone, and for the next state given the current candidate set and action),
and the next-latent predictor of the contrastive dynamics term.

The action heads score actions through the action encoder's embedding of their
text, so they work over any action vocabulary, including actions added after
training.
"""

from __future__ import annotations

import torch
from einops import rearrange
from torch import nn


def _mlp(d_in: int, d_out: int, hidden: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Linear(d_in, hidden), nn.GELU(), nn.Linear(hidden, hidden), nn.GELU(), nn.Linear(hidden, d_out)
    )


class DotScorer(nn.Module):
    """Logit of every (state, action) pair: f(x) . g(a) + b.

    A bilinear form fits a batch's admissible sets exactly, where an additive pair MLP
    w . GELU(f(x) + g(a)) plateaued at predicting only the always-present actions.
    """

    def __init__(self, d_x: int, d_action: int, hidden: int, n_parts: int = 1) -> None:
        super().__init__()
        self.hidden, self.n_parts = hidden, n_parts
        self.f = nn.Sequential(nn.Linear(d_x, hidden), nn.GELU(), nn.Linear(hidden, n_parts * hidden))
        self.g = nn.Linear(d_action, hidden)
        self.bias = nn.Parameter(torch.zeros(n_parts))

    def parts(self, x: torch.Tensor, vocab: torch.Tensor) -> list[torch.Tensor]:
        g = self.g(vocab)  # (V, H)
        return [f @ g.T + b for f, b in zip(self.f(x).chunk(self.n_parts, dim=-1), self.bias)]

    def forward(self, x: torch.Tensor, vocab: torch.Tensor) -> torch.Tensor:
        """x (B, d_x), vocab (V, d_a) -> (B, V)."""
        return self.parts(x, vocab)[0]


class EditScorer(DotScorer):
    """Next candidate set as an edit of the current one: one bilinear score for actions that were
    candidates one step earlier (kept or removed), another for those that were not (added)."""

    def __init__(self, d_x: int, d_action: int, hidden: int) -> None:
        super().__init__(d_x, d_action, hidden, n_parts=2)

    def forward(self, x: torch.Tensor, vocab: torch.Tensor, prev: torch.Tensor) -> torch.Tensor:
        """x (B, d_x), vocab (V, d_a), prev (B, V) in {0, 1} -> (B, V)."""
        added, kept = self.parts(x, vocab)
        return torch.where(prev > 0.5, kept, added)


class Heads(nn.Module):
    def __init__(self, d_z_flat: int, d_context: int, d_action: int, hidden: int = 256) -> None:
        super().__init__()
        self.reward = _mlp(d_z_flat + d_context + d_action, 1, hidden)
        self.termination = _mlp(d_z_flat + d_context + d_action, 1, hidden)
        self.posterior = _mlp(d_z_flat + d_context, d_action, hidden)
        self.proposal = DotScorer(d_z_flat, d_action, hidden // 2)
        self.behaviour = DotScorer(d_context, d_action, hidden // 2)
        self.next_proposal = EditScorer(d_z_flat + d_context + d_action, d_action, hidden // 2)
        self.next_latent = _mlp(d_context + d_action, d_z_flat, hidden)

    def transition(self, z_next: torch.Tensor, c: torch.Tensor, a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Reward and termination logit of (h_t, a_t) -> z_{t+1}; z_next (B, L, d_z) -> (B,), (B,)."""
        x = torch.cat([rearrange(z_next, "b l d -> b (l d)"), c, a], dim=-1)
        return self.reward(x).squeeze(-1), self.termination(x).squeeze(-1)

    def action_posterior(self, z_next: torch.Tensor, c: torch.Tensor, vocab: torch.Tensor) -> torch.Tensor:
        """Logits of P(a | z_{t+1}, h_t) over `vocab` (V, d_a) embeddings -> (B, V)."""
        return self.posterior(torch.cat([rearrange(z_next, "b l d -> b (l d)"), c], dim=-1)) @ vocab.T

    def behaviour_logits(self, c: torch.Tensor, vocab: torch.Tensor) -> torch.Tensor:
        """Logits of the logged agents' next action P_b(a_t | h_t) over `vocab` -> (B, V): the behaviour
        next-action prior of the continuation guidance."""
        return self.behaviour(c, vocab)

    def proposal_logits(self, z: torch.Tensor, vocab: torch.Tensor) -> torch.Tensor:
        """Independent logits that each action of `vocab` is admissible in latent state z -> (B, V)."""
        return self.proposal(z.flatten(1), vocab)

    def next_proposal_logits(
        self, z_next: torch.Tensor, c: torch.Tensor, a: torch.Tensor, prev: torch.Tensor, vocab: torch.Tensor
    ) -> torch.Tensor:
        """Logits that each action is admissible after (h_t, a_t) -> z_{t+1}, given the candidate set
        prev (B, V) of o_t -> (B, V). In simulation the set at t is known (the logged one at the start)."""
        return self.next_proposal(torch.cat([z_next.flatten(1), c, a], dim=-1), vocab, prev.float())

    def predict_next(self, c: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        """A point prediction of the flat next latent from (c_t, a_t) -> (B, L * d_z)."""
        return self.next_latent(torch.cat([c, a], dim=-1))
