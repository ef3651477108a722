"""The `shop` world: determinism, BM25 search against a hand-written BM25, WebShop's reward, the gold solver,
in-world refusals and bad config."""

from __future__ import annotations

import math
import random
import re
from collections import Counter

import pytest

from adwm.config import ConfigError, load_config
from adwm.envs import EnvConfig, TextEnv, make_env
from adwm.envs.shop import SearchEngine, ShopEnv, ShopEnvConfig
from adwm.envs.shop_catalogue import Goal, Product, make_catalogue, purchase_reward
from helpers import play_randomly


@pytest.fixture(scope="module")
def env() -> ShopEnv:
    return ShopEnv(ShopEnvConfig(products=300))


def play(env: ShopEnv, seed: int, rng: random.Random) -> list:
    return play_randomly(env, seed, rng, env.max_steps)


def test_registered_and_implements_text_env():
    assert isinstance(make_env(EnvConfig(name="shop")), TextEnv)


def test_same_seed_same_instruction_and_pages(env):
    a, b = play(env, 11, random.Random(1)), play(ShopEnv(ShopEnvConfig(products=300)), 11, random.Random(1))
    assert a == b
    assert play(env, 12, random.Random(1))[0] != a[0]


def test_catalogue_titles_unique_and_deterministic():
    cat = make_catalogue(3, 400)
    assert len({p.title for p in cat}) == 400
    assert make_catalogue.__wrapped__(3, 400) == cat
    assert make_catalogue.__wrapped__(4, 400) != cat


def test_reward_is_webshops_formula_by_hand():
    goal = Goal(0, "clothing", "t-shirt", ("cotton", "slim fit"), (("colour", "red"), ("size", "large")), 30.0)

    def product(kind, category, attributes, price):
        return Product("x", category, kind, attributes, (("colour", ("red", "blue")), ("size", ("large",))), price)

    exact = product("t-shirt", "clothing", ("cotton", "slim fit", "linen"), 29.99)
    assert purchase_reward(goal, exact, {"colour": "red", "size": "large"}) == 1.0
    # 1 attribute + 1 option + price out of 2 + 2 + 1, another type of the category: 0.5 * 3/5
    other_type = product("hoodie", "clothing", ("cotton", "wool", "linen"), 10.0)
    assert purchase_reward(goal, other_type, {"colour": "red"}) == pytest.approx(0.3)
    # over the ceiling, nothing selected, other category: 0.1 * 2/5
    other_cat = product("mug", "kitchen", ("cotton", "slim fit", "glass"), 31.0)
    assert purchase_reward(goal, other_cat, {}) == pytest.approx(0.04)


def _reference_bm25(docs: list[str], query: str, k1: float = 1.5, b: float = 0.75) -> list[float]:
    """Lucene's BM25 (bm25s's default), written out: idf = ln(1 + (N - df + 0.5) / (df + 0.5))."""
    toks = [re.findall(r"\w\w+", d.lower()) for d in docs]
    avg = sum(map(len, toks)) / len(toks)
    df = Counter(w for t in toks for w in set(t))
    scores = []
    for t in toks:
        tf, s = Counter(t), 0.0
        for w in set(re.findall(r"\w\w+", query.lower())):
            if tf[w]:
                idf = math.log(1 + (len(toks) - df[w] + 0.5) / (df[w] + 0.5))
                s += idf * tf[w] * (k1 + 1) / (tf[w] + k1 * (1 - b + b * len(t) / avg))
        scores.append(s)
    return scores


def test_search_ranks_by_bm25():
    words = ["amber", "basalt", "cedar", "dune", "ember", "fjord", "grove", "heath"]
    rng = random.Random(0)
    cat = tuple(Product(" ".join(rng.choices(words, k=rng.randint(2, 6))), "c", "t", (), (), 1.0) for _ in range(40))
    engine = SearchEngine(cat, max_results=40)
    docs = [p.document for p in cat]
    for query in ("amber cedar", "fjord", "heath grove ember"):
        ref = _reference_bm25(docs, query)
        expected = sorted((i for i in range(len(cat)) if ref[i] > 0), key=lambda i: (-round(ref[i], 5), i))
        got = engine.search(query)
        assert [round(ref[i], 4) for i in got] == [round(ref[i], 4) for i in expected]
    assert engine.search("zzz qqq") == ()


def test_gold_solver_earns_full_reward(env):
    lengths = []
    for seed in range(60):
        env.reset(seed)
        gold = env.gold_actions()
        lengths.append(len(gold))
        total = 0.0
        for i, action in enumerate(gold):
            step = env.step(action)
            total += step.reward
            assert step.done == (i == len(gold) - 1)
        assert total == 1.0 and step.info["won"]
    assert 4 <= min(lengths) and max(lengths) <= env.max_steps // 2


def test_gold_recovers_from_a_detour(env):
    reset = env.reset(7)
    wrong = next(a for a in reset.admissible if a != f"search[{env.goal.query}]")
    step = env.step(wrong)
    step = env.step(step.admissible[0])  # a product of the wrong query, or back to search
    gold = env.gold_actions()
    assert gold and len(gold) <= env.max_steps - 2
    total = sum(env.step(a).reward for a in gold)
    assert total == 1.0


def test_every_admissible_action_is_understood(env):
    rng = random.Random(5)
    for seed in range(20):
        adm = env.reset(seed).admissible
        while True:
            for a in adm:  # each one, from this state, is understood
                assert env.transition(env.state, a)[1] is None, a
            step = env.step(rng.choice(adm))
            if step.done:
                break
            adm = step.admissible


def test_free_query_and_refusals_answer_in_world(env):
    env.reset(3)
    step = env.step("search[cotton socks]")
    assert step.observation.startswith("[results for 'cotton socks']") and step.info["valid"]
    before = env.state
    for bad in ("search[again]", "click[buy now]", "jump", "click[no such product]"):
        step = env.step(bad)
        assert step.observation.startswith("Nothing happens") and step.reward == 0.0 and env.state == before


def test_no_purchase_earns_nothing(env):
    env.reset(2)
    rewards = [env.step("click[nothing]") for _ in range(env.max_steps)]
    assert rewards[-1].done and rewards[-1].info["truncated"]
    assert sum(s.reward for s in rewards) == 0.0


def test_bad_config_is_named():
    with pytest.raises(ConfigError, match=r"env\.shop\.products: expected >= 1, got 0"):
        load_config(["env=shop", "env.shop.products=0"], "quickstart")
