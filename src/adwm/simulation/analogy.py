"""`analogy`: a world of text states that makes up states the log never showed, by analogy with it.

A log with one episode per world holds the outcome of few of the moves an evaluated agent makes, and a
world that can only return logged observations (`nearest`, or a snap of the learned model to a logged
latent) loses the state at every other move. Observations of text games are sentences, and an action
changes few of them in a way that does not depend on the world: `take the silver coin` turns "The glass
case is open and holds a silver coin." into "... is empty." and "You carry nothing." into "You carry a
silver coin.", whichever world it is. So each logged transition (s, a, s') is kept as an edit:

* the action's arguments (the noun phrases after "the": `silver coin`) are replaced by slots in the action
  (`take the {0}`), in the sentences s' dropped, in the sentences it added and in the admissible actions
  the step removed and added;
* the edit is filed under the action's template, where the task names each argument (its first
  sentence, the goal; later, its notes; or not at all), whether the episode took the action before and
  where the task names the scene it was taken in, so that taking the object the task asks for, taking
  another, taking one again and dropping it in the room the goal names or elsewhere are different edits
  (they pay differently); each is also filed under the same key with any scene, for keys the log never
  took in a scene of that kind.

At a state x and action a:

1. where the rollout's own logged world took a at exactly x, its successor (another world's successor of
   the same text is not taken: worlds share texts, an empty room with the same doors, whose moves lead to
   different rooms);
2. else the edits of a's key, their slots filled with a's arguments: one of those whose dropped sentences x
   holds most of (or sentences they fit, below), among those that drop fewest sentences of kinds x does not
   show and whose own items do not share a name with a's arguments, is applied (drawn in proportion to how
   often the log made it). A list in another holder of the same kind ("The basket is open and holds a coin."
   where x has "The box is open and holds a coin.") fits under x's holder's name, and a list left empty is
   written as the log writes that kind of list empty. x loses its previous feedback (what precedes its scene
   sentence, the kind of sentence a logged episode opens with); the new feedback leads (a feedback sentence
   that repeated one of the edit's next state, the answer to `inventory`, repeats ours), and the k-th
   dropped sentence becomes the k-th added one in place. Where x lacks a dropped sentence, a sentence of x
   with the same main clause and more after it ("The door to the hall is closed, leading on to the attic.")
   takes the change of its main clause, and a sentence that lists items under the same words ("On the floor
   you see a coin and an apple.") the same change of its items. What the edit revealed (a list of items the
   action did not name: an opened container's contents) is shown as the rollout's own logged world first
   showed it, where its log did, else as the task places items there ("the coin is in the chest"), else as
   the edit's world showed it. Where the edit changed the whole scene (a move), the new scene is the one the
   rollout left there, else the one its own logged world first showed, else the edit's own, with x's
   sentences of the kinds a change of scene keeps (the inventory). The admissible list is edited the same
   way (the edit's world's items swapped for ours, actions on what the new state does not show left out;
   across a change of scene, the actions on what the rollout carries kept); a state the rollout's own world
   logged has its logged list. Where rules learnt from the log's lists rebuild them (`lister.py`), every
   next state's list is instead the one its sentences allow. The reward and the end are what the rollout's
   own logged world paid and ended where it took a in the same scene (the first time, or again, as the
   rollout does: a world pays its own milestones), else the edit's;
3. an action with no edit of its key falls back to `nearest`.

The arguments are found by the article-marked English of the built-in world and TextWorld's commands
(`ARGUMENT`); a command with none is its own template.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache

import numpy as np

from adwm.data.schema import Episode
from adwm.simulation.lister import ActionLister
from adwm.simulation.worlds import LoggedStart, LoggedWorld, TextState

LISTER_EXACT = 0.95  # the share of held-out logged lists the lister must rebuild for the world to use it
BEST_MEMO = 200_000  # (state, action) pairs whose best-fitting edits are kept: rollouts revisit them
TEXT_MEMO = 1 << 18  # texts whose readings (sentences, lists, templates) are kept: a rollout reads each many times
SENTENCE = re.compile(r"(?<=[.!?])\s+")
ARGUMENT = re.compile(r"\bthe ([a-z0-9][a-z0-9 '-]*?)(?= in | on | to | into | from | with |$)")


def sentences(text: str) -> list[str]:
    return list(_sentences(text))


@lru_cache(maxsize=TEXT_MEMO)
def _sentences(text: str) -> tuple[str, ...]:
    return tuple(s for s in SENTENCE.split(text.strip()) if s)


def arguments(action: str) -> list[str]:
    """The noun phrases an action names (`put the coin in the drawer` -> [coin, drawer])."""
    return list(_arguments(action))


@lru_cache(maxsize=TEXT_MEMO)
def _arguments(action: str) -> tuple[str, ...]:
    return tuple(ARGUMENT.findall(action))


@lru_cache(maxsize=TEXT_MEMO)
def kind(sentence: str) -> str:
    """A sentence's kind: its first two words (`You carry`, `You are`)."""
    return " ".join(sentence.split()[:2])


def openings(episodes: Sequence[Episode]) -> set[str]:
    """The kinds of sentence the log's episodes open with (their first observation has no feedback): the
    scene sentence ("You are"), which ends an observation's feedback."""
    firsts = [sentences(ep.steps[0].observation) for ep in episodes if ep.steps]
    return {kind(x[0]) for x in firsts if x}


def taken_before(state: TextState, action: str) -> bool:
    """Whether the rollout took `action` before (its edits and payments are those of an action `again`)."""
    return any(a == action for _, a in state.history)


def _article(name: str) -> str:
    return "an" if name[:1] in "aeiou" else "a"


def _joined(items: Sequence[str]) -> str:
    """Items as the worlds list them: "a coin", "a coin and an apple", "a coin, a pen and an apple"."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _abstract(text: str, args: Sequence[str]) -> str:
    """`text` with each argument a slot; "a"/"an" before an argument become the slot's article `{k:a}`."""
    return _abstracted(text, tuple(args))


@lru_cache(maxsize=TEXT_MEMO)
def _abstracted(text: str, args: tuple[str, ...]) -> str:
    for k, arg in sorted(enumerate(args), key=lambda ka: -len(ka[1])):
        text = re.sub(r"\b(?:a|an) " + re.escape(arg) + r"\b", f"{{{k}:a}}", text)
        text = re.sub(r"\b" + re.escape(arg) + r"\b", f"{{{k}}}", text)
    return text


@lru_cache(maxsize=TEXT_MEMO)
def _template(action: str) -> str:
    """An action with its own arguments as slots (`drop the {0}`)."""
    return _abstract(action, arguments(action))


def _where(task: str, name: str) -> int:
    """Where `task` names `name`: 1 in its first sentence (the goal), 2 only later (its notes), 0 not at all."""
    goal = sentences(task)[0] if task.strip() else ""
    return 1 if name in goal else 2 if name in task else 0


def _fill(template: str, args: Sequence[str]) -> str:
    """`template` with its slots filled with `args` (an article slot takes the argument's article)."""
    return _filled(template, tuple(args))


@lru_cache(maxsize=TEXT_MEMO)
def _filled(template: str, args: tuple[str, ...]) -> str:
    for k, arg in enumerate(args):
        article = _article(arg)
        template = template.replace(f"{{{k}:a}}", f"{article} {arg}").replace(f"{{{k}}}", arg)
    return template


def _feedback(before: list[str], after: list[str], opening: set[str]) -> list[str]:
    """The action's feedback: the leading sentences of `after` before the first of an `opening` kind (the
    kinds a logged episode's first observation opens with, which has no feedback), or, where none is,
    before the first sentence `before` also has."""
    for i, s in enumerate(after):
        if kind(s) in opening:
            return after[:i]
    shared = set(before)
    for i, s in enumerate(after):
        if s in shared:
            return after[:i]
    return after


_ITEM = re.compile(r"\b(?:a|an) ")


@lru_cache(maxsize=TEXT_MEMO)
def _list(sentence: str) -> tuple[str, tuple[str, ...]]:
    """(the words before its first a/an item, the items): "You carry a coin and an apple." -> ("You carry",
    ("a coin", "an apple")); a sentence without such items is its own words and no items."""
    m = _ITEM.search(sentence)
    if m is None:
        return sentence, ()
    rest = sentence[m.start() :].rstrip(".")
    return sentence[: m.start()].rstrip(), tuple(p for p in re.split(r", | and ", rest) if p)


def _names_listed(sentence: str) -> list[str]:
    """The items a sentence lists, without their articles ("holds a coin and an apple" -> [coin, apple])."""
    return [re.sub(r"^(?:a|an) ", "", item) for item in _list(sentence)[1]]


def _lead(sentence: str) -> str:
    """The words of a list before its verb, which its empty form shares: "The chest is open and holds a coin."
    and "The chest is open and is empty." -> "The chest is open and"."""
    words, items = _list(sentence)
    return words.rsplit(" ", 1)[0] if items else " ".join(sentence.split()[:-2])


def _same_list(sentence: str, dropped: str, added: str | None) -> bool:
    """Whether `sentence` is the list `dropped` was, with other items: the same words before the items, or
    an empty form (no items) of the same kind as either."""
    words, items = _list(sentence)
    others = [_list(t) for t in (dropped, added) if t is not None]
    if items:
        return any(words == w and its for w, its in others)
    return any(kind(sentence) == kind(t) for t in (dropped, added) if t is not None) and sentence not in (
        dropped,
        added,
    )


@lru_cache(maxsize=TEXT_MEMO)
def _clauses(sentence: str) -> tuple[str, str]:
    """(its main clause, the rest from its first comma): "The door to the hall is closed, leading on to the
    attic." -> ("The door to the hall is closed", ", leading on to the attic.")."""
    body = sentence.rstrip(".")
    i = body.find(", ")
    return (body, ".") if i < 0 else (body[:i], body[i:] + ".")


def _same_clause(sentence: str, dropped: str) -> bool:
    """Whether `sentence` is `dropped` with another clause after its main one (neither lists items): the
    change of its main clause carries over, whatever follows."""
    if _list(sentence)[1] or _list(dropped)[1]:
        return False
    return _clauses(sentence)[0] == _clauses(dropped)[0]


def _reclause(sentence: str, added: str) -> str:
    """`sentence` with its main clause that of `added`, the rest kept."""
    return _clauses(added)[0] + _clauses(sentence)[1]


def _named(items: Sequence[str], args: Sequence[str]) -> list[str]:
    """The items of a list ("a coin") that the action names (`args`: "coin")."""
    return [i for i in items if re.sub(r"^(?:a|an) ", "", i) in args]


def _emptied(words: str, empty: Mapping[str, str] | None) -> str | None:
    """The empty form of a list under `words`, where `empty` (a list's last lead word -> what its empty form
    says after the rest of the lead, learnt from the log) knows it: "The box is open and holds" -> "The box is
    open and is empty."; None where it does not."""
    lead, _, last = words.rpartition(" ")
    tail = None if empty is None else empty.get(last)
    return None if tail is None or not lead else f"{lead} {tail}"


def _leaves(items, named, d_items, words: str, empty: Mapping[str, str] | None) -> bool:
    """Whether an edit can write what a list of `items` under `words` keeps when the `named` items go: other
    items, or none where the edit's own list emptied (all its `d_items` named) or the empty form is known."""
    return any(i not in named for i in items) or all(i in named for i in d_items) or bool(_emptied(words, empty))


def _fits(sentence: str, dropped: str, args: Sequence[str], empty: Mapping[str, str] | None = None) -> bool:
    """Whether an edit that dropped `dropped` (its slots filled) applies to `sentence`: the same sentence, the
    same main clause, or the same list holding every item the action names that `dropped` held, where the
    edit can write what is left (`_leaves`)."""
    if sentence == dropped or _same_clause(sentence, dropped):
        return True
    words, items = _list(sentence)
    d_words, d_items = _list(dropped)
    named = _named(d_items, args)
    if not (items and words == d_words and named and all(i in items for i in named)):
        return False
    return _leaves(items, named, d_items, words, empty)


def _renaming(
    sentence: str, dropped: str, args: Sequence[str], empty: Mapping[str, str] | None = None
) -> tuple[str, str] | None:
    """Where `dropped` (slots filled) lists an item the action names that `sentence` lists too, under words
    that differ from its own by one name only, the two names (theirs, ours): "The wicker basket is open and
    holds an apple." in `sentence` "The tool box is open and holds an apple and a pen." -> ("wicker basket",
    "tool box"), a list in another holder of the same kind, which the edit applies to as to its own. None
    where the words are the same or differ otherwise, or the edit cannot write what is left (as `_fits`)."""
    words, items = _list(sentence)
    d_words, d_items = _list(dropped)
    named = _named(d_items, args)
    if not (items and named and all(i in items for i in named)) or words == d_words:
        return None
    if not _leaves(items, named, d_items, words, empty):
        return None
    a, b = d_words.split(), words.split()
    pre = next((k for k, (u, v) in enumerate(zip(a, b)) if u != v), min(len(a), len(b)))
    suf = next((k for k, (u, v) in enumerate(zip(reversed(a), reversed(b))) if u != v), min(len(a), len(b)))
    theirs, ours = a[pre : len(a) - suf], b[pre : len(b) - suf]
    if suf < 2 or not theirs or not ours or len(theirs) > 3 or len(ours) > 3:
        return None
    return " ".join(theirs), " ".join(ours)


def _relist(sentence: str, dropped: str, added: str | None, empty: Mapping[str, str] | None = None) -> str:
    """`sentence` with the items the edit took away (in `dropped`, not in `added`) removed and those it
    brought added; an empty list becomes the edit's empty form, else the log's (`_emptied`)."""
    words, items = _list(sentence)
    d_words, d_items = _list(dropped)
    a_words, a_items = _list(added) if added is not None else (d_words, [])
    gone, new = set(d_items) - set(a_items), [i for i in a_items if i not in d_items]
    items = [i for i in items if i not in gone] + [i for i in new if i not in items]
    if not items:
        if added is not None and not a_items:
            return added
        return dropped if not d_items else _emptied(words, empty) or sentence
    lead = a_words if a_items else d_words if d_items else words
    return f"{lead} {_joined(items)}."


@dataclass
class _Rollout:
    """What a rollout of the analogy world carries: its logged world's seed and the scenes it left."""

    seed: int
    scenes: dict[str, tuple[list[str], list[str] | None]] = field(default_factory=dict)


@dataclass(frozen=True)
class _Edit:
    dropped: tuple[str, ...]  # templates, in the order of s
    added: tuple[str, ...]  # templates, in the order of s' (after the feedback)
    feedback: tuple[str, ...]
    echoes: tuple[bool, ...]  # per feedback sentence: it repeats a sentence of s' ("You carry a coin.")
    scene: bool  # the whole scene changed
    scene_body: tuple[str, ...]  # templates of s' after its feedback (for a scene change)
    adm_dropped: tuple[str, ...]
    adm_added: tuple[str, ...]
    next_admissible: tuple[str, ...] | None  # templates of the whole next list (for a scene change)
    reward: float
    done: bool


def _renamed(edit: _Edit, x: list[str], args: Sequence[str], empty: Mapping[str, str]) -> _Edit:
    """`edit` with each holder whose list it dropped, where x has none of its own that the list fits, named as
    x's holder that `_renaming` finds (in every sentence and action of the edit)."""
    names: dict[str, str] = {}
    for t in edit.dropped:
        d = _fill(t, args)
        if "{" not in t or any(_fits(y, d, args, empty) for y in x if kind(y) == kind(d)):
            continue
        found = next((r for r in (_renaming(y, d, args, empty) for y in x) if r is not None), None)
        if found is not None:
            names.setdefault(*found)
    if not names:
        return edit
    pattern = re.compile(r"\b(" + "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True)) + r")\b")

    def swap(texts):
        return None if texts is None else tuple(pattern.sub(lambda m: names[m[1]], t) for t in texts)

    return replace(
        edit,
        dropped=swap(edit.dropped),
        added=swap(edit.added),
        feedback=swap(edit.feedback),
        scene_body=swap(edit.scene_body),
        adm_dropped=swap(edit.adm_dropped),
        adm_added=swap(edit.adm_added),
        next_admissible=swap(edit.next_admissible),
    )


@dataclass
class Proposal:
    """A next state a text world may move to, with how often the log made it (`weight`) and what the step
    pays and ends there: the mean `reward` and the probability `done` over the logged outcomes it merges."""

    state: TextState
    reward: float
    done: float
    weight: float


def _merged(outcomes: Sequence[tuple[TextState, float, bool]], weights: Sequence[float]) -> list[Proposal]:
    """One proposal per observation (the first outcome's state), weighted by the sum of its outcomes'
    weights, with their weighted mean reward and share of ends: the same text may follow a step that paid
    and one that did not (a milestone pays the first time), and `step` draws among such outcomes by weight."""
    groups: dict[str, list[tuple[TextState, float, bool, float]]] = {}
    for (state, reward, done), w in zip(outcomes, weights):
        groups.setdefault(state.observation, []).append((state, reward, done, w))
    out = []
    for group in groups.values():
        total = sum(w for *_, w in group)
        reward = sum(r * w for _, r, _, w in group) / total
        done = sum(float(d) * w for _, _, d, w in group) / total
        out.append(Proposal(group[0][0], reward, done, total))
    return out


class AnalogyWorld:
    """`evaluate.world=analogy` (module docstring): the logged successors where the log has them, edits
    by analogy elsewhere, `nearest` for actions of no logged template."""

    def __init__(self, episodes: Sequence[Episode], nearest: LoggedWorld | None = None) -> None:
        """`nearest`: the `nearest` world of the same episodes, where the caller has built it already."""
        self.nearest = nearest if nearest is not None else LoggedWorld(episodes, moves=True)
        counts: dict[tuple, dict[_Edit, int]] = defaultdict(lambda: defaultdict(int))
        self.own: dict[int, list[tuple[str, list[str] | None]]] = {}  # seed -> its logged (observation, list)
        # (seed, observation, action) -> the successors that world logged: (next state, reward, end)
        self.own_moves: dict[tuple[int, str, str], list[tuple[str, list[str] | None, float, bool]]] = defaultdict(list)
        self.own_lists: dict[tuple, list[str]] = {}  # (seed, sentences past the feedback) -> its logged list
        # (seed, scene sentence, action, again) -> what that world's steps of the action there paid and ended
        self.own_pay: dict[tuple, list[tuple[float, bool]]] = defaultdict(list)
        survived: dict[str, int] = defaultdict(int)
        seen: dict[str, int] = defaultdict(int)
        kept_kinds: dict[str, int] = defaultdict(int)
        list_seen: dict[str, int] = defaultdict(int)
        list_kept: dict[str, int] = defaultdict(int)
        self.opening = openings(episodes)
        for ep in episodes:
            taken: set[str] = set()
            obs = [s.observation for s in ep.steps] + [ep.final_observation]
            lists = [s.admissible for s in ep.steps] + [None]
            self.own[ep.seed] = list(zip(obs, lists))
            for o, adm in zip(obs, lists):
                if adm is not None:
                    self.own_lists.setdefault((ep.seed, tuple(self._body(sentences(o)))), adm)
            for t, step in enumerate(ep.steps):
                self.own_moves[(ep.seed, obs[t], step.action)].append(
                    (obs[t + 1], lists[t + 1], step.reward, ep.ended(t))
                )
                again = step.action in taken
                self.own_pay[(ep.seed, self._scene(obs[t]), step.action, again)].append((step.reward, ep.ended(t)))
                before, after = sentences(obs[t]), sentences(obs[t + 1])
                for s in before:
                    seen[s] += 1
                    survived[s] += s in after
                edit = self._edit(step.action, before, after, lists[t], lists[t + 1], step.reward, ep.ended(t))
                role = self._role(ep.task, obs[t])
                for r in (role, None):  # filed under the scene's role, and under any role
                    counts[self._key(ep.task, step.action, again, r)][edit] += 1
                taken.add(step.action)
                if edit.scene:
                    for s in set(before) & set(after):
                        kept_kinds[kind(s)] += 1
                    if lists[t] is not None and lists[t + 1] is not None:
                        for a in lists[t]:
                            list_seen[_template(a)] += 1
                            list_kept[_template(a)] += a in lists[t + 1]
        self.own_moves, self.own_pay = dict(self.own_moves), dict(self.own_pay)
        self._best: dict[tuple, np.ndarray] = {}  # (key, action, observation) -> the best-fitting edits
        # the words before a logged list's items, by those words but their last ("The chest is open and "),
        # which an empty form of the same list shares ("The chest is open and is empty.")
        self.list_words: dict[str, str] = {}
        # a list's last lead word -> what its empty form says after the rest of its lead, where the log showed
        # a list emptied in a step ("The box is open and holds a coin." -> "... and is empty.": "holds" -> "is
        # empty."; "You carry a coin." -> "You carry nothing.": "carry" -> "carry nothing.")
        empties: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for ep in episodes:
            obs = [s.observation for s in ep.steps] + [ep.final_observation]
            for o in obs[:-1]:
                for y in sentences(o):
                    words, items = _list(y)
                    if items:
                        self.list_words.setdefault(words.rsplit(" ", 1)[0] + " ", words)
            for o, o_next in zip(obs, obs[1:]):  # a list the step dropped, an empty sentence it added
                before, after = self._body(sentences(o)), self._body(sentences(o_next))
                new = [z for z in after if z not in before and not _list(z)[1]]
                for y in before:
                    words, items = _list(y)
                    lead, _, last = words.rpartition(" ")
                    if not items or not lead or y in after:
                        continue
                    for z in new:
                        if z.startswith(lead + " "):
                            empties[last][z[len(lead) + 1 :]] += 1
        self.empty = {last: max(tails, key=tails.get) for last, tails in empties.items()}
        # each distinct edit once, with how often the log made it (ties are drawn in proportion)
        self.edits = {k: list(v) for k, v in counts.items()}
        self.weights = {k: np.array(list(v.values()), dtype=float) for k, v in counts.items()}
        # per key, each dropped template -> the edits that dropped it (an edit's score is a count of these)
        self.dropping: dict[tuple, dict[str, np.ndarray]] = {}
        for k, edits in self.edits.items():
            by_template: dict[str, list[int]] = defaultdict(list)
            for i, e in enumerate(edits):
                for t in set(e.dropped):
                    by_template[t].append(i)
            self.dropping[k] = {t: np.array(ids) for t, ids in by_template.items()}
        # per key, each edit's items named in its own words (not a slot): an edit whose world held an item of
        # the name the action names ("a bone key and {0:a}" taking the iron key) does not apply to that action
        self.literal = {
            k: [frozenset(n for t in e.dropped + e.added for n in _names_listed(t) if "{" not in n) for e in edits]
            for k, edits in self.edits.items()
        }
        # the lists of made-up states read off their sentences, where the rules rebuild the log's own lists
        self.lister = ActionLister(episodes, self._body, arguments, _template, sentences, _list, _clauses)
        self.listed = self.lister.exact >= LISTER_EXACT
        self.transient = {s for s, n in seen.items() if survived[s] == 0}
        self.scene_kinds = set(kept_kinds)
        # the kinds of admissible action a change of scene keeps (what the agent carries: `drop the {0}`)
        self.carried = {t for t, n in list_seen.items() if list_kept[t] >= 0.9 * n}

    @staticmethod
    def _key(task: str, action: str, again: bool, role: int | None) -> tuple[str, tuple[int, ...], bool, int | None]:
        """Where the edits of `action` are filed: its template, where the task names each argument (0: not
        at all, 1: in its first sentence, the goal; 2: only later, in its notes), whether the episode took
        the action before (`again`) and where the task names the scene it is taken in (`role`, the same
        scale; None: any scene). Dropping the object the task asks for pays in the room the goal names."""
        args = arguments(action)
        return _abstract(action, args), tuple(_where(task, arg) for arg in args), again, role

    def _role(self, task: str, observation: str) -> int:
        """Where the task names the scene of `observation` (`_where` of its scene sentence's noun phrases)."""
        scene = self._scene(observation)
        names = arguments(scene.rstrip(".!?")) if scene is not None else []
        return max((_where(task, n) for n in names), key=lambda w: (w == 1, w == 2), default=0)

    def _edit(self, action, before, after, adm, next_adm, reward, done) -> _Edit:
        """The logged step from sentences `before` to `after` by `action` as an edit, its arguments slots."""
        args = arguments(action)
        feedback = _feedback(before, after, self.opening)
        body = after[len(feedback) :]
        before = self._body(before)  # without the previous action's feedback
        kept = set(before) & set(after)
        dropped = [s for s in before if s not in kept]
        added = [s for s in body if s not in kept]
        scene = bool(dropped) and all(s not in before for s in body[:1])  # the scene's first sentence is new
        # a list the log did not write (a free-form step, or the one after an episode's end): no list edit
        a = [] if adm is None or next_adm is None else adm
        n = [] if adm is None or next_adm is None else next_adm
        return _Edit(
            tuple(_abstract(s, args) for s in dropped),
            tuple(_abstract(s, args) for s in added),
            tuple(_abstract(s, args) for s in feedback),
            tuple(s in body for s in feedback),
            scene,
            tuple(_abstract(s, args) for s in body),
            tuple(_abstract(x, args) for x in a if x not in n),
            tuple(_abstract(x, args) for x in n if x not in a),
            None if next_adm is None else tuple(_abstract(x, args) for x in next_adm),
            float(reward),
            bool(done),
        )

    def start(self, start: LoggedStart) -> TextState:
        return TextState(start.task, start.observation, start.admissible, [], _Rollout(start.seed))

    def step(self, state: TextState, action: str, rng: np.random.Generator) -> tuple[TextState, float, bool]:
        nxt, reward, done = self._step(state, action, rng)
        nxt = self._listed(nxt)
        self.remember(state, nxt)
        return nxt, reward, done

    def _listed(self, state: TextState) -> TextState:
        """`state` with its logged list where the rollout's own world logged it (the same text past the
        feedback), else with the list the lister reads off its sentences where the lister is used (`listed`)
        and the state has a list (not a free-form one)."""
        if state.admissible is None:
            return state
        admissible = self.own_lists.get((state.handle.seed, tuple(self._body(sentences(state.observation)))))
        if admissible is None and self.listed:
            admissible = self.lister(state.observation)
        if admissible is None:
            return state
        return TextState(state.task, state.observation, admissible, state.history, state.handle)

    def remember(self, state: TextState, nxt: TextState) -> None:
        """Keep the scene `state` showed, as it was, for a return to it, where the step to `nxt` left it."""
        here, there = self._scene(state.observation), self._scene(nxt.observation)
        if here is not None and here != there:
            state.handle.scenes[here] = (self._body(sentences(state.observation)), state.admissible)

    def proposals(self, state: TextState, action: str) -> list[Proposal]:
        """Every next state the world may move to from `state` by `action`, each observation once, with how
        often the log made it: the logged successors (`nearest`'s, where the log took the action there or
        the action has no edit of its kind), else each of the best-matching edits applied."""
        matching, own = self._matching(state, action), None
        if matching is None:
            outcomes = self._logged(state, action)
            if not outcomes:
                outcomes = [(self._own(state, nxt), r, d) for nxt, r, d in self.nearest.outcomes(state, action)]
                own = self._own_pay(state, action)
            proposals = _merged(outcomes, [1.0] * len(outcomes))
        else:
            edits, w = matching
            best = np.flatnonzero(w > 0)
            outcomes = [(self._applied(state, action, edits[i]), edits[i].reward, edits[i].done) for i in best]
            proposals = _merged(outcomes, w[best].tolist())
            own = self._own_pay(state, action)
        for p in proposals:
            p.state = self._listed(p.state)
            if own:  # as `_paid`: the own world's payment, its mean and share of ends
                p.reward, p.done = float(np.mean([r for r, _ in own])), float(np.mean([d for _, d in own]))
        return proposals

    def _matching(self, state: TextState, action: str) -> tuple[list[_Edit], np.ndarray] | None:
        """The edits of `action`'s key and their weights (how often the log made each; 0 for those that do
        not drop the most of `state`'s sentences), or None where the log's successors step: the rollout's
        own world took the action at exactly this state, or the log has no edit of its kind (then
        `nearest`). Another world's successor of the same text is not taken: worlds share texts (an empty
        room with the same doors) whose moves lead to different rooms."""
        if (state.handle.seed, state.observation, action) in self.own_moves:
            return None
        again = taken_before(state, action)
        role = self._role(state.task, state.observation)
        # the log never took it here again (or never the first time): the other; then in any scene
        order = ((again, role), (not again, role), (again, None), (not again, None))
        key = next((k for k in (self._key(state.task, action, g, r) for g, r in order) if k in self.edits), None)
        if key is None:
            return None
        edits = self.edits[key]
        memo = (key, action, state.observation)
        best = self._best.get(memo)
        if best is None:
            args = arguments(action)
            x = sentences(state.observation)
            kinds = {kind(y) for y in x}  # a sentence fits only one of its own kind (its first two words)
            scores = np.zeros(len(edits))
            lists = [y for y in x if _list(y)[1]]
            misses = np.zeros(len(edits))
            for t, ids in self.dropping[key].items():  # each dropped sentence that x holds, or one it fits
                d = _fill(t, args) if "{" in t or kind(t) in kinds else None
                if d is not None and any(_fits(y, d, args, self.empty) for y in x if kind(y) == kind(d)):
                    scores[ids] += 1
                elif d is not None and "{" in t and any(_renaming(y, d, args, self.empty) for y in lists):
                    scores[ids] += 1  # a list in another holder: the edit applies under our holder's name
                elif d is None or kind(d) not in kinds:
                    misses[ids] += 1  # x has no sentence of its kind: the edit drops what x does not show
            if len(self._best) >= BEST_MEMO:
                self._best.clear()
            scores[misses > misses.min()] = -1
            named = set(args)
            scores[[bool(names & named) for names in self.literal[key]]] = -2
            best = self._best[memo] = scores == scores.max()
        return edits, self.weights[key] * best

    def _step(self, state: TextState, action: str, rng: np.random.Generator) -> tuple[TextState, float, bool]:
        matching = self._matching(state, action)
        if matching is None:  # the own world's logged successor, or no edit of this action's kind: `nearest`
            logged = self._logged(state, action)
            if logged:
                return logged[int(rng.integers(len(logged)))]
            nxt, reward, done = self.nearest.step(state, action, rng)
            return self._own(state, nxt), *self._paid(state, action, reward, done, rng)
        edits, w = matching
        edit = edits[int(rng.choice(len(edits), p=w / w.sum()))]
        return self._applied(state, action, edit), *self._paid(state, action, edit.reward, edit.done, rng)

    def _own_pay(self, state: TextState, action: str) -> list[tuple[float, bool]] | None:
        """What the rollout's own logged world paid and ended where it took `action` in the same scene, as the
        first time or again as the rollout does (None where it never did)."""
        again = taken_before(state, action)
        return self.own_pay.get((state.handle.seed, self._scene(state.observation), action, again))

    def _paid(self, state, action, reward, done, rng) -> tuple[float, bool]:
        """The step's reward and end: one of the own world's for the same action in the same scene (a
        world pays its own milestones: other worlds' edits pay what the action earned where the behaviour
        agents took it, mostly where it paid), else the edit's."""
        own = self._own_pay(state, action)
        if not own:
            return reward, done
        return own[int(rng.integers(len(own)))] if len(own) > 1 else own[0]

    def _logged(self, state: TextState, action: str) -> list[tuple[TextState, float, bool]]:
        """The successors the rollout's own world logged from exactly this state by `action` ([] if none). A
        successor in another scene shows that scene as the rollout left it, else as the world first showed
        it (the log may have been there before and changed it), with the successor's feedback and inventory."""
        history, out = [*state.history, (state.observation, action)], []
        for obs, adm, r, d in self.own_moves.get((state.handle.seed, state.observation, action), []):
            adm = adm if adm is not None else state.admissible
            scene = self._scene(obs)
            known = None if scene == self._scene(state.observation) else self._known_scene(state.handle, scene)
            if scene is not None and known is not None:
                x = sentences(obs)
                keep = {kind(s): s for s in self._body(x) if kind(s) in self.scene_kinds}
                body = [keep.get(kind(s), s) for s in known[0]]
                obs = " ".join(x[: len(x) - len(self._body(x))] + body)
                if known[1] is not None and adm is not None:
                    adm = [a for a in known[1] if _template(a) not in self.carried] + [
                        a for a in adm if _template(a) in self.carried
                    ]
            out.append((TextState(state.task, obs, adm, history, state.handle), r, d))
        return out

    @staticmethod
    def _own(state: TextState, nxt: TextState) -> TextState:
        """`nxt` (a state of `nearest`) as a state of this rollout."""
        return TextState(nxt.task, nxt.observation, nxt.admissible, nxt.history, state.handle)

    def _applied(self, state: TextState, action: str, edit: _Edit) -> TextState:
        """The state after `edit`, its slots filled with `action`'s arguments, is applied to `state`."""
        args = arguments(action)
        x = sentences(state.observation)
        observation, admissible = self._apply(state, _renamed(edit, x, args, self.empty), args, x)
        history = [*state.history, (state.observation, action)]
        return TextState(state.task, observation, admissible, history, state.handle)

    def _scene(self, observation: str) -> str | None:
        """The sentence that names an observation's scene: its first of an opening kind."""
        return next((s for s in sentences(observation) if kind(s) in self.opening), None)

    def _body(self, x: list[str]) -> list[str]:
        """x from its scene sentence on (without the feedback)."""
        i = next((k for k, s in enumerate(x) if kind(s) in self.opening), 0)
        return x[i:]

    def _apply(self, state: TextState, edit: _Edit, args: list[str], x: list[str]) -> tuple[str, list[str] | None]:
        """The next observation and admissible list: `edit` (slots filled with `args`) applied to x."""
        feedback = [_fill(t, args) for t in edit.feedback]
        if edit.scene:
            body, admissible = self._new_scene(state, edit, args, x)
            return " ".join(self._echoed(feedback, edit, body) + body), admissible
        body, swap = self._edited_scene(state, edit, args, x, feedback)
        feedback = self._echoed(feedback, edit, body)
        if self.listed:  # the lister lists every next state (`_listed`): the edited list would not be read
            return " ".join(feedback + body), state.admissible
        return " ".join(feedback + body), self._edited_list(state.admissible, edit, args, body, swap)

    @staticmethod
    def _echoed(feedback: list[str], edit: _Edit, body: list[str]) -> list[str]:
        """The feedback with each sentence that repeated a sentence of the edit's s' ("You carry a coin.", the
        answer to `inventory`) repeating this state's sentence of its kind instead."""
        out = []
        for f, echo in zip(feedback, edit.echoes):
            same = [s for s in body if kind(s) == kind(f)] if echo else []
            out.append(same[0] if len(same) == 1 else f)
        return out

    def _new_scene(self, state, edit: _Edit, args: list[str], x: list[str]) -> tuple[list[str], list[str] | None]:
        """A change of scene: the scene as the rollout left it or its world logged it, else the edit's own,
        with x's sentences of the kinds a scene change keeps and the actions on what the rollout carries."""
        body = [_fill(t, args) for t in edit.scene_body]
        admissible = None if edit.next_admissible is None else [_fill(t, args) for t in edit.next_admissible]
        known = self._known_scene(state.handle, body[0]) if body else None
        if known is not None:
            body, admissible = known[0], known[1] if known[1] is not None else admissible
        if admissible is None:  # a scene first shown at the end of an episode: the list it had before
            admissible = state.admissible
        if admissible is not None and state.admissible is not None:  # the scene's actions, and ours
            admissible = [a for a in admissible if _template(a) not in self.carried] + [
                a for a in state.admissible if _template(a) in self.carried
            ]
        keep = {kind(s): s for s in x if kind(s) in self.scene_kinds}
        body = [keep.get(kind(s), s) if kind(s) in self.scene_kinds else s for s in body]
        return body, admissible

    def _edited_scene(self, state, edit: _Edit, args, x, feedback) -> tuple[list[str], dict[str, list[str]]]:
        """x's sentences past its feedback with the edit applied in place, and, for each item the edit's
        world revealed, the items this world shows there instead."""
        dropped = [_fill(t, args) for t in edit.dropped]
        added = [_fill(t, args) for t in edit.added]
        # x without the previous action's feedback: what precedes its scene sentence, or where it has none,
        # the sentences that never outlived a step in the log
        opens = any(kind(s) in self.opening for s in x)
        body = self._body(x) if opens else [s for s in x if s not in feedback and s not in self.transient]
        # the k-th dropped sentence became the k-th added one; where x lacks the dropped sentence itself,
        # a sentence of x that lists items under the same words takes the same change of its items
        extra = added[len(dropped) :]
        for d, a in zip(dropped, added + [None] * len(dropped)):
            if d in body:
                i = body.index(d)
                if a is None:
                    del body[i]
                else:
                    body[i] = a
                continue
            i = next((k for k, y in enumerate(body) if _same_clause(y, d)), None)
            if i is not None:  # the same main clause with more after it: the change of the clause
                if a is None:
                    del body[i]
                else:
                    body[i] = _reclause(body[i], a)
                continue
            i = next((k for k, y in enumerate(body) if _same_list(y, d, a)), None)
            if i is not None:
                body[i] = _relist(body[i], d, a, self.empty)
            elif a is not None:
                extra.append(a)
        body += [s for s in extra if s not in body]
        # what the edit revealed (a list of items under words, "The basket is open and holds ...") as the
        # rollout's own world first showed it, where its log did
        # (not a list the action emptied of what it names: "take the coin" leaves "The chest ... is empty.")
        emptied = {_lead(d) for d in dropped if set(_names_listed(d)) & set(args)}
        revealed = [
            s
            for s in added
            if s not in x
            and kind(s) not in self.scene_kinds
            and not set(_names_listed(s)) & set(args)
            and _lead(s) not in emptied
        ]  # a list of items the action did not name: what it revealed (an opened container's contents)
        shown = {s: self._own_list(state, s, args) for s in revealed}
        body = [shown.get(s, s) for s in body]
        # an item the edit's world revealed stands for each item this world shows there instead
        swap = {}
        for source, own in shown.items():
            theirs, ours = _names_listed(source), _names_listed(own)
            for n in theirs:
                swap[n] = ours
        return body, swap

    @staticmethod
    def _edited_list(admissible, edit: _Edit, args, body: list[str], swap: dict) -> list[str] | None:
        """The admissible list with the edit's dropped actions gone and its added ones in (on this world's
        items, and only those on what the new state shows)."""
        if admissible is None:
            return None
        gone = {_fill(t, args) for t in edit.adm_dropped}
        admissible = [a for a in admissible if a not in gone]
        text = " ".join(body)
        for a in (_fill(t, args) for t in edit.adm_added):
            for n in arguments(a):  # the edit's world's item: the same action on each of ours
                if n in swap:
                    options = [re.sub(r"\b" + re.escape(n) + r"\b", m, a) for m in swap[n]]
                    break
            else:
                options = [a]
            # not an action on what this state does not show (the edit's world's containers)
            admissible += [
                o for o in options if o not in admissible and all(n in text or n in args for n in arguments(o))
            ]
        return admissible

    def _own_list(self, state: TextState, sentence: str, args: Sequence[str]) -> str:
        """What `sentence` (a list of items an action revealed, in the edit's world) is in the rollout's world:
        the first sentence of its own logged world that lists items under the same words, or says the same
        with no items (the words but their last: "The chest is open and" is empty); else, where the task
        places items in what the action names ("the coin is in the chest"), those items; else `sentence`."""
        words, items = _list(sentence)
        lead = _lead(sentence) + " "
        if not items:  # an empty form ("The chest is open and is empty."): where the log lists items after its lead
            words = self.list_words.get(lead)
            if words is None:
                return sentence
        for observation, _ in self.own.get(state.handle.seed, []):
            for y in sentences(observation):
                w, its = _list(y)
                if (its and w == words) or (not its and y.startswith(lead)):
                    return y
        placed = [
            m
            for arg in args
            for m in re.findall(r"\bthe ([a-z0-9][a-z0-9 '-]*?) is in the " + re.escape(arg) + r"\b", state.task)
        ]
        if placed:
            return f"{words} {_joined([f'{_article(n)} {n}' for n in placed])}."
        return sentence

    def _known_scene(self, rollout: _Rollout, scene: str) -> tuple[list[str], list[str] | None] | None:
        """The scene `scene` names as the rollout left it, or else as its own world's logged episode (by
        seed) first showed it (without the feedback), with its admissible list; None where neither has it."""
        if scene in rollout.scenes:
            body, admissible = rollout.scenes[scene]
            return list(body), None if admissible is None else list(admissible)
        for observation, admissible in self.own.get(rollout.seed, []):
            x = sentences(observation)
            if scene in x:
                return x[x.index(scene) :], admissible
        return None

    def close(self) -> None:
        return None
