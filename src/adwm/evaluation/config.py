"""The ground truth's config (light: no torch)."""

from __future__ import annotations

from dataclasses import dataclass

from adwm.runtime.checks import at_least


@dataclass
class GroundTruthConfig:
    n_episodes: int = 150  # per policy; enough that J's standard error is below the gaps between eps levels
    seed_offset: int = 3_000_000  # environment seeds offset+[0, n): disjoint from training and behaviour logs
    n_envs: int = 64  # environments in lock-step per batched model call
    out: str = "${run.root}/ground_truth/ground_truth.json"

    def __post_init__(self) -> None:
        at_least(self, "ground_truth", 1, ("n_episodes", "n_envs"))
        at_least(self, "ground_truth", 0, ("seed_offset",))
