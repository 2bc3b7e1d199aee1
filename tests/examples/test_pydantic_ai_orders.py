"""The PydanticAI orders example: its data and reward, a dev run, and support-only RL.

The dev run goes through the trainer against agl's scripted OpenAI-compatible server standing
in for a model (``examples/pydantic_ai_orders/stand_in.py``): triage finds the order id (a
wrong one for a few questions), support looks it up and answers with a typed reply. The RL run
(slow) trains a tiny model built in code for two steps, on support's calls only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import agl
from agl import semconv
from agl.lightning import agent_stats, extract_calls
from agl.testing.gateway_rollouts import spans_of_type
from agl.testing.openai_server import OpenAIServer

from .conftest import train_example

pytest.importorskip("agl_pydantic_ai", reason="the example needs agl-pydantic-ai")


@pytest.fixture(scope="module")
def example(load_example: Any) -> Any:
    return load_example("pydantic_ai_orders", ["orders", "support_agents"])


def test_every_question_is_answered_by_the_orders(example: Any) -> None:
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
    example: Any, tmp_path: Path
) -> None:
    orders, stand_in, run = example.orders, example.stand_in, example.run
    questions = orders.questions()[:8]
    plan = stand_in.default_plan(questions)
    with OpenAIServer(stand_in.script(questions, plan)) as server:
        llm = agl.LLM(endpoint=server.url, model="stand-in")
        result = run.SCRIPT.dev(questions, llm, run_dir=tmp_path / "run", console=False)
        requests = server.request_count
    assert all(r.succeeded for r in result.results), [r.error for r in result.results]
    assert [r.reward for r in result.results] == [
        0.0 if plan[q["id"]] == "wrong" else 1.0 for q in questions
    ]
    for question, outcome in zip(questions, result.results, strict=True):
        calls = extract_calls(outcome.spans).calls
        assert [call.agent for call in calls] == ["triage", "support", "support"]
        assert all(call.response_id for call in calls), question["id"]
        [tool] = spans_of_type(outcome.spans, semconv.SPAN_TYPE_TOOL)
        assert tool.attributes[semconv.AGL_TOOL_NAME] == "lookup_order"
        arguments = json.loads(str(tool.attributes[semconv.AGL_TOOL_ARGUMENTS]))
        facts = json.loads(str(tool.attributes[semconv.AGL_TOOL_RESULT]))
        assert facts["order_id"] == arguments["order_id"]
    stats = agent_stats(result.results)
    assert {agent: s.calls for agent, s in stats.items()} == {"support": 16, "triage": 8}
    assert sum(s.calls for s in stats.values()) == requests


def test_the_script_prints_the_table_per_agent(
    example: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # the table is read here: its terminal is this wide
    with example.own_stand_in():
        example.run.SCRIPT.main(["--run-dir", str(tmp_path / "run"), "--quiet"])
    out = capsys.readouterr().out
    rows = {line.split()[1]: line.split()[3:9:2] for line in out.splitlines() if "│" in line}
    assert rows == {"support": ["8", "4", "0.750"], "triage": ["4", "4", "0.750"]}
    assert "mean reward 0.750 over 4 tasks" in out


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_training_only_the_support_agent(
    example: Any, tmp_path: Path, recorded_rl: Any, check_one_agent_trained: Any
) -> None:
    tasks = example.orders.questions("train")[:2]
    run_dir = tmp_path / "run"
    train_example(example.run, "support_rl", tasks, run_dir, recorded_rl.algorithm)
    [support] = recorded_rl.instances
    check_one_agent_trained(support, run_dir, "support", "triage", "You are support.")
