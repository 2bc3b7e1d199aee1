"""Which LLM spans record one call: by response id, else by time and input messages."""

from __future__ import annotations

import json
from typing import Any

from agl import Span, semconv
from agl.tracing._same_call import same_call_groups

_MESSAGES = [{"role": "user", "parts": [{"type": "text", "content": "hi"}]}]


def llm(name: str, start: int, end: int, **attributes: Any) -> Span:
    return Span.create(
        rollout_id="ro-1",
        attempt_id="at-1",
        name=name,
        start_time_unix_nano=start,
        end_time_unix_nano=end,
        attributes={semconv.AGL_SPAN_TYPE: semconv.SPAN_TYPE_LLM, **attributes},
    )


def names(groups: list[list[Span]]) -> list[list[str]]:
    return [[span.name for span in group] for group in groups]


def test_spans_with_one_response_id_are_one_call() -> None:
    spans = [
        llm("chain-1", 0, 100, **{semconv.GEN_AI_RESPONSE_ID: "r1"}),
        llm("client-1", 10, 90, **{semconv.GEN_AI_RESPONSE_ID: "r1"}),
        llm("chain-2", 200, 300, **{semconv.GEN_AI_RESPONSE_ID: "r2"}),
    ]
    assert names(same_call_groups(spans)) == [["chain-1", "client-1"], ["chain-2"]]


def test_a_failed_call_is_one_call_when_nested_in_time_with_the_same_messages() -> None:
    # Key order differs between instrumentations: the messages are compared parsed.
    reordered = [{"parts": [{"content": "hi", "type": "text"}], "role": "user"}]
    spans = [
        llm("chain", 0, 100, **{semconv.GEN_AI_INPUT_MESSAGES: json.dumps(_MESSAGES)}),
        llm("client", 10, 90, **{semconv.GEN_AI_INPUT_MESSAGES: json.dumps(reordered)}),
        llm("no-messages", 20, 80),
    ]
    assert names(same_call_groups(spans)) == [["chain", "client", "no-messages"]]


def test_failed_calls_apart_in_time_or_with_other_messages_stay_apart() -> None:
    other = [{"role": "user", "parts": [{"type": "text", "content": "something else"}]}]
    spans = [
        llm("slow", 0, 1000, **{semconv.GEN_AI_INPUT_MESSAGES: json.dumps(_MESSAGES)}),
        # A concurrent call inside the slow one's time, with other messages: another call.
        llm("concurrent", 10, 20, **{semconv.GEN_AI_INPUT_MESSAGES: json.dumps(other)}),
        llm("later", 2000, 3000, **{semconv.GEN_AI_INPUT_MESSAGES: json.dumps(_MESSAGES)}),
    ]
    assert names(same_call_groups(spans)) == [["slow"], ["concurrent"], ["later"]]
