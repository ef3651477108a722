"""An autoregressive text world model: a causal language model of the log that writes the next observation
(and its action list) piece by piece, after the task, every earlier observation and action of the episode,
and the action just taken. The baseline of `evaluate.world=autoregressive`: the token-by-token world model
whose compounding errors per-transition denoising is claimed to avoid.

An episode is one token stream::

    TASK <task> OBS <o_0> [ADM <a_1> ITEM <a_2> ...] END ACT <action_0> STEP OBS <o_1> ... END ACT ...

Words are the log's pieces (models/text_decoder.py: non-space runs with their leading whitespace, joined
exactly). The model is trained to write what the world writes: every observation block after a `STEP`
(the first one is the logged start); the task and the actions come from outside. At each `STEP` (the
action read) two heads give the step's reward (a distribution over the log's reward values) and whether the
episode ended. A GRU carries the whole episode in its state, so what the observation does not show
(inventory, opened containers) can be kept.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_sequence

from adwm.data.schema import Episode
from adwm.models.config import AutoregressiveConfig
from adwm.models.text_decoder import pieces

PAD, UNKNOWN, TASK, OBS, ADM, ITEM, END, ACT, STEP = range(9)
SPECIALS = 9
MAX_REWARD_VALUES = 64


def reward_values(rewards: Sequence[float]) -> list[float]:
    """The values the reward head chooses among: the log's distinct rewards, or, where it has more than
    `MAX_REWARD_VALUES`, the means of that many equal-count bins."""
    distinct = sorted(set(float(r) for r in rewards))
    if len(distinct) <= MAX_REWARD_VALUES:
        return distinct or [0.0]
    bins = np.array_split(np.sort(np.asarray(rewards, dtype=float)), MAX_REWARD_VALUES)
    return sorted(set(float(b.mean()) for b in bins if len(b)))


class Vocabulary:
    """Piece ids (after the special tokens) of the training episodes' texts."""

    def __init__(self, pieces_by_frequency: Sequence[str]) -> None:
        self.pieces = list(pieces_by_frequency)
        self.index = {p: i + SPECIALS for i, p in enumerate(self.pieces)}

    @classmethod
    def build(cls, episodes: Sequence[Episode], max_vocab: int) -> Vocabulary:
        counts: Counter = Counter()
        for ep in episodes:
            for text in episode_texts(ep):
                counts.update(pieces(text))
        return cls([p for p, _ in counts.most_common(max_vocab)])

    def __len__(self) -> int:
        return len(self.pieces) + SPECIALS

    def ids(self, text: str) -> list[int]:
        return [self.index.get(p, UNKNOWN) for p in pieces(text)]

    def text(self, ids: Sequence[int]) -> str:
        return "".join(self.pieces[i - SPECIALS] for i in ids if i >= SPECIALS)


def episode_texts(ep: Episode) -> list[str]:
    out = [ep.task, ep.final_observation]
    for s in ep.steps:
        out += [s.observation, s.action, *(s.admissible or [])]
    return out


def state_block(vocab: Vocabulary, observation: str, admissible: Sequence[str] | None) -> list[int]:
    """`OBS <observation> [ADM <a_1> ITEM <a_2> ...] END`."""
    out = [OBS, *vocab.ids(observation)]
    if admissible is not None:
        out.append(ADM)
        for k, a in enumerate(admissible):
            out += ([ITEM] if k else []) + vocab.ids(a)
    return [*out, END]


def start_block(vocab: Vocabulary, task: str, observation: str, admissible: Sequence[str] | None) -> list[int]:
    """`TASK <task>` and the first state: what a rollout reads before the first action."""
    return [TASK, *vocab.ids(task), *state_block(vocab, observation, admissible)]


def action_block(vocab: Vocabulary, action: str) -> list[int]:
    """`ACT <action> STEP`: after it the reward and end heads read the model's state."""
    return [ACT, *vocab.ids(action), STEP]


def parse_state_block(vocab: Vocabulary, ids: Sequence[int]) -> tuple[str, list[str] | None]:
    """(observation, action list or None) of a written block (the tokens after `OBS`, up to `END`)."""
    ids = list(ids)
    if END in ids:
        ids = ids[: ids.index(END)]
    if ADM not in ids:
        return vocab.text(ids), None
    cut = ids.index(ADM)
    items, item = [], []
    for i in ids[cut + 1 :]:
        if i == ITEM:
            items.append(item)
            item = []
        else:
            item.append(i)
    items.append(item)
    return vocab.text(ids[:cut]), [vocab.text(x).strip() for x in items if x]


@dataclass
class EncodedEpisode:
    """One episode as a stream: `tokens` (N,), `learn` (N,) whether the token is the world's to write,
    `reward` (N,) the reward class at `STEP` tokens (-1 elsewhere), `done` (N,) 1/0 at `STEP`, -1 elsewhere."""

    tokens: np.ndarray
    learn: np.ndarray
    reward: np.ndarray
    done: np.ndarray


def encode_episode(ep: Episode, vocab: Vocabulary, values: Sequence[float]) -> EncodedEpisode:
    values_arr = np.asarray(values)
    tokens: list[int] = []
    learn: list[bool] = []
    reward: list[int] = []
    done: list[int] = []

    def add(ids: list[int], world: bool) -> None:
        tokens.extend(ids)
        learn.extend([world] * len(ids))
        reward.extend([-1] * len(ids))
        done.extend([-1] * len(ids))

    for t, s in enumerate(ep.steps):
        if t == 0:
            add(start_block(vocab, ep.task, s.observation, s.admissible), False)
        add(action_block(vocab, s.action), False)
        reward[-1] = int(np.abs(values_arr - s.reward).argmin())
        done[-1] = int(ep.ended(t))
        last = t + 1 == len(ep.steps)
        if last:  # the log keeps no list after the last step (a rollout keeps the list it had)
            add(state_block(vocab, ep.final_observation, None), True)
        else:
            add(state_block(vocab, ep.steps[t + 1].observation, ep.steps[t + 1].admissible), True)
    return EncodedEpisode(np.array(tokens), np.array(learn), np.array(reward), np.array(done))


class AutoregressiveWorldModel(nn.Module):
    """p(next piece | every piece of the episode before it), with the reward and end heads at `STEP`."""

    def __init__(self, cfg: AutoregressiveConfig, vocabulary: Sequence[str], values: Sequence[float]) -> None:
        super().__init__()
        self.cfg = cfg
        self.vocab = Vocabulary(vocabulary)
        self.values = torch.tensor(list(values), dtype=torch.float32)
        v = len(self.vocab)
        self.embed = nn.Embedding(v, cfg.d_embed, padding_idx=PAD)
        self.gru = nn.GRU(cfg.d_embed, cfg.hidden, num_layers=cfg.layers, batch_first=True)
        self.out = nn.Linear(cfg.hidden, v)
        self.reward_head = nn.Linear(cfg.hidden, len(self.values))
        self.done_head = nn.Linear(cfg.hidden, 1)
        # never written: padding, unknown pieces, and what comes from outside the world (task, actions)
        banned = torch.zeros(v, dtype=torch.bool)
        banned[[PAD, UNKNOWN, TASK, ACT, STEP, OBS]] = True
        self.register_buffer("banned", banned, persistent=False)

    def initial_state(self, batch: int) -> torch.Tensor:
        return torch.zeros(self.cfg.layers, batch, self.cfg.hidden)

    def forward(self, tokens: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Outputs (B, T, hidden) and the state after reading `tokens` (B, T) from `state` (layers, B, hidden)."""
        return self.gru(self.embed(tokens), state)

    def losses(self, y: torch.Tensor, target: torch.Tensor, learn, reward, done) -> dict[str, torch.Tensor]:
        """Cross-entropy of the world's pieces (target = the next token where `learn`), of the reward class
        and the end at `STEP` positions (reward/done >= 0)."""
        out = {"pieces": F.cross_entropy(self.out(y[learn]), target[learn]) if learn.any() else y.sum() * 0}
        at = reward >= 0
        if at.any():
            out["reward"] = F.cross_entropy(self.reward_head(y[at]), reward[at])
            out["done"] = F.binary_cross_entropy_with_logits(self.done_head(y[at]).squeeze(-1), done[at].float())
        return out

    # ---- rollouts: states are (layers, B, hidden) tensors; a row per live episode ----

    @torch.no_grad()
    def read(self, state: torch.Tensor, blocks: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """The state after each row read its block (rows of different lengths), and the output (B, hidden) at
        each block's last token."""
        lengths = torch.tensor([len(x) for x in blocks])
        tokens = pad_sequence([torch.tensor(list(x)) for x in blocks], batch_first=True, padding_value=PAD)
        packed = pack_padded_sequence(self.embed(tokens), lengths, batch_first=True, enforce_sorted=False)
        _, state = self.gru(packed, state)  # each row stops at its own length
        return state, state[-1]

    @torch.no_grad()
    def step_heads(self, y: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
        """Expected reward (B,) and end probability (B,) from the outputs at `STEP`."""
        probs = self.reward_head(y).softmax(-1)
        return (probs @ self.values).numpy(), torch.sigmoid(self.done_head(y).squeeze(-1)).numpy()

    @torch.no_grad()
    def write(
        self, state: torch.Tensor, rngs: Sequence[np.random.Generator], temperature: float, max_pieces: int
    ) -> tuple[list[list[int]], torch.Tensor]:
        """Each row writes a state block after `OBS`, until `END` or `max_pieces` (then `END` is read): the
        tokens written (without `END`) and the state after the block. A piece is drawn with the row's own
        generator (inverse CDF), or the most likely at temperature 0."""
        b = len(rngs)
        prev = torch.full((b, 1), OBS, dtype=torch.long)
        written: list[list[int]] = [[] for _ in range(b)]
        alive = np.ones(b, dtype=bool)
        for _ in range(max_pieces):
            y, new = self.gru(self.embed(prev), state)
            state = torch.where(torch.from_numpy(alive).view(1, b, 1), new, state)  # a finished row keeps its own
            logits = self.out(y[:, 0]).masked_fill(self.banned, float("-inf"))
            if temperature == 0:
                nxt = logits.argmax(-1).numpy()
            else:
                cdf = torch.cumsum((logits / temperature).softmax(-1), -1).numpy()
                u = np.array([max(rng.random(), 1e-12) if a else 1.0 for rng, a in zip(rngs, alive)])
                nxt = np.minimum((cdf < (u * cdf[:, -1])[:, None]).sum(1), cdf.shape[1] - 1)
            for i in np.flatnonzero(alive):
                if nxt[i] == END:
                    alive[i] = False
                else:
                    written[i].append(int(nxt[i]))
            if not alive.any():
                break
            prev = torch.from_numpy(nxt.astype(np.int64))[:, None]
        # a row that wrote END has read every piece before it; a row cut at max_pieces has not read its last
        state, _ = self.read(state, [[w[-1], END] if a and w else [END] for w, a in zip(written, alive)])
        return written, state
