"""A stand-in for a real model: a scripted OpenAI-compatible server that knows the museums.

It lets the example (and its test) run on any machine, with no model and no GPU: agl's
:class:`~agl.testing.openai_server.OpenAIServer` answers each chat request the way a plan says,
telling the two agents apart by their instructions. Each question takes three calls:

1. the coordinator calls ``find_museum`` with the question's museum (``"right"``) or the next
   one (``"wrong"``, whose numbers differ);
2. the coordinator, given the tool's result, transfers to the guide (``transfer_to_agent``);
3. the guide answers with the number it finds in what ADK shows it of the coordinator's turn,
   so a wrong lookup gives a wrong answer.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from museums import FIELDS, find

from agl.testing.openai_server import Reply, error_reply, tool_reply

__all__ = ["default_plan", "script", "wrong_museum"]

Outcome = Literal["right", "wrong"]
_FOUND = re.compile(r"'museum': '([^']+)'")


def default_plan(questions: Sequence[Mapping[str, Any]]) -> dict[str, Outcome]:
    """Questions 4, 8, 12, ... ``"wrong"``; the others ``"right"``."""
    return {q["id"]: "wrong" if i % 4 == 3 else "right" for i, q in enumerate(questions)}


def wrong_museum(question: Mapping[str, Any], museums: Sequence[str]) -> str:
    """The next museum whose number for the question's field differs."""
    start = museums.index(question["museum"])
    for offset in range(1, len(museums)):
        other = museums[(start + offset) % len(museums)]
        if str((find(other) or {}).get(FIELDS[question["field"]])) != question["answer"]:
            return other
    raise ValueError("every museum has the same numbers")


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content or "")


def script(
    questions: Sequence[Mapping[str, Any]], plan: Mapping[str, Outcome]
) -> Callable[[dict[str, Any]], Reply | str]:
    """The server's script for ``questions`` (each question's outcome from ``plan``)."""
    museums = list(dict.fromkeys(q["museum"] for q in questions))
    by_text = {q["question"]: q for q in questions}

    def answer(request: dict[str, Any]) -> Reply | str:
        messages = request.get("messages") or []
        system = _text(messages[0].get("content")) if messages else ""
        texts = [_text(m.get("content")) for m in messages]
        question = next((by_text[t] for t in texts if t in by_text), None)
        if question is None:
            return error_reply(400, "the stand-in knows no such question")
        if system.startswith("You are the coordinator."):
            if messages[-1].get("role") == "tool":
                return tool_reply("transfer_to_agent", {"agent_name": "guide"})
            wrong = plan[question["id"]] == "wrong"
            museum = wrong_museum(question, museums) if wrong else question["museum"]
            return tool_reply("find_museum", {"name": museum})
        if system.startswith("You are the guide."):
            found = next((m for t in reversed(texts) if (m := _FOUND.search(t))), None)
            facts = find(found[1]) if found else None
            if facts is None:
                return "I could not find that museum."
            label = FIELDS[question["field"]]
            return f"The {facts['museum']}: {label} {facts[label]}."
        return error_reply(400, "the stand-in serves only the coordinator and the guide")

    return answer
