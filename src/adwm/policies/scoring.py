"""Batched token log-probabilities of continuations after prompts, and batched sampling.

Prompt and continuation are tokenised separately and their ids concatenated,
so a continuation's token span is exact by construction (no BPE merge across
the boundary). Each prompt runs once; its KV cache is index-selected for each
of its continuations (`Cache.reorder_cache`), so scoring |A| candidates costs
one prompt pass plus |A| short passes, not |A| full ones.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from adwm.policies.base import sample_index


def _cache_name(model: torch.nn.Module) -> str:
    """transformers 5 renamed `past_key_values` to `cache` (argument and output)."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


@dataclass
class ContinuationScores:
    token_logprobs: list[np.ndarray]  # per continuation, float64 log p(token | prefix) at the given temperature
    greedy: list[bool]  # whether every token of the continuation is the argmax


def _left_pad(seqs: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, width - len(s) :] = torch.tensor(s, dtype=torch.long)
        mask[i, width - len(s) :] = 1
    return ids, mask


def _scaled_log_softmax(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    logits = logits.double()
    return torch.log_softmax(logits / temperature if temperature > 0 else logits, dim=-1)


def _prompt_pass(model: torch.nn.Module, prompts, pad_id: int):
    """Run left-padded prompts once with the KV cache on; logits only at the last position.

    `prompts` are token-id lists, or a pair (embeddings (B, Lp, D), mask (B, Lp)) already left-padded."""
    device = next(model.parameters()).device
    if isinstance(prompts, tuple):
        embeds, mask = prompts
        inputs = {"inputs_embeds": embeds.to(device)}
    else:
        ids, mask = _left_pad(prompts, pad_id)  # (B, Lp)
        inputs = {"input_ids": ids.to(device)}
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    out = model(
        **inputs,
        attention_mask=mask.to(device),
        position_ids=pos.to(device),
        use_cache=True,
        logits_to_keep=1,
    )
    return out, mask


@torch.no_grad()
def score_continuations(
    model: torch.nn.Module,
    prompts,
    continuations: Sequence[Sequence[int]],
    owner: Sequence[int],
    pad_id: int,
    temperature: float = 1.0,
) -> ContinuationScores:
    """Token log-probs of `continuations[j]` after `prompts[owner[j]]` (token ids, or left-padded
    (embeddings, mask) as in `_prompt_pass`).

    With temperature T > 0 the log-softmax is taken of logits / T; T = 0 uses
    the raw logits (callers read `greedy` for the argmax rule).
    """
    device = next(model.parameters()).device
    out, p_mask = _prompt_pass(model, prompts, pad_id)
    first = _scaled_log_softmax(out.logits[:, -1], temperature).cpu()  # (B, V)
    first_arg = out.logits[:, -1].argmax(-1).cpu()
    name = _cache_name(model)
    cache = getattr(out, name)
    idx = torch.tensor(owner, dtype=torch.long)
    cache.reorder_cache(idx.to(device))

    width = max(len(c) for c in continuations)
    c_ids = torch.full((len(continuations), width), pad_id, dtype=torch.long)  # (N, La), right-padded
    c_mask = torch.zeros_like(c_ids)
    for j, c in enumerate(continuations):
        c_ids[j, : len(c)] = torch.tensor(c, dtype=torch.long)
        c_mask[j, : len(c)] = 1
    mask = torch.cat([p_mask[idx], c_mask], dim=1)  # (N, Lp + La)
    pos = p_mask.sum(-1)[idx, None] + torch.arange(width)[None]  # (N, La)
    out = model(
        input_ids=c_ids.to(device),
        attention_mask=mask.to(device),
        position_ids=pos.to(device),
        use_cache=False,
        **{name: cache},
    )
    logp = _scaled_log_softmax(out.logits, temperature).cpu()  # (N, La, V)
    arg = out.logits.argmax(-1).cpu()

    token_logprobs, greedy = [], []
    for j, c in enumerate(continuations):
        toks = torch.tensor(c, dtype=torch.long)
        lp = torch.empty(len(c), dtype=torch.float64)
        lp[0] = first[owner[j], toks[0]]
        is_greedy = bool(first_arg[owner[j]] == toks[0])
        if len(c) > 1:
            lp[1:] = logp[j, torch.arange(len(c) - 1), toks[1:]]
            is_greedy = is_greedy and bool((arg[j, : len(c) - 1] == toks[1:]).all())
        token_logprobs.append(lp.numpy())
        greedy.append(is_greedy)
    return ContinuationScores(token_logprobs, greedy)


def summed_logprobs(
    model: torch.nn.Module, prompts, continuations: Sequence[Sequence[int]], owner: Sequence[int], pad_id: int
) -> torch.Tensor:
    """Differentiable sum of token log-probs (T = 1) of `continuations[j]` after `prompts[owner[j]]`
    -> (N,), float32 or the model's wider precision. The same KV-cache scheme as `score_continuations`: gradient reaches the prompt
    embeddings through the cache, at the cost of one prompt pass, not one per continuation."""
    device = next(model.parameters()).device
    out, p_mask = _prompt_pass(model, prompts, pad_id)
    dtype = torch.promote_types(out.logits.dtype, torch.float32)  # float32 at least, float64 if the model is
    first = torch.log_softmax(out.logits[:, -1].to(dtype), dim=-1)  # (B, V)
    name = _cache_name(model)
    cache = getattr(out, name)
    idx = torch.tensor(owner, dtype=torch.long)
    cache.reorder_cache(idx.to(device))
    width = max(len(c) for c in continuations)
    c_ids = torch.full((len(continuations), width), pad_id, dtype=torch.long)
    c_mask = torch.zeros_like(c_ids)
    for j, c in enumerate(continuations):
        c_ids[j, : len(c)] = torch.tensor(c, dtype=torch.long)
        c_mask[j, : len(c)] = 1
    total = first[idx.to(device), c_ids[:, 0].to(device)]  # first token, predicted by the prompt
    if width > 1:
        mask = torch.cat([p_mask[idx], c_mask[:, :-1]], dim=1)
        pos = p_mask.sum(-1)[idx, None] + torch.arange(width - 1)[None]
        logits = model(
            input_ids=c_ids[:, :-1].to(device),
            attention_mask=mask.to(device),
            position_ids=pos.to(device),
            use_cache=False,
            **{name: cache},
        ).logits  # (N, La - 1, V): predicts tokens 1 .. La - 1
        logp = torch.log_softmax(logits.to(dtype), dim=-1).gather(-1, c_ids[:, 1:, None].to(device)).squeeze(-1)
        total = total + (logp * c_mask[:, 1:].to(device)).sum(-1)
    return total


@torch.no_grad()
def sample_continuations(
    model: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    rngs: Sequence[np.random.Generator],
    pad_id: int,
    stop: callable,
    temperature: float,
    max_new_tokens: int,
) -> list[list[int]]:
    """Sample token ids after each prompt until `stop(ids)` is true or the budget ends.

    Every token is drawn from softmax(logits / T) with the row's own numpy
    generator (argmax at T = 0), so a row's draw does not depend on the batch.
    """
    device = next(model.parameters()).device
    out, mask = _prompt_pass(model, prompts, pad_id)
    name = _cache_name(model)
    generated: list[list[int]] = [[] for _ in prompts]
    done = [False] * len(prompts)
    next_pos = mask.sum(-1)
    for _ in range(max_new_tokens):
        logits = out.logits[:, -1].double().cpu()
        step = []
        for i in range(len(prompts)):
            if done[i]:
                step.append(pad_id)
                continue
            if temperature > 0:
                tok = sample_index(torch.log_softmax(logits[i] / temperature, -1).numpy(), rngs[i])
            else:
                tok = int(logits[i].argmax())
            generated[i].append(tok)
            done[i] = stop(generated[i])
            step.append(tok)
        if all(done):
            break
        mask = torch.cat([mask, torch.ones((len(prompts), 1), dtype=torch.long)], dim=1)
        out = model(
            input_ids=torch.tensor(step, dtype=torch.long)[:, None].to(device),
            attention_mask=mask.to(device),
            position_ids=next_pos[:, None].to(device),
            use_cache=True,
            **{name: getattr(out, name)},
        )
        next_pos = next_pos + 1
    return generated
