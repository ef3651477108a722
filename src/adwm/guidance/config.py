"""Configs of the guided sampler and the continuation tail value (light: no torch)."""

from __future__ import annotations

from dataclasses import dataclass

GUIDANCE_SPACES = ("x0", "score")


@dataclass
class GuidanceConfig:
    omega: float = 1.0  # action-posterior guidance: 1 = plain conditional, 0 = ignores the action
    eta: float = 1.0  # continuation guidance; 0 turns it off
    steps: int = 1  # continuation guidance on the last `steps` reverse steps only (each costs a backward pass)
    clip: float = 1.0  # per-sample L2 cap of grad log C
    # where eta * grad log C is added: "x0" to the Tweedie estimate (a step of eta in latent units),
    # "score" to the score (scaled by sqrt(1 - abar_t), so nearly nothing on the last, low-noise steps)
    space: str = "x0"

    def __post_init__(self) -> None:
        if self.space not in GUIDANCE_SPACES:
            raise ValueError(f"guidance.space: unknown space '{self.space}'; choose from {list(GUIDANCE_SPACES)}")
        for key in ("omega", "eta", "clip"):
            if getattr(self, key) < 0:
                raise ValueError(f"guidance.{key}: expected >= 0, got {getattr(self, key)}")
        if self.steps < 0 or (self.steps == 0 and self.eta > 0):
            raise ValueError(
                f"guidance.steps: expected a number of reverse steps >= 1 (continuation guidance is on: eta="
                f"{self.eta}; eta=0 turns it off), got {self.steps}"
            )


@dataclass
class TailConfig:
    enabled: bool = True
    gamma: float = 0.9  # discount of the tail value (a soft horizon of ~10 steps)
    transitions: int = 1000  # logged transitions scored by pi_e for the TD fit
    steps: int = 400
    lr: float = 3e-3
    target_every: int = 50
