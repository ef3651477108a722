"""Word-level guard: predict each token of an observation from its latent and the few tokens before it.

A latent-conditioned n-gram model. What the local context already predicts
("the door to the ...") costs the latent nothing; what it cannot ("... library is
closed" vs "... is open", which room, what is carried) must come from the latent.
So no word that distinguishes two states can be ignored, while a contrastive term
alone lets the encoder tell states apart by an easy part (the last action's
feedback sentence) and skip the rest.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn


class TokenDecoder(nn.Module):
    """p(token_i | token_{i-n+1..i-1}, z) over token ids modulo `vocab_size` (collisions only blur the
    guard; they keep a pretrained encoder's large vocabulary from dominating the step time)."""

    def __init__(self, d_z_flat: int, vocab_size: int, context: int = 3, d_embed: int = 32, hidden: int = 256) -> None:
        super().__init__()
        self.context, self.vocab_size = context, vocab_size
        self.embed = nn.Embedding(vocab_size + 1, d_embed)  # last id = "before the text"
        self.net = nn.Sequential(
            nn.Linear(d_z_flat + context * d_embed, hidden), nn.GELU(), nn.Linear(hidden, vocab_size)
        )

    def loss(self, z: torch.Tensor, ids: Sequence[torch.Tensor], positions: int, generator=None) -> torch.Tensor:
        """Mean cross-entropy at `positions` sampled token positions per text; z (U, L, d), ids per text."""
        bos = self.vocab_size
        rows, ctx, tgt = [], [], []
        for u, seq in enumerate(ids):
            if seq.numel() == 0:
                continue
            seq = seq % self.vocab_size
            padded = torch.cat([torch.full((self.context,), bos, dtype=torch.long), seq])
            pos = torch.randint(0, seq.numel(), (positions,), generator=generator)
            windows = torch.stack([padded[pos + k] for k in range(self.context)], dim=1)  # (P, context)
            rows.append(torch.full((positions,), u, dtype=torch.long))
            ctx.append(windows)
            tgt.append(seq[pos])
        rows_t, ctx_t, tgt_t = (torch.cat(x).to(z.device) for x in (rows, ctx, tgt))
        x = torch.cat([z.flatten(1)[rows_t], self.embed(ctx_t).flatten(1)], dim=-1)
        return F.cross_entropy(self.net(x), tgt_t)


def token_ids(texts: Sequence[str], tokenizer, cache: dict) -> list[torch.Tensor]:
    """Token ids of each text (no special tokens), cached per text."""
    out = []
    for text in texts:
        if text not in cache:
            cache[text] = torch.tensor(tokenizer(text, add_special_tokens=False)["input_ids"], dtype=torch.long)
        out.append(cache[text])
    return out
