"""A scripted heuristic player (`kind: heuristic`): an agent of another family than the LLM agents, with no
model and no tokenizer, for behaviour logs whose choices the evaluated agents share little of.

Each admissible action is scored by rules a person would write for a text game: the words it shares
with the task (relevance), minus a penalty for an action already taken in the episode (novelty) and for
one that only looks (`look`, `inventory`, `examine`: information, no progress). The player samples from
softmax(score / temperature): the temperature is its noise (0: the best-scoring actions, ties uniform).
There is no uniform share, so a low temperature leaves actions the rules dislike nearly never logged.
Its probabilities are exact, so a log it writes carries behaviour log-probabilities; a log stripped of
them is the regime where only an estimated behaviour policy is available.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from adwm.policies.base import AgentState, Policy, require_admissible
from adwm.policies.sampling import log_probs_np

_WORD = re.compile(r"[a-z]+")
_STOP = frozenset(
    "a an the to of in on into onto with from for at by and or your you it its is are this that some "
    "there here what where who which".split()
)
_INFO = frozenset({"look", "inventory", "examine", "read", "check", "wait", "help"})


def content_words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOP}


class HeuristicPolicy(Policy):
    """Task relevance, novelty and a dislike of looking, sampled at a temperature."""

    def __init__(self, name: str, temperature: float, repeat_penalty: float = 1.0, info_penalty: float = 0.5) -> None:
        self.name, self.temperature = name, temperature
        self.repeat_penalty, self.info_penalty = repeat_penalty, info_penalty

    def scores(self, state: AgentState) -> np.ndarray:
        """The rule score of each admissible action of `state`."""
        task = content_words(state.task)
        taken = {action for _, action in state.history}
        out = []
        for action in state.admissible:
            verb = (action.split() or [""])[0].lower()
            score = (
                len(content_words(action) & task)
                - self.repeat_penalty * (action in taken)
                - self.info_penalty * (verb in _INFO)
            )
            out.append(score)
        return np.asarray(out, dtype=np.float64)

    def log_distributions(self, states: Sequence[AgentState]) -> list[np.ndarray]:
        require_admissible(states, f"heuristic policy '{self.name}'")
        return [log_probs_np(self.scores(s), self.temperature) for s in states]
