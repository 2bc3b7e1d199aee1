"""Real AutoGen agents, through agl's gateway, read by LightningRL.

Every test runs its agents inside ``tracer.rollout(...)`` with an ``OpenAIChatCompletionClient``
pointed at the rollout's gateway URL; the gateway forwards to the scripted OpenAI-compatible
server and records the token ids. ``extract_calls`` must then find each call exactly once,
joined with the gateway's token ids on the response id (never by order) and given to the right
agent: a writer and a critic take turns in a ``RoundRobinGroupChat``.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.conditions import MaxMessageTermination
from autogen_agentchat.messages import TextMessage
from autogen_agentchat.teams import RoundRobinGroupChat
from autogen_core.models import ModelFamily, ModelInfo
from autogen_core.tools import FunctionTool
from autogen_ext.models.openai import OpenAIChatCompletionClient

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
from agl.testing.openai_server import OpenAIServer, decode, sequence, tool_reply
from agl.tracing._openai import OpenAIInstrumentation
from agl_autogen.instrumentor import AutogenInstrumentor

pytestmark = pytest.mark.anyio

Task = Callable[[OpenAIChatCompletionClient], Awaitable[Any]]

MODEL_INFO = ModelInfo(
    vision=False,
    function_calling=True,
    json_output=False,
    family=ModelFamily.UNKNOWN,
    structured_output=False,
)
TASK = "write a line about otters"


async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def team(client: OpenAIChatCompletionClient) -> RoundRobinGroupChat:
    writer = AssistantAgent("writer", model_client=client, system_message="Write one line.")
    critic = AssistantAgent("critic", model_client=client, system_message="Critique the line.")
    return RoundRobinGroupChat([writer, critic], termination_condition=MaxMessageTermination(3))


@pytest.fixture
def instrumented(tracer: agl.Tracer) -> Iterator[AutogenInstrumentor]:
    instrumentor = AutogenInstrumentor(tracer)
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
    """Run ``task(client)`` as one rollout through the gateway; return its id and spans."""

    async def job(base_url: str) -> None:
        client = OpenAIChatCompletionClient(
            model="m", base_url=base_url, api_key="k", model_info=MODEL_INFO, max_retries=0
        )
        try:
            await task(client)
        finally:
            await client.close()

    return await run_through_gateway(job, store, tracer, gateway, reward=reward)


async def discuss(client: OpenAIChatCompletionClient) -> None:
    result = await team(client).run(task=TASK)
    assert [m.source for m in result.messages] == ["user", "writer", "critic"]


async def test_a_team_gives_each_agent_its_own_calls(
    instrumented: AutogenInstrumentor,
    store: MemoryStore,
    tracer: agl.Tracer,
    gateway: GatewayServer,
) -> None:
    _, spans = await run(discuss, store, tracer, gateway)
    calls = joined_calls(spans)
    assert [call.agent for call in calls.calls] == ["writer", "critic"]
    agents = spans_of_type(spans, semconv.SPAN_TYPE_AGENT)
    assert [(s.name, s.attributes[semconv.AGL_AGENT_NAME]) for s in agents] == [
        ("writer.on_messages_stream", "writer"),
        ("critic.on_messages_stream", "critic"),
    ]
    first, second = (s.attributes for s in spans_of_type(spans, semconv.SPAN_TYPE_LLM))
    assert first[semconv.GEN_AI_OPERATION_NAME] == "chat"
    assert first[semconv.GEN_AI_RESPONSE_MODEL] == "m"
    assert isinstance(first[semconv.GEN_AI_USAGE_INPUT_TOKENS], int)
    assert isinstance(first[semconv.GEN_AI_USAGE_OUTPUT_TOKENS], int)
    sent = json.loads(str(second[semconv.GEN_AI_INPUT_MESSAGES]))
    assert sent[0]["parts"] == [{"type": "text", "content": "Critique the line."}]


async def test_a_function_tool_round_trip_records_both_calls_and_the_tool(
    instrumented: AutogenInstrumentor,
    store: MemoryStore,
    tracer: agl.Tracer,
    gateway: GatewayServer,
    upstream: OpenAIServer,
) -> None:
    upstream.script = sequence(tool_reply("add", {"a": 2, "b": 3}), "5")

    async def task(client: OpenAIChatCompletionClient) -> None:
        tool = FunctionTool(add, description="Add two integers.")
        agent = AssistantAgent(
            "calculator", model_client=client, tools=[tool], reflect_on_tool_use=True
        )
        result = await agent.run(task="what is 2 + 3?")
        last = result.messages[-1]
        assert isinstance(last, TextMessage)
        assert last.content == "5"

    _, spans = await run(task, store, tracer, gateway)
    # run() returns at the agent's response: its span must end then, inside the rollout.
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


async def test_streamed_calls_carry_their_response_ids(
    instrumented: AutogenInstrumentor,
    store: MemoryStore,
    tracer: agl.Tracer,
    gateway: GatewayServer,
) -> None:
    async def task(client: OpenAIChatCompletionClient) -> None:
        writer = AssistantAgent("writer", model_client=client, model_client_stream=True)
        events = [event async for event in writer.run_stream(task=TASK)]
        assert events

    _, spans = await run(task, store, tracer, gateway)
    assert [call.agent for call in joined_calls(spans).calls] == ["writer"]


async def test_lightningrl_trains_only_the_selected_agent(
    instrumented: AutogenInstrumentor,
    store: MemoryStore,
    tracer: agl.Tracer,
    gateway: GatewayServer,
) -> None:
    ids = [(await run(discuss, store, tracer, gateway, reward=r))[0] for r in (1.0, 0.0)]
    results = await fetch_results(store, [await store.get_rollout(i) for i in ids])
    batch = TransitionBuilder(agents=["critic"]).build(results)
    assert [t.agent for t in batch] == ["critic", "critic"]
    assert [t.reward for t in batch] == [1.0, 0.0]
    assert batch[0].advantage > 0 > batch[1].advantage
    assert batch.report.notes["other_agents_calls"] == 2
    assert all("Critique the line." in decode(t.prompt_ids) for t in batch)
    assert all(decode(t.response_ids) == f"ok: ok: {TASK}" for t in batch)


async def test_with_the_openai_instrumentation_too_each_call_counts_once(
    instrumented: AutogenInstrumentor,
    store: MemoryStore,
    tracer: agl.Tracer,
    gateway: GatewayServer,
) -> None:
    openai = OpenAIInstrumentation(tracer)
    openai.instrument()
    try:
        _, spans = await run(discuss, store, tracer, gateway)
    finally:
        openai.uninstrument()
    assert len(spans_of_type(spans, semconv.SPAN_TYPE_LLM)) == 4  # AutoGen's span, the client's
    calls = extract_calls(spans)
    assert [(call.agent, call.has_tokens) for call in calls.calls] == [
        ("writer", True),
        ("critic", True),
    ]
    assert calls.counts["duplicate_llm_spans"] == 2
