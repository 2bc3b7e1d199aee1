"""The gateway's other wires: the OpenAI Responses API and the Anthropic Messages API.

The real ``openai`` and ``anthropic`` SDKs, through the gateway, to the scripted vLLM-format
server. Each call must come back as the SDK expects it, and be recorded as the one chat call
the engine answered, with the engine's exact token ids.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest

import agl
from agl import RolloutRequest, semconv
from agl.gateway import GatewayServer
from agl.store._memory import MemoryStore
from agl.testing.openai_server import (
    OpenAIServer,
    encode,
    error_reply,
    render_chat,
    text_reply,
    tool_reply,
)

pytestmark = pytest.mark.anyio

TOOLS_RESPONSES: Any = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
]
TOOLS_MESSAGES: Any = [
    {
        "name": "get_weather",
        "description": "The weather in a city.",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
]


def weather(request: dict[str, Any]) -> Any:
    """Call the tool first, then answer with what it said."""
    last = request["messages"][-1]
    if request.get("tools") and last["role"] != "tool":
        return tool_reply("get_weather", {"city": "Paris"})
    return text_reply(f"It is {last['content']}." if last["role"] == "tool" else "Hello there.")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def upstream() -> Iterator[OpenAIServer]:
    with OpenAIServer(weather, max_model_len=2048) as server:
        yield server


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore()


@pytest.fixture
def gateway(upstream: OpenAIServer, store: MemoryStore) -> Iterator[GatewayServer]:
    upstream.script = weather
    with GatewayServer([upstream.url], store, token="secret") as server:
        yield server


async def claim(store: agl.Store) -> tuple[str, str]:
    await store.enqueue_rollouts([RolloutRequest(input=0)])
    [claimed] = await store.dequeue_rollouts()
    return claimed.rollout.rollout_id, claimed.attempt.attempt_id


async def recorded(gateway: GatewayServer, store: agl.Store, rollout_id: str) -> list[agl.Span]:
    assert gateway.gateway is not None
    assert await asyncio.to_thread(gateway.gateway.sender.flush, 10)
    spans = await store.query_spans(rollout_id)
    return [s for s in spans if s.attributes[semconv.AGL_SPAN_TYPE] == semconv.SPAN_TYPE_GATEWAY]


_OPEN: list[openai.OpenAI | anthropic.Anthropic] = []


@pytest.fixture(autouse=True)
def close_clients() -> Iterator[None]:
    yield
    while _OPEN:
        _OPEN.pop().close()


def openai_client(gateway: GatewayServer, ids: tuple[str, str]) -> openai.OpenAI:
    client = openai.OpenAI(base_url=gateway.rollout_url(*ids), api_key="secret", max_retries=0)
    _OPEN.append(client)
    return client


def anthropic_client(
    gateway: GatewayServer, ids: tuple[str, str], api_key: str = "secret", **options: Any
) -> anthropic.Anthropic:
    # Anthropic's clients add /v1/messages themselves: they get the attempt's base without /v1.
    base = gateway.rollout_url(*ids).removesuffix("/v1")
    client = anthropic.Anthropic(base_url=base, api_key=api_key, max_retries=0, **options)
    _OPEN.append(client)
    return client


def check_exact_ids(span: agl.Span, wire: str) -> dict[str, Any]:
    """The span holds the ids of the chat the engine rendered, and says which wire it came on."""
    attributes = span.attributes
    assert attributes[semconv.AGL_WIRE] == wire
    assert span.name == f"agl.gateway.{wire}"
    chat = json.loads(str(attributes[semconv.AGL_REQUEST_JSON]))
    expected = encode(render_chat(chat["messages"], chat.get("tools")))
    assert attributes[semconv.AGL_PROMPT_TOKEN_IDS] == expected
    response = json.loads(str(attributes[semconv.AGL_RESPONSE_JSON]))
    response_ids = attributes[semconv.AGL_RESPONSE_TOKEN_IDS]
    assert isinstance(response_ids, list)
    assert len(response_ids) == response["usage"]["completion_tokens"]
    if "token_ids" in response["choices"][0]:  # a whole answer (a stream's is assembled)
        assert response_ids == response["choices"][0]["token_ids"]
    logprobs = attributes[semconv.AGL_RESPONSE_LOGPROBS]
    assert isinstance(logprobs, list)
    assert len(logprobs) == len(response_ids)
    assert json.loads(str(attributes[semconv.AGL_WIRE_REQUEST_JSON]))  # as the agent sent it
    inputs = json.loads(str(attributes[semconv.GEN_AI_INPUT_MESSAGES]))
    assert [m["role"] for m in inputs] == [m["role"] for m in chat["messages"]]
    assert span.status.code == agl.StatusCode.OK
    return chat


# --- the Responses API ------------------------------------------------------------------------


async def test_responses_plain_answers_and_records_the_engines_ids(
    gateway: GatewayServer, store: MemoryStore
) -> None:
    ids = await claim(store)
    reply = openai_client(gateway, ids).responses.create(
        model="m", instructions="Be brief.", input="Hi!", max_output_tokens=100
    )
    assert reply.output_text == "Hello there."
    assert reply.status == "completed"
    [span] = await recorded(gateway, store, ids[0])
    chat = check_exact_ids(span, "responses")
    assert chat["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi!"},
    ]
    assert chat["max_tokens"] == 100
    assert span.attributes[semconv.GEN_AI_RESPONSE_ID] == reply.id  # joins the agent's own span
    assert reply.usage is not None
    assert reply.usage.input_tokens == len(span.attributes[semconv.AGL_PROMPT_TOKEN_IDS])


async def test_responses_tool_round_trip_extends_the_engines_ids_token_for_token(
    gateway: GatewayServer, store: MemoryStore
) -> None:
    ids = await claim(store)
    client = openai_client(gateway, ids)
    first = client.responses.create(model="m", input="Weather?", tools=TOOLS_RESPONSES)
    [call] = first.output
    assert call.type == "function_call"
    assert (call.name, json.loads(call.arguments)) == ("get_weather", {"city": "Paris"})
    history: Any = [
        {"role": "user", "content": "Weather?"},
        call.model_dump(exclude_none=True),
        {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"},
    ]
    second = client.responses.create(model="m", input=history, tools=TOOLS_RESPONSES)
    assert second.output_text == "It is sunny."
    one, two = await recorded(gateway, store, ids[0])
    check_exact_ids(one, "responses")
    chat = check_exact_ids(two, "responses")
    assert chat["messages"][1]["tool_calls"][0]["id"] == call.call_id
    assert chat["messages"][2] == {"role": "tool", "tool_call_id": call.call_id, "content": "sunny"}
    # the second prompt extends the first prompt + response: the trajectory merges exactly
    seen = (
        one.attributes[semconv.AGL_PROMPT_TOKEN_IDS]
        + one.attributes[  # type: ignore[operator]
            semconv.AGL_RESPONSE_TOKEN_IDS
        ]
    )
    assert two.attributes[semconv.AGL_PROMPT_TOKEN_IDS][: len(seen)] == seen  # type: ignore[index]


async def test_responses_streamed_sends_the_sdks_events_and_records_the_ids(
    gateway: GatewayServer, store: MemoryStore
) -> None:
    ids = await claim(store)
    client = openai_client(gateway, ids)
    with client.responses.stream(model="m", input="Hi!") as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert final.output_text == "Hello there."
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert "response.output_text.delta" in kinds
    assert kinds[-1] == "response.completed"
    with client.responses.stream(model="m", input="Weather?", tools=TOOLS_RESPONSES) as stream:
        for _ in stream:
            pass
        tool_final = stream.get_final_response()
    [call] = tool_final.output
    assert call.type == "function_call"
    assert json.loads(call.arguments) == {"city": "Paris"}
    spans = await recorded(gateway, store, ids[0])
    for span in spans:
        check_exact_ids(span, "responses")
    assert spans[0].attributes[semconv.GEN_AI_RESPONSE_ID] == final.id


async def test_responses_refuses_what_it_cannot_honestly_do_with_a_400_naming_it(
    gateway: GatewayServer, store: MemoryStore, upstream: OpenAIServer
) -> None:
    ids = await claim(store)
    client = openai_client(gateway, ids)
    before = upstream.request_count
    cases: list[tuple[dict[str, Any], str]] = [
        ({"input": "x", "previous_response_id": "resp_1"}, "previous_response_id"),
        ({"input": "x", "tools": [{"type": "web_search"}]}, "tools[0]"),
        ({"input": [{"type": "reasoning", "summary": []}]}, "input[0]"),
        ({"input": [{"type": "function_call_output", "call_id": "c", "output": "x"}]}, "call_id"),
        ({"input": [{"type": "nonsense"}]}, "input[0].type"),
        ({"input": "x", "tool_choice": {"type": "allowed_tools"}}, "tool_choice"),
        ({"input": "x", "truncation": "auto"}, "truncation"),
    ]
    for body, named in cases:
        with pytest.raises(openai.BadRequestError) as caught:
            client.responses.create(model="m", **body)
        assert named in str(caught.value.body), (body, caught.value.body)
    assert upstream.request_count == before  # nothing reached the engine
    assert await recorded(gateway, store, ids[0]) == []  # nothing recorded as a call


# --- the Messages API -------------------------------------------------------------------------


async def test_messages_plain_answers_and_records_the_engines_ids(
    gateway: GatewayServer, store: MemoryStore
) -> None:
    ids = await claim(store)
    reply = anthropic_client(gateway, ids).messages.create(
        model="m",
        max_tokens=100,
        system=[{"type": "text", "text": "Be brief."}],
        messages=[{"role": "user", "content": "Hi!"}],
    )
    assert [block.type for block in reply.content] == ["text"]
    assert reply.content[0].text == "Hello there."  # type: ignore[union-attr]
    assert reply.stop_reason == "end_turn"
    [span] = await recorded(gateway, store, ids[0])
    chat = check_exact_ids(span, "messages")
    assert chat["messages"][0] == {"role": "system", "content": "Be brief."}
    assert span.attributes[semconv.GEN_AI_RESPONSE_ID] == reply.id
    assert reply.usage.input_tokens == len(span.attributes[semconv.AGL_PROMPT_TOKEN_IDS])


async def test_messages_tool_round_trip_with_claude_codes_query_and_key_header(
    gateway: GatewayServer, store: MemoryStore
) -> None:
    ids = await claim(store)
    client = anthropic_client(gateway, ids, default_query={"beta": "true"})
    messages: Any = [{"role": "user", "content": "Weather?"}]
    first = client.messages.create(
        model="m", max_tokens=200, messages=messages, tools=TOOLS_MESSAGES
    )
    assert first.stop_reason == "tool_use"
    [use] = first.content
    assert use.type == "tool_use"
    assert (use.name, use.input) == ("get_weather", {"city": "Paris"})
    messages += [
        {"role": "assistant", "content": [use.model_dump(exclude_none=True)]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "sunny"}],
        },
    ]
    second = client.messages.create(
        model="m", max_tokens=200, messages=messages, tools=TOOLS_MESSAGES
    )
    assert second.content[0].text == "It is sunny."  # type: ignore[union-attr]
    one, two = await recorded(gateway, store, ids[0])
    check_exact_ids(one, "messages")
    check_exact_ids(two, "messages")
    seen = (
        one.attributes[semconv.AGL_PROMPT_TOKEN_IDS]
        + one.attributes[  # type: ignore[operator]
            semconv.AGL_RESPONSE_TOKEN_IDS
        ]
    )
    assert two.attributes[semconv.AGL_PROMPT_TOKEN_IDS][: len(seen)] == seen  # type: ignore[index]


async def test_messages_streamed_sends_the_sdks_events_and_records_the_ids(
    gateway: GatewayServer, store: MemoryStore
) -> None:
    ids = await claim(store)
    client = anthropic_client(gateway, ids)
    with client.messages.stream(
        model="m", max_tokens=100, messages=[{"role": "user", "content": "Hi!"}]
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert final.content[0].text == "Hello there."  # type: ignore[union-attr]
    assert final.stop_reason == "end_turn"
    assert kinds[0] == "message_start"
    assert kinds[-2:] == ["message_delta", "message_stop"]
    with client.messages.stream(
        model="m",
        max_tokens=100,
        messages=[{"role": "user", "content": "W?"}],
        tools=TOOLS_MESSAGES,
    ) as stream:
        tool_final = stream.get_final_message()
    assert tool_final.stop_reason == "tool_use"
    assert tool_final.content[0].input == {"city": "Paris"}  # type: ignore[union-attr]
    spans = await recorded(gateway, store, ids[0])
    assert len(spans) == 2
    for span in spans:
        check_exact_ids(span, "messages")
    assert final.usage.output_tokens == len(spans[0].attributes[semconv.AGL_RESPONSE_TOKEN_IDS])  # type: ignore[arg-type]


async def test_messages_stop_reasons_max_tokens_and_stop_sequence(
    gateway: GatewayServer, store: MemoryStore, upstream: OpenAIServer
) -> None:
    ids = await claim(store)
    client = anthropic_client(gateway, ids)
    cut = client.messages.create(
        model="m", max_tokens=3, messages=[{"role": "user", "content": "Hi"}]
    )
    assert cut.stop_reason == "max_tokens"
    assert cut.usage.output_tokens == 3


async def test_messages_bad_input_is_an_anthropic_400_naming_the_field(
    gateway: GatewayServer, store: MemoryStore, upstream: OpenAIServer
) -> None:
    ids = await claim(store)
    client = anthropic_client(gateway, ids)
    before = upstream.request_count
    user: Any = {"role": "user", "content": "x"}
    cases: list[tuple[dict[str, Any], str]] = [
        (
            {
                "messages": [
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t"}]}
                ]
            },
            "tool_use_id",
        ),
        ({"messages": [{"role": "user", "content": [{"type": "bogus"}]}]}, "messages.0.content.0"),
        ({"messages": [user], "tools": [{"type": "web_search_20250305", "name": "w"}]}, "tools.0"),
        ({"messages": [user], "thinking": {"type": "enabled", "budget_tokens": 1024}}, "thinking"),
        ({"messages": [user], "tool_choice": {"type": "tool", "name": "nope"}}, "tool_choice"),
        (
            {
                "messages": [
                    {"role": "assistant", "content": [{"type": "thinking", "thinking": "."}]}
                ]
            },
            "thinking blocks",
        ),
    ]
    for body, named in cases:
        with pytest.raises(anthropic.BadRequestError) as caught:
            client.messages.create(model="m", max_tokens=10, **body)
        error = caught.value.body
        assert isinstance(error, dict), error
        assert error["type"] == "error", error
        assert error["error"]["type"] == "invalid_request_error"
        assert named in error["error"]["message"], (body, error)
    base = gateway.rollout_url(*ids).removesuffix("/v1")
    headers = {"x-api-key": "secret", "anthropic-version": "latest"}
    raw = await asyncio.to_thread(
        httpx.post,
        f"{base}/v1/messages",
        json={"model": "m", "max_tokens": 5, "messages": [user]},
        headers=headers,
    )
    assert raw.status_code == 400
    assert "anthropic-version" in raw.json()["error"]["message"]
    raw = await asyncio.to_thread(
        httpx.post, f"{base}/v1/messages", content=b"{nope", headers={"x-api-key": "secret"}
    )
    assert raw.status_code == 400
    assert raw.json()["type"] == "error"
    assert upstream.request_count == before
    assert await recorded(gateway, store, ids[0]) == []


async def test_a_wrong_key_is_refused_in_the_wires_format(
    gateway: GatewayServer, store: MemoryStore
) -> None:
    ids = await claim(store)
    client = anthropic_client(gateway, ids, api_key="wrong")
    with pytest.raises(anthropic.AuthenticationError) as caught:
        client.messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "x"}])
    assert caught.value.body["type"] == "error"  # type: ignore[index]
    with (
        openai.OpenAI(base_url=gateway.rollout_url(*ids), api_key="wrong", max_retries=0) as bad,
        pytest.raises(openai.AuthenticationError),
    ):
        bad.responses.create(model="m", input="x")


async def test_upstream_errors_come_back_in_the_wires_format_and_are_recorded(
    gateway: GatewayServer, store: MemoryStore, upstream: OpenAIServer
) -> None:
    ids = await claim(store)
    upstream.script = lambda _: error_reply(503, "the engine is overloaded")
    with pytest.raises(anthropic.APIStatusError) as caught:
        anthropic_client(gateway, ids).messages.create(
            model="m", max_tokens=5, messages=[{"role": "user", "content": "x"}]
        )
    assert caught.value.status_code == 503
    assert caught.value.body["error"]["message"] == "the engine is overloaded"  # type: ignore[index]
    with pytest.raises(openai.APIStatusError) as raised:
        openai_client(gateway, ids).responses.create(model="m", input="x")
    assert raised.value.status_code == 503
    spans = await recorded(gateway, store, ids[0])
    assert [s.attributes[semconv.AGL_WIRE] for s in spans] == ["messages", "responses"]
    assert all(s.status.code == agl.StatusCode.ERROR for s in spans)


async def test_a_client_leaving_a_stream_is_recorded_as_a_failed_call(
    gateway: GatewayServer, store: MemoryStore, upstream: OpenAIServer
) -> None:
    ids = await claim(store)
    upstream.script = lambda _: text_reply("a long answer " * 20, chunk_delay=0.02)
    base = gateway.rollout_url(*ids).removesuffix("/v1")
    body = {
        "model": "m",
        "max_tokens": 500,
        "stream": True,
        "messages": [{"role": "user", "content": "x"}],
    }
    with httpx.stream(
        "POST", f"{base}/v1/messages", json=body, headers={"x-api-key": "secret"}
    ) as reply:
        assert reply.status_code == 200
        for line in reply.iter_lines():
            if "content_block_delta" in line:
                break  # leave mid-stream
    for _ in range(100):
        spans = await recorded(gateway, store, ids[0])
        if spans:
            break
        await asyncio.sleep(0.05)
    [span] = spans
    assert span.status.code == agl.StatusCode.ERROR
    assert "disconnected" in (span.status.description or "")


# --- the command-line harnesses' requests, as they send them --------------------------------


async def test_claude_codes_request_shape_is_served(
    gateway: GatewayServer, store: MemoryStore, upstream: OpenAIServer
) -> None:
    """What Claude Code 2.1 sends by default: system blocks, a system message inside
    ``messages``, adaptive thinking, a context edit clearing thinking, an effort, cache marks,
    tools with ``$schema``; always streamed, with ``?beta=true`` and ``x-api-key``."""
    ids = await claim(store)
    upstream.script = lambda _: tool_reply("Write", {"file_path": "/w/a.txt", "content": "hi"})
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {"file_path": {"type": "string"}, "content": {"type": "string"}},
        "additionalProperties": False,
    }
    body: Any = {
        "model": "some-model",
        "max_tokens": 512,
        "stream": True,
        "metadata": {"user_id": json.dumps({"session_id": "s"})},
        "thinking": {"type": "adaptive", "display": "omitted"},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "output_config": {"effort": "high"},
        "system": [
            {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.328;"},
            {
                "type": "text",
                "text": "You are a CLI agent.",
                "cache_control": {"type": "ephemeral"},
            },
        ],
        "tools": [{"name": "Write", "description": "Write a file.", "input_schema": schema}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "create a.txt"}]},
            {"role": "system", "content": [{"type": "text", "text": "# Environment\ncwd: /w"}]},
        ],
    }
    base = gateway.rollout_url(*ids).removesuffix("/v1")
    headers = {
        "x-api-key": "secret",
        "anthropic-version": "2023-06-01",
        "anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14",
    }
    reply = await asyncio.to_thread(
        httpx.post, f"{base}/v1/messages?beta=true", json=body, headers=headers
    )
    assert reply.status_code == 200, reply.text
    events = [line[7:] for line in reply.text.splitlines() if line.startswith("event: ")]
    assert events[0] == "message_start"
    assert events[-1] == "message_stop"
    assert '"input_json_delta"' in reply.text
    assert '"stop_reason":"tool_use"' in reply.text
    [span] = await recorded(gateway, store, ids[0])
    chat = check_exact_ids(span, "messages")
    assert [m["role"] for m in chat["messages"]] == ["system", "user", "system"]
    assert chat["messages"][0]["content"].endswith("You are a CLI agent.")
    assert chat["tools"][0]["function"]["parameters"] == schema


async def test_the_codex_clis_request_shape_is_served(
    gateway: GatewayServer, store: MemoryStore, upstream: OpenAIServer
) -> None:
    """What the Codex CLI 0.169 sends: developer messages with item ids, a ``namespace`` tool
    group, reasoning and include hints, ``store: false``, a prompt cache key, client metadata,
    its own earlier function call and the call's output, streamed."""
    ids = await claim(store)
    upstream.script = lambda _: tool_reply("spawn_agent", {"task": "t"})
    function = {"type": "function", "strict": False, "parameters": {"type": "object"}}
    body: Any = {
        "model": "some-model",
        "stream": True,
        "store": False,
        "tool_choice": "auto",
        "parallel_tool_calls": True,
        "reasoning": {"summary": "auto"},
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "session",
        "client_metadata": {"turn_id": "t"},
        "tools": [
            {**function, "name": "exec_command", "description": "Run a command."},
            {
                "type": "namespace",
                "name": "multi_agent_v1",
                "description": "Agents.",
                "tools": [{**function, "name": "spawn_agent", "description": "Spawn."}],
            },
        ],
        "input": [
            {
                "type": "message",
                "id": "msg_1",
                "role": "developer",
                "content": [{"type": "input_text", "text": "You are a coding agent."}],
            },
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]},
            {
                "type": "function_call",
                "status": "completed",
                "id": "fc_1",
                "name": "exec_command",
                "arguments": '{"cmd": "ls"}',
                "call_id": "call_1",
            },
            {"type": "function_call_output", "id": "fco_1", "call_id": "call_1", "output": "a"},
        ],
    }
    reply = await asyncio.to_thread(
        httpx.post,
        f"{gateway.rollout_url(*ids)}/responses",
        json=body,
        headers={"authorization": "Bearer secret"},
    )
    assert reply.status_code == 200, reply.text
    events = [line[7:] for line in reply.text.splitlines() if line.startswith("event: ")]
    assert events[0] == "response.created"
    assert events[-1] == "response.completed"
    done = [
        json.loads(line[6:])
        for line in reply.text.splitlines()
        if line.startswith("data: ") and '"response.output_item.done"' in line
    ]
    assert done[0]["item"]["namespace"] == "multi_agent_v1"  # said back in its group
    assert done[0]["item"]["name"] == "spawn_agent"
    [span] = await recorded(gateway, store, ids[0])
    chat = check_exact_ids(span, "responses")
    assert [m["role"] for m in chat["messages"]] == ["system", "user", "assistant", "tool"]
    assert [t["function"]["name"] for t in chat["tools"]] == ["exec_command", "spawn_agent"]


async def test_messages_count_tokens_is_the_engines_count_for_the_chat(
    gateway: GatewayServer, store: MemoryStore
) -> None:
    ids = await claim(store)
    messages: Any = [{"role": "user", "content": "Weather?"}]
    count = anthropic_client(gateway, ids).messages.count_tokens(
        model="m", system="Be brief.", messages=messages, tools=TOOLS_MESSAGES
    )
    chat = [{"role": "system", "content": "Be brief."}, *messages]
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": TOOLS_MESSAGES[0]["input_schema"],
                "description": "The weather in a city.",
            },
        }
    ]
    assert count.input_tokens == len(encode(render_chat(chat, tools)))
    assert await recorded(gateway, store, ids[0]) == []  # a count is not a call
