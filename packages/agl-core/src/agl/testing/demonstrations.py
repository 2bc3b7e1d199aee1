"""A scripted teacher's chat exchanges, kept as conversations to fine-tune a model on.

Wrap a :data:`~agl.testing.openai_server.Script` in :class:`Demonstrations`, serve it with
:class:`~agl.testing.openai_server.OpenAIServer` and run the agent through it: every chat
request the script answers becomes one conversation, the request's messages followed by the
reply as an assistant message, with the tools the request offered. That is the exact shape
in which the agent's framework talks to a model (its system prompt, its tool schemas, its
way of sending tool results back), so a model fine-tuned on these conversations sees at
training time the prompts it will see when the agent runs it::

    teacher = Demonstrations(stand_in.script(tasks, plan))
    with OpenAIServer(teacher) as server:
        run_the_agent(tasks, agl.LLM(endpoint=server.url, model="teacher"))
    train_on_messages(learner, teacher.conversations)  # agl-torch

:func:`record_demonstrations` does those steps for an agl agent: it serves the teacher, runs
the agent over the tasks with :meth:`agl.Trainer.dev` and returns the conversations.

A request on the Responses or the Messages API is kept as the chat request the server answers
it with (:func:`agl.openai_wire.serve_wire`), which is what an engine behind agl's gateway is
asked too. Completions requests (no ``messages``) and error replies are not kept.
"""

from __future__ import annotations

import inspect
import json
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agl.testing._openai_wire import Reply

__all__ = ["Demonstrations", "assistant_message", "record_demonstrations"]


def assistant_message(reply: Reply | str, *, call_prefix: str = "call_") -> dict[str, Any]:
    """``reply`` as the OpenAI assistant message a client would put in its history."""
    if isinstance(reply, str):
        return {"role": "assistant", "content": reply}
    if not reply.tool_calls:
        return {"role": "assistant", "content": reply.text}
    calls = [
        {
            "id": call.id or f"{call_prefix}{i}",
            "type": "function",
            "function": {"name": call.name, "arguments": call.arguments_json},
        }
        for i, call in enumerate(reply.tool_calls)
    ]
    return {"role": "assistant", "content": None, "tool_calls": calls}


class Demonstrations:
    """A script that answers as ``script`` does and keeps each chat exchange (thread-safe).

    Args:
        script: The teacher: a request's JSON body -> a reply (``async`` or not). A result
            with several replies (one per choice of ``n``) keeps the first.
    """

    def __init__(self, script: Any) -> None:
        self._script = script
        self._lock = threading.Lock()
        self._conversations: list[dict[str, Any]] = []

    async def __call__(self, request: dict[str, Any]) -> Any:
        result = self._script(request)
        if inspect.isawaitable(result):
            result = await result
        first = result if isinstance(result, str | Reply) else _first(result)
        messages = request.get("messages")
        answered = isinstance(first, str) or (first is not None and first.status is None)
        if answered and first is not None and isinstance(messages, list):
            conversation: dict[str, Any] = {"messages": [*messages, assistant_message(first)]}
            if request.get("tools"):
                conversation["tools"] = request["tools"]
            with self._lock:
                self._conversations.append(conversation)
        return result

    @property
    def conversations(self) -> list[dict[str, Any]]:
        """The conversations kept so far, in the order they were answered: dicts with
        ``messages`` and, when the request offered any, ``tools``."""
        with self._lock:
            return list(self._conversations)

    def clear(self) -> None:
        """Forget the conversations kept so far."""
        with self._lock:
            self._conversations.clear()


def _first(replies: Sequence[Reply | str]) -> Reply | str | None:
    return replies[0] if replies else None


def record_demonstrations(
    agent: Any,
    tasks: Sequence[Any],
    script: Any,
    *,
    run_dir: str | Path,
    instrument: Sequence[str] | None = None,
    concurrency: int = 64,
    n_runners: int = 1,
) -> list[dict[str, Any]]:
    """Run ``agent`` once over ``tasks`` against the teacher ``script`` (served by
    :class:`~agl.testing.openai_server.OpenAIServer` as the run's ``llm``, model ``"teacher"``)
    and return every chat exchange as a conversation (see :class:`Demonstrations`).

    The conversations come in a fixed order, sorted by their JSON: the runners answer
    concurrently, so the order they were answered in changes from run to run, and a seeded
    shuffle of them (a fine-tuning's) should not.

    Args:
        agent: An ``@agl.rollout`` function or :class:`~agl.LitAgent`.
        tasks: The rollouts' inputs.
        script: The teacher (see :class:`Demonstrations`).
        run_dir: The dev run's directory (its store and metrics).
        instrument: What the runners trace (as ``Trainer(instrument=...)`` takes it).
        concurrency: Rollouts at once, in all (shared among the runners).
        n_runners: Runners: 1 runs in this process, more as processes (``Trainer``'s
            ``n_runners``: the agent then needs to be importable, and the program's main
            module guarded by ``if __name__ == "__main__"``).
    """
    from agl._resources import LLM
    from agl._train._trainer import Trainer
    from agl.testing.openai_server import OpenAIServer

    teacher = Demonstrations(script)
    with OpenAIServer(teacher) as server:
        trainer = Trainer(
            run_dir=run_dir,
            resources={"llm": LLM(endpoint=server.url, model="teacher")},
            concurrency=-(-concurrency // max(n_runners, 1)),
            n_runners=n_runners,
            instrument=instrument,
            console=False,
            progress=False,
            plot=False,
        )
        trainer.dev(agent, list(tasks))
    return sorted(teacher.conversations, key=lambda c: json.dumps(c, sort_keys=True))
