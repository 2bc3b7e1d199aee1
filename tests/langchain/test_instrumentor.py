"""The instrumentor's life cycle, the script helpers, the plugin and the public surface."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest
from langchain_core.callbacks import BaseCallbackManager
from langchain_openai.chat_models.base import BaseChatOpenAI

import agl
import agl_langchain
from agl.store._memory import MemoryStore
from agl_langchain.instrumentor import LangChainInstrumentor


@pytest.fixture
def tracers() -> Iterator[tuple[agl.Tracer, agl.Tracer]]:
    with agl.Tracer(MemoryStore()) as first, agl.Tracer(MemoryStore()) as second:
        yield first, second


def patched_methods() -> tuple[object, object]:
    return (
        vars(BaseCallbackManager)["__init__"],
        vars(BaseChatOpenAI)["_convert_chunk_to_generation_chunk"],
    )


def test_uninstrument_puts_langchain_back_as_it_was(
    tracers: tuple[agl.Tracer, agl.Tracer],
) -> None:
    before = patched_methods()
    instrumentor = LangChainInstrumentor(tracers[0])
    instrumentor.instrument()
    during = patched_methods()
    assert all(a is not b for a, b in zip(before, during, strict=True))
    instrumentor.instrument()
    assert patched_methods() == during  # not wrapped twice
    instrumentor.uninstrument()
    assert patched_methods() == before
    instrumentor.uninstrument()
    assert patched_methods() == before


def test_one_tracer_at_a_time_traces_langchain(tracers: tuple[agl.Tracer, agl.Tracer]) -> None:
    first, second = (LangChainInstrumentor(tracer) for tracer in tracers)
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
        instrumentor = agl_langchain.instrument(first)
        assert isinstance(instrumentor, LangChainInstrumentor)
        assert instrumentor.instrumented is True
        assert agl_langchain.instrument(first) is instrumentor
        moved = agl_langchain.instrument(second)
        assert moved.tracer is second
        assert moved.instrumented is True
        assert instrumentor.instrumented is False
    finally:
        agl_langchain.uninstrument()
    assert moved.instrumented is False
    agl_langchain.uninstrument()  # nothing active: nothing happens


def test_the_public_surface() -> None:
    assert agl_langchain.__all__ == ["LangChainInstrumentor", "instrument", "uninstrument"]
    assert agl_langchain.LangChainInstrumentor is LangChainInstrumentor
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        agl_langchain.nope  # noqa: B018


def test_finding_the_instrumentor_imports_no_langchain() -> None:
    """Every agl process resolving plugin names loads this plugin: it must stay light."""
    code = (
        "import sys\n"
        "import agl_langchain\n"
        "from agl.plugins import PluginManager\n"
        "from agl_langchain.instrumentor import LangChainInstrumentor\n"
        "found = PluginManager().provided('agl_instrumentors')\n"
        "assert found['langchain'] is LangChainInstrumentor\n"
        "heavy = [m for m in ('langchain_core', 'langgraph', 'openinference.instrumentation')\n"
        "         if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
