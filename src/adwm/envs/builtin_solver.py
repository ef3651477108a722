"""Gold solver for the built-in world: breadth-first search over world states.

Search runs on the same `transition` the environment uses, restricted to the
actions an optimal plan can need (moving, opening, unlocking with the right
key, taking the target or a key, placing the target). Dropped actions (closing,
taking distractors, looking) never shorten a plan, so the result is optimal.
"""

from __future__ import annotations

from collections import deque

from adwm.envs.builtin_world import Action, Layout, State, legal_actions, success, transition


def _useful(layout: Layout, state: State, act: Action) -> bool:
    kind = act[0]
    if kind in ("go", "open_door", "open"):
        return True
    if kind == "unlock":
        return layout.door_key[act[1]] == act[2]
    if kind == "take":
        return act[1] == layout.target or layout.is_key[act[1]]
    if kind == "put":
        return layout.goal_kind == "put" and act[1] == layout.target and act[2] == layout.goal
    if kind == "drop":
        return layout.goal_kind == "bring" and act[1] == layout.target and state.room == layout.goal
    return False


def solve(layout: Layout, state: State, max_states: int = 200_000) -> list[Action] | None:
    """Shortest action list from `state` to success, or None if none exists."""
    if success(layout, state):
        return []
    parent: dict[State, tuple[State, Action] | None] = {state: None}
    queue = deque([state])
    while queue and len(parent) < max_states:
        s = queue.popleft()
        for act in legal_actions(layout, s):
            if not _useful(layout, s, act):
                continue
            nxt, _ = transition(layout, s, act)
            if nxt in parent:
                continue
            parent[nxt] = (s, act)
            if success(layout, nxt):
                plan: list[Action] = []
                node = nxt
                while parent[node] is not None:
                    prev, a = parent[node]
                    plan.append(a)
                    node = prev
                return plan[::-1]
            queue.append(nxt)
    return None
