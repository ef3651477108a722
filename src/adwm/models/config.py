"""The projector's config (light: no torch)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ProjectorConfig:
    n_tokens: int = 8  # m soft tokens per latent
    hidden: int = 256
    lora: bool = False  # a PEFT LoRA adapter on the agent, active only while it reads soft tokens
    lora_r: int = 8
    lora_alpha: int = 16
    w_kl: float = 1.0  # KL(text-reading || soft-reading) over the candidate actions
    # cross-entropy of the logged (behaviour) action under soft reading: it grounds the soft tokens but pulls
    # every estimate towards the logged value, so it is kept small (decisions.md: projector)
    w_ce: float = 0.05
    lr: float = 2e-3
    batch_size: int = 32  # logged states per step
    max_epochs: int = 2
    # Per agent backbone. A budget in optimiser steps does the same work on any machine, so a seed gives the
    # same projector under any load; max_minutes only guards against a machine far slower than expected.
    max_steps: int = 50  # 0 = no step limit
    max_minutes: float = 2.0
    max_train_states: int = 2000  # distinct logged states sampled for training (0 = all)
    # candidates per state in the distillation (the logged action and a random sample of the rest; 0 = all):
    # the agent scores each twice a step, and ScienceWorld's valid lists hold ~100-1400 (builtin <= 20)
    max_candidates: int = 32

    def __post_init__(self) -> None:
        if self.max_steps < 0:
            raise ValueError(
                f"projector.max_steps: expected a number of steps >= 0 (0 = no limit), got {self.max_steps}"
            )
        if self.max_candidates < 0 or self.max_candidates == 1:
            raise ValueError(f"projector.max_candidates: expected 0 (all) or at least 2, got {self.max_candidates}")
        for key in ("n_tokens", "hidden", "batch_size", "max_epochs"):
            if getattr(self, key) < 1:
                raise ValueError(f"projector.{key}: expected >= 1, got {getattr(self, key)}")
