"""History encoder: a small causal transformer over past (z, a) pairs -> context c_t."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from einops import rearrange
from torch import nn


class HistoryEncoder(nn.Module):
    """Token k = proj(z_k) + proj(a_{k-1}) (+ position); the output at the last position is c_t.

    The episode's task text (its latent) is a prefix token that every position attends to: the
    task is part of h_t for the whole episode, while the window keeps only the latest steps. On
    builtin the task names where the objects are, so without it a window of two observations
    cannot know what the next room holds or which step pays a reward.

    Windows are left-padded; padding positions hold a learned "before the episode" token rather
    than being masked out, so no attention row is ever empty and the model knows how far back
    the episode starts.
    """

    def __init__(
        self,
        n_latents: int,
        d_latent: int,
        d_action: int,
        d_model: int,
        window: int,
        layers: int = 2,
        recent_latents: int = 0,
    ) -> None:
        super().__init__()
        if recent_latents < 0:
            raise ValueError(f"world_model.history_latents: expected 0 (all) or more, got {recent_latents}")
        self.recent_latents = recent_latents
        if recent_latents > 0:  # stands for an observation latent the history does not read
            self.unread = nn.Parameter(torch.zeros(d_model))
        self.z_proj = nn.Linear(n_latents * d_latent, d_model)
        self.task_proj = nn.Linear(n_latents * d_latent, d_model)
        self.task_pos = nn.Parameter(torch.zeros(d_model))
        self.a_proj = nn.Linear(d_action, d_model)
        self.pos = nn.Parameter(torch.zeros(window, d_model))
        self.before = nn.Parameter(torch.zeros(d_model))
        layer = nn.TransformerEncoderLayer(d_model, 4, 2 * d_model, dropout=0.0, batch_first=True, norm_first=True)
        self.transformer = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)

    def forward(self, z: torch.Tensor, prev_a: torch.Tensor, mask: torch.Tensor, task: torch.Tensor) -> torch.Tensor:
        """z (B, W, L, d_z), prev_a (B, W, d_a) (zeros where none), mask (B, W) real steps,
        task (B, L, d_z) latent of the task text -> c (B, d_model)."""
        b, w = z.shape[:2]
        zx = self.z_proj(rearrange(z, "b w l d -> b w (l d)"))  # (B, W, D)
        if self.recent_latents > 0:
            pos = torch.arange(w, device=z.device)
            first = mask.float().argmax(1)  # left-padded: the episode's first real position
            read = mask & ((pos >= w - self.recent_latents)[None] | (pos[None] == first[:, None]))
            zx = torch.where(read[..., None], zx, self.unread)
        x = zx + self.a_proj(prev_a)  # (B, W, D)
        x = torch.where(mask[..., None], x, self.before) + self.pos[-w:]
        x = torch.cat(
            [(self.task_proj(rearrange(task, "b l d -> b (l d)")) + self.task_pos)[:, None], x], dim=1
        )  # (B, 1+W, D)
        causal = torch.triu(torch.ones(w + 1, w + 1, dtype=torch.bool, device=z.device), 1)
        h = self.transformer(x, mask=causal)
        return self.norm(h[:, -1])  # windows are left-padded: the last position is o_t


@dataclass
class Window:
    """The simulated history h_t as the world model reads it: the last W latents (left-padded), the
    action before each, which positions are real, and the task latent."""

    z: torch.Tensor  # (B, W, L, d)
    prev_a: torch.Tensor  # (B, W, d_a): a_{k-1} of window position k (position 0: none)
    mask: torch.Tensor  # (B, W) bool
    task: torch.Tensor  # (B, L, d)

    @classmethod
    def start(cls, z: torch.Tensor, task: torch.Tensor, window: int, d_action: int) -> Window:
        """A window holding only the first observation's latent z (B, L, d)."""
        b = z.size(0)
        hist = torch.zeros(b, window, *z.shape[1:], device=z.device)
        hist[:, -1] = z
        mask = torch.zeros(b, window, dtype=torch.bool, device=z.device)
        mask[:, -1] = True
        return cls(hist, torch.zeros(b, window, d_action, device=z.device), mask, task)

    def context(self, wm) -> torch.Tensor:
        return wm.history(self.z, self.prev_a, self.mask, self.task)  # (B, d_c)

    def repeat(self, k: int) -> Window:
        """Each rollout's window `k` times in a row (B * k rows), as `repeat_interleave(k, 0)` lays them out."""
        return Window(*(x.repeat_interleave(k, 0) for x in (self.z, self.prev_a, self.mask, self.task)))

    def shifted(self, z_next: torch.Tensor, a: torch.Tensor) -> Window:
        """The window after action a (B, d_a) led to z_next (B, L, d)."""
        return Window(
            torch.cat([self.z[:, 1:], z_next[:, None]], dim=1),
            torch.cat([torch.zeros_like(self.prev_a[:, :1]), self.prev_a[:, 2:], a[:, None]], dim=1),
            torch.cat([self.mask[:, 1:], torch.ones_like(self.mask[:, :1])], dim=1),
            self.task,
        )
