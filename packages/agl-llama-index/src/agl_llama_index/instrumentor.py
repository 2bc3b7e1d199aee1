"""Trace LlamaIndex runs as spans of the current agl rollout.

:class:`LlamaIndexInstrumentor` is what ``agl.Runner(..., instrument=["llama-index"])`` builds.
It does not trace LlamaIndex itself: openinference-instrumentation-llama-index does, with a span
handler and an event handler on LlamaIndex's root dispatcher, which hears of every method
LlamaIndex instruments: each workflow step of an agent (``AgentWorkflow.run_agent_step``), each
method of an LLM (``OpenAILike.achat``), tool (``FunctionTool.acall``), retriever, query engine
and embedding model. agl configures it as every adapter does
(:class:`agl.tracing.OpenInferenceInstrumentor`: agl's provider, GenAI attributes, one tracer at
a time). What LlamaIndex needs beyond that:

- agent names: an agent's turn is three workflow steps, which openinference records as
  ``CHAIN`` spans named after the workflow's class, with the agent's name only in the repr of
  their input. agl reads it from the step's event (``current_agent_name``) as the step starts and
  names the agent on the span (:mod:`agl_llama_index._agent_steps`); such a span becomes an
  agent span here, so each model call is the agent's whose ``run_agent_step`` made it. Reading
  the event, rather than parsing reprs, keeps working whatever else the event holds;
- one LLM span per model call, with its response id: openinference makes every method of an
  LLM an LLM span (``_prepare_chat_with_tools``, and ``OpenAILike.achat`` wrapping
  ``OpenAI.achat``), none with the server's response id; agl leaves the ``LLM`` kind to the span
  the call is made in and gives it the id from LlamaIndex's model call events, streamed or not
  (:mod:`agl_llama_index._model_calls`). Otherwise LightningRL would count each call twice
  (``_prepare_chat_with_tools`` as a call of its own) and join it with the gateway's token ids
  by order, or not at all;
- tool calls: ``agl.tool.arguments`` (and ``gen_ai.tool.call.arguments``, where openinference
  writes the tool's schema) are the arguments the tool got, ``agl.tool.result`` its output's
  text (:mod:`agl_llama_index._tool_calls`).

Both additions are handlers of agl's on the dispatcher, next to openinference's, that reach
openinference's spans before they are written (:mod:`agl_llama_index._dispatcher`); nothing of
LlamaIndex is patched. Retrievals, embeddings and query engines are recorded as openinference
records them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from opentelemetry.util import types

from agl.tracing import NormalizingTracerProvider, OpenInferenceInstrumentor, agent_attributes
from agl_llama_index._tool_calls import tool_call_attributes

__all__ = ["LlamaIndexInstrumentor"]

_KIND = "openinference.span.kind"
_AGENT_NAME = "agent.name"  # as agl_llama_index._agent_steps writes it (no LlamaIndex import)
_TOOL_NAME = "tool.name"
_STEPS = ("CHAIN", "AGENT")


class LlamaIndexInstrumentor(OpenInferenceInstrumentor):
    """Record LlamaIndex agents, workflows, model, tool and retrieval calls in a tracer's
    rollouts; reversible.

    Instrumenting twice is the same as once. ::

        instrumentor = LlamaIndexInstrumentor(tracer)
        instrumentor.instrument()
        async with tracer.rollout(rollout_id, attempt_id):
            await workflow.run(user_msg="task")    # agent steps, model calls, tools: spans
        instrumentor.uninstrument()

    Args:
        tracer: The :class:`agl.Tracer` whose rollouts the spans belong to.
    """

    framework = "LlamaIndex"
    instrumentation = "openinference.instrumentation.llama_index:LlamaIndexInstrumentor"

    def agl_attributes(
        self, name: str, attributes: Mapping[str, Any]
    ) -> Mapping[str, types.AttributeValue]:
        """Agent spans for the steps agl named an agent on; tool spans with the real arguments."""
        kind = attributes.get(_KIND)
        if kind == "TOOL":
            tool = attributes.get(_TOOL_NAME)
            if isinstance(tool, str) and tool:
                return tool_call_attributes(tool, attributes)
        elif kind in _STEPS:
            agent = attributes.get(_AGENT_NAME)
            if isinstance(agent, str) and agent:
                return agent_attributes(agent)
        return super().agl_attributes(name, attributes)

    def extend(self, undo: contextlib.ExitStack, provider: NormalizingTracerProvider) -> None:
        from agl_llama_index._agent_steps import name_agent_steps
        from agl_llama_index._dispatcher import OpenInferenceSpans
        from agl_llama_index._model_calls import one_span_per_call

        spans = OpenInferenceSpans.find()
        if spans is not None:
            name_agent_steps(undo, spans)
            one_span_per_call(undo, spans)
