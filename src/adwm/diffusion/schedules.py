"""Noise schedules and parameterisation conversions: small pure functions, float64 inside.

Notation (Ho et al. 2020, "Denoising Diffusion Probabilistic Models"):
    x_t = sqrt(abar_t) * x_0 + sqrt(1 - abar_t) * eps,   abar_t = prod_{s<=t} (1 - beta_s)
Prediction targets: eps, x0, or v = sqrt(abar_t) * eps - sqrt(1 - abar_t) * x_0
(Salimans & Ho 2022, "Progressive Distillation for Fast Sampling of Diffusion Models").
"""

from __future__ import annotations

import math

import torch

SCHEDULES = ("cosine", "linear")
PREDICTIONS = ("eps", "x0", "v")


def linear_betas(num_steps: int, beta_start: float = 1e-4, beta_end: float = 0.02) -> torch.Tensor:
    """Ho et al. 2020, rescaled so any `num_steps` spans the same noise range as 1000 steps."""
    scale = 1000.0 / num_steps
    return torch.linspace(beta_start * scale, beta_end * scale, num_steps, dtype=torch.float64)


def cosine_alpha_bar(num_steps: int, s: float = 0.008) -> torch.Tensor:
    """Nichol & Dhariwal 2021, "Improved DDPM", eq. 17: abar_t = f(t)/f(0), f(t) = cos^2((t/T + s)/(1 + s) * pi/2)."""
    t = torch.arange(num_steps + 1, dtype=torch.float64) / num_steps
    f = torch.cos((t + s) / (1 + s) * math.pi / 2) ** 2
    abar = f[1:] / f[0]
    betas = (1 - abar / torch.cat([torch.ones(1, dtype=torch.float64), abar[:-1]])).clamp(max=0.999)  # eq. 17 clip
    return torch.cumprod(1 - betas, 0)


def alpha_bar(schedule: str, num_steps: int) -> torch.Tensor:
    """abar_t for t = 0..num_steps-1 (float64)."""
    if schedule == "cosine":
        return cosine_alpha_bar(num_steps)
    if schedule == "linear":
        return torch.cumprod(1 - linear_betas(num_steps), 0)
    raise ValueError(f"diffusion.schedule: unknown schedule '{schedule}'; choose from {list(SCHEDULES)}")


def _bcast(a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return a.reshape(-1, *([1] * (x.dim() - 1))).to(x.dtype)


def q_sample(x0: torch.Tensor, noise: torch.Tensor, abar_t: torch.Tensor) -> torch.Tensor:
    """Forward process: x_t given x_0, the noise and abar at each sample's step."""
    return _bcast(abar_t.sqrt(), x0) * x0 + _bcast((1 - abar_t).sqrt(), x0) * noise


def training_target(x0: torch.Tensor, noise: torch.Tensor, abar_t: torch.Tensor, prediction: str) -> torch.Tensor:
    """What the denoiser regresses for `prediction` in {eps, x0, v}."""
    if prediction == "eps":
        return noise
    if prediction == "x0":
        return x0
    if prediction == "v":
        return _bcast(abar_t.sqrt(), x0) * noise - _bcast((1 - abar_t).sqrt(), x0) * x0
    raise ValueError(f"diffusion.prediction: unknown target '{prediction}'; choose from {list(PREDICTIONS)}")


def tweedie_x0(x_t: torch.Tensor, eps: torch.Tensor, abar_t: torch.Tensor) -> torch.Tensor:
    """Tweedie estimate E[x_0 | x_t] = (x_t - sqrt(1 - abar_t) eps) / sqrt(abar_t) from a noise estimate
    (abar_t a scalar or one value per row)."""
    return (x_t - _bcast((1 - abar_t).sqrt(), x_t) * eps) / _bcast(abar_t.sqrt(), x_t)


def to_x0_eps(
    x_t: torch.Tensor, out: torch.Tensor, abar_t: torch.Tensor, prediction: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """(x0_hat, eps_hat) from a denoiser output; x0_hat is the Tweedie estimate E[x_0 | x_t]."""
    a, b = _bcast(abar_t.sqrt(), x_t), _bcast((1 - abar_t).sqrt(), x_t)
    if prediction == "eps":
        return tweedie_x0(x_t, out, abar_t), out
    if prediction == "x0":
        return out, (x_t - a * out) / b
    if prediction == "v":
        x0 = a * x_t - b * out
        return x0, b * x_t + a * out
    raise ValueError(f"diffusion.prediction: unknown target '{prediction}'; choose from {list(PREDICTIONS)}")


def eps_to_out(x_t: torch.Tensor, eps: torch.Tensor, abar_t: torch.Tensor, prediction: str) -> torch.Tensor:
    """Inverse of `to_x0_eps` for a given eps: the denoiser output that implies it (used by guidance)."""
    a, b = _bcast(abar_t.sqrt(), x_t), _bcast((1 - abar_t).sqrt(), x_t)
    x0 = (x_t - b * eps) / a
    return {"eps": eps, "x0": x0, "v": a * eps - b * x0}[prediction]
