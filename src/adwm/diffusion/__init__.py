"""Diffusion: schedules (pure functions) and a parameter-free sampler."""

from adwm.diffusion.sampler import DiffusionSampler, SamplerConfig
from adwm.diffusion.schedules import alpha_bar, eps_to_out, q_sample, to_x0_eps, training_target

__all__ = ["DiffusionSampler", "SamplerConfig", "alpha_bar", "eps_to_out", "q_sample", "to_x0_eps", "training_target"]
