"""The gateway: the real OpenAI client, through the gateway, to a real OpenAI-compatible server."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import openai
import pytest

import agl
from agl import LLM, RolloutRequest, semconv
from agl.gateway import GatewayServer
from agl.store._memory import MemoryStore
from agl.testing.openai_server import (
    OpenAIServer,
    decode,
    echo,
    encode,
    error_reply,
    render_chat,
    text_reply,
    tool_reply,
)
from agl.testing.ports import free_port

pytestmark = pytest.mark.anyio
MESSAGES: Any = [{"role": "user", "content": "What is 2+2?"}]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def upstream() -> Iterator[OpenAIServer]:
    with OpenAIServer(max_model_len=512) as server:
        yield server


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore()


@pytest.fixture
def gateway(upstream: OpenAIServer, store: MemoryStore) -> Iterator[GatewayServer]:
    upstream.script = echo
    with GatewayServer([upstream.url], store) as server:
        yield server


async def claim(store: agl.Store, count: int = 1, **request: Any) -> list[tuple[str, str]]:
    await store.enqueue_rollouts([RolloutRequest(input=i, **request) for i in range(count)])
    claims = await store.dequeue_rollouts(limit=count)
    return [(c.rollout.rollout_id, c.attempt.attempt_id) for c in claims]


async def calls(gateway: GatewayServer, store: agl.Store, rollout_id: str) -> list[agl.Span]:
    assert gateway.gateway is not None
    assert await asyncio.to_thread(gateway.gateway.sender.flush, 10)
    spans = await store.query_spans(rollout_id)
    return [s for s in spans if s.attributes[semconv.AGL_SPAN_TYPE] == semconv.SPAN_TYPE_GATEWAY]


def client(gateway: GatewayServer, rollout_id: str, attempt_id: str) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=gateway.rollout_url(rollout_id, attempt_id), api_key="key", max_retries=0
    )


async def test_a_call_is_recorded_with_exact_token_ids(
    gateway: GatewayServer, store: MemoryStore
) -> None:
    [(rollout_id, attempt_id)] = await claim(store)
    reply = client(gateway, rollout_id, attempt_id).chat.completions.create(
        model="m", messages=MESSAGES
    )
    assert reply.choices[0].message.content == "ok: What is 2+2?"
    assert "token_ids" not in (reply.choices[0].model_extra or {})  # not asked for: not shown
    assert reply.choices[0].logprobs is None
    [span] = await calls(gateway, store, rollout_id)
    attributes = span.attributes
    prompt_ids = attributes[semconv.AGL_PROMPT_TOKEN_IDS]
    response_ids = attributes[semconv.AGL_RESPONSE_TOKEN_IDS]
    assert isinstance(prompt_ids, list)
    assert isinstance(response_ids, list)
    # decoding skips specials: the template's <|im_end|> is the EOS token
    text = render_chat(MESSAGES).replace("<|im_end|>", "")
    assert decode(prompt_ids) == text  # type: ignore[arg-type]
    assert prompt_ids == encode(render_chat(MESSAGES))
    assert decode(response_ids) == reply.choices[0].message.content  # type: ignore[arg-type]
    logprobs = attributes[semconv.AGL_RESPONSE_LOGPROBS]
    assert isinstance(logprobs, list)
    assert len(logprobs) == len(response_ids)
    assert all(isinstance(value, float) and value <= 0 for value in logprobs)
    assert attributes[semconv.GEN_AI_RESPONSE_ID] == reply.id
    assert json.loads(str(attributes[semconv.AGL_REQUEST_JSON]))["messages"] == MESSAGES
    assert float(attributes[semconv.AGL_UPSTREAM_LATENCY_MS]) > 0  # type: ignore[arg-type]
    assert span.status.code == agl.StatusCode.OK
    assert span.attempt_id == attempt_id


async def test_streaming_passes_through_and_is_assembled(
    gateway: GatewayServer, store: MemoryStore, upstream: OpenAIServer
) -> None:
    [(rollout_id, attempt_id)] = await claim(store)
    upstream.script = lambda request: text_reply("streamed answer, token by token")
    stream = client(gateway, rollout_id, attempt_id).chat.completions.create(
        model="m", messages=MESSAGES, stream=True
    )
    pieces = [chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices]
    assert len(pieces) > 3
    assert "".join(pieces) == "streamed answer, token by token"
    [span] = await calls(gateway, store, rollout_id)
    response_ids = span.attributes[semconv.AGL_RESPONSE_TOKEN_IDS]
    assert decode(response_ids) == "streamed answer, token by token"  # type: ignore[arg-type]
    assert span.attributes[semconv.AGL_PROMPT_TOKEN_IDS] == encode(render_chat(MESSAGES))
    logprobs = span.attributes[semconv.AGL_RESPONSE_LOGPROBS]
    assert len(logprobs) == len(response_ids)  # type: ignore[arg-type]
    recorded = json.loads(str(span.attributes[semconv.AGL_RESPONSE_JSON]))
    assert recorded["choices"][0]["message"]["content"] == "streamed answer, token by token"


async def test_token_ids_are_shown_to_agents_that_ask(
    gateway: GatewayServer, store: MemoryStore
) -> None:
    [(rollout_id, attempt_id)] = await claim(store)
    reply = client(gateway, rollout_id, attempt_id).chat.completions.create(
        model="m", messages=MESSAGES, extra_body={"return_token_ids": True}, logprobs=True
    )
    assert reply.model_extra is not None
    assert reply.model_extra["prompt_token_ids"] == encode(render_chat(MESSAGES))
    assert reply.choices[0].logprobs is not None


async def test_streamed_tool_calls_are_assembled(
    gateway: GatewayServer, store: MemoryStore, upstream: OpenAIServer
) -> None:
    [(rollout_id, attempt_id)] = await claim(store)
    upstream.script = lambda request: tool_reply("calculator", {"expression": "2+2"})
    tools: Any = [{"type": "function", "function": {"name": "calculator", "parameters": {}}}]
    stream = client(gateway, rollout_id, attempt_id).chat.completions.create(
        model="m", messages=MESSAGES, tools=tools, stream=True
    )
    arguments = "".join(
        chunk.choices[0].delta.tool_calls[0].function.arguments or ""  # type: ignore[index, union-attr]
        for chunk in stream
        if chunk.choices and chunk.choices[0].delta.tool_calls
    )
    assert json.loads(arguments) == {"expression": "2+2"}
    [span] = await calls(gateway, store, rollout_id)
    recorded = json.loads(str(span.attributes[semconv.AGL_RESPONSE_JSON]))
    [call] = recorded["choices"][0]["message"]["tool_calls"]
    assert call["function"]["name"] == "calculator"
    assert json.loads(call["function"]["arguments"]) == {"expression": "2+2"}
    assert recorded["choices"][0]["finish_reason"] == "tool_calls"


async def test_completions_endpoint(gateway: GatewayServer, store: MemoryStore) -> None:
    [(rollout_id, attempt_id)] = await claim(store)
    agent = client(gateway, rollout_id, attempt_id)
    plain = agent.completions.create(model="m", prompt="2+2=", max_tokens=30)
    streamed = "".join(
        chunk.choices[0].text
        for chunk in agent.completions.create(model="m", prompt="2+2=", max_tokens=30, stream=True)
    )
    assert streamed == plain.choices[0].text
    spans = await calls(gateway, store, rollout_id)
    assert len(spans) == 2
    for span in spans:
        assert span.attributes[semconv.AGL_PROMPT_TOKEN_IDS] == encode("2+2=")
        assert decode(span.attributes[semconv.AGL_RESPONSE_TOKEN_IDS]) == plain.choices[0].text  # type: ignore[arg-type]


async def test_upstream_errors_reach_the_agent_and_are_recorded(
    gateway: GatewayServer, store: MemoryStore, upstream: OpenAIServer
) -> None:
    [(rollout_id, attempt_id)] = await claim(store)
    agent = client(gateway, rollout_id, attempt_id)
    upstream.script = lambda request: error_reply(500, "engine crashed")
    with pytest.raises(openai.InternalServerError, match="engine crashed"):
        agent.chat.completions.create(model="m", messages=MESSAGES)
    upstream.script = echo
    too_long: Any = [{"role": "user", "content": "x" * 2000}]
    with pytest.raises(openai.BadRequestError, match="maximum context length"):
        agent.chat.completions.create(model="m", messages=too_long)
    with pytest.raises(openai.BadRequestError, match="maximum context length"):
        agent.chat.completions.create(model="m", messages=too_long, stream=True)
    spans = await calls(gateway, store, rollout_id)
    assert len(spans) == 3
    assert all(span.status.code == agl.StatusCode.ERROR for span in spans)
    assert "engine crashed" in (spans[0].status.description or "")
    assert "maximum context length" in (spans[1].status.description or "")


async def test_an_unreachable_upstream_is_a_502_not_a_crash(store: MemoryStore) -> None:
    [(rollout_id, attempt_id)] = await claim(store)
    with GatewayServer([f"http://127.0.0.1:{free_port()}/v1"], store) as gateway:
        with pytest.raises(openai.InternalServerError, match="unreachable"):
            client(gateway, rollout_id, attempt_id).chat.completions.create(
                model="m", messages=MESSAGES
            )
        [span] = await calls(gateway, store, rollout_id)
        assert "unreachable" in (span.status.description or "")
        async with httpx.AsyncClient() as http:
            assert (await http.get(f"{gateway.url}/health")).status_code == 200


async def test_unknown_rollouts_are_refused(gateway: GatewayServer, store: MemoryStore) -> None:
    [(rollout_id, _)] = await claim(store)
    with pytest.raises(openai.NotFoundError, match="ro-unknown"):
        client(gateway, "ro-unknown", "at-x").chat.completions.create(model="m", messages=MESSAGES)
    with pytest.raises(openai.NotFoundError, match="at-unknown"):
        client(gateway, rollout_id, "at-unknown").chat.completions.create(
            model="m", messages=MESSAGES
        )
    assert await calls(gateway, store, rollout_id) == []


async def test_a_client_that_hangs_up_mid_stream_is_recorded(
    gateway: GatewayServer, store: MemoryStore, upstream: OpenAIServer
) -> None:
    [(rollout_id, attempt_id)] = await claim(store)
    upstream.script = lambda request: text_reply("a slow answer " * 5, chunk_delay=0.05)
    url = gateway.rollout_url(rollout_id, attempt_id) + "/chat/completions"
    body = {"model": "m", "messages": MESSAGES, "stream": True}
    async with httpx.AsyncClient() as http, http.stream("POST", url, json=body) as response:
        async for _ in response.aiter_lines():
            break  # one event, then hang up
    await asyncio.sleep(0.5)
    [span] = await calls(gateway, store, rollout_id)
    assert span.status.code == agl.StatusCode.ERROR
    assert "disconnected" in (span.status.description or "")


async def test_calls_of_a_rollout_stick_to_one_upstream(store: MemoryStore) -> None:
    ids = await claim(store, 12)
    with OpenAIServer() as first, OpenAIServer() as second:
        with GatewayServer([first.url, second.url], store) as gateway:
            for rollout_id, attempt_id in ids:
                agent = client(gateway, rollout_id, attempt_id)
                for turn in range(3):
                    content = f"{rollout_id} {turn}"
                    agent.chat.completions.create(
                        model="m", messages=[{"role": "user", "content": content}]
                    )
        seen = {server.url: {r.body["messages"][0]["content"].split()[0] for r in server.requests}
                for server in (first, second)}  # fmt: skip
    assert seen[first.url]
    assert seen[second.url]
    assert not seen[first.url] & seen[second.url]
    assert seen[first.url] | seen[second.url] == {rollout_id for rollout_id, _ in ids}


async def test_the_rollouts_llm_resource_is_enforced(
    gateway: GatewayServer, store: MemoryStore, upstream: OpenAIServer
) -> None:
    update = await store.add_resources(
        {"policy": LLM(endpoint="x", model="policy-v7", sampling_parameters={"temperature": 0.3})}
    )
    [(rollout_id, attempt_id)] = await claim(store, resources_id=update.resources_id)
    with GatewayServer([upstream.url], store, enforce_resources=True) as enforcing:
        upstream.clear_requests()
        client(enforcing, rollout_id, attempt_id).chat.completions.create(
            model="whatever", messages=MESSAGES, temperature=1.0
        )
        [sent] = upstream.requests
        assert (sent.body["model"], sent.body["temperature"]) == ("policy-v7", 0.3)
        [span] = await calls(enforcing, store, rollout_id)
    assert span.attributes[semconv.AGL_RESOURCES_ID] == update.resources_id


async def test_with_several_llm_resources_the_one_served_here_is_enforced(
    store: MemoryStore, upstream: OpenAIServer
) -> None:
    """A run may publish a frozen LLM called directly, or two models behind two gateways: each
    gateway enforces the LLM whose endpoint points at it, and none when none does."""
    with GatewayServer([upstream.url], store, enforce_resources=True) as enforcing:
        frozen = LLM(endpoint="http://127.0.0.1:9/v1", model="frozen", sampling_parameters={})
        here = LLM(
            endpoint=enforcing.endpoint_template,
            model="policy-v2",
            sampling_parameters={"temperature": 0.5},
        )
        cases = [({"checker_llm": frozen, "llm": here}, ("policy-v2", 0.5))]
        cases += [({"a": frozen, "b": frozen.model_copy(update={"model": "other"})}, ("m", 1.0))]
        for resources, expected in cases:
            update = await store.add_resources(resources)
            [(rollout_id, attempt_id)] = await claim(store, resources_id=update.resources_id)
            upstream.clear_requests()
            client(enforcing, rollout_id, attempt_id).chat.completions.create(
                model="m", messages=MESSAGES, temperature=1.0
            )
            [sent] = upstream.requests
            assert (sent.body["model"], sent.body["temperature"]) == expected


async def test_fifty_concurrent_rollouts_do_not_mix(
    gateway: GatewayServer, store: MemoryStore
) -> None:
    ids = await claim(store, 50)

    async def agent(index: int, rollout_id: str, attempt_id: str) -> None:
        async with openai.AsyncOpenAI(
            base_url=gateway.rollout_url(rollout_id, attempt_id), api_key="k"
        ) as llm:
            for turn in range(2):
                await llm.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": f"agent {index} turn {turn}"}]
                )

    await asyncio.gather(*(agent(i, *pair) for i, pair in enumerate(ids)))
    for index, (rollout_id, _) in enumerate(ids):
        spans = await calls(gateway, store, rollout_id)
        texts = sorted(decode(s.attributes[semconv.AGL_RESPONSE_TOKEN_IDS]) for s in spans)  # type: ignore[arg-type]
        assert texts == [f"ok: agent {index} turn 0", f"ok: agent {index} turn 1"]


async def test_a_lone_surrogate_in_a_request_is_recorded_valid_and_recording_goes_on(
    upstream: OpenAIServer, tmp_path: Any
) -> None:
    """A JSON body may escape a lone UTF-16 surrogate, which no UTF-8 store can hold: the span
    keeps U+FFFD in its place, and the calls after it are recorded too."""
    from agl.store._sqlite import SQLiteStore

    upstream.script = echo
    async with SQLiteStore(tmp_path / "store.db") as store:
        [(rollout_id, attempt_id)] = await claim(store)
        with GatewayServer([upstream.url], store) as gateway:
            body = b'{"model": "\\ud800", "messages": [{"role": "user", "content": "hi \\udfff"}]}'
            async with httpx.AsyncClient() as http:
                url = gateway.rollout_url(rollout_id, attempt_id) + "/chat/completions"
                answer = await http.post(
                    url, content=body, headers={"content-type": "application/json"}
                )
            assert answer.status_code == 200, answer.text
            after = client(gateway, rollout_id, attempt_id).chat.completions.create(
                model="m", messages=MESSAGES
            )
            spans = await calls(gateway, store, rollout_id)
            assert gateway.gateway is not None
            assert gateway.gateway.sender.stats.rejected == 0
    first, second = sorted(spans, key=lambda s: s.sequence_id or 0)
    assert first.attributes[semconv.GEN_AI_REQUEST_MODEL] == "\ufffd"
    request = json.loads(str(first.attributes[semconv.AGL_REQUEST_JSON]))
    assert request["messages"][0]["content"] in ("hi \ufffd", "hi \udfff")  # escaped JSON text
    assert second.attributes[semconv.GEN_AI_RESPONSE_ID] == after.id


async def test_a_body_over_the_limit_is_413_announced_or_streamed(
    upstream: OpenAIServer, store: MemoryStore
) -> None:
    upstream.script = echo
    [(rollout_id, attempt_id)] = await claim(store)
    big = json.dumps({"model": "m", "messages": [{"role": "user", "content": "x" * 8000}]})

    async def chunked() -> AsyncIterator[bytes]:
        for start in range(0, len(big), 1000):
            yield big[start : start + 1000].encode()

    with GatewayServer([upstream.url], store, max_body_bytes=4096) as gateway:
        url = gateway.rollout_url(rollout_id, attempt_id) + "/chat/completions"
        async with httpx.AsyncClient(timeout=30) as http:
            for content in (big.encode(), chunked()):
                answer = await http.post(
                    url, content=content, headers={"content-type": "application/json"}
                )
                assert answer.status_code == 413, answer.text
                assert answer.json()["error"]["type"] == "RequestTooLargeError"
                assert "4096 bytes" in answer.json()["error"]["message"]
        ok = client(gateway, rollout_id, attempt_id).chat.completions.create(
            model="m", messages=MESSAGES
        )
        spans = await calls(gateway, store, rollout_id)
    assert [s.attributes[semconv.GEN_AI_RESPONSE_ID] for s in spans] == [ok.id]


async def test_models_of_an_unknown_attempt_is_a_404(
    gateway: GatewayServer, store: MemoryStore
) -> None:
    [(rollout_id, attempt_id)] = await claim(store)
    known = client(gateway, rollout_id, attempt_id).models.list()
    assert [model.id for model in known.data] == ["agl-test-model"]
    with pytest.raises(openai.NotFoundError, match="no attempt"):
        client(gateway, rollout_id, "nope").models.list()
    with pytest.raises(openai.NotFoundError):
        client(gateway, "ro-nope", attempt_id).models.list()
