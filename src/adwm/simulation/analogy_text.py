"""The text grammar the analogy world reads a state's sentences with (simulation/analogy.py).

Sentences end at `.`, `!` or `?`; a sentence's kind is its first two words; an action's arguments are the
noun phrases after "the" (`ARGUMENT`, the article-marked English of the built-in world and TextWorld's
commands); a list is the words before its first "a"/"an" item and its items. A template has slots `{k}`
(and `{k:a}` for an argument's article) where a text named the action's arguments. Each reader is memoised:
a rollout reads the same texts many times.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from functools import lru_cache

from adwm.data.schema import Episode
from adwm.simulation.worlds import TextState

TEXT_MEMO = 1 << 18  # texts whose readings (sentences, lists, templates) are kept
SENTENCE = re.compile(r"(?<=[.!?])\s+")
ARGUMENT = re.compile(r"\bthe ([a-z0-9][a-z0-9 '-]*?)(?= in | on | to | into | from | with |$)")


def sentences(text: str) -> list[str]:
    return list(_sentence_tuple(text))


@lru_cache(maxsize=TEXT_MEMO)
def _sentence_tuple(text: str) -> tuple[str, ...]:
    return tuple(s for s in SENTENCE.split(text.strip()) if s)


@lru_cache(maxsize=TEXT_MEMO)
def arguments(action: str) -> tuple[str, ...]:
    """The noun phrases an action names (`put the coin in the drawer` -> (coin, drawer))."""
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


def article_of(name: str) -> str:
    return "an" if name[:1] in "aeiou" else "a"


def joined(items: Sequence[str]) -> str:
    """Items as the worlds list them: "a coin", "a coin and an apple", "a coin, a pen and an apple"."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


@lru_cache(maxsize=TEXT_MEMO)
def abstract(text: str, args: tuple[str, ...]) -> str:
    """`text` with each argument a slot; "a"/"an" before an argument become the slot's article `{k:a}`."""
    for k, arg in sorted(enumerate(args), key=lambda ka: -len(ka[1])):
        text = re.sub(r"\b(?:a|an) " + re.escape(arg) + r"\b", f"{{{k}:a}}", text)
        text = re.sub(r"\b" + re.escape(arg) + r"\b", f"{{{k}}}", text)
    return text


@lru_cache(maxsize=TEXT_MEMO)
def action_template(action: str) -> str:
    """An action with its own arguments as slots (`drop the {0}`)."""
    return abstract(action, arguments(action))


def where_named(task: str, name: str) -> int:
    """Where `task` names `name`: 1 in its first sentence (the goal), 2 only later (its notes), 0 not at all."""
    goal = sentences(task)[0] if task.strip() else ""
    return 1 if name in goal else 2 if name in task else 0


@lru_cache(maxsize=TEXT_MEMO)
def fill(template: str, args: tuple[str, ...]) -> str:
    """`template` with its slots filled with `args` (an article slot takes the argument's article)."""
    for k, arg in enumerate(args):
        article = article_of(arg)
        template = template.replace(f"{{{k}:a}}", f"{article} {arg}").replace(f"{{{k}}}", arg)
    return template


def feedback_of(before: list[str], after: list[str], opening: set[str]) -> list[str]:
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


ITEM = re.compile(r"\b(?:a|an) ")


@lru_cache(maxsize=TEXT_MEMO)
def list_items(sentence: str) -> tuple[str, tuple[str, ...]]:
    """(the words before its first a/an item, the items): "You carry a coin and an apple." -> ("You carry",
    ("a coin", "an apple")); a sentence without such items is its own words and no items."""
    m = ITEM.search(sentence)
    if m is None:
        return sentence, ()
    rest = sentence[m.start() :].rstrip(".")
    return sentence[: m.start()].rstrip(), tuple(p for p in re.split(r", | and ", rest) if p)


def names_listed(sentence: str) -> list[str]:
    """The items a sentence lists, without their articles ("holds a coin and an apple" -> [coin, apple])."""
    return [re.sub(r"^(?:a|an) ", "", item) for item in list_items(sentence)[1]]


def lead_of(sentence: str) -> str:
    """The words of a list before its verb, which its empty form shares: "The chest is open and holds a coin."
    and "The chest is open and is empty." -> "The chest is open and"."""
    words, items = list_items(sentence)
    return words.rsplit(" ", 1)[0] if items else " ".join(sentence.split()[:-2])


def same_list(sentence: str, dropped: str, added: str | None) -> bool:
    """Whether `sentence` is the list `dropped` was, with other items: the same words before the items, or
    an empty form (no items) of the same kind as either."""
    words, items = list_items(sentence)
    others = [list_items(t) for t in (dropped, added) if t is not None]
    if items:
        return any(words == w and its for w, its in others)
    return any(kind(sentence) == kind(t) for t in (dropped, added) if t is not None) and sentence not in (
        dropped,
        added,
    )


@lru_cache(maxsize=TEXT_MEMO)
def clauses(sentence: str) -> tuple[str, str]:
    """(its main clause, the rest from its first comma): "The door to the hall is closed, leading on to the
    attic." -> ("The door to the hall is closed", ", leading on to the attic.")."""
    body = sentence.rstrip(".")
    i = body.find(", ")
    return (body, ".") if i < 0 else (body[:i], body[i:] + ".")


def same_clause(sentence: str, dropped: str) -> bool:
    """Whether `sentence` is `dropped` with another clause after its main one (neither lists items): the
    change of its main clause carries over, whatever follows."""
    if list_items(sentence)[1] or list_items(dropped)[1]:
        return False
    return clauses(sentence)[0] == clauses(dropped)[0]


def reclause(sentence: str, added: str) -> str:
    """`sentence` with its main clause that of `added`, the rest kept."""
    return clauses(added)[0] + clauses(sentence)[1]


def named_items(items: Sequence[str], args: Sequence[str]) -> list[str]:
    """The items of a list ("a coin") that the action names (`args`: "coin")."""
    return [i for i in items if re.sub(r"^(?:a|an) ", "", i) in args]


def empty_form(words: str, empty: Mapping[str, str] | None) -> str | None:
    """The empty form of a list under `words`, where `empty` (a list's last lead word -> what its empty form
    says after the rest of the lead, learnt from the log) knows it: "The box is open and holds" -> "The box is
    open and is empty."; None where it does not."""
    lead, _, last = words.rpartition(" ")
    tail = None if empty is None else empty.get(last)
    return None if tail is None or not lead else f"{lead} {tail}"


def can_leave(items, named, d_items, words: str, empty: Mapping[str, str] | None) -> bool:
    """Whether an edit can write what a list of `items` under `words` keeps when the `named` items go: other
    items, or none where the edit's own list emptied (all its `d_items` named) or the empty form is known."""
    return any(i not in named for i in items) or all(i in named for i in d_items) or bool(empty_form(words, empty))


def fits(sentence: str, dropped: str, args: Sequence[str], empty: Mapping[str, str] | None = None) -> bool:
    """Whether an edit that dropped `dropped` (its slots filled) applies to `sentence`: the same sentence, the
    same main clause, or the same list holding every item the action names that `dropped` held, where the
    edit can write what is left (`can_leave`)."""
    if sentence == dropped or same_clause(sentence, dropped):
        return True
    words, items = list_items(sentence)
    d_words, d_items = list_items(dropped)
    named = named_items(d_items, args)
    if not (items and words == d_words and named and all(i in items for i in named)):
        return False
    return can_leave(items, named, d_items, words, empty)


def renaming(
    sentence: str, dropped: str, args: Sequence[str], empty: Mapping[str, str] | None = None
) -> tuple[str, str] | None:
    """Where `dropped` (slots filled) lists an item the action names that `sentence` lists too, under words
    that differ from its own by one name only, the two names (theirs, ours): "The wicker basket is open and
    holds an apple." in `sentence` "The tool box is open and holds an apple and a pen." -> ("wicker basket",
    "tool box"), a list in another holder of the same kind, which the edit applies to as to its own. None
    where the words are the same or differ otherwise, or the edit cannot write what is left (as `fits`)."""
    words, items = list_items(sentence)
    d_words, d_items = list_items(dropped)
    named = named_items(d_items, args)
    if not (items and named and all(i in items for i in named)) or words == d_words:
        return None
    if not can_leave(items, named, d_items, words, empty):
        return None
    a, b = d_words.split(), words.split()
    pre = next((k for k, (u, v) in enumerate(zip(a, b)) if u != v), min(len(a), len(b)))
    suf = next((k for k, (u, v) in enumerate(zip(reversed(a), reversed(b))) if u != v), min(len(a), len(b)))
    theirs, ours = a[pre : len(a) - suf], b[pre : len(b) - suf]
    if suf < 2 or not theirs or not ours or len(theirs) > 3 or len(ours) > 3:
        return None
    return " ".join(theirs), " ".join(ours)


def relist(sentence: str, dropped: str, added: str | None, empty: Mapping[str, str] | None = None) -> str:
    """`sentence` with the items the edit took away (in `dropped`, not in `added`) removed and those it
    brought added; an empty list becomes the edit's empty form, else the log's (`empty_form`)."""
    words, items = list_items(sentence)
    d_words, d_items = list_items(dropped)
    a_words, a_items = list_items(added) if added is not None else (d_words, [])
    gone, new = set(d_items) - set(a_items), [i for i in a_items if i not in d_items]
    items = [i for i in items if i not in gone] + [i for i in new if i not in items]
    if not items:
        if added is not None and not a_items:
            return added
        return dropped if not d_items else empty_form(words, empty) or sentence
    lead = a_words if a_items else d_words if d_items else words
    return f"{lead} {joined(items)}."
