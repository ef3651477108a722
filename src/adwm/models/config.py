"""The projector's and the autoregressive text world model's configs (light: no torch)."""

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


@dataclass
class AutoregressiveConfig:
    """`evaluate.autoregressive`: the token-by-token text world model of `evaluate.world=autoregressive`
    (models/autoregressive.py), trained on the log's training split the first time a world needs it."""

    out: str = "${run.fit}/autoregressive"  # its weights, record and fidelity metrics; reused while its settings hold
    hidden: int = 256  # GRU state
    d_embed: int = 64
    layers: int = 1
    max_vocab: int = 8192  # pieces kept by falling frequency; the rest read as `unknown`, which is never written
    steps: int = 1500  # optimiser steps, each on batch_size lanes of `chunk` tokens (truncated backpropagation)
    batch_size: int = 32
    chunk: int = 256
    lr: float = 2e-3
    grad_clip: float = 1.0
    # pieces drawn from the model's distribution at this temperature (0: the most likely); 1 simulates the
    # distribution it was trained to fit
    temperature: float = 1.0
    max_pieces: int = 0  # the most pieces a written state may have; 0 = the longest training state's, plus 8

    def __post_init__(self) -> None:
        for key in ("hidden", "d_embed", "layers", "max_vocab", "steps", "batch_size", "chunk"):
            if getattr(self, key) < 1:
                raise ValueError(f"evaluate.autoregressive.{key}: expected >= 1, got {getattr(self, key)}")
        if not self.lr > 0:
            raise ValueError(f"evaluate.autoregressive.lr: expected > 0, got {self.lr}")
        if self.temperature < 0:
            raise ValueError(
                f"evaluate.autoregressive.temperature: expected >= 0 (0 = the most likely piece), got {self.temperature}"
            )
        if self.max_pieces < 0:
            raise ValueError(
                f"evaluate.autoregressive.max_pieces: expected >= 0 (0 = from the log), got {self.max_pieces}"
            )
