"""Real LangGraph graphs and LangChain chat models, through agl's gateway, read by LightningRL.

Every test runs its agent inside ``tracer.rollout(...)`` with ``ChatOpenAI`` pointed at the
rollout's gateway URL; the gateway forwards to the scripted OpenAI-compatible server and
records the token ids. ``extract_calls`` must then find each call exactly once, joined with the
gateway's token ids on the response id (never by order) and given to the right agent.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypedDict

import pytest
from langchain_core.messages import BaseMessage, HumanMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph
from pydantic import BaseModel

import agl
from agl import TransitionBuilder, semconv
from agl._results import fetch_results
from agl.gateway import GatewayServer
from agl.lightning import extract_calls
from agl.store._memory import MemoryStore
from agl.testing.gateway_rollouts import (
    joined_calls,
    run_through_gateway,
)
from agl.testing.openai_server import OpenAIServer, decode, sequence, tool_reply
from agl.tracing._openai import OpenAIInstrumentation
from agl_langchain.instrumentor import LangChainInstrumentor

pytestmark = pytest.mark.anyio

Agent = Callable[[ChatOpenAI], Awaitable[Any]]


class State(TypedDict):
    text: str


class Answer(BaseModel):
    value: int


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@pytest.fixture
def instrumented(tracer: agl.Tracer) -> Iterator[LangChainInstrumentor]:
    instrumentor = LangChainInstrumentor(tracer)
    instrumentor.instrument()
    yield instrumentor
    instrumentor.uninstrument()


async def run(
    agent: Agent,
    store: MemoryStore,
    tracer: agl.Tracer,
    gateway: GatewayServer,
    *,
    reward: float | None = None,
) -> tuple[str, list[agl.Span]]:
    """Run ``agent(model)`` as one rollout through the gateway; return its id and spans."""

    async def job(base_url: str) -> None:
        await agent(ChatOpenAI(model="m", base_url=base_url, api_key="k", max_retries=0))

    return await run_through_gateway(job, store, tracer, gateway, reward=reward)


def llm_spans(spans: list[agl.Span]) -> list[agl.Span]:
    return [s for s in spans if s.attributes.get(semconv.AGL_SPAN_TYPE) == semconv.SPAN_TYPE_LLM]


def writer_checker(model: ChatOpenAI) -> CompiledStateGraph[Any, Any, Any, Any]:
    async def writer(state: State) -> State:
        return {"text": str((await model.ainvoke(f"write about {state['text']}")).content)}

    async def checker(state: State) -> State:
        return {"text": str((await model.ainvoke(f"check: {state['text']}")).content)}

    graph = StateGraph(State)
    graph.add_node("writer", writer)
    graph.add_node("checker", checker)
    graph.add_edge(START, "writer")
    graph.add_edge("writer", "checker")
    graph.add_edge("checker", END)
    return graph.compile()


async def test_each_node_is_an_agent_and_its_calls_join_the_gateway(
    instrumented: LangChainInstrumentor,
    store: MemoryStore,
    tracer: agl.Tracer,
    gateway: GatewayServer,
) -> None:
    async def agent(model: ChatOpenAI) -> None:
        result = await writer_checker(model).ainvoke({"text": "otters"})
        assert result["text"] == "ok: check: ok: write about otters"

    _, spans = await run(agent, store, tracer, gateway)
    calls = joined_calls(spans)
    assert [call.agent for call in calls.calls] == ["writer", "checker"]
    nodes = {
        s.name: s.attributes
        for s in spans
        if s.attributes.get(semconv.AGL_SPAN_TYPE) == semconv.SPAN_TYPE_AGENT
    }
    assert {name: a[semconv.AGL_AGENT_NAME] for name, a in nodes.items()} == {
        "writer": "writer",
        "checker": "checker",
    }
    first = llm_spans(spans)[0].attributes
    assert first[semconv.GEN_AI_OPERATION_NAME] == "chat"
    assert first[semconv.GEN_AI_REQUEST_MODEL] == first[semconv.GEN_AI_RESPONSE_MODEL] == "m"
    assert isinstance(first[semconv.GEN_AI_USAGE_INPUT_TOKENS], int)
    sent = json.loads(str(first[semconv.GEN_AI_INPUT_MESSAGES]))
    assert sent[0]["parts"][0]["content"] == "write about otters"


async def test_streamed_calls_carry_their_response_id(
    instrumented: LangChainInstrumentor,
    store: MemoryStore,
    tracer: agl.Tracer,
    gateway: GatewayServer,
) -> None:
    async def agent(model: ChatOpenAI) -> None:
        pieces = [str(chunk.content) async for chunk in model.astream("first")]
        assert "".join(pieces) == "ok: first"
        assert "".join(str(chunk.content) for chunk in model.stream("second")) == "ok: second"
        streaming = model.model_copy(update={"streaming": True})
        assert (await streaming.ainvoke("third")).content == "ok: third"

    _, spans = await run(agent, store, tracer, gateway)
    assert len(joined_calls(spans).calls) == 3
    assert all(semconv.GEN_AI_RESPONSE_ID in s.attributes for s in llm_spans(spans))


async def test_a_tool_call_round_trip_records_both_calls_and_the_tool(
    instrumented: LangChainInstrumentor,
    store: MemoryStore,
    tracer: agl.Tracer,
    gateway: GatewayServer,
    upstream: OpenAIServer,
) -> None:
    upstream.script = sequence(tool_reply("add", {"a": 2, "b": 3}), "2 + 3 = 5")

    async def agent(model: ChatOpenAI) -> None:
        bound = model.bind_tools([add])
        messages: list[BaseMessage] = [HumanMessage("what is 2 + 3?")]
        asked = await bound.ainvoke(messages)
        [call] = asked.tool_calls
        messages += [asked, await add.ainvoke(call)]
        assert (await bound.ainvoke(messages)).content == "2 + 3 = 5"

    _, spans = await run(agent, store, tracer, gateway)
    assert len(joined_calls(spans).calls) == 2
    asked = json.loads(str(llm_spans(spans)[0].attributes[semconv.AGL_TOOL_CALLS]))
    assert [(c["name"], json.loads(c["arguments"])) for c in asked] == [("add", {"a": 2, "b": 3})]
    [tool_span] = [
        s for s in spans if s.attributes.get(semconv.AGL_SPAN_TYPE) == semconv.SPAN_TYPE_TOOL
    ]
    assert tool_span.attributes[semconv.AGL_TOOL_NAME] == "add"
    assert json.loads(str(tool_span.attributes[semconv.AGL_TOOL_ARGUMENTS])) == {"a": 2, "b": 3}
    assert tool_span.attributes[semconv.AGL_TOOL_RESULT] == "5"


async def test_structured_output_is_an_llm_call(
    instrumented: LangChainInstrumentor,
    store: MemoryStore,
    tracer: agl.Tracer,
    gateway: GatewayServer,
    upstream: OpenAIServer,
) -> None:
    upstream.script = lambda request: '{"value": 5}'

    async def agent(model: ChatOpenAI) -> None:
        assert await model.with_structured_output(Answer).ainvoke("2 + 3?") == Answer(value=5)

    _, spans = await run(agent, store, tracer, gateway)
    assert len(joined_calls(spans).calls) == 1


async def test_agents_are_named_by_their_outermost_node_or_their_own_name(
    instrumented: LangChainInstrumentor,
    store: MemoryStore,
    tracer: agl.Tracer,
    gateway: GatewayServer,
) -> None:
    """A subgraph node names the calls of its inner nodes; an explicit agent name wins."""

    async def agent(model: ChatOpenAI) -> None:
        async def ask(state: State) -> State:
            return {"text": str((await model.ainvoke(state["text"])).content)}

        # A prebuilt agent as a node: its own nodes ("plan", "act") are plumbing.
        inner = StateGraph(State)
        inner.add_node("plan", ask)
        inner.add_node("act", ask)
        inner.add_edge(START, "plan")
        inner.add_edge("plan", "act")
        inner.add_edge("act", END)
        researcher = inner.compile()
        # What langchain.agents.create_agent(..., name="helper") returns: the compiled graph
        # with {"metadata": {"lc_agent_name": name}} in its config.
        helper = researcher.with_config({"metadata": {"lc_agent_name": "helper"}})

        async def writer(state: State) -> State:
            return await helper.ainvoke(state)  # type: ignore[return-value]

        outer = StateGraph(State)
        outer.add_node("researcher", researcher)
        outer.add_node("writer", writer)
        outer.add_edge(START, "researcher")
        outer.add_edge("researcher", "writer")
        outer.add_edge("writer", END)
        await outer.compile().ainvoke({"text": "go"})
        # A named runnable outside any graph is an agent too.
        await model.with_config({"metadata": {"lc_agent_name": "critic"}}).ainvoke("fine?")

    _, spans = await run(agent, store, tracer, gateway)
    agents = [call.agent for call in joined_calls(spans).calls]
    assert agents == ["researcher", "researcher", "helper", "helper", "critic"]
    # That call's own LLM span names the agent, and stays an LLM span.
    named = [s.attributes.get(semconv.AGL_AGENT_NAME) for s in llm_spans(spans)]
    assert [name for name in named if name is not None] == ["critic"]


async def test_a_react_agent_added_as_a_node_is_one_agent(
    instrumented: LangChainInstrumentor,
    store: MemoryStore,
    tracer: agl.Tracer,
    gateway: GatewayServer,
    upstream: OpenAIServer,
) -> None:
    from langgraph.prebuilt import create_react_agent
    from langgraph.warnings import LangGraphDeprecatedSinceV10

    upstream.script = sequence(tool_reply("add", {"a": 1, "b": 1}), "2")

    async def agent(model: ChatOpenAI) -> None:
        # create_react_agent is deprecated in favour of langchain.agents.create_agent (not
        # installed here); it still builds the prebuilt ReAct graph this test is about.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", LangGraphDeprecatedSinceV10)
            react = create_react_agent(model, [add], name="solver")
        graph = StateGraph(MessagesState)
        graph.add_node("solver", react)
        graph.add_edge(START, "solver")
        graph.add_edge("solver", END)
        await graph.compile().ainvoke({"messages": [HumanMessage("1 + 1?")]})

    _, spans = await run(agent, store, tracer, gateway)
    assert [call.agent for call in joined_calls(spans).calls] == [
        "solver",
        "solver",
    ]


async def test_lightningrl_trains_only_the_selected_agent(
    instrumented: LangChainInstrumentor,
    store: MemoryStore,
    tracer: agl.Tracer,
    gateway: GatewayServer,
) -> None:
    async def agent(model: ChatOpenAI) -> None:
        await writer_checker(model).ainvoke({"text": "otters"})

    ids = [(await run(agent, store, tracer, gateway, reward=r))[0] for r in (1.0, 0.0)]
    results = await fetch_results(store, [await store.get_rollout(i) for i in ids])
    batch = TransitionBuilder(agents=["writer"]).build(results)
    assert [t.agent for t in batch] == ["writer", "writer"]
    assert [t.reward for t in batch] == [1.0, 0.0]
    assert batch[0].advantage > 0 > batch[1].advantage
    assert batch.report.notes["other_agents_calls"] == 2
    assert all("write about otters" in decode(t.prompt_ids) for t in batch)


async def test_with_the_openai_instrumentation_too_each_call_counts_once(
    instrumented: LangChainInstrumentor,
    store: MemoryStore,
    tracer: agl.Tracer,
    gateway: GatewayServer,
) -> None:
    openai = OpenAIInstrumentation(tracer)
    openai.instrument()
    try:

        async def agent(model: ChatOpenAI) -> None:
            await writer_checker(model).ainvoke({"text": "otters"})

        _, spans = await run(agent, store, tracer, gateway)
    finally:
        openai.uninstrument()
    assert len(llm_spans(spans)) == 4  # each call twice: LangChain's span and the client's
    calls = extract_calls(spans)
    assert [(call.agent, call.has_tokens) for call in calls.calls] == [
        ("writer", True),
        ("checker", True),
    ]


async def test_a_failed_call_recorded_by_both_instrumentations_counts_once(
    instrumented: LangChainInstrumentor,
    store: MemoryStore,
    tracer: agl.Tracer,
    upstream: OpenAIServer,
) -> None:
    from agl import _rollout_facts as rollout_facts
    from agl._results import summarize
    from agl.testing.openai_server import echo, error_reply

    upstream.script = lambda body: error_reply(500, "the engine is down")
    openai = OpenAIInstrumentation(tracer)
    openai.instrument()
    try:
        with GatewayServer([upstream.url], store) as gateway:

            async def agent(model: ChatOpenAI) -> None:
                async def writer(state: State) -> State:
                    with pytest.raises(Exception, match="the engine is down"):
                        await model.ainvoke("write")
                    return state

                graph = StateGraph(State)
                graph.add_node("writer", writer)
                graph.add_edge(START, "writer")
                graph.add_edge("writer", END)
                await graph.compile().ainvoke({"text": "x"})

            rollout_id, spans = await run(agent, store, tracer, gateway)
    finally:
        openai.uninstrument()
        upstream.script = echo  # the module's server, as the other tests expect it
    assert len(llm_spans(spans)) == 2  # LangChain's span and the client's, neither with an id
    calls = extract_calls(spans)
    assert [call.agent for call in calls.calls] == ["writer"]  # was: writer, and one of no agent
    assert calls.counts["duplicate_llm_spans"] == 1
    rollout = await store.get_rollout(rollout_id)
    attempts = await store.query_attempts(rollout_id)
    assert summarize(rollout, attempts, spans).llm_calls == 1
    counts = rollout_facts.llm_calls(spans)  # what `agl rollouts show` prints
    assert counts["llm"]["calls"] == 1
    assert counts["gateway"]["calls"] == 1
