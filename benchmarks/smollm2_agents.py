"""Cost and return of the optional SmolLM2-135M-Instruct agents, written to benchmarks/results/smollm2_agents.json.

    .venv/bin/python benchmarks/smollm2_agents.py [--episodes N] [--envs builtin textworld_cooking scienceworld]

For each environment: the zero-shot agent of family=eps_offpath_smollm2 plays N episodes (score mode in
builtin and TextWorld, generate mode on ScienceWorld, each environment set up as in its cell); on builtin the LoRA agent of
agent=tiny_smollm2 is trained (its configured episodes and steps) and plays the same episodes, next to the
tiny iter3 agent trained on the same gold data. Figures: load time, LoRA training time, seconds per
environment step (agent and environment together, 8 episodes in parallel) and the mean return of those
episodes (few episodes: a cost figure, not a ground truth).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time
from pathlib import Path

import torch

from adwm.config import load_config, to_object
from adwm.data.play import EpisodeJob, run_episodes
from adwm.envs.registry import make_env
from adwm.policies.factory import build_policy
from adwm.policies.loading import load_causal_lm
from adwm.runtime.atomic import atomic_write_json
from adwm.runtime.provenance import benchmark_stamp
from adwm.stages.pipeline import train_agents

OUT = Path(__file__).parent / "results" / "smollm2_agents.json"
ROOT = "runs/smollm2_agents"


def play(cfg, policy_cfg, episodes: int) -> dict:
    policy = build_policy(policy_cfg)
    jobs = [EpisodeJob(i, 10_000 + i, (0, i), policy_cfg.name) for i in range(episodes)]
    done = []
    t = time.perf_counter()
    run_episodes(lambda: make_env(to_object(cfg.env)), {policy_cfg.name: policy}, jobs, done.append, n_envs=8)
    seconds = time.perf_counter() - t
    steps = sum(len(e.steps) for e in done)
    returns = [sum(s.reward for s in e.steps) for e in done]
    return {
        "mode": policy_cfg.mode,
        "episodes": len(done),
        "steps": steps,
        "seconds_per_step": round(seconds / max(steps, 1), 3),
        "mean_return": round(statistics.mean(returns), 3),
        "wins": sum(bool(e.info.get("won")) for e in done),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--envs", nargs="+", default=["builtin", "textworld_cooking", "scienceworld"])
    args = parser.parse_args()
    torch.manual_seed(0)
    out: dict = {"threads": torch.get_num_threads(), "episodes": args.episodes}
    base = load_config(["agent=tiny_smollm2", "family=eps_offpath_smollm2", f"run.root={ROOT}"])
    zero = {p.name: p for p in to_object(base.family).optional}["smollm2_zeroshot"]
    t = time.perf_counter()
    load_causal_lm(zero.model, None, zero.gguf_file)
    out["load_s"] = round(time.perf_counter() - t, 1)

    for env in args.envs:
        cell = [] if env == "builtin" else [f"experiment={env}"]  # the real environments as in their cells
        cfg = load_config(cell + ["agent=tiny_smollm2", "family=eps_offpath_smollm2", f"run.root={ROOT}/{env}"])
        agents = {p.name: p for p in to_object(cfg.family).optional}
        row = {"smollm2_zeroshot": play(cfg, agents["smollm2_zeroshot"], args.episodes)}
        if env == "builtin":
            train_agents(cfg, ["iter3", "smollm2_lora"])
            meta = json.loads((Path(cfg.agent.dir) / "smollm2_lora" / "adwm_agent.json").read_text())
            row["smollm2_lora_training"] = {k: meta[k] for k in ("seconds", "train_examples", "trained_parameters")}
            row["smollm2_lora_training"]["steps"] = meta["signature"]["steps"]
            row["smollm2_lora"] = play(cfg, agents["smollm2_lora"], args.episodes)
            tiny = dataclasses.replace(to_object(cfg.policy), name="iter3")
            row["tiny_iter3"] = play(cfg, tiny, args.episodes)
        out[env] = row | {"provenance": benchmark_stamp()}
        atomic_write_json(OUT, out)  # each environment's figures survive a later failure
        print(env, row, flush=True)


if __name__ == "__main__":
    main()
