"""The ADK museums example: its data and reward, and a dev run's calls and tools.

The dev run goes through the trainer against agl's scripted OpenAI-compatible server standing
in for a model (``examples/google_adk_museums/stand_in.py``): the coordinator looks the museum
up (a wrong one for a few questions) and transfers to the guide, which answers from what it
found. Its command line, table per agent and guide-only RL (the coordinator frozen on the
stand-in) are tested in ``test_scripts.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agl import semconv
from agl.testing.gateway_rollouts import spans_of_type

from .conftest import Example, dev_run, load

pytest.importorskip("agl_google_adk", reason="the example needs agl-google-adk")


@pytest.fixture(scope="module")
def example() -> Example:
    return load("google_adk_museums")


def test_every_question_is_answered_by_the_museums(example: Example) -> None:
    museums, stand_in = example.museums, example.stand_in
    questions = museums.questions()
    assert len(questions) == 16
    assert len(museums.questions("train")) == 12
    names = [q["museum"] for q in questions]
    for question in questions:
        facts = museums.find(f"the {question['museum'].upper()}, please")
        assert str(facts[museums.FIELDS[question["field"]]]) == question["answer"]
        wrong = museums.find(stand_in.wrong_museum(question, names))
        assert str(wrong[museums.FIELDS[question["field"]]]) != question["answer"]
    assert museums.find("Louvre") is None
    assert museums.reward("It closes at 17.", "17") == 1.0
    assert museums.reward("It closes at 170.", "17") == 0.0


def test_dev_run_attributes_calls_to_agents_and_records_the_tools(
    example: Example, tmp_path: Path
) -> None:
    museums, stand_in = example.museums, example.stand_in
    questions = museums.questions()[:8]
    plan = stand_in.default_plan(questions)
    result, _ = dev_run(
        example, questions, plan, tmp_path / "run", agents=["coordinator", "coordinator", "guide"]
    )
    for outcome in result.results:
        tools = spans_of_type(outcome.spans, semconv.SPAN_TYPE_TOOL)
        names = [tool.attributes[semconv.AGL_TOOL_NAME] for tool in tools]
        assert names == ["find_museum", "transfer_to_agent"]
        arguments = json.loads(str(tools[0].attributes[semconv.AGL_TOOL_ARGUMENTS]))
        facts = json.loads(str(tools[0].attributes[semconv.AGL_TOOL_RESULT]))
        assert facts["museum"] == arguments["name"]
