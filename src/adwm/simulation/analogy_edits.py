"""The analogy world's index of the log's edits (simulation/analogy.py's module docstring): each logged
transition kept as an edit with its arguments as slots, filed by action template, where the task names
each argument, whether the episode took the action before and where the task names the scene; and, per
logged world, its own states, moves, lists and payments.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from adwm.data.schema import Episode
from adwm.simulation.analogy_text import (
    abstract,
    action_template,
    arguments,
    clauses,
    feedback_of,
    fill,
    fits,
    kind,
    list_items,
    names_listed,
    openings,
    renaming,
    sentences,
    taken_before,
    where_named,
)
from adwm.simulation.lister import ActionLister
from adwm.simulation.worlds import LoggedWorld, TextState

LISTER_EXACT = 0.95  # the share of held-out logged lists the lister must rebuild for the world to use it
BEST_MEMO = 200_000  # (state, action) pairs whose best-fitting edits are kept: rollouts revisit them


@dataclass
class RolloutMemory:
    """What a rollout of the analogy world carries: its logged world's seed and the scenes it left."""

    seed: int
    scenes: dict[str, tuple[list[str], list[str] | None]] = field(default_factory=dict)


@dataclass(frozen=True)
class Edit:
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


def renamed_holders(edit: Edit, x: list[str], args: Sequence[str], empty: Mapping[str, str]) -> Edit:
    """`edit` with each holder whose list it dropped, where x has none of its own that the list fits, named as
    x's holder that `renaming` finds (in every sentence and action of the edit)."""
    names: dict[str, str] = {}
    for t in edit.dropped:
        d = fill(t, args)
        if "{" not in t or any(fits(y, d, args, empty) for y in x if kind(y) == kind(d)):
            continue
        found = next((r for r in (renaming(y, d, args, empty) for y in x) if r is not None), None)
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


def merged_proposals(outcomes: Sequence[tuple[TextState, float, bool]], weights: Sequence[float]) -> list[Proposal]:
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


class EditIndex:
    """The edits of `episodes` and their own worlds' states, moves, lists and payments, and which edits fit
    a state (`_matching`)."""

    def __init__(self, episodes: Sequence[Episode], nearest: LoggedWorld | None = None) -> None:
        """`nearest`: the `nearest` world of the same episodes, where the caller has built it already."""
        self.nearest = nearest if nearest is not None else LoggedWorld(episodes, moves=True)
        counts: dict[tuple, dict[Edit, int]] = defaultdict(lambda: defaultdict(int))
        self.own: dict[int, list[tuple[str, list[str] | None]]] = {}  # seed -> its logged (observation, list)
        # (seed, observation, action) -> the successors that world logged: (next state, reward, end)
        self.own_moves: dict[tuple[int, str, str], list[tuple[str, list[str] | None, float, bool]]] = defaultdict(list)
        self.own_lists: dict[tuple, list[str]] = {}  # (seed, sentences past the feedback) -> its logged list
        # (seed, scene sentence, action, again) -> what that world's steps of the action there paid and ended
        self.own_payments: dict[tuple, list[tuple[float, bool]]] = defaultdict(list)
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
                self.own_payments[(ep.seed, self._scene(obs[t]), step.action, again)].append((step.reward, ep.ended(t)))
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
                            list_seen[action_template(a)] += 1
                            list_kept[action_template(a)] += a in lists[t + 1]
        self.own_moves, self.own_payments = dict(self.own_moves), dict(self.own_payments)
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
                    words, items = list_items(y)
                    if items:
                        self.list_words.setdefault(words.rsplit(" ", 1)[0] + " ", words)
            for o, o_next in zip(obs, obs[1:]):  # a list the step dropped, an empty sentence it added
                before, after = self._body(sentences(o)), self._body(sentences(o_next))
                new = [z for z in after if z not in before and not list_items(z)[1]]
                for y in before:
                    words, items = list_items(y)
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
            k: [frozenset(n for t in e.dropped + e.added for n in names_listed(t) if "{" not in n) for e in edits]
            for k, edits in self.edits.items()
        }
        # the lists of made-up states read off their sentences, where the rules rebuild the log's own lists
        self.lister = ActionLister(episodes, self._body, arguments, action_template, sentences, list_items, clauses)
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
        return abstract(action, args), tuple(where_named(task, arg) for arg in args), again, role

    def _role(self, task: str, observation: str) -> int:
        """Where the task names the scene of `observation` (`where_named` of its scene sentence's noun phrases)."""
        scene = self._scene(observation)
        names = arguments(scene.rstrip(".!?")) if scene is not None else []
        return max((where_named(task, n) for n in names), key=lambda w: (w == 1, w == 2), default=0)

    def _edit(self, action, before, after, adm, next_adm, reward, done) -> Edit:
        """The logged step from sentences `before` to `after` by `action` as an edit, its arguments slots."""
        args = arguments(action)
        feedback = feedback_of(before, after, self.opening)
        body = after[len(feedback) :]
        before = self._body(before)  # without the previous action's feedback
        kept = set(before) & set(after)
        dropped = [s for s in before if s not in kept]
        added = [s for s in body if s not in kept]
        scene = bool(dropped) and all(s not in before for s in body[:1])  # the scene's first sentence is new
        # a list the log did not write (a free-form step, or the one after an episode's end): no list edit
        a = [] if adm is None or next_adm is None else adm
        n = [] if adm is None or next_adm is None else next_adm
        return Edit(
            tuple(abstract(s, args) for s in dropped),
            tuple(abstract(s, args) for s in added),
            tuple(abstract(s, args) for s in feedback),
            tuple(s in body for s in feedback),
            scene,
            tuple(abstract(s, args) for s in body),
            tuple(abstract(x, args) for x in a if x not in n),
            tuple(abstract(x, args) for x in n if x not in a),
            None if next_adm is None else tuple(abstract(x, args) for x in next_adm),
            float(reward),
            bool(done),
        )

    def _matching(self, state: TextState, action: str) -> tuple[list[Edit], np.ndarray] | None:
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
            lists = [y for y in x if list_items(y)[1]]
            misses = np.zeros(len(edits))
            for t, ids in self.dropping[key].items():  # each dropped sentence that x holds, or one it fits
                d = fill(t, args) if "{" in t or kind(t) in kinds else None
                if d is not None and any(fits(y, d, args, self.empty) for y in x if kind(y) == kind(d)):
                    scores[ids] += 1
                elif d is not None and "{" in t and any(renaming(y, d, args, self.empty) for y in lists):
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

    def _scene(self, observation: str) -> str | None:
        """The sentence that names an observation's scene: its first of an opening kind."""
        return next((s for s in sentences(observation) if kind(s) in self.opening), None)

    def _body(self, x: list[str]) -> list[str]:
        """x from its scene sentence on (without the feedback)."""
        i = next((k for k, s in enumerate(x) if kind(s) in self.opening), 0)
        return x[i:]
