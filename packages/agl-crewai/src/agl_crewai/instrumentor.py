"""Trace CrewAI runs as spans of the current agl rollout.

:class:`CrewAIInstrumentor` is what ``agl.Runner(..., instrument=["crewai"])`` builds. Three
pieces record a crew:

- openinference-instrumentation-crewai wraps a crew's ``kickoff``, each task's execution by its
  agent (``Task._execute_core``), ``Agent.kickoff``, tool runs and flows. agl hands it its own
  tracer provider (``tracer.provider``), so the spans go to the rollout's store and never to
  OpenTelemetry's global provider, and adds agl's attributes when each span ends
  (:mod:`agl_crewai._normalize`): agent spans named after the agent's role, ``agl.tool.*`` on
  tool spans.
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
no model-call spans. openinference's instrumentor is one per process (an OpenTelemetry
``BaseInstrumentor``), so one agl tracer at a time can trace CrewAI: instrumenting while
something else holds it raises :class:`agl.AglError` rather than record nothing.
"""

from __future__ import annotations

import contextlib

from agl import AglError
from agl.tracing import NormalizingTracerProvider, OpenAIInstrumentation, PatchingInstrumentor
from agl_crewai._agent_spans import open_agent_spans
from agl_crewai._normalize import agl_attributes

__all__ = ["CrewAIInstrumentor"]


class CrewAIInstrumentor(PatchingInstrumentor):
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

    def apply(self, undo: contextlib.ExitStack) -> None:
        from openinference.instrumentation import TraceConfig
        from openinference.instrumentation.crewai import (
            CrewAIInstrumentor as OpenInferenceInstrumentor,
        )

        openinference = OpenInferenceInstrumentor()
        if openinference.is_instrumented_by_opentelemetry:
            raise AglError(
                "CrewAI is already instrumented by openinference (another agl tracer, or the "
                "application's own tracing): uninstrument it before instrumenting it for agl"
            )
        provider = NormalizingTracerProvider(self.tracer.provider, agl_attributes)
        model_calls = OpenAIInstrumentation(self.tracer)
        model_calls.instrument()
        undo.callback(model_calls.uninstrument)
        openinference.instrument(
            tracer_provider=provider, config=TraceConfig(enable_genai_semconv=True)
        )
        undo.callback(openinference.uninstrument)
        open_agent_spans(provider.get_tracer("agl_crewai"), undo)
