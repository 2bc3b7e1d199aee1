"""The task: customers asking about their orders in a small fictional shop.

:func:`lookup` is what the support agent's tool reads, :func:`questions` the tasks (12 to train
on, 4 to validate with), and :func:`reward` whether a typed reply states the order's fact.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["lookup", "questions", "reward"]

_ORDERS: dict[str, dict[str, Any]] = {
    "A1042": {"item": "walnut desk lamp", "status": "shipped", "eta_days": 2},
    "B2210": {"item": "linen duvet cover", "status": "packing", "eta_days": 5},
    "C3187": {"item": "cast-iron skillet", "status": "delayed", "eta_days": 9},
    "D4051": {"item": "wool throw", "status": "shipped", "eta_days": 1},
    "E5300": {"item": "oak bookshelf", "status": "backordered", "eta_days": 21},
    "F6128": {"item": "ceramic teapot", "status": "packing", "eta_days": 4},
    "G7733": {"item": "reading chair", "status": "delayed", "eta_days": 12},
    "H8019": {"item": "brass wall clock", "status": "shipped", "eta_days": 3},
}
_ASKED = {
    "status": "Hi! What is the status of my order {order}? It's the {item}.",
    "eta_days": "Hello, in how many days will order {order} ({item}) reach me?",
}


def lookup(order_id: str) -> dict[str, Any] | None:
    """The order with id ``order_id`` (any case, surrounding text allowed), or None."""
    found = re.search(r"[A-Za-z]\d{4}", order_id)
    facts = _ORDERS.get(found[0].upper()) if found else None
    return {"order_id": found[0].upper(), **facts} if found and facts else None


def questions(split: str = "all") -> list[dict[str, Any]]:
    """The questions, each with its order, field and answer; ``split``: train, val or all."""
    out = []
    for field in ("status", "eta_days"):
        for order, facts in _ORDERS.items():
            out.append(
                {
                    "id": f"o{len(out) + 1}",
                    "question": _ASKED[field].format(order=order, item=facts["item"]),
                    "order_id": order,
                    "field": field,
                    "answer": str(facts[field]),
                }
            )
    if split == "train":
        return out[:12]
    if split == "val":
        return out[12:]
    return out


def reward(reply: Any, field: str, gold: str) -> float:
    """1.0 if the typed ``reply`` (None when the agent gave none) states ``gold`` for ``field``."""
    if reply is None:
        return 0.0
    return 1.0 if str(getattr(reply, field, "")).strip().lower() == gold.lower() else 0.0
