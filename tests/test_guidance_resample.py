"""Theorem 1's tilt by importance resampling (guidance/resample.py), checked on Gaussians where the tilted
distribution is known in closed form: prior N(0, 1) times C = N(3, 1) is N(1.5, 0.5)."""

from __future__ import annotations

import pytest
import torch

from adwm.diffusion.config import SamplerConfig
from adwm.diffusion.sampler import DiffusionSampler
from adwm.guidance.config import GuidanceConfig
from adwm.guidance.resample import effective_sample_size, resample_index, tilted_pick


def log_normal(x: torch.Tensor, mean: float, var: float = 1.0) -> torch.Tensor:
    return -0.5 * (x - mean) ** 2 / var


@pytest.mark.parametrize("method", ["ddpm", "ddim"])
def test_resampled_diffusion_samples_follow_the_tilted_gaussian(method):
    # the exact noise prediction for N(0, I) data: x_t ~ N(0, I) and E[eps | x_t] = sqrt(1 - abar_t) x_t
    sampler = DiffusionSampler(SamplerConfig(method=method, train_steps=50, steps=10))
    gen = torch.Generator().manual_seed(0)

    def eps_fn(x, t):
        return (1 - sampler.abar[t]).sqrt().view(-1, 1) * x

    rows, k = 4000, 64
    particles = sampler.sample(eps_fn, (rows * k, 1), gen)
    # ten reverse steps do not make the prior exactly N(0, 1) (the last step returns a posterior mean): the
    # tilt is checked against the prior the sampler draws, N(m, s2), times C = N(3, 1)
    m, s2 = particles.mean().item(), particles.var().item()
    assert abs(m) < 0.02 and 0.7 < s2 < 1.05
    var = 1 / (1 / s2 + 1)
    mean = var * (m / s2 + 3.0)  # 1.5 and 0.5 for an exact N(0, 1) prior
    log_c = log_normal(particles[:, 0], 3.0)
    picked = tilted_pick(particles, log_c, k, 1.0, gen)
    ess = effective_sample_size(log_c.view(rows, k))
    assert picked.shape == (rows, 1)
    # self-normalised importance resampling: the tilted Gaussian up to an O(1/k) bias and Monte Carlo error
    assert picked.mean().item() == pytest.approx(mean, abs=0.06)
    assert picked.var().item() == pytest.approx(var, abs=0.06)
    assert (ess > 1).all() and (ess < k).all()


def test_eta_scales_the_tilt():
    gen = torch.Generator().manual_seed(1)
    rows, k = 4000, 256
    particles = torch.randn(rows * k, 1, generator=gen)
    flat = tilted_pick(particles, log_normal(particles[:, 0], 3.0), k, 0.0, gen)
    assert abs(flat.mean().item()) < 0.05  # eta = 0: the prior
    # C^eta with C = N(3, 1) is N(3, 1/eta) up to a constant: prior x N(3, 1/2) = N(2, 1/3)
    sharp = tilted_pick(particles, log_normal(particles[:, 0], 3.0), k, 2.0, gen)
    assert sharp.mean().item() == pytest.approx(2.0, abs=0.1)


def test_resample_index_and_effective_sample_size():
    gen = torch.Generator().manual_seed(2)
    log_w = torch.tensor([[0.0, -torch.inf, -torch.inf], [-torch.inf] * 3, [0.0, 0.0, 0.0]])
    draws = torch.stack([resample_index(log_w, gen) for _ in range(600)])
    assert (draws[:, 0] == 0).all()  # all the weight on one particle
    for row in (1, 2):  # no finite weight, or equal weights: uniform
        counts = torch.bincount(draws[:, row], minlength=3)
        assert (counts > 150).all()
    ess = effective_sample_size(torch.tensor([[0.0, 0.0, 0.0, 0.0], [0.0, -1e9, -1e9, -1e9]]))
    assert ess.tolist() == pytest.approx([4.0, 1.0])


def test_bad_method_or_particles_are_named():
    with pytest.raises(ValueError, match=r"guidance\.method: unknown method 'smc'"):
        GuidanceConfig(method="smc")
    with pytest.raises(ValueError, match=r"guidance\.particles: expected >= 2 with method=resample"):
        GuidanceConfig(method="resample", particles=1)
