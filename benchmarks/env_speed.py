"""Speed of the real-environment adapters, written to benchmarks/results/env_speed.json.

    .venv/bin/python benchmarks/env_speed.py [--episodes N]

ScienceWorld: JVM start, task load, gold-path generation, steps/s of the adapter (the server's step
plus look, score and completion; no valid list) against the package's stock `step()` (which also
builds the valid-action list, look and inventory every step), and the cost and size of a valid list.
TextWorld: in-process game generation, reset of a cached game, steps/s and admissible-list size.
Steps replay gold paths, so every episode ends in a win; figures are means over the episodes.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from adwm.envs.scienceworld import ScienceWorldConfig, ScienceWorldEnv
from adwm.envs.textworld import TextWorldConfig, TextWorldEnv
from adwm.runtime.atomic import atomic_write_json
from adwm.runtime.provenance import benchmark_stamp

OUT = Path(__file__).parent / "results" / "env_speed.json"
SW_TASKS = ["find-living-thing", "find-non-living-thing", "find-plant"]


def scienceworld(episodes: int, tmp: Path) -> dict:
    t0 = time.perf_counter()
    env = ScienceWorldEnv(ScienceWorldConfig(tasks=SW_TASKS, gold_cache=str(tmp / "gold")), max_steps=100)
    env.reset(0)
    start = time.perf_counter() - t0
    gold_s, adapter, stock, valid_s, valid_n, load_s = [], [], [], [], [], []
    for seed in range(episodes):
        t = time.perf_counter()
        env.gold_sequence(*env.task_for_seed(seed))
        gold_s.append(time.perf_counter() - t)
        t = time.perf_counter()
        env.reset(seed)
        load_s.append(time.perf_counter() - t)
        gold = env.gold_actions()
        t = time.perf_counter()
        for a in gold:
            step = env.step(a)
            if not step.done:
                tv = time.perf_counter()
                valid_n.append(len(step.admissible))
                valid_s.append(time.perf_counter() - tv)
        adapter.append(len(gold) / (time.perf_counter() - t - sum(valid_s[-len(gold) :])))
        sw = env._sw  # the package's own step, for comparison
        task, variation = env.task_for_seed(seed)
        sw.load(task, variation, env.cfg.simplification, False)
        env._episode = None
        sw.reset()
        t = time.perf_counter()
        for a in gold:
            sw.step(a)
        stock.append(len(gold) / (time.perf_counter() - t))
    env.close()
    return {
        "tasks": SW_TASKS,
        "episodes": episodes,
        "jvm_start_and_first_reset_s": round(start, 2),
        "gold_generation_s_mean": round(statistics.mean(gold_s), 2),
        "reset_s_mean": round(statistics.mean(load_s), 3),
        "adapter_steps_per_s": round(statistics.mean(adapter), 1),
        "stock_step_steps_per_s": round(statistics.mean(stock), 1),
        "valid_list_s_mean": round(statistics.mean(valid_s), 3),
        "valid_list_size_mean": round(statistics.mean(valid_n), 1),
        "valid_list_size_max": max(valid_n),
    }


def textworld(episodes: int, tmp: Path) -> dict:
    env = TextWorldEnv(TextWorldConfig(games=episodes, cache=str(tmp / "games")), max_steps=100)
    gen, resets, rates, adm = [], [], [], []
    for seed in range(episodes):
        t = time.perf_counter()
        env.game(seed)
        gen.append(time.perf_counter() - t)
        env.reset(seed)
        t = time.perf_counter()
        env.reset(seed)  # the same, cached and started game
        resets.append(time.perf_counter() - t)
        n, t = 0, time.perf_counter()
        while True:
            step = env.step(env.gold_actions()[0])
            n += 1
            if step.done:
                break
            adm.append(len(step.admissible))
        rates.append(n / (time.perf_counter() - t))
    env.close()
    return {
        "settings": env.settings(),
        "episodes": episodes,
        "game_generation_s_mean": round(statistics.mean(gen), 2),
        "reset_s_mean": round(statistics.mean(resets), 3),
        "steps_per_s": round(statistics.mean(rates), 1),
        "admissible_size_mean": round(statistics.mean(adm), 1),
        "admissible_size_max": max(adm),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=6)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="adwm_env_speed_"))
    try:
        out = {"scienceworld": scienceworld(args.episodes, tmp), "textworld": textworld(args.episodes, tmp)}
        out["provenance"] = benchmark_stamp()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    atomic_write_json(OUT, out)
    print(OUT)


if __name__ == "__main__":
    main()
