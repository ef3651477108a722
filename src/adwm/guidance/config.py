"""Configs of the guided sampler and the continuation tail value (light: no torch)."""

from __future__ import annotations

from dataclasses import dataclass

GUIDANCE_SPACES = ("x0", "score")
GUIDANCE_METHODS = ("gradient", "resample")
CONTINUATIONS = ("full", "tail")


@dataclass
class GuidanceConfig:
    omega: float = 1.0  # action-posterior guidance: 1 = plain conditional, 0 = ignores the action
    # continuation guidance (Theorem 1's policy-continuation factor); 0, the default, turns it off: on the tuning
    # seeds it did not help and its tail-value fit is a fifth of an estimate's time (decisions.md)
    eta: float = 0.0
    steps: int = 1  # continuation guidance on the last `steps` reverse steps only (each costs a backward pass)
    clip: float = 1.0  # per-sample L2 cap of grad log C
    # where eta * grad log C is added: "x0" to the Tweedie estimate (a step of eta in latent units),
    # "score" to the score (scaled by sqrt(1 - abar_t), so nearly nothing on the last, low-noise steps)
    space: str = "x0"
    # how C enters: "gradient" moves the sample along eta * grad log C on the last `steps` reverse steps (a
    # heuristic that goes towards C's mode); "resample" draws `particles` samples of the prior kernel and
    # keeps one with probability proportional to C^eta: Theorem 1's tilt itself (guidance/resample.py)
    method: str = "gradient"
    particles: int = 4  # resample: candidates a step (cost: this many denoising chains and log C evaluations)
    # what log C is: "full" = the one-step term (pi_e reads the candidate latent: an agent forward, and a
    # backward for the gradient) plus the tail value; "tail" = the tail value V_alpha alone, which already
    # estimates the logged continuation's log-likelihood under pi_e from z (no agent forward: decisions.md)
    continuation: str = "tail"

    def __post_init__(self) -> None:
        if self.method not in GUIDANCE_METHODS:
            raise ValueError(f"guidance.method: unknown method '{self.method}'; choose from {list(GUIDANCE_METHODS)}")
        if self.continuation not in CONTINUATIONS:
            raise ValueError(
                f"guidance.continuation: unknown form '{self.continuation}'; choose from {list(CONTINUATIONS)}"
            )
        if self.particles < 1 or (self.method == "resample" and self.particles < 2):
            raise ValueError(
                f"guidance.particles: expected >= 2 with method=resample (one particle is the prior), got {self.particles}"
            )
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
