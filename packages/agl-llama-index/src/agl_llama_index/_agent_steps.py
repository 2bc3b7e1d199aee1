"""Name the agent of each step of a LlamaIndex agent workflow on openinference's span of it.

LlamaIndex's agents are workflows (``FunctionAgent``, ``ReActAgent``, ``CodeActAgent``, and
``AgentWorkflow`` for several): every turn of an agent runs the steps ``setup_agent``,
``run_agent_step`` (which makes the model call) and ``parse_agent_output``, each taking an event
that names the agent whose turn it is (``AgentInput``, ``AgentSetup``, ``AgentOutput``:
``current_agent_name``). openinference records each step as a ``CHAIN`` span named after the
workflow's class and the step (``AgentWorkflow.run_agent_step``), whatever the agent: the name
is only in the ``repr`` of the event it writes as the span's input. Its ``AGENT`` kind is for
LlamaIndex's legacy agent classes, which 0.14 no longer has.

While instrumented, a span handler of agl's, after openinference's on the root dispatcher
(:mod:`agl_llama_index._dispatcher`), reads ``current_agent_name`` from the event among the
bound arguments of each step it hears of and adds it to openinference's span of the step as
``agent.name`` (which openinference's GenAI attributes copy to ``gen_ai.agent.name``);
:class:`~agl_llama_index.instrumentor.LlamaIndexInstrumentor` makes such a span an agent span.
The model call of a turn is inside its ``run_agent_step``, so it is that agent's. The steps
that run tools (``call_tool``) take a ``ToolCall``, which names no agent: a tool's own model
calls (a ``QueryEngineTool`` answering with the LLM) belong to no agent.

Why this way: a step's input event is the one place LlamaIndex states whose turn it is before
the model call is made (``AgentStream`` and ``AgentOutput`` come after it), and the dispatcher
hands it, as an object, to span handlers as the step starts, while openinference's span of the
step can still be written to. Parsing the repr openinference writes as the span's input would
break with any change to an event's fields or to how openinference serializes arguments.
"""

from __future__ import annotations

import contextlib
import inspect
from typing import Any

from llama_index.core.agent.workflow import AgentInput, AgentOutput, AgentSetup

from agl_llama_index._dispatcher import OpenInferenceSpans, SpanListener, add_span_listener

__all__ = ["AGENT_NAME", "agent_of_step", "name_agent_steps"]

AGENT_NAME = "agent.name"
"""OpenInference's agent name attribute."""
_AGENT_EVENTS = (AgentInput, AgentSetup, AgentOutput)


def name_agent_steps(undo: contextlib.ExitStack, spans: OpenInferenceSpans) -> None:
    """Add agl's handler that names each agent step's span; push its removal."""
    add_span_listener(undo, _AgentSteps, spans)


def agent_of_step(bound_args: inspect.BoundArguments) -> str | None:
    """The agent whose turn a workflow step runs, from the event it takes (None: no agent's)."""
    for value in bound_args.arguments.values():
        if isinstance(value, _AGENT_EVENTS):
            name = value.current_agent_name
            return name if isinstance(name, str) and name else None
    return None


class _AgentSteps(SpanListener):
    """Names the agent on openinference's span of each agent step as it opens."""

    @classmethod
    def class_name(cls) -> str:
        return "AglAgentSteps"

    def opened(self, id_: str, bound_args: inspect.BoundArguments, span: Any) -> None:
        agent = agent_of_step(bound_args)
        if agent is not None:
            self._spans.set_attribute(span, AGENT_NAME, agent)
