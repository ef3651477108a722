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

from adwm.config import load_config, to_object
from adwm.data.datamodule import TrajectoryDataModule
from adwm.evaluation.metrics import spearman
from adwm.guidance.config import GuidanceConfig
from adwm.models.world_model import WorldModelModule
from adwm.models.world_model.replay import episode_returns, episodes_of, replay_open_loop
from adwm.policies.llm import LLMPolicy
from adwm.runtime.atomic import atomic_write_json
from adwm.simulation.config import SimulateConfig
from adwm.simulation.readers import SoftTokenReader
from adwm.simulation.simulate import attach_logged_worlds, logged_reward_range, logged_starts, simulate
from adwm.stages.project import backbone_key, load_projector


def main(overrides: list[str]) -> Path:
    cfg = load_config(overrides, "evaluate")
    wm = WorldModelModule.load_from_checkpoint(cfg.evaluate.world_model, map_location="cpu").eval()
    dm = TrajectoryDataModule(to_object(cfg.data), cfg.seed)
    dm.setup()
    attach_logged_worlds(wm, dm)  # evaluate.diffusion.snap_world, as `adwm evaluate` does
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
    sim = SimulateConfig(n_rollouts=64, batch_size=64, snap=cfg.evaluate.diffusion.snap)
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
            reward_range=logged_reward_range(dm),
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


def replay(wm, dm, gamma: float, seed: int, n: int = 64) -> dict:
    """Held-out episodes with their logged actions, simulated open loop from the logged first observation."""
    episodes = episodes_of(dm.val_items)[:n]
    data = replay_open_loop(wm, dm, episodes, torch.Generator().manual_seed(seed))
    with torch.no_grad():
        sim = wm.heads.transition(data.z_next, data.c, data.a)[0].double()
    r_sim, r_log = episode_returns(data, sim, gamma).numpy(), episode_returns(data, data.reward, gamma).numpy()
    steps = int(data.t.max()) + 1
    alive = torch.bincount(data.t, minlength=steps).double()

    def per_step(values: torch.Tensor) -> list[float]:
        sums = torch.zeros(steps, dtype=torch.float64).index_add_(0, data.t, values.double())
        return [round(float(v), 4) for v in sums / alive]

    return {
        "episodes": len(episodes),
        "return_logged": float(r_log.mean()),
        "return_simulated": float(r_sim.mean()),
        "spearman": spearman(list(r_log), list(r_sim)),
        "pearson": float(np.corrcoef(r_log, r_sim)[0, 1]),
        "reward_per_step_logged": per_step(data.reward),
        "reward_per_step_simulated": per_step(sim),
    }


if __name__ == "__main__":
    print(main(sys.argv[1:]))
