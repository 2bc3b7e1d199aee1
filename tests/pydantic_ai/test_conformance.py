"""agl-pydantic-ai passes the instrumentor and gateway-rollouts conformance suites.

Real PydanticAI agents with ``OpenAIChatModel`` talk to the suites' OpenAI-compatible server on
loopback; for the gateway suite, a coordinator with a typed output asks a researcher agent
through a tool, as PydanticAI's agent delegation does, through agl's gateway.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from openai import AsyncOpenAI
from pydantic import BaseModel
from pydantic_ai import Agent, RunContext
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from agl.plugins import PluginManager
from agl.testing.gateway_rollouts import AgentRun, GatewayRolloutsConformance
from agl.testing.instrumentor import InstrumentorConformance, LLMCall
from agl.testing.openai_server import Reply, Script, echo, tool_reply
from agl.tracing import InstrumentorFactory
from agl_pydantic_ai.instrumentor import PydanticAIInstrumentor


@asynccontextmanager
async def chat_model(base_url: str) -> AsyncIterator[OpenAIChatModel]:
    """PydanticAI's Chat Completions model, on an ``openai`` client closed afterwards."""
    async with AsyncOpenAI(base_url=base_url, api_key="test", max_retries=0) as client:
        yield OpenAIChatModel("m", provider=OpenAIProvider(openai_client=client))


def agent_call(*, stream: bool) -> LLMCall:
    async def call(base_url: str, prompt: str) -> None:
        async with chat_model(base_url) as model:
            agent = Agent(model, name="assistant")
            if stream:
                async with agent.run_stream(prompt) as result:
                    text = await result.get_output()
            else:
                text = (await agent.run(prompt)).output
        assert text == f"ok: {prompt}"

    return call


class TestPydanticAIInstrumentor(InstrumentorConformance):
    """The factory ``instrument=["pydantic-ai"]`` resolves to, unstreamed."""

    @pytest.fixture
    def instrumentor_factory(self) -> InstrumentorFactory:
        return PluginManager().provided("agl_instrumentors")["pydantic-ai"]

    @pytest.fixture
    def llm_call(self) -> LLMCall:
        return agent_call(stream=False)


class TestPydanticAIInstrumentorStreaming(InstrumentorConformance):
    """The class itself, with the agent streaming."""

    @pytest.fixture
    def instrumentor_factory(self) -> InstrumentorFactory:
        return PydanticAIInstrumentor

    @pytest.fixture
    def llm_call(self) -> LLMCall:
        return agent_call(stream=True)


class Answer(BaseModel):
    text: str
    confident: bool


def route(request: dict[str, Any]) -> Reply:
    """The coordinator asks the researcher, then gives its typed answer; the researcher echoes."""
    messages = request.get("messages") or []
    tools = {tool["function"]["name"] for tool in request.get("tools", [])}
    if "ask_researcher" not in tools:
        return echo(request)
    if messages[-1].get("role") != "tool":
        return tool_reply("ask_researcher", {"question": "where do otters sleep?"})
    found = str(messages[-1].get("content"))
    return tool_reply("final_result", {"text": found, "confident": True})


class TestPydanticAIDelegationRollouts(GatewayRolloutsConformance):
    """A coordinator delegating to a researcher through a tool, through the gateway."""

    call_agents = ("coordinator", "researcher", "coordinator")
    tools = ("ask_researcher",)
    trained_agent = "researcher"

    @pytest.fixture
    def instrumentor_factory(self) -> InstrumentorFactory:
        return PydanticAIInstrumentor

    @pytest.fixture
    def script(self) -> Script:
        return route

    @pytest.fixture
    def agent_run(self) -> AgentRun:
        async def run(base_url: str, stream: bool) -> None:
            async with chat_model(base_url) as model:
                researcher = Agent(model, name="researcher", instructions="Answer from notes.")
                coordinator = Agent(
                    model, name="coordinator", output_type=Answer, instructions="Delegate."
                )

                @coordinator.tool
                async def ask_researcher(ctx: RunContext[None], question: str) -> str:
                    """Ask the researcher a question."""
                    return (await researcher.run(question, usage=ctx.usage)).output

                if stream:
                    async with coordinator.run_stream("otters?") as result:
                        answer = await result.get_output()
                else:
                    answer = (await coordinator.run("otters?")).output
            assert answer == Answer(text="ok: where do otters sleep?", confident=True), answer

        return run
