"""A stand-in for a real model: a scripted OpenAI-compatible server that knows the expressions.

It lets the example (and its test) run on any machine, with no model and no GPU: agl's
:class:`~agl.testing.openai_server.OpenAIServer` answers each chat request of the ``solver`` the
way a :data:`Plan` says. Each problem takes two calls:

1. the problem alone: the model calls ``calculator`` with the problem's expression (``"right"``)
   or with :func:`wrong_expression` (``"wrong"``: its first operator swapped);
2. the problem and the tool's result: the model answers ``The answer is <result>.``, quoting
   whatever the calculator returned, so a wrong expression gives a wrong answer.

A ``"guess"`` problem takes one call: the model skips the calculator and answers with a number
near the right one (:func:`guess`), as a model that does arithmetic in its head does.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from agl.testing.openai_server import Reply, error_reply, tool_reply

__all__ = ["Outcome", "Plan", "default_plan", "guess", "script", "wrong_expression"]

Outcome = Literal["right", "wrong", "guess"]
Plan = Mapping[str, Outcome]
"""Problem id -> which expression the model sends to the calculator."""

_SWAP = {"+": "-", "-": "+", "*": "+", "/": "*"}


def wrong_expression(expression: str) -> str:
    """``expression`` with its first operator swapped (``+``→``-``, ``-``→``+``, ``*``→``+``,
    ``/``→``*``): the model's mistake."""
    return re.sub(r"[-+*/]", lambda m: _SWAP[m[0]], expression, count=1)


def guess(problem: Mapping[str, Any]) -> int:
    """A wrong answer near ``problem``'s (off by 1, 2 or 10, up or down, by its id)."""
    offsets = (-10, -2, -1, 1, 2, 10)
    return int(problem["answer"]) + offsets[sum(map(ord, str(problem["id"]))) % len(offsets)]


def default_plan(problems: Sequence[Mapping[str, Any]]) -> dict[str, Outcome]:
    """Problems 5, 10, 15, ... ``"wrong"``; the others ``"right"``."""
    return {p["id"]: "wrong" if i % 5 == 4 else "right" for i, p in enumerate(problems)}


def _text(content: Any) -> str:
    """A message's text, whether its content is a string or a list of parts."""
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content or "")


def script(
    problems: Sequence[Mapping[str, Any]], plan: Plan
) -> Callable[[dict[str, Any]], Reply | str]:
    """The server's script for ``problems`` (each problem's outcome from ``plan``)."""
    by_text = {p["question"]: p for p in problems}

    def answer(request: dict[str, Any]) -> Reply | str:
        messages = request.get("messages") or []
        users = [_text(m.get("content")) for m in messages if m.get("role") == "user"]
        problem = by_text.get(users[0].strip()) if users else None
        if problem is None:
            return error_reply(400, "the stand-in knows no such problem")
        if messages[-1].get("role") == "tool":
            return f"The answer is {_text(messages[-1].get('content')).strip()}."
        if plan[problem["id"]] == "guess":
            return f"The answer is {guess(problem)}."
        expression = problem["expression"]
        if plan[problem["id"]] == "wrong":
            expression = wrong_expression(expression)
        return tool_reply("calculator", {"expression": expression})

    return answer
