"""Keep the response id of streamed ``ChatOpenAI`` calls.

langchain-openai puts a Chat Completions response's ``id`` in the message's
``response_metadata["id"]`` when the call is not streamed, but drops the ``id`` of stream chunks,
so a streamed call's run (and span) would not name the response the gateway recorded. While
instrumented, each chunk's message gets its chunk's ``id`` in ``response_metadata`` (equal ids
merge into one when LangChain adds the chunks up), as for an unstreamed call. No public hook
sees the raw chunks, so this wraps ``BaseChatOpenAI._convert_chunk_to_generation_chunk``; it is
skipped when langchain-openai is not installed, or when that method is gone.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import Any

from agl.tracing import patch

__all__ = ["keep_stream_response_ids"]

_METHOD = "_convert_chunk_to_generation_chunk"


def keep_stream_response_ids(undo: contextlib.ExitStack) -> None:
    """Patch langchain-openai (if installed) to keep stream chunk ids; push the undoing."""
    try:
        from langchain_openai.chat_models.base import BaseChatOpenAI
    except ImportError:
        return
    patch(
        undo,
        BaseChatOpenAI,
        _METHOD,
        _keeping_chunk_ids,
        missing=f"langchain-openai has no {_METHOD}: streamed ChatOpenAI calls are recorded "
        "without their response id",
    )


def _keeping_chunk_ids(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def convert(self: Any, chunk: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        generation = original(self, chunk, *args, **kwargs)
        # beta.chat.completions.stream (structured output) nests the chunk under "chunk".
        nested = chunk.get("chunk")
        response_id = chunk.get("id") or (nested.get("id") if isinstance(nested, dict) else None)
        if generation is not None and isinstance(response_id, str) and response_id:
            generation.message.response_metadata.setdefault("id", response_id)
        return generation

    return convert
