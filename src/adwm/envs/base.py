"""The text-environment interface every adapter implements (DESIGN section 5)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass
class Reset:
    """What `TextEnv.reset` returns: the first observation and the task."""

    observation: str
    task: str
    admissible: list[str] | None  # None: free-form actions (generate mode)
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class Step:
    """What `TextEnv.step` returns after one action."""

    observation: str
    reward: float
    done: bool
    admissible: list[str] | None
    info: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class TextEnv(Protocol):
    """A multi-turn text environment.

    `reset(seed)` starts the task generated (or selected) by `seed`;
    `step(action)` never raises on an inadmissible action: it answers in-world.
    """

    name: str

    def reset(self, seed: int) -> Reset: ...

    def step(self, action: str) -> Step: ...

    def gold_actions(self) -> list[str] | None:
        """An optimal action sequence from the current state, if the env has one."""
        ...

    def close(self) -> None: ...
