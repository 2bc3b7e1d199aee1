"""Agent spans for the ways CrewAI runs an agent that openinference does not wrap.

openinference opens an agent's span around ``Task._execute_core`` (a crew's task, run
synchronously) and ``Agent.kickoff``. An agent also runs:

- through ``Agent.execute_task`` called by something other than a task: a manager's delegation
  tool (``Delegate work to coworker``, ``Ask question to coworker``) runs the coworker this way,
  inside the manager's span, so without a span of its own the coworker's model calls would
  count as the manager's;
- through CrewAI's native async paths, ``Agent.aexecute_task`` (what ``Crew.akickoff``'s tasks
  call) and ``Agent.kickoff_async``/``akickoff``, which openinference does not see at all.

While instrumented, those three are wrapped to open an agent span shaped like openinference's
(kind ``AGENT``, the role as ``graph.node.id``, the task as input, the result as output), unless
the current span already is that agent's, as it is when a task's span runs its agent.
"""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from openinference.semconv.trace import (
    OpenInferenceMimeTypeValues,
    OpenInferenceSpanKindValues,
    SpanAttributes,
)
from opentelemetry import trace as trace_api

from agl.tracing import NormalizingSpan, patch

__all__ = ["open_agent_spans"]

_KIND = SpanAttributes.OPENINFERENCE_SPAN_KIND
_AGENT = OpenInferenceSpanKindValues.AGENT.value
_SYNC = ("execute_task",)
_ASYNC = ("aexecute_task", "kickoff_async")


def open_agent_spans(tracer: trace_api.Tracer, undo: contextlib.ExitStack) -> None:
    """Patch ``Agent``'s task and async kickoff methods to open agent spans; push the undoing."""
    from crewai import Agent

    for name in (*_SYNC, *_ASYNC):
        wrap = _sync if name in _SYNC else _async
        patch(
            undo,
            Agent,
            name,
            functools.partial(wrap, tracer, name),
            missing=f"crewai's Agent has no {name}: agents run through it are not traced as agents",
        )
    # akickoff is an alias CrewAI defines as its own method calling kickoff_async: no patch.


def _sync(tracer: trace_api.Tracer, method: str, original: Callable[..., Any]) -> Any:
    @functools.wraps(original)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        with _agent_span(tracer, self, method, args, kwargs) as span:
            result = original(self, *args, **kwargs)
            _set_output(span, result)
            return result

    return wrapper


def _async(tracer: trace_api.Tracer, method: str, original: Callable[..., Awaitable[Any]]) -> Any:
    @functools.wraps(original)
    async def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        with _agent_span(tracer, self, method, args, kwargs) as span:
            result = await original(self, *args, **kwargs)
            _set_output(span, result)
            return result

    return wrapper


@contextlib.contextmanager
def _agent_span(
    tracer: trace_api.Tracer, agent: Any, method: str, args: Any, kwargs: Any
) -> Iterator[trace_api.Span | None]:
    role = str(getattr(agent, "role", "") or "").strip()
    if not role or _in_span_of(role):
        yield None
        return
    attributes = {
        _KIND: _AGENT,
        SpanAttributes.GRAPH_NODE_ID: role,
        SpanAttributes.INPUT_VALUE: _describe_input(args, kwargs),
        SpanAttributes.INPUT_MIME_TYPE: OpenInferenceMimeTypeValues.TEXT.value,
    }
    with tracer.start_as_current_span(f"{role}.{method}", attributes=attributes) as span:
        yield span


def _in_span_of(role: str) -> bool:
    span = trace_api.get_current_span()
    if not isinstance(span, NormalizingSpan):
        return False
    attributes = span.attributes
    return attributes.get(_KIND) == _AGENT and attributes.get(SpanAttributes.GRAPH_NODE_ID) == role


def _describe_input(args: Any, kwargs: Any) -> str:
    """The task's description, or the messages an agent was kicked off with, as text."""
    first = args[0] if args else kwargs.get("task", kwargs.get("messages"))
    description = getattr(first, "description", None)
    if isinstance(description, str):
        return description
    if isinstance(first, str):
        return first
    return json.dumps(first, default=str)


def _set_output(span: trace_api.Span | None, result: Any) -> None:
    if span is None:
        return
    raw = getattr(result, "raw", result)
    span.set_attribute(SpanAttributes.OUTPUT_VALUE, raw if isinstance(raw, str) else str(raw))
    span.set_attribute(SpanAttributes.OUTPUT_MIME_TYPE, OpenInferenceMimeTypeValues.TEXT.value)
