"""Environment registry: `env.name` -> adapter."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from adwm.envs.base import TextEnv
from adwm.envs.builtin import BuiltinEnv, BuiltinEnvConfig


@dataclass
class EnvConfig:
    name: str = "builtin"  # registry name, see ENVS
    max_steps: int = 30  # episode horizon: about twice the longest gold plan
    gamma: float = 0.95  # discount of J = E[sum gamma^(t-1) r_t]; < 1 rewards short solutions
    builtin: BuiltinEnvConfig = field(default_factory=BuiltinEnvConfig)


ENVS: dict[str, Callable[[EnvConfig], TextEnv]] = {
    "builtin": lambda cfg: BuiltinEnv(cfg.builtin, max_steps=cfg.max_steps),
}


def make_env(cfg: EnvConfig) -> TextEnv:
    """Build the environment named by `cfg.name`."""
    if cfg.name not in ENVS:
        raise ValueError(f"unknown env '{cfg.name}'; choose from {sorted(ENVS)}")
    return ENVS[cfg.name](cfg)
