"""`WorldModel`: what simulation, guidance and the readers use of a world model. `WorldModelModule` is
one; an oracle backed by a real environment or a nearest-neighbour model can be another."""

from __future__ import annotations

from typing import Any, Protocol

import torch

from adwm.diffusion.sampler import DiffusionSampler
from adwm.models.heads import Heads
from adwm.models.history import HistoryEncoder
from adwm.models.proposal_bank import ProposalBank


class WorldModel(Protocol):
    actions: list[str]  # the logged action vocabulary; candidate sets are (B, V) masks over it
    proposal_bank: ProposalBank | None  # encoded logged states (retrieval, snapping, nearest texts)
    sampler: DiffusionSampler
    abar: torch.Tensor  # (K,) cumulative noise schedule of the sampler
    history: HistoryEncoder
    heads: Heads
    hparams: Any  # `window`: history positions the context reads

    def eval(self) -> WorldModel: ...

    def encode(self, texts: list[str]) -> torch.Tensor:
        """Latents (N, L, d) of observation texts."""

    def vocab_embeddings(self) -> torch.Tensor:
        """(V, d_a) embeddings of the action vocabulary."""

    def eps(self, z_t: torch.Tensor, t: torch.Tensor, c: torch.Tensor, a: torch.Tensor | None) -> torch.Tensor:
        """Noise estimate at step t given context c and action a (None: the prior)."""

    def propose(self, z: torch.Tensor, mode: str | None = None) -> torch.Tensor:
        """Candidate sets (B, V) of latent states z."""

    def propose_next(
        self,
        z_next: torch.Tensor,
        c: torch.Tensor,
        a: torch.Tensor,
        prev: torch.Tensor,
        max_candidates: int = 0,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """Candidate sets (B, V) of simulated next states, as an edit of the current sets."""

    def cap_candidates(self, z: torch.Tensor, sets: torch.Tensor, max_candidates: int) -> torch.Tensor:
        """Sets cut to their `max_candidates` best-scored actions."""
