"""Diffusion: schedules (pure functions) and a parameter-free sampler."""

from adwm.runtime.lazy import lazy_exports

_WHERE = {
    "DiffusionSampler": "adwm.diffusion.sampler",
    "SamplerConfig": "adwm.diffusion.config",
    **{f: "adwm.diffusion.schedules" for f in ("alpha_bar", "eps_to_out", "q_sample", "to_x0_eps", "training_target")},
}
__all__ = sorted(_WHERE)
__getattr__ = lazy_exports(__name__, _WHERE)
