"""agl-crewai's instrumentor passes the instrumentor conformance suite, driving real agents.

A CrewAI ``Agent`` on CrewAI's native OpenAI provider (``LLM(model="openai/...")``) runs
against the suite's OpenAI-compatible server on loopback: kicked off synchronously as
registered under ``instrument=["crewai"]``, and natively async with streamed model calls.
"""

from __future__ import annotations

import pytest
from crewai import LLM, Agent

from agl.plugins import PluginManager
from agl.testing.instrumentor import InstrumentorConformance, LLMCall
from agl.tracing._instrumentor import InstrumentorFactory
from agl_crewai.instrumentor import CrewAIInstrumentor


def agent(base_url: str, *, stream: bool) -> Agent:
    llm = LLM(model="openai/m", base_url=base_url, api_key="test", stream=stream)
    return Agent(role="assistant", goal="answer", backstory="A helpful assistant.", llm=llm)


def kickoff(base_url: str, prompt: str) -> None:
    result = agent(base_url, stream=False).kickoff(prompt)
    assert prompt in result.raw  # the server echoes the request


async def kickoff_async(base_url: str, prompt: str) -> None:
    result = await agent(base_url, stream=True).kickoff_async(prompt)
    assert prompt in result.raw


class TestCrewAIInstrumentor(InstrumentorConformance):
    """The factory ``instrument=["crewai"]`` resolves to, with a synchronous kickoff."""

    @pytest.fixture
    def instrumentor_factory(self) -> InstrumentorFactory:
        return PluginManager().provided("agl_instrumentors")["crewai"]

    @pytest.fixture
    def llm_call(self) -> LLMCall:
        return kickoff


class TestCrewAIInstrumentorAsync(InstrumentorConformance):
    """The class itself, with CrewAI's native async kickoff streaming its model calls."""

    @pytest.fixture
    def instrumentor_factory(self) -> InstrumentorFactory:
        return CrewAIInstrumentor

    @pytest.fixture
    def llm_call(self) -> LLMCall:
        return kickoff_async
