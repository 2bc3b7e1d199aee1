"""The adapter package (the shared suite), and what is the Agents SDK's own: trace processors,
Responses API calls, runs in flight at uninstrument, a release without the wrapped steps."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from agents import (
    Agent,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    Runner,
    add_trace_processor,
    set_trace_processors,
)
from agents.tracing import Span, Trace, TracingProcessor, get_trace_provider
from openai import AsyncOpenAI

import agl
from agl import RolloutRequest, semconv
from agl.store._memory import MemoryStore
from agl.testing.adapter import AdapterConformance
from agl.testing.instrumentor import RecordingOpenAIServer
from agl.testing.openai_server import OpenAIServer, Reply, echo
from agl_openai_agents.instrumentor import OpenAIAgentsInstrumentor

PATCHED = ("_fetch_response", "_populate_stream_generation_span")


class TestOpenAIAgentsAdapter(AdapterConformance):
    package = "agl_openai_agents"
    plugin = "openai-agents"
    instrumentor = "OpenAIAgentsInstrumentor"
    framework_modules = ("agents", "openai")
    patched = tuple(
        ("agents.models.openai_chatcompletions:OpenAIChatCompletionsModel", name)
        for name in PATCHED
    )


class Recorder(TracingProcessor):
    """A trace processor of the application's own: it notes the span types it sees."""

    def __init__(self) -> None:
        self.types: list[str] = []

    def on_trace_start(self, trace: Trace) -> None:
        pass

    def on_trace_end(self, trace: Trace) -> None:
        pass

    def on_span_start(self, span: Span[Any]) -> None:
        pass

    def on_span_end(self, span: Span[Any]) -> None:
        self.types.append(span.span_data.type)

    def shutdown(self) -> None:
        pass

    def force_flush(self) -> None:
        pass


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def tracers() -> Iterator[tuple[agl.Tracer, agl.Tracer]]:
    with agl.Tracer(MemoryStore()) as first, agl.Tracer(MemoryStore()) as second:
        yield first, second


@pytest.fixture
async def tracer() -> AsyncIterator[agl.Tracer]:
    async with MemoryStore() as store:
        with agl.Tracer(store) as tracer:
            yield tracer


@pytest.fixture(scope="module")
def module_server() -> Iterator[RecordingOpenAIServer]:
    with RecordingOpenAIServer() as server:
        yield server


@pytest.fixture
def server(module_server: RecordingOpenAIServer) -> Iterator[RecordingOpenAIServer]:
    yield module_server
    module_server.script = echo


def patched_methods() -> tuple[object, ...]:
    return tuple(vars(OpenAIChatCompletionsModel)[name] for name in PATCHED)


def registered_processors() -> list[TracingProcessor]:
    # The SDK cannot list its processors; its default provider keeps them here.
    return list(get_trace_provider()._multi_processor._processors)  # type: ignore[attr-defined]


async def run_agent(
    tracer: agl.Tracer,
    server: OpenAIServer,
    prompt: str = "hi",
    model_class: type[OpenAIChatCompletionsModel | OpenAIResponsesModel] = (
        OpenAIChatCompletionsModel
    ),
) -> list[agl.Span]:
    """Run one agent in a new rollout; return the rollout's spans but its root."""
    [rollout] = await tracer.store.enqueue_rollouts([RolloutRequest(input=prompt)])
    [claim] = await tracer.store.dequeue_rollouts(limit=1)
    async with (
        AsyncOpenAI(base_url=server.url, api_key="k", max_retries=0) as client,
        tracer.rollout(rollout.rollout_id, claim.attempt.attempt_id),
    ):
        model = model_class(model="m", openai_client=client)
        await Runner.run(Agent(name="assistant", model=model), prompt)
    spans = await tracer.store.query_spans(rollout.rollout_id)
    return [s for s in spans if s.attributes.get(semconv.AGL_SPAN_TYPE) != "rollout"]


def test_uninstrument_puts_the_sdk_back_as_it_was(tracers: tuple[agl.Tracer, agl.Tracer]) -> None:
    before, processors = patched_methods(), registered_processors()
    instrumentor = OpenAIAgentsInstrumentor(tracers[0])
    instrumentor.instrument()
    during = patched_methods()
    assert all(a is not b for a, b in zip(before, during, strict=True))
    assert len(registered_processors()) == len(processors) + 1
    instrumentor.instrument()
    assert patched_methods() == during  # not wrapped twice
    assert len(registered_processors()) == len(processors) + 1
    instrumentor.uninstrument()
    assert patched_methods() == before
    assert registered_processors() == processors
    instrumentor.uninstrument()
    assert patched_methods() == before


@pytest.mark.anyio
async def test_an_unstreamed_responses_api_call_carries_the_servers_response_id(
    tracer: agl.Tracer, server: RecordingOpenAIServer
) -> None:
    instrumentor = OpenAIAgentsInstrumentor(tracer)
    instrumentor.instrument()
    try:
        spans = await run_agent(tracer, server, "unstreamed", OpenAIResponsesModel)
    finally:
        instrumentor.uninstrument()
    [llm] = [s for s in spans if s.attributes.get(semconv.AGL_SPAN_TYPE) == semconv.SPAN_TYPE_LLM]
    assert {llm.attributes[semconv.GEN_AI_RESPONSE_ID]} == server.response_ids("unstreamed")


@pytest.mark.anyio
async def test_the_applications_own_trace_processors_keep_working(
    tracer: agl.Tracer, server: OpenAIServer
) -> None:
    recorder = Recorder()
    add_trace_processor(recorder)
    instrumentor = OpenAIAgentsInstrumentor(tracer)
    try:
        instrumentor.instrument()
        spans = await run_agent(tracer, server)
        instrumentor.uninstrument()
        assert recorder in registered_processors()
    finally:
        instrumentor.uninstrument()
        set_trace_processors([p for p in registered_processors() if p is not recorder])
    assert "generation" in recorder.types
    assert len(spans) == len(recorder.types) + 1  # and the run's own (trace) span


@pytest.mark.anyio
async def test_a_run_in_flight_at_uninstrument_is_still_recorded_whole(
    tracer: agl.Tracer, server: OpenAIServer
) -> None:
    called = threading.Event()

    def slow(request: dict[str, Any]) -> Reply:
        called.set()
        return Reply(text="slow", delay=0.5)

    server.script = slow
    instrumentor = OpenAIAgentsInstrumentor(tracer)
    instrumentor.instrument()
    try:
        running = asyncio.create_task(run_agent(tracer, server))
        assert await asyncio.to_thread(called.wait, 10)  # the model call is under way
        instrumentor.uninstrument()
        spans = await running
    finally:
        instrumentor.uninstrument()
    agents = [s.attributes.get(semconv.AGL_AGENT_NAME) for s in spans]
    assert [name for name in agents if name is not None] == ["assistant"]
    assert any(semconv.GEN_AI_RESPONSE_ID in s.attributes for s in spans)
    assert await run_agent(tracer, server) == []  # a run that starts afterwards is not traced


def test_without_the_steps_it_wraps_calls_go_without_response_ids(
    tracers: tuple[agl.Tracer, agl.Tracer],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An SDK release without them still gets agents, tools and Responses API calls traced."""
    monkeypatch.delattr(OpenAIChatCompletionsModel, "_populate_stream_generation_span")
    fetch = vars(OpenAIChatCompletionsModel)["_fetch_response"]
    instrumentor = OpenAIAgentsInstrumentor(tracers[0])
    with caplog.at_level(logging.WARNING, logger="agl_openai_agents"):
        instrumentor.instrument()
    try:
        assert instrumentor.instrumented is True
        assert "recorded without their response id" in caplog.text
        assert vars(OpenAIChatCompletionsModel)["_fetch_response"] is fetch
    finally:
        instrumentor.uninstrument()
