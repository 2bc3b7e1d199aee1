"""The adapter package: its plugin, script helpers, public surface, and a clean uninstrument."""

from __future__ import annotations

import contextlib
import logging

import pytest
from agent_framework import observability

import agl
from agl.store._memory import MemoryStore
from agl.testing.adapter import AdapterConformance
from agl_agent_framework.instrumentor import AgentFrameworkInstrumentor


class TestAgentFrameworkAdapter(AdapterConformance):
    package = "agl_agent_framework"
    plugin = "agent-framework"
    instrumentor = "AgentFrameworkInstrumentor"
    framework_modules = ("agent_framework", "openai")
    patched = (("agent_framework.observability", "get_tracer"),)


def settings() -> tuple[object, ...]:
    s = observability.OBSERVABILITY_SETTINGS
    return (s.enable_instrumentation, s.enable_sensitive_data, s.otel_semconv_stability_opt_in)


def test_the_frameworks_telemetry_settings_are_on_while_instrumented_and_put_back() -> None:
    s = observability.OBSERVABILITY_SETTINGS
    before = settings()
    s.enable_sensitive_data = False
    s.otel_semconv_stability_opt_in = "http"
    try:
        with agl.Tracer(MemoryStore()) as tracer:
            instrumentor = AgentFrameworkInstrumentor(tracer)
            instrumentor.instrument()
            try:
                assert s.SENSITIVE_DATA_ENABLED
                assert s.use_latest_experimental_gen_ai_semconv
                assert s.otel_semconv_stability_opt_in == "http,gen_ai_latest_experimental"
            finally:
                instrumentor.uninstrument()
            assert settings()[1:] == (False, "http")
    finally:
        s.enable_sensitive_data, s.otel_semconv_stability_opt_in = before[1], before[2]


def test_switched_off_by_the_application_it_warns_that_nothing_is_recorded(
    caplog: pytest.LogCaptureFixture,
) -> None:
    s = observability.OBSERVABILITY_SETTINGS
    s._user_disabled = True
    try:
        with (
            agl.Tracer(MemoryStore()) as tracer,
            caplog.at_level(logging.WARNING),
            contextlib.ExitStack() as undo,
        ):
            instrumentor = AgentFrameworkInstrumentor(tracer)
            instrumentor.instrument()
            undo.callback(instrumentor.uninstrument)
            assert "disable_instrumentation()" in caplog.text
    finally:
        s._user_disabled = False


def test_spans_of_a_workflows_internal_executors_are_not_agents() -> None:
    with agl.Tracer(MemoryStore()) as tracer:
        instrumentor = AgentFrameworkInstrumentor(tracer)
        internal = {"executor.id": "input-conversation", "executor.type": "_InputToConversation"}
        assert instrumentor.agl_attributes("executor.process input-conversation", internal) == {}
        agent = {"executor.id": "writer", "executor.type": "AgentExecutor"}
        assert instrumentor.agl_attributes("executor.process writer", agent) == {
            "agl.span.type": "agent",
            "agl.agent.name": "writer",
        }
