"""Training the autoregressive text world model (models/autoregressive.py) and its open-loop fidelity.

Training is truncated backpropagation through time: each batch holds `batch_size` whole episodes of
similar length (shuffled each epoch, sorted by length within groups of four batches), each from the zero
state a rollout starts from, and every optimiser step reads the next `chunk` tokens of each from the state
the previous chunk left (detached).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from adwm.data.schema import Episode
from adwm.models.autoregressive import (
    AutoregressiveWorldModel,
    EncodedEpisode,
    Vocabulary,
    action_block,
    encode_episode,
    parse_state_block,
    reward_values,
    start_block,
    state_block,
)
from adwm.models.config import AutoregressiveConfig


def build_model(cfg: AutoregressiveConfig, episodes: Sequence[Episode], seed: int) -> AutoregressiveWorldModel:
    """An untrained model with the vocabulary and reward values of `episodes`, its weights drawn from `seed`."""
    if not episodes:
        raise ValueError("evaluate.world=autoregressive: the log's training split holds no episode")
    vocab = Vocabulary.build(episodes, cfg.max_vocab)
    values = reward_values([s.reward for ep in episodes for s in ep.steps])
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return AutoregressiveWorldModel(cfg, vocab.pieces, values)


def max_state_pieces(model: AutoregressiveWorldModel, episodes: Sequence[Episode]) -> int:
    """The longest state block of `episodes` (observation and list), in pieces, plus a margin of 8."""
    longest = 0
    for ep in episodes:
        for s in ep.steps:
            longest = max(longest, len(state_block(model.vocab, s.observation, s.admissible)))
        longest = max(longest, len(state_block(model.vocab, ep.final_observation, None)))
    return longest + 8


def _batches(encoded: Sequence[EncodedEpisode], size: int, rng: np.random.Generator) -> list[list[np.ndarray]]:
    """One epoch of batches: episodes of similar length, each field (tokens, learn, reward, done) a (size,
    length) array padded with PAD / False / -1."""
    order = rng.permutation(len(encoded))
    groups = [order[k : k + 4 * size] for k in range(0, len(order), 4 * size)]
    out = []
    for group in groups:
        ranked = sorted(group, key=lambda k: len(encoded[k].tokens))
        for j in range(0, len(ranked), size):
            members = [encoded[k] for k in ranked[j : j + size]]
            n = max(len(e.tokens) for e in members)
            fields = []
            for name, fill in (("tokens", 0), ("learn", False), ("reward", -1), ("done", -1)):
                arr = np.full((len(members), n), fill, dtype=bool if name == "learn" else np.int64)
                for i, e in enumerate(members):
                    row = getattr(e, name)
                    arr[i, : len(row)] = row
                fields.append(arr)
            out.append(fields)
    return [out[k] for k in rng.permutation(len(out))]


def fit_autoregressive(
    cfg: AutoregressiveConfig,
    train: Sequence[Episode],
    seed: int,
    progress: Callable[[int, float], object] = lambda step, loss: None,
) -> tuple[AutoregressiveWorldModel, list[float]]:
    """The model trained on `train` for `cfg.steps` steps, and its loss per step."""
    torch.manual_seed(seed)
    model = build_model(cfg, train, seed)
    encoded = [encode_episode(ep, model.vocab, model.values.tolist()) for ep in train]
    rng = np.random.default_rng((seed, 29))
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, cfg.lr, total_steps=cfg.steps, pct_start=0.05)
    model.train()
    losses: list[float] = []
    batches: list = []
    tokens = None
    pos = 0
    for step in range(cfg.steps):
        if tokens is None or pos + 1 >= tokens.shape[1]:
            if not batches:
                batches = _batches(encoded, cfg.batch_size, rng)
            tokens, learn, reward, done = (torch.from_numpy(a) for a in batches.pop())
            pos, state = 0, model.initial_state(tokens.shape[0])
        end = min(pos + cfg.chunk, tokens.shape[1] - 1)
        y, state = model(tokens[:, pos:end], state)
        state = state.detach()
        target = slice(pos + 1, end + 1)
        parts = model.losses(y, tokens[:, target], learn[:, target], reward[:, pos:end], done[:, pos:end])
        loss = sum(parts.values())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
        progress(step, losses[-1])
        pos = end
    return model.eval(), losses


@torch.no_grad()
def open_loop_exact(
    model: AutoregressiveWorldModel,
    episodes: Sequence[Episode],
    ks: Sequence[int],
    max_pieces: int,
) -> dict[str, float]:
    """From each episode's logged start, under its logged actions, the model writes every next state
    (greedy); `exact@k`: the share of episodes with at least k steps whose k-th written observation is the
    logged one, text for text; `exact_list@k` the same for observation and action list together."""
    kmax = max(ks)
    eps = [ep for ep in episodes if ep.steps]
    if not eps:
        return {}
    state = model.initial_state(len(eps))
    first = [start_block(model.vocab, ep.task, ep.steps[0].observation, ep.steps[0].admissible) for ep in eps]
    state, _ = model.read(state, first)
    hits = {k: [] for k in ks}
    hits_list = {k: [] for k in ks}
    rngs = [np.random.default_rng(0)] * len(eps)
    for t in range(min(kmax, max(len(ep.steps) for ep in eps))):
        rows = [i for i, ep in enumerate(eps) if t < len(ep.steps)]
        sub = state[:, rows]
        sub, _ = model.read(sub, [action_block(model.vocab, eps[i].steps[t].action) for i in rows])
        written, sub = model.write(sub, [rngs[i] for i in rows], 0.0, max_pieces)
        state[:, rows] = sub
        if t + 1 in hits:
            for i, ids in zip(rows, written):
                ep = eps[i]
                last = t + 1 == len(ep.steps)
                obs = ep.final_observation if last else ep.steps[t + 1].observation
                adm = None if last else ep.steps[t + 1].admissible
                text, listed = parse_state_block(model.vocab, ids)
                hits[t + 1].append(text == obs)
                hits_list[t + 1].append(text == obs and (last or listed == adm))
    out = {}
    for k in ks:
        if hits[k]:
            out[f"exact@{k}"] = float(np.mean(hits[k]))
            out[f"exact_list@{k}"] = float(np.mean(hits_list[k]))
    return out
