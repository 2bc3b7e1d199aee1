"""A generated world for ``--train``: hundreds of invented companies, founders and towns.

The 20 shipped questions are too few to learn from and to validate on, so :func:`world` makes
a larger knowledge base of the same kind, written from a seed: companies (what they make,
their founder, the town of their headquarters), their founders (the town each was born in)
and towns (their river and their mayor), each with one short document. :func:`questions`
asks two-hop questions about it from :data:`TEMPLATES` (the town where a company's founder was
born, the mayor of a founder's birthplace, the river through a company's town, ...), each with
the two searches that answer it, the entity between them (``bridge``) and the answer. A
quarter of each template's questions, drawn with a seed, are held out for validation
(:func:`split`): questions the model never saw, about entities whose documents it did.
:func:`parts` halves the rest: questions for the warm-up, and others for RL, which the warm
model has not seen either.

Every name is made of syllables no shipped document uses, so the world's documents and the
shipped ones never answer each other's searches; the two corpora are searched apart anyway
(a task names its corpus: ``{"corpus": "world"}``).
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable
from dataclasses import dataclass
from itertools import chain, zip_longest
from typing import NamedTuple

__all__ = [
    "TEMPLATES",
    "Company",
    "Parts",
    "Person",
    "Question",
    "Template",
    "Town",
    "World",
    "documents",
    "in_turns",
    "names",
    "parts",
    "questions",
    "split",
    "world",
]

_SYLLABLES = (
    "ka", "lo", "mi", "ren", "dar", "vel", "to", "sa", "quin", "bor", "fe", "lin", "mar", "zu",
    "ther", "ni", "gal", "po", "bri", "osk", "tal", "wen", "ru", "hal", "ves", "tor", "mel", "dun",
)  # fmt: skip
_GOODS = (
    "rope", "glass", "bicycles", "clocks", "lanterns", "pianos", "kites", "saddles", "barrels",
    "compasses", "telescopes", "umbrellas", "tiles", "candles", "sails", "boots",
)  # fmt: skip
_KINDS = ("Works", "Mills", "Company")


@dataclass(frozen=True)
class Town:
    """A town: its river and its mayor."""

    name: str
    river: str
    mayor: str


@dataclass(frozen=True)
class Person:
    """A company's founder: the town they were born in and the company they founded."""

    name: str
    born: str
    company: str


@dataclass(frozen=True)
class Company:
    """A company: what it makes, its founder, the town of its headquarters."""

    name: str
    makes: str
    founder: str
    town: str


@dataclass(frozen=True)
class World:
    """Everything :func:`world` made, by name."""

    towns: dict[str, Town]
    people: dict[str, Person]
    companies: dict[str, Company]


def _word(rng: random.Random) -> str:
    return "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 3))).capitalize()


@functools.cache
def world(companies: int = 320, towns: int = 80, seed: int = 0) -> World:
    """The world: ``companies`` companies (each with its own founder) and ``towns`` towns,
    every name unique, drawn from ``seed``."""
    rng = random.Random(seed)
    used: set[str] = set()

    def fresh(make: Callable[[], str]) -> str:
        # each word of a name is new (a company's kind aside): no two names share a term
        while True:
            name = make()
            words = set(name.split()) - set(_KINDS)
            if not words & used:
                used.update(words)
                return name

    def person() -> str:
        return fresh(lambda: f"{_word(rng)} {_word(rng)}")

    def place() -> str:
        return fresh(lambda: _word(rng))

    made_towns = [Town(place(), river=place(), mayor=person()) for _ in range(towns)]
    made_companies: list[Company] = []
    made_people: list[Person] = []
    for _ in range(companies):
        name = fresh(lambda: f"{_word(rng)} {rng.choice(_KINDS)}")
        founder = person()
        made_companies.append(
            Company(
                name,
                makes=rng.choice(_GOODS),
                founder=founder,
                town=rng.choice(made_towns).name,
            )
        )
        made_people.append(Person(founder, born=rng.choice(made_towns).name, company=name))
    return World(
        towns={t.name: t for t in made_towns},
        people={p.name: p for p in made_people},
        companies={c.name: c for c in made_companies},
    )


def documents(made: World | None = None) -> tuple[dict[str, str], ...]:
    """One document per company, founder and town (``id``, ``title``, ``text``), as the
    search tool reads the shipped corpus."""
    made = made or world()
    texts = [
        (
            c.name,
            f"{c.name} is a maker of {c.makes}. Its founder is {c.founder}. Its headquarters "
            f"are in {c.town}.",
        )
        for c in made.companies.values()
    ]
    texts += [
        (p.name, f"{p.name} was born in {p.born} and founded {p.company}.")
        for p in made.people.values()
    ]
    texts += [
        (
            t.name,
            f"{t.name} is a town on the river {t.river}. Its mayor is {t.mayor}.",
        )
        for t in made.towns.values()
    ]
    return tuple(
        {"id": f"w{i:03d}", "title": title, "text": text}
        for i, (title, text) in enumerate(texts, start=1)
    )


def names(made: World | None = None) -> list[str]:
    """Every name the world holds (companies, people, towns, rivers) and every good made."""
    made = made or world()
    found = [*made.companies, *made.people, *made.towns]
    found += [t.river for t in made.towns.values()] + [t.mayor for t in made.towns.values()]
    return sorted(set(found) | set(_GOODS))


Question = dict[str, str | list[str]]
"""A question of :func:`questions`: ``id``, ``template``, ``question``, ``answer``, ...."""


@dataclass(frozen=True)
class Template:
    """A two-hop question about one company or founder: ``ask`` names it, ``hops`` are the
    searches, ``bridge`` and ``answer`` read the world."""

    ask: str
    hops: tuple[str, str]
    about: str  # "company" or "person"
    bridge: Callable[[World, str], str]
    answer: Callable[[World, str], str]


TEMPLATES: tuple[Template, ...] = (
    Template(
        "In which town was the founder of {} born?", ("{} founder", "{} born"), "company",
        lambda w, c: w.companies[c].founder, lambda w, c: w.people[w.companies[c].founder].born,
    ),
    Template(
        "Who is the mayor of the town where {} was born?", ("{} born", "{} mayor"), "person",
        lambda w, p: w.people[p].born, lambda w, p: w.towns[w.people[p].born].mayor,
    ),
    Template(
        "Which river flows through the town where {} has its headquarters?",
        ("{} headquarters", "{} river"), "company",
        lambda w, c: w.companies[c].town, lambda w, c: w.towns[w.companies[c].town].river,
    ),
    Template(
        "What does the company founded by {} make?", ("{} founded", "{} maker"), "person",
        lambda w, p: w.people[p].company, lambda w, p: w.companies[w.people[p].company].makes,
    ),
    Template(
        "Who is the mayor of the town where {} has its headquarters?",
        ("{} headquarters", "{} mayor"), "company",
        lambda w, c: w.companies[c].town, lambda w, c: w.towns[w.companies[c].town].mayor,
    ),
)  # fmt: skip
"""The questions :func:`questions` asks, each of every company or every founder."""


def questions(made: World | None = None) -> list[Question]:
    """Every template's question about every company (or founder): dicts with ``id``,
    ``template`` (its index), ``question``, ``answer``, ``bridge``, ``hops`` and
    ``corpus`` (``"world"``), the fields of the shipped questions."""
    made = made or world()
    found: list[Question] = []
    for index, template in enumerate(TEMPLATES):
        subjects = made.companies if template.about == "company" else made.people
        for subject in subjects:
            bridge = template.bridge(made, subject)
            found.append(
                {
                    "id": f"w{index}-{len(found)}",
                    "template": str(index),
                    "question": template.ask.format(subject),
                    "answer": template.answer(made, subject),
                    "bridge": bridge,
                    "hops": [template.hops[0].format(subject), template.hops[1].format(bridge)],
                    "corpus": "world",
                }
            )
    return found


def split(*, val_share: float = 0.25, seed: int = 0) -> tuple[list[Question], list[Question]]:
    """The questions of :func:`questions` as (train, validation): ``val_share`` of each
    template's questions, drawn with ``seed``, are held out."""
    rng = random.Random(seed)
    train_part: list[Question] = []
    val_part: list[Question] = []
    everything = questions()
    for index in range(len(TEMPLATES)):
        mine = [q for q in everything if q["template"] == str(index)]
        rng.shuffle(mine)
        held = max(1, round(len(mine) * val_share))
        val_part += mine[:held]
        train_part += mine[held:]
    return train_part, val_part


class Parts(NamedTuple):
    """The questions of :func:`questions` in three parts; no question is in two."""

    warm_up: list[Question]
    """What the sloppy teacher answers for the warm-up."""
    rl: list[Question]
    """What RL asks: questions the warm model never saw."""
    val: list[Question]
    """:func:`split`'s held-out questions, the templates taking turns (so the first ``n``
    hold each template's share)."""


def parts(*, val_share: float = 0.25, seed: int = 0) -> Parts:
    """:func:`split`'s validation questions, and its training questions halved, each
    template's in equal shares: one half for the warm-up, the other for RL."""
    train_part, val_part = split(val_share=val_share, seed=seed)
    rng = random.Random(seed + 1)
    warm: list[Question] = []
    rl: list[Question] = []
    for index in range(len(TEMPLATES)):
        mine = [q for q in train_part if q["template"] == str(index)]
        rng.shuffle(mine)
        warm += mine[: len(mine) // 2]
        rl += mine[len(mine) // 2 :]
    return Parts(warm, rl, in_turns(val_part))


def in_turns(questions: list[Question], rng: random.Random | None = None) -> list[Question]:
    """``questions`` with the templates taking turns (each template's in its order, or
    shuffled by ``rng``), so that any run of them mixes the templates evenly."""
    by_template = [[q for q in questions if q["template"] == str(i)] for i in range(len(TEMPLATES))]
    if rng is not None:
        for mine in by_template:
            rng.shuffle(mine)
    return [q for q in chain.from_iterable(zip_longest(*by_template)) if q is not None]
