"""Batched sampling of continuations after prompts (a writing agent's actions): the prompts prefilled in
chunks into a cache with room to decode into (policies/kv_cache.py), one token a step for every row, rows that
stopped leaving the batch (docs/decisions.md: chunked prefill, decoding into a cache with room, pruning).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import SimpleNamespace

import numpy as np
import torch

from adwm.policies.base import sample_index
from adwm.policies.kv_cache import RoomyLayer, cache_name, cache_of, keep_rows, plain_cache
from adwm.runtime import costs


def _left_pad(seqs: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, width - len(s) :] = torch.tensor(s, dtype=torch.long)
        mask[i, width - len(s) :] = 1
    return ids, mask


def prompt_pass(model: torch.nn.Module, prompts, pad_id: int, room: int = 0):
    """Run left-padded prompts once with the KV cache on (for sampling); logits only at the last position.
    `prompts`: token-id lists, or a left-padded (embeddings (B, L, D), mask (B, L)) pair (soft tokens).
    With `room` > 0 the returned cache holds that many more positions in place (`RoomyLayer`), so that
    decoding does not copy the whole cache for every token.

    Token-id prompts of unequal lengths run in chunks of PREFILL_ROWS rows of similar length, whose caches
    are then copied, right-aligned, into one cache of the batch's width: a row's keys and values depend
    only on its own tokens and positions, so the cache is that of one padded pass, without the padding's
    share of the prefill (large for ScienceWorld prompts, whose room descriptions vary in length)."""
    device = next(model.parameters()).device
    if isinstance(prompts, tuple):
        embeds, mask = prompts
        inputs = {"inputs_embeds": embeds.to(device)}
    else:
        ids, mask = _left_pad(prompts, pad_id)  # (B, Lp)
        if len(prompts) > PREFILL_ROWS or len({tuple(p) for p in prompts}) < len(prompts):
            chunked = _chunked_prompt_pass(model, prompts, pad_id, mask, room)
            if chunked is not None:
                return chunked, mask
        inputs = {"input_ids": ids.to(device)}
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    out = model(
        **inputs,
        attention_mask=mask.to(device),
        position_ids=pos.to(device),
        use_cache=True,
        logits_to_keep=1,
    )
    name = cache_name(model)
    cache = getattr(out, name)
    if room > 0 and plain_cache(cache):
        layers = [RoomyLayer.empty_like(x.keys, x.values, x.keys.size(-2) + room) for x in cache.layers]
        for layer, x in zip(layers, cache.layers):
            layer.write(slice(None), x.keys, x.values)
        out = SimpleNamespace(logits=out.logits, **{name: cache_of(layers)})
    return out, mask


PREFILL_ROWS = 16  # rows of one prefill chunk (_chunked_prompt_pass)


def _chunked_prompt_pass(
    model: torch.nn.Module, prompts: Sequence[Sequence[int]], pad_id: int, mask: torch.Tensor, room: int = 0
):
    """`prompt_pass` of token-id prompts in length-sorted chunks, whose caches are copied into one cache of
    the width of `mask` (B, W) plus `room`; None where the model's cache is not a plain per-layer key/value
    cache (sliding windows, ...). A prompt that several rows hold (k samples of one state, a revisited
    state) is prefilled once and its cache copied into each of them."""
    name = cache_name(model)
    holders: dict[tuple[int, ...], list[int]] = {}
    for i, p in enumerate(prompts):
        holders.setdefault(tuple(p), []).append(i)
    distinct = sorted(holders, key=len)
    width = mask.size(1)
    logits, layers = None, None
    for lo in range(0, len(distinct), PREFILL_ROWS):
        chunk = distinct[lo : lo + PREFILL_ROWS]
        out, _ = prompt_pass(model, [list(p) for p in chunk], pad_id)
        cache = getattr(out, name)
        if not plain_cache(cache):
            return None
        if layers is None:
            layers = [RoomyLayer.empty_like(x.keys, x.values, width + room, len(prompts)) for x in cache.layers]
            logits = out.logits.new_empty((len(prompts), *out.logits.shape[1:]))
        rows = [i for p in chunk for i in holders[p]]  # every row holding one of the chunk's prompts
        source = torch.tensor([k for k, p in enumerate(chunk) for _ in holders[p]], device=logits.device)
        index = torch.tensor(rows, device=logits.device)
        logits.index_copy_(0, index, out.logits.index_select(0, source))
        for layer, x in zip(layers, cache.layers):
            layer.write(index, x.keys.index_select(0, source), x.values.index_select(0, source), width)
    return SimpleNamespace(logits=logits, **{name: cache_of(layers)})


# Rows that stopped leave the batch once they are this share of it: dropping rows copies the cache, about as
# much work as a step's attention over it, and rows of a hot writer stop at almost every step
PRUNE_SHARE = 0.5


def draw_token(logits: torch.Tensor, temperature: float, rng: np.random.Generator) -> int:
    """One token from softmax(logits / T) (float64, inverse CDF with `rng`), the argmax at T = 0."""
    if temperature > 0:
        return sample_index(torch.log_softmax(logits.double() / temperature, -1).numpy(), rng)
    return int(logits.argmax())


@torch.no_grad()
def sample_continuations(
    model: torch.nn.Module,
    prompts,
    rngs: Sequence[np.random.Generator],
    pad_id: int,
    stop: Callable[[int, list[int]], bool],
    temperature: float,
    max_new_tokens: int,
    record: Callable[[int, list[int], torch.Tensor], None] | None = None,
) -> list[list[int]]:
    """Sample token ids after each prompt (token-id lists, or a left-padded (embeddings, mask) pair) until
    `stop(row, ids)` is true or the budget ends; `record(row, ids, logits)`, where given, receives the
    next-token logits (float32, on the CPU) of every row after each prefix `ids` it draws from.

    Every token is drawn from softmax(logits / T) with the row's own numpy
    generator (argmax at T = 0, `draw_token`), so a row's draw does not depend on the batch. A row that has
    stopped leaves the batch (its keys and values with it, `keep_rows`), so the next tokens are computed
    only for the rows still writing.
    """
    device = next(model.parameters()).device
    out, mask = prompt_pass(model, prompts, pad_id, room=max_new_tokens)
    name = cache_name(model)
    n = int(mask.size(0))
    costs.count("agent/states_read", n)
    costs.count("agent/forward_passes")
    generated: list[list[int]] = [[] for _ in range(n)]
    done = [False] * n
    batch = list(range(n))  # the prompt of each row of the batch
    next_pos = mask.sum(-1)
    for _ in range(max_new_tokens):
        logits = out.logits[:, -1].float().cpu()
        for j, i in enumerate(batch):
            if done[i]:
                continue
            if record is not None:
                record(i, generated[i], logits[j])
            generated[i].append(draw_token(logits[j], temperature, rngs[i]))
            done[i] = stop(i, generated[i])
        if all(done):
            break
        cache = getattr(out, name)
        keep = [j for j, i in enumerate(batch) if not done[i]]
        if len(keep) <= (1 - PRUNE_SHARE) * len(batch) and keep_rows(cache, keep):
            kept = torch.tensor(keep)
            mask, next_pos, batch = mask[kept], next_pos[kept], [batch[j] for j in keep]
        step = torch.tensor([pad_id if done[i] else generated[i][-1] for i in batch], dtype=torch.long)
        mask = torch.cat([mask, torch.ones((len(batch), 1), dtype=torch.long)], dim=1)
        out = model(
            input_ids=step[:, None].to(device),
            attention_mask=mask.to(device),
            position_ids=next_pos[:, None].to(device),
            use_cache=True,
            **{name: cache},
        )
        costs.count("agent/forward_passes")
        costs.count("agent/rows_decoded", len(batch))
        next_pos = next_pos + 1
    return generated
