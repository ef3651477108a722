"""Where does a text world's simulated value part from the real one? Each step shadowed by the real environment.

    .venv/bin/python benchmarks/world_divergence.py [--world analogy] [--rollouts N] [--by-template] [overrides ...]
    # e.g. seed=0 run.root=runs/v0

Needs a finished `adwm quickstart` (its log and ground truth) under run.root. For each policy of the family,
rolls the policy out in the world (`analogy` or `nearest`, as `adwm evaluate evaluate.world=W` builds it from
the training split) from the logged starts, and beside every rollout runs the real environment from its
start's seed on the same actions. Each simulated step is filed by what the world did:

* `logged`: the rollout's own logged world took the action at exactly this observation (its successor);
* `fallback`: no edit of the action's kind (`nearest`'s step elsewhere);
* `inplace`: an edit applied within the scene (take, open, put ...);
* `scene_known`: a change of scene to one the rollout left, or its own logged world showed;
* `scene_foreign`: a change of scene to a room only another world's edit showed.

and by whether the rollout was in step with the real world before it (the same scene past the feedback,
the items of a list in any order).
Per kind: how many steps, the share in step before, the share of those still in step after, the share of
those whose admissible list was the real one (the agent picks from it: `same_list`), and the
discounted reward the world paid minus what the real environment paid for the same action (summed over
rollouts, divided by their number: the kind's share of J_hat_sim - real_return). With `--by-template`, the
same per kind, action template (`take the {0}`), first or repeated action and in step or not before it,
and per template the in-step steps whose list lacked or added actions of it. After the real episode ends
the simulated rewards are filed as `after_real_end`. Writes an entry per run.root, world and policy to
`benchmarks/results/world_divergence.json`.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import numpy as np
from omegaconf import OmegaConf

from adwm.config import load_config
from adwm.data.config import DataConfig
from adwm.data.datamodule import TrajectoryDataModule
from adwm.envs.registry import make_env
from adwm.evaluation.family import family_policies
from adwm.evaluation.metrics import family_metrics
from adwm.policies.factory import build_policy
from adwm.runtime.atomic import read_json, update_json
from adwm.simulation.analogy import AnalogyWorld, _list, _template, kind, openings, sentences, taken_before
from adwm.simulation.worlds import LoggedStart, LoggedWorld, TextState, logged_episode_starts, rollout_world

OUT = Path(__file__).resolve().parent / "results" / "world_divergence.json"
KINDS = ("logged", "fallback", "inplace", "scene_known", "scene_foreign", "after_real_end")


class _TracedAnalogy(AnalogyWorld):
    """The analogy world, saying what kind of step it took last (`kind`)."""

    def _step(self, state, action, rng):
        own = (state.handle.seed, state.observation, action) in self.own_moves
        self.kind = "fallback"
        out = super()._step(state, action, rng)
        if own:  # a logged successor in another scene reads the known scene too: it stays `logged`
            self.kind = "logged"
        return out

    def _applied(self, state, action, edit):
        self.kind = "inplace"
        return super()._applied(state, action, edit)

    def _known_scene(self, rollout, scene):
        found = super()._known_scene(rollout, scene)
        self.kind = "scene_known" if found is not None else "scene_foreign"
        return found


class _TracedNearest(LoggedWorld):
    def step(self, state, action, rng):
        self.kind = "logged" if action in self.table.get(state.observation, {}) else "fallback"
        return super().step(state, action, rng)


class Shadowed:
    """`world` with the real environment stepped beside every rollout on the same actions."""

    def __init__(self, world, make, body, gamma: float) -> None:
        self.world, self.make, self.body, self.gamma = world, make, body, gamma
        self.real: dict[int, dict] = {}
        self.stats = {k: defaultdict(float) for k in KINDS}
        self.by_template: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self.lists: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))  # template -> missing, extra
        self.n_rollouts = 0

    def start(self, start: LoggedStart) -> TextState:
        state = self.world.start(start)
        env = self.make()
        r = env.reset(start.seed)
        key = len(self.real)
        self.real[key] = {"env": env, "obs": r.observation, "adm": r.admissible, "done": False, "t": 0}
        self.n_rollouts += 1
        return TextState(state.task, state.observation, state.admissible, state.history, (key, state.handle))

    def step(self, state: TextState, action: str, rng: np.random.Generator):
        key, handle = state.handle
        inner = TextState(state.task, state.observation, state.admissible, state.history, handle)
        nxt, reward, done = self.world.step(inner, action, rng)
        shadow = self.real[key]
        disc = self.gamma ** shadow["t"]
        shadow["t"] += 1
        if shadow["done"]:
            s = self.stats["after_real_end"]
            s["steps"] += 1
            s["paid"] += disc * reward
        else:
            s = self.stats[self.world.kind]
            before = self.body(state.observation) == self.body(shadow["obs"])
            sim_list, real_list = set(state.admissible or []), set(shadow["adm"] or [])
            s["same_list"] += before and sim_list == real_list
            for a in (real_list - sim_list) if before else ():
                self.lists[_template(a)]["missing"] += 1
            for a in (sim_list - real_list) if before else ():
                self.lists[_template(a)]["extra"] += 1
            real = shadow["env"].step(action)
            shadow["obs"], shadow["adm"], shadow["done"] = real.observation, real.admissible, real.done
            s["steps"] += 1
            s["in_step"] += before
            s["kept"] += before and self.body(nxt.observation) == self.body(real.observation)
            s["paid"] += disc * reward
            s["real_paid"] += disc * real.reward
            s["refused"] += not real.info.get("admissible_action", True)
            again = "again" if taken_before(state, action) else "first"
            t = self.by_template[f"{self.world.kind} | {_template(action)} | {again} | {'in' if before else 'off'}"]
            t["steps"] += 1
            t["paid"] += disc * reward
            t["real_paid"] += disc * real.reward
        if done and not shadow["done"]:
            shadow["env"].close()
        return TextState(nxt.task, nxt.observation, nxt.admissible, nxt.history, (key, nxt.handle)), reward, done

    def close(self) -> None:
        self.world.close()
        for shadow in self.real.values():
            shadow["env"].close()

    def report_by_template(self) -> dict:
        """Per kind, template, first or again, in step or not: steps and the reward paid minus the real one
        (per rollout); per template, the in-step steps whose list lacked (`missing`) or added (`extra`) it."""
        steps = {
            k: {"steps": int(t["steps"]), "paid_minus_real": (t["paid"] - t["real_paid"]) / self.n_rollouts}
            for k, t in sorted(self.by_template.items())
        }
        return {"steps": steps, "lists": {k: dict(v) for k, v in sorted(self.lists.items())}}

    def report(self) -> dict:
        out = {}
        for k, s in self.stats.items():
            if not s["steps"]:
                continue
            out[k] = {
                "steps": int(s["steps"]),
                "in_step": s["in_step"] / s["steps"],
                "kept": s["kept"] / s["in_step"] if s["in_step"] else float("nan"),
                "same_list": s["same_list"] / s["in_step"] if s["in_step"] else float("nan"),
                "refused": s["refused"] / s["steps"],
                "paid_minus_real": (s["paid"] - s["real_paid"]) / self.n_rollouts,
            }
        return out


def _body(opening: set[str]):
    """An observation past its feedback (from its first sentence of a kind a logged episode opens with), each
    list's items in alphabetical order (a set: the world lists them in its own order)."""

    def body(observation: str) -> str:
        x = sentences(observation)
        i = next((k for k, s in enumerate(x) if kind(s) in opening), 0)
        out = []
        for s in x[i:]:
            words, items = _list(s)
            out.append(f"{words} {', '.join(sorted(items))}." if items else s)
        return " ".join(out)

    return body


def main(world_name: str, n: int, overrides: list[str], by_template: bool = False) -> dict:
    cfg = load_config(overrides, "evaluate")
    dm = TrajectoryDataModule(DataConfig(**cfg.data), cfg.seed, cfg.env.name)
    dm.setup()
    starts = logged_episode_starts(dm.train_episodes + dm.val_episodes)
    truth = read_json(Path(cfg.ground_truth.out))
    env_cfg = OmegaConf.to_object(cfg.env)
    horizon, gamma = cfg.env.max_steps, cfg.env.gamma
    body = _body(openings(dm.train_episodes))
    entry, j_true, j_hat = {"rollouts": n}, [], []
    for pcfg in family_policies(OmegaConf.to_object(cfg.policy), OmegaConf.to_object(cfg.family)):
        if world_name == "analogy":
            world = _TracedAnalogy(dm.train_episodes)
        else:
            world = _TracedNearest(dm.train_episodes, moves=True)
        shadowed = Shadowed(world, lambda: make_env(env_cfg), body, gamma)
        policy = build_policy(pcfg, f"family policy '{pcfg.name}'")
        returns = rollout_world(shadowed, policy, starts, n, horizon, gamma, cfg.seed)
        report = shadowed.report()
        real = sum(s["real_paid"] for s in shadowed.stats.values()) / n
        entry[pcfg.name] = {
            "J": truth[pcfg.name]["J"],
            "J_hat": float(returns.mean()),
            "real_return": real,
            "kinds": report,
        }
        if by_template:
            entry[pcfg.name]["by_template"] = shadowed.report_by_template()
        j_true.append(truth[pcfg.name]["J"])
        j_hat.append(float(returns.mean()))
        print(pcfg.name, json.dumps(entry[pcfg.name]), flush=True)
    entry["metrics"] = family_metrics(j_true, j_hat)
    print(json.dumps(entry["metrics"]))
    name = f"{OmegaConf.select(cfg, 'run.root')} {world_name}"
    update_json(OUT, lambda results: results.__setitem__(name, entry))
    return entry


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world", choices=("analogy", "nearest"), default="analogy")
    parser.add_argument("--rollouts", type=int, default=96)
    parser.add_argument("--by-template", action="store_true", help="the figures per action template too")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    main(args.world, args.rollouts, args.overrides, args.by_template)
