"""Learned-query attention pooling: variable-length token states -> L latent tokens."""

from __future__ import annotations

import torch
from torch import nn


class LatentPool(nn.Module):
    """L learned queries attend over the token states; a projection gives (B, L, d_latent).

    The output is layer-normalised without affine parameters, so the latent
    scale cannot shrink towards zero (a trivial way to lower a diffusion loss).
    """

    def __init__(self, d_in: int, n_latents: int, d_latent: int, heads: int = 4) -> None:
        super().__init__()
        self.queries = nn.Parameter(torch.randn(n_latents, d_in) * d_in**-0.5)
        self.attn = nn.MultiheadAttention(d_in, heads, batch_first=True)
        self.proj = nn.Linear(d_in, d_latent)
        self.norm = nn.LayerNorm(d_latent, elementwise_affine=False)

    def forward(self, states: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """states (B, N, d_in), mask (B, N) true for real tokens -> (B, L, d_latent)."""
        q = self.queries.unsqueeze(0).expand(states.size(0), -1, -1)  # (B, L, d_in)
        pooled, _ = self.attn(q, states, states, key_padding_mask=~mask.bool())
        return self.norm(self.proj(pooled))
