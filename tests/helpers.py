"""Test helpers shared by several test files."""

from __future__ import annotations

from adwm.envs import BuiltinEnv


def builtin_texts(n_seeds: int = 40) -> list[str]:
    env, texts = BuiltinEnv(), []
    for seed in range(n_seeds):
        reset = env.reset(seed)
        texts += [reset.task, reset.observation, *reset.admissible]
        for action in env.gold_actions():
            step = env.step(action)
            texts += [step.observation, *(step.admissible or [])]
    return texts
