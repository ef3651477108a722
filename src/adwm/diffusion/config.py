"""Configs of the diffusion sampler and denoiser (light: `adwm config` reads them without importing torch)."""

from __future__ import annotations

from dataclasses import dataclass

from adwm.runtime.checks import at_least, one_of, require


@dataclass
class SamplerConfig:
    train_steps: int = 100  # T of the forward process; latents need far fewer than images' 1000
    schedule: str = "cosine"  # cosine keeps more signal at mid t than linear for small T
    method: str = "ddim"  # ddim: deterministic, few steps; ddpm: ancestral
    # reverse steps at sampling time (ddim subsamples the T steps); 5: state accuracy and estimates no worse
    # than with 20 at a quarter of the denoiser's cost (decisions.md: sampler steps)
    steps: int = 5
    ddim_eta: float = 0.0  # 0: deterministic DDIM; 1: DDPM-like noise

    def __post_init__(self) -> None:
        one_of(self.method, "world_model.sampler.method", ("ddim", "ddpm"))
        at_least(self, "world_model.sampler", 1, ("train_steps",))
        require(
            1 <= self.steps <= self.train_steps,
            "world_model.sampler.steps",
            self.steps,
            f"1..{self.train_steps} (world_model.sampler.train_steps)",
        )
        require(self.ddim_eta >= 0, "world_model.sampler.ddim_eta", self.ddim_eta, ">= 0")


@dataclass
class DenoiserConfig:
    backbone: str = "mlp"  # mlp | transformer
    hidden: int = 384  # the latent is small (L*d_z = 128): a wide MLP is fast and accurate on CPU
    layers: int = 4
    heads: int = 4  # transformer only

    def __post_init__(self) -> None:
        one_of(self.backbone, "world_model.denoiser.backbone", ("mlp", "transformer"))
        at_least(self, "world_model.denoiser", 1, ("hidden", "layers", "heads"))
