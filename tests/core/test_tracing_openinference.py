"""The provider view openinference-based adapters record through: spans normalized at their end."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agl import semconv
from agl.tracing._normalizing import (
    NormalizingTracerProvider,
    agent_attributes,
    genai_attributes,
    note_response,
    openinference_attributes,
    tool_attributes,
)


def test_spans_get_the_normalized_attributes_before_they_are_exported() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    seen: list[dict[str, Any]] = []

    def normalize(name: str, attributes: Mapping[str, Any]) -> Mapping[str, Any]:
        seen.append(dict(attributes))
        return {"agl.agent.name": name.upper()} if name == "writer" else {}

    tracer = NormalizingTracerProvider(provider, normalize).get_tracer("test")
    with tracer.start_as_current_span("writer") as span:
        span.set_attribute("late", 1)  # set just before the end, as openinference does
    with tracer.start_as_current_span("other"):
        pass
    direct = provider.get_tracer("direct").start_span("untouched")
    direct.end()
    finished = {s.name: dict(s.attributes or {}) for s in exporter.get_finished_spans()}
    assert finished["writer"] == {"late": 1, "agl.agent.name": "WRITER"}
    assert finished["other"] == {}
    assert finished["untouched"] == {}
    assert seen == [{"late": 1}, {}]  # normalize sees the attributes as they are at the end


def test_tool_attributes_come_from_openinference_input_and_output() -> None:
    json_input = {"input.value": '{"a": 2}', "input.mime_type": "application/json"}
    assert tool_attributes("add", {**json_input, "output.value": "5"}) == {
        semconv.AGL_SPAN_TYPE: semconv.SPAN_TYPE_TOOL,
        semconv.AGL_TOOL_NAME: "add",
        semconv.AGL_TOOL_ARGUMENTS: '{"a": 2}',
        semconv.AGL_TOOL_RESULT: "5",
    }
    plain = tool_attributes("echo", {"input.value": "hi", "output.value": 7})
    assert plain[semconv.AGL_TOOL_ARGUMENTS] == '"hi"'  # text input: JSON-encoded
    assert plain[semconv.AGL_TOOL_RESULT] == "7"  # a number openinference kept: JSON
    assert semconv.AGL_TOOL_RESULT not in tool_attributes("t", {})
    mine = tool_attributes("t", {"output.value": "raw"}, result="read my way")
    assert mine[semconv.AGL_TOOL_RESULT] == "read my way"
    assert semconv.AGL_TOOL_RESULT not in tool_attributes("t", {"output.value": "x"}, result=None)


def test_openinference_kinds_become_agent_and_tool_spans() -> None:
    agent = {"openinference.span.kind": "AGENT", "graph.node.id": "writer"}
    assert openinference_attributes("run", agent) == agent_attributes("writer")
    named = {**agent, "agent.name": "Writer"}
    assert openinference_attributes("run", named)[semconv.AGL_AGENT_NAME] == "Writer"
    assert openinference_attributes("run", {"openinference.span.kind": "AGENT"}) == {}
    by_span = openinference_attributes(
        "critic.turn", {"openinference.span.kind": "AGENT"}, lambda name, _: name.split(".")[0]
    )
    assert by_span[semconv.AGL_AGENT_NAME] == "critic"
    tool = {"openinference.span.kind": "TOOL", "tool.name": "add", "output.value": "3"}
    assert openinference_attributes("add", tool) == tool_attributes("add", tool)
    assert openinference_attributes("x", {"openinference.span.kind": "LLM"}) == {}


def test_note_response_marks_only_a_current_llm_span() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = NormalizingTracerProvider(provider, lambda name, attributes: {}).get_tracer("t")
    assert note_response("chatcmpl-0") is False  # no current span
    with tracer.start_as_current_span("chain", attributes={"openinference.span.kind": "CHAIN"}):
        assert note_response("chatcmpl-1", "m") is False
    with tracer.start_as_current_span("llm", attributes={"openinference.span.kind": "LLM"}):
        assert note_response("chatcmpl-2", "m") is True
        assert note_response("", None) is True  # nothing to add: unchanged
    with provider.get_tracer("plain").start_as_current_span("outside"):
        assert note_response("chatcmpl-3") is False  # not started through the view
    attributes = {s.name: dict(s.attributes or {}) for s in exporter.get_finished_spans()}
    assert attributes["llm"][semconv.GEN_AI_RESPONSE_ID] == "chatcmpl-2"
    assert attributes["llm"][semconv.GEN_AI_RESPONSE_MODEL] == "m"
    assert semconv.GEN_AI_RESPONSE_ID not in attributes["chain"]


def test_genai_agent_and_tool_spans_become_agls() -> None:
    agent = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "writer"}
    assert genai_attributes("invoke_agent writer", agent) == agent_attributes("writer")
    tool = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "lookup",
        "gen_ai.tool.call.arguments": '{"city": "Paris"}',
        "gen_ai.tool.call.result": 21,
    }
    assert genai_attributes("execute_tool lookup", tool) == {
        semconv.AGL_SPAN_TYPE: semconv.SPAN_TYPE_TOOL,
        semconv.AGL_TOOL_NAME: "lookup",
        semconv.AGL_TOOL_ARGUMENTS: '{"city": "Paris"}',
        semconv.AGL_TOOL_RESULT: "21",
    }
    hidden = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup"}
    assert semconv.AGL_TOOL_RESULT not in genai_attributes("t", hidden)
    assert genai_attributes("chat m", {"gen_ai.operation.name": "chat"}) == {}
    assert genai_attributes("invoke_agent", {"gen_ai.operation.name": "invoke_agent"}) == {}


def test_note_response_marks_a_genai_model_call_span_too() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = NormalizingTracerProvider(provider, lambda name, attributes: {}).get_tracer("t")
    with tracer.start_as_current_span(
        "generate_content m", attributes={"gen_ai.operation.name": "generate_content"}
    ):
        assert note_response("chatcmpl-4") is True
    [span] = exporter.get_finished_spans()
    assert (span.attributes or {})[semconv.GEN_AI_RESPONSE_ID] == "chatcmpl-4"
