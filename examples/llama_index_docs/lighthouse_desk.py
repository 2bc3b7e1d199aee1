"""The agents: a LlamaIndex ``AgentWorkflow`` of two, a researcher with a search tool over a
local vector index of the lighthouses' pages, and a writer.

The ``researcher`` searches the pages with :func:`search_docs` and hands off to the ``writer``,
which answers in one sentence from the page the researcher found (the agents of an
``AgentWorkflow`` share one conversation). They are the agents you would write anyway
(``FunctionAgent``, ``OpenAILike`` for any OpenAI-compatible server, a ``VectorStoreIndex``); the
only agl code is :func:`lighthouse_desk`, the rollout: it gets the task and the LLMs the run
serves, runs the workflow and returns the reward. agl's LlamaIndex instrumentation makes each
step of an agent's turn an agent span named after the agent, which is how every LLM call is
attributed to ``researcher`` or ``writer``.

The index embeds with :class:`WordCounts`, a bag of words hashed into a small vector: no
embedding model, no network, and a page is found by the lighthouse's name.
"""

from __future__ import annotations

import contextlib
import re
import zlib
from typing import Any

from lighthouses import documents, reward
from llama_index.core import Document, VectorStoreIndex
from llama_index.core.agent.workflow import AgentOutput, AgentWorkflow, FunctionAgent
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.tools import FunctionTool
from llama_index.llms.openai_like import OpenAILike

import agl

__all__ = [
    "INDEX",
    "RESEARCHER",
    "WRITER",
    "WordCounts",
    "build_workflow",
    "lighthouse_desk",
    "search_docs",
]

RESEARCHER = (
    "You are the researcher. Search the lighthouse pages with the search_docs tool for the "
    "lighthouse the visitor asks about, then hand off to the writer."
)
WRITER = (
    "You are the writer. Answer the visitor in one sentence, with the exact number from the "
    "page the researcher found."
)


class WordCounts(BaseEmbedding):
    """Word counts hashed into ``embed_dim`` slots: a deterministic, local embedding."""

    embed_dim: int = 512

    def _embed(self, text: str) -> list[float]:
        vector = [0.0] * self.embed_dim
        for word in re.findall(r"[a-z]+", text.lower()):
            vector[zlib.crc32(word.encode()) % self.embed_dim] += 1.0
        return vector

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._embed(query)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._embed(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._embed(text)


INDEX = VectorStoreIndex.from_documents(
    [Document(text=page) for page in documents()], embed_model=WordCounts()
)
"""The lighthouses' pages, indexed once as the module loads (so outside any rollout)."""


async def search_docs(query: str) -> str:
    """Find the lighthouse page that best matches the query."""
    [best] = await INDEX.as_retriever(similarity_top_k=1).aretrieve(query)
    return best.get_content()


def build_workflow(researcher_llm: OpenAILike, writer_llm: OpenAILike) -> AgentWorkflow:
    """The researcher (the search tool; it hands off to the writer), then the writer."""
    researcher = FunctionAgent(
        name="researcher",
        description="Finds the page about the lighthouse the visitor asks about.",
        system_prompt=RESEARCHER,
        llm=researcher_llm,
        tools=[FunctionTool.from_defaults(async_fn=search_docs)],
        can_handoff_to=["writer"],
    )
    writer = FunctionAgent(
        name="writer",
        description="Answers the visitor from the page found.",
        system_prompt=WRITER,
        llm=writer_llm,
        can_handoff_to=[],
    )
    return AgentWorkflow(agents=[researcher, writer], root_agent="researcher")


async def _model(llm: agl.LLM, stack: contextlib.AsyncExitStack) -> OpenAILike:
    """LlamaIndex's LLM for any OpenAI-compatible server, on a client ``stack`` closes."""
    sampling = {
        key: value
        for key, value in llm.sampling_parameters.items()
        if key in ("temperature", "max_tokens") and value is not None
    }
    client = llm.openai_client(max_retries=0)
    await stack.enter_async_context(client)
    return OpenAILike(
        model=llm.model,
        api_base=llm.endpoint,
        api_key=client.api_key,
        is_chat_model=True,
        is_function_calling_model=True,
        max_retries=0,
        async_openai_client=client,
        **sampling,
    )


@agl.rollout
async def lighthouse_desk(
    task: dict[str, Any], llm: agl.LLM, researcher_llm: agl.LLM | None = None
) -> float:
    """Answer ``task["question"]``; reward: whether the writer states ``task["answer"]``.

    ``llm`` is the model the run serves (the writer's, and the researcher's too unless the run
    publishes a ``researcher_llm`` of its own: a fixed model keeps a frozen agent fixed).
    """
    async with contextlib.AsyncExitStack() as stack:
        writer = await _model(llm, stack)
        researcher = writer if researcher_llm is None else await _model(researcher_llm, stack)
        output = await build_workflow(researcher, writer).run(user_msg=task["question"])
    answered = isinstance(output, AgentOutput) and output.current_agent_name == "writer"
    return reward(str(output.response.content or "") if answered else "", task["answer"])
