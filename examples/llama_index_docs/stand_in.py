"""A stand-in for a real model: a scripted OpenAI-compatible server that plays both agents.

It lets the example (and its test) run on any machine, with no model and no GPU: agl's
:class:`~agl.testing.openai_server.OpenAIServer` answers each chat request the way a plan says,
telling the two agents apart by their instructions. Each question takes three calls:

1. the researcher searches the pages for the question's lighthouse (``"right"``) or for the
   next lighthouse (``"wrong"``, whose numbers differ);
2. the researcher, given the page, hands off to the writer;
3. the writer answers with the number it reads on the page the search returned, so a wrong
   search gives a wrong answer.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from lighthouses import FACTS, LIGHTHOUSES

from agl.testing.openai_server import Reply, error_reply, tool_reply

__all__ = ["default_plan", "script", "wrong_lighthouse"]

Outcome = Literal["right", "wrong"]
_PAGE = re.compile(r"^(?P<name>.+?) lighthouse\. ")


def default_plan(questions: Sequence[Mapping[str, Any]]) -> dict[str, Outcome]:
    """Questions 4, 8, 12, ... ``"wrong"``; the others ``"right"``."""
    return {q["id"]: "wrong" if i % 4 == 3 else "right" for i, q in enumerate(questions)}


def wrong_lighthouse(question: Mapping[str, Any]) -> str:
    """The next lighthouse whose number for the question's fact differs."""
    names = list(LIGHTHOUSES)
    start = names.index(question["lighthouse"])
    for offset in range(1, len(names)):
        other = names[(start + offset) % len(names)]
        if str(LIGHTHOUSES[other][question["fact"]]) != question["answer"]:
            return other
    raise ValueError("every lighthouse has the same number")


def read_page(page: str, fact: str) -> tuple[str, str] | None:
    """The lighthouse a page is about and the number it gives for ``fact``, if it is a page."""
    name = _PAGE.match(page)
    number = re.search(rf"{FACTS[fact]} (\d+)", page)
    return (name["name"], number[1]) if name and number else None


def script(
    questions: Sequence[Mapping[str, Any]], plan: Mapping[str, Outcome]
) -> Callable[[dict[str, Any]], Reply | str]:
    """The server's script for ``questions`` (each question's outcome from ``plan``)."""
    by_text = {q["question"]: q for q in questions}

    def answer(request: dict[str, Any]) -> Reply | str:
        messages = request.get("messages") or []
        system = str(messages[0].get("content")) if messages else ""
        asked = next((str(m["content"]) for m in messages if m.get("role") == "user"), "")
        question = by_text.get(asked)
        if question is None:
            return error_reply(400, "the stand-in knows no such question")
        if system.startswith("You are the researcher."):
            if messages[-1].get("role") == "tool":
                return tool_reply("handoff", {"to_agent": "writer", "reason": "The page is found."})
            wrong = plan[question["id"]] == "wrong"
            name = wrong_lighthouse(question) if wrong else question["lighthouse"]
            return tool_reply("search_docs", {"query": f"{name} lighthouse"})
        if system.startswith("You are the writer."):
            pages = (m.get("content") for m in reversed(messages) if m.get("role") == "tool")
            found = (read_page(p, question["fact"]) for p in pages if isinstance(p, str))
            read = next((facts for facts in found if facts), None)
            if read is None:
                return "I could not find that lighthouse's page."
            name, number = read
            if question["fact"] == "lit":
                return f"The {name} lighthouse was first lit in {number}."
            return f"The {name} light can be seen from {number} nautical miles out to sea."
        return error_reply(400, "the stand-in serves only the researcher and the writer")

    return answer
