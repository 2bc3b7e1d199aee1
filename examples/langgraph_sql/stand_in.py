"""A stand-in for a real model: a scripted OpenAI-compatible server that knows the gold SQL.

It lets the example (and its test) run on any machine, with no model and no GPU: agl's
:class:`~agl.testing.openai_server.OpenAIServer` answers each chat request the way a :data:`Plan`
says, telling the three agents apart by their system prompts:

- ``"right"``: the writer answers with the gold SQL; the checker says OK.
- ``"caught"``: the writer answers with :data:`WRONG_SQL`, the checker objects (``WRONG: ...``),
  the rewriter answers with the gold SQL, and the checker then says OK.
- ``"missed"``: the writer answers with :data:`WRONG_SQL` and the checker lets it pass.
- ``"stuck"``: as ``"caught"``, but the rewriter answers with the same wrong query each time.

A question that carries its own mistake (``"wrong"``: a near miss, :mod:`sql_questions`) gets
that query instead of :data:`WRONG_SQL`.

The checker does not read the plan to judge a query: it runs the query and the gold one and
compares their rows (as the reward does), and only a ``"missed"`` question makes it say OK to
anything. The writer's replies take turns between a ```sql code block, a bare statement after
a sentence, and a bare code block, as real models vary.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import company_db
from sql_agent import CHECKER_PROMPT, REWRITER_PROMPT, WRITER_PROMPT, extract_sql

from agl.testing.openai_server import Reply, error_reply

__all__ = ["WRONG_SQL", "Outcome", "Plan", "default_plan", "script"]

Outcome = Literal["right", "caught", "missed", "stuck"]
Plan = Mapping[str, Outcome]
"""Question id -> what happens to it."""

WRONG_SQL = "SELECT name FROM employees"
"""The writer's mistake: a real query, wrong for every question of the dataset."""

_STYLES = (
    "```sql\n{sql};\n```",
    "Here is the query:\n{sql};",
    "```\n{sql}\n```\nIt reads the tables the question names.",
)


def default_plan(questions: Sequence[Mapping[str, str]]) -> dict[str, Outcome]:
    """Questions 2, 6, 10, ... ``"caught"``; 4, 8, 12, ... ``"missed"``; the others ``"right"``."""
    outcomes: tuple[Outcome, ...] = ("right", "caught", "right", "missed")
    return {q["id"]: outcomes[i % len(outcomes)] for i, q in enumerate(questions)}


def script(
    questions: Sequence[Mapping[str, str]], plan: Plan
) -> Callable[[dict[str, Any]], Reply | str]:
    """The server's script for ``questions`` (each question's outcome from ``plan``)."""
    by_text = {q["question"]: q for q in questions}

    def answer(request: dict[str, Any]) -> Reply | str:
        messages = request.get("messages") or []
        system = messages[0]["content"] if messages else ""
        user = messages[-1]["content"] if messages else ""
        found = re.search(r"^Question: (.+)$", str(user), re.MULTILINE)
        task = by_text.get(found[1]) if found else None
        if task is None:
            return error_reply(400, "the stand-in knows no such question")
        gold, outcome = task["sql"], plan[task["id"]]
        wrong = task.get("wrong", WRONG_SQL)
        if system == WRITER_PROMPT:
            sql = gold if outcome == "right" else wrong
            return _STYLES[_number(task["id"]) % len(_STYLES)].format(sql=sql)
        if system == CHECKER_PROMPT:
            if (
                outcome == "missed"
                or company_db.reward(extract_sql(str(user).split("Query:")[-1]), gold) == 1.0
            ):
                return "OK"
            return "WRONG: the rows do not answer the question."
        if system == REWRITER_PROMPT:
            return f"```sql\n{wrong if outcome == 'stuck' else gold}\n```"
        return error_reply(400, "the stand-in knows no such agent")

    return answer


def _number(task_id: str) -> int:
    """The digits in a question's id (``q07`` -> 7), 0 when it has none."""
    digits = "".join(char for char in task_id if char.isdigit())
    return int(digits) if digits else 0
