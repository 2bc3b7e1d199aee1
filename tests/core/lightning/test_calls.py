"""Reading LLM calls back from one attempt's spans: joining, tree repair, agents, rewards.

The spans are built by hand here, in the shapes the real recorders produce them (the gateway's
``agl.gateway.chat`` span, OpenTelemetry GenAI spans of different vintages, agl's emitters), so
each rule is tested on its own; ``test_builder.py`` runs the real recorders end to end.
"""

from __future__ import annotations

from typing import Any

from agl import Span, semconv
from agl._spans import new_span_id, new_trace_id
from agl.lightning import extract_calls

R, A = "ro-1", "at-1"
TRACE = new_trace_id()


def span(
    name: str,
    start: int,
    end: int,
    parent: Span | None = None,
    trace: str = TRACE,
    parent_id: str | None = None,
    **attributes: Any,
) -> Span:
    return Span(
        rollout_id=R,
        attempt_id=A,
        trace_id=trace,
        span_id=new_span_id(),
        parent_id=parent.span_id if parent is not None else parent_id,
        name=name,
        start_time_unix_nano=start,
        end_time_unix_nano=end,
        attributes=attributes,
    )


def agent(name: str, start: int, end: int, parent: Span | None = None) -> Span:
    attrs = {semconv.AGL_SPAN_TYPE: "agent", semconv.AGL_AGENT_NAME: name}
    return span(f"agent {name}", start, end, parent, **attrs)


def llm(start: int, end: int, parent: Span | None, response_id: str | None, **extra: Any) -> Span:
    attrs: dict[str, Any] = {semconv.GEN_AI_OPERATION_NAME: "chat", **extra}
    if response_id is not None:
        attrs[semconv.GEN_AI_RESPONSE_ID] = response_id
    return span("openai.chat", start, end, parent, **attrs)


def gateway(start: int, end: int, response_id: str | None, prompt: list[int]) -> Span:
    attrs: dict[str, Any] = {
        semconv.AGL_SPAN_TYPE: semconv.SPAN_TYPE_GATEWAY,
        semconv.AGL_PROMPT_TOKEN_IDS: prompt,
        semconv.AGL_RESPONSE_TOKEN_IDS: [7, 8, 1],
        semconv.AGL_RESPONSE_LOGPROBS: [-0.1, -0.2, -0.3],
        semconv.AGL_REQUEST_JSON: '{"messages": [{"role": "user", "content": "hi"}]}',
    }
    if response_id is not None:
        attrs[semconv.GEN_AI_RESPONSE_ID] = response_id
    # The gateway records in its own trace: it is never in the agent's span tree.
    return span("agl.gateway.chat", start, end, trace=new_trace_id(), **attrs)


def reward(at: int, value: float, parent: Span | None = None, link: str | None = None) -> Span:
    attrs: dict[str, Any] = {semconv.AGL_SPAN_TYPE: "reward", semconv.AGL_REWARD: value}
    if link is not None:
        attrs[semconv.AGL_LINK_RESPONSE_ID] = link
    return span("agl.reward", at, at, parent, **attrs)


def test_calls_join_on_response_id_whatever_the_arrival_order() -> None:
    root = span("rollout", 0, 100)
    writer = agent("writer", 1, 50, root)
    checker = agent("checker", 51, 99, root)
    w = llm(2, 20, writer, "resp-w")
    c = llm(52, 70, checker, "resp-c")
    # gateway spans arrive in another order, from another process, in their own trace
    gc, gw = gateway(53, 69, "resp-c", [1, 2]), gateway(3, 19, "resp-w", [3, 4])
    found = extract_calls([gc, root, c, gw, writer, w, checker])

    assert [(call.agent, call.response_id, call.prompt_ids) for call in found.calls] == [
        ("writer", "resp-w", [3, 4]),
        ("checker", "resp-c", [1, 2]),
    ]
    assert [call.index for call in found.calls] == [0, 1]
    assert found.calls[0].logprobs == [-0.1, -0.2, -0.3]
    assert found.calls[0].messages() == [{"role": "user", "content": "hi"}]
    assert found.counts["joined_by_order"] == 0
    assert found.counts["gateway_only"] == 0


def test_calls_without_a_response_id_are_joined_in_order() -> None:
    root = span("rollout", 0, 100)
    a = agent("a", 1, 99, root)
    first, second = llm(2, 10, a, None), llm(20, 30, a, None)
    spans = [root, a, second, first, gateway(21, 29, "x2", [2]), gateway(3, 9, "x1", [1])]
    found = extract_calls(spans)

    assert [call.prompt_ids for call in found.calls] == [[1], [2]]
    assert [call.agent for call in found.calls] == ["a", "a"]
    assert found.counts["joined_by_order"] == 2


def test_one_sided_calls_are_kept_with_what_that_side_knows() -> None:
    root = span("rollout", 0, 100)
    a = agent("solver", 1, 99, root)
    # a judge model called directly: instrumented, never through the gateway
    judge = llm(10, 20, a, "judge-1")
    # an uninstrumented call through the gateway, attributed by time to the agent around it
    lone = gateway(30, 40, "g-1", [5])
    found = extract_calls([root, a, judge, lone])

    by_id = {call.response_id: call for call in found.calls}
    assert by_id["judge-1"].prompt_ids is None
    assert not by_id["judge-1"].has_tokens
    assert by_id["g-1"].prompt_ids == [5]
    assert by_id["g-1"].agent == "solver"
    assert found.counts["instrumented_only"] == 1
    assert found.counts["gateway_only"] == 1


def test_llm_spans_are_recognised_by_conventions_not_names() -> None:
    root = span("rollout", 0, 100)
    a = agent("a", 1, 99, root)
    legacy = span(
        "some.framework.step",  # no telling name
        2,
        10,
        a,
        **{"llm.request.type": "chat", semconv.GEN_AI_SYSTEM: "openai"},
    )
    structured = span(
        "parse", 11, 20, a, **{semconv.AGL_SPAN_TYPE: "llm", semconv.GEN_AI_RESPONSE_ID: "s"}
    )
    tool_step = span("tool", 21, 30, a, **{semconv.AGL_SPAN_TYPE: "tool"})
    named_like_llm = span("ChatOpenAI", 31, 40, a)  # a name is not evidence
    found = extract_calls([root, a, legacy, structured, tool_step, named_like_llm])

    assert len(found.calls) == 2
    assert [call.agent for call in found.calls] == ["a", "a"]


def test_the_nearest_enclosing_agent_wins_and_the_call_may_name_its_own() -> None:
    root = span("rollout", 0, 100)
    outer = agent("planner", 1, 99, root)
    inner = agent("coder", 10, 50, outer)
    tool = span("tool", 11, 40, inner)
    deep = llm(12, 20, tool, "deep")
    mine = llm(60, 70, outer, "own", **{semconv.AGL_AGENT_NAME: "critic"})
    plain = llm(80, 90, outer, "plain")
    found = extract_calls([root, outer, inner, tool, deep, mine, plain])

    assert {call.response_id: call.agent for call in found.calls} == {
        "deep": "coder",
        "own": "critic",
        "plain": "planner",
    }


def test_lost_and_implausible_parents_are_repaired_by_time() -> None:
    root = span("rollout", 0, 100)
    writer = agent("writer", 1, 40, root)
    checker = agent("checker", 41, 99, root)
    # a callback lost its context: its parent id points at a span that was never exported
    orphan = llm(5, 10, None, "o", parent_id=new_span_id())
    # context leaked from a finished span: the parent (writer) ended before this call began
    leaked = llm(50, 60, writer, "l")
    # a thread started a fresh trace: no parent at all, a second root
    stray = llm(70, 80, None, "s", trace=new_trace_id())
    found = extract_calls([root, writer, checker, orphan, leaked, stray])

    assert {call.response_id: call.agent for call in found.calls} == {
        "o": "writer",
        "l": "checker",
        "s": "checker",
    }
    assert found.counts["reparented_spans"] == 3


def test_rewards_final_step_linked_and_unmatched() -> None:
    root = span("rollout", 0, 100)
    a = agent("a", 1, 99, root)
    early = reward(1, 9.0, a)  # before any call: matches nothing
    c1 = llm(2, 10, a, "r1")
    c2 = llm(20, 30, a, "r2")
    after_c1 = reward(15, 0.2, a)  # follows c1
    linked = reward(40, 0.5, a, link="r1")  # emitted late, but names r1
    after_c2 = reward(41, 0.3, a)  # follows c2
    bad_link = reward(42, 0.7, a, link="nope")
    final = reward(99, 1.0, a)
    spans = [root, a, early, c1, c2, after_c1, linked, after_c2, bad_link, final]
    found = extract_calls(spans)

    assert found.final_reward == 1.0
    assert [call.step_rewards for call in found.calls] == [[0.2, 0.5], [0.3]]
    assert found.counts["unmatched_rewards"] == 2


def test_an_attempt_without_spans_or_calls() -> None:
    assert extract_calls([]).calls == []
    root = span("rollout", 0, 10)
    found = extract_calls([root, reward(5, 0.5, root)])
    assert found.calls == []
    assert found.final_reward == 0.5


def test_a_call_two_instrumentations_recorded_counts_once() -> None:
    # A framework's model span inside the agent, and the OpenAI client's span of the same call
    # hanging off the root (the framework did not make its span current): one call, the agent's.
    root = span("rollout", 0, 100)
    writer = agent("writer", 1, 50, root)
    framework = llm(2, 30, writer, "resp-1", **{"llm.system": "openai"})
    client = llm(3, 29, root, "resp-1")
    result = extract_calls([root, writer, client, framework, gateway(4, 28, "resp-1", [5])])
    [call] = result.calls
    assert call.agent == "writer"
    assert call.prompt_ids == [5]
    assert result.counts["duplicate_llm_spans"] == 1
    assert result.counts["instrumented_only"] == 0
