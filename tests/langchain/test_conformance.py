"""agl-langchain's instrumentor passes the instrumentor conformance suite, driving real LangChain.

LangChain's ``ChatOpenAI`` talks to the suite's OpenAI-compatible server on loopback: once
synchronously, as registered under ``instrument=["langchain"]``, and once streaming inside an
async LangGraph node.
"""

from __future__ import annotations

from typing import TypedDict

import pytest
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, StateGraph

from agl.plugins import PluginManager
from agl.testing.instrumentor import InstrumentorConformance, LLMCall
from agl.tracing._instrumentor import InstrumentorFactory
from agl_langchain.instrumentor import LangChainInstrumentor


class State(TypedDict):
    text: str


class TestLangChainInstrumentor(InstrumentorConformance):
    """The factory ``instrument=["langchain"]`` resolves to, with a sync chat model call."""

    @pytest.fixture
    def instrumentor_factory(self) -> InstrumentorFactory:
        return PluginManager().provided("agl_instrumentors")["langchain"]

    @pytest.fixture
    def llm_call(self) -> LLMCall:
        def call(base_url: str, prompt: str) -> None:
            model = ChatOpenAI(model="m", base_url=base_url, api_key="test", max_retries=0)
            model.invoke(prompt)

        return call


class TestLangChainInstrumentorStreamingGraph(InstrumentorConformance):
    """The class itself, with ``astream`` inside a node of an async LangGraph graph."""

    @pytest.fixture
    def instrumentor_factory(self) -> InstrumentorFactory:
        return LangChainInstrumentor

    @pytest.fixture
    def llm_call(self) -> LLMCall:
        async def call(base_url: str, prompt: str) -> None:
            model = ChatOpenAI(model="m", base_url=base_url, api_key="test", max_retries=0)

            async def answer(state: State) -> State:
                return {
                    "text": "".join([str(c.content) async for c in model.astream(state["text"])])
                }

            graph = StateGraph(State)
            graph.add_node("answer", answer)
            graph.add_edge(START, "answer")
            graph.add_edge("answer", END)
            await graph.compile().ainvoke({"text": prompt})

        return call
