"""The adapter package: its plugin, script helpers, public surface, and a clean uninstrument."""

from __future__ import annotations

from agl.testing.adapter import AdapterConformance

_CLIENT = "autogen_ext.models.openai:BaseOpenAIChatCompletionClient"


class TestAutogenAdapter(AdapterConformance):
    package = "agl_autogen"
    plugin = "autogen"
    instrumentor = "AutogenInstrumentor"
    framework_modules = ("autogen_agentchat", "autogen_core", "autogen_ext", "openai")
    patched = (
        ("autogen_agentchat.agents:AssistantAgent", "on_messages"),
        ("autogen_agentchat.agents:AssistantAgent", "on_messages_stream"),  # openinference's
        ("autogen_core.logging:LLMCallEvent", "__init__"),
        (_CLIENT, "create"),  # openinference's
        (_CLIENT, "_create_stream_chunks"),
        (_CLIENT, "_create_stream_chunks_beta_client"),
    )
