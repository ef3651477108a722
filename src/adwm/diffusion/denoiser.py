"""Conditional denoiser networks over latent tokens: `mlp` (residual MLP) or `transformer`."""

from __future__ import annotations

import math

import torch
from einops import rearrange
from torch import nn

from adwm.diffusion.config import DenoiserConfig


def timestep_embedding(t: torch.Tensor, dim: int) -> torch.Tensor:
    """Sinusoidal embedding of integer steps (Vaswani et al. 2017), (B,) -> (B, dim)."""
    half = dim // 2
    freqs = torch.exp(-math.log(10_000) * torch.arange(half, device=t.device) / half)
    args = t.float()[:, None] * freqs[None]
    return torch.cat([args.sin(), args.cos()], dim=-1)


class _Block(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.film = nn.Linear(d, 2 * d)  # condition -> scale, shift
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))

    def forward(self, h: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        scale, shift = self.film(cond).chunk(2, dim=-1)
        return h + self.mlp(self.norm(h) * (1 + scale) + shift)


class Denoiser(nn.Module):
    """Predicts the diffusion target for z_t (B, L, d_z) given step t, context c and action a."""

    def __init__(self, cfg: DenoiserConfig, n_latents: int, d_latent: int, d_cond: int) -> None:
        super().__init__()
        if cfg.backbone not in ("mlp", "transformer"):
            raise ValueError(f"unknown backbone '{cfg.backbone}'; choose from ['mlp', 'transformer']")
        self.cfg, self.n, self.d = cfg, n_latents, d_latent
        h = cfg.hidden
        self.cond = nn.Sequential(nn.Linear(d_cond + h, h), nn.GELU(), nn.Linear(h, h))
        if cfg.backbone == "mlp":
            self.inp = nn.Linear(n_latents * d_latent, h)
            self.blocks = nn.ModuleList(_Block(h) for _ in range(cfg.layers))
            self.out = nn.Sequential(nn.LayerNorm(h), nn.Linear(h, n_latents * d_latent))
        else:
            self.inp = nn.Linear(d_latent, h)
            self.pos = nn.Parameter(torch.zeros(n_latents + 1, h))
            layer = nn.TransformerEncoderLayer(h, cfg.heads, 2 * h, dropout=0.0, batch_first=True, norm_first=True)
            self.transformer = nn.TransformerEncoder(layer, cfg.layers, enable_nested_tensor=False)
            self.out = nn.Sequential(nn.LayerNorm(h), nn.Linear(h, d_latent))

    def forward(self, z_t: torch.Tensor, t: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        """z_t (B, L, d_z), t (B,), cond (B, d_cond) = [context, action or null] -> (B, L, d_z)."""
        c = self.cond(torch.cat([cond, timestep_embedding(t, self.cfg.hidden)], dim=-1))  # (B, H)
        if self.cfg.backbone == "mlp":
            h = self.inp(rearrange(z_t, "b l d -> b (l d)"))
            for block in self.blocks:
                h = block(h, c)
            return rearrange(self.out(h), "b (l d) -> b l d", l=self.n, d=self.d)
        tokens = torch.cat([c[:, None], self.inp(z_t)], dim=1) + self.pos  # (B, 1 + L, H)
        return self.out(self.transformer(tokens)[:, 1:])
