"""agl-autogen's instrumentor passes the instrumentor conformance suite, driving real agents.

An ``AssistantAgent`` with autogen-ext's ``OpenAIChatCompletionClient`` runs against the suite's
OpenAI-compatible server on loopback: as registered under ``instrument=["autogen"]``, and
streaming its model calls.
"""

from __future__ import annotations

import pytest
from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.messages import TextMessage
from autogen_core.models import ModelFamily, ModelInfo
from autogen_ext.models.openai import OpenAIChatCompletionClient

from agl.plugins import PluginManager
from agl.testing.instrumentor import InstrumentorConformance, LLMCall
from agl.tracing._instrumentor import InstrumentorFactory
from agl_autogen.instrumentor import AutogenInstrumentor

MODEL_INFO = ModelInfo(
    vision=False,
    function_calling=True,
    json_output=False,
    family=ModelFamily.UNKNOWN,
    structured_output=False,
)


def model_client(base_url: str) -> OpenAIChatCompletionClient:
    return OpenAIChatCompletionClient(
        model="m", base_url=base_url, api_key="test", model_info=MODEL_INFO, max_retries=0
    )


def agent_call(*, stream: bool) -> LLMCall:
    async def call(base_url: str, prompt: str) -> None:
        client = model_client(base_url)
        agent = AssistantAgent("assistant", model_client=client, model_client_stream=stream)
        try:
            result = await agent.run(task=prompt)
        finally:
            await client.close()
        last = result.messages[-1]
        assert isinstance(last, TextMessage)
        assert last.content == f"ok: {prompt}"

    return call


class TestAutogenInstrumentor(InstrumentorConformance):
    """The factory ``instrument=["autogen"]`` resolves to, with unstreamed model calls."""

    @pytest.fixture
    def instrumentor_factory(self) -> InstrumentorFactory:
        return PluginManager().provided("agl_instrumentors")["autogen"]

    @pytest.fixture
    def llm_call(self) -> LLMCall:
        return agent_call(stream=False)


class TestAutogenInstrumentorStreaming(InstrumentorConformance):
    """The class itself, with the agent streaming its model calls."""

    @pytest.fixture
    def instrumentor_factory(self) -> InstrumentorFactory:
        return AutogenInstrumentor

    @pytest.fixture
    def llm_call(self) -> LLMCall:
        return agent_call(stream=True)
