"""An LLM agent reading its observation as soft tokens: candidate-action scores, differentiable.

The prompt template is split at `{observation}`: the text before it (task, and
history if the template has it) and after it are tokenised as usual, the
observation slot holds `m` input embeddings, and each candidate action (plus
the policy's action suffix) follows. Scores are summed token log-likelihoods,
as in `LLMPolicy.action_scores`, so soft and text reading are comparable.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from adwm.policies.llm import LLMPolicy


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
        self.before, self.after = cfg.prompt_template.split("{observation}", 1)
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
        if soft.shape[-1] != self.embed_dim:
            raise ValueError(
                f"projector: soft tokens have size {soft.shape[-1]} but the agent's input embeddings have "
                f"{self.embed_dim}; train a projector for this agent backbone"
            )
        after = self.tokenizer(self.after, add_special_tokens=False)["input_ids"]
        rows, owner, spans = [], [], []
        for i, (task, cands) in enumerate(zip(tasks, candidates)):
            prefix = self._prefix(task)
            for a in cands:
                act = list(self.policy._encode_action(a))
                rows.append((prefix, i, after + act))
                owner.append(i)
                spans.append(len(act))
        m = soft.shape[1]
        lengths = [len(p) + m + len(rest) for p, _, rest in rows]
        width = max(lengths)
        device = self.embedding.weight.device
        embeds = torch.zeros(len(rows), width, self.embed_dim, dtype=soft.dtype, device=device)
        mask = torch.zeros(len(rows), width, dtype=torch.long, device=device)
        targets = torch.full((len(rows), width), -100, dtype=torch.long, device=device)
        for j, (prefix, i, rest) in enumerate(rows):
            ids_p = torch.tensor(prefix, device=device)
            ids_r = torch.tensor(rest, device=device)
            n_p, n = len(prefix), lengths[j]
            embeds[j, :n_p] = self.embedding(ids_p)
            embeds[j, n_p : n_p + m] = soft[i]
            embeds[j, n_p + m : n] = self.embedding(ids_r)
            mask[j, :n] = 1
            targets[j, n - spans[j] : n] = ids_r[-spans[j] :]  # the action tokens (right-padded rows)
        logits = self.model(inputs_embeds=embeds, attention_mask=mask).logits  # (N, W, V)
        logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)  # position k predicts token k + 1
        tgt = targets[:, 1:]
        tok = logp.gather(-1, tgt.clamp(min=0)[..., None]).squeeze(-1) * (tgt >= 0)
        sums = tok.sum(-1)  # (N,)
        bounds = torch.tensor([0] + [len(c) for c in candidates]).cumsum(0).tolist()
        return [sums[bounds[i] : bounds[i + 1]] for i in range(len(candidates))]
