"""The `shop` world's catalogue, instructions and purchase reward (the env itself: `shop.py`).

A catalogue is generated from one seed: products of five categories, each with a type, a brand, three
attributes from its category's pool (its title names them), the category's option groups (colour, size, ...)
and a price. Every product is sold in every value of its option groups, so which product fits an
instruction shows on the results page (title and price); WebShop's products differ in their options too,
which only an item page shows, and a small agent cannot learn to guess them. An instruction is made from one product (as in WebShop, where each instruction describes a real
product): its type, two of its attributes, one value per option group, and a price ceiling above its price.

The reward at purchase is WebShop's (Yao et al. 2022, eq. 1):

    r = r_type * (|U_att & Y_att| + |U_opt & Y_opt| + 1[y_price <= u_price]) / (|U_att| + |U_opt| + 1)

U: the instruction's attributes, options and price ceiling; Y: the bought product's attributes, the options
selected before `buy now`, and its price. WebShop grades the type by text matching of the product's title
and category; here products have exact types, so r_type is 1 for the instructed type, 0.5 for another type
of the same category and 0.1 for another category.
"""

from __future__ import annotations

import functools
import math
import random
from dataclasses import dataclass


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split(", "))


@dataclass(frozen=True)
class Category:
    types: tuple[str, ...]
    attributes: tuple[str, ...]
    options: tuple[tuple[str, tuple[str, ...]], ...]  # (group, values)
    price: tuple[float, float]


COLOURS = ("black", "white", "navy", "grey", "red", "green", "beige", "pink")
CATEGORIES: dict[str, Category] = {
    "clothing": Category(
        ("t-shirt", "hoodie", "sweater", "jacket", "socks", "pajama set"),
        _words(
            "cotton, wool, fleece, polyester, linen, machine washable, slim fit, long sleeve, water resistant, quick dry"
        ),
        (("colour", COLOURS), ("size", ("small", "medium", "large", "x-large"))),
        (12.0, 90.0),
    ),
    "footwear": Category(
        ("running shoes", "hiking boots", "sandals", "slippers", "sneakers"),
        _words(
            "leather, mesh, suede, rubber sole, non slip, waterproof, lightweight, memory foam, arch support, wide fit"
        ),
        (("colour", COLOURS), ("size", ("size 7", "size 8", "size 9", "size 10", "size 11"))),
        (20.0, 150.0),
    ),
    "kitchen": Category(
        ("coffee mug", "water bottle", "frying pan", "cutting board", "teapot", "lunch box"),
        _words(
            "stainless steel, ceramic, bamboo, glass, cast iron, dishwasher safe, bpa free, insulated, non stick, leak proof"
        ),
        (("colour", COLOURS), ("capacity", ("12 oz", "16 oz", "24 oz", "32 oz"))),
        (8.0, 70.0),
    ),
    "electronics": Category(
        ("phone case", "usb cable", "wireless earbuds", "power bank", "laptop stand", "desk lamp"),
        _words(
            "silicone, aluminum, nylon braided, fast charging, shockproof, noise cancelling, usb c, foldable, rechargeable, led"
        ),
        (("colour", COLOURS), ("pack", ("1 pack", "2 pack", "3 pack"))),
        (9.0, 120.0),
    ),
    "beauty": Category(
        ("face cream", "shampoo", "lip balm", "sunscreen", "hair oil", "body lotion"),
        _words(
            "fragrance free, organic, vegan, paraben free, spf 30, travel size, sensitive skin, natural ingredients, long lasting, cruelty free"
        ),
        (
            ("scent", _words("lavender, unscented, citrus, vanilla, coconut")),
            ("size", _words("1 fl oz, 3.4 fl oz, 8 fl oz")),
        ),
        (5.0, 60.0),
    ),
}
BRANDS = (
    "acorn", "alder", "amberly", "basalt", "birchwood", "bluefin", "brightway", "cobalt", "copperline", "driftwood",
    "ember", "fernhill", "foxglove", "granite", "harbor", "hazel", "ironbark", "juniper", "kestrel", "lumen",
    "maple", "meridian", "northwind", "oakridge", "pebble", "quill", "redwood", "saltmarsh", "tidewater", "willow",
)  # fmt: skip


@dataclass(frozen=True)
class Product:
    title: str
    category: str
    type: str
    attributes: tuple[str, ...]
    options: tuple[tuple[str, tuple[str, ...]], ...]  # (group, values it is sold in)
    price: float

    @property
    def document(self) -> str:
        """What the search engine indexes: title, type, category, attributes and option values."""
        values = " ".join(v for _, vs in self.options for v in vs)
        return f"{self.title}. {self.type}. {self.category}. {' '.join(self.attributes)}. {values}"


@dataclass(frozen=True)
class Goal:
    """An instruction: what to buy."""

    product: int  # the catalogue index it was made from (one product that earns reward 1)
    category: str
    type: str
    attributes: tuple[str, ...]
    options: tuple[tuple[str, str], ...]  # (group, value)
    max_price: float

    @property
    def text(self) -> str:
        opts = ", and ".join(f"{g}: {v}" for g, v in self.options)
        return (
            f"i need a {self.type} that is {' and '.join(self.attributes)}, with {opts}, "
            f"and price lower than {self.max_price:.2f} dollars"
        )

    @property
    def query(self) -> str:
        """The instruction's key words: what the gold solver searches for."""
        return f"{' '.join(self.attributes)} {self.type}"


@functools.lru_cache(maxsize=4)
def make_catalogue(seed: int, n_products: int) -> tuple[Product, ...]:
    """`n_products` products with unique titles, from `random.Random(seed)`."""
    rng = random.Random(seed)
    names = sorted(CATEGORIES)
    products: list[Product] = []
    titles: set[str] = set()
    while len(products) < n_products:
        category = rng.choice(names)
        spec = CATEGORIES[category]
        kind = rng.choice(spec.types)
        attributes = tuple(rng.sample(spec.attributes, 3))
        title = f"{rng.choice(BRANDS)} {' '.join(attributes)} {kind}"
        if title in titles:
            continue
        low, high = spec.price
        titles.add(title)
        products.append(Product(title, category, kind, attributes, spec.options, round(rng.uniform(low, high), 2)))
    return tuple(products)


def make_goal(catalogue: tuple[Product, ...], rng: random.Random) -> Goal:
    """An instruction made from a random product of `catalogue`."""
    index = rng.randrange(len(catalogue))
    p = catalogue[index]
    attributes = tuple(sorted(rng.sample(p.attributes, 2)))
    options = tuple((g, rng.choice(vs)) for g, vs in p.options)
    max_price = math.ceil(p.price * rng.uniform(1.1, 1.5) / 10) * 10.0
    return Goal(index, p.category, p.type, attributes, options, max_price)


def type_reward(goal: Goal, product: Product) -> float:
    if product.type == goal.type:
        return 1.0
    return 0.5 if product.category == goal.category else 0.1


def purchase_reward(goal: Goal, product: Product, selected: dict[str, str]) -> float:
    """WebShop's reward for buying `product` with options `selected` (see the module docstring)."""
    attributes = len(set(goal.attributes) & set(product.attributes))
    options = sum(selected.get(g) == v for g, v in goal.options)
    price = float(product.price <= goal.max_price)
    return type_reward(goal, product) * (attributes + options + price) / (len(goal.attributes) + len(goal.options) + 1)


def best_reward(goal: Goal, product: Product) -> float:
    """The reward `product` earns with the best choice of its options."""
    offered = dict(product.options)
    selected = {g: v for g, v in goal.options if v in offered.get(g, ())}
    return purchase_reward(goal, product, selected)
