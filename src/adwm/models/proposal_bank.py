"""Candidate actions by retrieval: the admissible list of the nearest logged state in latent space.

The fallback of the learned proposal head (and its own `world_model.proposal=retrieval` mode):
it can only return sets that were really admissible somewhere in the logs, which keeps an
eps-greedy agent's random branch on real actions where the head is unsure.
"""

from __future__ import annotations

import torch


class ProposalBank:
    """Flat latents (N, D) of logged states with their admissible action ids (ragged, as flat + offsets)."""

    def __init__(
        self,
        latents: torch.Tensor,
        ids: torch.Tensor,
        offsets: torch.Tensor,
        n_actions: int,
        texts: list[str] | None = None,
    ) -> None:
        if latents.size(0) == 0:
            raise ValueError("proposal bank: no logged state with an admissible list to retrieve from")
        if offsets.numel() != latents.size(0) + 1:
            raise ValueError(f"proposal bank: {latents.size(0)} latents but {offsets.numel() - 1} admissible lists")
        if texts is not None and len(texts) != latents.size(0):
            raise ValueError(f"proposal bank: {latents.size(0)} latents but {len(texts)} texts")
        self.latents, self.ids, self.offsets, self.n_actions = latents, ids, offsets, n_actions
        self.texts = texts  # the logged observations, for readers that need text (the no-projector ablation)
        # dense multi-hot once: lookups are then a single gather (N x V bools, ~8 MB for 30k x 262)
        rows = torch.repeat_interleave(torch.arange(latents.size(0)), offsets.diff())
        self.sets = torch.zeros(latents.size(0), n_actions, dtype=torch.bool)
        self.sets[rows, ids] = True

    @classmethod
    def build(
        cls, latents: torch.Tensor, admissible: list[list[int]], n_actions: int, texts: list[str] | None = None
    ) -> ProposalBank:
        ids = torch.tensor([a for adm in admissible for a in adm], dtype=torch.long)
        offsets = torch.tensor([0] + [len(adm) for adm in admissible]).cumsum(0)
        return cls(latents.detach().float().cpu(), ids, offsets, n_actions, texts)

    def nearest(self, z: torch.Tensor, chunk: int = 8192) -> torch.Tensor:
        """Index of the nearest bank latent (Euclidean) for each row of z (B, ...) -> (B,)."""
        q = z.detach().flatten(1).float().cpu()
        best_d = torch.full((q.size(0),), float("inf"))
        best_i = torch.zeros(q.size(0), dtype=torch.long)
        for start in range(0, self.latents.size(0), chunk):
            d, i = torch.cdist(q, self.latents[start : start + chunk]).min(-1)
            better = d < best_d
            best_d, best_i = torch.where(better, d, best_d), torch.where(better, i + start, best_i)
        return best_i

    def lookup(self, z: torch.Tensor) -> torch.Tensor:
        """Admissible multi-hot (B, V) of the nearest logged state of each latent."""
        return self.sets[self.nearest(z)].to(z.device)

    def state_dict(self) -> dict:
        return {
            "latents": self.latents,
            "ids": self.ids,
            "offsets": self.offsets,
            "n_actions": self.n_actions,
            "texts": self.texts,
        }

    @classmethod
    def from_state_dict(cls, state: dict) -> ProposalBank:
        return cls(state["latents"], state["ids"], state["offsets"], state["n_actions"], state.get("texts"))
