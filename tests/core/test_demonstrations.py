"""A scripted teacher's chat exchanges are kept as conversations, as a real client sent them."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from agl.testing.demonstrations import Demonstrations, assistant_message
from agl.testing.openai_server import OpenAIServer, Reply, ToolCall, error_reply, tool_reply

TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two numbers.",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                "required": ["a", "b"],
            },
        },
    }
]


def _teacher(request: dict[str, Any]) -> Reply | str:
    if "messages" not in request:
        return "a completion"
    last = request["messages"][-1]
    if last["role"] == "tool":
        return f"It is {last['content']}."
    if "fail" in str(last["content"]):
        return error_reply(400, "the teacher refuses")
    return tool_reply("add", {"a": 2, "b": 3})


def test_a_tool_calling_exchange_becomes_two_conversations_with_their_tools() -> None:
    teacher = Demonstrations(_teacher)
    with OpenAIServer(teacher) as server, openai.OpenAI(base_url=server.url, api_key="t") as client:
        messages: list[Any] = [{"role": "user", "content": "What is 2 + 3?"}]
        first = client.chat.completions.create(model="m", messages=messages, tools=TOOLS)
        call = first.choices[0].message.tool_calls[0]  # type: ignore[index]
        messages += [
            first.choices[0].message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": "5"},
        ]
        second = client.chat.completions.create(model="m", messages=messages, tools=TOOLS)
        with pytest.raises(openai.BadRequestError):
            client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "fail"}]
            )
        client.completions.create(model="m", prompt="not a chat")
    assert second.choices[0].message.content == "It is 5."
    one, two = teacher.conversations  # the error and the completion are not kept
    assert one["tools"] == TOOLS
    assert one["messages"][0] == {"role": "user", "content": "What is 2 + 3?"}
    [asked] = one["messages"][1]["tool_calls"]
    assert asked["function"]["name"] == "add"
    assert json.loads(asked["function"]["arguments"]) == {"a": 2, "b": 3}
    assert two["messages"][:-1] == json.loads(json.dumps(messages))  # as the client sent them
    assert two["messages"][-1] == {"role": "assistant", "content": "It is 5."}
    teacher.clear()
    assert teacher.conversations == []


async def _async_teacher(request: dict[str, Any]) -> list[Reply | str]:
    return ["first choice", "second choice"]


def test_an_async_script_with_several_choices_keeps_the_first() -> None:
    teacher = Demonstrations(_async_teacher)
    with OpenAIServer(teacher) as server, openai.OpenAI(base_url=server.url, api_key="t") as client:
        reply = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], n=2
        )
    assert [c.message.content for c in reply.choices] == ["first choice", "second choice"]
    [kept] = teacher.conversations
    assert kept == {
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "first choice"},
        ]
    }


def test_assistant_message_names_each_call() -> None:
    reply = Reply(tool_calls=(ToolCall("a", {"x": 1}), ToolCall("b", '{"y": 2}', id="mine")))
    message = assistant_message(reply)
    assert message["content"] is None
    assert [(c["id"], c["function"]["arguments"]) for c in message["tool_calls"]] == [
        ("call_0", '{"x": 1}'),
        ("mine", '{"y": 2}'),
    ]
    assert assistant_message(Reply(text="hello")) == {"role": "assistant", "content": "hello"}


def test_record_demonstrations_runs_the_agent_and_keeps_its_exchanges_in_a_fixed_order(
    tmp_path: Any,
) -> None:
    import agl
    from agl.testing.demonstrations import record_demonstrations

    @agl.rollout
    async def ask_twice(task: dict[str, Any], llm: agl.LLM) -> float:
        async with openai.AsyncOpenAI(base_url=llm.endpoint, api_key="t") as client:
            messages: list[Any] = [{"role": "user", "content": task["q"]}]
            first = await client.chat.completions.create(model=llm.model, messages=messages)
            messages += [{"role": "assistant", "content": first.choices[0].message.content}]
            messages += [{"role": "user", "content": "again"}]
            await client.chat.completions.create(model=llm.model, messages=messages)
        return 1.0

    def teacher(request: dict[str, Any]) -> str:
        assert request["model"] == "teacher"
        return f"{request['messages'][0]['content']}, {len(request['messages'])}"

    tasks = [{"q": f"q{i}"} for i in range(5)]
    runs = [
        record_demonstrations(ask_twice, tasks, teacher, run_dir=tmp_path / str(n))
        for n in range(2)
    ]
    assert runs[0] == runs[1]  # the same order whatever order the runners answered in
    kept = runs[0]
    assert kept == sorted(kept, key=lambda c: json.dumps(c, sort_keys=True))
    assert len(kept) == 10  # two exchanges a task
    again = [c["messages"] for c in kept if len(c["messages"]) == 4]
    assert sorted(m[0]["content"] for m in again) == [t["q"] for t in tasks]
    for messages in again:
        q = messages[0]["content"]
        assert messages[1] == {"role": "assistant", "content": f"{q}, 1"}
        assert messages[3] == {"role": "assistant", "content": f"{q}, 3"}
    assert (tmp_path / "0" / "store.db").exists()
