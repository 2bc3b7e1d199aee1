"""Real CrewAI crews, through agl's gateway, read by LightningRL.

Every test runs a crew inside ``tracer.rollout(...)`` with CrewAI's native OpenAI provider
pointed at the rollout's gateway URL; the gateway forwards to the scripted OpenAI-compatible
server and records the token ids. ``extract_calls`` must then find each call exactly once,
joined with the gateway's token ids on the response id (never by order) and given to the right
agent: a writer and a checker in a sequential crew, a manager delegating to a coworker.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
from crewai import LLM, Agent, Crew, Process, Task
from crewai.tools import tool
from pydantic import BaseModel

import agl
from agl import TransitionBuilder, semconv
from agl._results import fetch_results
from agl.gateway import GatewayServer
from agl.store._memory import MemoryStore
from agl.testing.gateway_rollouts import (
    joined_calls,
    run_through_gateway,
    spans_of_type,
)
from agl.testing.openai_server import OpenAIServer, Reply, decode, sequence, tool_reply
from agl.tracing._openai import OpenAIInstrumentation
from agl_crewai.instrumentor import TASK_NAME, CrewAIInstrumentor

pytestmark = pytest.mark.anyio

Job = Callable[[str], Awaitable[Any]]
"""Runs a crew against an OpenAI-compatible base URL."""


@tool("add")
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


class Answer(BaseModel):
    value: int


def llm(base_url: str, *, stream: bool = False) -> LLM:
    return LLM(model="openai/m", base_url=base_url, api_key="k", stream=stream, max_retries=0)


def agent(role: str, base_url: str, **kwargs: Any) -> Agent:
    return Agent(role=role, goal=f"do the {role}'s part", backstory=f"The {role}.", **kwargs)


def writer_and_checker(base_url: str) -> Crew:
    writer = agent("writer", base_url, llm=llm(base_url))
    checker = agent("checker", base_url, llm=llm(base_url))
    return Crew(
        agents=[writer, checker],
        tasks=[
            Task(
                name="draft",
                description="Write a line about otters.",
                expected_output="a line",
                agent=writer,
            ),
            Task(description="Check the line.", expected_output="a verdict", agent=checker),
        ],
        process=Process.sequential,
    )


@pytest.fixture
def instrumented(tracer: agl.Tracer) -> Iterator[CrewAIInstrumentor]:
    instrumentor = CrewAIInstrumentor(tracer)
    instrumentor.instrument()
    yield instrumentor
    instrumentor.uninstrument()


async def run(
    job: Job,
    store: MemoryStore,
    tracer: agl.Tracer,
    gateway: GatewayServer,
    *,
    reward: float | None = None,
) -> tuple[str, list[agl.Span]]:
    """Run ``job(base_url)`` as one rollout through the gateway; return its id and spans."""
    return await run_through_gateway(job, store, tracer, gateway, reward=reward)


async def sequential(base_url: str) -> None:
    result = await asyncio.to_thread(writer_and_checker(base_url).kickoff)
    assert result.raw.startswith("ok: ")


async def test_a_crew_gives_each_agent_its_own_calls(
    instrumented: CrewAIInstrumentor,
    store: MemoryStore,
    tracer: agl.Tracer,
    gateway: GatewayServer,
) -> None:
    _, spans = await run(sequential, store, tracer, gateway)
    assert [call.agent for call in joined_calls(spans).calls] == [
        "writer",
        "checker",
    ]
    agents = spans_of_type(spans, semconv.SPAN_TYPE_AGENT)
    assert [(s.name, s.attributes[semconv.AGL_AGENT_NAME]) for s in agents] == [
        ("writer.draft._execute_core", "writer"),
        ("checker._execute_core", "checker"),
    ]
    assert agents[0].attributes[TASK_NAME] == "draft"
    first, second = (s.attributes for s in spans_of_type(spans, semconv.SPAN_TYPE_LLM))
    assert first[semconv.GEN_AI_OPERATION_NAME] == "chat"
    assert isinstance(first[semconv.GEN_AI_USAGE_INPUT_TOKENS], int)
    assert "Check the line." in str(second[semconv.GEN_AI_INPUT_MESSAGES])


async def test_a_tool_round_trip_records_both_calls_and_the_tool(
    instrumented: CrewAIInstrumentor,
    store: MemoryStore,
    tracer: agl.Tracer,
    gateway: GatewayServer,
    upstream: OpenAIServer,
) -> None:
    upstream.script = sequence(tool_reply("add", {"a": 2, "b": 3}), "5")

    async def job(base_url: str) -> None:
        calculator = agent("calculator", base_url, llm=llm(base_url), tools=[add])
        task = Task(description="What is 2 + 3?", expected_output="a number", agent=calculator)
        result = await asyncio.to_thread(Crew(agents=[calculator], tasks=[task]).kickoff)
        assert result.raw == "5"

    _, spans = await run(job, store, tracer, gateway)
    assert [call.agent for call in joined_calls(spans).calls] == [
        "calculator",
        "calculator",
    ]
    asking = spans_of_type(spans, semconv.SPAN_TYPE_LLM)[0]
    asked = json.loads(str(asking.attributes[semconv.AGL_TOOL_CALLS]))
    assert [(c["name"], json.loads(c["arguments"])) for c in asked] == [("add", {"a": 2, "b": 3})]
    [tool_span] = spans_of_type(spans, semconv.SPAN_TYPE_TOOL)
    assert tool_span.attributes[semconv.AGL_TOOL_NAME] == "add"
    assert json.loads(str(tool_span.attributes[semconv.AGL_TOOL_ARGUMENTS])) == {"a": 2, "b": 3}
    assert tool_span.attributes[semconv.AGL_TOOL_RESULT] == "5"
    assert tool_span.parent_id == spans_of_type(spans, semconv.SPAN_TYPE_AGENT)[0].span_id


async def test_streamed_calls_carry_their_response_ids(
    instrumented: CrewAIInstrumentor,
    store: MemoryStore,
    tracer: agl.Tracer,
    gateway: GatewayServer,
) -> None:
    async def job(base_url: str) -> None:
        writer = agent("writer", base_url, llm=llm(base_url, stream=True))
        task = Task(description="Write a line.", expected_output="a line", agent=writer)
        result = await asyncio.to_thread(Crew(agents=[writer], tasks=[task]).kickoff)
        assert result.raw.startswith("ok: ")

    _, spans = await run(job, store, tracer, gateway)
    assert [call.agent for call in joined_calls(spans).calls] == ["writer"]


async def test_structured_output_is_one_traced_call(
    instrumented: CrewAIInstrumentor,
    store: MemoryStore,
    tracer: agl.Tracer,
    gateway: GatewayServer,
    upstream: OpenAIServer,
) -> None:
    upstream.script = sequence('{"value": 5}')

    async def job(base_url: str) -> None:
        solver = agent("solver", base_url, llm=llm(base_url))
        task = Task(
            description="What is 2 + 3?",
            expected_output="the sum",
            agent=solver,
            output_pydantic=Answer,
        )
        result = await asyncio.to_thread(Crew(agents=[solver], tasks=[task]).kickoff)
        assert result.pydantic == Answer(value=5)

    _, spans = await run(job, store, tracer, gateway)
    [call] = joined_calls(spans).calls
    assert call.agent == "solver"
    [asking] = spans_of_type(spans, semconv.SPAN_TYPE_LLM)
    assert "structured_output_schema" in str(dict(asking.attributes))


async def test_native_async_crews_name_their_agents(
    instrumented: CrewAIInstrumentor,
    store: MemoryStore,
    tracer: agl.Tracer,
    gateway: GatewayServer,
) -> None:
    async def job(base_url: str) -> None:
        result = await writer_and_checker(base_url).akickoff()
        assert result.raw.startswith("ok: ")

    _, spans = await run(job, store, tracer, gateway)
    assert [call.agent for call in joined_calls(spans).calls] == [
        "writer",
        "checker",
    ]
    agents = spans_of_type(spans, semconv.SPAN_TYPE_AGENT)
    assert [s.name for s in agents] == ["writer.aexecute_task", "checker.aexecute_task"]


def delegating(request: dict[str, Any]) -> Reply | str:
    """The manager delegates once, then answers; the coworker answers at once."""
    system = str(request["messages"][0]["content"])
    if "Crew Manager" not in system:
        return "the coworker's line"
    if any(m["role"] == "tool" for m in request["messages"]):
        return "done: the coworker's line"
    [delegate] = [
        t["function"]["name"]
        for t in request.get("tools", [])
        if "delegate" in t["function"]["name"].lower()
    ]
    return tool_reply(
        delegate, {"task": "Write a line.", "context": "About otters.", "coworker": "writer"}
    )


async def test_a_coworker_a_manager_delegates_to_gets_its_own_calls(
    instrumented: CrewAIInstrumentor,
    store: MemoryStore,
    tracer: agl.Tracer,
    gateway: GatewayServer,
    upstream: OpenAIServer,
) -> None:
    upstream.script = delegating

    async def job(base_url: str) -> None:
        writer = agent("writer", base_url, llm=llm(base_url))
        task = Task(description="Get a line about otters.", expected_output="a line")
        crew = Crew(
            agents=[writer],
            tasks=[task],
            process=Process.hierarchical,
            manager_llm=llm(base_url),
        )
        result = await asyncio.to_thread(crew.kickoff)
        assert result.raw == "done: the coworker's line"

    _, spans = await run(job, store, tracer, gateway)
    assert [call.agent for call in joined_calls(spans).calls] == [
        "Crew Manager",
        "writer",
        "Crew Manager",
    ]
    [delegation] = spans_of_type(spans, semconv.SPAN_TYPE_TOOL)
    [coworker] = [
        s
        for s in spans_of_type(spans, semconv.SPAN_TYPE_AGENT)
        if s.attributes[semconv.AGL_AGENT_NAME] == "writer"
    ]
    assert coworker.name == "writer.execute_task"
    assert coworker.parent_id == delegation.span_id


async def test_lightningrl_trains_only_the_selected_agent(
    instrumented: CrewAIInstrumentor,
    store: MemoryStore,
    tracer: agl.Tracer,
    gateway: GatewayServer,
) -> None:
    ids = [(await run(sequential, store, tracer, gateway, reward=r))[0] for r in (1.0, 0.0)]
    results = await fetch_results(store, [await store.get_rollout(i) for i in ids])
    batch = TransitionBuilder(agents=["checker"]).build(results)
    assert [t.agent for t in batch] == ["checker", "checker"]
    assert [t.reward for t in batch] == [1.0, 0.0]
    assert batch[0].advantage > 0 > batch[1].advantage
    assert batch.report.notes["other_agents_calls"] == 2
    assert all("Check the line." in decode(t.prompt_ids) for t in batch)
    assert all(decode(t.response_ids).startswith("ok: ") for t in batch)


async def test_with_the_openai_instrumentation_too_each_call_counts_once(
    instrumented: CrewAIInstrumentor,
    store: MemoryStore,
    tracer: agl.Tracer,
    gateway: GatewayServer,
) -> None:
    openai = OpenAIInstrumentation(tracer)
    openai.instrument()
    try:
        _, spans = await run(sequential, store, tracer, gateway)
    finally:
        openai.uninstrument()
    assert len(spans_of_type(spans, semconv.SPAN_TYPE_LLM)) == 2  # shared patches: one span each
    assert [call.agent for call in joined_calls(spans).calls] == [
        "writer",
        "checker",
    ]
    assert instrumented.instrumented
