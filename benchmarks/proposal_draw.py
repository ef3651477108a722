"""The analogy world's own draw against its proposals drawn at the log's frequencies, with no learned model.

    .venv/bin/python benchmarks/proposal_draw.py [--rollouts N] [overrides ...]   # e.g. seed=0 run.root=runs/v0

`evaluate.world=guided_analogy` at a large `evaluate.simulate.proposal_temperature` picks each next state
among `AnalogyWorld.proposals` by how often the log made it, which should be the analogy world's own step
(`evaluate.world=analogy`) with merged outcomes: the same next texts as often, their mean reward, their share
of ends. This script rolls the uniform agent (`policy=uniform`) out both ways from the same logged starts
(the training split's world, as `adwm evaluate` builds it) and adds an entry, keyed by the log, to
`benchmarks/results/proposal_draw.json`: each way's mean discounted return, its standard error and the
difference in standard errors.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from omegaconf import OmegaConf

from adwm.config import load_config
from adwm.data.config import DataConfig
from adwm.data.datamodule import TrajectoryDataModule
from adwm.policies.base import AgentState
from adwm.policies.config import PolicyConfig
from adwm.policies.factory import build_policy
from adwm.runtime.atomic import atomic_write_json
from adwm.simulation.analogy import AnalogyWorld
from adwm.simulation.guided_analogy import move_to
from adwm.simulation.worlds import drawn_starts, logged_episode_starts, rollout_world

OUT = Path(__file__).resolve().parent / "results" / "proposal_draw.json"


def proposal_returns(world: AnalogyWorld, policy, starts, n: int, horizon: int, gamma: float, seed: int) -> np.ndarray:
    """Discounted returns of `policy` when each next state is drawn among `world.proposals` by their weights
    (how often the log made each), paid the proposal's reward and ended with its share of ends."""
    pick, rngs = drawn_starts(len(starts), n, seed)
    states = [world.start(starts[i]) for i in pick]
    draw = np.random.default_rng((seed, 1))
    alive, returns = np.ones(n, dtype=bool), np.zeros(n)
    for t in range(horizon):
        live = np.flatnonzero(alive).tolist()
        seen = [
            AgentState(states[i].task, states[i].observation, states[i].history, states[i].admissible) for i in live
        ]
        picked = {}
        for i, action in zip(live, policy.act(seen, [rngs[i] for i in live])):
            options = world.proposals(states[i], action)
            w = np.array([p.weight for p in options])
            picked[i] = options[int(draw.choice(len(options), p=w / w.sum()))]
        for i, p in picked.items():
            returns[i] += gamma**t * p.reward
            alive[i] = not draw.random() < p.done
        move_to(world, states, picked)
        if not alive.any():
            break
    return returns


def main(overrides: list[str], n: int) -> Path:
    cfg = load_config(overrides, "evaluate")
    dm = TrajectoryDataModule(DataConfig(**cfg.data), cfg.seed, cfg.env.name)
    dm.setup()
    starts = logged_episode_starts(dm.train_episodes + dm.val_episodes)
    policy = build_policy(PolicyConfig(name="uniform", kind="uniform"), "policy uniform")
    horizon, gamma = cfg.env.max_steps, cfg.env.gamma
    entry = {"overrides": overrides, "rollouts": n, "policy": "uniform"}
    for name, run in (
        (
            "analogy",
            lambda: rollout_world(AnalogyWorld(dm.train_episodes), policy, starts, n, horizon, gamma, cfg.seed),
        ),
        (
            "proposals",
            lambda: proposal_returns(AnalogyWorld(dm.train_episodes), policy, starts, n, horizon, gamma, cfg.seed),
        ),
    ):
        start = time.perf_counter()
        r = run()
        entry[name] = {
            "mean": float(r.mean()),
            "se": float(r.std(ddof=1) / np.sqrt(n)),
            "seconds": time.perf_counter() - start,
        }
    a, p = entry["analogy"], entry["proposals"]
    entry["z"] = (p["mean"] - a["mean"]) / float(np.hypot(a["se"], p["se"]))
    results = json.loads(OUT.read_text()) if OUT.is_file() else {}
    results[OmegaConf.select(cfg, "data.log")] = entry
    atomic_write_json(OUT, results)
    print(json.dumps(entry, indent=1))
    return OUT


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=400)
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    main(args.overrides, args.rollouts)
