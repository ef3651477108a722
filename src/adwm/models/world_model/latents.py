"""Observation latents: encoding texts in the space the diffusion model samples in, and the cache
of latents once the encoder is frozen (the second, faster phase of a fit)."""

from __future__ import annotations

import torch


class LatentsMixin:
    """Encoding methods of `WorldModelModule` (it holds `encoder`, `target_encoder`, `encoder_frozen`,
    `_latents`)."""

    @torch.no_grad()
    def encode(self, texts: list[str], batch_size: int = 256) -> torch.Tensor:
        """Latents (N, L, d) of observation texts in the space the diffusion model samples in
        (the EMA target encoder's): simulation starts from these and the proposal bank holds them.
        Each distinct text is encoded once; once the encoder is frozen (or never trains) its latents are
        cached, so the proposal bank, calibration, projector and baselines do not re-encode the logs
        (a pretrained encoder runs ~75 texts/s on 2 cores)."""
        if bool(self.encoder_frozen) or not self.encoder.cfg.trainable:
            return self._cached_latents(texts, batch_size)
        distinct = list(dict.fromkeys(texts))
        z = self._encode_distinct(distinct, batch_size)
        where = {t: i for i, t in enumerate(distinct)}
        return z[torch.tensor([where[t] for t in texts], dtype=torch.long)]

    def _encode_distinct(self, texts: list[str], batch_size: int) -> torch.Tensor:
        if not texts:
            n, d = self.encoder.cfg.n_latents, self.encoder.cfg.d_latent
            return torch.zeros(0, n, d, device=self.device)
        return torch.cat([self.target_encoder(texts[i : i + batch_size]) for i in range(0, len(texts), batch_size)])

    def freeze_encoder(self, texts: list[str] | None = None) -> None:
        """Second fit phase: the encoder stops training, the target encoder becomes an exact copy of it,
        and latents are computed once per distinct text and cached. Every later step trains only the
        dynamics and heads, at a small fraction of a joint step's cost (the encoder is most of it).

        `texts` (the log's observations) are encoded at once, in sorted chunks: a latent then does not
        depend on which texts shared its padded batch, so a fit resumed after the freeze reads the very
        latents the uninterrupted fit read."""
        if not bool(self.encoder_frozen):
            self.target_encoder.load_state_dict(self.encoder.state_dict())
            self.encoder_frozen.fill_(True)
        self.encoder.requires_grad_(False)
        self._latents.clear()
        if texts:
            self._cached_latents(sorted(set(texts)))

    @torch.no_grad()
    def _cached_latents(self, texts: list[str], batch_size: int = 256) -> torch.Tensor:
        missing = [t for t in dict.fromkeys(texts) if t not in self._latents]
        if missing:
            was = self.target_encoder.training
            self.target_encoder.eval()
            for text, z in zip(missing, self._encode_distinct(missing, batch_size)):
                self._latents[text] = z
            self.target_encoder.train(was)
        if not texts:
            return self._encode_distinct([], batch_size)
        return torch.stack([self._latents[t] for t in texts])


def near_view(
    texts: list[str], hist: torch.Tensor, next_obs: torch.Tensor, task: torch.Tensor, window: int
) -> tuple[list[str], torch.Tensor, torch.Tensor, torch.Tensor]:
    """The batch restricted to the last `window` history observations, o_{t+1} and the task: the texts
    the encoder must run on, and the indices remapped into them (older positions read as before the
    episode). A long history window would otherwise multiply the encoder's cost, which is most of a
    joint step; the window is read in full once latents are cached."""
    near = hist.clone()
    near[:, : max(hist.size(1) - window, 0)] = -1
    used = torch.unique(torch.cat([near[near >= 0], next_obs, task]))
    pos = torch.full((len(texts),), -1, dtype=torch.long)
    pos[used] = torch.arange(len(used))
    near = torch.where(near >= 0, pos[near.clamp(min=0)], near)
    return [texts[int(i)] for i in used], near, pos[next_obs], pos[task]
