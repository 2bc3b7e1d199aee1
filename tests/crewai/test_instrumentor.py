"""The adapter package: its plugin, script helpers, public surface, and a clean uninstrument."""

from __future__ import annotations

from agl.testing.adapter import AdapterConformance


class TestCrewAIAdapter(AdapterConformance):
    package = "agl_crewai"
    plugin = "crewai"
    instrumentor = "CrewAIInstrumentor"
    framework_modules = ("crewai", "openai")
    patched = (
        ("crewai:Agent", "execute_task"),
        ("crewai:Agent", "aexecute_task"),
        ("crewai:Agent", "kickoff_async"),
        ("crewai:Crew", "kickoff"),  # openinference's
        ("openai.resources.chat.completions:Completions", "create"),  # agl's OpenAI instrumentation
    )
