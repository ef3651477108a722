"""Continuation guidance as the tilt of Theorem 1 itself, by importance resampling (`guidance.method=resample`).

Theorem 1's kernel for the next latent is the action-conditioned prior tilted by the continuation factor:

    p_tilted(z | h, a)  proportional to  p_omega(z | h, a) * C(z)^eta

The gradient method (guidance/composed.py) moves a sample along grad log C, which is a heuristic: it lands
on C's mode, not on the tilted distribution (for a N(0, 1) prior and C = N(3, 1) the tilted mean is 1.5,
the gradient step goes towards 3). Importance resampling draws K particles from the prior kernel, weighs
each by C(z)^eta and keeps one with probability proportional to its weight: a draw from the tilted kernel
as K grows (self-normalised importance sampling; the bias is O(1/K)). Its cost is K denoising chains and K
evaluations of log C a step, batched into one pass each; it needs no gradient.
"""

from __future__ import annotations

import torch


def resample_index(log_w: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """One index per row of `log_w` (B, K), drawn with probability softmax(log_w); rows of equal weights
    (e.g. all -inf or all 0) draw uniformly. Drawn on the CPU from `generator`, as the sampler's noise."""
    w = log_w.detach().double().cpu()
    w = torch.where(torch.isfinite(w), w, torch.full_like(w, -1e300))  # -inf or NaN: no weight (equal if all)
    return torch.multinomial(torch.softmax(w, dim=-1), 1, generator=generator).squeeze(-1)


def tilted_pick(
    particles: torch.Tensor, log_c: torch.Tensor, k: int, eta: float, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Pick one of `k` particles per row, with weights C^eta. `particles` (B * k, ...) are grouped by row as
    `repeat_interleave(k, 0)` lays them out, `log_c` (B * k,) is their log C. Returns the picks (B, ...)."""
    b = particles.size(0) // k
    idx = resample_index(eta * log_c.view(b, k), generator).to(particles.device)
    return particles.view(b, k, *particles.shape[1:])[torch.arange(b, device=particles.device), idx]


def effective_sample_size(log_w: torch.Tensor) -> torch.Tensor:
    """(sum w)^2 / sum w^2 per row of `log_w` (B, K): K for equal weights, 1 when one particle takes all."""
    w = torch.softmax(log_w.detach().double().cpu(), dim=-1)
    return 1.0 / (w**2).sum(-1)
