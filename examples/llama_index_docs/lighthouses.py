"""The task: questions about a small fictional set of lighthouses, answered from their documents.

:func:`documents` are what the researcher's index holds, one short page per lighthouse;
:func:`questions` the tasks (12 to train on, 4 to validate with), each answered by one number on
its lighthouse's page; :func:`reward` whether an answer states that number.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["FACTS", "LIGHTHOUSES", "documents", "questions", "reward"]

LIGHTHOUSES: dict[str, dict[str, Any]] = {
    "Amberley Point": {"lit": 1852, "range_nm": 18, "keeper": "Maud Fennimore", "tower": "white"},
    "Brackenford Rock": {"lit": 1867, "range_nm": 24, "keeper": "Tobias Quill", "tower": "red"},
    "Corriemoor Head": {"lit": 1871, "range_nm": 23, "keeper": "Isla Marrow", "tower": "black"},
    "Dunhollow Skerry": {"lit": 1889, "range_nm": 15, "keeper": "Ewan Pike", "tower": "striped"},
    "Eastwick Ness": {"lit": 1903, "range_nm": 27, "keeper": "Petra Lusk", "tower": "white"},
    "Fernlea Sound": {"lit": 1911, "range_nm": 12, "keeper": "Callum Rye", "tower": "grey"},
    "Glenmarrow Reef": {"lit": 1924, "range_nm": 21, "keeper": "Nora Vale", "tower": "red"},
    "Harrowgate Spit": {"lit": 1936, "range_nm": 9, "keeper": "Jonas Brill", "tower": "yellow"},
}
FACTS = {"lit": "first lit in", "range_nm": "seen from"}
"""The two facts questions ask for, as each page words them."""
_PAGE = (
    "{name} lighthouse. The {tower} tower of {name} was first lit in {lit}. On a clear night "
    "its light can be seen from {range_nm} nautical miles out to sea. Its last keeper was "
    "{keeper}, who kept the log of {name} until the light was automated."
)
_ASKED = {
    "lit": "In what year was the {name} lighthouse first lit?",
    "range_nm": "From how many nautical miles out can the {name} light be seen?",
}


def documents() -> list[str]:
    """One page per lighthouse, each naming it twice and stating both facts."""
    return [_PAGE.format(name=name, **facts) for name, facts in LIGHTHOUSES.items()]


def questions(split: str = "all") -> list[dict[str, Any]]:
    """The questions, each with its lighthouse, fact and answer; ``split``: train, val or all."""
    out = []
    for i, (name, fact) in enumerate(
        (name, fact) for fact in ("lit", "range_nm") for name in LIGHTHOUSES
    ):
        out.append(
            {
                "id": f"l{i + 1}",
                "question": _ASKED[fact].format(name=name),
                "lighthouse": name,
                "fact": fact,
                "answer": str(LIGHTHOUSES[name][fact]),
            }
        )
    if split == "train":
        return out[:12]
    if split == "val":
        return out[12:]
    return out


def reward(answer: str, gold: str) -> float:
    """1.0 if ``answer`` states the number ``gold`` (as a whole number), else 0.0."""
    return 1.0 if gold in re.findall(r"\d+", answer) else 0.0
