"""The worlds `adwm evaluate` rolls an agent out in, on one contract: `WORLD_CLASSES[name](inputs)` builds a
world from what the evaluation loaded; `world.rollout(policy)` returns the policy's discounted returns;
`world.settings()` says what those returns depend on beyond the rollouts' own settings.

Each world's own settings are its config node (`evaluate.diffusion`, `evaluate.guided_analogy`,
`evaluate.autoregressive`), validated
when the node is built; `WORLDS` (simulation/config.py) says what the config needs to know of each world
(learned or not, whether its agents read latents, whether it is a control) before any of them is built.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from omegaconf import DictConfig, OmegaConf

from adwm.envs.registry import make_env
from adwm.guidance.continuation import Continuation, fit_tail_value
from adwm.models.autoregressive_fit import max_state_pieces
from adwm.models.proposal_bank import action_ids
from adwm.policies.config import PolicyConfig
from adwm.policies.factory import build_policy
from adwm.policies.llm import LLMPolicy
from adwm.policies.sampling import uses_model
from adwm.runtime import costs
from adwm.runtime.progress import bar
from adwm.simulation.analogy import AnalogyWorld
from adwm.simulation.autoregressive import AutoregressiveTextWorld, load_or_fit
from adwm.simulation.config import WORLDS, world_spec
from adwm.simulation.guided_analogy import guided_rollouts, rollout_guided_analogy
from adwm.simulation.readers import DecodedTextReader, NearestTextReader, SoftTokenReader, TextReader
from adwm.simulation.simulate import agent_writes, simulate, simulation_sampler
from adwm.simulation.starts import Start, logged_reward_range, logged_starts
from adwm.simulation.worlds import (
    LoggedStart,
    LoggedWorld,
    OracleWorld,
    TextWorld,
    logged_episode_starts,
    returns_from_starts,
    rollout_world,
)


@dataclass
class WorldInputs:
    """What a world is built from: the composed config, the evaluation's data module, the fitted world model
    (None for a world that reads none), the agents' score cache, and the stage's projector for an agent
    (trained or reused; only the learned world with `ablation.reader=projector` asks for it)."""

    cfg: DictConfig
    dm: Any
    wm: Any = None
    cache: dict | None = None
    projector: Callable[[PolicyConfig, LLMPolicy], SoftTokenReader] | None = None


class World(ABC):
    """One world of `evaluate.world`; subclasses set `name` and implement `rollout`."""

    name: ClassVar[str]

    def __init__(self, inputs: WorldInputs) -> None:
        cfg = inputs.cfg
        self.inputs, self.cfg = inputs, cfg
        self.spec = world_spec(self.name)
        if self.spec.learned and inputs.wm is None:
            raise ValueError(f"evaluate.world={self.name}: needs the fitted world model (evaluate.world_model)")
        self.sim = OmegaConf.to_object(cfg.evaluate.simulate)
        self.guidance = OmegaConf.to_object(cfg.guidance)
        self.horizon = self.sim.horizon or cfg.env.max_steps
        self.gamma, self.seed = cfg.env.gamma, cfg.seed

    @abstractmethod
    def rollout(self, policy: PolicyConfig) -> np.ndarray:
        """Discounted returns (evaluate.simulate.n_rollouts,) of `policy` from the log's starts."""

    @abstractmethod
    def returns_from(
        self, policy: PolicyConfig, starts: list[LoggedStart], first: list[str | None] | None = None
    ) -> np.ndarray:
        """One discounted return of `policy` per start, in order, from any logged step (its logged turns
        as the history the agent reads), within the horizon's steps left after that step; where `first[k]`
        is an action it is taken first and the policy acts from the next step (a return of Q(s, a))."""

    def steps_left(self, starts: list[LoggedStart]) -> np.ndarray:
        """The steps of the horizon left at each start (at least one)."""
        return np.array([max(1, self.horizon - len(s.history)) for s in starts])

    @classmethod
    def settings(cls, cfg: DictConfig) -> dict:
        """What this world's estimates depend on beyond the rollouts' settings (evaluate.simulate), read
        from the composed config `cfg` without building the world."""
        return {"world": cls.name}


class DiffusionWorld(World):
    """The learned world model (simulation/simulate.py): the agent reads its latents
    (`ablation.reader`: the text its decoder writes, the text of the nearest logged state, or the projector's
    soft tokens); Theorem 1's guidance acts in every reverse step."""

    name = "diffusion"

    def __init__(self, inputs: WorldInputs) -> None:
        super().__init__(inputs)
        self.own = OmegaConf.to_object(self.cfg.evaluate.diffusion)
        self.ablation = OmegaConf.to_object(self.cfg.ablation)
        self.tail = OmegaConf.to_object(self.cfg.evaluate.tail)
        g = self.guidance
        if self.ablation.reader != "projector" and g.eta > 0 and g.continuation == "full" and g.method == "gradient":
            raise ValueError(
                "guidance.continuation=full with guidance.method=gradient differentiates the agent's reading of "
                "the latent, which a text reader (ablation.reader=" + self.ablation.reader + ") cannot: set "
                "ablation.reader=projector or guidance.method=resample"
            )

    def reader_and_continuation(
        self, policy: PolicyConfig
    ) -> tuple[SoftTokenReader | TextReader | None, Continuation | None]:
        """How the agent reads latents (None for a policy that never reads its model) and its continuation
        factor (None when guidance.eta = 0 or the agent writes its actions)."""
        wm, dm, cache = self.inputs.wm, self.inputs.dm, self.inputs.cache
        reader, llm = None, None
        if uses_model(policy):
            with costs.section("estimate/projector"):
                llm = LLMPolicy(policy, f"family policy '{policy.name}'")
                if self.ablation.reader == "projector":
                    reader = self.inputs.projector(policy, llm)
                else:
                    kind = DecodedTextReader if self.ablation.reader == "decoded" else NearestTextReader
                    reader = kind(wm, llm, cache, self.own.write_cache_mb)
        continuation = None
        if self.guidance.eta > 0 and not agent_writes(wm, policy, self.own):
            with costs.section("estimate/tail_value"):
                tail = fit_tail_value(wm, policy, llm, dm, self.tail, self.seed, cache) if self.tail.enabled else None
            continuation = Continuation(wm, reader, tail, self.guidance.continuation)
        return reader, continuation

    def rollout(self, policy: PolicyConfig) -> np.ndarray:
        reader, continuation = self.reader_and_continuation(policy)
        dm = self.inputs.dm
        return simulate(
            self.inputs.wm,
            policy,
            reader,
            logged_starts(dm),
            self.sim,
            self.guidance,
            self.gamma,
            self.horizon,
            self.seed,
            continuation,
            reward_range=logged_reward_range(dm),
            world=self.own,
        )

    def returns_from(
        self, policy: PolicyConfig, starts: list[LoggedStart], first: list[str | None] | None = None
    ) -> np.ndarray:
        reader, continuation = self.reader_and_continuation(policy)
        wm, dm = self.inputs.wm, self.inputs.dm
        steps = self.steps_left(starts)
        begin = []
        for k, s in enumerate(starts):
            ids = None
            if s.admissible:
                known = [i for i in action_ids(wm.actions, s.admissible).tolist() if i >= 0]
                ids = known or None  # none in the world model's vocabulary: it proposes the set
            opening = s.history[0][0] if s.history else s.observation
            world = dm.world_ids.get((s.task, opening), -1)
            act = None if first is None else first[k]
            begin.append(Start(s.task, s.observation, ids, world, act, int(steps[k])))
        return simulate(
            wm,
            policy,
            reader,
            begin,
            self.sim,
            self.guidance,
            self.gamma,
            int(steps.max()),
            self.seed,
            continuation,
            reward_range=logged_reward_range(dm),
            world=self.own,
            in_order=True,
        )

    @classmethod
    def settings(cls, cfg: DictConfig) -> dict:
        return {
            **super().settings(cfg),
            "diffusion": OmegaConf.to_container(cfg.evaluate.diffusion),
            "tail": OmegaConf.to_container(cfg.evaluate.tail),
            "guidance": OmegaConf.to_container(cfg.guidance),
            "ablation": OmegaConf.to_container(cfg.ablation),
            "projector": OmegaConf.to_container(cfg.projector),
        }


class _TextWorld(World):
    """A world of text states (simulation/worlds.py): the agent is the real policy reading text, from every
    logged start; the worlds built from the log know its training split only, as the learned model does."""

    def text_world(self) -> TextWorld:
        raise NotImplementedError

    def rollout(self, policy: PolicyConfig) -> np.ndarray:
        dm = self.inputs.dm
        starts = logged_episode_starts(dm.train_episodes + dm.val_episodes)
        agent = build_policy(policy, f"family policy '{policy.name}'")
        with bar(self.horizon, f"{self.name} {policy.name}", "step") as shown:
            return self._rollout(agent, starts, shown.update)

    def _rollout(self, agent, starts, step) -> np.ndarray:
        n = self.sim.n_rollouts
        return rollout_world(self.text_world(), agent, starts, n, self.horizon, self.gamma, self.seed, step)

    def returns_from(
        self, policy: PolicyConfig, starts: list[LoggedStart], first: list[str | None] | None = None
    ) -> np.ndarray:
        agent = build_policy(policy, f"family policy '{policy.name}'")
        return self._returns_from(agent, starts, first, self.steps_left(starts))

    def _returns_from(self, agent, starts, first, steps) -> np.ndarray:
        return returns_from_starts(self.text_world(), agent, starts, first, steps, self.gamma, self.seed)


class OracleTextWorld(_TextWorld):
    """The real environment, reset to each logged start's seed."""

    name = "oracle"

    def text_world(self) -> TextWorld:
        env_cfg = OmegaConf.to_object(self.cfg.env)
        return OracleWorld(lambda: make_env(env_cfg))


class NearestWorld(_TextWorld):
    """Certainty equivalence on the log's transitions."""

    name = "nearest"

    def text_world(self) -> TextWorld:
        return LoggedWorld(self.inputs.dm.train_episodes, moves=True)


class StayWorld(_TextWorld):
    """The state is kept; rewards and ends drawn as in `nearest`."""

    name = "stay"

    def text_world(self) -> TextWorld:
        return LoggedWorld(self.inputs.dm.train_episodes, moves=False)


class AnalogyTextWorld(_TextWorld):
    """The log's edits applied by analogy (simulation/analogy.py), built once per world: a worker that
    simulates several policies reuses it (its rollouts keep their state in their own states)."""

    name = "analogy"

    def __init__(self, inputs: WorldInputs) -> None:
        super().__init__(inputs)
        self.world = AnalogyWorld(inputs.dm.train_episodes)

    def text_world(self) -> TextWorld:
        return self.world


class GuidedAnalogyWorld(AnalogyTextWorld):
    """The learned world model picks each next state among the analogy world's proposals
    (simulation/guided_analogy.py)."""

    name = "guided_analogy"

    def __init__(self, inputs: WorldInputs) -> None:
        super().__init__(inputs)
        self.own = OmegaConf.to_object(self.cfg.evaluate.guided_analogy)

    def _rollout(self, agent, starts, step) -> np.ndarray:
        wm, own = self.inputs.wm, self.own
        sampler = simulation_sampler(wm, own.sampler_steps, "evaluate.guided_analogy.sampler_steps")
        reward_range = logged_reward_range(self.inputs.dm) if own.clip_rewards else None
        return rollout_guided_analogy(
            wm,
            self.world,
            agent,
            starts,
            self.sim.n_rollouts,
            self.horizon,
            self.gamma,
            self.seed,
            self.guidance,
            sampler,
            own.rewards,
            reward_range,
            step,
            own.temperature,
        )

    def _returns_from(self, agent, starts, first, steps) -> np.ndarray:
        wm, own = self.inputs.wm, self.own
        sampler = simulation_sampler(wm, own.sampler_steps, "evaluate.guided_analogy.sampler_steps")
        reward_range = logged_reward_range(self.inputs.dm) if own.clip_rewards else None
        rngs = [np.random.default_rng((self.seed, 13, k)) for k in range(len(starts))]
        args = (self.guidance, sampler, own.rewards, reward_range, lambda n: None, own.temperature)
        return guided_rollouts(wm, self.world, agent, starts, rngs, steps, first, self.gamma, self.seed, *args)

    @classmethod
    def settings(cls, cfg: DictConfig) -> dict:
        # the learned model's guidance, not its reader or projector: the agent reads the proposals' text
        own = OmegaConf.to_container(cfg.evaluate.guided_analogy)
        return {**super().settings(cfg), "guided_analogy": own, "guidance": OmegaConf.to_container(cfg.guidance)}


class AutoregressiveWorld(_TextWorld):
    """A causal language model of the log writes each next state token by token
    (simulation/autoregressive.py): the baseline of per-transition denoising, trained (or loaded) once
    per world on the log's training split."""

    name = "autoregressive"

    def __init__(self, inputs: WorldInputs) -> None:
        super().__init__(inputs)
        self.own = OmegaConf.to_object(self.cfg.evaluate.autoregressive)
        dm = inputs.dm
        model = load_or_fit(self.own, dm.train_episodes, dm.val_episodes, self.seed)
        longest = self.own.max_pieces or max_state_pieces(model, dm.train_episodes)
        self.world = AutoregressiveTextWorld(model, self.own.temperature, longest)

    def text_world(self) -> TextWorld:
        return self.world

    @classmethod
    def settings(cls, cfg: DictConfig) -> dict:
        return {**super().settings(cfg), "autoregressive": OmegaConf.to_container(cfg.evaluate.autoregressive)}


WORLD_CLASSES: dict[str, type[World]] = {
    cls.name: cls
    for cls in (
        DiffusionWorld,
        GuidedAnalogyWorld,
        OracleTextWorld,
        NearestWorld,
        StayWorld,
        AnalogyTextWorld,
        AutoregressiveWorld,
    )
}
assert set(WORLD_CLASSES) == set(WORLDS), "simulation/config.py's WORLDS and the world classes must agree"


def world_class(name: str) -> type[World]:
    """The class of the world named `name` (`evaluate.world`); an unknown name is a named error."""
    world_spec(name)
    return WORLD_CLASSES[name]


def make_world(inputs: WorldInputs) -> World:
    """The world of `evaluate.world`, built from `inputs`."""
    return world_class(inputs.cfg.evaluate.world)(inputs)
