"""Test helpers shared by several test files."""

from __future__ import annotations

from adwm.envs import BuiltinEnv


def play_randomly(env, seed: int, rng, max_steps: int) -> list:
    """Reset `env` at `seed` and take random admissible actions until the episode ends: the task, first
    observation and list, then (observation, reward, done) of each step. Fails if it runs past `max_steps`."""
    reset = env.reset(seed)
    trace, adm = [reset.task, reset.observation, tuple(reset.admissible)], reset.admissible
    for _ in range(max_steps):
        step = env.step(rng.choice(adm))
        trace.append((step.observation, step.reward, step.done))
        if step.done:
            return trace
        adm = step.admissible
    raise AssertionError(f"the episode did not end within {max_steps} steps")


def builtin_texts(n_seeds: int = 40) -> list[str]:
    env, texts = BuiltinEnv(), []
    for seed in range(n_seeds):
        reset = env.reset(seed)
        texts += [reset.task, reset.observation, *reset.admissible]
        for action in env.gold_actions():
            step = env.step(action)
            texts += [step.observation, *(step.admissible or [])]
    return texts


def uniform_log_world_model(folder, n_episodes: int, max_steps: int, val_fraction: float, sampler_steps: int):
    """A uniform-policy builtin log in `folder`, its datamodule and an untrained tiny world model."""
    from dataclasses import asdict

    import torch

    from adwm.data.config import DataConfig
    from adwm.data.datamodule import TrajectoryDataModule
    from adwm.diffusion.config import DenoiserConfig, SamplerConfig
    from adwm.encoders.config import EncoderConfig
    from adwm.envs import EnvConfig
    from adwm.models.world_model import WorldModelConfig, WorldModelModule
    from adwm.policies.config import PolicyConfig
    from adwm.stages.collect import collect
    from adwm.stages.config import BehaviourEntry, CollectConfig

    out = str(folder / "log.jsonl")
    uniform = BehaviourEntry(PolicyConfig(name="u", kind="uniform"), 1.0)
    collect(
        CollectConfig(n_episodes=n_episodes, n_envs=8, out=out, behaviour=[uniform]),
        EnvConfig(max_steps=max_steps),
        0,
        False,
    )
    dm = TrajectoryDataModule(DataConfig(log=out, batch_size=16, val_fraction=val_fraction), seed=0)
    dm.setup()
    torch.manual_seed(0)
    enc = EncoderConfig(n_latents=2, d_latent=8, d_model=32, layers=1, heads=2, vocab_size=400)
    wm_cfg = WorldModelConfig(
        d_action=16,
        d_context=32,
        history_layers=1,
        denoiser=DenoiserConfig(hidden=32, layers=1),
        sampler=SamplerConfig(train_steps=10, steps=sampler_steps),
    )
    return dm, WorldModelModule(asdict(enc), asdict(wm_cfg), 2, dm.actions, texts=dm.observations)


# -- jobs for worker processes (top-level, so a spawned worker can import them) --------------------------
def job_process(tag: str) -> tuple[str, int, int]:
    """(tag, pid, torch threads) of the process that ran it."""
    import os

    import torch

    return tag, os.getpid(), torch.get_num_threads()


def job_fails(where: str) -> None:
    raise ValueError(f"{where}: expected a number, got 'lots'")


def job_add_entries(path: str, prefix: str, n: int) -> None:
    from adwm.runtime.atomic import update_json

    for i in range(n):
        update_json(path, lambda d, k=f"{prefix}{i}", v=i: d.__setitem__(k, v))


def job_sleep(folder: str) -> None:
    """Write <pid>.pid into `folder`, then sleep for two minutes (a long job of a worker)."""
    import os
    import time
    from pathlib import Path

    Path(folder, f"{os.getpid()}.pid").write_text("")
    time.sleep(120)


def reads(root) -> list[str]:
    """Overrides that read a smoke run's agents, log, ground truth, world model and projectors."""
    return [
        "experiment=smoke",
        f"run.root={root}",
        f"agent.dir={root}/agents",
        f"collect.out={root}/collect/episodes.jsonl",
        f"ground_truth.out={root}/ground_truth/ground_truth.json",
        f"run.fit={root}/fit",
        f"project.dir={root}/project",
    ]


def write_api_agent_log(path, n_episodes: int, seed: int = 0, skill: float = 0.7, max_steps: int = 12) -> None:
    """A log as an API agent's harness would write it: builtin episodes of a scripted player (the gold action
    with probability `skill`, else a plausible command of its own), no behaviour log-probabilities and no
    admissible lists (the agent writes free-form commands)."""
    import json
    import random

    from adwm.envs.builtin import BuiltinEnv

    rng = random.Random(seed)
    env = BuiltinEnv(max_steps=max_steps)
    with open(path, "w") as f:
        for k in range(n_episodes):
            r = env.reset(seed + k)
            obs, steps, done = r.observation, [], False
            while not done:
                gold = env.gold_actions() or ["look"]
                action = gold[0] if rng.random() < skill else rng.choice(["look", "inventory", "go north", "wait"])
                s = env.step(action)
                steps.append({"observation": obs, "action": action, "reward": s.reward, "done": s.done})
                obs, done = s.observation, s.done
            episode = {"schema": "adwm.episode/1", "env": "builtin", "seed": seed + k, "task": r.task}
            f.write(json.dumps({**episode, "policy": "api-agent", "steps": steps, "final_observation": obs}) + "\n")


def wandb_records(path) -> list:
    """The records of an offline W&B run file (`run-<id>.wandb`): a 7-byte header, then 32 KiB blocks of
    LevelDB-log records (crc32, uint16 length, type: 1 full, 2 first, 3 middle, 4 last), each payload a
    `wandb_internal_pb2.Record`."""
    import struct

    from wandb.proto import wandb_internal_pb2 as pb

    data = open(path, "rb").read()
    assert data[:4] == b":W&B", f"{path}: not a W&B run file"
    out, pos, parts, block = [], 7, b"", 32768
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # a block's tail too short for a header is padding
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if kind == 0 and length == 0:
            break
        parts += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(parts)
            out.append(record)
            parts = b""
    return out


def benchmark_module(name: str):
    """The script benchmarks/<name>.py, imported as a module (the benchmarks are scripts, not a package)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"{name}_benchmark", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
