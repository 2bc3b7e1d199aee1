"""Spans a sender keeps while the store cannot take them, bounded by their size in bytes.

A store that is unreachable, or whose disk is full, answers with a retryable error
(:class:`~agl.StoreUnavailableError`, :class:`~agl.StoreFullError`): the span sender keeps what
it could not send in a :class:`KeptSpans` and sends it again, oldest first, until the store
takes it. The bound is on the spans' encoded size (what they weigh on the wire and in the
store), not their count: one gateway span with a long conversation weighs as much as a
thousand small ones. Past the bound, the oldest spans go first.

The bound's default is :data:`DEFAULT_MAX_BUFFER_BYTES`; the environment variable
``AGL_SPAN_BUFFER_MB`` (:data:`BUFFER_ENV`) overrides it for every sender of a process
(runners, the gateway, the trainer), an argument to the sender overrides both.
"""

from __future__ import annotations

import collections
import functools
import itertools
import os
from collections.abc import Iterable

from pydantic import TypeAdapter

from agl._errors import InvalidInputError
from agl._spans import Span

__all__ = ["BUFFER_ENV", "DEFAULT_MAX_BUFFER_BYTES", "KeptSpans", "buffer_bound", "size_text"]

DEFAULT_MAX_BUFFER_BYTES = 64 * 1024 * 1024
"""64 MiB of encoded spans per sender. Python holds a span in 1.5 to 6 times its encoded size:
a full buffer held 98 MiB of chat spans, 135 MiB of gateway spans (token ids as lists) and
400 MiB of small tool spans (``benchmarks/span_buffer.py``); the sender's count bound, 100,000
spans by default, stops the small ones at some 250 MiB."""

BUFFER_ENV = "AGL_SPAN_BUFFER_MB"
"""The environment variable that sets the bound, in MiB."""


def buffer_bound(value: int | None = None) -> int:
    """The bound in bytes: ``value`` if given, else ``AGL_SPAN_BUFFER_MB``, else the default.

    Raises:
        InvalidInputError: ``value`` or the variable is not a positive number.
    """
    if value is not None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidInputError(
                f"max_buffer_bytes must be a positive number of bytes, got {value!r}",
                field="max_buffer_bytes",
                value=value,
            )
        return value
    raw = os.environ.get(BUFFER_ENV, "").strip()
    if not raw:
        return DEFAULT_MAX_BUFFER_BYTES
    try:
        megabytes = float(raw)
    except ValueError:
        megabytes = float("nan")
    if not megabytes > 0 or megabytes == float("inf"):
        raise InvalidInputError(
            f"{BUFFER_ENV} must be a positive number of MiB (the span senders' bound on what "
            f"they keep while the store cannot take spans), got {raw!r}",
            field=BUFFER_ENV,
            value=raw,
        )
    return max(1, int(megabytes * 1024 * 1024))


class KeptSpans:
    """Spans waiting for the store, oldest first: at most ``max_bytes`` of them encoded, and
    at most ``max_count`` of them.

    Not thread-safe: the sender's thread alone uses it.
    """

    def __init__(self, max_bytes: int, max_count: int) -> None:
        self.max_bytes = max_bytes
        self.max_count = max_count
        self.bytes = 0
        self._spans: collections.deque[tuple[Span, int]] = collections.deque()

    def __len__(self) -> int:
        return len(self._spans)

    def add(self, spans: Iterable[Span]) -> tuple[int, int]:
        """Keep ``spans`` after the others; drop the oldest beyond the bound.

        Returns:
            How many spans were dropped, and their size in bytes.
        """
        encode = _span_adapter().dump_json
        # all measured first: a span that cannot be encoded raises with nothing kept
        sized = [(span, len(encode(span, exclude_defaults=True))) for span in spans]
        for span, size in sized:
            self._spans.append((span, size))
            self.bytes += size
        dropped = dropped_bytes = 0
        while self._spans and (self.bytes > self.max_bytes or len(self._spans) > self.max_count):
            _, size = self._spans.popleft()
            self.bytes -= size
            dropped += 1
            dropped_bytes += size
        return dropped, dropped_bytes

    def oldest(self, count: int) -> list[Span]:
        """The ``count`` oldest spans (fewer if there are fewer), still kept."""
        return [span for span, _ in itertools.islice(self._spans, count)]

    def remove_oldest(self, count: int) -> None:
        """Forget the ``count`` oldest spans (stored, or refused for good)."""
        for _ in range(min(count, len(self._spans))):
            _, size = self._spans.popleft()
            self.bytes -= size

    def clear(self) -> int:
        """Forget every span; return how many there were."""
        count = len(self._spans)
        self._spans.clear()
        self.bytes = 0
        return count


def size_text(count: int) -> str:
    """``count`` bytes for a log line: in MiB from one MiB up."""
    return f"{count / (1024 * 1024):.1f} MiB" if count >= 1024 * 1024 else f"{count} bytes"


@functools.cache
def _span_adapter() -> TypeAdapter[Span]:
    # Built on first use: Span defers building its serializer, and ``import agl`` stays light.
    return TypeAdapter(Span)
