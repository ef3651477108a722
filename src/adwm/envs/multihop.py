"""`multihop`: a HotpotQA-like world: answer a two- or three-hop question by searching a knowledge base.

Pure Python, deterministic per seed: the knowledge base comes from `env.multihop.kb_seed`
(multihop_kb.py), the episode seed picks the question. Actions are ReAct's (Yao et al. 2023) for HotpotQA:

- `search[entity]`: opens the entity's article and shows its first `shown_sentences` sentences; without an
  exact title, the most similar titles;
- `lookup[keyword]`: the next sentence of the open article that contains the keyword (cycling);
- `finish[answer]`: ends the episode.

Reward at `finish` is HotpotQA's answer F1 (token overlap after lower-casing and removing punctuation and
articles; yes/no answers score only when exact), so a partly right answer (a person of the same surname)
earns partial credit; an episode that ends without `finish` earns 0.

An observation is the last action's result followed by `notes`: the sentences found earlier in the episode
(the last `notes` of them), like the trajectory a ReAct prompt carries, so an agent that reads only the
current observation still holds what it needs to answer.

The action space is open (an agent in generate mode writes any entity or answer). The admissible list is a
finite part of it: `search[x]` for every entity the question or a sentence seen so far names, `lookup[k]`
for the knowledge base's relation keywords while an article is open, and `finish[x]` for every entity and
year seen so far plus yes and no.

The gold solver fetches the question's facts in hop order (search the article, look up the fact's keyword
until it appears) and finishes with the answer.
"""

from __future__ import annotations

import difflib
import random
import re
import string
from collections import Counter
from dataclasses import dataclass, replace

from adwm.envs.base import Reset, Step, plan_by_rule
from adwm.envs.multihop_kb import KnowledgeBase, Question, Sentence, make_kb, make_question
from adwm.runtime.checks import at_least

LOOKUP_KEYWORDS = ("born", "studied", "founded", "known", "headquarters", "set in", "lies")
_ACTION = re.compile(r"^\s*(search|lookup|finish)\s*\[(.*)\]\s*$", re.IGNORECASE | re.DOTALL)
_YEAR = re.compile(r"\b(1[0-9]{3}|20[0-9]{2})\b")


@dataclass
class MultihopEnvConfig:
    kb_seed: int = 0  # the knowledge base is one world: episodes differ by their question
    people: int = 150
    works: int = 200
    organisations: int = 60
    cities: int = 30
    shown_sentences: int = 2  # sentences a search shows; later ones need lookup (HotpotQA shows the first 5)
    notes: int = 6  # earlier sentences kept in the observation

    def __post_init__(self) -> None:
        at_least(self, "env.multihop", 2, ("people", "works", "cities"))
        at_least(self, "env.multihop", 1, ("organisations", "shown_sentences"))
        at_least(self, "env.multihop", 0, ("notes",))


def normalize_answer(text: str) -> str:
    """HotpotQA's normalisation: lower case, no punctuation, no articles, single spaces."""
    text = "".join(ch for ch in text.lower() if ch not in set(string.punctuation))
    return " ".join(w for w in text.split() if w not in ("a", "an", "the"))


def answer_f1(prediction: str, gold: str) -> float:
    """HotpotQA's answer F1 of `prediction` against `gold`."""
    pred, ref = normalize_answer(prediction), normalize_answer(gold)
    if (pred in ("yes", "no") or ref in ("yes", "no")) and pred != ref:
        return 0.0
    common = Counter(pred.split()) & Counter(ref.split())
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred.split()), same / len(ref.split())
    return 2 * precision * recall / (precision + recall)


@dataclass(frozen=True)
class MultihopState:
    article: str | None = None  # the open article
    cursor: int = -1  # index of the sentence the last lookup returned
    seen: tuple[tuple[str, int], ...] = ()  # (article, sentence index) found so far, in order
    result: str = ""  # what the last action showed


class MultihopEnv:
    """The `multihop` world behind the `TextEnv` interface."""

    name = "multihop"

    def __init__(self, cfg: MultihopEnvConfig | None = None, max_steps: int = 12) -> None:
        self.cfg = cfg or MultihopEnvConfig()
        c = self.cfg
        self.kb: KnowledgeBase = make_kb(c.kb_seed, c.people, c.works, c.organisations, c.cities)
        self._titles = {t.lower(): t for t in self.kb.articles}
        self.max_steps = max_steps
        self.question: Question | None = None
        self.state = MultihopState()

    # -- TextEnv -------------------------------------------------------------
    def reset(self, seed: int) -> Reset:
        self.question = make_question(self.kb, random.Random(seed))
        self.state, self._t = MultihopState(result="Search the knowledge base to answer the question."), 0
        info = {"seed": seed, "kind": self.question.kind, "gold_steps": len(self.gold_actions())}
        return Reset(self.render(self.state), self.question.text, self.admissible(self.state), info)

    def step(self, action: str) -> Step:
        if self.question is None:
            raise RuntimeError("MultihopEnv.step called before reset")
        self._t += 1
        self.state, answer, valid = self.transition(self.state, action)
        reward = 0.0 if answer is None else answer_f1(answer, self.question.answer)
        truncated = answer is None and self._t >= self.max_steps
        done = answer is not None or truncated
        info = {"won": reward >= 1.0, "finished": answer is not None, "truncated": truncated, "valid": valid}
        return Step(self.render(self.state), reward, done, None if done else self.admissible(self.state), info)

    def gold_actions(self) -> list[str] | None:
        if self.question is None:
            raise RuntimeError("MultihopEnv.gold_actions called before reset")

        def step(state, action):
            nxt = self.transition(state, action)
            return nxt[0], nxt[1] is not None  # an answer given

        return plan_by_rule(self.state, self._gold_next, step, 4 * self.max_steps)

    def close(self) -> None:
        self.question = None

    # -- observation and actions ---------------------------------------------
    def sentence(self, fact: tuple[str, int]) -> Sentence:
        return self.kb.articles[fact[0]][fact[1]]

    def render(self, state: MultihopState) -> str:
        shown = self._last_shown(state)
        earlier = [self.sentence(f).text for f in state.seen if f not in shown]
        notes = earlier[-self.cfg.notes :] if self.cfg.notes else []
        return state.result + (f"\nnotes: {' | '.join(notes)}" if notes else "")

    def _last_shown(self, state: MultihopState) -> set[tuple[str, int]]:
        if state.article is None:
            return set()
        if state.cursor >= 0:
            return {(state.article, state.cursor)}
        return {(state.article, i) for i in range(min(self.cfg.shown_sentences, len(self.kb.articles[state.article])))}

    def admissible(self, state: MultihopState) -> list[str]:
        entities = list(self.question.entities)
        answers = set(self.question.entities) | {"yes", "no"}
        for fact in state.seen:
            s = self.sentence(fact)
            entities += s.links
            answers.update(s.links)
            answers.update(_YEAR.findall(s.text))
            answers.add(fact[0])
        searches = [f"search[{e}]" for e in sorted(set(entities))]
        lookups = [f"lookup[{k}]" for k in LOOKUP_KEYWORDS] if state.article else []
        return [*searches, *lookups, *(f"finish[{a}]" for a in sorted(answers))]

    # -- rules ---------------------------------------------------------------
    def transition(self, state: MultihopState, action: str) -> tuple[MultihopState, str | None, bool]:
        """(next state, the answer if the action finished, whether the action was understood)."""
        m = _ACTION.match(action)
        if m is None:
            return replace(state, result=f"Invalid action: '{action.strip()}'. Use search[...], lookup[...] or finish[...]."), None, False  # fmt: skip
        verb, arg = m[1].lower(), " ".join(m[2].split())
        if verb == "finish":
            return replace(state, result=f"Answered: {arg}"), arg, True
        if verb == "search":
            title = self._titles.get(arg.lower())
            if title is None:
                similar = difflib.get_close_matches(arg.lower(), list(self._titles), n=3, cutoff=0.5)
                names = ", ".join(self._titles[s] for s in similar) or "none"
                return replace(state, article=None, cursor=-1, result=f"Could not find {arg}. Similar: {names}."), None, True  # fmt: skip
            shown = [(title, i) for i in range(min(self.cfg.shown_sentences, len(self.kb.articles[title])))]
            text = " ".join(self.sentence(f).text for f in shown)
            seen = state.seen + tuple(f for f in shown if f not in state.seen)
            return MultihopState(title, -1, seen, f"[{title}] {text}"), None, True
        if state.article is None:
            return replace(state, result="No article is open: search first."), None, True
        sentences = self.kb.articles[state.article]
        order = [(state.cursor + k) % len(sentences) for k in range(1, len(sentences) + 1)]
        hits = [i for i in order if arg.lower() in sentences[i].text.lower()] if arg else []
        if not hits:
            return replace(state, result=f"[{state.article}] No sentence mentions '{arg}'."), None, True
        fact = (state.article, hits[0])
        seen = state.seen + ((fact,) if fact not in state.seen else ())
        return replace(state, cursor=hits[0], seen=seen, result=f"[{state.article}] {sentences[hits[0]].text}"), None, True  # fmt: skip

    def _gold_next(self, state: MultihopState) -> str:
        for title, index in self.question.facts:
            if (title, index) in state.seen:
                continue
            if state.article != title:
                return f"search[{title}]"
            keyword = next(k for k in LOOKUP_KEYWORDS if k in self.sentence((title, index)).text.lower())
            return f"lookup[{keyword}]"
        return f"finish[{self.question.answer}]"
