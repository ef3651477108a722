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

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from adwm.policies.base import sample_index
from adwm.runtime import costs


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


def _prompt_pass(model: torch.nn.Module, prompts, pad_id: int, room: int = 0):
    """Run left-padded prompts once with the KV cache on (for sampling); logits only at the last position.
    `prompts`: token-id lists, or a left-padded (embeddings (B, L, D), mask (B, L)) pair (soft tokens).
    With `room` > 0 the returned cache holds that many more positions in place (`_RoomyLayer`), so that
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
    name = _cache_name(model)
    cache = getattr(out, name)
    if room > 0 and _plain_cache(cache):
        layers = [_RoomyLayer.empty_like(x.keys, x.values, x.keys.size(-2) + room) for x in cache.layers]
        for layer, x in zip(layers, cache.layers):
            layer.write(slice(None), x.keys, x.values)
        out = SimpleNamespace(logits=out.logits, **{name: _cache_of(layers)})
    return out, mask


PREFILL_ROWS = 16  # rows of one prefill chunk (_chunked_prompt_pass)


def _chunked_prompt_pass(
    model: torch.nn.Module, prompts: Sequence[Sequence[int]], pad_id: int, mask: torch.Tensor, room: int = 0
):
    """`_prompt_pass` of token-id prompts in length-sorted chunks, whose caches are copied into one cache of
    the width of `mask` (B, W) plus `room`; None where the model's cache is not a plain per-layer key/value
    cache (sliding windows, ...). A prompt that several rows hold (k samples of one state, a revisited
    state) is prefilled once and its cache copied into each of them."""
    name = _cache_name(model)
    holders: dict[tuple[int, ...], list[int]] = {}
    for i, p in enumerate(prompts):
        holders.setdefault(tuple(p), []).append(i)
    distinct = sorted(holders, key=len)
    width = mask.size(1)
    logits, layers = None, None
    for lo in range(0, len(distinct), PREFILL_ROWS):
        chunk = distinct[lo : lo + PREFILL_ROWS]
        out, _ = _prompt_pass(model, [list(p) for p in chunk], pad_id)
        cache = getattr(out, name)
        if not _plain_cache(cache):
            return None
        if layers is None:
            layers = [_RoomyLayer.empty_like(x.keys, x.values, width + room, len(prompts)) for x in cache.layers]
            logits = out.logits.new_empty((len(prompts), *out.logits.shape[1:]))
        rows = [i for p in chunk for i in holders[p]]  # every row holding one of the chunk's prompts
        source = torch.tensor([k for k, p in enumerate(chunk) for _ in holders[p]], device=logits.device)
        index = torch.tensor(rows, device=logits.device)
        logits.index_copy_(0, index, out.logits.index_select(0, source))
        for layer, x in zip(layers, cache.layers):
            layer.write(index, x.keys.index_select(0, source), x.values.index_select(0, source), width)
    return SimpleNamespace(logits=logits, **{name: _cache_of(layers)})


class _RoomyLayer(DynamicLayer):
    """A `DynamicLayer` whose keys and values are the first positions of buffers with room for more: a
    decoded token is written in place, where `DynamicLayer.update` copies the whole cache (torch.cat) for
    every token. Rows leave as in `DynamicLayer` (`batch_select_indices`)."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, length: int) -> None:
        super().__init__()
        self._keys, self._values, self.device, self.is_initialized = keys, values, keys.device, True
        self._view(length)

    @classmethod
    def empty_like(cls, keys: torch.Tensor, values: torch.Tensor, capacity: int, rows: int | None = None):
        """An empty layer of `rows` rows (those of `keys` by default) holding up to `capacity` positions;
        every position is zero until written (padding is masked, but its values must be finite)."""
        rows = keys.size(0) if rows is None else rows
        k = keys.new_zeros((rows, keys.size(1), capacity, keys.size(-1)))
        v = values.new_zeros((rows, values.size(1), capacity, values.size(-1)))
        return cls(k, v, 0)

    def _view(self, length: int) -> None:
        self.keys, self.values = self._keys[:, :, :length], self._values[:, :, :length]

    def write(self, rows, keys: torch.Tensor, values: torch.Tensor, width: int | None = None) -> None:
        """Copy a (sub-)batch's cache into `rows` (an index tensor, or a slice), right-aligned to position
        `width` (its own width by default), which becomes this layer's length."""
        width = keys.size(-2) if width is None else width
        span = slice(width - keys.size(-2), width)
        if isinstance(rows, slice):
            self._keys[rows, :, span] = keys
            self._values[rows, :, span] = values
        else:
            self._keys[:, :, span].index_copy_(0, rows, keys)
            self._values[:, :, span].index_copy_(0, rows, values)
        self._view(width)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        n, m = self.keys.size(-2), key_states.size(-2)
        if n + m > self._keys.size(-2):  # out of room: grow as DynamicLayer would
            self._keys = torch.cat([self.keys, key_states], dim=-2)
            self._values = torch.cat([self.values, value_states], dim=-2)
        else:
            self._keys[:, :, n : n + m] = key_states
            self._values[:, :, n : n + m] = value_states
        self._view(n + m)
        return self.keys, self.values

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        n = self.keys.size(-2)
        self._keys, self._values = self._keys[indices], self._values[indices]
        self._view(n)


def _cache_of(layers: list[DynamicLayer]) -> DynamicCache:
    """A `DynamicCache` made of the given layers."""
    cache = DynamicCache()
    cache.layers, cache.layer_class_to_replicate = list(layers), None
    return cache


# Rows that stopped leave the batch once they are this share of it: dropping rows copies the cache, about as
# much work as a step's attention over it, and rows of a hot writer stop at almost every step
PRUNE_SHARE = 0.5


def _plain_cache(cache) -> bool:
    """Whether `cache` is a plain per-layer key/value cache (no sliding windows, quantisation, ...), whose
    rows can be padded, merged and dropped."""
    layers = getattr(cache, "layers", None)
    return (
        isinstance(cache, DynamicCache) and bool(layers) and all(type(x) in (DynamicLayer, _RoomyLayer) for x in layers)
    )


def _keep_rows(cache, rows: list[int]) -> bool:
    """Keep only the batch rows `rows` of a plain cache (in place) -> whether it could."""
    if not _plain_cache(cache):
        return False
    cache.batch_select_indices(torch.tensor(rows))
    return True


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
    stopped leaves the batch (its keys and values with it, `_keep_rows`), so the next tokens are computed
    only for the rows still writing.
    """
    device = next(model.parameters()).device
    out, mask = _prompt_pass(model, prompts, pad_id, room=max_new_tokens)
    name = _cache_name(model)
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
        if len(keep) <= (1 - PRUNE_SHARE) * len(batch) and _keep_rows(cache, keep):
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
