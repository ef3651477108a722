"""The `multihop` world: determinism, HotpotQA's answer F1 by hand, questions that agree with the articles,
the gold solver on every question kind, search / lookup / finish and bad config."""

from __future__ import annotations

import random
import re

import pytest

from adwm.config import ConfigError, load_config
from adwm.envs import EnvConfig, TextEnv, make_env
from adwm.envs.multihop import MultihopEnv, answer_f1, normalize_answer
from adwm.envs.multihop_kb import QUESTION_KINDS
from helpers import play_randomly


@pytest.fixture(scope="module")
def env() -> MultihopEnv:
    return MultihopEnv()


def play(env: MultihopEnv, seed: int, rng: random.Random) -> list:
    return play_randomly(env, seed, rng, env.max_steps)


def test_registered_and_implements_text_env():
    assert isinstance(make_env(EnvConfig(name="multihop")), TextEnv)


def test_same_seed_same_question_and_results(env):
    assert play(env, 4, random.Random(2)) == play(MultihopEnv(), 4, random.Random(2))
    assert play(env, 5, random.Random(2))[0] != play(env, 4, random.Random(2))[0]


def test_answer_f1_by_hand():
    assert normalize_answer("The  Keller, Press!") == "keller press"
    assert answer_f1("anna keller", "jonas keller") == 0.5  # P = R = 1/2
    assert answer_f1("rosa brandt born", "rosa brandt") == pytest.approx(0.8)  # P = 2/3, R = 1
    assert answer_f1("The Keller", "keller") == 1.0
    assert answer_f1("1921", "1921") == 1.0 and answer_f1("1921", "1922") == 0.0
    assert answer_f1("yes", "no") == 0.0 and answer_f1("no", "no") == 1.0
    assert answer_f1("yes", "keller") == 0.0 and answer_f1("keller", "no") == 0.0  # yes/no only when exact
    assert answer_f1("yes keller", "keller") == pytest.approx(2 / 3)  # not a yes/no answer: P = 1/2, R = 1


def _fact(env: MultihopEnv, title: str, pattern: str) -> str:
    """The group of `pattern` in `title`'s article text: read from the text, not from the generator."""
    text = " ".join(s.text for s in env.kb.articles[title])
    m = re.search(pattern, text)
    assert m, (title, pattern)
    return m[1]


def test_answers_agree_with_the_articles(env):
    kinds = set()
    for seed in range(200):
        env.reset(seed)
        q = env.question
        kinds.add(q.kind)
        if q.kind in ("bridge_city", "bridge_country"):
            creator = _fact(env, q.entities[0], r" by ([a-z]+ [a-z]+)\.")
            city = _fact(env, creator, r"was born in ([a-z]+)\.")
            expected = city if q.kind == "bridge_city" else _fact(env, city, r"is a city in ([a-z]+)\.")
        elif q.kind == "bridge_year":
            founder = _fact(env, q.entities[0], r"was founded by ([a-z]+ [a-z]+)\.")
            expected = _fact(env, founder, r"\((\d{4})\)")
        elif q.kind == "compare_age":
            years = [int(_fact(env, p, r"\((\d{4})\)")) for p in q.entities]
            expected = q.entities[years.index(min(years))]
        else:
            creators = [_fact(env, w, r" by ([a-z]+ [a-z]+)\.") for w in q.entities]
            expected = "yes" if creators[0] == creators[1] else "no"
        assert q.answer == expected, q
    assert kinds == set(QUESTION_KINDS)


def test_gold_solver_answers_every_kind(env):
    lengths: dict[str, set[int]] = {}
    for seed in range(150):
        env.reset(seed)
        gold = env.gold_actions()
        lengths.setdefault(env.question.kind, set()).add(len(gold))
        for action in gold:
            step = env.step(action)
        assert step.done and step.reward == 1.0
    assert lengths == {"compare_age": {3}, "compare_creator": {3}, "bridge_city": {4}, "bridge_year": {4},
                       "bridge_country": {5}}  # fmt: skip


def test_gold_recovers_from_a_detour(env):
    env.reset(9)
    env.step("search[no such thing]")
    env.step("lookup[born]")
    gold = env.gold_actions()
    for action in gold:
        step = env.step(action)
    assert step.reward == 1.0


def test_search_lookup_and_notes(env):
    env.reset(0)
    step = env.step("lookup[born]")
    assert step.observation.startswith("No article is open") and not step.done
    step = env.step("search[Silent Garden]")  # no exact title
    assert step.observation.startswith("Could not find Silent Garden. Similar:")
    person = env.kb.people[0]["name"]
    step = env.step(f"search[{person.upper()}]")  # titles match case-insensitively
    assert step.observation.startswith(f"[{person}] {person} (")
    step = env.step("lookup[born]")
    assert step.observation.startswith(f"[{person}] {person} was born in ")
    assert "notes: " in step.observation and f"{person} (" in step.observation.split("notes: ")[1]
    again = env.step("lookup[born]")  # one sentence mentions it: the lookup cycles back to it
    assert again.observation.split("\n")[0] == step.observation.split("\n")[0]
    assert f"search[{env.kb.people[0]['born']}]" in step.admissible
    assert f"finish[{env.kb.people[0]['born']}]" in step.admissible


def test_partial_credit_for_a_namesake(env):
    for seed in range(400):
        env.reset(seed)
        a, b = env.question.entities
        if env.question.kind == "compare_age" and a.split()[1] == b.split()[1]:
            wrong = b if env.question.answer == a else a
            assert env.step(f"finish[{wrong}]").reward == 0.5
            return
    raise AssertionError("no compare_age question between namesakes in 400 seeds")


def test_no_finish_earns_nothing(env):
    env.reset(1)
    steps = [env.step("lookup[born]") for _ in range(env.max_steps)]
    assert steps[-1].done and steps[-1].info["truncated"] and sum(s.reward for s in steps) == 0.0


def test_invalid_action_answers_in_world(env):
    env.reset(1)
    step = env.step("jump around")
    assert step.observation.startswith("Invalid action") and not step.info["valid"] and step.reward == 0.0


def test_bad_config_is_named():
    with pytest.raises(ConfigError, match=r"env\.multihop\.people: expected >= 2, got 1"):
        load_config(["env=multihop", "env.multihop.people=1"], "quickstart")
