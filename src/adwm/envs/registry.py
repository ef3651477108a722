"""Environment registry: `env.name` -> adapter."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from adwm.envs.base import TextEnv
from adwm.envs.builtin import BuiltinEnv, BuiltinEnvConfig, builtin_state_key
from adwm.envs.multihop import MultihopEnv, MultihopEnvConfig
from adwm.envs.scienceworld import ScienceWorldConfig, ScienceWorldEnv, scienceworld_state_key
from adwm.envs.shop import ShopEnv, ShopEnvConfig
from adwm.envs.textworld import TextWorldConfig, TextWorldEnv, textworld_state_key
from adwm.runtime.checks import at_least, one_of, require


@dataclass
class EnvConfig:
    name: str = "builtin"  # registry name, see ENVS
    max_steps: int = 30  # episode horizon: about twice the longest gold plan
    gamma: float = 0.95  # discount of J = E[sum gamma^(t-1) r_t]; < 1 rewards short solutions
    builtin: BuiltinEnvConfig = field(default_factory=BuiltinEnvConfig)
    scienceworld: ScienceWorldConfig = field(default_factory=ScienceWorldConfig)
    textworld: TextWorldConfig = field(default_factory=TextWorldConfig)
    shop: ShopEnvConfig = field(default_factory=ShopEnvConfig)
    multihop: MultihopEnvConfig = field(default_factory=MultihopEnvConfig)
    # the world `adwm evaluate` simulates this environment's agents in unless `evaluate.world` says otherwise
    # (simulation/config.py's WORLDS); not part of the environment, so not of its signature
    world: str = "diffusion"

    def __post_init__(self) -> None:
        one_of(self.name, "env.name", ENVS)
        at_least(self, "env", 1, ("max_steps",))
        require(0 < self.gamma <= 1, "env.gamma", self.gamma, "a discount in (0, 1]")


# `env=log`: a log of an environment adwm has no adapter for (a web or tool-use agent's harness); the world
# model, evaluate-log and the baselines read only the log, and nothing can play an episode in it
LOG_ONLY = "log"


def _no_simulator(cfg: EnvConfig) -> TextEnv:
    raise ValueError(
        "env.name: 'log' has no environment behind it, so nothing can play an episode in it (collect, "
        f"ground truth, agent training, evaluate.world=oracle); expected one of {sorted(set(ENVS) - {LOG_ONLY})}"
    )


ENVS: dict[str, Callable[[EnvConfig], TextEnv]] = {
    "builtin": lambda cfg: BuiltinEnv(cfg.builtin, max_steps=cfg.max_steps),
    "scienceworld": lambda cfg: ScienceWorldEnv(cfg.scienceworld, max_steps=cfg.max_steps),
    "textworld": lambda cfg: TextWorldEnv(cfg.textworld, max_steps=cfg.max_steps),
    "shop": lambda cfg: ShopEnv(cfg.shop, max_steps=cfg.max_steps),
    "multihop": lambda cfg: MultihopEnv(cfg.multihop, max_steps=cfg.max_steps),
    LOG_ONLY: _no_simulator,
}


def env_signature(cfg: EnvConfig | dict) -> dict:
    """The env config as stored in signatures and cache keys: the common fields plus only the active
    environment's section, so adding an adapter (or editing an unused section) does not invalidate what
    was made for another environment."""
    d = asdict(cfg) if not isinstance(cfg, dict) else dict(cfg)
    return {k: v for k, v in d.items() if (k not in ENVS or k == d["name"]) and k != "world"}


def make_env(cfg: EnvConfig) -> TextEnv:
    """Build the environment named by `cfg.name` (checked by `EnvConfig`)."""
    return ENVS[cfg.name](cfg)


def state_key(env_name: str) -> Callable[[str], object]:
    """What of an observation counts as the world's state when a simulated state is compared with the true one
    (simulation/fidelity.py): builtin's room and inventory; TextWorld's announced room and inventory line;
    ScienceWorld's room; the whole observation text elsewhere (shop's pages and multihop's results with
    their notes are functions of the state alone, with no feedback text)."""
    keys = {"builtin": builtin_state_key, "textworld": textworld_state_key, "scienceworld": scienceworld_state_key}
    return keys.get(env_name, lambda observation: observation)
