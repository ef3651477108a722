"""Reverse diffusion with DDPM and DDIM steps; owns no parameters, only schedule buffers.

The sampler calls `eps_fn(x_t, t) -> eps_hat` at each step, so classifier-free
and policy guidance (which edit eps_hat) plug in without touching the steps.
Hand-written rather than diffusers' schedulers: the reverse step must expose
its Tweedie estimate and accept an eps edit per step, and it is 60 lines.
Latents are never clamped.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from adwm.diffusion.config import SamplerConfig
from adwm.diffusion.schedules import alpha_bar, tweedie_x0

EpsFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (x_t, t: (B,) long) -> eps_hat


class DiffusionSampler:
    def __init__(self, cfg: SamplerConfig) -> None:  # its values are checked by SamplerConfig
        self.cfg = cfg
        self.abar = alpha_bar(cfg.schedule, cfg.train_steps).float()  # (T,) stored float32, computed float64
        steps = cfg.train_steps if cfg.method == "ddpm" else cfg.steps
        self.timesteps = torch.linspace(cfg.train_steps - 1, 0, steps).round().long()  # descending

    @torch.no_grad()
    def sample(
        self,
        eps_fn: EpsFn,
        shape: tuple[int, ...],
        generator: torch.Generator | None = None,
        device: torch.device | str | None = None,
    ) -> torch.Tensor:
        """Draw x_0 of `shape` on `device`, starting from x_T ~ N(0, I). Noise is drawn on the CPU from
        `generator` and moved: a seed gives the same draws on any device."""
        x = torch.randn(shape, generator=generator).to(device or "cpu")
        for i, t in enumerate(self.timesteps):
            t_prev = self.timesteps[i + 1] if i + 1 < len(self.timesteps) else None
            x = self.step(eps_fn, x, int(t), None if t_prev is None else int(t_prev), generator)
        return x

    def step(
        self, eps_fn: EpsFn, x_t: torch.Tensor, t: int, t_prev: int | None, generator: torch.Generator | None
    ) -> torch.Tensor:
        """One reverse step x_t -> x_{t_prev} (t_prev None: the final step to x_0)."""
        tt = torch.full((x_t.shape[0],), t, dtype=torch.long, device=x_t.device)
        # (1) the (possibly guided) noise estimate at x_t
        eps = eps_fn(x_t, tt)
        a_t = self.abar[t]
        a_prev = self.abar[t_prev] if t_prev is not None else torch.tensor(1.0)
        # (2) Tweedie estimate x0_hat = (x_t - sqrt(1 - abar_t) eps) / sqrt(abar_t)
        x0 = tweedie_x0(x_t, eps, a_t)
        if t_prev is None:
            return x0
        # (3) posterior noise level: DDPM sigma^2 = (1 - abar_prev)/(1 - abar_t) * (1 - abar_t/abar_prev);
        #     DDIM scales it by eta (Song et al. 2021, eq. 16)
        eta = 1.0 if self.cfg.method == "ddpm" else self.cfg.ddim_eta
        sigma = eta * ((1 - a_prev) / (1 - a_t) * (1 - a_t / a_prev)).clamp(min=0).sqrt()
        # (4) x_{t_prev} = sqrt(abar_prev) x0_hat + sqrt(1 - abar_prev - sigma^2) eps + sigma z
        direction = (1 - a_prev - sigma**2).clamp(min=0).sqrt() * eps
        noise = torch.randn(x_t.shape, generator=generator).to(x_t.device) if sigma > 0 else 0.0
        return a_prev.sqrt() * x0 + direction + sigma * noise
