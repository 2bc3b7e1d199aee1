"""The PydanticAI orders example: its data and reward, and a dev run's calls and tool.

The dev run goes through the trainer against agl's scripted OpenAI-compatible server standing
in for a model (``examples/pydantic_ai_orders/stand_in.py``): triage finds the order id (a
wrong one for a few questions), support looks it up and answers with a typed reply. Its command
line, table per agent and support-only RL are tested in ``test_scripts.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agl import semconv
from agl.testing.gateway_rollouts import spans_of_type

from .conftest import Example, dev_run, load

pytest.importorskip("agl_pydantic_ai", reason="the example needs agl-pydantic-ai")


@pytest.fixture(scope="module")
def example() -> Example:
    return load("pydantic_ai_orders")


def test_every_question_is_answered_by_the_orders(example: Example) -> None:
    orders, stand_in, agents = example.orders, example.stand_in, example.support_agents
    questions = orders.questions()
    assert len(questions) == 16
    assert len(orders.questions("train")) == 12
    ids = [q["order_id"] for q in questions]
    for question in questions:
        facts = orders.lookup(f"it is {question['order_id'].lower()}, thanks")
        assert str(facts[question["field"]]) == question["answer"]
        wrong = orders.lookup(stand_in.wrong_order(question, ids))
        assert str(wrong[question["field"]]) != question["answer"]
    assert orders.lookup("Z9999") is None
    reply = agents.OrderReply(order_id="A1042", status="Shipped", eta_days=2, message="On its way")
    assert orders.reward(reply, "status", "shipped") == 1.0
    assert orders.reward(reply, "eta_days", "2") == 1.0
    assert orders.reward(reply, "eta_days", "3") == 0.0
    assert orders.reward(None, "status", "shipped") == 0.0


def test_dev_run_attributes_calls_to_agents_and_records_the_tool(
    example: Example, tmp_path: Path
) -> None:
    orders, stand_in = example.orders, example.stand_in
    questions = orders.questions()[:8]
    plan = stand_in.default_plan(questions)
    result, _ = dev_run(
        example, questions, plan, tmp_path / "run", agents=["triage", "support", "support"]
    )
    for outcome in result.results:
        [tool] = spans_of_type(outcome.spans, semconv.SPAN_TYPE_TOOL)
        assert tool.attributes[semconv.AGL_TOOL_NAME] == "lookup_order"
        arguments = json.loads(str(tool.attributes[semconv.AGL_TOOL_ARGUMENTS]))
        facts = json.loads(str(tool.attributes[semconv.AGL_TOOL_RESULT]))
        assert facts["order_id"] == arguments["order_id"]
