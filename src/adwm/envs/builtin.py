"""`builtin`: a small procedurally generated text world (rooms, doors, keys, containers).

Deterministic per seed, a step costs microseconds, and every task comes with
an optimal gold plan. Rewards are shaped: each milestone of the initial gold
plan (a key taken, a door unlocked, a container opened, the target taken)
pays `progress_reward / n_milestones` the first time it is reached, and
success pays the rest, so an episode's return lies in [0, 1].
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

from adwm.envs.base import Reset, Step
from adwm.envs.builtin_generate import GenerationConfig, generate
from adwm.envs.builtin_solver import solve
from adwm.envs.builtin_world import (
    CONTAINER_NAMES,
    INVENTORY,
    KEY_NAMES,
    LOCKED,
    OBJECT_NAMES,
    ROOM_NAMES,
    Action,
    Layout,
    State,
    action_text,
    describe,
    legal_actions,
    success,
    transition,
)
from adwm.runtime.checks import in_range, require


@dataclass
class BuiltinEnvConfig:
    min_rooms: int = 3  # fewer rooms leave too few distinct states to learn dynamics from
    max_rooms: int = 5  # keeps the solver's search and the prompts small
    max_containers: int = 3
    max_distractors: int = 2  # objects the task does not need: tempting wrong actions
    locked_door_prob: float = 0.3  # locked doors force a key detour: longer, harder tasks
    closed_door_prob: float = 0.4
    min_gold_steps: int = 4  # tasks shorter than this do not separate good agents from bad
    max_gold_steps: int = 15
    progress_reward: float = 0.5  # share of the return paid for milestones before success

    def __post_init__(self) -> None:
        p = "env.builtin"
        require(
            2 <= self.min_rooms <= self.max_rooms, f"{p}.min_rooms", self.min_rooms, f"2..max_rooms ({self.max_rooms})"
        )
        require(self.max_rooms <= len(ROOM_NAMES), f"{p}.max_rooms", self.max_rooms, f"<= {len(ROOM_NAMES)} room names")
        require(
            self.locked_door_prob == 0 or self.max_rooms - 1 <= len(KEY_NAMES),
            f"{p}.max_rooms",
            self.max_rooms,
            f"<= {len(KEY_NAMES) + 1} while doors can be locked (locked_door_prob > 0): every locked door "
            f"needs its own key and there are {len(KEY_NAMES)} key names",
        )
        require(
            1 <= self.max_containers <= len(CONTAINER_NAMES),
            f"{p}.max_containers",
            self.max_containers,
            f"1..{len(CONTAINER_NAMES)}",
        )
        require(
            0 <= self.max_distractors < len(OBJECT_NAMES),
            f"{p}.max_distractors",
            self.max_distractors,
            f"0..{len(OBJECT_NAMES) - 1}",
        )
        in_range(self, p, ("locked_door_prob", "closed_door_prob", "progress_reward"))
        require(
            self.locked_door_prob + self.closed_door_prob <= 1,
            f"{p}.closed_door_prob",
            self.closed_door_prob,
            f"<= 1 - locked_door_prob ({1 - self.locked_door_prob:g})",
        )
        require(
            1 <= self.min_gold_steps <= self.max_gold_steps,
            f"{p}.min_gold_steps",
            self.min_gold_steps,
            f"1..max_gold_steps ({self.max_gold_steps})",
        )


class BuiltinEnv:
    """The built-in world behind the `TextEnv` interface."""

    name = "builtin"

    def __init__(self, cfg: BuiltinEnvConfig | None = None, max_steps: int = 30) -> None:
        self.cfg = cfg or BuiltinEnvConfig()
        gen = {k: v for k, v in asdict(self.cfg).items() if k != "progress_reward"}
        self._gen = GenerationConfig(**gen)
        self.max_steps = max_steps
        self.layout: Layout | None = None
        self.state: State | None = None

    # -- TextEnv -------------------------------------------------------------
    def reset(self, seed: int) -> Reset:
        self.layout, self.state, plan = generate(seed, self._gen, solve)
        self._milestones = self._plan_milestones(plan)
        self._reached: set[tuple] = set()
        self._t = 0
        obs = describe(self.layout, self.state)
        return Reset(obs, self.layout.task, self._admissible(), {"seed": seed, "gold_steps": len(plan)})

    def step(self, action: str) -> Step:
        if self.layout is None:
            raise RuntimeError("BuiltinEnv.step called before reset")
        self._t += 1
        acts = self._action_map()
        act = acts.get(action.strip().lower())
        reward = 0.0
        if act is None:
            feedback = self._refusal(action)
        else:
            self.state, feedback = transition(self.layout, self.state, act)
            reward = self._milestone_reward()
        won = success(self.layout, self.state)
        if won:
            reward += 1.0 - self.cfg.progress_reward
        truncated = not won and self._t >= self.max_steps
        done = won or truncated
        obs = f"{feedback} {describe(self.layout, self.state)}"
        info = {"won": won, "truncated": truncated, "admissible_action": act is not None}
        return Step(obs, reward, done, None if done else self._admissible(), info)

    def gold_actions(self) -> list[str] | None:
        if self.layout is None:
            raise RuntimeError("BuiltinEnv.gold_actions called before reset")
        plan = solve(self.layout, self.state)
        if plan is None:
            return None
        texts, state = [], self.state
        for act in plan:
            texts.append(action_text(self.layout, state, act))
            state, _ = transition(self.layout, state, act)
        return texts

    def close(self) -> None:
        self.layout = self.state = None

    # -- internals -----------------------------------------------------------
    def _admissible(self) -> list[str]:
        return list(self._action_map())

    def _action_map(self) -> dict[str, Action]:
        return {action_text(self.layout, self.state, a): a for a in legal_actions(self.layout, self.state)}

    @staticmethod
    def _refusal(action: str) -> str:
        verb = action.strip().split(" ")[0].lower() if action.strip() else ""
        known = {"go", "open", "close", "unlock", "take", "drop", "put", "look", "inventory"}
        return f"You cannot {action.strip()} right now." if verb in known else "I do not understand that."

    @staticmethod
    def _plan_milestones(plan: list[Action]) -> list[tuple]:
        keep = {"unlock", "open", "take"}
        return [a[:2] for a in plan if a[0] in keep]

    def _milestone_reached(self, m: tuple) -> bool:
        kind, idx = m
        if kind == "unlock":
            return self.state.doors[idx] != LOCKED
        if kind == "open":
            return self.state.open_containers[idx]
        return self.state.obj_loc[idx] == INVENTORY

    def _milestone_reward(self) -> float:
        if not self._milestones:
            return 0.0
        new = [m for m in self._milestones if m not in self._reached and self._milestone_reached(m)]
        self._reached.update(new)
        return self.cfg.progress_reward * len(new) / len(self._milestones)


_ROOM = re.compile(r"You are in the ([a-z ]+)\.")
_CARRY = re.compile(r"You carry ([^.]*)\.")


def builtin_state_key(observation: str) -> tuple[str | None, str | None]:
    """The part of a builtin observation that is the world's state for fidelity: the room and the inventory
    (the rest is the last action's feedback and the room's description, which follow from them). The
    inventory is the description's (the last "You carry": `inventory`'s feedback repeats it first), its
    items in alphabetical order (a set: the world lists them in its own order)."""
    room, carry = _ROOM.search(observation), _CARRY.findall(observation)
    if not carry:
        return (room[1] if room else None, None)
    items = sorted(i for i in re.split(r", | and ", carry[-1]) if i)
    listed = items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]
    return (room[1] if room else None, listed)
