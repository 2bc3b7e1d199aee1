"""agl.openai_wire: one reader of requests and one builder of answers for every agl server."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from agl.openai_wire import (
    DONE,
    Logprob,
    TokenLogprobs,
    WireError,
    chat_logprobs,
    check_context,
    completion_logprobs,
    error_body,
    read_json,
    read_request,
    sse,
    sse_data,
    usage_chunk,
)
from agl.testing.openai_server import OpenAIServer

MESSAGES = [{"role": "user", "content": "hi"}]

BAD_REQUESTS: list[tuple[str, dict[str, Any], str, str]] = [
    ("chat", {"messages": []}, "messages", "non-empty list"),
    ("chat", {"messages": [{"content": "no role"}]}, "messages", "'role'"),
    ("chat", {"messages": MESSAGES, "max_tokens": 0}, "max_tokens", "at least 1"),
    ("chat", {"messages": MESSAGES, "max_completion_tokens": "9"}, "max_completion_tokens", "9"),
    ("chat", {"messages": MESSAGES, "top_logprobs": 2}, "top_logprobs", "`logprobs`"),
    ("chat", {"messages": MESSAGES, "logprobs": True, "top_logprobs": 21}, "top_logprobs", "20"),
    (
        "chat",
        {"messages": MESSAGES, "stream_options": {"include_usage": True}},
        "stream_options",
        "stream=True",
    ),
    ("chat", {"messages": MESSAGES, "temperature": "hot"}, "temperature", "a number"),
    ("chat", {"messages": MESSAGES, "stop": [1]}, "stop", "strings"),
    ("chat", {"messages": MESSAGES, "n": 0}, "n", ">= 1"),
    ("chat", {"messages": MESSAGES, "stream": "yes"}, "stream", "true or false"),
    ("chat", {"messages": MESSAGES, "tools": "calculator"}, "tools", "tool objects"),
    (
        "chat",
        {"messages": [*MESSAGES, {"role": "assistant", "tool_calls": {"f": {}}}]},
        f"messages[{len(MESSAGES)}].tool_calls",
        "list of tool call objects",
    ),
    (
        "chat",
        {"messages": [{"role": "assistant", "tool_calls": [{"function": "f"}]}]},
        "messages[0].tool_calls",
        "'function' object",
    ),
    ("completions", {"prompt": 5}, "prompt", "'prompt'"),
    ("completions", {"prompt": "x", "logprobs": -1}, "logprobs", "from 0 to 20"),
    ("completions", {"prompt": "x", "seed": 1.5}, "seed", "an integer"),
]


@pytest.mark.parametrize(("api", "body", "field", "words"), BAD_REQUESTS)
def test_a_bad_request_names_its_field(
    api: Any, body: dict[str, Any], field: str, words: str
) -> None:
    with pytest.raises(WireError) as caught:
        read_request(body, api)
    assert (caught.value.status, caught.value.field) == (400, field)
    assert words in caught.value.message


def test_a_good_request_is_read_whole() -> None:
    body = {
        "model": "m",
        "messages": MESSAGES,
        "tools": [{"type": "function", "function": {"name": "f"}}],
        "max_completion_tokens": 7,
        "max_tokens": 99,  # the newer name wins, as in vLLM
        "logprobs": True,
        "stream": True,
        "stream_options": {"include_usage": True},
        "return_token_ids": True,
        "stop": "END",
        "temperature": 0,
        "seed": 3,
    }
    asked = read_request(body, "chat")
    assert (asked.model, asked.max_tokens, asked.logprobs, asked.stop) == ("m", 7, 0, ["END"])
    assert (asked.stream, asked.include_usage, asked.return_token_ids) == (True, True, True)
    assert (asked.temperature, asked.top_p, asked.seed, asked.n) == (0.0, None, 3, 1)
    assert asked.use_tools
    assert not read_request({**body, "tool_choice": "none"}, "chat").use_tools
    completion = read_request({"prompt": [[5, 6], "text"], "logprobs": 2}, "completions")
    assert (completion.prompts, completion.logprobs, completion.messages) == (
        [[5, 6], "text"],
        2,
        None,
    )


def test_bodies_that_are_not_json_objects() -> None:
    assert read_json(b'{"a": 1}') == {"a": 1}
    for raw, words in ((b"{", "not valid JSON"), (b"[1]", "JSON object")):
        with pytest.raises(WireError, match=words):
            read_json(raw)


def test_context_checks_are_vllms() -> None:
    assert check_context(10, None, 32) == 22
    assert check_context(10, 22, 32) == 22
    with pytest.raises(WireError, match=r"maximum context length is 32 tokens\. However, your "):
        check_context(32, None, 32)
    with pytest.raises(WireError, match=r"is too large: 23\. .* \(23 > 32 - 10\)"):
        check_context(10, 23, 32)


def test_errors_events_and_logprobs() -> None:
    assert error_body(400, "bad", param="n") == {
        "error": {"message": "bad", "type": "BadRequestError", "param": "n", "code": 400}
    }
    assert error_body(418, "teapot")["error"]["type"] == "APIError"
    event = sse({"a": 1}, event="x")
    assert event == 'event: x\ndata: {"a":1}\n\n'
    assert [sse_data(line) for line in event.splitlines()] == [None, '{"a":1}', None]
    assert sse_data(DONE) == "[DONE]"
    tokens = [
        TokenLogprobs(Logprob("a", -0.1), [Logprob("a", -0.1), Logprob("b", -2.0)]),
        TokenLogprobs(Logprob("é", -0.5)),
    ]
    assert chat_logprobs(tokens)["content"][1] == {
        "token": "é",
        "logprob": -0.5,
        "bytes": [195, 169],
        "top_logprobs": [],
    }
    legacy = completion_logprobs(tokens, offset=4)
    assert legacy["text_offset"] == [4, 5]
    assert legacy["top_logprobs"] == [{"a": -0.1, "b": -2.0}, {"é": -0.5}]
    head = {"id": "x", "object": "chat.completion", "created": 0, "model": "m"}
    usage = {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}
    chunk = usage_chunk(head, {**usage, "prompt_tokens_details": None})
    assert (chunk["object"], chunk["choices"], chunk["usage"]) == (
        "chat.completion.chunk",
        [],
        usage,
    )


@pytest.mark.parametrize(("api", "body", "field", "words"), BAD_REQUESTS)
def test_the_scripted_server_answers_the_same_errors(
    scripted: OpenAIServer, api: str, body: dict[str, Any], field: str, words: str
) -> None:
    route = {"chat": "chat/completions", "completions": "completions"}
    reply = httpx.post(f"{scripted.url}/{route[api]}", json=body)
    with pytest.raises(WireError) as caught:
        read_request(body, api)  # type: ignore[arg-type]
    assert reply.status_code == 400
    assert reply.json() == error_body(400, caught.value.message, param=field)


@pytest.fixture(scope="module")
def scripted() -> Any:
    with OpenAIServer() as server:
        yield server
