"""The agent: a plain AutoGen ``AssistantAgent`` named ``solver`` with a ``calculator`` tool.

The solver reads an arithmetic word problem, calls :func:`calculator` with an expression
(``+ - * /`` on numbers and parentheses, evaluated from its syntax tree, never with ``eval``)
and answers with the result (``reflect_on_tool_use=True``: a second model call reads the tool's
result and writes the final message). The agent knows nothing about agl: it is what you would
write anyway. The only agl code is :func:`math_agent`, the rollout: it gets the task and the
LLM the run serves, runs the solver and returns the reward, 1.0 when the final message contains
the right number, else 0.0. agl's AutoGen instrumentation names each agent turn's span after
the agent, which is how every LLM call is attributed to ``solver``.
"""

from __future__ import annotations

import ast
import json
import operator
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from autogen_agentchat.agents import AssistantAgent
from autogen_core.models import ModelFamily, ModelInfo
from autogen_core.tools import FunctionTool
from autogen_ext.models.openai import OpenAIChatCompletionClient

import agl

__all__ = [
    "DATA",
    "SYSTEM_PROMPT",
    "build_solver",
    "calculator",
    "evaluate",
    "math_agent",
    "numbers_in",
    "problems",
    "reward",
]

DATA = Path(__file__).resolve().parent / "data" / "problems.jsonl"

SYSTEM_PROMPT = (
    "You solve arithmetic word problems. Write the computation as one expression and call the "
    "calculator tool with it; then answer with the number it returned."
)

MODEL_INFO = ModelInfo(
    vision=False,
    function_calling=True,
    json_output=False,
    family=ModelFamily.UNKNOWN,
    structured_output=False,
)
"""What the client may assume of any model it is pointed at: it calls functions."""

_OPERATORS: dict[type[ast.operator], Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def problems() -> list[dict[str, Any]]:
    """The word problems: ``id``, ``question``, ``expression`` (a right one), ``answer`` (int)."""
    with DATA.open(encoding="utf-8") as lines:
        return [json.loads(line) for line in lines if line.strip()]


def evaluate(expression: str) -> float:
    """The value of ``expression``: numbers, ``+ - * /``, unary ``-``/``+`` and parentheses.

    Raises :class:`ValueError` for anything else (names, calls, powers, ...) and for a
    division by zero.
    """
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"not an arithmetic expression: {expression!r}") from exc

    def value(node: ast.expr) -> float:
        if isinstance(node, ast.Constant):
            number = node.value
            if isinstance(number, int | float) and not isinstance(number, bool):
                return float(number)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
            operand = value(node.operand)
            return -operand if isinstance(node.op, ast.USub) else operand
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            left, right = value(node.left), value(node.right)
            if isinstance(node.op, ast.Div) and right == 0:
                raise ValueError("division by zero")
            return _OPERATORS[type(node.op)](left, right)
        raise ValueError(f"only numbers and + - * / are allowed: {ast.unparse(node)!r}")

    return value(tree.body)


async def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression with + - * / and parentheses, e.g. ``(3 + 4) * 2``."""
    try:
        result = evaluate(expression)
    except ValueError as exc:
        return f"error: {exc}"
    return str(int(result)) if result.is_integer() else f"{result:.6g}"


def numbers_in(text: str) -> list[float]:
    """The numbers written in ``text`` (thousands separators such as ``22,400`` allowed)."""
    return [float(n) for n in _NUMBER.findall(re.sub(r"(?<=\d),(?=\d{3})", "", text))]


def reward(final: str, answer: float) -> float:
    """1.0 if the final message contains ``answer`` as a number, else 0.0."""
    return 1.0 if any(abs(n - answer) < 1e-9 for n in numbers_in(final)) else 0.0


def build_solver(client: OpenAIChatCompletionClient) -> AssistantAgent:
    """The ``solver``: one AutoGen assistant with the calculator tool."""
    tool = FunctionTool(calculator, description=calculator.__doc__ or "", name="calculator")
    return AssistantAgent(
        "solver",
        model_client=client,
        tools=[tool],
        system_message=SYSTEM_PROMPT,
        reflect_on_tool_use=True,
    )


@agl.rollout
async def math_agent(task: dict[str, Any], llm: agl.LLM) -> float:
    """Solve ``task["question"]``; reward: whether the final message holds ``task["answer"]``.

    ``llm`` is the model the run serves; its sampling parameters (temperature, max_tokens) go
    to every call.
    """
    options: dict[str, Any] = {}
    sampling = llm.sampling_parameters
    if isinstance(temperature := sampling.get("temperature"), int | float):
        options["temperature"] = float(temperature)
    if isinstance(max_tokens := sampling.get("max_tokens"), int):
        options["max_tokens"] = max_tokens
    client = OpenAIChatCompletionClient(
        model=llm.model,
        model_info=MODEL_INFO,
        **llm.openai_client_kwargs(max_retries=0),
        **options,
    )
    try:
        result = await build_solver(client).run(task=task["question"])
    finally:
        await client.close()
    final = result.messages[-1].to_text() if result.messages else ""
    return reward(final, float(task["answer"]))
