"""Core's OpenAI instrumentation passes the instrumentor conformance suite, as registered."""

from __future__ import annotations

import openai
import pytest

from agl.plugins import PluginManager
from agl.testing.instrumentor import InstrumentorConformance, LLMCall
from agl.tracing._instrumentor import InstrumentorFactory
from agl.tracing._openai import OpenAIInstrumentation


class TestOpenAIInstrumentation(InstrumentorConformance):
    """The factory ``instrument=["openai"]`` resolves to, with the sync client."""

    @pytest.fixture
    def instrumentor_factory(self) -> InstrumentorFactory:
        return PluginManager().provided("agl_instrumentors")["openai"]

    @pytest.fixture
    def llm_call(self) -> LLMCall:
        def call(base_url: str, prompt: str) -> None:
            with openai.OpenAI(base_url=base_url, api_key="test", max_retries=0) as client:
                client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": prompt}]
                )

        return call


class TestOpenAIInstrumentationStreamingAsync(InstrumentorConformance):
    """The class itself, with the async client streaming through the Responses API."""

    @pytest.fixture
    def instrumentor_factory(self) -> InstrumentorFactory:
        return OpenAIInstrumentation

    @pytest.fixture
    def llm_call(self) -> LLMCall:
        async def call(base_url: str, prompt: str) -> None:
            async with openai.AsyncOpenAI(base_url=base_url, api_key="t", max_retries=0) as client:
                stream = await client.responses.create(model="m", input=prompt, stream=True)
                async for _ in stream:
                    pass

        return call
