"""How the evaluated agent reads a simulated latent state (`ablation.reader`): the text of the nearest logged
observation (`logged`: with snapping, the observation the state is), the text the world model's decoder
writes for it (`decoded`: a state the log never held reads as itself), or soft tokens through the projector
(`projector`, the paper's G_psi)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
import torch

from adwm.policies.base import AgentState
from adwm.policies.config import score_key
from adwm.policies.llm import LLMPolicy
from adwm.policies.prefix_tree import PrefixTree
from adwm.runtime import costs


class LatentReader(Protocol):
    def scores(
        self, z: torch.Tensor, tasks: list[str], candidates: list[list[str]], texts: list[str] | None = None
    ) -> list[torch.Tensor]:
        """Summed token log-likelihood of each candidate for the agent in latent state z (B, L, d); `texts`:
        the state's text where the simulator keeps one (`DecodedTextReader.next_texts`), else None."""

    def write(
        self, z: torch.Tensor, tasks: list[str], rngs: Sequence[np.random.Generator], texts: list[str] | None = None
    ) -> list[str]:
        """The action the agent writes in latent state z (B, L, d) (free-form logs), one generator a state."""


class SoftTokenReader:
    """pi_e reads G_psi(z) as soft tokens; differentiable in z (continuation guidance needs it)."""

    def __init__(self, projector) -> None:
        self.projector = projector

    def scores(self, z, tasks, candidates, texts=None) -> list[torch.Tensor]:
        return self.projector.soft_scores(z, tasks, candidates)

    def write(self, z, tasks, rngs, texts=None) -> list[str]:
        return self.projector.write(z, tasks, rngs)


class TextReader:
    """pi_e reads a text of the latent state (`texts_of`); not differentiable, so a gradient through the
    agent's reading (guidance.continuation=full with guidance.method=gradient) needs the projector.

    The agent's score of an action depends only on the prompt (the task and the text: the reader keeps no
    history) and the action, so scores are kept in `cache` (one dict per checkpoint and prompt,
    `score_key`), shared by every policy of a family that reads with the same agent: a text read again, by
    this rollout, another one or another policy, costs no forward pass. A writing agent's next-token logits
    are kept the same way, in a `PrefixTree` of at most `write_cache_mb` MB per checkpoint and prompt (0:
    none): writing after a text again runs the model only past the prefixes already taken."""

    def __init__(
        self, world_model, policy: LLMPolicy, cache: dict | None = None, write_cache_mb: float = 256.0
    ) -> None:
        self.world_model, self.policy = world_model, policy
        self.cache: dict[tuple[str, str], dict[str, float]] = (
            {} if cache is None else cache.setdefault(("reader", score_key(policy.cfg)), {})
        )
        self.prompts: dict[tuple[str, str], list[int]] = {}
        self.tree = None
        if write_cache_mb > 0:
            key = ("writer", score_key(policy.cfg))
            self.tree = (
                PrefixTree(write_cache_mb) if cache is None else cache.setdefault(key, PrefixTree(write_cache_mb))
            )

    def texts_of(self, z: torch.Tensor) -> list[str]:
        """The text the agent reads for each latent state (B, L, d)."""
        raise NotImplementedError

    @torch.no_grad()
    def scores(self, z, tasks, candidates, texts=None) -> list[torch.Tensor]:
        read = self.texts_of(z) if texts is None else texts
        known = [self.cache.setdefault((t, o), {}) for t, o in zip(tasks, read)]
        missing = {}  # (task, text) -> actions not scored yet, in first-seen order
        for t, i, c, k in zip(tasks, read, candidates, known):
            new = [a for a in c if a not in k]
            if new:
                todo = missing.setdefault((t, i), [])
                todo += [a for a in new if a not in todo]
        costs.count("reader/states", len(tasks))
        costs.count("reader/states_scored", len(missing))
        if missing:
            states = [AgentState(t, o, [], todo) for (t, o), todo in missing.items()]
            for (key, todo), scored in zip(missing.items(), self.policy.action_scores(states)):
                self.cache[key].update(zip(todo, scored.tolist()))
        return [torch.tensor([k[a] for a in c], dtype=torch.float32) for c, k in zip(candidates, known)]

    @torch.no_grad()
    def write(self, z, tasks, rngs, texts=None) -> list[str]:
        prompts = []
        for t, o in zip(tasks, self.texts_of(z) if texts is None else texts):  # a text's prompt is tokenised once
            if (t, o) not in self.prompts:
                self.prompts[t, o] = self.policy.prompt_ids(AgentState(t, o, [], None))
            prompts.append(self.prompts[t, o])
        return self.policy.write(prompts, rngs, self.tree)


class NearestTextReader(TextReader):
    """`ablation.reader=logged`: the text of the nearest logged observation (a control once the world model
    writes its states: it cannot show a state the log never held)."""

    def __init__(self, world_model, policy: LLMPolicy, cache: dict | None = None, write_cache_mb: float = 256.0):
        bank = world_model.proposal_bank
        if bank is None or bank.texts is None:
            raise RuntimeError("ablation.reader=logged: the world model has no bank of logged texts (fit builds it)")
        super().__init__(world_model, policy, cache, write_cache_mb)
        self.texts = bank.texts

    def texts_of(self, z: torch.Tensor) -> list[str]:
        return [self.texts[i] for i in self.world_model.proposal_bank.nearest(z).tolist()]


class DecodedTextReader(TextReader):
    """`ablation.reader=decoded`: the text the world model's decoder writes for the latent
    (models/text_decoder.py). In a rollout the simulator keeps each state's text: the first is the logged
    start, each next one is written by `next_texts` after what the rollout read before (the task and the last
    texts: what stays the same is copied from them); `texts_of` (a latent with no text before it, as
    continuation guidance scores) decodes alone."""

    keeps_texts = True

    def __init__(self, world_model, policy: LLMPolicy, cache: dict | None = None, write_cache_mb: float = 256.0):
        self.sources = world_model.require_text_decoder().cfg.sources  # the texts read before that it decodes after
        super().__init__(world_model, policy, cache, write_cache_mb)

    def texts_of(self, z: torch.Tensor) -> list[str]:
        with costs.section("reader/decode"):
            return self.world_model.decode_text(z)

    def next_texts(self, z_next: torch.Tensor, tasks: list[str], read: list[list[str]]) -> list[str]:
        """The text of each next latent (B, L, d) after what its rollout read before: its task and the texts
        `read` (oldest first)."""
        decoder = self.world_model.require_text_decoder()
        with costs.section("reader/decode"):
            return self.world_model.decode_text(z_next, [decoder.source_text(t, r) for t, r in zip(tasks, read)])
