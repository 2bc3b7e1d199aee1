"""The adapter package: its plugin, script helpers, public surface, and a clean uninstrument."""

from __future__ import annotations

from agl.testing.adapter import AdapterConformance


class TestGoogleADKAdapter(AdapterConformance):
    package = "agl_google_adk"
    plugin = "google-adk"
    instrumentor = "GoogleADKInstrumentor"
    framework_modules = ("google.adk", "litellm", "openai")
    patched = (
        ("google.adk.telemetry.tracing:tracer", "start_span"),
        ("google.adk.telemetry.tracing:tracer", "start_as_current_span"),
        ("google.adk.telemetry.tracing", "trace_tool_call"),
        ("google.adk.models.lite_llm:LiteLLMClient", "acompletion"),
    )
