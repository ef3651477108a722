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

    def token_ids(self, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """Flat token ids and bag offsets of `texts` (an empty text becomes token 0)."""
        ids = [self.tokenizer(t, add_special_tokens=False)["input_ids"] or [0] for t in texts]
        flat = torch.tensor([i for seq in ids for i in seq], dtype=torch.long)
        offsets = torch.tensor([0] + [len(s) for s in ids[:-1]]).cumsum(0)
        return flat, offsets

    def embed(self, flat: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        """Embeddings of pre-tokenised texts -> (B, d_a)."""
        return self.mlp(self.bag(flat, offsets))

    def forward(self, texts: list[str]) -> torch.Tensor:
        flat, offsets = self.token_ids(texts)
        device = self.bag.weight.device
        return self.embed(flat.to(device), offsets.to(device))  # (B, d_a)
