"""The agent: a LangGraph text-to-SQL graph of three agents, ``writer``, ``checker``, ``rewriter``.

::

    START -> writer -> checker --OK--> END
                        |   ^
              WRONG     v   |    (at most ``max_rewrites`` times, then END)
                       rewriter

- **writer** writes a query from the question and the schema;
- **checker** runs the query on the database and shows the model the rows (or the error); the
  model answers ``OK`` or ``WRONG: <what is wrong>``;
- **rewriter** writes a corrected query from the checker's objection.

Each node makes one ``ChatOpenAI`` call and the graph knows nothing about agl: it is what you
would write anyway. The only agl code is :func:`sql_agent`, the rollout: it gets the task and
the LLM the run serves, builds the graph, runs it and returns the reward (the final query and
the gold query executed and their rows compared, :func:`company_db.reward`). agl's LangChain
instrumentation names each node's span after the node, which is how every LLM call is
attributed to ``writer``, ``checker`` or ``rewriter``, and how a run can train only the writer.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any, TypedDict

import company_db
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage, SystemMessage
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

import agl
import agl_langchain

__all__ = [
    "CHECKER_PROMPT",
    "REWRITER_PROMPT",
    "WRITER_PROMPT",
    "SQLState",
    "build_graph",
    "chat_model",
    "extract_sql",
    "is_ok",
    "sql_agent",
]

WRITER_PROMPT = (
    "You write SQLite queries. Given a database schema and a question, answer with one query "
    "that answers the question, in a ```sql code block."
)
CHECKER_PROMPT = (
    "You review SQLite queries. Given a schema, a question, a query and the rows it returned "
    "(or its error), reply OK if the query answers the question; otherwise reply WRONG: and "
    "say what is wrong."
)
REWRITER_PROMPT = (
    "You fix SQLite queries. Given a schema, a question, a query and a reviewer's objection, "
    "answer with the corrected query in a ```sql code block."
)

_FENCE = re.compile(r"```[ \t]*(?:sqlite|sql)?[ \t]*\n?(.*?)(?:```|$)", re.IGNORECASE | re.DOTALL)
_START = r"\b(?:SELECT|WITH\s+(?:RECURSIVE\s+)?\w+\s*(?:\([^)]*\))?\s+AS\s*\()"
_STATEMENT = [re.compile(_START), re.compile(_START, re.IGNORECASE)]  # SQL caps first
_PREVIEW_ROWS = 5


class SQLState(TypedDict):
    """What flows through the graph."""

    question: str
    sql: str
    """The latest query (empty when the model wrote none)."""
    verdict: str
    """The checker's latest reply."""
    rewrites: int


def extract_sql(text: str) -> str:
    """The SQL statement in a model's reply; empty when there is none.

    A ```sql (or bare ```) code block wins, even one cut off by a token limit. Otherwise the
    first bare statement is taken, from ``SELECT`` or ``WITH name AS (`` (upper case preferred,
    so prose such as "I select..." is passed over when the SQL is in capitals) up to the
    first ``;`` or blank line. A trailing ``;`` is dropped.
    """
    for fence in _FENCE.finditer(text):
        block = str(fence[1]).strip()
        if block:
            return block.rstrip(";").strip()
    for pattern in _STATEMENT:
        match = pattern.search(text)
        if match is not None:
            statement = re.split(r";|\n\s*\n", text[match.start() :], maxsplit=1)[0]
            return statement.strip()
    return ""


def is_ok(verdict: str) -> bool:
    """Whether the checker accepted the query: its reply starts with ``OK``."""
    return re.match(r"\W*OK\b", verdict, re.IGNORECASE) is not None


def build_graph(
    model: BaseChatModel,
    *,
    checker_model: BaseChatModel | None = None,
    max_rewrites: int = 2,
) -> CompiledStateGraph[SQLState, Any, SQLState, SQLState]:
    """The writer -> checker (-> rewriter -> checker)* graph, calling ``model`` in every node
    (``checker_model``, when given, in the checker's)."""
    schema = company_db.schema()

    async def ask(system: str, user: str, *, by: BaseChatModel = model) -> str:
        reply = await by.ainvoke([SystemMessage(system), HumanMessage(user)])
        return str(reply.text)  # a plain str: `.text` is a str subclass that warns if called

    async def writer(state: SQLState) -> dict[str, Any]:
        text = await ask(WRITER_PROMPT, f"Schema:\n{schema}\nQuestion: {state['question']}")
        return {"sql": extract_sql(text)}

    async def checker(state: SQLState) -> dict[str, Any]:
        try:
            rows = await asyncio.to_thread(company_db.execute, state["sql"])
            shown = "\n".join(repr(row) for row in rows[:_PREVIEW_ROWS])
            more = len(rows) - _PREVIEW_ROWS
            outcome = f"{len(rows)} row(s):\n{shown}" + (f"\n... {more} more" if more > 0 else "")
        except company_db.QueryError as exc:
            outcome = f"error: {exc}"
        verdict = await ask(
            CHECKER_PROMPT,
            f"Schema:\n{schema}\nQuestion: {state['question']}\n\n"
            f"Query:\n```sql\n{state['sql']}\n```\n\nResult: {outcome}",
            by=checker_model or model,
        )
        return {"verdict": verdict}

    async def rewriter(state: SQLState) -> dict[str, Any]:
        text = await ask(
            REWRITER_PROMPT,
            f"Schema:\n{schema}\nQuestion: {state['question']}\n\n"
            f"Query:\n```sql\n{state['sql']}\n```\n\nObjection: {state['verdict']}",
        )
        return {"sql": extract_sql(text), "rewrites": state["rewrites"] + 1}

    def after_check(state: SQLState) -> str:
        if is_ok(state["verdict"]) or state["rewrites"] >= max_rewrites:
            return END
        return "rewriter"

    graph = StateGraph(SQLState)
    graph.add_node("writer", writer)
    graph.add_node("checker", checker)
    graph.add_node("rewriter", rewriter)
    graph.add_edge(START, "writer")
    graph.add_edge("writer", "checker")
    graph.add_conditional_edges("checker", after_check, ["rewriter", END])
    graph.add_edge("rewriter", "checker")
    return graph.compile()


def chat_model(llm: agl.LLM) -> ChatOpenAI:
    """A ``ChatOpenAI`` for ``llm``, with its sampling parameters (temperature, max_tokens).

    Each attempt's gateway URL is its own, so a plain ``ChatOpenAI(base_url=llm.endpoint)``
    would build HTTP clients (and parse the CA bundle) per attempt on the runner's event loop;
    :func:`agl_langchain.chat_model` shares one client between them all.
    """
    return agl_langchain.chat_model(llm, max_retries=0)


@agl.rollout
async def sql_agent(
    task: dict[str, Any], llm: agl.LLM, checker_llm: agl.LLM | None = None
) -> float:
    """Answer ``task["question"]`` with the graph; reward: the final query run against the gold.

    ``llm`` is the model the run serves (through agl's gateway when it trains); its sampling
    parameters (temperature, max_tokens) go to every call, unless the run also publishes
    ``checker_llm``: then the checker calls that model instead (a fixed one, which training
    the writer and the rewriter leaves alone).
    """
    state: SQLState = {"question": task["question"], "sql": "", "verdict": "", "rewrites": 0}
    checker = chat_model(checker_llm) if checker_llm is not None else None
    graph = build_graph(chat_model(llm), checker_model=checker)
    final = await graph.ainvoke(state)
    return await asyncio.to_thread(company_db.reward, final["sql"], task["sql"])
