"""Re-rendered histories: a call that continues its conversation by its messages while its
prompt ids do not extend the previous call's prompt + response is counted (``prefix_mismatch``),
trained on its own and never merged; a new conversation is a plain trajectory break.

Each history is recorded the way the gateway records it (:class:`agl.gateway._record.CallRecord`:
the chat request sent to the engine, and the engine's answer with its prompt and response ids),
tokenized and templated by the scripted server's tokenizer and ChatML template, so a history is
re-rendered exactly when a real template would re-render it. One history is also driven through
the real gateway on each wire it speaks (chat completions, the Responses API with the ``openai``
SDK, the Anthropic Messages API with the ``anthropic`` SDK) to the scripted engine.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest

from agl import Attempt, AttemptStatus, Rollout, RolloutStatus, Span, semconv
from agl._results import RolloutResult, summarize
from agl.gateway._record import CallRecord
from agl.lightning import LLMCall, TransitionBuilder, extract_calls
from agl.lightning._history import same_conversation
from agl.testing._openai_wire import EOS_ID, decode, encode, render_chat, tool_call_text

SYSTEM = {"role": "system", "content": "You research questions with the search tool."}
QUESTION = {"role": "user", "content": "Who wrote the Iliad?"}


class Harness:
    """An agent's harness as the gateway sees it: each request's messages, and the model's
    answer as the engine sampled it (reasoning included) with its token ids."""

    def __init__(self, rollout_id: str = "r") -> None:
        self.rollout_id = rollout_id
        self.spans: list[Span] = []

    def call(
        self,
        messages: list[dict[str, Any]],
        content: str | None = None,
        *,
        tool: tuple[str, dict[str, Any]] | None = None,
        reasoning: str | None = None,
        reasoning_field: bool = True,
    ) -> dict[str, Any]:
        """Record one call; return the assistant message a harness appends (no reasoning)."""
        index = len(self.spans)
        message: dict[str, Any] = {"role": "assistant", "content": content}
        sampled = content or ""
        if tool is not None:
            name, arguments = tool
            text = json.dumps(arguments)
            call = {"id": f"call_{index}", "type": "function"}
            message["tool_calls"] = [{**call, "function": {"name": name, "arguments": text}}]
            sampled += "".join(tool_call_text(name, text))
        if reasoning is not None:
            sampled = f"<think>{reasoning}</think>{sampled}"
        answer = dict(message)
        if reasoning is not None and reasoning_field:
            answer["reasoning_content"] = reasoning
        elif reasoning is not None:
            answer["content"] = sampled  # no reasoning parser: the answer holds the thinking
        prompt_ids = encode(render_chat(messages))
        record = CallRecord(
            self.rollout_id, "a", "chat", "http://engine/v1", {"messages": messages}
        )
        choice = {"index": 0, "message": answer, "token_ids": [*encode(sampled), EOS_ID]}
        record.take_response(
            {"id": f"chatcmpl-{index}", "choices": [choice], "prompt_token_ids": prompt_ids}
        )
        record.start_ns, record.end_ns = 10 * index + 1, 10 * index + 5
        self.spans.append(record.to_span())
        return message

    def result(self, reward: float = 1.0) -> RolloutResult:
        attributes = {semconv.AGL_SPAN_TYPE: semconv.SPAN_TYPE_REWARD, semconv.AGL_REWARD: reward}
        final = Span.create(
            rollout_id=self.rollout_id, attempt_id="a", name="agl.reward", attributes=attributes
        )
        rollout = Rollout(
            rollout_id=self.rollout_id,
            input=None,
            status=RolloutStatus.SUCCEEDED,
            enqueue_time=0,
            latest_attempt_id="a",
        )
        attempt = Attempt(
            rollout_id=self.rollout_id,
            attempt_id="a",
            sequence=1,
            status=AttemptStatus.SUCCEEDED,
            start_time=0,
        )
        return summarize(rollout, [attempt], [*self.spans, final])


def tool_result(content: str, index: int = 0) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": f"call_{index}", "content": content}


def build(result: RolloutResult, *, trajectory: bool) -> Any:
    return TransitionBuilder(advantage="reinforce", trajectory=trajectory).build([result])


def prompt_length(result: RolloutResult, index: int) -> int:
    return len(result.spans[index].attributes[semconv.AGL_PROMPT_TOKEN_IDS])


@pytest.mark.parametrize("reasoning_field", [True, False], ids=["reasoning_content", "in_text"])
def test_a_template_that_drops_reasoning_re_renders_the_history(
    reasoning_field: bool, caplog: pytest.LogCaptureFixture
) -> None:
    harness = Harness()
    messages = [SYSTEM, QUESTION]
    answer = harness.call(
        messages, "Homer.", reasoning="Greek epic; Homer.", reasoning_field=reasoning_field
    )
    harness.call([*messages, answer, {"role": "user", "content": "When?"}], "8th century BC.")
    result = harness.result()
    # the messages go on, but the template renders the first answer without its reasoning
    mismatch = [("r", 1, prompt_length(result, 0))]

    for trajectory in (False, True):
        with caplog.at_level(logging.WARNING, logger="agl.lightning"):
            caplog.clear()
            batch = build(result, trajectory=trajectory)
        assert [(t.call_index, t.n_calls) for t in batch] == [(0, 1), (1, 1)]  # nothing merged
        report = batch.report
        assert report.notes["prefix_mismatch"] == 1
        assert report.as_metrics()["transitions/prefix_mismatch"] == 1.0
        assert report.prefix_mismatches == mismatch
        assert report.notes["trajectory_breaks"] == 0
        assert "1 re-rendered histories (prefix_mismatch)" in report.summary()
        [warning] = [r for r in caplog.records if r.name == "agl.lightning"]
        assert warning.levelno == logging.WARNING
        assert f"rollout r, call 1: from token {mismatch[0][2]} on" in warning.getMessage()


def test_a_compacted_history_is_a_prefix_mismatch() -> None:
    harness = Harness()
    messages = [SYSTEM, QUESTION]
    first = harness.call(messages, tool=("search", {"q": "Iliad author"}))
    messages += [first, tool_result("The Iliad is attributed to Homer. " * 20, 0)]
    second = harness.call(messages, tool=("search", {"q": "Homer dates"}))
    messages += [second, tool_result("Homer lived around the 8th century BC.", 1)]
    # the harness compacts: the first search and its long result become a summary
    summary = {"role": "user", "content": "Summary so far: the Iliad is attributed to Homer."}
    compacted = [SYSTEM, QUESTION, summary, second, messages[-1]]
    harness.call(compacted, "Homer, in the 8th century BC.")
    result = harness.result()

    merged = build(result, trajectory=True)
    assert [(t.call_index, t.n_calls) for t in merged] == [(0, 2), (2, 1)]
    per_call = build(result, trajectory=False)
    assert len(per_call) == 3
    for report in (merged.report, per_call.report):
        assert report.as_metrics()["transitions/prefix_mismatch"] == 1.0
        assert [(rid, index) for rid, index, _ in report.prefix_mismatches] == [("r", 2)]
        assert report.notes["trajectory_breaks"] == 0


def test_an_edited_tool_result_is_a_prefix_mismatch() -> None:
    harness = Harness()
    messages = [SYSTEM, QUESTION]
    first = harness.call(messages, tool=("search", {"q": "Iliad"}))
    messages += [first, tool_result("Result: the Iliad, an epic poem attributed to Homer.")]
    second = harness.call(messages, "Homer.")
    # the harness trims the old tool result before the next turn
    edited = [SYSTEM, QUESTION, first, tool_result("Result: [trimmed]")]
    harness.call([*edited, second, {"role": "user", "content": "Sure?"}], "Yes.")
    result = harness.result()

    merged = build(result, trajectory=True)
    assert [(t.call_index, t.n_calls) for t in merged] == [(0, 2), (2, 1)]
    report = merged.report
    assert report.as_metrics()["transitions/prefix_mismatch"] == 1.0
    [(_, index, position)] = report.prefix_mismatches
    # the ids part where the tool result's text starts to differ
    text = render_chat(edited)
    assert (index, position) == (2, len(encode(text[: text.index("[trimmed]")])))
    assert build(result, trajectory=False).report.notes["prefix_mismatch"] == 1


def test_a_new_conversation_is_a_trajectory_break_not_a_mismatch(
    caplog: pytest.LogCaptureFixture,
) -> None:
    harness = Harness()
    harness.call([SYSTEM, QUESTION], "Homer.")
    other = [SYSTEM, {"role": "user", "content": "Who wrote the Aeneid?"}]
    harness.call(other, "Virgil.")  # a sub-task: a different first user message
    harness.call(other, "Vergil.")  # the same request again: a resample
    harness.call([QUESTION], "Homer.")  # no system message: another opening
    result = harness.result()

    with caplog.at_level(logging.WARNING, logger="agl.lightning"):
        merged = build(result, trajectory=True)
        per_call = build(result, trajectory=False)
    assert [t.n_calls for t in merged] == [1, 1, 1, 1]
    assert merged.report.notes["trajectory_breaks"] == 3
    assert per_call.report.notes["trajectory_breaks"] == 0  # breaks are a trajectory's
    for report in (merged.report, per_call.report):
        assert report.as_metrics()["transitions/prefix_mismatch"] == 0.0
        assert report.prefix_mismatches == []
    assert not [r for r in caplog.records if r.name == "agl.lightning"]


def test_a_history_that_extends_is_merged_as_before() -> None:
    harness = Harness()
    messages = [SYSTEM, QUESTION]
    first = harness.call(messages, tool=("search", {"q": "Iliad"}))
    messages += [first, tool_result("The Iliad is attributed to Homer.")]
    second = harness.call(messages, "Homer.")
    harness.call([*messages, second, {"role": "user", "content": "Sure?"}], "Yes.")
    result = harness.result()

    [sample] = build(result, trajectory=True)
    assert sample.n_calls == 3
    assert sample.prompt_ids == encode(render_chat([SYSTEM, QUESTION]))
    assert len(build(result, trajectory=False)) == 3
    for trajectory in (False, True):
        report = build(result, trajectory=trajectory).report
        assert report.as_metrics()["transitions/prefix_mismatch"] == 0.0
        assert report.notes["trajectory_breaks"] == 0


def test_without_messages_the_ids_alone_decide() -> None:
    harness = Harness()
    answer = harness.call([SYSTEM, QUESTION], "Homer.", reasoning="Greek epic.")
    harness.call([SYSTEM, QUESTION, answer, {"role": "user", "content": "When?"}], "Early.")
    for span in harness.spans:  # as a completions call, or one only an instrumentation saw
        del span.attributes[semconv.AGL_REQUEST_JSON]
    report = build(harness.result(), trajectory=True).report
    assert report.notes["trajectory_breaks"] == 1
    assert report.as_metrics()["transitions/prefix_mismatch"] == 0.0


# --- through the real gateway, on each wire ---------------------------------------------------

RESULT = "The Iliad is attributed to Homer."
TRIMMED = "[trimmed]"
CHAT_TOOLS: Any = [{"type": "function", "function": {"name": "search", "parameters": {}}}]
RESPONSES_TOOLS: Any = [{"type": "function", "name": "search", "parameters": {}}]
MESSAGES_TOOLS: Any = [{"name": "search", "input_schema": {"type": "object"}}]


def researcher(request: dict[str, Any]) -> Any:
    """Search first, answer from the result, then confirm."""
    from agl.testing.openai_server import text_reply, tool_reply

    last = request["messages"][-1]
    if not any(m["role"] == "assistant" for m in request["messages"]):
        return tool_reply("search", {"q": "Iliad"})
    return text_reply("Homer." if last["role"] == "tool" else "Yes.")


async def _chat(base_url: str) -> None:
    import openai

    async with openai.AsyncOpenAI(base_url=base_url, api_key="secret", max_retries=0) as client:
        asked: list[Any] = [SYSTEM, QUESTION]
        first = await client.chat.completions.create(model="m", messages=asked, tools=CHAT_TOOLS)
        call = first.choices[0].message
        [tool_call] = call.tool_calls or []
        searched = [*asked, call.model_dump(exclude_none=True)]
        result = {"role": "tool", "tool_call_id": tool_call.id, "content": RESULT}
        second = await client.chat.completions.create(
            model="m", messages=[*searched, result], tools=CHAT_TOOLS
        )
        assert second.choices[0].message.content == "Homer."
        edited = [*searched, {**result, "content": TRIMMED}]  # the harness trims the result
        answer = {"role": "assistant", "content": "Homer."}
        follow_up = [*edited, answer, {"role": "user", "content": "Sure?"}]
        await client.chat.completions.create(model="m", messages=follow_up, tools=CHAT_TOOLS)


async def _responses(base_url: str) -> None:
    import openai

    async with openai.AsyncOpenAI(base_url=base_url, api_key="secret", max_retries=0) as client:
        system, asked = str(SYSTEM["content"]), [QUESTION]
        first = await client.responses.create(
            model="m", instructions=system, input=asked, tools=RESPONSES_TOOLS
        )
        [call] = first.output
        assert call.type == "function_call"
        searched = [*asked, call.model_dump(exclude_none=True)]
        result = {"type": "function_call_output", "call_id": call.call_id, "output": RESULT}
        second = await client.responses.create(
            model="m", instructions=system, input=[*searched, result], tools=RESPONSES_TOOLS
        )
        assert second.output_text == "Homer."
        edited = [*searched, {**result, "output": TRIMMED}]
        answer = {"role": "assistant", "content": "Homer."}
        follow_up: Any = [*edited, answer, {"role": "user", "content": "Sure?"}]
        await client.responses.create(
            model="m", instructions=system, input=follow_up, tools=RESPONSES_TOOLS
        )


async def _messages(base_url: str) -> None:
    import anthropic

    # Anthropic's clients add /v1/messages themselves: they get the attempt's base without /v1.
    base = base_url.removesuffix("/v1")
    async with anthropic.AsyncAnthropic(base_url=base, api_key="secret", max_retries=0) as client:
        system, asked = str(SYSTEM["content"]), [QUESTION]
        options: Any = {"model": "m", "max_tokens": 100, "system": system, "tools": MESSAGES_TOOLS}
        first = await client.messages.create(messages=asked, **options)
        [use] = first.content
        assert use.type == "tool_use"
        searched = [*asked, {"role": "assistant", "content": [use.model_dump()]}]
        result = {"type": "tool_result", "tool_use_id": use.id, "content": RESULT}
        second = await client.messages.create(
            messages=[*searched, {"role": "user", "content": [result]}], **options
        )
        assert [block.type for block in second.content] == ["text"]
        edited = [*searched, {"role": "user", "content": [{**result, "content": TRIMMED}]}]
        answer = {"role": "assistant", "content": "Homer."}
        follow_up = [*edited, answer, {"role": "user", "content": "Sure?"}]
        await client.messages.create(messages=follow_up, **options)


@pytest.mark.parametrize(
    "agent", [_chat, _responses, _messages], ids=["chat", "responses", "messages"]
)
def test_a_re_rendered_history_is_counted_on_each_wire(agent: Any) -> None:
    """An agent edits an earlier tool result between turns, on each wire the gateway speaks,
    through the real gateway to the scripted engine: its third call is a prefix mismatch."""
    from agl import RolloutRequest
    from agl._results import fetch_results
    from agl.gateway import GatewayServer
    from agl.store._memory import MemoryStore
    from agl.testing.openai_server import OpenAIServer

    store = MemoryStore()

    async def claim() -> tuple[str, str]:
        await store.enqueue_rollouts([RolloutRequest(input=0)])
        [claimed] = await store.dequeue_rollouts()
        return claimed.rollout.rollout_id, claimed.attempt.attempt_id

    async def finish(rollout_id: str, attempt_id: str) -> list[RolloutResult]:
        reward = {semconv.AGL_SPAN_TYPE: semconv.SPAN_TYPE_REWARD, semconv.AGL_REWARD: 1.0}
        span = Span.create(
            rollout_id=rollout_id, attempt_id=attempt_id, name="agl.reward", attributes=reward
        )
        await store.add_spans([span])
        await store.update_attempt(rollout_id, attempt_id, AttemptStatus.SUCCEEDED)
        return await fetch_results(store, [await store.get_rollout(rollout_id)])

    with (
        OpenAIServer(researcher) as engine,
        GatewayServer([engine.url], store, token="secret") as gateway,
    ):
        rollout_id, attempt_id = asyncio.run(claim())
        asyncio.run(agent(gateway.rollout_url(rollout_id, attempt_id)))
        assert gateway.gateway is not None
        assert gateway.gateway.sender.flush(10)
        [result] = asyncio.run(finish(rollout_id, attempt_id))

    calls = extract_calls(result.spans).calls
    assert [call.messages() is not None for call in calls] == [True] * 3
    merged = build(result, trajectory=True)
    assert [(t.call_index, t.n_calls) for t in merged] == [(0, 2), (2, 1)]
    [(rid, index, position)] = merged.report.prefix_mismatches
    assert (rid, index) == (rollout_id, 2)
    # the ids part where the trimmed tool result starts: every token before is the same
    before = [*(calls[1].prompt_ids or []), *(calls[1].response_ids or [])]
    after = calls[2].prompt_ids or []
    assert after[:position] == before[:position]
    assert after[position] != before[position]
    assert TRIMMED[0] in decode(after[position : position + 1])
    per_call = build(result, trajectory=False).report
    assert per_call.as_metrics()["transitions/prefix_mismatch"] == 1.0
    assert merged.report.notes["trajectory_breaks"] == per_call.notes["trajectory_breaks"] == 0


def _call(messages: list[dict[str, Any]], response: dict[str, Any] | None) -> LLMCall:
    return LLMCall(
        rollout_id="r",
        attempt_id="a",
        index=0,
        request=json.dumps({"messages": messages}),
        response=None if response is None else json.dumps(response),
    )


@pytest.mark.parametrize(
    "response",
    [
        {"choices": [{"message": {"role": "assistant", "content": "<think>x</think> Homer."}}]},
        {"output": [{"type": "message", "content": [{"type": "output_text", "text": "Homer."}]}]},
        {"content": [{"type": "thinking", "thinking": "x"}, {"type": "text", "text": "Homer."}]},
    ],
    ids=["chat", "responses", "messages"],
)
def test_the_previous_answer_is_read_from_each_wires_response(response: dict[str, Any]) -> None:
    before = _call([SYSTEM, QUESTION], response)
    answered = [
        SYSTEM,
        QUESTION,
        {"role": "assistant", "content": [{"type": "text", "text": "Homer."}]},
    ]
    assert same_conversation(before, _call([*answered, {"role": "user", "content": "When?"}], None))
    assert not same_conversation(before, _call([SYSTEM, QUESTION], None))  # asked again
    other = [SYSTEM, {"role": "user", "content": "Who wrote the Aeneid?"}, answered[2]]
    assert not same_conversation(before, _call(other, None))
    assert same_conversation(_call([SYSTEM, QUESTION], None), _call(answered, None)) is None
