"""Observation encoders: text -> latent tokens z of shape (L, d_z), chosen by registry name."""

from __future__ import annotations

import torch
from torch import nn

from adwm.encoders.config import EncoderConfig
from adwm.encoders.pooling import LatentPool

LENGTH_BUCKETS = 3  # passes over length-sorted texts in one forward (1 = one padded batch)
BUCKET_ROWS = 64  # at least this many texts per pass


class TextEncoder(nn.Module):
    """Tokenise, run a backbone to token states, pool to (B, L, d_z)."""

    def __init__(self, cfg: EncoderConfig, tokenizer, backbone: nn.Module, d_hidden: int) -> None:
        super().__init__()
        self.cfg, self.tokenizer, self.backbone = cfg, tokenizer, backbone
        self.pool = LatentPool(d_hidden, cfg.n_latents, cfg.d_latent, cfg.heads)
        self._ids: dict[str, list[int]] = {}  # token ids per distinct text
        if not cfg.trainable:
            self.requires_grad_(False)

    def tokenize(self, texts: list[str]) -> dict[str, torch.Tensor]:
        """What `tokenizer(texts, padding=True, truncation=True, max_length=max_tokens)` gives (input_ids,
        attention_mask), with each distinct text tokenised once: a fit encodes the same observations
        every step, and tokenising them anew is a noticeable share of a joint step."""
        return self._padded(self._token_ids(texts))

    def _token_ids(self, texts: list[str]) -> list[list[int]]:
        missing = [t for t in dict.fromkeys(texts) if t not in self._ids]
        if missing:
            encoded = self.tokenizer(missing, truncation=True, max_length=self.cfg.max_tokens)["input_ids"]
            self._ids.update(zip(missing, encoded))
        return [self._ids[t] for t in texts]

    def _padded(self, rows: list[list[int]]) -> dict[str, torch.Tensor]:
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), self.tokenizer.pad_token_id or 0, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        left = self.tokenizer.padding_side == "left"
        for i, r in enumerate(rows):
            span = slice(width - len(r), width) if left else slice(0, len(r))
            ids[i, span], mask[i, span] = torch.tensor(r, dtype=torch.long), 1
        return {"input_ids": ids, "attention_mask": mask}

    def token_states(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.backbone(input_ids=ids, attention_mask=mask).last_hidden_state

    def forward(self, texts: list[str]) -> torch.Tensor:
        """(B,) texts -> (B, L, d_z).

        A large batch runs as up to `LENGTH_BUCKETS` passes over texts of similar length, each padded only to
        its own longest: the same latents (right padding is masked), less padding. On a joint fit step (220
        observations of 30-76 tokens, mean 51) forward and backward took 0.16 s against 0.22 s in one pass."""
        rows = self._token_ids(texts)
        n = min(LENGTH_BUCKETS, len(rows) // BUCKET_ROWS)
        if n <= 1 or self.tokenizer.padding_side == "left":  # left padding shifts absolute positions with width
            return self._encode(self._padded(rows))
        order = sorted(range(len(rows)), key=lambda i: len(rows[i]))
        parts = [order[k * len(order) // n : (k + 1) * len(order) // n] for k in range(n)]
        z = torch.cat([self._encode(self._padded([rows[i] for i in part])) for part in parts])
        return z[torch.argsort(torch.tensor([i for part in parts for i in part]))]

    def _encode(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        device = next(self.parameters()).device
        ids, mask = batch["input_ids"].to(device), batch["attention_mask"].to(device)
        return self.pool(self.token_states(ids, mask), mask)
