"""Policy-guided denoising: action-posterior CFG, continuation guidance, the composed noise estimate."""

from adwm.guidance.composed import GuidanceConfig, guided_eps_fn

__all__ = ["GuidanceConfig", "guided_eps_fn"]
