"""Give the span of each Chat Completions call the id of the response the server sent.

LightningRL joins a model call with the token ids agl's gateway recorded on the response's
``id`` (``gen_ai.response.id``). A Responses API call's span has it (openinference records the
whole response), but ``OpenAIChatCompletionsModel`` keeps only the message and usage of a chat
completion in its ``generation`` span, never its ``id``. While instrumented, two steps of that
model are wrapped, both run inside the generation span:

- ``_fetch_response`` returns the ``ChatCompletion`` of a call that is not streamed: its ``id``
  and ``model``;
- ``_populate_stream_generation_span`` is handed the response a stream added up to, whose output
  items carry the chunks' ``id`` in ``provider_data["response_id"]`` (the SDK's own note of it).

openinference makes the OpenTelemetry span of each SDK span current while that span is open,
so the id goes on the current span, and only if it is a model call's span this instrumentation
started. No public hook of the SDK sees the raw completion; if either step is gone (another SDK
release), neither is wrapped and a warning says that Chat Completions calls are recorded without
their id (LightningRL then joins them with the gateway's token ids by order).
"""

from __future__ import annotations

import contextlib
import functools
import logging
from typing import Any

from agl.tracing import note_response, patch

__all__ = ["keep_chat_response_ids"]

logger = logging.getLogger(__name__)

_FETCH = "_fetch_response"
_POPULATE_STREAM = "_populate_stream_generation_span"


def keep_chat_response_ids(undo: contextlib.ExitStack) -> None:
    """Patch ``OpenAIChatCompletionsModel`` to record response ids; push the undoing."""
    from agents.models.openai_chatcompletions import OpenAIChatCompletionsModel as Model

    if _FETCH not in vars(Model) or not isinstance(vars(Model).get(_POPULATE_STREAM), staticmethod):
        logger.warning(
            "openai-agents' OpenAIChatCompletionsModel has no %s or %s: its calls are recorded "
            "without their response id",
            _FETCH,
            _POPULATE_STREAM,
        )
        return
    patch(undo, Model, _FETCH, _noting_fetched_ids)
    patch(undo, Model, _POPULATE_STREAM, _noting_streamed_ids)


def _noting_fetched_ids(fetch: Any) -> Any:
    @functools.wraps(fetch)
    async def fetch_response(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = await fetch(self, *args, **kwargs)
        if not isinstance(result, tuple):  # a stream comes as (response, chunks)
            note_response(getattr(result, "id", None), getattr(result, "model", None))
        return result

    return fetch_response


def _noting_streamed_ids(populate: staticmethod[..., Any]) -> staticmethod[..., Any]:
    function = populate.__func__

    @functools.wraps(function)
    def populate_stream_span(span: Any, response: Any, *args: Any, **kwargs: Any) -> Any:
        populated = function(span, response, *args, **kwargs)
        note_response(_stream_response_id(response))
        return populated

    return staticmethod(populate_stream_span)


def _stream_response_id(response: Any) -> object:
    for item in getattr(response, "output", None) or ():
        provider_data = getattr(item, "provider_data", None)
        if isinstance(provider_data, dict) and provider_data.get("response_id"):
            return provider_data["response_id"]
    return None
