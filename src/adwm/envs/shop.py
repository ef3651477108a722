"""`shop`: a WebShop-like world (Yao et al. 2022): find and buy the product an instruction describes.

Pure Python, deterministic per seed: the catalogue comes from `env.shop.catalogue_seed` (shop_catalogue.py),
the episode seed picks the instruction. Three kinds of page are the observations:

- the search page, where `search[query]` runs a query;
- a results page: the ranked products of the query, `page_size` a page, each with its price;
  `click[item <rank>]` opens one, `click[next >]` / `click[< prev]` turn the page, `click[back to search]` returns;
- an item page: title, price, features, the option groups with their values and what is selected;
  `click[<value>]` selects an option, `click[buy now]` buys and ends the episode, `click[< prev]` goes back
  to the results.

Search is BM25 over each product's title, type, category, attributes and option values, with `bm25s`: a
sparse-matrix BM25 that needs only numpy (WebShop's Pyserini index needs Java and Lucene), indexes a
catalogue of a few thousand products in milliseconds and answers a query in well under a millisecond.
A result is clicked by its rank, shown before its title (`click[item 3]`; WebShop's pages show ids):
a click is a few tokens whatever the title, and a score-mode agent, which sums an action's token
log-probabilities, compares results by what they are rather than by the length of their titles.

The action space is open: an agent in generate mode writes any query. The admissible list (what score mode
and the eps family choose from) is the page's clickables plus, on the search page, `candidate_queries`
queries: the instruction's key words and variants of them that miss a part or name another type.

Reward at `buy now` is WebShop's (shop_catalogue.purchase_reward), in [0, 1]; an episode that ends without
buying earns 0. The gold solver searches the instruction's key words, opens the first result that can earn
the most, selects the instructed options it offers and buys.
"""

from __future__ import annotations

import functools
import random
import re
from dataclasses import dataclass, replace

from adwm.envs.base import Reset, Step, plan_by_rule
from adwm.envs.shop_catalogue import CATEGORIES, Goal, Product, best_reward, make_catalogue, make_goal, purchase_reward
from adwm.runtime.checks import at_least

SEARCH, RESULTS, ITEM = "search", "results", "item"
NEXT, PREV, BACK, BUY = "next >", "< prev", "back to search", "buy now"
_ACTION = re.compile(r"^\s*(search|click)\s*\[(.*)\]\s*$", re.IGNORECASE | re.DOTALL)


@dataclass
class ShopEnvConfig:
    catalogue_seed: int = 0  # the catalogue is one world: episodes differ by their instruction
    products: int = 1000  # WebShop's catalogue is 1.18M products; a thousand keeps the search non-trivial
    page_size: int = 5  # results a page (WebShop shows 10): keeps a page within the encoder's budget
    max_results: int = 50  # a query returns at most this many products (scores > 0)
    candidate_queries: int = 5  # queries offered on the search page in score mode (the gold query among them)

    def __post_init__(self) -> None:
        at_least(self, "env.shop", 1, ("products", "page_size", "max_results", "candidate_queries"))


class SearchEngine:
    """BM25 (bm25s) over a catalogue's product documents."""

    def __init__(self, catalogue: tuple[Product, ...], max_results: int) -> None:
        import bm25s

        self.max_results = min(max_results, len(catalogue))
        self._tokenizer = bm25s.tokenization.Tokenizer(stopwords="en")
        self._bm25 = bm25s.BM25()
        corpus = self._tokenizer.tokenize([p.document for p in catalogue], show_progress=False)
        self._bm25.index(corpus, show_progress=False)

    @functools.lru_cache(maxsize=4096)  # noqa: B019 (one engine per catalogue, kept for the process)
    def search(self, query: str) -> tuple[int, ...]:
        """Indices of the products matching `query`, best first (ties: catalogue order)."""
        tokens = self._tokenizer.tokenize([query.lower()], update_vocab=False, show_progress=False)
        if not any(tokens[0]):  # no word of the query is in the catalogue's vocabulary
            return ()
        ids, scores = self._bm25.retrieve(tokens, k=self.max_results, show_progress=False, sorted=True)
        ranked = sorted(zip(ids[0].tolist(), scores[0].tolist(), strict=True), key=lambda x: (-x[1], x[0]))
        return tuple(i for i, s in ranked if s > 0)


@functools.lru_cache(maxsize=4)
def _world(seed: int, n_products: int, max_results: int) -> tuple[tuple[Product, ...], SearchEngine]:
    catalogue = make_catalogue(seed, n_products)
    return catalogue, SearchEngine(catalogue, max_results)


@dataclass(frozen=True)
class ShopState:
    page: str = SEARCH
    query: str = ""
    page_no: int = 0  # results page, from 0
    item: int | None = None  # catalogue index on an item page
    selected: tuple[tuple[str, str], ...] = ()  # (group, value) chosen on the item page


class ShopEnv:
    """The `shop` world behind the `TextEnv` interface."""

    name = "shop"

    def __init__(self, cfg: ShopEnvConfig | None = None, max_steps: int = 15) -> None:
        self.cfg = cfg or ShopEnvConfig()
        self.catalogue, self.engine = _world(self.cfg.catalogue_seed, self.cfg.products, self.cfg.max_results)
        self.max_steps = max_steps
        self.goal: Goal | None = None
        self.state = ShopState()

    # -- TextEnv -------------------------------------------------------------
    def reset(self, seed: int) -> Reset:
        rng = random.Random(seed)
        self.goal = make_goal(self.catalogue, rng)
        self.queries = candidate_queries(self.goal, self.catalogue, rng, self.cfg.candidate_queries)
        self.state, self._t = ShopState(), 0
        info = {"seed": seed, "gold_steps": len(self.gold_actions())}
        return Reset(self.render(self.state), self.goal.text, self.admissible(self.state), info)

    def step(self, action: str) -> Step:
        if self.goal is None:
            raise RuntimeError("ShopEnv.step called before reset")
        self._t += 1
        state, feedback, bought = self.transition(self.state, action)
        self.state = state
        reward = 0.0 if bought is None else purchase_reward(self.goal, self.catalogue[bought], dict(state.selected))
        truncated = bought is None and self._t >= self.max_steps
        done = bought is not None or truncated
        obs = self.render(state) if feedback is None else f"{feedback}\n{self.render(state)}"
        info = {"won": reward >= 1.0, "bought": bought is not None, "truncated": truncated, "valid": feedback is None}
        return Step(obs, reward, done, None if done else self.admissible(state), info)

    def gold_actions(self) -> list[str] | None:
        if self.goal is None:
            raise RuntimeError("ShopEnv.gold_actions called before reset")

        def step(state, action):
            nxt = self.transition(state, action)
            return nxt[0], nxt[2] is not None  # a product bought

        return plan_by_rule(self.state, self._gold_next, step, 4 * self.max_steps)  # a few pages at most

    def close(self) -> None:
        self.goal = None

    # -- pages ---------------------------------------------------------------
    def results(self, query: str) -> tuple[int, ...]:
        return self.engine.search(query)

    def _shown(self, state: ShopState) -> tuple[int, ...]:
        start = state.page_no * self.cfg.page_size
        return self.results(state.query)[start : start + self.cfg.page_size]

    def _pages(self, query: str) -> int:
        return max(1, -(-len(self.results(query)) // self.cfg.page_size))

    def render(self, state: ShopState) -> str:
        if state.page == SEARCH:
            return "[search page] Type a query to search the shop."
        if state.page == RESULTS:
            shown = self._shown(state)
            if not shown:
                return f"[results for '{state.query}'] No product matches the query."
            head = f"[results for '{state.query}'] page {state.page_no + 1} of {self._pages(state.query)}"
            start = state.page_no * self.cfg.page_size
            lines = [
                f"[{start + k + 1}] {self.catalogue[i].title} | ${self.catalogue[i].price:.2f}"
                for k, i in enumerate(shown)
            ]
            return "\n".join([head, *lines])
        p = self.catalogue[state.item]
        chosen = ", ".join(v for _, v in state.selected) or "none"
        lines = [f"[item] {p.title} | ${p.price:.2f}", f"features: {', '.join(p.attributes)}"]
        lines += [f"{g}: {' | '.join(vs)}" for g, vs in p.options]
        return "\n".join([*lines, f"selected: {chosen}"])

    def admissible(self, state: ShopState) -> list[str]:
        if state.page == SEARCH:
            return [f"search[{q}]" for q in self.queries]
        if state.page == RESULTS:
            start = state.page_no * self.cfg.page_size
            acts = [f"click[item {start + k + 1}]" for k in range(len(self._shown(state)))]
            if state.page_no + 1 < self._pages(state.query):
                acts.append(f"click[{NEXT}]")
            if state.page_no > 0:
                acts.append(f"click[{PREV}]")
            return [*acts, f"click[{BACK}]"]
        values = [f"click[{v}]" for _, vs in self.catalogue[state.item].options for v in vs]
        return [*values, f"click[{BUY}]", f"click[{PREV}]", f"click[{BACK}]"]

    # -- rules ---------------------------------------------------------------
    def transition(self, state: ShopState, action: str) -> tuple[ShopState, str | None, int | None]:
        """(next state, feedback if the action did nothing, the product bought if any)."""
        m = _ACTION.match(action)
        refused = f"Nothing happens: '{action.strip()}' is not available on this page."
        if m is None:
            return state, refused, None
        verb, arg = m[1].lower(), " ".join(m[2].lower().split())
        if verb == "search":
            return (ShopState(RESULTS, arg), None, None) if state.page == SEARCH and arg else (state, refused, None)
        if arg == BACK and state.page != SEARCH:
            return ShopState(), None, None
        if state.page == RESULTS:
            if arg == NEXT and state.page_no + 1 < self._pages(state.query):
                return replace(state, page_no=state.page_no + 1), None, None
            if arg == PREV and state.page_no > 0:
                return replace(state, page_no=state.page_no - 1), None, None
            start = state.page_no * self.cfg.page_size
            for k, i in enumerate(self._shown(state)):
                if arg == f"item {start + k + 1}":
                    return replace(state, page=ITEM, item=i, selected=()), None, None
        elif state.page == ITEM:
            if arg == BUY:
                return state, None, state.item
            if arg == PREV:
                return replace(state, page=RESULTS, item=None, selected=()), None, None
            for group, values in self.catalogue[state.item].options:
                if arg in values:
                    chosen = dict(state.selected) | {group: arg}
                    order = [g for g, _ in self.catalogue[state.item].options]
                    return replace(state, selected=tuple((g, chosen[g]) for g in order if g in chosen)), None, None
        return state, refused, None

    def _gold_target(self) -> int:
        """The first result of the gold query that can earn the most (the goal's own product earns 1)."""
        ranked = self.results(self.goal.query)
        rank = max(range(len(ranked)), key=lambda r: (best_reward(self.goal, self.catalogue[ranked[r]]), -r))
        return ranked[rank]

    def _gold_next(self, state: ShopState) -> str:
        if state.page == SEARCH:
            return f"search[{self.goal.query}]"
        target = self._gold_target()
        if state.page == ITEM and state.item != target:
            return f"click[{PREV}]"
        if state.page == ITEM:
            selected = dict(state.selected)
            offered = dict(self.catalogue[target].options)
            for g, v in self.goal.options:
                if selected.get(g) != v and v in offered.get(g, ()):
                    return f"click[{v}]"
            return f"click[{BUY}]"
        ranked = self.results(state.query)
        if state.query != self.goal.query or target not in ranked:
            return f"click[{BACK}]"
        page = ranked.index(target) // self.cfg.page_size
        if page == state.page_no:
            return f"click[item {ranked.index(target) + 1}]"
        return f"click[{NEXT}]" if page > state.page_no else f"click[{PREV}]"


def candidate_queries(goal: Goal, catalogue: tuple[Product, ...], rng: random.Random, n: int) -> list[str]:
    """`n` queries for the search page in score mode: the instruction's key words first, then variants that
    miss its type or an attribute, name another type of its category, or describe another product."""
    spec = CATEGORIES[goal.category]
    other_type = rng.choice([t for t in spec.types if t != goal.type])
    other_attr = rng.choice([a for a in spec.attributes if a not in goal.attributes])
    stranger = catalogue[rng.randrange(len(catalogue))]
    pool = [
        goal.query,
        goal.type,
        " ".join(goal.attributes),
        f"{' '.join(goal.attributes)} {other_type}",
        f"{other_attr} {goal.type}",
        f"{goal.attributes[0]} {goal.type}",
        f"{stranger.attributes[0]} {stranger.type}",
    ]
    unique = list(dict.fromkeys(pool))
    keep = [unique[0], *rng.sample(unique[1:], min(n, len(unique)) - 1)]
    return sorted(keep)
