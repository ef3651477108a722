"""The latent diffusion world model: config, Lightning module, objectives, candidate actions, replay."""

from adwm.runtime.lazy import lazy_exports

_WHERE = {
    "PROPOSALS": "adwm.models.world_model.config",
    "WorldModelConfig": "adwm.models.world_model.config",
    "WorldModelModule": "adwm.models.world_model.module",
}
__all__ = sorted(_WHERE)
__getattr__ = lazy_exports(__name__, _WHERE)
