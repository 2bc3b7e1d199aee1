"""The Agent Framework weather example: its data and reward, and a dev run's calls and tool.

The dev run goes through the trainer against agl's scripted OpenAI-compatible server standing
in for a model (``examples/agent_framework_weather/stand_in.py``): the forecaster looks the
town up (a wrong one for a few questions) and reports, the writer answers from the report. Its
command line, table per agent and writer-only RL are tested in ``test_scripts.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agl import semconv
from agl.testing.gateway_rollouts import spans_of_type

from .conftest import Example, dev_run, load

pytest.importorskip("agl_agent_framework", reason="the example needs agl-agent-framework")


@pytest.fixture(scope="module")
def example() -> Example:
    return load("agent_framework_weather")


def test_every_question_is_answered_by_the_forecasts(example: Example) -> None:
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
    example: Example, tmp_path: Path
) -> None:
    weather, stand_in = example.weather, example.stand_in
    questions = weather.questions()[:8]
    plan = stand_in.default_plan(questions)
    result, _ = dev_run(
        example, questions, plan, tmp_path / "run", agents=["forecaster", "forecaster", "writer"]
    )
    for outcome in result.results:
        [tool] = spans_of_type(outcome.spans, semconv.SPAN_TYPE_TOOL)
        assert tool.attributes[semconv.AGL_TOOL_NAME] == "get_forecast"
        arguments = json.loads(str(tool.attributes[semconv.AGL_TOOL_ARGUMENTS]))
        facts = json.loads(str(tool.attributes[semconv.AGL_TOOL_RESULT]))
        assert facts["town"] == arguments["town"]
