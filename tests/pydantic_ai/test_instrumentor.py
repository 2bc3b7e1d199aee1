"""The adapter package: its plugin, script helpers, public surface, and a clean uninstrument."""

from __future__ import annotations

import logging

import pytest
from pydantic_ai import Agent

import agl
from agl.store._memory import MemoryStore
from agl.testing.adapter import AdapterConformance
from agl_pydantic_ai.instrumentor import PydanticAIInstrumentor


class TestPydanticAIAdapter(AdapterConformance):
    package = "agl_pydantic_ai"
    plugin = "pydantic-ai"
    instrumentor = "PydanticAIInstrumentor"
    framework_modules = ("pydantic_ai", "openai")
    patched = (("pydantic_ai:Agent", "_instrument_default"),)


def test_the_applications_own_default_is_replaced_while_instrumented_and_put_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    Agent.instrument_all(True)
    try:
        with agl.Tracer(MemoryStore()) as tracer, caplog.at_level(logging.WARNING):
            instrumentor = PydanticAIInstrumentor(tracer)
            instrumentor.instrument()
            try:
                assert Agent._instrument_default is not True
                assert "Agent.instrument_all" in caplog.text
            finally:
                instrumentor.uninstrument()
        assert Agent._instrument_default is True
    finally:
        Agent.instrument_all(False)
