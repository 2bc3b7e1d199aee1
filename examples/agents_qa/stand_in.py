"""A stand-in for a real model: a scripted OpenAI-compatible server that knows the searches.

It lets the example (and its test) run on any machine, with no model and no GPU: agl's
:class:`~agl.testing.openai_server.OpenAIServer` answers each chat request the way a :data:`Plan`
says. It tells the agents apart by their system prompts (never by the order of the requests,
which arrive from many rollouts at once) and finds the question in the first user message:

- the **researcher** (its request carries the ``search`` tool) searches for the question's
  first hop, then, once that result is in the conversation, for the second; with both results
  in, it hands off (``transfer_to_answerer``), or, for ``"finish"``, writes a line of notes
  instead, and the rollout hands the conversation to the answerer itself;
- the **answerer** answers with the gold answer (``"right"`` and ``"finish"``) or with the
  question's bridge entity (``"wrong"``: the answer to the first hop, one search short).

So every question takes four calls: three of the researcher, one of the answerer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from qa_agent import ANSWERER_PROMPT, RESEARCHER_PROMPT

from agl.testing.openai_server import Reply, error_reply, tool_reply

__all__ = ["HANDOFF", "Outcome", "Plan", "default_plan", "script"]

Outcome = Literal["right", "wrong", "finish"]
Plan = Mapping[str, Outcome]
"""Question id -> what happens to it."""

HANDOFF = "transfer_to_answerer"
"""The tool the Agents SDK gives the researcher for its handoff."""


def default_plan(questions: Sequence[Mapping[str, Any]]) -> dict[str, Outcome]:
    """Questions 5, 10, 15, ... ``"wrong"``; 3, 8, 13, ... ``"finish"``; the others
    ``"right"``."""
    outcomes: tuple[Outcome, ...] = ("right", "right", "finish", "right", "wrong")
    return {q["id"]: outcomes[i % len(outcomes)] for i, q in enumerate(questions)}


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
        users = [_text(m.get("content")) for m in messages if m.get("role") == "user"]
        task = by_text.get(users[0].strip()) if users else None
        if task is None:
            return error_reply(400, "the stand-in knows no such question")
        outcome = plan[task["id"]]
        if system == RESEARCHER_PROMPT:
            searched = sum(1 for m in messages if m.get("role") == "tool")
            if searched < len(task["hops"]):
                query = {"query": task["hops"][searched]}
                # short call ids, numbered in the conversation (a model copies them as is)
                return tool_reply("search", query, id=f"call_{searched + 1}")
            if outcome == "finish":
                first, second = task["hops"]
                return f"I searched for {first!r}, then for {second!r}; the answer is above."
            return tool_reply(HANDOFF, id=f"call_{searched + 1}")
        if system == ANSWERER_PROMPT:
            return str(task["bridge"] if outcome == "wrong" else task["answer"])
        return error_reply(400, "the stand-in knows no such agent")

    return answer
