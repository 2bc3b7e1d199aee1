"""The task: visitors' questions about a small set of fictional museums.

:func:`find` is what the coordinator's tool reads, :func:`questions` the tasks (12 to train on,
4 to validate with), and :func:`reward` whether an answer states the museum's number.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["FIELDS", "find", "questions", "reward"]

_MUSEUMS: dict[str, dict[str, int]] = {
    "Museum of Tides": {"opens": 9, "closes": 17, "ticket_eur": 12},
    "Lantern Gallery": {"opens": 10, "closes": 18, "ticket_eur": 8},
    "Clockmakers Hall": {"opens": 11, "closes": 16, "ticket_eur": 15},
    "Salt Road Museum": {"opens": 8, "closes": 14, "ticket_eur": 6},
    "Observatory House": {"opens": 13, "closes": 22, "ticket_eur": 19},
    "Paper Boat Museum": {"opens": 10, "closes": 17, "ticket_eur": 5},
    "Weavers Archive": {"opens": 9, "closes": 15, "ticket_eur": 9},
    "Glasshouse Collection": {"opens": 12, "closes": 20, "ticket_eur": 14},
}
FIELDS = {"closes": "closes at (hour)", "ticket_eur": "ticket in euros"}
_ASKED = {
    "closes": "At what hour does the {museum} close today?",
    "ticket_eur": "How many euros is a ticket to the {museum}?",
}


def find(name: str) -> dict[str, Any] | None:
    """The museum called ``name`` (any case, extra words allowed), or None."""
    words = set(re.findall(r"[a-z]+", name.lower()))
    for museum, facts in _MUSEUMS.items():
        if set(museum.lower().split()) <= words:
            return {"museum": museum, **{FIELDS[k]: facts[k] for k in FIELDS}}
    return None


def questions(split: str = "all") -> list[dict[str, Any]]:
    """The questions, each with its museum, field and answer; ``split``: train, val or all."""
    out = [
        {
            "id": f"m{len(_MUSEUMS) * i + j + 1}",
            "question": _ASKED[field].format(museum=museum),
            "museum": museum,
            "field": field,
            "answer": str(facts[field]),
        }
        for i, field in enumerate(FIELDS)
        for j, (museum, facts) in enumerate(_MUSEUMS.items())
    ]
    if split == "train":
        return out[:12]
    if split == "val":
        return out[12:]
    return out


def reward(answer: str, gold: str) -> float:
    """1.0 if ``answer`` states the number ``gold``, else 0.0."""
    return 1.0 if gold in re.findall(r"\d+", answer) else 0.0
