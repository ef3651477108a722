"""The latent diffusion world model: config, Lightning module, objectives, candidate actions, replay."""

from adwm.models.world_model.module import PROPOSALS, WorldModelConfig, WorldModelModule

__all__ = ["PROPOSALS", "WorldModelConfig", "WorldModelModule"]
