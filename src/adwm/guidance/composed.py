"""The guided noise estimate of one reverse step (Theorem 1):

    score = s(z|h) + omega * (s(z|h,a) - s(z|h)) + eta * grad_z log C

With score = -eps / sqrt(1 - abar_t), the same sum in noise units is

    eps = eps_u + omega * (eps_c - eps_u) - sqrt(1 - abar_t) * eta * grad log C(z0_hat)

where the continuation gradient g is taken at the Tweedie estimate z0_hat of the
current step, clipped per sample, and applied on the last `steps` reverse steps only
(`space="score"`). On those low-noise steps sqrt(1 - abar_t) is small (0.025 at the
last of 100 cosine steps), so the score sum barely moves the sample. `space="x0"`
(the default) applies the step to the Tweedie estimate itself, z0_hat + eta * g,
and returns the noise estimate consistent with it:

    eps = eps_cfg - sqrt(abar_t / (1 - abar_t)) * eta * g

so eta is a step length in latent units at every noise level.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from adwm.diffusion.schedules import tweedie_x0
from adwm.guidance.config import GuidanceConfig
from adwm.runtime import costs

EpsModel = Callable[[torch.Tensor, torch.Tensor, torch.Tensor | None], torch.Tensor]  # (x_t, t, action or None)
LogC = Callable[[torch.Tensor], torch.Tensor]  # z0_hat (B, L, d) -> log C (B,)


def guided_eps_fn(
    eps_model: EpsModel,
    action: torch.Tensor,
    abar: torch.Tensor,
    cfg: GuidanceConfig,
    log_c: LogC | None = None,
    guided_steps: set[int] | None = None,
) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """An `eps_fn(x_t, t)` for `DiffusionSampler` that applies the three-factor score.

    `eps_model(x_t, t, a)` is the world model's noise prediction with the action embedding `a`
    (None: the unconditional prior); `guided_steps` are the timesteps that get continuation
    guidance (the sampler's last `cfg.steps` ones).
    """

    def eps_fn(x_t: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        # (1) classifier-free guidance: prior + omega * (conditional - prior)
        if cfg.omega == 1.0:
            eps = eps_model(x_t, t, action)
        elif cfg.omega == 0.0:
            eps = eps_model(x_t, t, None)
        else:
            eps_u, eps_c = eps_model(x_t, t, None), eps_model(x_t, t, action)
            eps = eps_u + cfg.omega * (eps_c - eps_u)
        step = int(t[0])
        if log_c is None or cfg.eta == 0.0 or guided_steps is None or step not in guided_steps:
            return eps
        # (2) Tweedie estimate z0_hat = (x_t - sqrt(1 - abar_t) eps) / sqrt(abar_t)
        a_t = abar[step]
        z0 = tweedie_x0(x_t, eps, a_t).detach().requires_grad_(True)
        # (3) grad log C at z0_hat, clipped per sample
        with torch.enable_grad(), costs.section("simulate/guidance"):
            (grad,) = torch.autograd.grad(log_c(z0).sum(), z0)
        norm = grad.flatten(1).norm(dim=-1).clamp(min=1e-12)
        grad = grad * (cfg.clip / norm).clamp(max=1.0).view(-1, *[1] * (grad.dim() - 1))
        # (4) score += eta * grad  <=>  eps -= sqrt(1 - abar_t) * eta * grad;
        #     or z0_hat += eta * grad  <=>  eps -= sqrt(abar_t / (1 - abar_t)) * eta * grad
        scale = (1 - a_t).sqrt() if cfg.space == "score" else (a_t / (1 - a_t)).sqrt()
        return eps - scale * cfg.eta * grad

    return eps_fn
