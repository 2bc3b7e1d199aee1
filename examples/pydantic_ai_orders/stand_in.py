"""A stand-in for a real model: a scripted OpenAI-compatible server that knows the orders.

It lets the example (and its test) run on any machine, with no model and no GPU: agl's
:class:`~agl.testing.openai_server.OpenAIServer` answers each chat request the way a plan says,
telling the two agents apart by their instructions. Each question takes three calls:

1. triage answers with the question's order id (``"right"``) or the next order's (``"wrong"``,
   whose facts differ);
2. support calls ``lookup_order`` with the id triage gave;
3. support, given the tool's result, answers with PydanticAI's output tool (``final_result``)
   and the facts it found, so a wrong id gives a wrong reply.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from orders import lookup

from agl.testing.openai_server import Reply, error_reply, tool_reply

__all__ = ["default_plan", "script", "wrong_order"]

Outcome = Literal["right", "wrong"]


def default_plan(questions: Sequence[Mapping[str, Any]]) -> dict[str, Outcome]:
    """Questions 4, 8, 12, ... ``"wrong"``; the others ``"right"``."""
    return {q["id"]: "wrong" if i % 4 == 3 else "right" for i, q in enumerate(questions)}


def wrong_order(question: Mapping[str, Any], orders: Sequence[str]) -> str:
    """The next order whose fact for the question's field differs."""
    start = orders.index(question["order_id"])
    for offset in range(1, len(orders)):
        other = orders[(start + offset) % len(orders)]
        if str((lookup(other) or {}).get(question["field"])) != question["answer"]:
            return other
    raise ValueError("every order has the same facts")


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content or "")


def script(
    questions: Sequence[Mapping[str, Any]], plan: Mapping[str, Outcome]
) -> Callable[[dict[str, Any]], Reply | str]:
    """The server's script for ``questions`` (each question's outcome from ``plan``)."""
    orders = list(dict.fromkeys(q["order_id"] for q in questions))
    by_text = {q["question"]: q for q in questions}

    def answer(request: dict[str, Any]) -> Reply | str:
        messages = request.get("messages") or []
        system = _text(messages[0].get("content")) if messages else ""
        user = next((_text(m["content"]) for m in messages if m.get("role") == "user"), "")
        question = next((q for text, q in by_text.items() if text in user), None)
        if question is None:
            return error_reply(400, "the stand-in knows no such question")
        if system.startswith("You are triage."):
            wrong = plan[question["id"]] == "wrong"
            return wrong_order(question, orders) if wrong else question["order_id"]
        if system.startswith("You are support."):
            if messages[-1].get("role") != "tool":
                given = re.match(r"Order (\S+)\.", user)
                return tool_reply("lookup_order", {"order_id": given[1] if given else ""})
            facts = json.loads(_text(messages[-1].get("content")))
            return tool_reply(
                "final_result",
                {
                    "order_id": facts["order_id"],
                    "status": facts["status"],
                    "eta_days": facts["eta_days"],
                    "message": f"Your {facts['item']} is {facts['status']}.",
                },
            )
        return error_reply(400, "the stand-in serves only triage and support")

    return answer
