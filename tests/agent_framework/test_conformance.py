"""agl-agent-framework passes the instrumentor and gateway-rollouts conformance suites.

A real Agent Framework ``Agent`` with ``OpenAIChatCompletionClient`` talks to the suites'
OpenAI-compatible server on loopback; for the gateway suite, a two-agent workflow
(``WorkflowBuilder``: a researcher with a tool, then a writer) runs through agl's gateway.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from agent_framework import Agent, WorkflowBuilder, tool
from agent_framework.openai import OpenAIChatCompletionClient
from openai import AsyncOpenAI

from agl.plugins import PluginManager
from agl.testing.gateway_rollouts import AgentRun, GatewayRolloutsConformance
from agl.testing.instrumentor import InstrumentorConformance, LLMCall
from agl.testing.openai_server import Reply, Script, echo, tool_reply
from agl.tracing import InstrumentorFactory
from agl_agent_framework.instrumentor import AgentFrameworkInstrumentor


@asynccontextmanager
async def client(base_url: str) -> AsyncIterator[OpenAIChatCompletionClient]:
    """The framework's Chat Completions client, on an ``openai`` client closed afterwards."""
    async with AsyncOpenAI(base_url=base_url, api_key="test", max_retries=0) as openai:
        yield OpenAIChatCompletionClient(model="m", async_client=openai)


def agent_call(*, stream: bool) -> LLMCall:
    async def call(base_url: str, prompt: str) -> None:
        async with client(base_url) as model:
            agent = Agent(model, "Answer briefly.", name="assistant")
            if stream:
                response = agent.run(prompt, stream=True)
                async for _ in response:
                    pass
                text = (await response.get_final_response()).text
            else:
                text = (await agent.run(prompt)).text
        assert text == f"ok: {prompt}"

    return call


class TestAgentFrameworkInstrumentor(InstrumentorConformance):
    """The factory ``instrument=["agent-framework"]`` resolves to, unstreamed."""

    @pytest.fixture
    def instrumentor_factory(self) -> InstrumentorFactory:
        return PluginManager().provided("agl_instrumentors")["agent-framework"]

    @pytest.fixture
    def llm_call(self) -> LLMCall:
        return agent_call(stream=False)


class TestAgentFrameworkInstrumentorStreaming(InstrumentorConformance):
    """The class itself, with the agent streaming."""

    @pytest.fixture
    def instrumentor_factory(self) -> InstrumentorFactory:
        return AgentFrameworkInstrumentor

    @pytest.fixture
    def llm_call(self) -> LLMCall:
        return agent_call(stream=True)


@tool
def lookup(topic: str) -> str:
    """Look a topic up in the notes."""
    return f"notes on {topic}: otters hold hands while they sleep"


def route(request: dict[str, Any]) -> Reply:
    """The researcher looks the topic up once, then reports; the writer echoes."""
    messages = request.get("messages") or []
    system = str(messages[0].get("content")) if messages else ""
    if "Research" in system and messages[-1].get("role") != "tool":
        return tool_reply("lookup", {"topic": "otters"})
    return echo(request)


class TestAgentFrameworkWorkflowRollouts(GatewayRolloutsConformance):
    """A researcher (one tool call) then a writer, as a workflow, through the gateway."""

    call_agents = ("researcher", "researcher", "writer")
    tools = ("lookup",)
    trained_agent = "writer"

    @pytest.fixture
    def instrumentor_factory(self) -> InstrumentorFactory:
        return AgentFrameworkInstrumentor

    @pytest.fixture
    def script(self) -> Script:
        return route

    @pytest.fixture
    def agent_run(self) -> AgentRun:
        async def run(base_url: str, stream: bool) -> None:
            async with client(base_url) as model:
                researcher = Agent(model, "Research the topic.", name="researcher", tools=[lookup])
                writer = Agent(model, "Write one line from the notes.", name="writer")
                workflow = WorkflowBuilder(start_executor=researcher).add_edge(researcher, writer)
                if stream:
                    async for _ in workflow.build().run("otters", stream=True):
                        pass
                else:
                    await workflow.build().run("otters")

        return run
