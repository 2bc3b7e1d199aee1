"""One LLM span per model call, with the id of the response the server sent.

openinference gives the ``LLM`` kind to the span of every method of an LLM object that
LlamaIndex instruments, and its GenAI attributes then make each of them a ``chat`` call
(``gen_ai.operation.name``). One model call of a ``FunctionAgent`` on ``OpenAILike`` so becomes
three LLM spans: ``OpenAILike._prepare_chat_with_tools``, which only builds the request;
``OpenAILike.achat``, the subclass's method; and, inside it, the ``OpenAI.achat`` it calls (also
named ``OpenAILike.achat``: LlamaIndex names a span after the object's class), which alone
records the messages and usage. None of them has the response's ``id``: LlamaIndex's
``ChatResponse`` keeps the server's response (a ``ChatCompletion``; a stream's
``ChatCompletionChunk`` s) as ``raw``, and openinference looks for an ``id`` only at the top of
what it serializes. LightningRL would take the two ``achat`` spans for one call (they
overlap and do not disagree on the messages) and ``_prepare_chat_with_tools`` for another, and
join them with the gateway's token ids by order, or not at all.

A model call is where LlamaIndex's call wrappers (``llm_chat_callback``,
``llm_completion_callback``) dispatch a start event, in the span of the call itself, then an
in-progress event per stream chunk and an end event, each holding the ``ChatResponse``
(``CompletionResponse``). While instrumented, a span handler and an event handler of agl's,
after openinference's on the root dispatcher (:mod:`agl_llama_index._dispatcher`):

- make every ``LLM`` span openinference opens a ``CHAIN`` span as it opens (and every span an
  event of a step around a call would make one: a chat engine's ``StreamChatStartEvent``), and
  an ``LLM`` span again when a call starts in it: the span the request is made in is the call's
  one LLM span; the wrapping methods and the LLM's other ones (``_prepare_chat_with_tools``,
  ``apredict`` around a chat) are steps like any other. Of a call started inside another (a
  ``CustomLLM``'s chat completes), the inner one stays;
- put the ``id`` and ``model`` of ``raw`` on that span (``gen_ai.response.id``,
  ``gen_ai.response.model``) from the first event that has them; for a stream, its first chunk,
  before the end event has openinference end the span.

An LLM integration whose methods dispatch no start event (LlamaIndex's all do) gets no LLM
span; one whose ``raw`` holds no ``id`` gets none on its spans (LightningRL then joins its calls
by order). A ``CustomLLM`` streamed through ``astream_chat`` keeps two LLM spans per call (the
stream's chat is made after ``astream_chat`` has returned, outside its span), both with the
response's id, which LightningRL counts as one call.
"""

from __future__ import annotations

import contextlib
import inspect
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events import BaseEvent
from llama_index.core.instrumentation.events.exception import ExceptionEvent
from llama_index.core.instrumentation.events.llm import (
    LLMChatEndEvent,
    LLMChatInProgressEvent,
    LLMChatStartEvent,
    LLMCompletionEndEvent,
    LLMCompletionInProgressEvent,
    LLMCompletionStartEvent,
)
from llama_index.core.instrumentation.events.span import (  # type: ignore[attr-defined]
    SpanDropEvent,  # re-exported there without __all__
)
from pydantic import PrivateAttr

from agl import semconv
from agl_llama_index._dispatcher import (
    OpenInferenceSpans,
    SpanListener,
    add_event_handler,
    add_span_listener,
)

__all__ = ["one_span_per_call"]

_LLM = "LLM"
_CHAIN = "CHAIN"
_STARTS = (LLMChatStartEvent, LLMCompletionStartEvent)
_RESPONSES = (
    LLMChatInProgressEvent,
    LLMChatEndEvent,
    LLMCompletionInProgressEvent,
    LLMCompletionEndEvent,
)
_ENDS = (LLMChatEndEvent, LLMCompletionEndEvent, ExceptionEvent, SpanDropEvent)
_MAX_DEPTH = 8
"""How far up the span tree a call looks for a call it is made in."""


def one_span_per_call(undo: contextlib.ExitStack, spans: OpenInferenceSpans) -> None:
    """Add agl's handlers that keep one LLM span per call, with its response id; push their
    removal."""
    add_span_listener(undo, _CallsOnly, spans)
    add_event_handler(undo, _CallEvents(spans))


class _CallsOnly(SpanListener):
    """Makes openinference's LLM spans steps (CHAIN) as they open, until a call starts."""

    @classmethod
    def class_name(cls) -> str:
        return "AglModelCallSpans"

    def opened(self, id_: str, bound_args: inspect.BoundArguments, span: Any) -> None:
        if self._spans.kind(span) == _LLM:
            self._spans.set_kind(span, _CHAIN)


@dataclass
class _Call:
    span: Any
    """openinference's span of the call."""
    noted: bool = False
    """Whether it has the response's id."""


class _CallEvents(BaseEventHandler):
    """Makes the span a call starts in its LLM span, and gives it the response's id."""

    _spans: OpenInferenceSpans = PrivateAttr()
    _calls: dict[str, _Call] = PrivateAttr(default_factory=dict)
    """The calls under way, by LlamaIndex span id (a stream's span has left openinference's
    open spans by the time its chunks come)."""
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    def __init__(self, spans: OpenInferenceSpans) -> None:
        super().__init__()
        self._spans = spans

    @classmethod
    def class_name(cls) -> str:
        return "AglModelCallEvents"

    def handle(self, event: BaseEvent, **kwargs: Any) -> None:
        span_id = event.span_id
        if span_id is None:
            return
        if isinstance(event, _STARTS):
            self._start(span_id)
            return
        with self._lock:
            call = self._calls.get(span_id)
            if isinstance(event, _ENDS):
                self._calls.pop(span_id, None)
        if call is None:
            # openinference makes a span of open kind an LLM span on some events of the steps
            # around a call (a chat engine's StreamChatStartEvent): a step it stays.
            span = self._spans.get(span_id)
            if span is not None and self._spans.kind(span) == _LLM:
                self._spans.set_kind(span, _CHAIN)
        elif isinstance(event, _RESPONSES) and not call.noted:
            call.noted = self._note(call.span, getattr(event.response, "raw", None))

    def _start(self, span_id: str) -> None:
        span = self._spans.get(span_id)
        if span is None:
            return
        self._spans.set_kind(span, _LLM)
        with self._lock:
            # A call made inside another (a CustomLLM's chat completes): the innermost one is
            # the request, the others are steps.
            outer = [self._calls.pop(i) for i in self._enclosing_calls(span)]
            self._calls[span_id] = _Call(span)
        for call in outer:
            self._spans.set_kind(call.span, _CHAIN)

    def _enclosing_calls(self, span: Any) -> list[str]:
        """The calls under way that ``span`` is inside (called with the lock held)."""
        found = []
        parent_id = span.parent_id
        for _ in range(_MAX_DEPTH):
            if parent_id is None:
                break
            if parent_id in self._calls:
                found.append(parent_id)
            parent = self._spans.get(parent_id)
            parent_id = parent.parent_id if parent is not None else None
        return found

    def _note(self, span: Any, raw: Any) -> bool:
        response_id, model = _read(raw, "id"), _read(raw, "model")
        if response_id is None:
            return False
        self._spans.set_attribute(span, semconv.GEN_AI_RESPONSE_ID, response_id)
        if model is not None:
            self._spans.set_attribute(span, semconv.GEN_AI_RESPONSE_MODEL, model)
        return True


def _read(raw: Any, key: str) -> str | None:
    value = raw.get(key) if isinstance(raw, Mapping) else getattr(raw, key, None)
    return value if isinstance(value, str) and value else None
