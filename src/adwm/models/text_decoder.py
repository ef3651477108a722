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
    """p(piece_p | the pieces before it, z, the previous text): a GRU whose initial state is the flat latent's
    embedding and whose input at each position is the previous piece with the latent's embedding, attending
    over what the agent read before (the task and the last `cfg.sources` observations, encoded by a
    bidirectional GRU: `source_text`). Each
    piece is drawn from a mixture (a pointer-generator, See et al. 2017): a gate chooses between the
    vocabulary and a copy of the piece it attends to. What stays the same from one state to the next (the
    room's description, what is carried) is copied; what changes must come from the latent. With no
    previous text (a first state, or a row trained without it) the gate keeps to the vocabulary. Greedy
    decoding takes one GRU step per piece. `length`: the most pieces decoded (the longest training text and
    its `end`, at most `cfg.max_pieces`)."""

    def __init__(self, cfg: TextDecoderConfig, vocabulary: list[str], d_latent_flat: int, length: int) -> None:
        super().__init__()
        self.cfg, self.vocabulary, self.length = cfg, list(vocabulary), min(length, cfg.max_pieces)
        self.index = {p: i + 2 for i, p in enumerate(self.vocabulary)}
        self.begin = len(self.vocabulary) + 2  # the id of "before the text"
        h, e = cfg.hidden, cfg.d_embed
        self.latent_in = nn.Sequential(nn.Linear(d_latent_flat, h), nn.GELU(), nn.Linear(h, h))
        self.embed = nn.Embedding(self.begin + 1, e)
        self.gru = nn.GRU(e + h, h, batch_first=True)
        self.source = nn.GRU(e, h // 2, batch_first=True, bidirectional=True)  # the previous text
        self.source_out = nn.Linear(2 * (h // 2), h)
        self.query = nn.Linear(h, h)
        self.mix = nn.Linear(2 * h, h)
        self.gate = nn.Linear(2 * h + e, 1)
        self.out = nn.Linear(h, self.begin)

    def ids(self, texts: Sequence[str]) -> torch.Tensor:
        """(B, length) piece ids of `texts`, `end`-padded (cut at `length`)."""
        return self._padded(texts, self.length, self.length)

    def _padded(self, texts: Sequence[str], cut: int, width: int | None = None) -> torch.Tensor:
        """(B, width) piece ids of `texts`, each cut at `cut` pieces, `end`-padded (width None: the longest)."""
        rows = [[self.index.get(p, UNKNOWN) for p in pieces(t)][:cut] for t in texts]
        width = width or max(1, max(map(len, rows), default=1))
        out = torch.full((len(texts), width), END, dtype=torch.long)
        for i, row in enumerate(rows):
            out[i, : len(row)] = torch.tensor(row, dtype=torch.long)
        return out

    def source_text(self, task: str, read: Sequence[str]) -> str:
        """What the decoder reads besides the latent: the task and the last `cfg.sources` of the texts `read`
        (oldest first), one text; "" with `cfg.sources` = 0."""
        if self.cfg.sources == 0:
            return ""
        return " ".join([task, *read[-self.cfg.sources :]])

    def source_ids(self, texts: Sequence[str]) -> torch.Tensor:
        """(B, S) piece ids of the source texts `texts` (`source_text`), `end`-padded to the longest (a source holds
        up to `cfg.sources` observations and the task; it is cut at that many times `length`)."""
        return self._padded(texts, self.length * (self.cfg.sources + 1))

    def _memory(self, src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The previous texts' ids (B, S) -> (memory (B, S, h), mask (B, S) of the pieces before `end`)."""
        mask = src != END
        memory, _ = self.source(self.embed(src))
        return self.source_out(memory), mask

    def _step(self, latent, prev, state, memory, mask):
        """(log p_vocab (B, T, V + 2), attention (B, T, S), log gate, log (1 - gate), GRU state) after the
        previous pieces `prev` (B, T)."""
        emb = self.embed(prev)
        y, state = self.gru(torch.cat([emb, latent.unsqueeze(1).expand(-1, prev.size(1), -1)], -1), state)
        logits = torch.einsum("bth,bsh->bts", self.query(y), memory) / memory.size(-1) ** 0.5
        has = mask.any(1)  # rows with a previous text
        logits = logits.masked_fill(~mask[:, None, :], float("-inf")).masked_fill(~has[:, None, None], 0.0)
        attn = logits.softmax(-1)
        ctx = attn @ memory
        both = torch.cat([y, ctx], -1)
        log_vocab = self.out(torch.tanh(self.mix(both))).log_softmax(-1)
        g = self.gate(torch.cat([both, emb], -1)).squeeze(-1)
        g = g.masked_fill(~has[:, None], 1e4)  # no previous text: the vocabulary only
        return log_vocab, attn, F.logsigmoid(g), F.logsigmoid(-g), state

    def _start(self, z: torch.Tensor, prev_ids: torch.Tensor | None):
        latent = self.latent_in(z.flatten(1))
        if prev_ids is None:
            prev_ids = torch.full((z.size(0), 1), END, dtype=torch.long, device=z.device)
        memory, mask = self._memory(prev_ids.to(z.device))
        return latent, memory, mask, prev_ids.to(z.device)

    def loss(self, z: torch.Tensor, ids: torch.Tensor, prev_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Teacher-forced negative log-likelihood of every position up to and including the first `end`;
        `prev_ids` (B, S): the previous texts (None, or a row of `end`s: none)."""
        b, t = ids.shape
        latent, memory, mask, src = self._start(z, prev_ids)
        prev = torch.cat([torch.full((b, 1), self.begin, dtype=torch.long, device=ids.device), ids[:, :-1]], 1)
        log_vocab, attn, log_g, log_ng, _ = self._step(latent, prev, latent.unsqueeze(0).contiguous(), memory, mask)
        gen = log_vocab.gather(-1, ids[..., None]).squeeze(-1) + log_g
        same = (src[:, None, :] == ids[:, :, None]) & mask[:, None, :]  # (B, T, S): copying gives the target
        copied = (attn * same).sum(-1).clamp_min(1e-12).log() + log_ng
        nll = -torch.logaddexp(gen, copied)
        is_end = ids == END
        first_end = torch.where(is_end.any(1), is_end.float().argmax(1), torch.full_like(ids[:, 0], t - 1))
        keep = torch.arange(t, device=ids.device)[None] <= first_end[:, None]
        return nll[keep].mean()

    @torch.no_grad()
    def decode(self, z: torch.Tensor, prev_texts: Sequence[str] | None = None) -> list[str]:
        """The greedy text of each latent (B, L, d) after `prev_texts` (what each row's agent read before, as
        `source_text` writes it; None: nothing), piece by piece until `end`; `unknown` is never written."""
        b = z.size(0)
        latent, memory, mask, src = self._start(z, None if prev_texts is None else self.source_ids(prev_texts))
        state = latent.unsqueeze(0).contiguous()
        prev = torch.full((b, 1), self.begin, dtype=torch.long, device=z.device)
        written = torch.full((b, self.length), END, dtype=torch.long)
        alive = torch.ones(b, dtype=torch.bool)
        for p in range(self.length):
            log_vocab, attn, log_g, log_ng, state = self._step(latent, prev, state, memory, mask)
            prob = log_vocab[:, -1].exp() * log_g[:, -1:].exp()
            prob = prob.scatter_add(1, src, attn[:, -1] * mask * log_ng[:, -1:].exp())
            prob[:, UNKNOWN] = -1.0
            nxt = prob.argmax(-1)
            written[:, p] = torch.where(alive, nxt.cpu(), END)
            alive &= nxt.cpu() != END
            if not alive.any():
                break
            prev = nxt[:, None]
        return ["".join(self.vocabulary[i - 2] for i in row if i != END) for row in written.tolist()]
