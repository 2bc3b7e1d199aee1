"""Trace CrewAI runs as spans of the current agl rollout.

:class:`CrewAIInstrumentor` is what ``agl.Runner(..., instrument=["crewai"])`` builds. Three
pieces record a crew:

- openinference-instrumentation-crewai wraps a crew's ``kickoff``, each task's execution by its
  agent (``Task._execute_core``), ``Agent.kickoff``, tool runs and flows; agl configures it as
  every adapter does (:class:`agl.tracing.OpenInferenceInstrumentor`: agl's provider, one tracer
  at a time, agent spans named after the agent's role, ``agl.tool.*`` on tool spans). A task's
  agent span also names its task (``agl.task.name``).
- :mod:`agl_crewai._agent_spans` opens agent spans where openinference has none: a coworker
  run by a manager's delegation tool, and CrewAI's native async paths (``Crew.akickoff``,
  ``Agent.kickoff_async``).
- Model calls are recorded by agl's OpenAI instrumentation (:class:`agl.tracing.
  OpenAIInstrumentation`, the runner's ``"openai"``), which CrewAI's native OpenAI provider
  (``LLM(model="openai/...")``, any OpenAI-compatible ``base_url``) calls through: plain,
  streamed, with tools and with structured output, each with the response id LightningRL joins
  with the gateway's token ids. The two share one set of patches, so ``instrument=["crewai",
  "openai"]`` records each call once.

Models CrewAI reaches through another provider's SDK (Anthropic, Gemini, Bedrock, LiteLLM) get
no model-call spans.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from opentelemetry.util import types

from agl import semconv
from agl.tracing import NormalizingTracerProvider, OpenAIInstrumentation, OpenInferenceInstrumentor
from agl_crewai._agent_spans import open_agent_spans

__all__ = ["TASK_NAME", "CrewAIInstrumentor"]

TASK_NAME = "agl.task.name"
"""The CrewAI task an agent span executes (its ``name``, else its description)."""

# openinference's own name for the attribute (it has no constant for it).
_OPENINFERENCE_TASK_NAME = "task_name"


class CrewAIInstrumentor(OpenInferenceInstrumentor):
    """Record CrewAI crew, agent, task, tool and model calls in a tracer's rollouts; reversible.

    Instrumenting twice is the same as once. ::

        instrumentor = CrewAIInstrumentor(tracer)
        instrumentor.instrument()
        async with tracer.rollout(rollout_id, attempt_id):
            await crew.kickoff_async()    # agents, tasks, model calls, tools: spans
        instrumentor.uninstrument()

    Args:
        tracer: The :class:`agl.Tracer` whose rollouts the spans belong to.
    """

    framework = "CrewAI"
    instrumentation = "openinference.instrumentation.crewai:CrewAIInstrumentor"

    def agl_attributes(
        self, name: str, attributes: Mapping[str, Any]
    ) -> Mapping[str, types.AttributeValue]:
        out = dict(super().agl_attributes(name, attributes))
        task = attributes.get(_OPENINFERENCE_TASK_NAME)
        if semconv.AGL_AGENT_NAME in out and isinstance(task, str) and task:
            out[TASK_NAME] = task
        return out

    def extend(self, undo: contextlib.ExitStack, provider: NormalizingTracerProvider) -> None:
        model_calls = OpenAIInstrumentation(self.tracer)
        model_calls.instrument()
        undo.callback(model_calls.uninstrument)
        open_agent_spans(provider.get_tracer("agl_crewai"), undo)
