"""Fidelity metrics (simulation/fidelity.py) of a fitted world model, without refitting it.

    .venv/bin/python benchmarks/fidelity.py [--sampler-steps K] [overrides ...]   # e.g. seed=3 run.root=runs/v3

`adwm fit` reports them when it ends (metrics.json `fidelity/*`); this script computes them for a world model
fitted before, on the held-out episodes of its log split, and adds an entry (keyed by run.fit, and
`@steps<K>` when the replay samples with K reverse steps instead of the world model's own, as
`evaluate.diffusion.sampler_steps` does) to `benchmarks/results/fidelity.json`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from adwm.config import load_config
from adwm.data.config import DataConfig
from adwm.data.datamodule import TrajectoryDataModule
from adwm.envs.registry import state_key
from adwm.models.world_model import WorldModelModule
from adwm.runtime.atomic import atomic_write_json
from adwm.runtime.checkpoints import load_checkpoint
from adwm.runtime.provenance import benchmark_stamp
from adwm.simulation.fidelity import replay_fidelity
from adwm.simulation.simulate import simulation_sampler

OUT = Path(__file__).resolve().parent / "results" / "fidelity.json"


def main(overrides: list[str], sampler_steps: int = 0) -> Path:
    cfg = load_config(overrides, "fit")
    dm = TrajectoryDataModule(DataConfig(**cfg.data), cfg.seed, cfg.env.name)
    dm.setup()
    wm = load_checkpoint(WorldModelModule, Path(cfg.run.fit) / "checkpoints" / "last.ckpt", "run.fit").eval()
    wm.sampler = simulation_sampler(wm, sampler_steps)
    held = dm.val_episodes[: cfg.fit.fidelity_episodes]
    metrics = replay_fidelity(wm, held, dm.train_episodes, state_key(cfg.env.name), cfg.env.gamma, cfg.seed)
    results = json.loads(OUT.read_text()) if OUT.is_file() else {}
    key = cfg.run.fit + (f"@steps{sampler_steps}" if sampler_steps else "")
    results[key] = {
        "overrides": overrides,
        "sampler_steps": len(wm.sampler.timesteps),
        **metrics,
        "provenance": benchmark_stamp(),
    }
    atomic_write_json(OUT, results)
    return OUT


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sampler-steps", type=int, default=0, help="reverse steps of the replay (0: its own)")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    print(main(args.overrides, args.sampler_steps))
