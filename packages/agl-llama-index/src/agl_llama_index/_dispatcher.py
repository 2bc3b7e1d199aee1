"""agl's handlers on LlamaIndex's root dispatcher, beside openinference's, and its way to
openinference's spans.

LlamaIndex reports its work to the handlers of its root dispatcher
(``llama_index.core.instrumentation.get_dispatcher()``): a span handler hears of every
instrumented method as it is entered and left (a workflow step, an LLM's ``achat``, a tool's
``acall``), with its bound arguments; an event handler gets the events those methods dispatch
(``LLMChatStartEvent``, ...), each naming the span it happened in. openinference's
instrumentation is one span handler and one event handler there, and its span handler keeps
the span it opened for each LlamaIndex span id in ``open_spans`` (LlamaIndex's own
``BaseSpanHandler`` field). agl adds its handlers after openinference's, so when agl's span
handler hears of a span, openinference's span for it is already open, and agl can add to it
before openinference writes its attributes and ends it.

openinference's span (its private ``_Span``) buffers its attributes and writes them when it
ends: ``span[key] = value`` adds one, and ``_span_kind`` is the OpenInference span kind it will
write. These two, and the instrumentor's ``_span_handler`` (which openinference's own
``get_current_span()`` reads), are the only private names of openinference agl uses, all
through :class:`OpenInferenceSpans`. Should a release lack them, agl says so in a warning and
leaves openinference's spans as they are.
"""

from __future__ import annotations

import abc
import contextlib
import inspect
import logging
from typing import Any

from llama_index.core.instrumentation.span import BaseSpan
from llama_index.core.instrumentation.span_handlers import BaseSpanHandler
from pydantic import PrivateAttr

__all__ = ["OpenInferenceSpans", "SpanListener", "add_event_handler", "add_span_listener"]

logger = logging.getLogger(__name__)


class OpenInferenceSpans:
    """The spans openinference's span handler has open, by LlamaIndex span id."""

    def __init__(self, handler: Any) -> None:
        self._handler = handler
        self._warned: set[str] = set()

    @classmethod
    def find(cls) -> OpenInferenceSpans | None:
        """openinference's, once it instruments LlamaIndex (None, with a warning, if unreadable)."""
        from openinference.instrumentation.llama_index import LlamaIndexInstrumentor

        handler = getattr(LlamaIndexInstrumentor(), "_span_handler", None)
        if not isinstance(getattr(handler, "open_spans", None), dict):
            logger.warning(
                "agl cannot reach the spans of this openinference-instrumentation-llama-index: "
                "agents are not named, and model calls lack their response id and may be "
                "counted twice"
            )
            return None
        return cls(handler)

    def get(self, span_id: str | None) -> Any | None:
        """openinference's span of a LlamaIndex span, while it is open."""
        if span_id is None:
            return None
        spans: dict[str, Any] = self._handler.open_spans
        return spans.get(span_id)

    def kind(self, span: Any) -> str | None:
        """The OpenInference span kind ``span`` will be written with (None: not decided yet)."""
        try:
            kind = span._span_kind
        except AttributeError:
            self._warn("its spans have no _span_kind: model calls may be counted twice")
            return None
        return kind if isinstance(kind, str) else None

    def set_kind(self, span: Any, kind: str) -> None:
        """Have ``span`` written with the OpenInference span kind ``kind``."""
        if hasattr(span, "_span_kind"):
            span._span_kind = kind
        else:
            self._warn("its spans have no _span_kind: model calls may be counted twice")

    def set_attribute(self, span: Any, key: str, value: str) -> None:
        """Add an attribute to what ``span`` writes when it ends (nothing once it has ended)."""
        try:
            span[key] = value
        except TypeError:
            self._warn(f"its spans take no attributes: {key} is not recorded")

    def _warn(self, what: str) -> None:
        if what not in self._warned:  # once each: it would hold for every span
            self._warned.add(what)
            logger.warning("openinference-instrumentation-llama-index changed: %s", what)


class SpanListener(BaseSpanHandler[BaseSpan], abc.ABC):
    """A span handler that opens no span of its own: it hears of each span as it opens, while
    openinference's span of it can still be changed."""

    _spans: OpenInferenceSpans = PrivateAttr()

    def __init__(self, spans: OpenInferenceSpans) -> None:
        super().__init__()
        self._spans = spans

    @abc.abstractmethod
    def opened(self, id_: str, bound_args: inspect.BoundArguments, span: Any) -> None:
        """LlamaIndex span ``id_`` opened, with these arguments; ``span`` is openinference's."""

    def new_span(
        self,
        id_: str,
        bound_args: inspect.BoundArguments,
        instance: Any | None = None,
        parent_span_id: str | None = None,
        tags: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> BaseSpan | None:
        span = self._spans.get(id_)
        if span is not None:
            self.opened(id_, bound_args, span)
        return None

    def prepare_to_exit_span(
        self,
        id_: str,
        bound_args: inspect.BoundArguments,
        instance: Any | None = None,
        result: Any | None = None,
        **kwargs: Any,
    ) -> BaseSpan | None:
        return None

    def prepare_to_drop_span(
        self,
        id_: str,
        bound_args: inspect.BoundArguments,
        instance: Any | None = None,
        err: BaseException | None = None,
        **kwargs: Any,
    ) -> BaseSpan | None:
        return None


def add_span_listener(
    undo: contextlib.ExitStack, listener: type[SpanListener], spans: OpenInferenceSpans
) -> None:
    """Add a ``listener`` of ``spans`` to the root dispatcher's span handlers, after
    openinference's; push its removal."""
    dispatcher = _root()
    handler = listener(spans)
    dispatcher.add_span_handler(handler)
    undo.callback(_remove, dispatcher.span_handlers, handler)


def add_event_handler(undo: contextlib.ExitStack, handler: Any) -> None:
    """Add ``handler`` to the root dispatcher's event handlers; push its removal."""
    dispatcher = _root()
    dispatcher.add_event_handler(handler)
    undo.callback(_remove, dispatcher.event_handlers, handler)


def _root() -> Any:
    # LlamaIndex's documented import; the module re-exports it without __all__.
    from llama_index.core.instrumentation import get_dispatcher  # type: ignore[attr-defined]

    return get_dispatcher()


def _remove(handlers: list[Any], handler: Any) -> None:
    # By identity: handlers are pydantic models, and two of one class compare equal.
    handlers[:] = [h for h in handlers if h is not handler]
