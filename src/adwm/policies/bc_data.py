"""Behaviour-cloning data: gold demonstrations as (prompt, action) pairs, tokenised and batched.

Demonstrations follow the gold solver with probability 1 - noise and a random
admissible action otherwise, and every step is labelled with the solver's
next action from the state actually reached (DAgger-style), so the agent sees
how to recover from mistakes, not only the gold path.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch
from torch.utils.data import Dataset

from adwm.envs.base import TextEnv, logged_admissible
from adwm.policies.base import AgentState
from adwm.policies.prompt import render_prompt


@dataclass
class Demo:
    prompt: str
    action: str


def gold_demos(
    env: TextEnv, seeds: list[int], noise: float, rng: random.Random, template: str, history_turns: int
) -> tuple[list[Demo], list[str]]:
    """Demonstrations on `seeds` plus every text seen (for tokenizer training)."""
    demos: list[Demo] = []
    texts: list[str] = []
    for seed in seeds:
        reset = env.reset(seed)
        state = AgentState(reset.task, reset.observation, [], reset.admissible)
        texts += [reset.task, reset.observation, *(logged_admissible(reset.admissible) or [])]
        while True:
            gold = env.gold_actions()
            if not gold:
                hint = " (its gold path is fixed from reset: use noise 0 for this environment)" if noise else ""
                raise RuntimeError(f"{env.name}: no gold action from a state of seed {seed}{hint}")
            demos.append(Demo(render_prompt(template, state, history_turns), gold[0]))
            action = gold[0] if rng.random() >= noise else rng.choice(list(state.admissible))
            step = env.step(action)
            texts.append(step.observation)
            if step.done:
                break
            texts += logged_admissible(step.admissible) or []  # lists fetched on demand are not fetched for this
            state = AgentState(
                state.task, step.observation, [*state.history, (state.observation, action)], step.admissible
            )
    return demos, texts


class DemoDataset(Dataset):
    """Token ids of prompt + action + suffix; loss only on the action span."""

    def __init__(self, demos: list[Demo], tokenizer, action_suffix: str) -> None:
        self.items = []
        for d in demos:
            p = tokenizer(d.prompt, add_special_tokens=True)["input_ids"]
            a = tokenizer(d.action + action_suffix, add_special_tokens=False)["input_ids"]
            self.items.append((p, a))
        self.pad_id = tokenizer.pad_token_id

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> tuple[list[int], list[int]]:
        return self.items[i]

    def collate(self, batch: list[tuple[list[int], list[int]]]) -> dict[str, torch.Tensor]:
        width = max(len(p) + len(a) for p, a in batch)
        ids = torch.full((len(batch), width), self.pad_id, dtype=torch.long)  # (B, L)
        labels = torch.full_like(ids, -100)
        mask = torch.zeros_like(ids)
        for i, (p, a) in enumerate(batch):
            n = len(p) + len(a)
            ids[i, :n] = torch.tensor(p + a)
            labels[i, len(p) : n] = torch.tensor(a)
            mask[i, :n] = 1
        return {"input_ids": ids, "labels": labels, "attention_mask": mask}
