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

import numpy as np

from adwm.simulation.analogy_apply import EditApplier
from adwm.simulation.analogy_edits import Edit, Proposal, RolloutMemory, merged_proposals, renamed_holders
from adwm.simulation.analogy_text import (
    action_template,
    arguments,
    kind,
    sentences,
    taken_before,
)
from adwm.simulation.worlds import LoggedStart, TextState

__all__ = ["AnalogyWorld", "Proposal"]


class AnalogyWorld(EditApplier):
    """`evaluate.world=analogy` (module docstring): the logged successors where the log has them, edits
    by analogy elsewhere, `nearest` for actions of no logged template."""

    def start(self, start: LoggedStart) -> TextState:
        return TextState(start.task, start.observation, start.admissible, [], RolloutMemory(start.seed))

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
                outcomes = [(self._as_own(state, nxt), r, d) for nxt, r, d in self.nearest.outcomes(state, action)]
                own = self._own_payments(state, action)
            proposals = merged_proposals(outcomes, [1.0] * len(outcomes))
        else:
            edits, w = matching
            best = np.flatnonzero(w > 0)
            outcomes = [(self._applied(state, action, edits[i]), edits[i].reward, edits[i].done) for i in best]
            proposals = merged_proposals(outcomes, w[best].tolist())
            own = self._own_payments(state, action)
        for p in proposals:
            p.state = self._listed(p.state)
            if own:  # as `_payment`: the own world's payment, its mean and share of ends
                p.reward, p.done = float(np.mean([r for r, _ in own])), float(np.mean([d for _, d in own]))
        return proposals

    def _step(self, state: TextState, action: str, rng: np.random.Generator) -> tuple[TextState, float, bool]:
        matching = self._matching(state, action)
        if matching is None:  # the own world's logged successor, or no edit of this action's kind: `nearest`
            logged = self._logged(state, action)
            if logged:
                return logged[int(rng.integers(len(logged)))]
            nxt, reward, done = self.nearest.step(state, action, rng)
            return self._as_own(state, nxt), *self._payment(state, action, reward, done, rng)
        edits, w = matching
        edit = edits[int(rng.choice(len(edits), p=w / w.sum()))]
        return self._applied(state, action, edit), *self._payment(state, action, edit.reward, edit.done, rng)

    def _own_payments(self, state: TextState, action: str) -> list[tuple[float, bool]] | None:
        """What the rollout's own logged world paid and ended where it took `action` in the same scene, as the
        first time or again as the rollout does (None where it never did)."""
        again = taken_before(state, action)
        return self.own_payments.get((state.handle.seed, self._scene(state.observation), action, again))

    def _payment(self, state, action, reward, done, rng) -> tuple[float, bool]:
        """The step's reward and end: one of the own world's for the same action in the same scene (a
        world pays its own milestones: other worlds' edits pay what the action earned where the behaviour
        agents took it, mostly where it paid), else the edit's."""
        own = self._own_payments(state, action)
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
                    adm = [a for a in known[1] if action_template(a) not in self.carried] + [
                        a for a in adm if action_template(a) in self.carried
                    ]
            out.append((TextState(state.task, obs, adm, history, state.handle), r, d))
        return out

    @staticmethod
    def _as_own(state: TextState, nxt: TextState) -> TextState:
        """`nxt` (a state of `nearest`) as a state of this rollout."""
        return TextState(nxt.task, nxt.observation, nxt.admissible, nxt.history, state.handle)

    def _applied(self, state: TextState, action: str, edit: Edit) -> TextState:
        """The state after `edit`, its slots filled with `action`'s arguments, is applied to `state`."""
        args = arguments(action)
        x = sentences(state.observation)
        observation, admissible = self._apply(state, renamed_holders(edit, x, args, self.empty), args, x)
        history = [*state.history, (state.observation, action)]
        return TextState(state.task, observation, admissible, history, state.handle)

    def close(self) -> None:
        return None
