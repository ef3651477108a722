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
from adwm.policies.scoring import score_continuations


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
        if soft.shape[-1] != self.embed_dim:
            raise ValueError(
                f"projector: soft tokens have size {soft.shape[-1]} but the agent's input embeddings have "
                f"{self.embed_dim}; train a projector for this agent backbone"
            )
        if not (torch.is_grad_enabled() and soft.requires_grad):
            return self._scores_cached(tasks, soft, candidates)
        after = self.after_ids
        m, device = soft.shape[1], self.embedding.weight.device
        rows, owner, spans = [], [], []
        for i, (task, cands) in enumerate(zip(tasks, candidates)):
            prefix = self._prefix(task)
            for a in cands:
                act = list(self.policy._encode_action(a))
                rows.append((prefix, after + act))
                owner.append(i)
                spans.append(len(act))
        # left-padded rows [pad .. prefix, m soft slots, suffix, action]: every action ends at the last
        # position, so logits are needed only for the last max(span) + 1 positions
        width = max(len(p) + m + len(r) for p, r in rows)
        pad = self.tokenizer.pad_token_id or 0
        ids = torch.full((len(rows), width), pad, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        slot = torch.empty(len(rows), dtype=torch.long)  # first soft position of each row
        for j, (prefix, rest) in enumerate(rows):
            n = len(prefix) + m + len(rest)
            start = width - n
            ids[j, start : start + len(prefix)] = torch.tensor(prefix)
            ids[j, width - len(rest) :] = torch.tensor(rest)
            mask[j, start:] = 1
            slot[j] = start + len(prefix)
        owner_t = torch.tensor(owner)
        embeds = self.embedding(ids.to(device))  # (N, W, D)
        r = torch.arange(len(rows))[:, None].expand(-1, m).reshape(-1)
        c = (slot[:, None] + torch.arange(m)[None]).reshape(-1)
        embeds = embeds.index_put((r.to(device), c.to(device)), soft[owner_t.to(device)].reshape(-1, soft.shape[-1]))
        keep = max(spans) + 1
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        logits = self.model(
            inputs_embeds=embeds, attention_mask=mask.to(device), position_ids=pos.to(device), logits_to_keep=keep
        ).logits  # (N, keep, V): positions width-keep .. width-1
        logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)  # predicts the tokens at width-keep+1 ..
        tgt = ids[:, width - keep + 1 :].to(device)  # (N, keep - 1)
        in_action = torch.arange(keep - 1)[None] >= (keep - 1 - torch.tensor(spans))[:, None]
        tok = logp.gather(-1, tgt[..., None]).squeeze(-1) * in_action.to(device)
        sums = tok.sum(-1)  # (N,)
        return _per_state(sums, candidates)

    @torch.no_grad()
    def _scores_cached(
        self, tasks: Sequence[str], soft: torch.Tensor, candidates: Sequence[Sequence[str]]
    ) -> list[torch.Tensor]:
        """The same scores without gradient: each prompt runs once and its KV cache serves every
        candidate (`score_continuations`), about 4x less compute than one full row per candidate."""
        after = self.after_ids
        m, d = soft.shape[1], soft.shape[-1]
        prompts = [self._prefix(t) for t in tasks]
        width = max(len(p) for p in prompts) + m + len(after)
        pad = self.tokenizer.pad_token_id or 0
        device = self.embedding.weight.device
        embeds = torch.zeros(len(tasks), width, d, dtype=soft.dtype, device=device)
        mask = torch.zeros(len(tasks), width, dtype=torch.long)
        after_emb = self.embedding(torch.tensor(after, device=device))
        for i, p in enumerate(prompts):
            start = width - len(p) - m - len(after)
            embeds[i, start : start + len(p)] = self.embedding(torch.tensor(p, device=device))
            embeds[i, start + len(p) : start + len(p) + m] = soft[i]
            embeds[i, width - len(after) :] = after_emb
            mask[i, start:] = 1
        conts, owner = [], []
        for i, cands in enumerate(candidates):
            conts += [list(self.policy._encode_action(a)) for a in cands]
            owner += [i] * len(cands)
        out = score_continuations(self.model, (embeds, mask), conts, owner, pad, 1.0)
        sums = torch.tensor([float(lp.sum()) for lp in out.token_logprobs], dtype=torch.float32)
        return _per_state(sums, candidates)


def _per_state(sums: torch.Tensor, candidates: Sequence[Sequence[str]]) -> list[torch.Tensor]:
    """Split flat per-candidate scores (N,) into one tensor per state."""
    bounds = torch.tensor([0] + [len(c) for c in candidates]).cumsum(0).tolist()
    return [sums[bounds[i] : bounds[i + 1]] for i in range(len(candidates))]
