"""Procedural generation of built-in worlds: sample a layout and a start state from a seed until the gold
solver finds a plan within the step bounds."""

from __future__ import annotations

import random
from dataclasses import dataclass

from adwm.envs.builtin_world import (
    CLOSED,
    CONTAINER_NAMES,
    KEY_NAMES,
    LOCKED,
    OBJECT_NAMES,
    OPEN,
    ROOM_NAMES,
    Action,
    Layout,
    State,
)


@dataclass(frozen=True)
class GenerationConfig:
    """Sizes of generated worlds (see `BuiltinEnvConfig` for the why of each)."""

    min_rooms: int = 3
    max_rooms: int = 5
    max_containers: int = 3
    max_distractors: int = 2
    locked_door_prob: float = 0.3
    closed_door_prob: float = 0.4
    min_gold_steps: int = 4
    max_gold_steps: int = 15


MAX_SAMPLES = 2000  # worlds tried per seed before the bounds are called unreachable (a few seconds)


def generate(seed: int, cfg: GenerationConfig, solve) -> tuple[Layout, State, list[Action]]:
    """Sample worlds from `random.Random(seed)` until one is solvable within the step bounds.

    `solve(layout, state)` returns an optimal action list or None. Settings no world meets (gold plans
    longer than the rooms, containers and doors allow) are a named error, not an endless search.
    """
    rng = random.Random(seed)
    for _ in range(MAX_SAMPLES):
        layout, state = _sample(rng, cfg)
        plan = solve(layout, state)
        if plan is not None and cfg.min_gold_steps <= len(plan) <= cfg.max_gold_steps:
            return layout, state, plan
    raise ValueError(
        f"env.builtin.min_gold_steps: no world of {MAX_SAMPLES} sampled for seed {seed} has a gold plan of "
        f"{cfg.min_gold_steps}-{cfg.max_gold_steps} steps with {cfg.min_rooms}-{cfg.max_rooms} rooms, "
        f"{cfg.max_containers} containers and locked_door_prob {cfg.locked_door_prob}; lower "
        "env.builtin.min_gold_steps or allow more rooms, containers or locked doors"
    )


def _sample(rng: random.Random, cfg: GenerationConfig) -> tuple[Layout, State]:
    n_rooms = rng.randint(cfg.min_rooms, cfg.max_rooms)
    rooms = tuple(rng.sample(ROOM_NAMES, n_rooms))
    doors = tuple((i, rng.randrange(i)) for i in range(1, n_rooms))
    door_states = []
    for _ in doors:
        u = rng.random()
        door_states.append(
            LOCKED if u < cfg.locked_door_prob else CLOSED if u < cfg.locked_door_prob + cfg.closed_door_prob else OPEN
        )
    n_cont = rng.randint(1, cfg.max_containers)
    containers = tuple(rng.sample(CONTAINER_NAMES, n_cont))
    container_room = tuple(rng.randrange(n_rooms) for _ in containers)
    open_containers = tuple(rng.random() < 0.4 for _ in containers)

    n_obj = 1 + rng.randint(0, cfg.max_distractors)
    objects = list(rng.sample(OBJECT_NAMES, n_obj))
    is_key = [False] * n_obj
    door_key: list[int | None] = [None] * len(doors)
    key_names = iter(rng.sample(KEY_NAMES, len(KEY_NAMES)))
    for d, s in enumerate(door_states):
        if s == LOCKED:
            door_key[d] = len(objects)
            objects.append(next(key_names))
            is_key.append(True)
    n_loc = n_rooms + n_cont
    obj_loc = tuple(rng.randrange(n_loc) for _ in objects)
    start = rng.randrange(n_rooms)

    target = rng.randrange(n_obj)
    target_room = obj_loc[target] if obj_loc[target] < n_rooms else container_room[obj_loc[target] - n_rooms]
    if rng.random() < 0.6:
        choices = [c for c in range(n_cont) if n_rooms + c != obj_loc[target]]
        goal_kind = "put" if choices else "bring"
    else:
        goal_kind = "bring"
    if goal_kind == "put":
        goal = rng.choice(choices)
    else:
        goal = rng.choice([r for r in range(n_rooms) if r != target_room])
    layout = Layout(
        rooms=rooms,
        doors=doors,
        door_key=tuple(door_key),
        containers=containers,
        container_room=container_room,
        objects=tuple(objects),
        is_key=tuple(is_key),
        target=target,
        goal_kind=goal_kind,
        goal=goal,
        start_loc=obj_loc,
    )
    return layout, State(start, tuple(door_states), open_containers, obj_loc)
