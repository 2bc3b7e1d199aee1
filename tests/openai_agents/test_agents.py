"""Real Agents SDK agents, through agl's gateway, read by LightningRL.

Every test runs its agents inside ``tracer.rollout(...)`` with an ``OpenAIChatCompletionsModel``
pointed at the rollout's gateway URL; the gateway forwards to the scripted OpenAI-compatible
server and records the token ids. ``extract_calls`` must then find each call exactly once,
joined with the gateway's token ids on the response id (never by order) and given to the right
agent: a triage agent hands off to a specialist, which is an agent of its own.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool
from openai import AsyncOpenAI

import agl
from agl import TransitionBuilder, semconv
from agl._results import fetch_results
from agl.gateway import GatewayServer
from agl.lightning import extract_calls
from agl.store._memory import MemoryStore
from agl.testing.gateway_rollouts import (
    joined_calls,
    run_through_gateway,
    spans_of_type,
)
from agl.testing.openai_server import OpenAIServer, Reply, decode, echo, sequence, tool_reply
from agl.tracing._openai import OpenAIInstrumentation
from agl_openai_agents.instrumentor import OpenAIAgentsInstrumentor

pytestmark = pytest.mark.anyio

Task = Callable[[OpenAIChatCompletionsModel], Awaitable[Any]]

HANDOFF = "transfer_to_specialist"


@function_tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def triage_agent(model: OpenAIChatCompletionsModel) -> Agent[Any]:
    specialist = Agent(
        name="specialist", instructions="Answer the question.", model=model, tools=[add]
    )
    return Agent(
        name="triage",
        instructions="Hand every question to the specialist.",
        model=model,
        handoffs=[specialist],
    )


def route(request: dict[str, Any]) -> Reply:
    """The triage agent hands off (it alone has the handoff tool); the specialist echoes."""
    tools = {tool["function"]["name"] for tool in request.get("tools", [])}
    return tool_reply(HANDOFF) if HANDOFF in tools else echo(request)


@pytest.fixture
def gateway(upstream: OpenAIServer, store: MemoryStore) -> Iterator[GatewayServer]:
    upstream.script = route
    with GatewayServer([upstream.url], store) as server:
        yield server


@pytest.fixture
def instrumented(tracer: agl.Tracer) -> Iterator[OpenAIAgentsInstrumentor]:
    instrumentor = OpenAIAgentsInstrumentor(tracer)
    instrumentor.instrument()
    yield instrumentor
    instrumentor.uninstrument()


async def run(
    task: Task,
    store: MemoryStore,
    tracer: agl.Tracer,
    gateway: GatewayServer,
    *,
    reward: float | None = None,
) -> tuple[str, list[agl.Span]]:
    """Run ``task(model)`` as one rollout through the gateway; return its id and spans."""

    async def job(base_url: str) -> None:
        async with AsyncOpenAI(base_url=base_url, api_key="k", max_retries=0) as client:
            await task(OpenAIChatCompletionsModel(model="m", openai_client=client))

    return await run_through_gateway(job, store, tracer, gateway, reward=reward)


async def ask(model: OpenAIChatCompletionsModel) -> None:
    result = await Runner.run(triage_agent(model), "what is 2 + 3?")
    assert result.final_output == "ok: what is 2 + 3?"
    assert result.last_agent.name == "specialist"


async def test_a_handoff_gives_each_agent_its_own_calls(
    instrumented: OpenAIAgentsInstrumentor,
    store: MemoryStore,
    tracer: agl.Tracer,
    gateway: GatewayServer,
) -> None:
    _, spans = await run(ask, store, tracer, gateway)
    calls = joined_calls(spans)
    assert [call.agent for call in calls.calls] == ["triage", "specialist"]
    agents = spans_of_type(spans, semconv.SPAN_TYPE_AGENT)
    assert [(s.name, s.attributes[semconv.AGL_AGENT_NAME]) for s in agents] == [
        ("triage", "triage"),
        ("specialist", "specialist"),
    ]
    # The specialist's span is not inside the triage agent's: the handoff ended that turn.
    triage, specialist = agents
    assert specialist.parent_id != triage.span_id
    first, second = (s.attributes for s in spans_of_type(spans, semconv.SPAN_TYPE_LLM))
    assert first[semconv.GEN_AI_OPERATION_NAME] == "chat"
    assert first[semconv.GEN_AI_REQUEST_MODEL] == first[semconv.GEN_AI_RESPONSE_MODEL] == "m"
    assert isinstance(first[semconv.GEN_AI_USAGE_INPUT_TOKENS], int)
    assert isinstance(first[semconv.GEN_AI_USAGE_OUTPUT_TOKENS], int)
    [handoff] = json.loads(str(first[semconv.AGL_TOOL_CALLS]))
    assert handoff["name"] == HANDOFF
    sent = json.loads(str(second[semconv.GEN_AI_INPUT_MESSAGES]))
    assert sent[0]["parts"] == [{"type": "text", "content": "Answer the question."}]


async def test_a_function_tool_round_trip_records_both_calls_and_the_tool(
    instrumented: OpenAIAgentsInstrumentor,
    store: MemoryStore,
    tracer: agl.Tracer,
    gateway: GatewayServer,
    upstream: OpenAIServer,
) -> None:
    upstream.script = sequence(tool_reply(HANDOFF), tool_reply("add", {"a": 2, "b": 3}), "5")

    async def task(model: OpenAIChatCompletionsModel) -> None:
        assert (await Runner.run(triage_agent(model), "what is 2 + 3?")).final_output == "5"

    _, spans = await run(task, store, tracer, gateway)
    assert [call.agent for call in joined_calls(spans).calls] == [
        "triage",
        "specialist",
        "specialist",
    ]
    asking = spans_of_type(spans, semconv.SPAN_TYPE_LLM)[1]
    asked = json.loads(str(asking.attributes[semconv.AGL_TOOL_CALLS]))
    assert [(c["name"], json.loads(c["arguments"])) for c in asked] == [("add", {"a": 2, "b": 3})]
    [tool_span] = spans_of_type(spans, semconv.SPAN_TYPE_TOOL)
    assert tool_span.attributes[semconv.AGL_TOOL_NAME] == "add"
    assert json.loads(str(tool_span.attributes[semconv.AGL_TOOL_ARGUMENTS])) == {"a": 2, "b": 3}
    assert tool_span.attributes[semconv.AGL_TOOL_RESULT] == "5"


async def test_an_agent_run_as_a_tool_owns_the_calls_it_makes(
    instrumented: OpenAIAgentsInstrumentor,
    store: MemoryStore,
    tracer: agl.Tracer,
    gateway: GatewayServer,
    upstream: OpenAIServer,
) -> None:
    upstream.script = sequence(tool_reply("ask_specialist", {"input": "2 + 3?"}), "5", "it is 5")

    async def task(model: OpenAIChatCompletionsModel) -> None:
        specialist = Agent(name="specialist", instructions="Answer the question.", model=model)
        tool = specialist.as_tool(tool_name="ask_specialist", tool_description="Ask an expert.")
        manager = Agent(name="manager", model=model, tools=[tool])
        assert (await Runner.run(manager, "what is 2 + 3?")).final_output == "it is 5"

    _, spans = await run(task, store, tracer, gateway)
    agents = [call.agent for call in joined_calls(spans).calls]
    assert agents == ["manager", "specialist", "manager"]
    [tool_span] = spans_of_type(spans, semconv.SPAN_TYPE_TOOL)
    assert tool_span.attributes[semconv.AGL_TOOL_NAME] == "ask_specialist"
    assert tool_span.attributes[semconv.AGL_TOOL_RESULT] == "5"


async def test_streamed_runs_carry_their_response_ids(
    instrumented: OpenAIAgentsInstrumentor,
    store: MemoryStore,
    tracer: agl.Tracer,
    gateway: GatewayServer,
    upstream: OpenAIServer,
) -> None:
    upstream.script = sequence(tool_reply(HANDOFF), tool_reply("add", {"a": 2, "b": 3}), "5")

    async def task(model: OpenAIChatCompletionsModel) -> None:
        result = Runner.run_streamed(triage_agent(model), "what is 2 + 3?")
        deltas = [event async for event in result.stream_events()]
        assert deltas
        assert result.final_output == "5"

    _, spans = await run(task, store, tracer, gateway)
    calls = joined_calls(spans)
    assert [call.agent for call in calls.calls] == ["triage", "specialist", "specialist"]
    assert all(
        semconv.GEN_AI_RESPONSE_ID in s.attributes
        for s in spans_of_type(spans, semconv.SPAN_TYPE_LLM)
    )
    assert len(spans_of_type(spans, semconv.SPAN_TYPE_TOOL)) == 1


async def test_lightningrl_trains_only_the_selected_agent(
    instrumented: OpenAIAgentsInstrumentor,
    store: MemoryStore,
    tracer: agl.Tracer,
    gateway: GatewayServer,
) -> None:
    ids = [(await run(ask, store, tracer, gateway, reward=r))[0] for r in (1.0, 0.0)]
    results = await fetch_results(store, [await store.get_rollout(i) for i in ids])
    batch = TransitionBuilder(agents=["specialist"]).build(results)
    assert [t.agent for t in batch] == ["specialist", "specialist"]
    assert [t.reward for t in batch] == [1.0, 0.0]
    assert batch[0].advantage > 0 > batch[1].advantage
    assert batch.report.notes["other_agents_calls"] == 2
    assert all("Answer the question." in decode(t.prompt_ids) for t in batch)
    assert all(decode(t.response_ids) == "ok: what is 2 + 3?" for t in batch)


async def test_with_the_openai_instrumentation_too_each_call_counts_once(
    instrumented: OpenAIAgentsInstrumentor,
    store: MemoryStore,
    tracer: agl.Tracer,
    gateway: GatewayServer,
) -> None:
    openai = OpenAIInstrumentation(tracer)
    openai.instrument()
    try:
        _, spans = await run(ask, store, tracer, gateway)
    finally:
        openai.uninstrument()
    assert len(spans_of_type(spans, semconv.SPAN_TYPE_LLM)) == 4  # the SDK's span, the client's
    calls = extract_calls(spans)
    assert [(call.agent, call.has_tokens) for call in calls.calls] == [
        ("triage", True),
        ("specialist", True),
    ]
    assert calls.counts["duplicate_llm_spans"] == 2
