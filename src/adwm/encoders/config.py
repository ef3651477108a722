"""The observation encoder's config (light: `adwm config` reads it without importing torch)."""

from __future__ import annotations

from dataclasses import dataclass

from adwm.runtime.checks import at_least, require


@dataclass
class EncoderConfig:
    name: str = "tiny"  # tiny | minilm | hf
    model: str = ""  # hf: Hugging Face name or local path; minilm: the packaged model folder
    n_latents: int = 4  # L latent tokens per observation
    d_latent: int = 32  # d_z per latent token
    trainable: bool = True  # false: the frozen-encoder ablation (no gradient reaches the encoder)
    max_tokens: int = 192  # builtin observations are ~100 tokens
    vocab_size: int = 1024  # tiny: BPE trained on the logs' observations
    d_model: int = 64  # tiny: width; the encoder runs on ~160 texts per step, so width sets the step time
    layers: int = 2  # tiny
    heads: int = 4

    def __post_init__(self) -> None:
        at_least(
            self, "encoder", 1, ("n_latents", "d_latent", "max_tokens", "vocab_size", "d_model", "layers", "heads")
        )
        require(
            self.d_model % self.heads == 0,
            "encoder.heads",
            self.heads,
            f"a divisor of encoder.d_model ({self.d_model})",
        )
        require(
            self.d_latent % self.heads == 0,
            "encoder.heads",
            self.heads,
            f"a divisor of encoder.d_latent ({self.d_latent})",
        )
