"""The text-environment interface every adapter implements."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, overload, runtime_checkable


class EnvCrashed(RuntimeError):
    """The environment's backend died or hung mid-episode and was restarted: the episode is lost and
    must be replayed from `reset` (runners retry it; nothing of it may reach a log)."""


class OnDemandActions(Sequence[str]):
    """An admissible-action list fetched only when something reads it.

    Environments whose valid-action list is expensive (ScienceWorld: ~1000 actions, ~40-150 ms a step)
    return this instead of a list: an agent that writes its command never touches it, an eps-greedy
    wrapper's random branch or a score-mode agent does, and pays the fetch once.
    """

    def __init__(self, fetch: Callable[[], list[str]]) -> None:
        self._fetch: Callable[[], list[str]] | None = fetch
        self._items: list[str] | None = None

    @property
    def fetched(self) -> bool:
        return self._items is not None

    def _list(self) -> list[str]:
        if self._items is None:
            if self._fetch is None:
                raise RuntimeError("an admissible-action list was read after its environment moved to another state")
            self._items, self._fetch = list(self._fetch()), None
        return self._items

    def expire(self) -> None:
        """The environment left this state: an unread list can no longer be fetched (it would be the
        next state's)."""
        self._fetch = None

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> list[str]: ...
    def __getitem__(self, i):
        return self._list()[i]

    def __len__(self) -> int:
        return len(self._list())

    def __iter__(self) -> Iterator[str]:
        return iter(self._list())

    def __contains__(self, item: object) -> bool:
        return item in self._list()

    def index(self, value: Any, start: int = 0, stop: int | None = None) -> int:
        return self._list().index(value, start, len(self._list()) if stop is None else stop)

    def __eq__(self, other: object) -> bool:
        return list(self) == (list(other) if isinstance(other, Sequence) else other)

    def __repr__(self) -> str:
        return f"OnDemandActions({self._items!r})" if self.fetched else "OnDemandActions(<not fetched>)"


def logged_admissible(actions: Sequence[str] | None) -> list[str] | None:
    """What an episode log stores: the list if it is known, null if it was never fetched."""
    if actions is None or (isinstance(actions, OnDemandActions) and not actions.fetched):
        return None
    return list(actions)


def plan_by_rule(
    state: Any, next_action: Callable[[Any], str], step: Callable[[Any, str], tuple[Any, bool]], limit: int
) -> list[str] | None:
    """The actions a rule-based gold solver takes from `state`: `next_action(state)` then `step(state,
    action) -> (next state, episode ended)`, until the episode ends (None if it has not within `limit`)."""
    actions = []
    for _ in range(limit):
        actions.append(next_action(state))
        state, ended = step(state, actions[-1])
        if ended:
            return actions
    return None


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
