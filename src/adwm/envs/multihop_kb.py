"""The `multihop` world's knowledge base and questions (the env itself: `multihop.py`).

A knowledge base is generated from one seed: people (a name, an occupation, a birth year and city, a city
where they studied), their works (novels, films, albums, each with a year and a setting), organisations
(an industry, a year, a headquarters city, a founder), cities (each in a country) and countries. Every
entity has an article of short sentences; each sentence carries the entities it names (its links), so an
agent can follow them.

Questions need two or three hops, as HotpotQA's bridge and comparison questions do:

- `bridge_city`: "Where was the creator of <work> born?" (work -> creator -> birth city)
- `bridge_year`: "In which year was the founder of <organisation> born?" (organisation -> founder -> year)
- `bridge_country`: "In which country was the creator of <work> born?" (work -> creator -> city -> country)
- `compare_age`: "Who was born first, <person> or <person>?" (both people; half of the pairs share a surname)
- `compare_creator`: "Were <work> and <work> made by the same person?" (both works; yes or no)

Each question lists the facts it needs as (article, sentence index): the gold solver fetches them in order.
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass

FIRST_NAMES = (
    "anna", "bruno", "clara", "daniel", "elena", "felix", "greta", "hugo", "ines", "jonas", "karin", "lars",
    "maria", "nils", "olga", "pavel", "rosa", "stefan", "tilda", "umar", "vera", "walter", "yara", "zeno",
    "agnes", "boris", "celia", "dmitri", "edith", "frank", "hanna", "ivan", "julia", "kurt", "lena", "marek",
)  # fmt: skip
SURNAMES = (
    "keller", "moreau", "lindqvist", "novak", "ferreira", "okafor", "brandt", "castell", "dunmore", "eriksen",
    "fontaine", "galloway", "haldane", "ivanova", "jansen", "kowalski", "larsen", "marchetti", "nakamura",
    "oyelaran", "petrov", "quintero", "rasmussen", "sorensen", "tanaka", "ulrich", "vasquez", "weber",
)  # fmt: skip
OCCUPATIONS = {"novel": "novelist", "film": "director", "album": "musician"}
ADJECTIVES = (
    "silent", "broken", "golden", "hidden", "last", "northern", "pale", "quiet", "red", "secret", "shifting",
    "distant", "burning", "frozen", "hollow", "lonely", "narrow", "open", "wandering", "winter", "crooked",
)  # fmt: skip
NOUNS = (
    "river", "garden", "harbour", "mirror", "orchard", "lantern", "valley", "tower", "bridge", "island", "forest",
    "letter", "voyage", "season", "shore", "station", "meadow", "window", "crown", "road", "signal",
)  # fmt: skip
SYLLABLES = ("va", "ro", "kel", "mar", "ost", "lin", "dra", "pe", "sun", "tor", "bel", "nor", "ka", "ve", "ri")
COUNTRIES = ("arvenia", "belmark", "corvala", "dastria", "eskaland", "fenmoor", "galdonia", "hesperin")
INDUSTRIES = ("publishing", "film", "music", "shipping", "textile", "software")
ORG_SUFFIXES = ("press", "records", "studios", "works", "holdings", "labs")
RIVERS = ("amber", "grey", "swift", "long", "white", "stone")
KINDS = tuple(OCCUPATIONS)
QUESTION_KINDS = ("bridge_city", "bridge_year", "bridge_country", "compare_age", "compare_creator")


@dataclass(frozen=True)
class Sentence:
    text: str
    links: tuple[str, ...]  # the titles of the articles it names


@dataclass(frozen=True)
class Question:
    kind: str
    text: str
    answer: str
    entities: tuple[str, ...]  # the articles the question names
    facts: tuple[tuple[str, int], ...]  # (article title, sentence index) the answer needs, in hop order


@dataclass(frozen=True)
class KnowledgeBase:
    articles: dict[str, tuple[Sentence, ...]]  # title -> sentences
    people: tuple[dict, ...]
    works: tuple[dict, ...]
    organisations: tuple[dict, ...]


def _unique(rng: random.Random, make, n: int) -> list[str]:
    seen: dict[str, None] = {}
    while len(seen) < n:
        seen.setdefault(make(rng), None)
    return list(seen)


@functools.lru_cache(maxsize=4)
def make_kb(seed: int, n_people: int, n_works: int, n_organisations: int, n_cities: int) -> KnowledgeBase:
    """A knowledge base from `random.Random(seed)` (sizes as given; names unique across all articles)."""
    rng = random.Random(seed)
    cities = _unique(rng, lambda r: "".join(r.sample(SYLLABLES, r.randint(2, 3))), n_cities)
    city_country = {c: rng.choice(COUNTRIES) for c in cities}
    names = _unique(rng, lambda r: f"{r.choice(FIRST_NAMES)} {r.choice(SURNAMES)}", n_people)
    titles = _unique(rng, lambda r: f"the {r.choice(ADJECTIVES)} {r.choice(NOUNS)}", n_works)
    people = []
    for i, name in enumerate(names):
        kind = KINDS[i % len(KINDS)]
        born, studied = rng.sample(cities, 2)
        year = rng.randint(1850, 1990)
        people.append(dict(name=name, kind=kind, year=year, born=born, studied=studied, works=[], founded=[]))
    works = []
    for title in titles:
        creator = rng.choice(people)
        year, setting = creator["year"] + rng.randint(20, 60), rng.choice(cities)
        work = dict(title=title, kind=creator["kind"], creator=creator["name"], year=year, setting=setting)
        creator["works"].append(title)
        works.append(work)
    org_names = _unique(rng, lambda r: f"{r.choice(SURNAMES)} {r.choice(ORG_SUFFIXES)}", n_organisations)
    organisations = []
    for org in org_names:
        founder = rng.choice(people)
        industry, year, city = rng.choice(INDUSTRIES), founder["year"] + rng.randint(20, 50), rng.choice(cities)
        organisations.append(dict(name=org, industry=industry, year=year, city=city, founder=founder["name"]))
        founder["founded"].append(org)

    articles: dict[str, tuple[Sentence, ...]] = {}
    for p in people:
        name, occupation = p["name"], OCCUPATIONS[p["kind"]]
        known = " and ".join(p["works"][:2]) or "work that was never published"
        sentences = [
            Sentence(f"{name} ({p['year']}) is a {occupation}.", ()),
            Sentence(f"{name} is best known for {known}.", tuple(p["works"][:2])),
            Sentence(f"{name} studied in {p['studied']}.", (p["studied"],)),
            Sentence(f"{name} was born in {p['born']}.", (p["born"],)),
            *(Sentence(f"{name} founded {o}.", (o,)) for o in p["founded"]),
        ]
        articles[name] = tuple(sentences)
    for w in works:
        articles[w["title"]] = (
            Sentence(f"{w['title']} is a {w['year']} {w['kind']} by {w['creator']}.", (w["creator"],)),
            Sentence(f"{w['title']} is set in {w['setting']}.", (w["setting"],)),
        )
    for o in organisations:
        articles[o["name"]] = (
            Sentence(f"{o['name']} is a {o['industry']} company established in {o['year']}.", ()),
            Sentence(f"{o['name']} has its headquarters in {o['city']}.", (o["city"],)),
            Sentence(f"{o['name']} was founded by {o['founder']}.", (o["founder"],)),
        )
    for c in cities:
        river = RIVERS[sum(map(ord, c)) % len(RIVERS)]
        articles[c] = (
            Sentence(f"{c} is a city in {city_country[c]}.", (city_country[c],)),
            Sentence(f"{c} lies on the {river} river.", ()),
        )
    for country in sorted(set(city_country.values())):
        n = sum(v == country for v in city_country.values())
        articles[country] = (Sentence(f"{country} is a country with {n} cities in this atlas.", ()),)
    expected = n_people + n_works + n_organisations + n_cities + len(set(city_country.values()))
    if len(articles) != expected:  # two entities of different kinds drew the same name
        raise RuntimeError(f"env.multihop.kb_seed={seed}: two entities share a name; choose another kb_seed")
    return KnowledgeBase(articles, tuple(people), tuple(works), tuple(organisations))


def _born_fact(kb: KnowledgeBase, person: str) -> tuple[str, int]:
    return (person, next(i for i, s in enumerate(kb.articles[person]) if " was born in " in s.text))


def make_question(kb: KnowledgeBase, rng: random.Random) -> Question:
    """A question of a random kind (QUESTION_KINDS) about random entities of `kb`."""
    kind = rng.choice(QUESTION_KINDS)
    person = {p["name"]: p for p in kb.people}
    if kind in ("bridge_city", "bridge_country"):
        work = rng.choice(kb.works)
        creator = person[work["creator"]]
        if kind == "bridge_city":
            text = f"where was the creator of {work['title']} born?"
            return Question(kind, text, creator["born"], (work["title"],),
                            ((work["title"], 0), _born_fact(kb, creator["name"])))  # fmt: skip
        country = kb.articles[creator["born"]][0].links[0]
        text = f"in which country was the creator of {work['title']} born?"
        facts = ((work["title"], 0), _born_fact(kb, creator["name"]), (creator["born"], 0))
        return Question(kind, text, country, (work["title"],), facts)
    if kind == "bridge_year":
        org = rng.choice(kb.organisations)
        text = f"in which year was the founder of {org['name']} born?"
        return Question(kind, text, str(person[org["founder"]]["year"]), (org["name"],),
                        ((org["name"], 2), (org["founder"], 0)))  # fmt: skip
    if kind == "compare_age":
        a = rng.choice(kb.people)
        same = [p for p in kb.people if p is not a and p["name"].split()[1] == a["name"].split()[1]]
        pool = same if same and rng.random() < 0.5 else [p for p in kb.people if p is not a]
        b = rng.choice([p for p in pool if p["year"] != a["year"]] or pool)
        first = a if (a["year"], a["name"]) < (b["year"], b["name"]) else b
        text = f"who was born first, {a['name']} or {b['name']}?"
        return Question(kind, text, first["name"], (a["name"], b["name"]), ((a["name"], 0), (b["name"], 0)))
    w1 = rng.choice(kb.works)
    siblings = [w for w in person[w1["creator"]]["works"] if w != w1["title"]]
    if siblings and rng.random() < 0.5:
        w2 = rng.choice(siblings)
    else:
        w2 = rng.choice([w["title"] for w in kb.works if w["creator"] != w1["creator"]])
    same = person[w1["creator"]]["name"] == kb.articles[w2][0].links[0]
    text = f"were {w1['title']} and {w2} made by the same person?"
    return Question(kind, text, "yes" if same else "no", (w1["title"], w2), ((w1["title"], 0), (w2, 0)))
