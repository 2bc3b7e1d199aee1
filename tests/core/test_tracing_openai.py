"""The real OpenAI client, instrumented, against a real OpenAI-compatible server on loopback."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import openai
import packaging.version
import pytest

import agl
from agl import RolloutRequest, semconv
from agl.store._memory import MemoryStore
from agl.testing.openai_server import OpenAIServer, echo, error_reply, tool_reply
from agl.tracing._conventions import normalize_attributes
from agl.tracing._openai import OpenAIInstrumentation

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def server() -> Iterator[OpenAIServer]:
    with OpenAIServer() as server:
        yield server


@pytest.fixture
def client(server: OpenAIServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=server.url, api_key="test", max_retries=0) as client:
        yield client


@pytest.fixture
async def setup() -> AsyncIterator[tuple[agl.Store, agl.Tracer, OpenAIInstrumentation]]:
    async with MemoryStore() as store:
        with agl.Tracer(store) as tracer:
            instrumentation = OpenAIInstrumentation(tracer)
            instrumentation.instrument()
            try:
                yield store, tracer, instrumentation
            finally:
                instrumentation.uninstrument()


async def claim(store: agl.Store, count: int = 1) -> list[tuple[str, str]]:
    await store.enqueue_rollouts([RolloutRequest(input=i) for i in range(count)])
    claims = await store.dequeue_rollouts(limit=count)
    return [(c.rollout.rollout_id, c.attempt.attempt_id) for c in claims]


def llm_spans(spans: list[agl.Span]) -> list[agl.Span]:
    return [s for s in spans if s.attributes.get(semconv.AGL_SPAN_TYPE) == semconv.SPAN_TYPE_LLM]


async def test_every_kind_of_openai_call_is_recorded(client: openai.OpenAI, setup: Any) -> None:
    store, tracer, _ = setup
    [(rollout_id, attempt_id)] = await claim(store)
    messages: Any = [{"role": "user", "content": "what is 2+2?"}]
    async with tracer.rollout(rollout_id, attempt_id):
        plain = client.chat.completions.create(model="m", messages=messages)
        stream = client.chat.completions.create(
            model="m", messages=messages, stream=True, stream_options={"include_usage": True}
        )
        streamed = "".join(
            chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices
        )
        response = client.responses.create(model="m", input="hello there")
        completion = client.completions.create(model="m", prompt="2+2=", max_tokens=8)
    spans = llm_spans(await store.query_spans(rollout_id))
    assert len(spans) == 4
    by_id = {s.attributes[semconv.GEN_AI_RESPONSE_ID]: s for s in spans}
    assert set(by_id) >= {plain.id, response.id, completion.id}
    recorded = by_id[plain.id].attributes
    assert recorded[semconv.GEN_AI_REQUEST_MODEL] == "m"
    assert recorded[semconv.GEN_AI_USAGE_INPUT_TOKENS] == plain.usage.prompt_tokens  # type: ignore[union-attr]
    sent = json.loads(str(recorded[semconv.GEN_AI_INPUT_MESSAGES]))
    assert sent[0]["parts"][0]["content"] == "what is 2+2?"
    answer = json.loads(str(recorded[semconv.GEN_AI_OUTPUT_MESSAGES]))
    assert answer[0]["parts"][0]["content"] == plain.choices[0].message.content
    streaming = next(s for s in spans if s.attributes.get("gen_ai.is_streaming"))
    out = json.loads(str(streaming.attributes[semconv.GEN_AI_OUTPUT_MESSAGES]))
    assert out[0]["parts"][0]["content"] == streamed
    assert all(s.attempt_id == attempt_id for s in spans)


async def test_tool_calls_are_recorded(
    server: OpenAIServer, client: openai.OpenAI, setup: Any
) -> None:
    store, tracer, _ = setup
    [(rollout_id, attempt_id)] = await claim(store)
    tools: Any = [
        {"type": "function", "function": {"name": "calc", "parameters": {"type": "object"}}}
    ]
    server.script = lambda request: tool_reply("calc", {"expression": "2+2"})
    try:
        async with tracer.rollout(rollout_id, attempt_id):
            result = client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "2+2?"}], tools=tools
            )
    finally:
        server.script = echo
    [span] = llm_spans(await store.query_spans(rollout_id))
    [call] = json.loads(str(span.attributes[semconv.AGL_TOOL_CALLS]))
    assert call["name"] == "calc"
    assert json.loads(call["arguments"]) == {"expression": "2+2"}
    assert call["id"] == result.choices[0].message.tool_calls[0].id  # type: ignore[index]


async def test_a_failed_call_is_recorded_as_an_error(
    server: OpenAIServer, client: openai.OpenAI, setup: Any
) -> None:
    store, tracer, _ = setup
    [(rollout_id, attempt_id)] = await claim(store)
    server.script = lambda request: error_reply(503, "engine overloaded")
    try:
        async with tracer.rollout(rollout_id, attempt_id):
            with pytest.raises(openai.InternalServerError):
                client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "x"}]
                )
    finally:
        server.script = echo
    [span] = llm_spans(await store.query_spans(rollout_id))
    assert span.status.code == agl.StatusCode.ERROR


async def test_fifty_concurrent_rollouts_do_not_mix(server: OpenAIServer, setup: Any) -> None:
    store, tracer, _ = setup
    ids = await claim(store, 50)
    async with openai.AsyncOpenAI(base_url=server.url, api_key="test") as client:

        async def agent(index: int, rollout_id: str, attempt_id: str) -> None:
            async with tracer.rollout(rollout_id, attempt_id):
                for turn in range(2):
                    await client.chat.completions.create(
                        model="m",
                        messages=[{"role": "user", "content": f"rollout {index} turn {turn}"}],
                    )

        await asyncio.gather(*(agent(i, *pair) for i, pair in enumerate(ids)))
        for index, (rollout_id, _) in enumerate(ids):
            spans = llm_spans(await store.query_spans(rollout_id))
            contents = sorted(
                json.loads(str(s.attributes[semconv.GEN_AI_INPUT_MESSAGES]))[0]["parts"][0][
                    "content"
                ]
                for s in spans
            )
            assert contents == [f"rollout {index} turn 0", f"rollout {index} turn 1"]


async def test_instrumentation_is_idempotent_and_reversible(
    client: openai.OpenAI, setup: Any
) -> None:
    store, tracer, instrumentation = setup
    [(rollout_id, attempt_id), (second_id, second_attempt)] = await claim(store, 2)
    instrumentation.instrument()  # a second time: still one span per call
    async with tracer.rollout(rollout_id, attempt_id):
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "a"}])
    assert len(llm_spans(await store.query_spans(rollout_id))) == 1
    instrumentation.uninstrument()
    instrumentation.uninstrument()
    assert not instrumentation.instrumented
    async with tracer.rollout(second_id, second_attempt):
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "b"}])
    assert llm_spans(await store.query_spans(second_id)) == []


async def test_omitted_parameters_are_left_out_without_warnings(
    client: openai.OpenAI, setup: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store, tracer, _ = setup
    [(rollout_id, attempt_id)] = await claim(store)
    messages: Any = [{"role": "user", "content": "hi"}]
    async with tracer.rollout(rollout_id, attempt_id):
        client.chat.completions.create(
            model="m", messages=messages, top_p=openai.omit, temperature=0.5
        )
    [span] = llm_spans(await store.query_spans(rollout_id))
    assert "gen_ai.request.top_p" not in span.attributes
    assert span.attributes["gen_ai.request.temperature"] == 0.5
    assert not [r for r in caplog.records if "Invalid type" in r.getMessage()]


async def test_metrics_reach_an_installed_meter_provider(
    client: openai.OpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Without an SDK meter provider the instrumentation's metrics are skipped (they would go
    # nowhere); with one, they are recorded as the instrumentation records them.
    import opentelemetry.metrics
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    monkeypatch.setattr(opentelemetry.metrics, "get_meter_provider", lambda: provider)
    async with MemoryStore() as store:
        with agl.Tracer(store) as tracer:
            instrumentation = OpenAIInstrumentation(tracer)
            instrumentation.instrument()
            try:
                [(rollout_id, attempt_id)] = await claim(store)
                async with tracer.rollout(rollout_id, attempt_id):
                    client.chat.completions.create(
                        model="m", messages=[{"role": "user", "content": "hi"}]
                    )
            finally:
                instrumentation.uninstrument()
        assert len(llm_spans(await store.query_spans(rollout_id))) == 1
    data = reader.get_metrics_data()
    assert data is not None
    names = {
        metric.name
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
    }
    assert {"gen_ai.client.token.usage", "gen_ai.client.operation.duration"} <= names
    provider.shutdown()


async def test_sync_calls_inside_a_running_loop_start_no_thread(
    client: openai.OpenAI, setup: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The instrumentation's own sync path starts a thread and an event loop per call (1-2 ms)
    when a loop runs; agl records the request inline, until it uninstruments."""
    store, tracer, instrumentation = setup
    [(rollout_id, attempt_id)] = await claim(store)
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "warm"}])
    started: list[threading.Thread] = []
    original_start = threading.Thread.start

    def counting_start(thread: threading.Thread) -> None:
        started.append(thread)
        original_start(thread)

    monkeypatch.setattr(threading.Thread, "start", counting_start)
    async with tracer.rollout(rollout_id, attempt_id):
        for question in ("a", "b", "c"):
            client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": question}]
            )
        assert started == []
    spans = llm_spans(await store.query_spans(rollout_id))
    assert len(spans) == 3
    assert all(s.attributes[semconv.GEN_AI_REQUEST_MODEL] == "m" for s in spans)
    instrumentation.uninstrument()
    from opentelemetry.instrumentation.openai.shared import chat_wrappers
    from opentelemetry.instrumentation.openai.utils import run_async

    assert chat_wrappers.run_async is run_async  # the library's own again


async def test_traced_calls_do_not_parse_the_openai_version_again(
    client: openai.OpenAI, setup: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The instrumentation checks the openai version about a dozen times a call; agl answers
    those checks from one parse."""
    store, tracer, _ = setup
    [(rollout_id, attempt_id)] = await claim(store)
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "warm"}])
    parsed: list[str] = []
    original_parse = packaging.version.parse

    def counting_parse(text: str) -> packaging.version.Version:
        parsed.append(text)
        return original_parse(text)

    monkeypatch.setattr(packaging.version, "parse", counting_parse)
    async with tracer.rollout(rollout_id, attempt_id):
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        stream = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert parsed == []
    assert len(llm_spans(await store.query_spans(rollout_id))) == 2


async def test_usage_with_null_details_is_recorded_without_a_failure(
    server: OpenAIServer, client: openai.OpenAI, setup: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """vLLM answers with ``"prompt_tokens_details": null`` (so does the test server)."""
    store, tracer, _ = setup
    [(rollout_id, attempt_id)] = await claim(store)
    caplog.set_level(logging.DEBUG, logger="opentelemetry.instrumentation.openai")
    async with tracer.rollout(rollout_id, attempt_id):
        reply = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}]
        )
        completion = client.completions.create(model="m", prompt="2+2=", max_tokens=4)
    assert reply.usage is not None
    assert reply.usage.prompt_tokens_details is None
    assert not [r for r in caplog.records if "failed to trace" in r.getMessage()]
    spans = {
        s.attributes[semconv.GEN_AI_RESPONSE_ID]: s
        for s in llm_spans(await store.query_spans(rollout_id))
    }
    for response_id, usage in ((reply.id, reply.usage), (completion.id, completion.usage)):
        assert usage is not None
        recorded = spans[response_id].attributes
        assert recorded[semconv.GEN_AI_USAGE_INPUT_TOKENS] == usage.prompt_tokens
        assert recorded[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] == usage.completion_tokens
        assert recorded["gen_ai.usage.cache_read.input_tokens"] == 0


async def test_instrumentations_on_one_tracer_share_the_patches(
    client: openai.OpenAI, setup: Any
) -> None:
    store, tracer, first = setup
    second = OpenAIInstrumentation(tracer)
    second.instrument()
    [(one, one_attempt), (two, two_attempt)] = await claim(store, 2)
    async with tracer.rollout(one, one_attempt):
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "a"}])
    assert len(llm_spans(await store.query_spans(one))) == 1  # recorded once, not twice
    second.uninstrument()
    assert first.instrumented
    async with tracer.rollout(two, two_attempt):
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "b"}])
    assert len(llm_spans(await store.query_spans(two))) == 1  # the first one still holds them


async def test_a_second_tracer_is_refused_while_another_holds_the_patches(
    server: OpenAIServer, setup: Any
) -> None:
    store, _, first = setup
    with agl.Tracer(store) as other:
        refused = OpenAIInstrumentation(other)
        with pytest.raises(agl.AglError, match="another agl tracer"):
            refused.instrument()
        assert not refused.instrumented
        first.uninstrument()
        refused.instrument()  # free now
        refused.uninstrument()


def test_legacy_attributes_are_normalized() -> None:
    legacy = {
        "llm.request.type": "chat",
        "gen_ai.system": "openai",
        "gen_ai.usage.prompt_tokens": 11,
        "gen_ai.usage.completion_tokens": 3,
        "gen_ai.prompt.0.role": "user",
        "gen_ai.prompt.0.content": "hi",
        "gen_ai.completion.0.role": "assistant",
        "gen_ai.completion.0.tool_calls.0.id": "call-1",
        "gen_ai.completion.0.tool_calls.0.name": "search",
        "gen_ai.completion.0.tool_calls.0.arguments": '{"q": "x"}',
    }
    out = normalize_attributes(legacy)
    assert out[semconv.AGL_SPAN_TYPE] == semconv.SPAN_TYPE_LLM
    assert out[semconv.GEN_AI_PROVIDER_NAME] == "openai"
    assert (out[semconv.GEN_AI_USAGE_INPUT_TOKENS], out[semconv.GEN_AI_USAGE_OUTPUT_TOKENS]) == (
        11,
        3,
    )
    assert json.loads(out[semconv.GEN_AI_INPUT_MESSAGES]) == [
        {"role": "user", "parts": [{"type": "text", "content": "hi"}]}
    ]
    assert json.loads(out[semconv.AGL_TOOL_CALLS]) == [
        {"id": "call-1", "name": "search", "arguments": '{"q": "x"}'}
    ]
    assert normalize_attributes({"http.method": "GET"}) == {"http.method": "GET"}
