"""The instrumentor's life cycle, the script helpers, the plugin and the public surface."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest
from autogen_agentchat.agents import AssistantAgent
from autogen_core.logging import LLMCallEvent
from autogen_ext.models.openai import BaseOpenAIChatCompletionClient

import agl
import agl_autogen
from agl.store._memory import MemoryStore
from agl_autogen.instrumentor import AutogenInstrumentor


@pytest.fixture
def tracers() -> Iterator[tuple[agl.Tracer, agl.Tracer]]:
    with agl.Tracer(MemoryStore()) as first, agl.Tracer(MemoryStore()) as second:
        yield first, second


def patched_methods() -> tuple[object, ...]:
    return (
        vars(AssistantAgent)["on_messages"],
        vars(AssistantAgent)["on_messages_stream"],
        vars(LLMCallEvent)["__init__"],
        vars(BaseOpenAIChatCompletionClient)["create"],
        vars(BaseOpenAIChatCompletionClient)["_create_stream_chunks"],
        vars(BaseOpenAIChatCompletionClient)["_create_stream_chunks_beta_client"],
    )


def test_uninstrument_puts_autogen_back_as_it_was(tracers: tuple[agl.Tracer, agl.Tracer]) -> None:
    before = patched_methods()
    instrumentor = AutogenInstrumentor(tracers[0])
    instrumentor.instrument()
    during = patched_methods()
    assert all(a is not b for a, b in zip(before, during, strict=True))
    instrumentor.instrument()
    assert patched_methods() == during  # not wrapped twice
    instrumentor.uninstrument()
    assert patched_methods() == before
    instrumentor.uninstrument()
    assert patched_methods() == before


def test_one_tracer_at_a_time_traces_autogen(tracers: tuple[agl.Tracer, agl.Tracer]) -> None:
    first, second = (AutogenInstrumentor(tracer) for tracer in tracers)
    first.instrument()
    try:
        with pytest.raises(agl.AglError, match="already instrumented"):
            second.instrument()
        assert second.instrumented is False
        assert first.instrumented is True
    finally:
        first.uninstrument()
    second.instrument()
    assert second.instrumented is True
    second.uninstrument()


def test_instrument_and_uninstrument_for_a_script(tracers: tuple[agl.Tracer, agl.Tracer]) -> None:
    first, second = tracers
    try:
        instrumentor = agl_autogen.instrument(first)
        assert isinstance(instrumentor, AutogenInstrumentor)
        assert instrumentor.instrumented is True
        assert agl_autogen.instrument(first) is instrumentor
        moved = agl_autogen.instrument(second)
        assert moved.tracer is second
        assert moved.instrumented is True
        assert instrumentor.instrumented is False
    finally:
        agl_autogen.uninstrument()
    assert moved.instrumented is False
    agl_autogen.uninstrument()  # nothing active: nothing happens


def test_the_public_surface() -> None:
    assert agl_autogen.__all__ == ["AutogenInstrumentor", "instrument", "uninstrument"]
    assert agl_autogen.AutogenInstrumentor is AutogenInstrumentor
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        agl_autogen.nope  # noqa: B018


def test_finding_the_instrumentor_imports_no_autogen() -> None:
    """Every agl process resolving plugin names loads this plugin: it must stay light."""
    code = (
        "import sys\n"
        "import agl_autogen\n"
        "from agl.plugins import PluginManager\n"
        "from agl_autogen.instrumentor import AutogenInstrumentor\n"
        "assert PluginManager().provided('agl_instrumentors')['autogen'] is AutogenInstrumentor\n"
        "heavy = [m for m in ('autogen_agentchat', 'autogen_core', 'autogen_ext', 'openai',\n"
        "                     'openinference.instrumentation') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
