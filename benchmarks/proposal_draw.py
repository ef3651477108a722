"""The analogy world's own draw against its proposals drawn at the log's frequencies, with no learned model.

    .venv/bin/python benchmarks/proposal_draw.py [--rollouts N] [overrides ...]   # e.g. seed=0 run.root=runs/v0

`evaluate.world=guided_analogy` at a large `evaluate.guided_analogy.temperature` picks each next state
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
from adwm.policies.config import PolicyConfig
from adwm.policies.factory import build_policy
from adwm.runtime.atomic import atomic_write_json
from adwm.simulation.analogy import AnalogyWorld
from adwm.simulation.guided_analogy import move_to
from adwm.simulation.worlds import LoggedStart, TextState, logged_episode_starts, rollout_world

OUT = Path(__file__).resolve().parent / "results" / "proposal_draw.json"


class ProposalDraw:
    """The analogy `world` stepping by its proposals (`AnalogyWorld.proposals`), each drawn by how often the log
    made it, paid its mean reward and ended with its share of ends, and moved to as `guided_analogy` moves
    (`move_to`): `guided_analogy` at a large temperature, without a learned model."""

    def __init__(self, world: AnalogyWorld) -> None:
        self.world = world

    def start(self, start: LoggedStart) -> TextState:
        return self.world.start(start)

    def step(self, state: TextState, action: str, rng: np.random.Generator) -> tuple[TextState, float, bool]:
        options = self.world.proposals(state, action)
        w = np.array([p.weight for p in options])
        picked = options[int(rng.choice(len(options), p=w / w.sum()))]
        states = [state]
        move_to(self.world, states, {0: picked})
        return states[0], picked.reward, bool(rng.random() < picked.done)

    def close(self) -> None:
        return None


def main(overrides: list[str], n: int) -> Path:
    cfg = load_config(overrides, "evaluate")
    dm = TrajectoryDataModule(DataConfig(**cfg.data), cfg.seed, cfg.env.name)
    dm.setup()
    starts = logged_episode_starts(dm.train_episodes + dm.val_episodes)
    policy = build_policy(PolicyConfig(name="uniform", kind="uniform"), "policy uniform")
    horizon, gamma = cfg.env.max_steps, cfg.env.gamma
    entry = {"overrides": overrides, "rollouts": n, "policy": "uniform"}
    for name, world in (
        ("analogy", AnalogyWorld(dm.train_episodes)),
        ("proposals", ProposalDraw(AnalogyWorld(dm.train_episodes))),
    ):
        start = time.perf_counter()
        r = rollout_world(world, policy, starts, n, horizon, gamma, cfg.seed)
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
