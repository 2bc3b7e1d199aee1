"""The shop's data: a small product catalog, customer questions about it, and the reward.

Everything is fictional (no model knows these products), so a right answer needs the catalog:
the crew's researcher looks the product up with :func:`lookup`, the writer answers from what
the researcher found.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any, Literal

__all__ = ["DATA", "FIELDS", "catalog", "lookup", "questions", "reward"]

DATA = Path(__file__).resolve().parent / "data"

FIELDS = {
    "price_eur": "price in euros",
    "warranty_years": "warranty in years",
    "weight_kg": "weight in kilograms",
    "colour": "colour",
    "made_in": "country of manufacture",
}
"""The facts a question may ask about, and how the catalog's lookup names them."""

_WORD = re.compile(r"[a-z0-9]+")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


@cache
def catalog() -> tuple[dict[str, Any], ...]:
    """Every product: ``name``, ``category`` and the :data:`FIELDS`."""
    with (DATA / "catalog.json").open(encoding="utf-8") as file:
        return tuple(json.load(file))


def questions(split: Literal["train", "val", "all"] = "all") -> list[dict[str, str]]:
    """The questions: ``id``, ``split``, ``question``, ``product``, ``field``, ``answer``."""
    with (DATA / "questions.jsonl").open(encoding="utf-8") as lines:
        rows = [json.loads(line) for line in lines if line.strip()]
    return rows if split == "all" else [row for row in rows if row["split"] == split]


def lookup(name: str) -> dict[str, Any] | None:
    """The product whose name shares the most words with ``name`` (None if none shares one).

    Case and punctuation do not matter: ``"larkspur KETTLE"`` and ``"the Larkspur"`` both find
    the Larkspur kettle. Ties go to the catalog's order.
    """
    wanted = set(_WORD.findall(name.lower()))
    best, score = None, 0
    for product in catalog():
        shared = len(wanted & set(_WORD.findall(product["name"].lower())))
        if shared > score:
            best, score = product, shared
    return best


def reward(answer: str, gold: str) -> float:
    """1.0 if ``answer`` states ``gold``, else 0.0.

    A numeric gold must appear among the answer's numbers (``6.8`` matches ``6.80 kg``, not
    ``16.8``); a word gold must appear in it as whole words, in any case.
    """
    try:
        value = float(gold)
    except ValueError:
        words = _WORD.findall(gold.lower())
        said = _WORD.findall(answer.lower())
        n = len(words)
        return 1.0 if any(said[i : i + n] == words for i in range(len(said) - n + 1)) else 0.0
    numbers = (float(n) for n in _NUMBER.findall(answer.replace(",", "")))
    return 1.0 if any(abs(n - value) < 1e-9 for n in numbers) else 0.0
