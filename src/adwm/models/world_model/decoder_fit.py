"""The text decoder trained after the fit, on the latents it will read in simulation.

Three kinds of rows, each paired with the true observation text; the decoder reads the task and the last
observations as well as the latent (models/text_decoder.py), and learns to write without one too:
- the encoded training observations with no previous text (reconstruction: a logged state reads back as
  itself, as a rollout's first state or a reader without a history does);
- the encoded next observation of each logged transition, after what the agent read before it (the task
  and the last observations: `world_model.decoder.sources`);
- the diffusion model's own samples of next latents, from open-loop replays of the training episodes with
  their logged actions and no snapping (models/world_model/replay.py), so from the second step on the
  history is made of samples too, as in a rollout; after the logged task and observations, the target is the
  logged next one.
The encoder and the dynamics stay as fitted. Figures (`decoder/...`): the share of observations whose encoded
latent decodes to exactly their text with no previous text (`train_roundtrip`, `val_roundtrip`), of held-out
transitions whose encoded next latent decodes after the logged task and observations to exactly the next one
(`val_next_exact`), and of held-out replayed steps whose sample does (`val_sampled_exact`).
"""

from __future__ import annotations

import time

import numpy as np
import torch

from adwm.data.datamodule import TrajectoryDataModule
from adwm.models.text_decoder import END
from adwm.models.world_model.config import DecoderFitConfig
from adwm.models.world_model.replay import episodes_of, replay_open_loop

METRIC_ROWS = 2000  # texts decoded for each figure (greedy decoding costs a GRU step a piece)


def _trimmed(ids: torch.Tensor, prev: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch's target and previous-text ids cut to their longest row (the padding costs GRU steps): the
    targets keep one `end`, the previous texts at least one position."""
    longest = int((ids != END).sum(1).max()) + 1
    return ids[:, : min(longest, ids.size(1))], prev[:, : max(1, int((prev != END).sum(1).max()))]


def _source(wm, dm: TrajectoryDataModule, x: dict) -> str:
    """What the decoder reads before a transition's next observation: its task and its logged history."""
    return wm.text_decoder.source_text(dm.tasks[x["task"]], [dm.observations[o] for o in x["history_obs"]])


def _replayed_pairs(wm, dm: TrajectoryDataModule, episodes: list[list[dict]], gen, passes: int):
    """(sampled next latents (N, L, d), the logged next observation of each, what the decoder reads before
    it: the task and the logged observations up to it) over `passes` replays."""
    zs, texts, before = [], [], []
    targets = [dm.observations[x["next_obs"]] for e in episodes for x in e]
    previous = [_source(wm, dm, x) for e in episodes for x in e]
    starts = np.cumsum([0] + [len(e) for e in episodes])  # each episode's first row in `targets`
    for _ in range(passes):
        data = replay_open_loop(wm, dm, episodes, gen)
        rows = torch.from_numpy(starts[data.episode.numpy()]) + data.t  # replay rows come step by step
        zs.append(data.z_next)
        texts += [targets[int(r)] for r in rows]
        before += [previous[int(r)] for r in rows]
    return torch.cat(zs), texts, before


def _exact(wm, z: torch.Tensor, texts: list[str], prev: list[str] | None = None, batch_size: int = 512) -> float:
    """The share of latents `z` that decode (after `prev`, None: no previous text) to exactly `texts`."""
    decoded = []
    for i in range(0, len(z), batch_size):
        decoded += wm.text_decoder.decode(z[i : i + batch_size], None if prev is None else prev[i : i + batch_size])
    return float(np.mean([a == b for a, b in zip(decoded, texts)])) if texts else float("nan")


def _transitions(wm, dm: TrajectoryDataModule, episodes: list[list[dict]]) -> tuple[list[str], list[str]]:
    """The distinct logged (source, next observation) pairs of `episodes` (`_source`), as two lists."""
    pairs = dict.fromkeys((_source(wm, dm, x), dm.observations[x["next_obs"]]) for e in episodes for x in e)
    return [a for a, _ in pairs], [b for _, b in pairs]


def fit_text_decoder(wm, dm: TrajectoryDataModule, cfg: DecoderFitConfig, seed: int) -> dict[str, float]:
    """Trains `wm.text_decoder` (in place) -> `decoder/...` metrics."""
    start = time.time()
    gen = torch.Generator().manual_seed(seed)
    wm.eval()
    decoder = wm.require_text_decoder()
    train_eps, val_eps = episodes_of(dm.train_items), episodes_of(dm.val_items)
    seen = [dm.observations[o] for e in train_eps for x in e for o in (x["history_obs"][-1], x["next_obs"])]
    logged = list(dict.fromkeys(seen))
    z_logged = wm.encode(logged)
    before, after = _transitions(wm, dm, train_eps)
    z_after = wm.encode(after)
    z_sampled, sampled, sampled_before = (
        _replayed_pairs(wm, dm, train_eps, gen, cfg.passes) if cfg.sampled else (z_after[:0], [], [])
    )
    z_all = torch.cat([z_logged, z_after, z_sampled])
    ids_all = decoder.ids(logged + after + sampled)
    prev_all = decoder.source_ids([""] * len(logged) + before + sampled_before)
    n = len(ids_all)
    opt = torch.optim.AdamW(decoder.parameters(), lr=cfg.lr)
    decoder.train()
    loss = torch.zeros(())
    with torch.enable_grad():
        for _ in range(cfg.steps):
            idx = torch.randint(0, n, (cfg.batch_size,), generator=gen)
            loss = decoder.loss(z_all[idx], *_trimmed(ids_all[idx], prev_all[idx]))
            opt.zero_grad()
            loss.backward()
            opt.step()
    decoder.eval()
    metrics = {"decoder/loss": float(loss.detach()), "decoder/rows": float(n), "decoder/seconds": time.time() - start}
    keep = np.random.default_rng(seed).permutation(len(logged))[:METRIC_ROWS].tolist()
    metrics["decoder/train_roundtrip"] = _exact(wm, z_logged[keep], [logged[i] for i in keep])
    held = list(dict.fromkeys(dm.observations[x["history_obs"][-1]] for e in val_eps for x in e))[:METRIC_ROWS]
    if held:
        metrics["decoder/val_roundtrip"] = _exact(wm, wm.encode(held), held)
    if val_eps:
        before_val, after_val = (x[:METRIC_ROWS] for x in _transitions(wm, dm, val_eps))
        metrics["decoder/val_next_exact"] = _exact(wm, wm.encode(after_val), after_val, before_val)
    if val_eps and cfg.sampled:
        z_val, texts_val, before_val = _replayed_pairs(wm, dm, val_eps, gen, 1)
        n = METRIC_ROWS
        metrics["decoder/val_sampled_exact"] = _exact(wm, z_val[:n], texts_val[:n], before_val[:n])
    return metrics
