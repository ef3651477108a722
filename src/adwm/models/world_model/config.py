"""`WorldModelConfig`: sizes, loss weights and sampler of the latent diffusion world model."""

from __future__ import annotations

from dataclasses import dataclass, field

from adwm.diffusion.config import DenoiserConfig, SamplerConfig
from adwm.runtime.checks import at_least

PROPOSALS = ("head", "retrieval")  # candidate-action proposal: the learned head, or nearest logged state


@dataclass
class TextDecoderConfig:
    """`world_model.decoder`: the decoder's size and vocabulary (trained after the fit: `fit.decoder`)."""

    # on with ablation.reader=decoded; off otherwise: no other reader reads it, and its training lengthens
    # every fit (benchmarks/speed.py: text_decoder)
    enabled: bool = False
    hidden: int = 256
    d_embed: int = 32  # of each piece the GRU reads
    max_pieces: int = 128  # longest decoded text in pieces (a longer observation is cut: it cannot round-trip)
    max_vocab: int = 8192  # most frequent pieces of the training observations; the rest are `unknown`
    # what the decoder reads besides the latent: the task and the texts of the last `sources` states the agent
    # read (0: the latent alone); it copies from them what stays the same (decisions.md: text decoder)
    sources: int = 2

    def __post_init__(self) -> None:
        at_least(self, "world_model.decoder", 1, ("hidden", "d_embed", "max_pieces", "max_vocab"))
        at_least(self, "world_model.decoder", 0, ("sources",))


@dataclass
class WorldModelConfig:
    d_action: int = 64
    d_context: int = 128
    history_layers: int = 2
    p_uncond: float = 0.1  # action dropped this often: one network is both prior and conditional (CFG)
    prediction: str = "v"  # v-prediction is well conditioned at every noise level
    lr: float = 2e-3
    weight_decay: float = 0.0
    ema_decay: float = 0.99  # target encoder for diffusion targets
    w_reward: float = 1.0
    w_done: float = 0.5
    w_posterior: float = 0.5
    w_behaviour: float = 0.5
    w_proposal: float = 0.5
    w_next_proposal: float = 0.5
    w_contrastive: float = 1.0
    w_tokens: float = 10.0  # latent-conditioned n-gram reconstruction of the text: no state word can be ignored
    joint_window: int = 2  # history observations read while the encoder trains (all of data.history after)
    token_context: int = 3  # tokens of left context the decoder sees besides the latent
    token_positions: int = 24  # positions predicted per text and step
    token_classes: int = 2048  # token ids are predicted modulo this (MiniLM's 30k vocabulary would cost 15x)
    temperature: float = 0.1  # of the contrastive term's cosine logits
    w_variance: float = 1.0
    w_covariance: float = 0.0  # VICReg covariance term: raises effective rank but slows retrieval (decisions.md)
    heads_on_denoised: bool = True  # transition heads also train on the denoiser's Tweedie estimate of z_{t+1}
    # Max std of Gaussian noise on the history latents in training (per transition from U(0, context_noise)),
    # so the dynamics and heads learn to read histories of sampled latents; off: no clear gain (decisions.md)
    context_noise: float = 0.0
    # Observation latents the history reads: the episode's first and the last `history_latents` (0: every one
    # in the window); the others read a learned "not read" token. 0: fewer compressed estimates (decisions.md)
    history_latents: int = 0
    retrieval_candidates: int = 32  # N of the one-step retrieval metric
    proposal: str = "head"  # head: learned, nearest-logged-state retrieval where it proposes nothing | retrieval
    denoiser: DenoiserConfig = field(default_factory=DenoiserConfig)
    sampler: SamplerConfig = field(default_factory=SamplerConfig)
    decoder: TextDecoderConfig = field(default_factory=TextDecoderConfig)  # z -> observation text

    def __post_init__(self) -> None:
        if self.proposal not in PROPOSALS:
            raise ValueError(f"world_model.proposal: unknown mode '{self.proposal}'; choose from {list(PROPOSALS)}")
        if self.prediction not in ("eps", "x0", "v"):
            raise ValueError(
                f"world_model.prediction: unknown target '{self.prediction}'; choose from ['eps', 'v', 'x0']"
            )
        for key in (
            "d_action",
            "d_context",
            "history_layers",
            "retrieval_candidates",
            "token_positions",
            "token_classes",
        ):
            if getattr(self, key) < 1:
                raise ValueError(f"world_model.{key}: expected >= 1, got {getattr(self, key)}")
        if not 0.0 <= self.p_uncond <= 1.0:
            raise ValueError(f"world_model.p_uncond: expected a probability in [0, 1], got {self.p_uncond}")
        if not 0.0 <= self.ema_decay <= 1.0:
            raise ValueError(f"world_model.ema_decay: expected a value in [0, 1], got {self.ema_decay}")
        if self.context_noise < 0 or self.history_latents < 0:
            raise ValueError("world_model.context_noise and world_model.history_latents: expected >= 0")


def world_model_config(d: dict) -> WorldModelConfig:
    d = dict(d)
    d["denoiser"] = DenoiserConfig(**d.get("denoiser", {}))
    d["sampler"] = SamplerConfig(**d.get("sampler", {}))
    d["decoder"] = TextDecoderConfig(**d.get("decoder", {}))
    return WorldModelConfig(**d)


@dataclass
class DecoderFitConfig:
    """`fit.decoder`: training of the text decoder after the fit (models/world_model/decoder_fit.py)."""

    steps: int = 1500
    batch_size: int = 128
    lr: float = 1e-3
    sampled: bool = True  # also the model's own samples of next latents (open-loop replays), not only encodings
    passes: int = 1  # replays of every training episode for the sampled rows (fresh noise each)

    def __post_init__(self) -> None:
        at_least(self, "fit.decoder", 1, ("steps", "batch_size", "passes"))


@dataclass
class RolloutHeadsConfig:
    enabled: bool = True
    passes: int = 1  # open-loop replays of every training episode (fresh noise each)
    steps: int = 600  # optimiser steps on the replayed transitions
    batch_size: int = 256
    lr: float = 1e-3
    max_episodes: int = 2000  # training episodes replayed per pass (a random subset above this)
    # each replayed latent snapped to the nearest logged one (where the fit built a bank of them), so the
    # heads train on what simulation feeds them with evaluate.diffusion.snap=true (decisions.md)
    snap: bool = True
    snap_by_action: bool = True  # among the states the logged action led to, as evaluate.diffusion.snap_by_action

    def __post_init__(self) -> None:
        if self.passes < 1 or self.steps < 1 or self.batch_size < 1:
            raise ValueError(
                f"fit.rollout_heads: passes, steps and batch_size must be at least 1, got {self.passes}, "
                f"{self.steps}, {self.batch_size}"
            )
