"""The LlamaIndex docs example: its pages, index and reward, a dev run, and writer-only RL.

The dev run goes through the trainer against agl's scripted OpenAI-compatible server standing
in for a model (``examples/llama_index_docs/stand_in.py``): the researcher searches the local
index (for a wrong lighthouse for a few questions) and hands off to the writer, which answers
from the page found. The RL run (slow) trains a tiny model built in code for two steps, on the
writer's calls only, with the researcher frozen on the stand-in.
"""

from __future__ import annotations

import asyncio
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

pytest.importorskip("agl_llama_index", reason="the example needs agl-llama-index")

# Under the suite's -W error: LlamaIndex's workflows list a workflow's members with
# inspect.getmembers, which reads deprecated attributes of the pydantic models its agents are;
# openinference reads an LLM's metadata with pydantic's deprecated .json(), inside its span
# handler (whose errors LlamaIndex swallows, losing the span). Theirs to fix; nothing recorded
# changes.
pytestmark = [
    pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecatedSince20:inspect"),
    pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecatedSince211:inspect"),
    pytest.mark.filterwarnings(
        "ignore:The `json` method is deprecated:pydantic.warnings.PydanticDeprecatedSince20"
        ":openinference"
    ),
]


@pytest.fixture(scope="module")
def example(load_example: Any) -> Any:
    return load_example("llama_index_docs", ["lighthouses", "lighthouse_desk"])


def test_every_question_is_answered_by_the_page_its_search_finds(example: Any) -> None:
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
    example: Any, tmp_path: Path
) -> None:
    lighthouses, stand_in, run = example.lighthouses, example.stand_in, example.run
    questions = lighthouses.questions()[:8]
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
        calls = extract_calls(outcome.spans)
        assert [call.agent for call in calls.calls] == ["researcher", "researcher", "writer"]
        assert all(call.response_id for call in calls.calls), question["id"]
        assert calls.counts["duplicate_llm_spans"] == 0
        tools = spans_of_type(outcome.spans, semconv.SPAN_TYPE_TOOL)
        assert [tool.attributes[semconv.AGL_TOOL_NAME] for tool in tools] == [
            "search_docs",
            "handoff",
        ]
        search, handoff = (json.loads(str(t.attributes[semconv.AGL_TOOL_ARGUMENTS])) for t in tools)
        page = str(tools[0].attributes[semconv.AGL_TOOL_RESULT])
        assert page.startswith(search["query"].removesuffix(" lighthouse"))
        assert handoff == {"to_agent": "writer", "reason": "The page is found."}
    stats = agent_stats(result.results)
    assert {agent: s.calls for agent, s in stats.items()} == {"researcher": 16, "writer": 8}
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
    assert rows == {"researcher": ["8", "4", "0.750"], "writer": ["4", "4", "0.750"]}
    assert "mean reward 0.750 over 4 tasks" in out


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_training_only_the_writer(
    example: Any, tmp_path: Path, recorded_rl: Any, check_one_agent_trained: Any
) -> None:
    tasks = example.lighthouses.questions("train")[:2]
    run_dir = tmp_path / "run"
    train_example(example.run, "writer_rl", tasks, run_dir, recorded_rl.algorithm)
    [writer] = recorded_rl.instances
    check_one_agent_trained(
        writer, run_dir, "writer", "researcher", "You are the writer.", frozen_off_gateway=True
    )
