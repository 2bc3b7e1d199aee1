"""The scripted OpenAI-compatible server, spoken to with the real ``openai`` client.

The server stands in for vLLM, so these tests pin what the tracer and the LLM gateway rely on:
the wire protocol the ``openai`` package parses (bodies, SSE chunks, typed Responses events,
error bodies) and vLLM's extensions (``prompt_token_ids``/``token_ids``, logprobs).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from agl.testing.openai_server import (
    EOS_ID,
    OpenAIServer,
    Reply,
    ToolCall,
    decode,
    echo,
    encode,
    error_reply,
    last_user_text,
    render_chat,
    sequence,
    text_reply,
    tool_reply,
)

MESSAGES: list[Any] = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "héllo wörld"},
]
TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
IDS = {"return_token_ids": True}


@pytest.fixture(scope="module")
def shared_server() -> Iterator[OpenAIServer]:
    with OpenAIServer(max_model_len=512) as server:
        yield server


@pytest.fixture
def server(shared_server: OpenAIServer) -> OpenAIServer:
    """The module's server with the default script and an empty request log."""
    shared_server.script = echo
    shared_server.clear_requests()
    return shared_server


@pytest.fixture
def client(server: OpenAIServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=server.url, api_key="test", max_retries=0) as client:
        yield client


def prompt_ids(messages: list[Any], tools: list[Any] | None = None) -> list[int]:
    return encode(render_chat(messages, tools))


# --- the tokenizer ----------------------------------------------------------------------------


def test_tokenizer_is_byte_level_and_reversible() -> None:
    text = "ok: héllo 🌍"
    ids = encode(text)
    assert len(ids) == len(text.encode())
    assert min(ids) >= 3
    assert decode(ids) == text
    assert decode([*ids, EOS_ID]) == text
    assert render_chat([{"role": "user", "content": "hi"}]) == (
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    )


def test_last_user_text_reads_every_request_shape() -> None:
    parts = [{"type": "text", "text": "a"}, {"type": "image_url"}, {"type": "text", "text": "b"}]
    assert last_user_text({"messages": MESSAGES}) == "héllo wörld"
    assert last_user_text({"messages": [{"role": "user", "content": parts}]}) == "a<image_url>b"
    assert last_user_text({"prompt": "p"}) == "p"
    assert last_user_text({"prompt": encode("ids")}) == "ids"
    assert last_user_text({"prompt": ["x", "y"]}) == "y"


def test_importing_agl_does_not_import_the_test_server() -> None:
    code = "import sys, agl; print('agl.testing.openai_server' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# --- chat completions -------------------------------------------------------------------------


def test_chat_completion(client: openai.OpenAI) -> None:
    response = client.chat.completions.create(model="my-model", messages=MESSAGES)
    choice = response.choices[0]
    assert choice.message.content == "ok: héllo wörld"
    assert choice.message.role == "assistant"
    assert choice.finish_reason == "stop"
    assert response.model == "my-model"
    assert response.id.startswith("chatcmpl-")
    assert abs(response.created - time.time()) < 60
    assert response.usage is not None
    assert response.usage.prompt_tokens == len(prompt_ids(MESSAGES))
    # vLLM counts the EOS token the reply ends with.
    assert response.usage.completion_tokens == len(encode("ok: héllo wörld")) + 1
    assert response.usage.total_tokens == response.usage.prompt_tokens + 18
    # Without return_token_ids, vLLM's extra fields are there but null.
    assert response.model_extra is not None
    assert response.model_extra["prompt_token_ids"] is None
    again = client.chat.completions.create(model="my-model", messages=MESSAGES)
    assert again.id != response.id


def test_chat_token_ids(client: openai.OpenAI) -> None:
    response = client.chat.completions.create(model="m", messages=MESSAGES, extra_body=IDS)
    assert response.model_extra is not None
    assert response.model_extra["prompt_token_ids"] == prompt_ids(MESSAGES)
    choice = response.choices[0]
    assert choice.model_extra is not None
    token_ids = choice.model_extra["token_ids"]
    assert token_ids[-1] == EOS_ID
    assert decode(token_ids) == choice.message.content
    assert response.usage is not None
    assert response.usage.completion_tokens == len(token_ids)


def test_chat_stream_matches_the_non_streaming_answer(client: openai.OpenAI) -> None:
    whole = client.chat.completions.create(model="m", messages=MESSAGES, extra_body=IDS)
    stream = client.chat.completions.create(
        model="m",
        messages=MESSAGES,
        stream=True,
        stream_options={"include_usage": True},
        extra_body=IDS,
    )
    chunks = list(stream)
    first = chunks[0]
    assert first.model_extra is not None
    assert first.model_extra["prompt_token_ids"] == prompt_ids(MESSAGES)
    assert first.choices[0].delta.role == "assistant"
    body = [c for c in chunks if c.choices]
    text = "".join(c.choices[0].delta.content or "" for c in body)
    token_ids = [t for c in body[1:] for t in (c.choices[0].model_extra or {})["token_ids"]]
    assert text == whole.choices[0].message.content
    assert token_ids == (whole.choices[0].model_extra or {})["token_ids"]
    assert decode(token_ids) == text
    assert body[-1].choices[0].finish_reason == "stop"
    assert len({c.id for c in chunks}) == 1
    assert chunks[0].id.startswith("chatcmpl-")
    usage = chunks[-1].usage
    assert usage is not None
    assert not chunks[-1].choices
    assert (usage.prompt_tokens, usage.completion_tokens) == (
        len(prompt_ids(MESSAGES)),
        len(token_ids),
    )


def test_chat_stream_without_token_ids_or_usage(server: OpenAIServer) -> None:
    body = {"model": "m", "messages": MESSAGES, "stream": True}
    with httpx.stream("POST", f"{server.url}/chat/completions", json=body) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = response.read().decode().split("\n\n")
    assert events[-2:] == ["data: [DONE]", ""]
    chunks = [json.loads(e.removeprefix("data: ")) for e in events[:-2]]
    assert chunks[0]["prompt_token_ids"] is None
    assert all(c["choices"][0]["token_ids"] is None for c in chunks[1:])
    assert all("usage" not in c for c in chunks)
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == "ok: héllo wörld"


def test_chat_logprobs(client: openai.OpenAI) -> None:
    def ask() -> Any:
        return client.chat.completions.create(
            model="m", messages=MESSAGES, logprobs=True, top_logprobs=3, extra_body=IDS
        )

    response = ask()
    choice = response.choices[0]
    assert choice.logprobs is not None
    content = choice.logprobs.content
    assert content is not None
    token_ids = (choice.model_extra or {})["token_ids"]
    assert len(content) == len(token_ids)
    for entry in content:
        assert entry.logprob <= 0
        assert len(entry.top_logprobs) == 3
        assert entry.top_logprobs[0].token == entry.token
        assert entry.top_logprobs[0].logprob == entry.logprob
        assert [t.logprob for t in entry.top_logprobs] == sorted(
            (t.logprob for t in entry.top_logprobs), reverse=True
        )
    assert content[-1].token == "<|im_end|>"
    text_bytes = bytes(b for entry in content[:-1] for b in entry.bytes or [])
    assert text_bytes.decode() == choice.message.content
    again = ask().choices[0].logprobs
    assert again is not None
    assert again.content == content

    stream = client.chat.completions.create(
        model="m", messages=MESSAGES, logprobs=True, top_logprobs=3, stream=True
    )
    streamed = [
        e
        for c in stream
        if c.choices and c.choices[0].logprobs
        for e in c.choices[0].logprobs.content or []
    ]
    assert streamed == content


def test_tool_call(client: openai.OpenAI, server: OpenAIServer) -> None:
    server.script = lambda _: tool_reply("get_weather", {"city": "Paris"})
    response = client.chat.completions.create(
        model="m", messages=MESSAGES, tools=TOOLS, extra_body=IDS
    )
    choice = response.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    calls = choice.message.tool_calls
    assert calls is not None
    assert len(calls) == 1
    assert calls[0].type == "function"
    assert calls[0].id.startswith("chatcmpl-tool-")
    assert calls[0].function.name == "get_weather"
    assert json.loads(calls[0].function.arguments) == {"city": "Paris"}
    # The model "wrote" the call Hermes style; the tools are part of the prompt.
    generated = decode((choice.model_extra or {})["token_ids"])
    assert (
        generated
        == '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    )
    assert (response.model_extra or {})["prompt_token_ids"] == prompt_ids(MESSAGES, TOOLS)


def test_a_tool_call_with_its_own_id(client: openai.OpenAI, server: OpenAIServer) -> None:
    server.script = lambda _: tool_reply("get_weather", {"city": "Paris"}, id="call_1")
    response = client.chat.completions.create(model="m", messages=MESSAGES, tools=TOOLS)
    calls = response.choices[0].message.tool_calls
    assert calls is not None
    assert [call.id for call in calls] == ["call_1"]


def test_streamed_tool_calls_are_reassembled_by_the_client(
    client: openai.OpenAI, server: OpenAIServer
) -> None:
    calls = (ToolCall("get_weather", {"city": "Paris"}), ToolCall("get_time", '{"tz": "CET"}'))
    server.script = lambda _: Reply(tool_calls=calls)
    with client.chat.completions.stream(model="m", messages=MESSAGES, tools=TOOLS) as stream:
        final = stream.get_final_completion()
    choice = final.choices[0]
    assert choice.finish_reason == "tool_calls"
    got = [(c.function.name, c.function.arguments) for c in choice.message.tool_calls or []]
    assert got == [("get_weather", '{"city": "Paris"}'), ("get_time", '{"tz": "CET"}')]

    # The token ids of the chunks still add up to everything the model generated.
    chunks = list(
        client.chat.completions.create(
            model="m", messages=MESSAGES, tools=TOOLS, stream=True, extra_body=IDS
        )
    )
    token_ids = [t for c in chunks[1:] for t in (c.choices[0].model_extra or {})["token_ids"]]
    whole = client.chat.completions.create(
        model="m", messages=MESSAGES, tools=TOOLS, extra_body=IDS
    )
    assert token_ids == (whole.choices[0].model_extra or {})["token_ids"]


def test_n_choices(client: openai.OpenAI, server: OpenAIServer) -> None:
    server.script = lambda _: ["first", text_reply("second")]
    response = client.chat.completions.create(model="m", messages=MESSAGES, n=2)
    assert [(c.index, c.message.content) for c in response.choices] == [
        (0, "first"),
        (1, "second"),
    ]
    assert response.usage is not None
    assert response.usage.completion_tokens == len("first") + len("second") + 2

    stream = client.chat.completions.create(model="m", messages=MESSAGES, n=2, stream=True)
    texts = ["", ""]
    for chunk in stream:
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
    assert texts == ["first", "second"]


def test_max_tokens_truncates(client: openai.OpenAI, server: OpenAIServer) -> None:
    server.script = lambda _: "a fairly long answer"
    response = client.chat.completions.create(
        model="m", messages=MESSAGES, max_tokens=6, extra_body=IDS
    )
    choice = response.choices[0]
    assert (choice.message.content, choice.finish_reason) == ("a fair", "length")
    assert len((choice.model_extra or {})["token_ids"]) == 6
    assert response.usage is not None
    assert response.usage.completion_tokens == 6

    stream = client.chat.completions.create(
        model="m", messages=MESSAGES, max_completion_tokens=6, stream=True
    )
    chunks = [c for c in stream if c.choices]
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "a fair"
    assert chunks[-1].choices[0].finish_reason == "length"

    # A cut tool call cannot be parsed: it comes back as text.
    server.script = lambda _: tool_reply("get_weather", {"city": "Paris"})
    cut = client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=12)
    assert cut.choices[0].message.content == "<tool_call>\n"
    assert cut.choices[0].finish_reason == "length"


# --- errors -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (400, openai.BadRequestError),
        (401, openai.AuthenticationError),
        (404, openai.NotFoundError),
        (429, openai.RateLimitError),
        (500, openai.InternalServerError),
        (503, openai.InternalServerError),
    ],
)
def test_scripted_errors(
    client: openai.OpenAI, server: OpenAIServer, status: int, error: type[openai.APIStatusError]
) -> None:
    server.script = lambda _: error_reply(status, "scripted failure")
    for stream in (False, True):
        with pytest.raises(error) as caught:
            client.chat.completions.create(model="m", messages=MESSAGES, stream=stream)
        assert caught.value.status_code == status
        assert caught.value.body == {
            "message": "scripted failure",
            "type": caught.value.body["type"],  # type: ignore[index]
            "param": None,
            "code": status,
        }
    with pytest.raises(error):
        client.responses.create(model="m", input="hi")


def test_prompt_longer_than_the_context_is_refused(client: openai.OpenAI) -> None:
    long: list[Any] = [{"role": "user", "content": "x" * 600}]
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="m", messages=long)
    message = caught.value.message
    assert "This model's maximum context length is 512 tokens" in message
    assert f"your request has {len(prompt_ids(long))} input tokens" in message
    assert (caught.value.body or {})["type"] == "BadRequestError"  # type: ignore[index]

    with pytest.raises(openai.BadRequestError, match="'max_tokens' or 'max_completion_tokens'"):
        client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=500)
    with pytest.raises(openai.BadRequestError, match="maximum context length"):
        client.completions.create(model="m", prompt="x" * 600)


def test_bad_requests(client: openai.OpenAI, server: OpenAIServer) -> None:
    with pytest.raises(openai.BadRequestError, match="'messages'"):
        client.chat.completions.create(model="m", messages="hi")  # type: ignore[arg-type]
    with pytest.raises(openai.BadRequestError, match="out of vocabulary"):
        client.completions.create(model="m", prompt=[5, 999])
    with pytest.raises(openai.NotFoundError):
        client.embeddings.create(model="m", input="hi")
    with pytest.raises(openai.BadRequestError, match=r"'input\[0\]' must be an object"):
        client.responses.create(model="m", input=["hi"])  # type: ignore[list-item]
    response = httpx.post(f"{server.url}/chat/completions", content=b"{not json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == 400
    # Tool calls that are not objects: a 400 naming them (once a 500 from deep inside).
    broken = {"model": "m", "messages": [{"role": "assistant", "tool_calls": [1]}]}
    response = httpx.post(f"{server.url}/chat/completions", json=broken)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "messages[0].tool_calls"


def test_script_failures_are_500s(client: openai.OpenAI, server: OpenAIServer) -> None:
    def broken(_: dict[str, Any]) -> Reply:
        raise RuntimeError("oops")

    server.script = broken
    with pytest.raises(openai.InternalServerError, match="RuntimeError: oops"):
        client.chat.completions.create(model="m", messages=MESSAGES)

    server.script = sequence("one", "two")
    answers = [
        client.chat.completions.create(model="m", messages=MESSAGES).choices[0].message.content
        for _ in range(2)
    ]
    assert answers == ["one", "two"]
    with pytest.raises(openai.InternalServerError, match="ran out of replies"):
        client.chat.completions.create(model="m", messages=MESSAGES)


def test_delays(client: openai.OpenAI, server: OpenAIServer) -> None:
    server.script = lambda _: text_reply("slow", delay=1.0)
    with pytest.raises(openai.APITimeoutError):
        client.with_options(timeout=0.2).chat.completions.create(model="m", messages=MESSAGES)

    server.script = lambda _: text_reply("abcde", chunk_delay=0.05)
    start = time.monotonic()
    stream = client.chat.completions.create(model="m", messages=MESSAGES, stream=True)
    arrivals = [time.monotonic() - start for _ in stream]
    assert arrivals[-1] >= 0.05 * (len(arrivals) - 1) * 0.9


# --- completions ------------------------------------------------------------------------------


def test_completions(client: openai.OpenAI) -> None:
    response = client.completions.create(
        model="m", prompt="hello", max_tokens=50, logprobs=2, extra_body=IDS
    )
    choice = response.choices[0]
    assert response.id.startswith("cmpl-")
    assert (choice.text, choice.finish_reason) == ("ok: hello", "stop")
    extra = choice.model_extra or {}
    assert extra["prompt_token_ids"] == encode("hello")
    assert extra["token_ids"] == [*encode("ok: hello"), EOS_ID]
    assert choice.logprobs is not None
    assert choice.logprobs.tokens == [*"ok: hello", "<|im_end|>"]
    assert choice.logprobs.text_offset == list(range(10))
    assert all(lp is not None and lp <= 0 for lp in choice.logprobs.token_logprobs or [])
    assert all(len(top) == 2 for top in choice.logprobs.top_logprobs or [])
    assert response.usage is not None
    assert (response.usage.prompt_tokens, response.usage.completion_tokens) == (5, 10)

    # Token id prompts; vLLM's default of 16 tokens cuts the answer.
    cut = client.completions.create(model="m", prompt=encode("a much longer prompt"))
    assert cut.choices[0].text == "ok: a much longe"
    assert cut.choices[0].finish_reason == "length"


def test_completions_stream(client: openai.OpenAI) -> None:
    whole = client.completions.create(model="m", prompt="hi", max_tokens=50, extra_body=IDS)
    chunks = list(
        client.completions.create(
            model="m",
            prompt="hi",
            max_tokens=50,
            stream=True,
            stream_options={"include_usage": True},
            extra_body=IDS,
        )
    )
    body = [c for c in chunks if c.choices]
    assert "".join(c.choices[0].text for c in body) == whole.choices[0].text == "ok: hi"
    extras = [c.choices[0].model_extra or {} for c in body]
    assert extras[0]["prompt_token_ids"] == encode("hi")
    assert all(e["prompt_token_ids"] is None for e in extras[1:])
    assert [t for e in extras for t in e["token_ids"]] == (whole.choices[0].model_extra or {})[
        "token_ids"
    ]
    assert body[-1].choices[0].finish_reason == "stop"
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == len(encode("ok: hi")) + 1


# --- responses --------------------------------------------------------------------------------


def test_responses(client: openai.OpenAI, server: OpenAIServer) -> None:
    response = client.responses.create(model="m", input="hi there", instructions="Be brief.")
    assert response.id.startswith("resp_")
    assert response.status == "completed"
    assert response.output_text == "ok: hi there"
    assert response.usage is not None
    expected = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi there"}]
    assert response.usage.input_tokens == len(prompt_ids(expected))
    assert response.usage.output_tokens == len(encode("ok: hi there")) + 1

    cut = client.responses.create(model="m", input="hi there", max_output_tokens=3)
    assert (cut.status, cut.output_text) == ("incomplete", "ok:")
    assert cut.incomplete_details is not None
    assert cut.incomplete_details.reason == "max_output_tokens"

    server.script = lambda _: tool_reply("get_weather", {"city": "Paris"})
    tools: Any = [{"type": "function", "name": "get_weather", "parameters": {}, "strict": False}]
    called = client.responses.create(model="m", input="weather?", tools=tools)
    item = called.output[0]
    assert item.type == "function_call"
    assert (item.name, json.loads(item.arguments)) == ("get_weather", {"city": "Paris"})
    assert item.call_id.startswith("chatcmpl-tool-")  # the engine's own tool call id


def test_responses_stream(client: openai.OpenAI, server: OpenAIServer) -> None:
    events = list(
        client.responses.create(model="m", input=[{"role": "user", "content": "yo"}], stream=True)
    )
    kinds = [e.type for e in events]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    final = events[-1]
    assert final.type == "response.completed"
    assert deltas == final.response.output_text == "ok: yo"

    server.script = lambda _: tool_reply("get_weather", {"city": "Paris"})
    with client.responses.stream(model="m", input="weather?") as stream:
        response = stream.get_final_response()
    call = response.output[0]
    assert call.type == "function_call"
    assert json.loads(call.arguments) == {"city": "Paris"}


# --- concurrency, the request log -------------------------------------------------------------


def test_async_client_with_concurrent_requests(server: OpenAIServer) -> None:
    async def main() -> list[str]:
        async with openai.AsyncOpenAI(base_url=server.url, api_key="test", max_retries=0) as client:

            async def one(i: int) -> str:
                messages: Any = [{"role": "user", "content": f"request {i}"}]
                if i % 2:
                    response = await client.chat.completions.create(model="m", messages=messages)
                    return response.choices[0].message.content or ""
                stream = await client.chat.completions.create(
                    model="m", messages=messages, stream=True
                )
                return "".join([c.choices[0].delta.content or "" async for c in stream])

            return await asyncio.gather(*(one(i) for i in range(50)))

    assert asyncio.run(main()) == [f"ok: request {i}" for i in range(50)]
    assert server.request_count == 50


def test_async_scripts(client: openai.OpenAI, server: OpenAIServer) -> None:
    async def script(request: dict[str, Any]) -> str:
        await asyncio.sleep(0)
        return f"async {request['model']}"

    server.script = script
    response = client.chat.completions.create(model="m", messages=MESSAGES)
    assert response.choices[0].message.content == "async m"


def test_request_log(client: openai.OpenAI, server: OpenAIServer) -> None:
    models = client.models.list()
    assert [m.id for m in models.data] == ["agl-test-model"]
    client.chat.completions.create(
        model="m", messages=MESSAGES, extra_headers={"X-Trace": "abc"}, extra_body=IDS
    )
    with pytest.raises(openai.NotFoundError):
        client.post("/nowhere", cast_to=object, body={"a": 1})
    log = server.requests
    assert [(r.method, r.path) for r in log] == [
        ("GET", "/v1/models"),
        ("POST", "/v1/chat/completions"),
        ("POST", "/v1/nowhere"),
    ]
    assert log[0].body is None
    assert log[1].body == {"model": "m", "messages": MESSAGES, "return_token_ids": True}
    assert log[1].headers["authorization"] == "Bearer test"
    assert log[1].headers["x-trace"] == "abc"
    assert server.request_count == 3
    server.clear_requests()
    assert server.requests == []
    assert server.url.endswith("/v1")


def test_top_candidates_stop_at_the_printable_bytes_however_many_are_asked() -> None:
    """Asking for more alternatives than there are (as a request past the wire's cap of 20
    once could) returns every one there is, promptly, instead of spinning."""
    from agl.testing._openai_wire import top_candidates

    started = time.monotonic()
    assert len(top_candidates(3, 80, 500)) == 95  # "M" sampled, and the other printable bytes
    candidates = top_candidates(3, 3, 500)  # a NUL byte sampled, and all 95 printable bytes
    assert time.monotonic() - started < 5
    assert len({token for token, _ in candidates}) == len(candidates) == 96
    logprobs = [logprob for _, logprob in candidates]
    assert logprobs == sorted(logprobs, reverse=True)
