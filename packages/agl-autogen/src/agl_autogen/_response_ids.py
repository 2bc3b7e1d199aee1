"""Give the span of each OpenAI chat completion call the id of the response the server sent.

LightningRL joins a model call with the token ids agl's gateway recorded on the response's
``id`` (``gen_ai.response.id``). openinference records what ``OpenAIChatCompletionClient``
returns, a ``CreateResult``, which has no ``id``: the client reads the ``ChatCompletion`` and
keeps only its message and usage. While instrumented, two places that see the raw response are
wrapped, both run inside openinference's span of the call:

- ``autogen_core.logging.LLMCallEvent.__init__``: a call that is not streamed builds this event
  (for AutoGen's event logger) from the whole ``ChatCompletion``, ``id`` and ``model`` included,
  whether or not anything logs it;
- ``BaseOpenAIChatCompletionClient._create_stream_chunks`` (and its ``_beta_client`` twin, for
  structured output) yields a streamed call's chunks, each with the response's ``id``.

The id goes on the current span, and only if it is a model call's span this instrumentation
started. No public hook of AutoGen sees the raw response with logging left as the application
set it; if a wrapped step is gone (another AutoGen release), it is not wrapped and a warning says
which calls are recorded without their id (LightningRL then joins them with the gateway's token
ids by order).
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from openinference.semconv.trace import OpenInferenceSpanKindValues, SpanAttributes
from opentelemetry import trace as trace_api

from agl import semconv
from agl.tracing import NormalizingSpan

__all__ = ["keep_response_ids"]

logger = logging.getLogger(__name__)

_STREAMS = ("_create_stream_chunks", "_create_stream_chunks_beta_client")
_LLM = OpenInferenceSpanKindValues.LLM.value


def keep_response_ids(undo: contextlib.ExitStack) -> None:
    """Patch AutoGen's OpenAI client (if installed) to record response ids; push the undoing."""
    from autogen_core.logging import LLMCallEvent

    init = vars(LLMCallEvent)["__init__"]

    @functools.wraps(init)
    def event_init(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        response = kwargs.get("response")
        if isinstance(response, dict):
            _record(response.get("id"), response.get("model"))

    LLMCallEvent.__init__ = event_init  # type: ignore[method-assign]
    undo.callback(setattr, LLMCallEvent, "__init__", init)

    try:
        from autogen_ext.models.openai import BaseOpenAIChatCompletionClient as Client
    except ImportError:  # autogen-ext[openai] is not installed: no OpenAI client to patch
        return
    for name in _STREAMS:
        chunks = vars(Client).get(name)
        if chunks is None:
            logger.warning(
                "autogen-ext's BaseOpenAIChatCompletionClient has no %s: some streamed calls "
                "are recorded without their response id",
                name,
            )
            continue
        setattr(Client, name, _noting_stream_ids(chunks))
        undo.callback(setattr, Client, name, chunks)


def _noting_stream_ids(
    chunks: Callable[..., AsyncIterator[Any]],
) -> Callable[..., AsyncIterator[Any]]:
    @functools.wraps(chunks)
    async def noting(self: Any, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        noted = False
        async for chunk in chunks(self, *args, **kwargs):
            if not noted:
                _record(getattr(chunk, "id", None), getattr(chunk, "model", None))
                noted = True
            yield chunk

    return noting


def _record(response_id: object, model: object) -> None:
    """Put the response's id (and model) on the current span, if it is a model call's."""
    span = trace_api.get_current_span()
    # openinference's span is a proxy of the one agl's provider view made: isinstance sees it.
    if (
        not isinstance(span, NormalizingSpan)
        or span.attributes.get(SpanAttributes.OPENINFERENCE_SPAN_KIND) != _LLM
    ):
        return
    if isinstance(response_id, str) and response_id:
        span.set_attribute(semconv.GEN_AI_RESPONSE_ID, response_id)
    if isinstance(model, str) and model:
        span.set_attribute(semconv.GEN_AI_RESPONSE_MODEL, model)
