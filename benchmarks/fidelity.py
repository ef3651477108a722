"""Fidelity metrics (simulation/fidelity.py) of a fitted world model, without refitting it.

    .venv/bin/python benchmarks/fidelity.py [overrides ...]      # e.g. seed=3 run.root=runs/v3

`adwm fit` reports them when it ends (metrics.json `fidelity/*`); this script computes them for a world model
fitted before, on the held-out episodes of its log split, and adds an entry (keyed by run.fit) to
`benchmarks/results/fidelity.json`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from adwm.config import load_config
from adwm.data.config import DataConfig
from adwm.data.datamodule import TrajectoryDataModule
from adwm.envs.registry import state_key
from adwm.models.world_model import WorldModelModule
from adwm.runtime.atomic import atomic_write_json
from adwm.runtime.checkpoints import load_checkpoint
from adwm.simulation.fidelity import replay_fidelity

OUT = Path(__file__).resolve().parent / "results" / "fidelity.json"


def main(overrides: list[str]) -> Path:
    cfg = load_config(overrides, "fit")
    dm = TrajectoryDataModule(DataConfig(**cfg.data), cfg.seed, cfg.env.name)
    dm.setup()
    wm = load_checkpoint(WorldModelModule, Path(cfg.run.fit) / "checkpoints" / "last.ckpt", "run.fit").eval()
    held = dm.val_episodes[: cfg.fit.fidelity_episodes]
    metrics = replay_fidelity(wm, held, dm.train_episodes, state_key(cfg.env.name), cfg.env.gamma, cfg.seed)
    results = json.loads(OUT.read_text()) if OUT.is_file() else {}
    results[cfg.run.fit] = {"overrides": overrides, **metrics}
    atomic_write_json(OUT, results)
    return OUT


if __name__ == "__main__":
    print(main(sys.argv[1:]))
