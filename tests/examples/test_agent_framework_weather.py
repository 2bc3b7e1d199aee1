"""The Agent Framework weather example: its data and reward, a dev run, and writer-only RL.

The dev run goes through the trainer against agl's scripted OpenAI-compatible server standing
in for a model (``examples/agent_framework_weather/stand_in.py``): the forecaster looks the
town up (a wrong one for a few questions) and reports, the writer answers from the report. The
RL run (slow) trains a tiny model built in code for two steps, on the writer's calls only.
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

pytest.importorskip("agl_agent_framework", reason="the example needs agl-agent-framework")


@pytest.fixture(scope="module")
def example(load_example: Any) -> Any:
    return load_example("agent_framework_weather", ["weather", "travel_workflow"])


def test_every_question_is_answered_by_the_forecasts(example: Any) -> None:
    weather, stand_in = example.weather, example.stand_in
    questions = weather.questions()
    assert len(questions) == 16
    assert len(weather.questions("train")) == 12
    towns = [q["town"] for q in questions]
    for question in questions:
        facts = weather.forecast(question["town"].upper() + " please")
        assert facts is not None
        assert str(facts[weather.FIELDS[question["field"]]]) == question["answer"]
        wrong = weather.forecast(stand_in.wrong_town(question, towns))
        assert str(wrong[weather.FIELDS[question["field"]]]) != question["answer"]
    assert weather.forecast("Atlantis") is None
    assert weather.reward("It will reach 14 degrees.", "14") == 1.0
    assert weather.reward("It will reach 140 degrees.", "14") == 0.0


def test_dev_run_attributes_calls_to_agents_and_records_the_tool(
    example: Any, tmp_path: Path
) -> None:
    weather, stand_in, run = example.weather, example.stand_in, example.run
    questions = weather.questions()[:8]
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
        assert [call.agent for call in calls] == ["forecaster", "forecaster", "writer"]
        assert all(call.response_id for call in calls), question["id"]
        [tool] = spans_of_type(outcome.spans, semconv.SPAN_TYPE_TOOL)
        assert tool.attributes[semconv.AGL_TOOL_NAME] == "get_forecast"
        arguments = json.loads(str(tool.attributes[semconv.AGL_TOOL_ARGUMENTS]))
        facts = json.loads(str(tool.attributes[semconv.AGL_TOOL_RESULT]))
        assert facts["town"] == arguments["town"]
    stats = agent_stats(result.results)
    assert {agent: s.calls for agent, s in stats.items()} == {"forecaster": 16, "writer": 8}
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
    assert rows == {"forecaster": ["8", "4", "0.750"], "writer": ["4", "4", "0.750"]}
    assert "mean reward 0.750 over 4 tasks" in out


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_training_only_the_writer(
    example: Any, tmp_path: Path, recorded_rl: Any, check_one_agent_trained: Any
) -> None:
    tasks = example.weather.questions("train")[:2]
    run_dir = tmp_path / "run"
    train_example(example.run, "writer_rl", tasks, run_dir, recorded_rl.algorithm)
    [writer] = recorded_rl.instances
    check_one_agent_trained(writer, run_dir, "writer", "forecaster", "You are the writer.")
