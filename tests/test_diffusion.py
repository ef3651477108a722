"""Schedules and the sampler against closed forms: Gaussian data has an exact optimal denoiser."""

from __future__ import annotations

import pytest
import torch

from adwm.diffusion import DiffusionSampler, alpha_bar, eps_to_out, q_sample, to_x0_eps, training_target
from adwm.diffusion.config import SamplerConfig

MU, S = 1.5, 0.5  # data x0 ~ N(MU, S^2)


def optimal_eps(sampler: DiffusionSampler):
    """E[eps | x_t] for Gaussian data, in closed form."""

    def eps_fn(x_t: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        a = sampler.abar[t].reshape(-1, *([1] * (x_t.dim() - 1)))
        x0 = MU + a.sqrt() * S**2 / (a * S**2 + 1 - a) * (x_t - a.sqrt() * MU)
        return (x_t - a.sqrt() * x0) / (1 - a).sqrt()

    return eps_fn


@pytest.mark.parametrize("schedule", ["cosine", "linear"])
def test_alpha_bar_is_decreasing_from_one_towards_zero(schedule):
    ab = alpha_bar(schedule, 100)
    assert ab.dtype == torch.float64 and (ab[1:] < ab[:-1]).all()
    assert 0.99 < ab[0] <= 1.0 and ab[-1] < 0.01


@pytest.mark.parametrize("prediction", ["eps", "x0", "v"])
def test_parameterisations_round_trip(prediction):
    g = torch.Generator().manual_seed(0)
    x0, noise = torch.randn(8, 3, 4, generator=g), torch.randn(8, 3, 4, generator=g)
    abar = alpha_bar("cosine", 50)[torch.arange(0, 50, 7)].float()[:8]
    x_t = q_sample(x0, noise, abar)
    out = training_target(x0, noise, abar, prediction)
    x0_hat, eps_hat = to_x0_eps(x_t, out, abar, prediction)
    torch.testing.assert_close(x0_hat, x0, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(eps_hat, noise, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(eps_to_out(x_t, noise, abar, prediction), out, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("method,steps", [("ddpm", 100), ("ddim", 100)])
def test_optimal_denoiser_samples_the_data_distribution(method, steps):
    sampler = DiffusionSampler(SamplerConfig(train_steps=100, method=method, steps=steps, ddim_eta=0.0))
    x = sampler.sample(optimal_eps(sampler), (20000, 1), torch.Generator().manual_seed(0))
    assert x.mean().item() == pytest.approx(MU, abs=0.02)
    assert x.std().item() == pytest.approx(S, abs=0.02)


def test_ddim_discretisation_error_shrinks_with_steps():
    """DDIM is a first-order ODE solver: with the exact score its variance error falls as steps grow."""
    errors = []
    for steps in (10, 25, 50):
        sampler = DiffusionSampler(SamplerConfig(train_steps=100, method="ddim", steps=steps))
        x = sampler.sample(optimal_eps(sampler), (20000, 1), torch.Generator().manual_seed(0))
        errors.append(abs(x.std().item() - S))
    assert errors[0] > errors[1] > errors[2]


def test_sampler_is_deterministic_for_a_seed():
    sampler = DiffusionSampler(SamplerConfig(method="ddpm", train_steps=20))
    a = sampler.sample(optimal_eps(sampler), (4, 2), torch.Generator().manual_seed(3))
    b = sampler.sample(optimal_eps(sampler), (4, 2), torch.Generator().manual_seed(3))
    c = sampler.sample(optimal_eps(sampler), (4, 2), torch.Generator().manual_seed(4))
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_bad_sampler_settings_are_named():
    with pytest.raises(ValueError, match=r"sampler.method: expected one of \['ddim', 'ddpm'\], got 'euler'"):
        DiffusionSampler(SamplerConfig(method="euler"))
    with pytest.raises(ValueError, match=r"sampler.steps: expected 1..100 \(world_model.sampler.train_steps\), got 0"):
        DiffusionSampler(SamplerConfig(steps=0))
    with pytest.raises(ValueError, match="diffusion.schedule: unknown schedule 'sqrt'"):
        alpha_bar("sqrt", 10)
