"""Reading runs for the optimizer: gateway-recorded requests, GenAI span messages, tool calls
and tool spans of the optimized agents only, the worst runs first, cut to size."""

from __future__ import annotations

import json

import agl
from agl import RolloutResult, semconv
from agl.lightning import LLMCall
from agl_apo.traces import examples_from, render_examples, worst

TRACE = "0" * 31 + "1"


def span(span_id: str, parent: str | None, attributes: dict[str, object], start: int) -> agl.Span:
    return agl.Span(
        rollout_id="ro-1",
        attempt_id="at-1",
        trace_id=TRACE,
        span_id=span_id,
        parent_id=parent,
        name=str(attributes.get(semconv.AGL_SPAN_TYPE, "span")),
        start_time_unix_nano=start,
        end_time_unix_nano=start + 10,
        attributes=attributes,  # type: ignore[arg-type]
    )


def result(spans: list[agl.Span], reward: float | None, error: str | None = None) -> RolloutResult:
    rollout = agl.Rollout(rollout_id="ro-1", input={"q": "2+2"}, enqueue_time=0.0)
    return RolloutResult(rollout, [], spans, [] if reward is None else [reward], reward, 1, error)


def test_a_gateway_call_and_the_agents_tools_are_read() -> None:
    spans = [
        span("a" * 16, None, {semconv.AGL_AGENT_NAME: "solver"}, 0),
        span(
            "b" * 16,
            "a" * 16,
            {
                semconv.AGL_SPAN_TYPE: semconv.SPAN_TYPE_TOOL,
                semconv.AGL_TOOL_NAME: "calc",
                semconv.AGL_TOOL_ARGUMENTS: '{"x": "2+2"}',
                semconv.AGL_TOOL_RESULT: "4",
            },
            1,
        ),
        span("c" * 16, None, {semconv.AGL_AGENT_NAME: "other"}, 2),
        span(
            "d" * 16,
            "c" * 16,
            {
                semconv.AGL_SPAN_TYPE: semconv.SPAN_TYPE_TOOL,
                semconv.AGL_TOOL_NAME: "secret",
            },
            3,
        ),
    ]
    request = {
        "messages": [
            {"role": "system", "content": "Use the calculator."},
            {"role": "user", "content": [{"type": "text", "text": "2+2?"}]},
        ]
    }
    response = {
        "choices": [
            {
                "message": {
                    "content": None,
                    "tool_calls": [{"function": {"name": "calc", "arguments": '{"x": "2+2"}'}}],
                }
            }
        ]
    }
    call = LLMCall("ro-1", "at-1", 0, agent="solver", request=json.dumps(request))
    call.response = json.dumps(response)
    [example] = examples_from([result(spans, 0.0)], [call], agents={"solver"})
    text = example.render(1, 2000)
    assert "### Run 1: reward 0" in text
    assert 'Task: {"q": "2+2"}' in text
    assert "LLM call 1 by agent solver:" in text
    assert "[system] Use the calculator." in text
    assert "[user] 2+2?" in text
    assert '[tool call] calc({"x": "2+2"})' in text
    assert 'calc({"x": "2+2"}) -> 4' in text
    assert "secret" not in text  # another agent's tool


def test_genai_span_messages_are_read_when_no_request_was_recorded() -> None:
    llm = span("e" * 16, None, {
        semconv.AGL_SPAN_TYPE: semconv.SPAN_TYPE_LLM,
        semconv.GEN_AI_OPERATION_NAME: "chat",
        semconv.GEN_AI_INPUT_MESSAGES: json.dumps(
            [{"role": "user", "parts": [{"type": "text", "content": "hello"}]}]
        ),
        semconv.GEN_AI_OUTPUT_MESSAGES: json.dumps([{"role": "assistant", "parts": [
            {"type": "text", "content": "hi there"},
            {"type": "tool_call", "name": "wave", "arguments": {"times": 2}},
        ]}]),
    }, 0)  # fmt: skip
    [example] = examples_from([result([llm], 0.5)], agents={None})
    text = example.render(1, 2000)
    assert "[user] hello" in text
    assert "[reply] hi there" in text
    assert '[tool call] wave({"times": 2})' in text
    assert examples_from([result([llm], 0.5)], agents={"someone"})[0].turns == []


def test_the_worst_runs_come_first_and_long_ones_are_cut() -> None:
    runs = [result([], 1.0), result([], None, "failed: boom"), result([], 0.2)]
    examples = examples_from(runs, [])
    ordered = worst(examples, 2)
    assert [e.reward for e in ordered] == [None, 0.2]
    text = render_examples(ordered, 2000)
    assert "### Run 1: reward none (failed: boom)" in text
    assert "### Run 2: reward 0.2" in text
    assert render_examples([], 100) == "(no runs were recorded)"
    long = examples_from([result([], 0.0)], [])[0]
    long.task = "x" * 5000
    assert len(long.render(1, 300)) <= 300
