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
from collections.abc import AsyncIterator, Callable
from typing import Any

from agl.tracing import note_response, patch

__all__ = ["keep_response_ids"]

_STREAMS = ("_create_stream_chunks", "_create_stream_chunks_beta_client")


def keep_response_ids(undo: contextlib.ExitStack) -> None:
    """Patch AutoGen's OpenAI client (if installed) to record response ids; push the undoing."""
    from autogen_core.logging import LLMCallEvent

    patch(
        undo,
        LLMCallEvent,
        "__init__",
        _noting_event_ids,
        missing="autogen-core's LLMCallEvent has no __init__: calls are recorded without their "
        "response id",
    )
    try:
        from autogen_ext.models.openai import BaseOpenAIChatCompletionClient as Client
    except ImportError:  # autogen-ext[openai] is not installed: no OpenAI client to patch
        return
    for name in _STREAMS:
        patch(
            undo,
            Client,
            name,
            _noting_stream_ids,
            missing=f"autogen-ext's BaseOpenAIChatCompletionClient has no {name}: some streamed "
            "calls are recorded without their response id",
        )


def _noting_event_ids(init: Callable[..., None]) -> Callable[..., None]:
    @functools.wraps(init)
    def event_init(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        response = kwargs.get("response")
        if isinstance(response, dict):
            note_response(response.get("id"), response.get("model"))

    return event_init


def _noting_stream_ids(
    chunks: Callable[..., AsyncIterator[Any]],
) -> Callable[..., AsyncIterator[Any]]:
    @functools.wraps(chunks)
    async def noting(self: Any, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        noted = False
        async for chunk in chunks(self, *args, **kwargs):
            if not noted:
                note_response(getattr(chunk, "id", None), getattr(chunk, "model", None))
                noted = True
            yield chunk

    return noting
