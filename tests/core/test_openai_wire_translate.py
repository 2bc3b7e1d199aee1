"""The translation layer, function by function: each wire's request to chat, chat back to it.

The wires end to end, through real SDKs and servers, are in ``test_gateway_wires.py``; here are
the mappings a real client seldom sends in one conversation.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from agl.openai_wire import WIRES, ChatReader, WireError

RESPONSES = WIRES["responses"]
MESSAGES = WIRES["messages"]


def chat_body(
    content: str | None = "hi",
    calls: list[tuple[str, str, str]] = (),  # type: ignore[assignment]
    finish: str = "stop",
    stop_reason: Any = None,
) -> dict[str, Any]:
    tool_calls = [
        {"id": i, "type": "function", "function": {"name": n, "arguments": a}} for i, n, a in calls
    ]
    message = {"role": "assistant", "content": content, "tool_calls": tool_calls}
    choice = {"index": 0, "message": message, "finish_reason": finish, "stop_reason": stop_reason}
    usage = {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}
    return {"id": "chatcmpl-abc", "model": "m", "choices": [choice], "usage": usage}


# --- the Responses API ------------------------------------------------------------------------


def test_responses_items_become_one_chat_conversation() -> None:
    body = {
        "model": "m",
        "instructions": "Be brief.",
        "input": [
            {"role": "developer", "content": "Use tools."},
            {
                "type": "message",
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "What is in "},
                    {"type": "input_image", "image_url": "data:image/png;base64,AAAA"},
                ],
            },
            {"role": "assistant", "content": [{"type": "output_text", "text": "Let me look."}]},
            {"type": "function_call", "call_id": "c1", "name": "look", "arguments": "{}"},
            {"type": "function_call", "call_id": "c2", "name": "zoom", "arguments": '{"x": 1}'},
            {"type": "function_call_output", "call_id": "c1", "output": "a cat"},
            {
                "type": "function_call_output",
                "call_id": "c2",
                "output": [{"type": "input_text", "text": "a big cat"}],
            },
        ],
        "tools": [{"type": "function", "name": "look", "parameters": {}}],
        "tool_choice": {"type": "function", "name": "look"},
        "text": {"format": {"type": "json_schema", "name": "out", "schema": {"type": "object"}}},
        "max_output_tokens": 9,
        "top_logprobs": 2,
        "seed": 3,
    }
    chat = RESPONSES.to_chat(body, {})
    assert chat["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "system", "content": "Use tools."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is in "},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
            ],
        },
        {
            "role": "assistant",
            "content": "Let me look.",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "look", "arguments": "{}"}},
                {
                    "id": "c2",
                    "type": "function",
                    "function": {"name": "zoom", "arguments": '{"x": 1}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "a cat"},
        {"role": "tool", "tool_call_id": "c2", "content": "a big cat"},
    ]
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "look"}}
    assert chat["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "out", "schema": {"type": "object"}},
    }
    assert (chat["max_tokens"], chat["logprobs"], chat["top_logprobs"], chat["seed"]) == (
        9,
        True,
        2,
        3,
    )


def test_a_responses_answer_holds_the_text_then_each_call() -> None:
    body = chat_body("Checking.", [("chatcmpl-tool-1", "look", '{"a": 1}')], "tool_calls")
    answer = RESPONSES.answer(body, {"model": "m", "input": "x"})
    assert answer["id"] == "resp_abc"
    assert [item["type"] for item in answer["output"]] == ["message", "function_call"]
    assert answer["output"][0]["content"][0]["text"] == "Checking."
    assert answer["output"][1]["call_id"] == "chatcmpl-tool-1"
    assert answer["usage"]["input_tokens"] == 7
    cut = RESPONSES.answer(chat_body("Chec", finish="length"), {"input": "x"})
    assert (cut["status"], cut["incomplete_details"]) == (
        "incomplete",
        {"reason": "max_output_tokens"},
    )


# --- the Messages API -------------------------------------------------------------------------


def test_messages_blocks_become_one_chat_conversation() -> None:
    body = {
        "model": "m",
        "max_tokens": 50,
        "system": "Be brief.",
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Read this: "},
                    {"type": "document", "source": {"type": "text", "data": "the doc"}},
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"},
                    },
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Running it."},
                    {"type": "tool_use", "id": "t1", "name": "run", "input": {"cmd": "ls"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t1",
                        "content": "boom",
                        "is_error": True,
                    },
                    {"type": "text", "text": "What now?"},
                ],
            },
        ],
        "tools": [{"name": "run", "input_schema": {"type": "object"}}],
        "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
        "stop_sequences": ["END"],
        "top_k": 5,
    }
    chat = MESSAGES.to_chat(body, {"anthropic-version": "2023-06-01"})
    assert chat["messages"] == [
        {"role": "system", "content": "Be brief."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Read this: "},
                {"type": "text", "text": "the doc"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
            ],
        },
        {
            "role": "assistant",
            "content": "Running it.",
            "tool_calls": [
                {
                    "id": "t1",
                    "type": "function",
                    "function": {"name": "run", "arguments": '{"cmd": "ls"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "t1", "content": "Error: boom"},
        {"role": "user", "content": "What now?"},
    ]
    assert (chat["tool_choice"], chat["parallel_tool_calls"]) == ("required", False)
    assert (chat["stop"], chat["top_k"], chat["max_tokens"]) == (["END"], 5, 50)


def test_a_messages_answer_says_why_it_stopped() -> None:
    request = {"model": "m", "max_tokens": 5, "stop_sequences": ["END"], "messages": []}
    stopped = MESSAGES.answer(chat_body("done", stop_reason="END"), request)
    assert (stopped["stop_reason"], stopped["stop_sequence"]) == ("stop_sequence", "END")
    assert MESSAGES.answer(chat_body("done"), request)["stop_reason"] == "end_turn"
    assert MESSAGES.answer(chat_body("do", finish="length"), request)["stop_reason"] == "max_tokens"
    called = MESSAGES.answer(chat_body(None, [("t", "run", '{"a": 1}')], "tool_calls"), request)
    assert called["content"] == [{"type": "tool_use", "id": "t", "name": "run", "input": {"a": 1}}]
    assert called["stop_reason"] == "tool_use"
    # Arguments that are not a JSON object: what the model wrote comes back as text.
    broken = MESSAGES.answer(chat_body(None, [("t", "run", "{not json")], "tool_calls"), request)
    assert broken["content"] == [{"type": "text", "text": "{not json"}]
    assert broken["stop_reason"] == "end_turn"
    assert broken["usage"] == {
        "input_tokens": 7,
        "output_tokens": 3,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"messages": [{"role": "user", "content": "x"}]}, "max_tokens"),
        ({"max_tokens": 0, "messages": [{"role": "user", "content": "x"}]}, "max_tokens"),
        ({"max_tokens": 5, "messages": []}, "messages"),
        ({"max_tokens": 5, "messages": [{"role": "tool", "content": "x"}]}, "messages.0.role"),
        (
            {
                "max_tokens": 5,
                "messages": [{"role": "user", "content": "x"}],
                "tools": [{"name": "a"}],
            },
            "tools.0.input_schema",
        ),
        (
            {
                "max_tokens": 5,
                "messages": [{"role": "user", "content": "x"}],
                "context_management": {"edits": [{"type": "clear_tool_uses_20250919"}]},
            },
            "context_management",
        ),
        (
            {
                "max_tokens": 5,
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "document", "source": {"type": "base64", "data": "JVBE"}}
                        ],
                    }
                ],
            },
            "messages.0.content.0",
        ),
    ],
)
def test_a_messages_mistake_names_its_field(body: dict[str, Any], field: str) -> None:
    with pytest.raises(WireError) as caught:
        MESSAGES.to_chat({"model": "m", **body}, {})
    assert caught.value.field == field
    assert caught.value.status == 400


# --- streams ----------------------------------------------------------------------------------


def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    choice = {"index": 0, "delta": delta, "finish_reason": finish, **extra}
    return {"id": "chatcmpl-abc", "model": "m", "choices": [choice]}


def events(lines: list[str]) -> list[dict[str, Any]]:
    return [json.loads(line.split("data: ", 1)[1]) for line in lines]


def test_a_stream_that_breaks_ends_in_the_wires_error_event() -> None:
    stream = MESSAGES.stream({"model": "m", "max_tokens": 5, "messages": []})
    started = events(stream.chunk(chunk({"content": "he"})))
    assert [e["type"] for e in started] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
    ]
    [error] = events(stream.fail(502, "the engine's stream ended before it finished"))
    assert error == {
        "type": "error",
        "error": {"type": "api_error", "message": "the engine's stream ended before it finished"},
    }
    responses = RESPONSES.stream({"model": "m", "input": "x"})
    responses.chunk(chunk({"content": "he"}))
    [failed] = events(responses.fail(500, "boom"))
    assert failed["type"] == "response.failed"
    assert failed["response"]["error"]["message"] == "boom"


def test_a_streamed_tool_call_is_said_as_it_comes() -> None:
    stream = MESSAGES.stream({"model": "m", "max_tokens": 5, "messages": []})
    out = stream.chunk(chunk({"content": "Ok."}))
    start = {
        "index": 0,
        "id": "t1",
        "type": "function",
        "function": {"name": "run", "arguments": ""},
    }
    out += stream.chunk(chunk({"tool_calls": [start]}))
    out += stream.chunk(chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"a":'}}]}))
    out += stream.chunk(
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": " 1}"}}]}, "tool_calls")
    )
    out += stream.end()
    said = events(out)
    kinds = [(e["type"], e.get("content_block", e.get("delta", {})).get("type")) for e in said]
    assert kinds == [
        ("message_start", None),
        ("content_block_start", "text"),
        ("content_block_delta", "text_delta"),
        ("content_block_stop", None),
        ("content_block_start", "tool_use"),
        ("content_block_delta", "input_json_delta"),
        ("content_block_delta", "input_json_delta"),
        ("content_block_stop", None),
        ("message_delta", None),
        ("message_stop", None),
    ]
    assert said[-2]["delta"]["stop_reason"] == "tool_use"
    reader = ChatReader()
    reader.body(chat_body("x"))
    assert reader.answer.prompt_tokens == 7
