"""A stand-in for a real model: a scripted OpenAI-compatible server that knows the forecasts.

It lets the example (and its test) run on any machine, with no model and no GPU: agl's
:class:`~agl.testing.openai_server.OpenAIServer` answers each chat request the way a plan says,
telling the two agents apart by their instructions. Each question takes three calls:

1. the forecaster calls ``get_forecast`` with the question's town (``"right"``) or the next
   town (``"wrong"``, whose numbers differ);
2. the forecaster, given the tool's result, reports it verbatim;
3. the writer answers with the number it finds in the report, so a wrong lookup gives a wrong
   answer.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from weather import FIELDS, forecast

from agl.testing.openai_server import Reply, error_reply, tool_reply

__all__ = ["default_plan", "script"]

Outcome = Literal["right", "wrong"]
_REPORT = re.compile(r'\{"town": .*?\}')


def default_plan(questions: Sequence[Mapping[str, Any]]) -> dict[str, Outcome]:
    """Questions 4, 8, 12, ... ``"wrong"``; the others ``"right"``."""
    return {q["id"]: "wrong" if i % 4 == 3 else "right" for i, q in enumerate(questions)}


def wrong_town(question: Mapping[str, Any], towns: Sequence[str]) -> str:
    """The next town whose value for the question's field differs."""
    start = towns.index(question["town"])
    for offset in range(1, len(towns)):
        other = towns[(start + offset) % len(towns)]
        facts = forecast(other) or {}
        if str(facts.get(FIELDS[question["field"]])) != question["answer"]:
            return other
    raise ValueError("every town has the same forecast")


def script(
    questions: Sequence[Mapping[str, Any]], plan: Mapping[str, Outcome]
) -> Callable[[dict[str, Any]], Reply | str]:
    """The server's script for ``questions`` (each question's outcome from ``plan``)."""
    by_text = {q["question"]: q for q in questions}
    towns = list(dict.fromkeys(q["town"] for q in questions))

    def answer(request: dict[str, Any]) -> Reply | str:
        messages = request.get("messages") or []
        system = str(messages[0].get("content")) if messages else ""
        asked = next((str(m["content"]) for m in messages if m.get("role") == "user"), "")
        question = by_text.get(asked)
        if question is None:
            return error_reply(400, "the stand-in knows no such question")
        if system.startswith("You are the forecaster."):
            if messages[-1].get("role") == "tool":
                return str(messages[-1].get("content"))
            wrong = plan[question["id"]] == "wrong"
            town = wrong_town(question, towns) if wrong else question["town"]
            return tool_reply("get_forecast", {"town": town})
        if system.startswith("You are the writer."):
            contents = [m.get("content") for m in reversed(messages)]
            found = (_REPORT.search(c) for c in contents if isinstance(c, str))
            report = next((match for match in found if match), None)
            if report is None:
                return "I have no forecast for that town."
            facts = json.loads(report[0])
            label = FIELDS[question["field"]]
            return f"Tomorrow in {facts['town']}: {label} {facts[label]}."
        return error_reply(400, "the stand-in serves only the forecaster and the writer")

    return answer
