"""Batched token log-probabilities of continuations after prompts, and batched sampling.

Prompt and continuation are tokenised separately and their ids concatenated,
so a continuation's token span is exact by construction (no BPE merge across
the boundary). Scoring packs each prompt and all of its continuations into one
row, [prompt, c_1[:-1], c_2[:-1], ...], under a block attention mask: a
continuation token sees its prompt and its own earlier tokens, never another
continuation. One forward pass scores |A| candidates at the cost of the prompt
plus their tokens, with no copy of the prompt's keys and values per candidate,
and the vocabulary projection runs only where a continuation token is predicted.
Rows are sorted by width and cut into forward passes of at most PACK_TOKENS
positions, so little of a pass is padding (about 3x faster than one prompt pass
whose KV cache is copied per candidate; docs/decisions.md: packed scoring).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from adwm.runtime import costs


@dataclass
class ContinuationScores:
    token_logprobs: list[np.ndarray]  # per continuation, float64 log p(token | prefix) at the given temperature
    greedy: list[bool]  # whether every token of the continuation is the argmax


def _scaled_log_softmax(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    logits = logits.double()
    return torch.log_softmax(logits / temperature if temperature > 0 else logits, dim=-1)


# One packed forward holds at most PACK_TOKENS positions (rows x width) and PACK_BUDGET attention pairs
# (rows x width^2: the mask and each head's weights)
PACK_TOKENS = 1 << 11


PACK_BUDGET = 1 << 23


def _transformers_model(model: torch.nn.Module) -> torch.nn.Module:
    """The causal LM itself, also under a PEFT wrapper (its adapters sit inside the wrapped modules)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def _prompt_rows(prompts) -> tuple[list, bool]:
    """Each prompt unpadded: a token-id list, or (for a left-padded (embeddings, mask) pair) a (p_i, D) tensor."""
    if isinstance(prompts, tuple):
        embeds, mask = prompts
        return [embeds[i, mask[i].bool()] for i in range(embeds.size(0))], True
    return [list(p) for p in prompts], False


def _packed_hidden(
    model: torch.nn.Module, prompts, continuations: Sequence[Sequence[int]], owner: Sequence[int], pad_id: int
) -> torch.Tensor:
    """The last hidden state at every position that predicts a continuation token -> (sum |c_j|, D), the
    tokens of continuation 0 first, then 1, ...: the prompt's last position predicts c_j[0], the position of
    c_j[k - 1] predicts c_j[k]."""
    if any(len(c) == 0 for c in continuations):
        raise ValueError("scoring: every continuation needs at least one token")
    if not continuations:
        return torch.zeros(0, model.get_input_embeddings().weight.shape[1])
    device = next(model.parameters()).device
    dtype = next(model.parameters()).dtype
    rows, soft = _prompt_rows(prompts)
    costs.count("agent/states_read", len(rows))
    lens = [int(r.shape[0]) if soft else len(r) for r in rows]
    by_row: list[list[int]] = [[] for _ in rows]
    for j, i in enumerate(owner):
        by_row[i].append(j)
    # packed rows: a prompt and its continuations, or a share of them where they would make the row wider
    # than PACK_TOKENS (the prompt is then repeated in each of its rows)
    packed: list[tuple[int, list[int], int]] = []  # (prompt, its continuations in the row, row width)
    for i, js in enumerate(by_row):
        share, width = [], lens[i]
        for j in js:
            if share and width + len(continuations[j]) - 1 > PACK_TOKENS:
                packed.append((i, share, width))
                share, width = [], lens[i]
            share.append(j)
            width += len(continuations[j]) - 1
        if share:
            packed.append((i, share, width))
    chunks, chunk = [], []  # rows of similar width together, so little of a forward pass is padding
    for k in sorted(range(len(packed)), key=lambda k: -packed[k][2]):
        wide = packed[chunk[0]][2] if chunk else 0
        if chunk and ((len(chunk) + 1) * wide > PACK_TOKENS or (len(chunk) + 1) * wide**2 > PACK_BUDGET):
            chunks.append(chunk)
            chunk = []
        chunk.append(k)
    chunks.append(chunk)
    decoder, embed = _transformers_model(model).base_model, model.get_input_embeddings()
    hidden, order = [], []  # per chunk the predicting states; the continuations in processing order
    for chunk in chunks:
        width = max(packed[k][2] for k in chunk)
        ids = torch.full((len(chunk), width), pad_id, dtype=torch.long)
        seg = torch.full((len(chunk), width), -1, dtype=torch.long)  # 0 prompt, s > 0 continuation s, -1 pad
        pos = torch.zeros((len(chunk), width), dtype=torch.long)
        at_row, at_col = [], []
        for r, k in enumerate(chunk):
            i, share, _ = packed[k]
            p = lens[i]
            if not soft:
                ids[r, :p] = torch.tensor(rows[i], dtype=torch.long)
            seg[r, :p], pos[r, :p] = 0, torch.arange(p)
            col = p
            for s, j in enumerate(share, start=1):
                c, n = continuations[j], len(continuations[j]) - 1
                ids[r, col : col + n] = torch.tensor(c[:-1], dtype=torch.long)
                seg[r, col : col + n], pos[r, col : col + n] = s, p + torch.arange(n)
                at_row += [r] * (n + 1)
                at_col += [p - 1, *range(col, col + n)]
                order.append(j)
                col += n
        q = torch.arange(width)
        allowed = (q[:, None] >= q[None, :]) & (
            (seg[:, :, None] == seg[:, None, :]) | ((seg[:, None, :] == 0) & (seg[:, :, None] > 0))
        )  # causal, within a segment or from a continuation to its prompt; a pad sees itself
        mask = torch.zeros(allowed.shape, dtype=dtype).masked_fill_(~allowed, torch.finfo(dtype).min)
        x = embed(ids.to(device))
        if soft:  # the given prompt embeddings (with their gradient), then the continuation tokens
            prompt_of = [packed[k][0] for k in chunk]
            x = torch.stack(
                [torch.cat([rows[i].to(device, x.dtype), x[r, lens[i] :]]) for r, i in enumerate(prompt_of)]
            )
        out = decoder(
            inputs_embeds=x, attention_mask=mask[:, None].to(device), position_ids=pos.to(device), use_cache=False
        )
        costs.count("agent/forward_passes")
        hidden.append(out.last_hidden_state[torch.tensor(at_row), torch.tensor(at_col)])
    h = torch.cat(hidden)
    sizes = torch.tensor([len(continuations[j]) for j in order])
    first = torch.empty(len(continuations), dtype=torch.long)  # where continuation j's tokens start in h
    first[torch.tensor(order)] = sizes.cumsum(0) - sizes
    lengths = torch.tensor([len(c) for c in continuations])
    start = lengths.cumsum(0) - lengths
    index = (first - start).repeat_interleave(lengths) + torch.arange(int(lengths.sum()))
    return h[index.to(h.device)]


def _packed_logits(model, prompts, continuations, owner, pad_id) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits predicting every continuation token (sum |c_j|, V) and those tokens (sum |c_j|,)."""
    inner = _transformers_model(model)
    logits = inner.get_output_embeddings()(_packed_hidden(model, prompts, continuations, owner, pad_id))
    cap = getattr(inner.config, "final_logit_softcapping", None)
    if cap:
        logits = cap * torch.tanh(logits / cap)
    tokens = torch.tensor([t for c in continuations for t in c], dtype=torch.long, device=logits.device)
    return logits, tokens


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
    (embeddings (B, Lp, D), mask (B, Lp)) left-padded, as `_prompt_rows` reads them).

    With temperature T > 0 the log-softmax is taken of logits / T; T = 0 uses
    the raw logits (callers read `greedy` for the argmax rule).
    """
    logits, tokens = _packed_logits(model, prompts, continuations, owner, pad_id)
    logp = _scaled_log_softmax(logits, temperature).gather(-1, tokens[:, None]).squeeze(-1).cpu().numpy()
    hit = (logits.argmax(-1) == tokens).cpu().numpy()
    bounds = np.cumsum([len(c) for c in continuations])[:-1]
    return ContinuationScores(
        [np.asarray(x, dtype=np.float64) for x in np.split(logp, bounds)],
        [bool(x.all()) for x in np.split(hit, bounds)],
    )


def summed_logprobs(
    model: torch.nn.Module, prompts, continuations: Sequence[Sequence[int]], owner: Sequence[int], pad_id: int
) -> torch.Tensor:
    """Differentiable sum of token log-probs (T = 1) of `continuations[j]` after `prompts[owner[j]]`
    -> (N,), float32 or the model's wider precision. The same packed pass as `score_continuations`: the
    gradient reaches the prompt embeddings through every continuation's attention to them."""
    logits, tokens = _packed_logits(model, prompts, continuations, owner, pad_id)
    dtype = torch.promote_types(logits.dtype, torch.float32)  # float32 at least, float64 if the model is
    logp = torch.log_softmax(logits.to(dtype), dim=-1).gather(-1, tokens[:, None]).squeeze(-1)
    which = torch.repeat_interleave(torch.arange(len(continuations)), torch.tensor([len(c) for c in continuations]))
    return torch.zeros(len(continuations), dtype=dtype, device=logp.device).index_add(0, which.to(logp.device), logp)
