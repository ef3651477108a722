"""Where simulated rollouts lose the policy signal: per-step simulated reward and termination.

    .venv/bin/python benchmarks/rollout_diagnosis.py [overrides ...]

Needs a finished `adwm quickstart` (world model and the evaluated agent's projector under run.root).
Simulates the evaluated agent at eps 0 and eps 1 (no continuation guidance) and writes, per
simulated step, the mean reward, the mean termination probability and the share of rollouts
with a reward above 0.05, next to the same statistics of the logs, to
benchmarks/results/rollout_diagnosis.json. Policies that differ in value should differ in these
curves; where the curves meet, the simulation no longer carries the policy's effect.

It also replays held-out logged episodes open loop (the logged actions, no agent) through the world
model: the simulated against the logged return of each episode (mean, Spearman, Pearson) and per
step, which separates the world model's fidelity from the agent's reading of simulated latents.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import torch

from adwm.atomic import atomic_write_json
from adwm.config import load_config, to_object
from adwm.data.datamodule import TrajectoryDataModule
from adwm.evaluation.metrics import spearman
from adwm.evaluation.readers import SoftTokenReader
from adwm.evaluation.simulate import SimulateConfig, Window, logged_starts, simulate
from adwm.guidance.composed import GuidanceConfig
from adwm.models.world_model import WorldModelModule
from adwm.policies.llm import LLMPolicy
from adwm.project import backbone_key, load_projector


def main(overrides: list[str]) -> Path:
    cfg = load_config(overrides, "evaluate")
    wm = WorldModelModule.load_from_checkpoint(cfg.evaluate.world_model, map_location="cpu").eval()
    dm = TrajectoryDataModule(to_object(cfg.data), cfg.seed)
    dm.setup()
    rewards = np.array([x["reward"] for x in dm.train_items])
    dones = np.array([x["done"] for x in dm.train_items])
    pcfg = to_object(cfg.policy)
    agent = LLMPolicy(pcfg)
    ckpt = Path(cfg.run.root) / "project" / backbone_key(pcfg.model) / "projector.ckpt"
    reader = SoftTokenReader(load_projector(ckpt, wm, agent))
    steps: list[tuple[float, float, float]] = []
    transition = wm.heads.transition

    def recorded(z, c, a):
        reward, done_logit = transition(z, c, a)
        steps.append(
            (reward.mean().item(), torch.sigmoid(done_logit).mean().item(), (reward > 0.05).float().mean().item())
        )
        return reward, done_logit

    wm.heads.transition = recorded
    out = {
        "logs": {
            "reward_per_step": float(rewards.mean()),
            "p_done": float(dones.mean()),
            "share_reward": float((rewards > 0.05).mean()),
        },
        "policies": {},
    }
    horizon = cfg.evaluate.simulate.horizon or cfg.env.max_steps
    sim = SimulateConfig(n_rollouts=64, batch_size=64, snap=cfg.evaluate.simulate.snap)
    for eps in (0.0, 1.0):
        steps.clear()
        p = dataclasses.replace(pcfg, eps=eps)
        returns = simulate(
            wm,
            p,
            reader if eps < 1 else None,
            logged_starts(dm),
            sim,
            GuidanceConfig(eta=0.0),
            cfg.env.gamma,
            horizon,
            cfg.seed,
        )
        out["policies"][f"{pcfg.name}_eps{eps:g}"] = {
            "J_hat": float(returns.mean()),
            "reward_per_step": [round(s[0], 4) for s in steps],
            "p_done": [round(s[1], 4) for s in steps],
            "share_reward": [round(s[2], 3) for s in steps],
        }
    wm.heads.transition = transition
    out["replay"] = replay(wm, dm, cfg.env.gamma, cfg.seed)
    path = Path(__file__).parent / "results" / "rollout_diagnosis.json"
    atomic_write_json(path, out)
    return path


@torch.no_grad()
def replay(wm, dm, gamma: float, seed: int, n: int = 64) -> dict:
    """Held-out episodes with their logged actions, simulated open loop from the logged first observation."""
    episodes: list[list[dict]] = []
    for x in dm.val_items:  # items of an episode are consecutive and start at t = 0
        if x["t"] == 0:
            episodes.append([])
        episodes[-1].append(x)
    episodes = episodes[:n]
    b, horizon = len(episodes), max(len(e) for e in episodes)
    gen = torch.Generator().manual_seed(seed)
    vocab = wm.vocab_embeddings()
    window = Window.start(
        wm.encode([dm.observations[e[0]["history_obs"][-1]] for e in episodes]),
        wm.encode([dm.tasks[e[0]["task"]] for e in episodes]),
        wm.hparams.window,
        vocab.size(1),
    )
    sim, logged, alive = (np.zeros((b, horizon)) for _ in range(3))
    for t in range(horizon):
        for i, e in enumerate(episodes):
            if t < len(e):
                logged[i, t], alive[i, t] = e[t]["reward"], 1.0
        a = vocab[torch.tensor([e[min(t, len(e) - 1)]["action"] for e in episodes])]
        c = window.context(wm)
        z_next = wm.sample_next(c, a, gen)
        sim[:, t] = wm.heads.transition(z_next, c, a)[0].numpy()
        window = window.shifted(z_next, a)
    disc = gamma ** np.arange(horizon)
    r_sim, r_log = (sim * alive * disc).sum(1), (logged * alive * disc).sum(1)
    live = alive.sum(0) > 0
    return {
        "episodes": b,
        "return_logged": float(r_log.mean()),
        "return_simulated": float(r_sim.mean()),
        "spearman": spearman(list(r_log), list(r_sim)),
        "pearson": float(np.corrcoef(r_log, r_sim)[0, 1]),
        "reward_per_step_logged": [round(float(v), 4) for v in (logged * alive).sum(0)[live] / alive.sum(0)[live]],
        "reward_per_step_simulated": [round(float(v), 4) for v in (sim * alive).sum(0)[live] / alive.sum(0)[live]],
    }


if __name__ == "__main__":
    print(main(sys.argv[1:]))
