"""Candidate actions of a latent state: the proposal head, retrieval of the nearest logged state, the
edit head for simulated next states, and the calibration of the heads' cuts to the logged set sizes."""

from __future__ import annotations

import torch

from adwm.models.proposal_bank import ProposalBank
from adwm.models.world_model.config import PROPOSALS


class CandidatesMixin:
    """Candidate-set methods of `WorldModelModule` (it holds `heads`, `proposal_bank`, the thresholds)."""

    def build_proposal_bank(
        self, texts: list[str], admissible: list[list[int]], arrivals: list[list[int]] | None = None
    ) -> None:
        """Index logged states (texts, admissible action ids, the action ids that led to them) for
        nearest-state retrieval and snapping."""
        self.proposal_bank = ProposalBank.build(
            self.encode(texts).flatten(1), admissible, len(self.actions), texts, arrivals
        )

    @torch.no_grad()
    def calibrate_proposal(self, texts: list[str], admissible: list[list[int]]) -> float:
        """Set the head's logit threshold so that it proposes as many actions in total as were admissible
        on these logged states (an eps-greedy agent's random branch needs sets of the right size)."""
        logits = self.heads.proposal_logits(self.encode(texts), self.vocab_embeddings()).flatten()
        self.proposal_threshold.fill_(cut_for_size(logits, sum(len(a) for a in admissible)))
        return float(self.proposal_threshold)

    @torch.no_grad()
    def calibrate_next_proposal(self, batches) -> float:
        """Set the edit head's logit threshold so that, on these logged transitions (collated batches),
        it proposes as many next actions in total as were admissible (the plain cut 0 proposed too few:
        decisions.md)."""
        logits, sizes = [], 0
        vocab = self.vocab_embeddings()
        for batch in batches:
            both = batch["has_admissible"] & batch["has_next_admissible"]
            if not both.any():
                continue
            z = self.encode(batch["texts"])
            c = self.context(z, batch["history_obs"], batch["history_actions"], vocab, batch["task"])
            a = vocab[batch["history_actions"][:, -1]]
            nxt = self.heads.next_proposal_logits(z[batch["next_obs"]], c, a, batch["admissible"], vocab)
            logits.append(nxt[both].flatten())
            sizes += int(batch["next_admissible"][both].sum())
        if not logits:
            return float(self.next_proposal_threshold)
        self.next_proposal_threshold.fill_(cut_for_size(torch.cat(logits), sizes))
        return float(self.next_proposal_threshold)

    @torch.no_grad()
    def propose(self, z: torch.Tensor, mode: str | None = None) -> torch.Tensor:
        """Candidate actions (B, V) bool over the logged vocabulary for latent states z (B, L, d)."""
        mode = check_proposal(mode or self.cfg.proposal)
        if mode == "retrieval":
            if self.proposal_bank is None:
                raise RuntimeError(
                    "world_model.proposal=retrieval: this world model has no proposal bank (fit builds it)"
                )
            return self.proposal_bank.lookup(z)
        sets = self.heads.proposal_logits(z, self.vocab_embeddings()) > self.proposal_threshold
        empty = ~sets.any(-1)
        if empty.any() and self.proposal_bank is not None:
            sets[empty] = self.proposal_bank.lookup(z[empty])
        return sets

    @torch.no_grad()
    def cap_candidates(self, z: torch.Tensor, sets: torch.Tensor, max_candidates: int) -> torch.Tensor:
        """Sets (B, V) of latent states z (B, L, d) cut to their `max_candidates` actions (0 = no cut) with
        the highest proposal-head scores: a logged first list can hold ~1000 valid actions (ScienceWorld)."""
        if not 0 < max_candidates < int(sets.sum(-1).max()):
            return sets
        logits = self.heads.proposal_logits(z, self.vocab_embeddings())
        top = logits.masked_fill(~sets, float("-inf")).topk(max_candidates, dim=-1).indices
        return sets & torch.zeros_like(sets).scatter_(1, top, True)

    @torch.no_grad()
    def propose_next(
        self,
        z_next: torch.Tensor,
        c: torch.Tensor,
        a: torch.Tensor,
        prev: torch.Tensor,
        max_candidates: int = 0,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """Candidate actions (B, V) bool of simulated next states, as an edit of the current sets prev (B, V);
        a row left empty falls back to `propose` on the state alone, then to the whole vocabulary. With
        `max_candidates` > 0 a larger set keeps its highest-scoring actions under the edit head: every
        candidate is scored by the agent each step, so an untrained head's whole-vocabulary sets would
        make simulation cost grow with the log's vocabulary (logged lists are far smaller: builtin <= 20).

        Without a generator the set is the calibrated cut of the edit head's logits. With one, the set is a
        draw: each action joins with the head's probability sigmoid(logit) that it is admissible, so an
        action the sampled latent leaves uncertain is offered some of the time rather than never."""
        logits = self.heads.next_proposal_logits(z_next, c, a, prev, self.vocab_embeddings())
        if generator is None:
            sets = logits > self.next_proposal_threshold
        else:
            sets = torch.rand(logits.shape, generator=generator).to(logits.device) < torch.sigmoid(logits)
        empty = ~sets.any(-1)
        if empty.any():
            sets[empty] = self.propose(z_next[empty])
        sets[~sets.any(-1)] = True  # never an empty set: the whole logged vocabulary as the last resort
        if 0 < max_candidates < sets.size(-1):
            top = logits.masked_fill(~sets, float("-inf")).topk(max_candidates, dim=-1).indices
            sets = sets & torch.zeros_like(sets).scatter_(1, top, True)
        return sets


def cut_for_size(logits: torch.Tensor, size: int) -> float:
    """A logit threshold above which `size` of the flat `logits` lie: halfway between the size-th
    and the (size+1)-th largest."""
    k = min(size, logits.numel() - 1)
    top = logits.topk(k + 1).values
    return float(top[-2:].mean()) if k > 0 else float(top[0])


def check_proposal(mode: str) -> str:
    if mode not in PROPOSALS:
        raise ValueError(f"world_model.proposal: unknown mode '{mode}'; choose from {list(PROPOSALS)}")
    return mode
