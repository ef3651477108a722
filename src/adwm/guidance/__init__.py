"""Policy-guided denoising: action-posterior CFG, continuation guidance, the composed noise estimate."""

from adwm.runtime.lazy import lazy_exports

_WHERE = {"GuidanceConfig": "adwm.guidance.config", "guided_eps_fn": "adwm.guidance.composed"}
__all__ = sorted(_WHERE)
__getattr__ = lazy_exports(__name__, _WHERE)
