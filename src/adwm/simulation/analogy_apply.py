"""How the analogy world applies an edit to a state (simulation/analogy.py's module docstring, step 2): the
edit's sentences changed in place, a change of scene, what the edit revealed shown as the rollout's own
logged world showed it, and the admissible list edited the same way."""

from __future__ import annotations

import re
from collections.abc import Sequence

from adwm.simulation.analogy_edits import Edit, EditIndex, RolloutMemory
from adwm.simulation.analogy_text import (
    action_template,
    arguments,
    article_of,
    fill,
    joined,
    kind,
    lead_of,
    list_items,
    names_listed,
    reclause,
    relist,
    same_clause,
    same_list,
    sentences,
)
from adwm.simulation.worlds import TextState


class EditApplier(EditIndex):
    """The edits of `EditIndex` applied to a rollout's state."""

    def _apply(self, state: TextState, edit: Edit, args: list[str], x: list[str]) -> tuple[str, list[str] | None]:
        """The next observation and admissible list: `edit` (slots filled with `args`) applied to x."""
        feedback = [fill(t, args) for t in edit.feedback]
        if edit.scene:
            body, admissible = self._new_scene(state, edit, args, x)
            return " ".join(self._echoed(feedback, edit, body) + body), admissible
        body, swap = self._edited_scene(state, edit, args, x, feedback)
        feedback = self._echoed(feedback, edit, body)
        if self.listed:  # the lister lists every next state (`_listed`): the edited list would not be read
            return " ".join(feedback + body), state.admissible
        return " ".join(feedback + body), self._edited_list(state.admissible, edit, args, body, swap)

    @staticmethod
    def _echoed(feedback: list[str], edit: Edit, body: list[str]) -> list[str]:
        """The feedback with each sentence that repeated a sentence of the edit's s' ("You carry a coin.", the
        answer to `inventory`) repeating this state's sentence of its kind instead."""
        out = []
        for f, echo in zip(feedback, edit.echoes):
            same = [s for s in body if kind(s) == kind(f)] if echo else []
            out.append(same[0] if len(same) == 1 else f)
        return out

    def _new_scene(self, state, edit: Edit, args: list[str], x: list[str]) -> tuple[list[str], list[str] | None]:
        """A change of scene: the scene as the rollout left it or its world logged it, else the edit's own,
        with x's sentences of the kinds a scene change keeps and the actions on what the rollout carries."""
        body = [fill(t, args) for t in edit.scene_body]
        admissible = None if edit.next_admissible is None else [fill(t, args) for t in edit.next_admissible]
        known = self._known_scene(state.handle, body[0]) if body else None
        if known is not None:
            body, admissible = known[0], known[1] if known[1] is not None else admissible
        if admissible is None:  # a scene first shown at the end of an episode: the list it had before
            admissible = state.admissible
        if admissible is not None and state.admissible is not None:  # the scene's actions, and ours
            admissible = [a for a in admissible if action_template(a) not in self.carried] + [
                a for a in state.admissible if action_template(a) in self.carried
            ]
        keep = {kind(s): s for s in x if kind(s) in self.scene_kinds}
        body = [keep.get(kind(s), s) if kind(s) in self.scene_kinds else s for s in body]
        return body, admissible

    def _edited_scene(self, state, edit: Edit, args, x, feedback) -> tuple[list[str], dict[str, list[str]]]:
        """x's sentences past its feedback with the edit applied in place, and, for each item the edit's
        world revealed, the items this world shows there instead."""
        dropped = [fill(t, args) for t in edit.dropped]
        added = [fill(t, args) for t in edit.added]
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
            i = next((k for k, y in enumerate(body) if same_clause(y, d)), None)
            if i is not None:  # the same main clause with more after it: the change of the clause
                if a is None:
                    del body[i]
                else:
                    body[i] = reclause(body[i], a)
                continue
            i = next((k for k, y in enumerate(body) if same_list(y, d, a)), None)
            if i is not None:
                body[i] = relist(body[i], d, a, self.empty)
            elif a is not None:
                extra.append(a)
        body += [s for s in extra if s not in body]
        # what the edit revealed (a list of items under words, "The basket is open and holds ...") as the
        # rollout's own world first showed it, where its log did
        # (not a list the action emptied of what it names: "take the coin" leaves "The chest ... is empty.")
        emptied = {lead_of(d) for d in dropped if set(names_listed(d)) & set(args)}
        revealed = [
            s
            for s in added
            if s not in x
            and kind(s) not in self.scene_kinds
            and not set(names_listed(s)) & set(args)
            and lead_of(s) not in emptied
        ]  # a list of items the action did not name: what it revealed (an opened container's contents)
        shown = {s: self._own_list(state, s, args) for s in revealed}
        body = [shown.get(s, s) for s in body]
        # an item the edit's world revealed stands for each item this world shows there instead
        swap = {}
        for source, own in shown.items():
            theirs, ours = names_listed(source), names_listed(own)
            for n in theirs:
                swap[n] = ours
        return body, swap

    @staticmethod
    def _edited_list(admissible, edit: Edit, args, body: list[str], swap: dict) -> list[str] | None:
        """The admissible list with the edit's dropped actions gone and its added ones in (on this world's
        items, and only those on what the new state shows)."""
        if admissible is None:
            return None
        gone = {fill(t, args) for t in edit.adm_dropped}
        admissible = [a for a in admissible if a not in gone]
        text = " ".join(body)
        for a in (fill(t, args) for t in edit.adm_added):
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
        words, items = list_items(sentence)
        lead = lead_of(sentence) + " "
        if not items:  # an empty form ("The chest is open and is empty."): where the log lists items after its lead
            words = self.list_words.get(lead)
            if words is None:
                return sentence
        for observation, _ in self.own.get(state.handle.seed, []):
            for y in sentences(observation):
                w, its = list_items(y)
                if (its and w == words) or (not its and y.startswith(lead)):
                    return y
        placed = [
            m
            for arg in args
            for m in re.findall(r"\bthe ([a-z0-9][a-z0-9 '-]*?) is in the " + re.escape(arg) + r"\b", state.task)
        ]
        if placed:
            return f"{words} {joined([f'{article_of(n)} {n}' for n in placed])}."
        return sentence

    def _known_scene(self, rollout: RolloutMemory, scene: str) -> tuple[list[str], list[str] | None] | None:
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
