"""The admissible actions of a made-up text state, read off its sentences by rules learnt from the log.

A text game lists the actions its state allows, and in the games of this project the list follows from
the observation: `unlock the door to the hall with the brass key` is listed when the state says "The door
to the hall is locked" and "You carry ... a brass key". An analogy world that edits the list it was given
(`simulation/analogy.py`) keeps the edit's world's actions and misses ours (a locked door of our room, an
open box to put what we just took in), and an agent that cannot pick the action acts otherwise than it
would in the real world. So the list of a made-up state is written by rules learnt from the logged
(observation, list) pairs:

* the log's names are the noun phrases its actions name (`NAME`: the arguments of `analogy_text.arguments`);
* a name's *shape* in a sentence is the sentence with the name as `@` and every other name as `#`: its
  list words and whether the name is among the items ("You carry a #, a @" -> ("You carry", item)), or
  its main clause ("The door to the @ is locked");
* each action template (`take the {0}`) keeps, per slot, the sets of shapes its names had in the states
  that listed it, and the names it was filled with;
* a state lists a template filled, slot by slot, with each name the log filled that slot with whose set
  of shapes in this state is one of the slot's; a template without slots where most logged lists had it.

The rules are checked on logged states kept aside (every tenth) before they are learnt from the whole log:
`exact` is the share whose list they rebuild exactly (as sets). A caller uses the lister only where that share is high (a game whose lists do not follow from
its text keeps the edited lists).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from itertools import product

from adwm.data.schema import Episode

SHAPE_MEMO = 1 << 18  # (sentence, name) pairs whose shapes are kept: logged and simulated states share sentences
ARTICLE = re.compile(r"\b(?:an|a) ([@#])")


class ActionLister:
    """The rules (module docstring) learnt from `episodes`' (observation, list) pairs, past `body`."""

    def __init__(self, episodes: Sequence[Episode], body, arguments, template, sentences, list_of, clause) -> None:
        """`body(sentences) -> sentences` without the feedback; `arguments`, `template`, `sentences`,
        `list_of` (words, items) and `clause` (main clause, rest) are the analogy module's readers."""
        self._body, self._arguments, self._template = body, arguments, template
        self._sentences, self._list, self._clause = sentences, list_of, clause
        self._shapes: dict[tuple[str, str], tuple[str, str] | None] = {}  # (sentence, name) -> its shape
        pairs = [(s.observation, s.admissible) for ep in episodes for s in ep.steps if s.admissible is not None]
        names = {n for _, adm in pairs for a in adm for n in arguments(a)}
        self.names = sorted(names, key=len, reverse=True)
        self._name = re.compile(r"\b(" + "|".join(re.escape(n) for n in self.names) + r")\b") if names else None
        held_out = pairs[::10]  # every tenth logged state checks the rules learnt from the others
        self._learn([p for i, p in enumerate(pairs) if i % 10])
        self.exact = sum(set(self(o) or []) == set(adm) for o, adm in held_out) / max(len(held_out), 1)
        self._learn(pairs)  # the rules of the whole log

    def _learn(self, pairs) -> None:
        self.shapes: dict[str, list[set[frozenset]]] = {}  # template -> per slot, its sets of shapes
        self.fills: dict[str, list[set[str]]] = {}  # template -> per slot, the names the log filled it with
        self.order: dict[str, int] = {}  # template -> where logged lists put it first
        bare: dict[str, int] = defaultdict(int)
        for observation, admissible in pairs:
            x, signatures = self._body(self._sentences(observation)), {}
            for a in admissible:
                t, args = self._template(a), self._arguments(a)
                self.order.setdefault(t, len(self.order))
                if not args:
                    bare[t] += 1
                    continue
                shapes = self.shapes.setdefault(t, [set() for _ in args])
                fills = self.fills.setdefault(t, [set() for _ in args])
                for k, n in enumerate(args):
                    if n not in signatures:
                        signatures[n] = self._signature(x, n)
                    shapes[k].add(signatures[n])
                    fills[k].add(n)
        self.bare = [t for t, c in bare.items() if c >= 0.5 * len(pairs)]

    def _shape(self, sentence: str, name: str) -> tuple[str, str] | None:
        """`name`'s shape in `sentence` (module docstring), None where the sentence does not name it."""
        key = (sentence, name)
        if key not in self._shapes:
            if len(self._shapes) >= SHAPE_MEMO:
                self._shapes.clear()
            self._shapes[key] = self._read_shape(sentence, name)
        return self._shapes[key]

    def _read_shape(self, sentence: str, name: str) -> tuple[str, str] | None:
        if self._name is None or not re.search(r"\b" + re.escape(name) + r"\b", sentence):
            return None
        s = ARTICLE.sub(r"a \1", self._name.sub(lambda m: "@" if m[1] == name else "#", sentence))
        words, items = self._list(s)
        if items:
            return words, "item" if "a @" in items else "holder" if "@" in words else "other"
        return self._clause(s)[0], "clause"

    def _signature(self, x: list[str], name: str) -> frozenset:
        return frozenset(sh for sh in (self._shape(s, name) for s in x) if sh is not None)

    def __call__(self, observation: str) -> list[str] | None:
        """The list the rules give the state `observation` (None where the log had no lists)."""
        if not self.order:
            return None
        x = self._body(self._sentences(observation))
        here = {m for s in x for m in (self._name.findall(s) if self._name else [])}
        out, signatures = list(self.bare), {n: self._signature(x, n) for n in here}
        for t, slots in self.shapes.items():
            options = [
                [n for n in sorted(here) if n in self.fills[t][k] and signatures[n] in slots[k]]
                for k in range(len(slots))
            ]
            for names in product(*options):
                if len(set(names)) == len(names):
                    out.append(_filled(t, names))
        return sorted(out, key=lambda a: self.order.get(self._template(a), len(self.order)))


def _filled(template: str, names: Sequence[str]) -> str:
    for k, n in enumerate(names):
        template = template.replace(f"{{{k}}}", n)
    return template
