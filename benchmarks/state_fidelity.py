"""Does the world model keep the builtin world's state? Room and inventory of simulated states.

    .venv/bin/python benchmarks/state_fidelity.py [overrides ...]      # e.g. seed=1 run.root=runs/q1

Needs a fitted world model (`evaluate.world_model`) on a `builtin` log. Simulated latents are read
through the text of their nearest logged state (what snapping gives the agent and the heads), and the
room ("You are in the ...") and inventory ("You carry ...") of that text are compared:

* one step on held-out logged transitions, from the true history and action: the nearest logged
  state to the encoded true next observation (`encoder`: how well latent neighbourhoods separate
  states at all), the snapped sample of the next latent (`sample`), and the current observation
  (`unchanged`: what copying the state would score);
* closed loop, the uniform policy over the simulated candidate sets (no agent, no continuation
  guidance): the share of steps whose action cannot change the inventory (not take / drop / put)
  where it changed anyway, and likewise the room for actions other than go (one step from a true
  history, `*_without_move` and `*_without_item_action` give the same comparison).

Writes `benchmarks/results/state_fidelity.json`, one entry per run.root.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import torch

from adwm.config import load_config, to_object
from adwm.data.datamodule import TrajectoryDataModule
from adwm.guidance import guided_eps_fn
from adwm.guidance.config import GuidanceConfig
from adwm.models.world_model import WorldModelModule
from adwm.policies.config import PolicyConfig
from adwm.runtime.atomic import atomic_write_json
from adwm.simulation.config import SimulateConfig
from adwm.simulation.simulate import attach_logged_worlds, logged_reward_range, logged_starts, simulate

ROOM = re.compile(r"You are in the ([a-z ]+)\.")
INVENTORY = re.compile(r"You carry ([^.]*)\.")
MOVES_ITEMS = ("take ", "drop ", "put ")


def room(text: str) -> str | None:
    m = ROOM.search(text)
    return m[1] if m else None


def inventory(text: str) -> str | None:
    m = INVENTORY.search(text)
    return m[1] if m else None


def main(overrides: list[str], batches: int = 8, rollouts: int = 64) -> Path:
    cfg = load_config(overrides, "evaluate")
    if cfg.env.name != "builtin":
        raise ValueError(f"env.name: state_fidelity reads builtin's room and inventory sentences, got '{cfg.env.name}'")
    wm = WorldModelModule.load_from_checkpoint(cfg.evaluate.world_model, map_location="cpu").eval()
    dm = TrajectoryDataModule(to_object(cfg.data), cfg.seed)
    dm.setup()
    attach_logged_worlds(wm, dm)  # evaluate.diffusion.snap_world, as `adwm evaluate` does
    entry = {
        "world_model": str(cfg.evaluate.world_model),
        "one_step": one_step(wm, dm, batches, cfg.seed),
        "closed_loop": closed_loop(wm, dm, cfg, rollouts),
    }
    path = Path(__file__).parent / "results" / "state_fidelity.json"
    results = json.loads(path.read_text()) if path.is_file() else {}
    results[str(cfg.run.root)] = entry
    atomic_write_json(path, results)
    return path


@torch.no_grad()
def one_step(wm, dm, batches: int, seed: int) -> dict:
    bank, vocab = wm.proposal_bank, wm.vocab_embeddings()
    gen = torch.Generator().manual_seed(seed)
    hits: dict[str, list[bool]] = {}
    for k, batch in enumerate(dm.val_dataloader()):
        if k >= batches:
            break
        z = wm.encode(batch["texts"])
        c = wm.context(z, batch["history_obs"], batch["history_actions"], vocab, batch["task"])
        a = vocab[batch["history_actions"][:, -1]]
        eps_fn = guided_eps_fn(
            lambda x, t, act, c=c: wm.eps(x, t, c, act), a, wm.abar, GuidanceConfig(eta=0.0), None, set()
        )
        sampled = wm.sampler.sample(eps_fn, (c.size(0), *z.shape[1:]), gen)
        read = {
            "encoder": [bank.texts[i] for i in bank.nearest(z[batch["next_obs"]]).tolist()],
            "sample": [bank.texts[i] for i in bank.nearest(sampled).tolist()],
            "unchanged": [batch["texts"][i] for i in batch["history_obs"][:, -1].tolist()],
        }
        actions = [wm.actions[j] for j in batch["history_actions"][:, -1].tolist()]
        for i in torch.nonzero(batch["has_next_admissible"]).flatten().tolist():  # next state not terminal
            true = batch["texts"][batch["next_obs"][i]]
            for name, texts in read.items():
                same_room, same_inventory = room(texts[i]) == room(true), inventory(texts[i]) == inventory(true)
                hits.setdefault(f"{name}_room", []).append(same_room)
                hits.setdefault(f"{name}_inventory", []).append(same_inventory)
                if not actions[i].startswith("go to"):  # comparable with the closed-loop drift below
                    hits.setdefault(f"{name}_room_without_move", []).append(same_room)
                if not actions[i].startswith(MOVES_ITEMS):
                    hits.setdefault(f"{name}_inventory_without_item_action", []).append(same_inventory)
    return {"transitions": len(hits["sample_room"]), **{k: round(float(np.mean(v)), 3) for k, v in hits.items()}}


def closed_loop(wm, dm, cfg, rollouts: int) -> dict:
    bank, vocab = wm.proposal_bank, wm.vocab_embeddings().detach()
    steps: list[tuple[list[str], list[str]]] = []  # per simulated step: action texts, next-state texts
    transition = wm.heads.transition

    def recorded(z_next, c, a):
        actions = torch.cdist(a.detach(), vocab).argmin(-1).tolist()
        steps.append(([wm.actions[i] for i in actions], [bank.texts[i] for i in bank.nearest(z_next).tolist()]))
        return transition(z_next, c, a)

    starts = logged_starts(dm)
    sim = SimulateConfig(n_rollouts=rollouts, batch_size=rollouts, snap=True)
    wm.heads.transition = recorded
    try:
        simulate(
            wm,
            PolicyConfig(name="uniform", kind="uniform"),
            None,
            starts,
            sim,
            GuidanceConfig(eta=0.0),
            cfg.env.gamma,
            cfg.evaluate.simulate.horizon or cfg.env.max_steps,
            cfg.seed,
            reward_range=logged_reward_range(dm),
        )
    finally:
        wm.heads.transition = transition
    # the state before step 0 is the logged start (simulate's own draw of start states, one batch); each
    # later step compares with the previous snapped state
    pick = np.random.default_rng(cfg.seed).integers(0, len(starts), size=rollouts)
    before = [starts[i].observation for i in pick]
    inv_drift, room_drift = [], []
    for actions, after in steps:  # rollouts that have ended are still advanced in the batch and counted too
        for act, b, n in zip(actions, before, after):
            if not act.startswith(MOVES_ITEMS):
                inv_drift.append(inventory(b) != inventory(n))
            if not act.startswith("go to"):
                room_drift.append(room(b) != room(n))
        before = after
    return {
        "rollouts": rollouts,
        "steps": len(steps),
        "inventory_changed_without_item_action": round(float(np.mean(inv_drift)), 3),
        "room_changed_without_move": round(float(np.mean(room_drift)), 3),
    }


if __name__ == "__main__":
    print(main(sys.argv[1:]))
