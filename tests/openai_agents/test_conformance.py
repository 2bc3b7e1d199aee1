"""agl-openai-agents' instrumentor passes the instrumentor conformance suite, driving real agents.

An ``agents.Agent`` runs with ``Runner`` against the suite's OpenAI-compatible server on
loopback: through the Chat Completions model, as registered under
``instrument=["openai-agents"]``, and streaming through the Responses API model.
"""

from __future__ import annotations

import pytest
from agents import Agent, OpenAIChatCompletionsModel, OpenAIResponsesModel, Runner
from openai import AsyncOpenAI

from agl.plugins import PluginManager
from agl.testing.instrumentor import InstrumentorConformance, LLMCall
from agl.tracing._instrumentor import InstrumentorFactory
from agl_openai_agents.instrumentor import OpenAIAgentsInstrumentor


def client(base_url: str) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=base_url, api_key="test", max_retries=0)


class TestOpenAIAgentsInstrumentor(InstrumentorConformance):
    """The factory ``instrument=["openai-agents"]`` resolves to, with a Chat Completions model."""

    @pytest.fixture
    def instrumentor_factory(self) -> InstrumentorFactory:
        return PluginManager().provided("agl_instrumentors")["openai-agents"]

    @pytest.fixture
    def llm_call(self) -> LLMCall:
        async def call(base_url: str, prompt: str) -> None:
            async with client(base_url) as openai_client:
                model = OpenAIChatCompletionsModel(model="m", openai_client=openai_client)
                result = await Runner.run(Agent(name="assistant", model=model), prompt)
            assert result.final_output == f"ok: {prompt}"

        return call


class TestOpenAIAgentsInstrumentorStreamingResponses(InstrumentorConformance):
    """The class itself, with ``Runner.run_streamed`` on the Responses API model."""

    @pytest.fixture
    def instrumentor_factory(self) -> InstrumentorFactory:
        return OpenAIAgentsInstrumentor

    @pytest.fixture
    def llm_call(self) -> LLMCall:
        async def call(base_url: str, prompt: str) -> None:
            async with client(base_url) as openai_client:
                model = OpenAIResponsesModel(model="m", openai_client=openai_client)
                result = Runner.run_streamed(Agent(name="assistant", model=model), prompt)
                async for _ in result.stream_events():
                    pass
            assert result.final_output == f"ok: {prompt}"

        return call
