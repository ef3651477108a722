"""An LLM agent reading its observation as soft tokens: candidate-action scores, differentiable.

The prompt template is split at `{observation}`: the text before it (task, and
history if the template has it) and after it are tokenised as usual, the
observation slot holds `m` input embeddings, and each candidate action (plus
the policy's action suffix) follows. Scores are summed token log-likelihoods,
as in `LLMPolicy.action_scores`, so soft and text reading are comparable.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from adwm.policies.llm import LLMPolicy
from adwm.policies.scoring import score_continuations, summed_logprobs


class SoftPromptScorer:
    def __init__(self, policy: LLMPolicy, where: str = "policy") -> None:
        cfg = policy.cfg
        if "{observation}" not in cfg.prompt_template:
            raise ValueError(f"{where}.prompt_template: soft-token reading needs an {{observation}} field")
        if cfg.history_turns > 0 and "{history}" in cfg.prompt_template:
            raise ValueError(
                f"{where}.history_turns: soft-token reading supports 0 (the observation is the state); got "
                f"{cfg.history_turns}"
            )
        self.policy, self.model, self.tokenizer = policy, policy.model, policy.tokenizer
        self.before, after = cfg.prompt_template.split("{observation}", 1)
        self.after_ids = self.tokenizer(after, add_special_tokens=False)["input_ids"]  # the same for every state
        self.embedding = self.model.get_input_embeddings()

    @property
    def embed_dim(self) -> int:
        return self.embedding.weight.shape[1]

    def _prefix(self, task: str) -> list[int]:
        return self.tokenizer(self.before.format(task=task, history=""), add_special_tokens=True)["input_ids"]

    def scores(
        self, tasks: Sequence[str], soft: torch.Tensor, candidates: Sequence[Sequence[str]]
    ) -> list[torch.Tensor]:
        """Summed log-likelihood of each candidate of state i after [prefix(task_i), soft_i, suffix];
        soft (B, m, D) -> per state a (|candidates_i|,) tensor with gradient to `soft`."""
        self._check(soft)
        return _per_state(self._summed(tasks, soft, candidates), candidates)

    def _prompts(self, tasks: Sequence[str], soft: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The prompts [prefix(task_i), soft_i, suffix] as left-padded input embeddings (B, W, D) and mask."""
        after = self.after_ids
        m, d = soft.shape[1], soft.shape[-1]
        prompts = [self._prefix(t) for t in tasks]
        width = max(len(p) for p in prompts) + m + len(after)
        device = self.embedding.weight.device
        rows, mask = [], torch.zeros(len(tasks), width, dtype=torch.long)
        after_emb = self.embedding(torch.tensor(after, device=device))
        for i, p in enumerate(prompts):
            pad_n = width - len(p) - m - len(after)
            row = [self.embedding(torch.tensor(p, device=device)), soft[i].to(device), after_emb]
            rows.append(torch.cat([soft.new_zeros(pad_n, d).to(device)] + row))
            mask[i, pad_n:] = 1
        return torch.stack(rows), mask

    @torch.no_grad()
    def write(self, tasks: Sequence[str], soft: torch.Tensor, rngs: Sequence[np.random.Generator]) -> list[str]:
        """The action each state's agent writes after [prefix(task_i), soft_i, suffix] (free-form actions)."""
        self._check(soft)
        return self.policy.write(self._prompts(tasks, soft), rngs)

    def _check(self, soft: torch.Tensor) -> None:
        if soft.shape[-1] != self.embed_dim:
            raise ValueError(
                f"projector: soft tokens have size {soft.shape[-1]} but the agent's input embeddings have "
                f"{self.embed_dim}; train a projector for this agent backbone"
            )

    def _summed(self, tasks: Sequence[str], soft: torch.Tensor, candidates: Sequence[Sequence[str]]) -> torch.Tensor:
        """Flat per-candidate scores (N,). Each prompt [prefix, soft, suffix] runs once and its KV cache
        serves every candidate (about 4x less compute than one full row per candidate); with gradient
        enabled and `soft` requiring it, the scores are differentiable in `soft` through the cache."""
        pad = self.tokenizer.pad_token_id or 0
        grad = torch.is_grad_enabled() and soft.requires_grad
        with torch.set_grad_enabled(grad):
            embeds, mask = self._prompts(tasks, soft)  # (B, W, D) left-padded
            conts, owner = [], []
            for i, cands in enumerate(candidates):
                conts += [list(self.policy._encode_action(a)) for a in cands]
                owner += [i] * len(cands)
            if grad:
                return summed_logprobs(self.model, (embeds, mask), conts, owner, pad)
            out = score_continuations(self.model, (embeds.detach(), mask), conts, owner, pad, 1.0)
        return torch.tensor([float(lp.sum()) for lp in out.token_logprobs], dtype=torch.float32)


def _per_state(sums: torch.Tensor, candidates: Sequence[Sequence[str]]) -> list[torch.Tensor]:
    """Split flat per-candidate scores (N,) into one tensor per state."""
    bounds = torch.tensor([0] + [len(c) for c in candidates]).cumsum(0).tolist()
    return [sums[bounds[i] : bounds[i + 1]] for i in range(len(candidates))]
