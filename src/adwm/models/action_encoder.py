"""Action encoder: action text -> embedding, from subword tokens, so unseen actions embed too."""

from __future__ import annotations

import torch
from torch import nn


class ActionEncoder(nn.Module):
    """Mean of token embeddings (the observation encoder's tokenizer), then an MLP: (B,) texts -> (B, d_a)."""

    def __init__(self, tokenizer, d_action: int) -> None:
        super().__init__()
        self.tokenizer = tokenizer
        self.bag = nn.EmbeddingBag(len(tokenizer), d_action, mode="mean")
        self.mlp = nn.Sequential(nn.Linear(d_action, d_action), nn.GELU(), nn.Linear(d_action, d_action))

    def forward(self, texts: list[str]) -> torch.Tensor:
        ids = [self.tokenizer(t, add_special_tokens=False)["input_ids"] or [0] for t in texts]
        device = self.bag.weight.device
        flat = torch.tensor([i for seq in ids for i in seq], dtype=torch.long, device=device)
        offsets = torch.tensor([0] + [len(s) for s in ids[:-1]], device=device).cumsum(0)
        return self.mlp(self.bag(flat, offsets))  # (B, d_a)
