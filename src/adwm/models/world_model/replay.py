"""Reward and termination heads refitted on the world model's own open-loop rollouts.

Simulation never shows the heads an encoded observation: every z_{t+1} they score is sampled, and
from the second step on the history c_t is built from sampled latents too. Heads trained on encoded
transitions read such inputs off their training distribution, and every simulated policy then
collects the same excess reward, which pulls the estimates of good and bad policies towards each
other (docs/decisions.md: heads refitted on replays).

The fix trains the heads on what simulation gives them: each logged training episode is replayed
open loop with its logged actions (the actions are exact, so c_t carries the true action history), and
the heads learn the logged r_t and done_t from the sampled (z_{t+1}, c_t, a_t). Only the reward and
termination heads change; the encoder, dynamics and every other head stay as fitted.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from adwm.data.datamodule import TrajectoryDataModule
from adwm.models.history import Window
from adwm.models.world_model.config import RolloutHeadsConfig
from adwm.models.world_model.protocol import WorldModel


@dataclass
class Replayed:
    """Open-loop transitions: the heads' inputs and the logged targets, one row per logged step."""

    z_next: torch.Tensor  # (N, L, d) sampled
    c: torch.Tensor  # (N, d_c) from sampled history latents
    a: torch.Tensor  # (N, d_a) logged action
    reward: torch.Tensor  # (N,)
    done: torch.Tensor  # (N,)
    episode: torch.Tensor  # (N,) index of the episode
    t: torch.Tensor  # (N,) step


def episodes_of(items: list[dict]) -> list[list[dict]]:
    """A split's items grouped by episode (items of an episode are consecutive and start at t = 0)."""
    out: list[list[dict]] = []
    for x in items:
        if x["t"] == 0 or not out:
            out.append([])
        out[-1].append(x)
    return out


@torch.no_grad()
def replay_open_loop(
    wm: WorldModel,
    dm: TrajectoryDataModule,
    episodes: list[list[dict]],
    generator: torch.Generator,
    batch_size: int = 512,
    snap: bool = False,
    by_action: bool = False,
) -> Replayed:
    """Replays episodes from their logged first observation with their logged actions through the
    world model's sampler (no agent, no guidance); with `snap`, each sampled latent is replaced by the
    nearest logged one before the history reads it, as simulation does (evaluate.diffusion.snap; with
    `by_action`, among the logged states the logged action led to: evaluate.diffusion.snap_by_action)."""
    if snap and wm.proposal_bank is None:
        raise RuntimeError("fit.rollout_heads.snap=true: the world model has no bank of logged latents to snap to")
    parts = [
        _replay_batch(wm, dm, episodes[i : i + batch_size], generator, first=i, snap=snap, by_action=by_action)
        for i in range(0, len(episodes), batch_size)
    ]
    return Replayed(**{k: torch.cat([p[k] for p in parts]) for k in parts[0]})


def _replay_batch(
    wm: WorldModel,
    dm: TrajectoryDataModule,
    episodes: list[list[dict]],
    generator: torch.Generator,
    first: int,
    snap: bool = False,
    by_action: bool = False,
) -> dict:
    vocab = wm.vocab_embeddings()
    window = Window.start(
        wm.encode([dm.observations[e[0]["history_obs"][-1]] for e in episodes]),
        wm.encode([dm.tasks[e[0]["task"]] for e in episodes]),
        wm.hparams.window,
        vocab.size(1),
    )
    rows: dict[str, list[torch.Tensor]] = {k: [] for k in ("z_next", "c", "a", "reward", "done", "episode", "t")}
    for t in range(max(len(e) for e in episodes)):
        live = torch.tensor([t < len(e) for e in episodes])
        ids = torch.tensor([e[min(t, len(e) - 1)]["action"] for e in episodes])
        a = vocab[ids]
        c = window.context(wm)
        z_next = wm.sample_next(c, a, generator)
        if snap:
            z_next, _ = wm.proposal_bank.snap(z_next, ids if by_action else None)
        rows["z_next"].append(z_next[live])
        rows["c"].append(c[live])
        rows["a"].append(a[live])
        rows["reward"].append(torch.tensor([float(e[t]["reward"]) for e in episodes if t < len(e)]))
        rows["done"].append(torch.tensor([float(e[t]["done"]) for e in episodes if t < len(e)]))
        rows["episode"].append(first + torch.nonzero(live).flatten())
        rows["t"].append(torch.full((int(live.sum()),), t))
        window = window.shifted(z_next, a)
    return {k: torch.cat(v) for k, v in rows.items()}


def episode_returns(data: Replayed, rewards: torch.Tensor, gamma: float) -> torch.Tensor:
    """Discounted return per replayed episode of per-row `rewards` (N,) -> (episodes,) float64."""
    disc = torch.tensor(gamma, dtype=torch.float64) ** data.t.double()
    n = int(data.episode.max()) + 1
    return torch.zeros(n, dtype=torch.float64).index_add_(0, data.episode, disc * rewards.double())


def replay_returns(wm: WorldModel, data: Replayed, gamma: float) -> dict[str, float]:
    """Discounted simulated (heads) against logged returns of the replayed episodes: mean of each and
    their correlation over episodes."""
    with torch.no_grad():
        reward, _ = wm.heads.transition(data.z_next, data.c, data.a)
    sim, log = episode_returns(data, reward, gamma), episode_returns(data, data.reward, gamma)
    n = len(sim)
    corr = float(np.corrcoef(sim.numpy(), log.numpy())[0, 1]) if n > 1 and sim.std() > 0 and log.std() > 0 else 0.0
    return {"return_logged": float(log.mean()), "return_simulated": float(sim.mean()), "pearson": corr}


def refit_transition_heads(
    wm: WorldModel, dm: TrajectoryDataModule, cfg: RolloutHeadsConfig, gamma: float, seed: int
) -> dict[str, float]:
    """Trains the reward and termination heads on open-loop replays of the training episodes; returns
    replay metrics of the held-out episodes before and after (`rollout_heads/...`)."""
    gen = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    wm.eval()
    snap = cfg.snap and wm.proposal_bank is not None  # a log without lists or written actions has no bank
    train_eps = episodes_of(dm.train_items)
    parts = []
    for _ in range(cfg.passes):
        chosen = train_eps
        if len(train_eps) > cfg.max_episodes:
            chosen = [train_eps[i] for i in rng.choice(len(train_eps), cfg.max_episodes, replace=False)]
        parts.append(replay_open_loop(wm, dm, chosen, gen, snap=snap, by_action=cfg.snap_by_action))
    data = Replayed(*(torch.cat([getattr(p, f) for p in parts]) for f in Replayed.__dataclass_fields__))
    val_eps = episodes_of(dm.val_items)
    held_out = replay_open_loop(wm, dm, val_eps, gen, snap=snap, by_action=cfg.snap_by_action) if val_eps else None
    metrics = {}
    if held_out is not None:
        metrics.update({f"rollout_heads/before_{k}": v for k, v in replay_returns(wm, held_out, gamma).items()})

    params = [*wm.heads.reward.parameters(), *wm.heads.termination.parameters()]
    opt = torch.optim.Adam(params, lr=cfg.lr)
    n = data.reward.numel()
    with torch.enable_grad():
        for _ in range(cfg.steps):
            idx = torch.randint(0, n, (cfg.batch_size,), generator=gen)
            reward, done = wm.heads.transition(data.z_next[idx], data.c[idx], data.a[idx])
            loss = wm.cfg.w_reward * F.mse_loss(reward, data.reward[idx]) + wm.cfg.w_done * (
                F.binary_cross_entropy_with_logits(done, data.done[idx])
            )
            opt.zero_grad()
            loss.backward()
            opt.step()
    metrics["rollout_heads/loss"] = float(loss.detach())
    metrics["rollout_heads/transitions"] = float(n)
    if held_out is not None:
        metrics.update({f"rollout_heads/after_{k}": v for k, v in replay_returns(wm, held_out, gamma).items()})
    return metrics
