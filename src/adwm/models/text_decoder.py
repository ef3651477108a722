"""The text decoder z -> observation: what the agent reads of a state the world model generated.

Words are the log's own: a text is cut into its non-space runs, each with the whitespace before it, so
joining the pieces gives the text back exactly; the vocabulary is the pieces of the training observations
(`end` marks the end of the text, `unknown` a piece the log never showed, which no decoded text contains).
The decoder writes piece by piece (a GRU conditioned on the latent), so each piece sees the whole text before
it: where a word goes depends on how long the sentences before it were, and which of several similar sentences
it is in.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from adwm.models.world_model.config import TextDecoderConfig

END, UNKNOWN = 0, 1
_PIECE = re.compile(r"\s*\S+|\s+$")


def pieces(text: str) -> list[str]:
    """The text cut into non-space runs with their leading whitespace (trailing whitespace is a piece)."""
    return _PIECE.findall(text)


def build_vocabulary(texts: Sequence[str], max_vocab: int) -> dict:
    """{"pieces": the pieces of `texts` by falling frequency (ties by first appearance), at most `max_vocab`;
    "length": the pieces of the longest text, plus its `end`}."""
    split = [pieces(t) for t in dict.fromkeys(texts)]
    counts = Counter(p for ps in split for p in ps)
    return {"pieces": [p for p, _ in counts.most_common(max_vocab)], "length": max(map(len, split), default=0) + 1}


class TextDecoder(nn.Module):
    """p(piece_p | every piece before it, z): a GRU whose initial state is the flat latent's embedding and
    whose input at each position is the previous piece with the latent's embedding. What the text so far
    already predicts costs the latent nothing; what it cannot (which room, what is open, what is carried)
    must come from the latent. Greedy decoding takes one GRU step per piece. `length`: the most pieces
    decoded (the longest training text and its `end`, at most `cfg.max_pieces`)."""

    def __init__(self, cfg: TextDecoderConfig, vocabulary: list[str], d_latent_flat: int, length: int) -> None:
        super().__init__()
        self.cfg, self.vocabulary, self.length = cfg, list(vocabulary), min(length, cfg.max_pieces)
        self.index = {p: i + 2 for i, p in enumerate(self.vocabulary)}
        self.begin = len(self.vocabulary) + 2  # the id of "before the text"
        h, e = cfg.hidden, cfg.d_embed
        self.latent_in = nn.Sequential(nn.Linear(d_latent_flat, h), nn.GELU(), nn.Linear(h, h))
        self.embed = nn.Embedding(self.begin + 1, e)
        self.gru = nn.GRU(e + h, h, batch_first=True)
        self.out = nn.Linear(h, self.begin)

    def ids(self, texts: Sequence[str]) -> torch.Tensor:
        """(B, length) piece ids of `texts`, `end`-padded (cut at `length`)."""
        out = torch.full((len(texts), self.length), END, dtype=torch.long)
        for i, text in enumerate(texts):
            row = [self.index.get(p, UNKNOWN) for p in pieces(text)][: self.length]
            out[i, : len(row)] = torch.tensor(row, dtype=torch.long)
        return out

    def _step(self, latent: torch.Tensor, prev: torch.Tensor, state: torch.Tensor):
        """Logits (B, T, V + 2) and the GRU state after the previous pieces `prev` (B, T)."""
        x = torch.cat([self.embed(prev), latent.unsqueeze(1).expand(-1, prev.size(1), -1)], -1)
        y, state = self.gru(x, state)
        return self.out(y), state

    def loss(self, z: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """Teacher-forced cross-entropy of every position up to and including the first `end`."""
        b, t = ids.shape
        latent = self.latent_in(z.flatten(1))
        prev = torch.cat([torch.full((b, 1), self.begin, dtype=torch.long, device=ids.device), ids[:, :-1]], 1)
        logits, _ = self._step(latent, prev, latent.unsqueeze(0).contiguous())
        is_end = ids == END
        first_end = torch.where(is_end.any(1), is_end.float().argmax(1), torch.full_like(ids[:, 0], t - 1))
        keep = torch.arange(t, device=ids.device)[None] <= first_end[:, None]
        return F.cross_entropy(logits[keep], ids[keep])

    @torch.no_grad()
    def decode(self, z: torch.Tensor) -> list[str]:
        """The greedy text of each latent (B, L, d), piece by piece until `end`; `unknown` is never written."""
        b = z.size(0)
        latent = self.latent_in(z.flatten(1))
        state = latent.unsqueeze(0).contiguous()
        prev = torch.full((b, 1), self.begin, dtype=torch.long, device=z.device)
        written = torch.full((b, self.length), END, dtype=torch.long)
        alive = torch.ones(b, dtype=torch.bool)
        for p in range(self.length):
            logits, state = self._step(latent, prev, state)
            logits[:, -1, UNKNOWN] = float("-inf")
            nxt = logits[:, -1].argmax(-1)
            written[:, p] = torch.where(alive, nxt.cpu(), END)
            alive &= nxt.cpu() != END
            if not alive.any():
                break
            prev = nxt[:, None]
        return ["".join(self.vocabulary[i - 2] for i in row if i != END) for row in written.tolist()]
