"""A stand-in for a real model: a scripted OpenAI-compatible server that knows the catalog.

It lets the example (and its test) run on any machine, with no model and no GPU: agl's
:class:`~agl.testing.openai_server.OpenAIServer` answers each chat request the way a
:data:`Plan` says, telling the two agents apart by CrewAI's system prompt (``You are
researcher.`` / ``You are writer.``). Each question takes three calls:

1. the researcher calls ``lookup_product`` with the question's product (``"right"``) or with
   :func:`wrong_product` (``"wrong"``: another product, whose value differs);
2. the researcher, given the tool's result, reports it verbatim;
3. the writer, given the report as context, answers with the value it finds there, so a wrong
   lookup gives a wrong answer.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from products import FIELDS, catalog

from agl.testing.openai_server import Reply, error_reply, tool_reply

__all__ = ["Outcome", "Plan", "default_plan", "script", "wrong_product"]

Outcome = Literal["right", "wrong"]
Plan = Mapping[str, Outcome]
"""Question id -> which product the researcher looks up."""

_ASKS = re.compile(r"A customer asks: (.+?)\n")
_REPORT = re.compile(r'\{"product": .*?\}')


def wrong_product(question: Mapping[str, Any]) -> str:
    """The next product in the catalog whose value for the question's field differs."""
    products = list(catalog())
    names = [p["name"] for p in products]
    start = names.index(question["product"])
    for offset in range(1, len(products)):
        other = products[(start + offset) % len(products)]
        if str(other[question["field"]]) != question["answer"]:
            return str(other["name"])
    raise ValueError(f"every product has the same {question['field']}")


def default_plan(questions: Sequence[Mapping[str, Any]]) -> dict[str, Outcome]:
    """Questions 4, 8, 12, ... ``"wrong"``; the others ``"right"``."""
    return {q["id"]: "wrong" if i % 4 == 3 else "right" for i, q in enumerate(questions)}


def _text(content: Any) -> str:
    """A message's text, whether its content is a string or a list of parts."""
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content or "")


def script(
    questions: Sequence[Mapping[str, Any]], plan: Plan
) -> Callable[[dict[str, Any]], Reply | str]:
    """The server's script for ``questions`` (each question's outcome from ``plan``)."""
    by_text = {q["question"]: q for q in questions}

    def answer(request: dict[str, Any]) -> Reply | str:
        messages = request.get("messages") or []
        system = _text(messages[0].get("content")) if messages else ""
        prompt = "\n".join(_text(m.get("content")) for m in messages if m.get("role") == "user")
        asked = _ASKS.search(prompt + "\n")
        question = by_text.get(asked[1].strip()) if asked else None
        if question is None:
            return error_reply(400, "the stand-in knows no such question")
        if system.startswith("You are researcher."):
            if messages[-1].get("role") == "tool":
                return _text(messages[-1].get("content"))
            name = question["product"]
            if plan[question["id"]] == "wrong":
                name = wrong_product(question)
            return tool_reply("lookup_product", {"name": name})
        if system.startswith("You are writer."):
            report = _REPORT.search(prompt)
            if report is None:
                return "I could not find the product's facts."
            facts = json.loads(report[0])
            label = FIELDS[question["field"]]
            return f"The {facts['product']} has a {label} of {facts[label]}."
        return error_reply(400, "the stand-in serves only the researcher and the writer")

    return answer
