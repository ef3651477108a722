"""World state and rules of the built-in text world (generation: `builtin_generate.py`).

A world is a static `Layout` (rooms joined by doors in a tree, containers,
objects, keys, the task) plus a small hashable `State` (where the agent is,
which doors and containers are open, where every object lies). The rules are
one pure function, `transition(layout, state, action)`, shared by the
environment and by the gold solver, so the solver plans with exactly the
dynamics the agent faces.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

OPEN, CLOSED, LOCKED = 0, 1, 2
INVENTORY = -1

ROOM_NAMES = (
    "kitchen",
    "hallway",
    "bedroom",
    "garden",
    "pantry",
    "study",
    "cellar",
    "attic",
    "bathroom",
    "living room",
    "workshop",
    "library",
)
CONTAINER_NAMES = (
    "wooden chest",
    "metal cabinet",
    "cardboard box",
    "small drawer",
    "fridge",
    "wicker basket",
    "tool box",
    "glass case",
)
OBJECT_NAMES = (
    "apple",
    "red ball",
    "silver coin",
    "old book",
    "candle",
    "blue cup",
    "toy car",
    "pear",
    "wool glove",
    "spoon",
    "green bottle",
    "paper map",
)
KEY_NAMES = ("brass key", "iron key", "copper key", "bone key")


@dataclass(frozen=True)
class Layout:
    """Everything about a generated task that never changes during an episode."""

    rooms: tuple[str, ...]
    doors: tuple[tuple[int, int], ...]  # door i joins rooms (a, b)
    door_key: tuple[int | None, ...]  # object index of the key for door i
    containers: tuple[str, ...]
    container_room: tuple[int, ...]
    objects: tuple[str, ...]  # keys are objects too
    is_key: tuple[bool, ...]
    target: int  # object index the task is about
    goal_kind: str  # "put" (into a container) or "bring" (onto a room's floor)
    goal: int  # container index for "put", room index for "bring"
    start_loc: tuple[int, ...]  # initial object locations, for the task's notes

    @property
    def task(self) -> str:
        """The goal plus notes on where the target, the goal and every key start.

        With these notes and the door descriptions the world is fully
        observable from the prompt, so a good agent needs no memory.
        """
        obj = self.objects[self.target]
        if self.goal_kind == "put":
            c = self.goal
            goal = f"Put the {obj} in the {self.containers[c]}."
            where = [f"the {self.containers[c]} is in the {self.rooms[self.container_room[c]]}"]
        else:
            goal = f"Bring the {obj} to the {self.rooms[self.goal]} and drop it there."
            where = []
        movable = [self.target] + [o for o, k in enumerate(self.is_key) if k]
        where = [f"the {self.objects[o]} is {self._place(self.start_loc[o])}" for o in movable] + where
        return f"{goal} Notes: {'; '.join(where)}."

    def _place(self, loc: int) -> str:
        if loc < len(self.rooms):
            return f"on the floor of the {self.rooms[loc]}"
        c = loc - len(self.rooms)
        return f"in the {self.containers[c]} in the {self.rooms[self.container_room[c]]}"

    def beyond(self, door: int, room: int) -> list[int]:
        """Rooms reached through `door` from `room`, the next room excluded (the doors form a tree)."""
        nxt = self.doors[door][1] if self.doors[door][0] == room else self.doors[door][0]
        seen, stack = {room, nxt}, [nxt]
        while stack:
            r = stack.pop()
            for a, b in self.doors:
                for x, y in ((a, b), (b, a)):
                    if x == r and y not in seen:
                        seen.add(y)
                        stack.append(y)
        return sorted(seen - {room, nxt})

    def loc_of_container(self, c: int) -> int:
        """Object-location code of container c (rooms come first)."""
        return len(self.rooms) + c


@dataclass(frozen=True)
class State:
    room: int
    doors: tuple[int, ...]  # OPEN / CLOSED / LOCKED per door
    open_containers: tuple[bool, ...]
    obj_loc: tuple[int, ...]  # room index, len(rooms)+container index, or INVENTORY


Action = tuple  # ("go", door) ("open_door", door) ("close_door", door)
# ("unlock", door, key) ("open", c) ("close", c) ("take", o) ("put", o, c)
# ("drop", o) ("look",) ("inventory",)


def success(layout: Layout, state: State) -> bool:
    loc = state.obj_loc[layout.target]
    if layout.goal_kind == "put":
        return loc == layout.loc_of_container(layout.goal)
    return loc == layout.goal


def _other(layout: Layout, door: int, room: int) -> int:
    a, b = layout.doors[door]
    return b if a == room else a


def _visible_objects(layout: Layout, state: State) -> list[int]:
    """Objects on the floor of the agent's room or inside an open container there."""
    here = {state.room}
    for c, r in enumerate(layout.container_room):
        if r == state.room and state.open_containers[c]:
            here.add(layout.loc_of_container(c))
    return [o for o, loc in enumerate(state.obj_loc) if loc in here]


def _adjacent_doors(layout: Layout, room: int) -> list[int]:
    return [d for d, (a, b) in enumerate(layout.doors) if room in (a, b)]


def legal_actions(layout: Layout, state: State) -> list[Action]:
    """Every admissible action, in a fixed order."""
    acts: list[Action] = []
    held = [o for o, loc in enumerate(state.obj_loc) if loc == INVENTORY]
    for d in _adjacent_doors(layout, state.room):
        if state.doors[d] == OPEN:
            acts += [("go", d), ("close_door", d)]
        elif state.doors[d] == CLOSED:
            acts.append(("open_door", d))
        else:
            acts += [("unlock", d, k) for k in held if layout.is_key[k]]
    for c, r in enumerate(layout.container_room):
        if r == state.room:
            acts.append(("close", c) if state.open_containers[c] else ("open", c))
    acts += [("take", o) for o in _visible_objects(layout, state)]
    for o in held:
        acts.append(("drop", o))
        for c, r in enumerate(layout.container_room):
            if r == state.room and state.open_containers[c]:
                acts.append(("put", o, c))
    acts += [("look",), ("inventory",)]
    return acts


def action_text(layout: Layout, state: State, act: Action) -> str:
    kind = act[0]
    if kind in ("go", "open_door", "close_door", "unlock"):
        room = layout.rooms[_other(layout, act[1], state.room)]
        if kind == "go":
            return f"go to the {room}"
        if kind == "unlock":
            return f"unlock the door to the {room} with the {layout.objects[act[2]]}"
        return f"{'open' if kind == 'open_door' else 'close'} the door to the {room}"
    if kind in ("open", "close"):
        return f"{kind} the {layout.containers[act[1]]}"
    if kind in ("take", "drop"):
        return f"{kind} the {layout.objects[act[1]]}"
    if kind == "put":
        return f"put the {layout.objects[act[1]]} in the {layout.containers[act[2]]}"
    return kind  # look, inventory


def _list_names(names: list[str]) -> str:
    names = [f"{'an' if n[0] in 'aeiou' else 'a'} {n}" for n in names]
    if len(names) <= 1:
        return "".join(names)
    return ", ".join(names[:-1]) + " and " + names[-1]


def _list_rooms(rooms: list[str]) -> str:
    names = [f"the {r}" for r in rooms]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def describe(layout: Layout, state: State) -> str:
    """The room description the agent sees after every action."""
    parts = [f"You are in the {layout.rooms[state.room]}."]
    floor = [layout.objects[o] for o, loc in enumerate(state.obj_loc) if loc == state.room]
    parts.append(f"On the floor you see {_list_names(floor)}." if floor else "The floor is empty.")
    for c, r in enumerate(layout.container_room):
        if r != state.room:
            continue
        name = layout.containers[c]
        if not state.open_containers[c]:
            parts.append(f"The {name} is closed.")
            continue
        inside = [layout.objects[o] for o, loc in enumerate(state.obj_loc) if loc == layout.loc_of_container(c)]
        content = f"holds {_list_names(inside)}" if inside else "is empty"
        parts.append(f"The {name} is open and {content}.")
    for d in _adjacent_doors(layout, state.room):
        room = layout.rooms[_other(layout, d, state.room)]
        status = ("open", "closed", "locked")[state.doors[d]]
        further = [layout.rooms[r] for r in layout.beyond(d, state.room)]
        lead = f", leading on to {_list_rooms(further)}" if further else ""
        parts.append(f"The door to the {room} is {status}{lead}.")
    held = [layout.objects[o] for o, loc in enumerate(state.obj_loc) if loc == INVENTORY]
    parts.append(f"You carry {_list_names(held)}." if held else "You carry nothing.")
    return " ".join(parts)


def transition(layout: Layout, state: State, act: Action) -> tuple[State, str]:
    """Apply a legal action; returns the next state and the feedback sentence."""
    kind = act[0]
    text = action_text(layout, state, act)
    if kind == "go":
        nxt = replace(state, room=_other(layout, act[1], state.room))
        return nxt, f"You go to the {layout.rooms[nxt.room]}."
    if kind in ("open_door", "close_door"):
        doors = list(state.doors)
        doors[act[1]] = OPEN if kind == "open_door" else CLOSED
        return replace(state, doors=tuple(doors)), f"You {text}."
    if kind == "unlock":
        d, k = act[1], act[2]
        if layout.door_key[d] != k:
            return state, f"The {layout.objects[k]} does not fit the lock."
        doors = list(state.doors)
        doors[d] = CLOSED
        return replace(state, doors=tuple(doors)), f"You {text}."
    if kind in ("open", "close"):
        opened = list(state.open_containers)
        opened[act[1]] = kind == "open"
        return replace(state, open_containers=tuple(opened)), f"You {text}."
    if kind in ("take", "drop", "put"):
        loc = list(state.obj_loc)
        loc[act[1]] = INVENTORY if kind == "take" else state.room if kind == "drop" else layout.loc_of_container(act[2])
        return replace(state, obj_loc=tuple(loc)), f"You {text}."
    if kind == "inventory":
        held = [layout.objects[o] for o, loc in enumerate(state.obj_loc) if loc == INVENTORY]
        return state, f"You carry {_list_names(held)}." if held else "You carry nothing."
    return state, "You look around."
