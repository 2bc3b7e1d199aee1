"""End an ``AssistantAgent``'s turn span when its turn ends, not when Python collects it.

openinference's span of an agent's turn lives in a wrapper around the async generator
``AssistantAgent.on_messages_stream``, and ends when that generator finishes. A team and
``run_stream`` read the generator to its end, but ``on_messages`` (and so ``run``) returns at
the ``Response`` and leaves it suspended: the span would end whenever asyncio finalizes the
generator (after the rollout, or never), and until then stays the current span of the caller's
context. While instrumented, ``AssistantAgent.on_messages`` is wrapped to close the generator
once it has its response, as ``async with contextlib.aclosing(...)`` would; what it returns is
unchanged.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Sequence
from typing import Any

from agl.tracing import patch

__all__ = ["close_agent_turns"]


def close_agent_turns(undo: contextlib.ExitStack) -> None:
    """Patch ``AssistantAgent.on_messages`` to close its turn's stream; push the undoing."""
    from autogen_agentchat.agents import AssistantAgent

    patch(
        undo,
        AssistantAgent,
        "on_messages",
        _closing_the_stream,
        missing="autogen-agentchat's AssistantAgent has no on_messages: spans of agents run "
        "with run() or on_messages() may end late",
    )


def _closing_the_stream(original: Callable[..., Any]) -> Callable[..., Any]:
    from autogen_agentchat.base import Response

    @functools.wraps(original)
    async def on_messages(self: Any, messages: Sequence[Any], cancellation_token: Any) -> Any:
        async with contextlib.aclosing(
            self.on_messages_stream(messages, cancellation_token)
        ) as stream:
            async for message in stream:
                if isinstance(message, Response):
                    return message
        raise AssertionError("The stream should have returned the final result.")

    return on_messages
