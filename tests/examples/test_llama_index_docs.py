"""The LlamaIndex docs example: its pages, index and reward, and a dev run's calls and tools.

The dev run goes through the trainer against agl's scripted OpenAI-compatible server standing
in for a model (``examples/llama_index_docs/stand_in.py``): the researcher searches the local
index (for a wrong lighthouse for a few questions) and hands off to the writer, which answers
from the page found. Its command line, table per agent and writer-only RL (the researcher
frozen on the stand-in) are tested in ``test_scripts.py``.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from agl import semconv
from agl.lightning import extract_calls
from agl.testing.gateway_rollouts import spans_of_type

from .conftest import LLAMA_INDEX_WARNINGS, Example, dev_run, load

pytest.importorskip("agl_llama_index", reason="the example needs agl-llama-index")

pytestmark = LLAMA_INDEX_WARNINGS


@pytest.fixture(scope="module")
def example() -> Example:
    return load("llama_index_docs")


def test_every_question_is_answered_by_the_page_its_search_finds(example: Example) -> None:
    lighthouses, desk, stand_in = example.lighthouses, example.lighthouse_desk, example.stand_in
    questions = lighthouses.questions()
    assert len(questions) == 16
    assert len(lighthouses.questions("train")) == 12
    for question in questions:
        page = asyncio.run(desk.search_docs(f"{question['lighthouse']} lighthouse"))
        assert stand_in.read_page(page, question["fact"]) == (
            question["lighthouse"],
            question["answer"],
        )
        wrong = stand_in.wrong_lighthouse(question)
        page = asyncio.run(desk.search_docs(f"{wrong} lighthouse"))
        assert stand_in.read_page(page, question["fact"])[1] != question["answer"]
    assert lighthouses.reward("It was first lit in 1871.", "1871") == 1.0
    assert lighthouses.reward("It was first lit in 18710.", "1871") == 0.0


def test_dev_run_attributes_calls_to_agents_and_records_the_tools(
    example: Example, tmp_path: Path
) -> None:
    lighthouses, stand_in = example.lighthouses, example.stand_in
    questions = lighthouses.questions()[:8]
    plan = stand_in.default_plan(questions)
    result, _ = dev_run(
        example, questions, plan, tmp_path / "run", agents=["researcher", "researcher", "writer"]
    )
    for outcome in result.results:
        assert extract_calls(outcome.spans).counts["duplicate_llm_spans"] == 0
        tools = spans_of_type(outcome.spans, semconv.SPAN_TYPE_TOOL)
        assert [tool.attributes[semconv.AGL_TOOL_NAME] for tool in tools] == [
            "search_docs",
            "handoff",
        ]
        search, handoff = (json.loads(str(t.attributes[semconv.AGL_TOOL_ARGUMENTS])) for t in tools)
        page = str(tools[0].attributes[semconv.AGL_TOOL_RESULT])
        assert page.startswith(search["query"].removesuffix(" lighthouse"))
        assert handoff == {"to_agent": "writer", "reason": "The page is found."}
