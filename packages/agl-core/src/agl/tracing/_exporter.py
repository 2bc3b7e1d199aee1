"""Send finished spans to a store in batches, from a background thread.

The agent's code never waits for the store: a finished span is put in a bounded buffer and a
sender thread ships batches with :meth:`~agl.store.Store.add_spans`. While the store is
unreachable the sender keeps the spans and retries with backoff; if the buffer fills, the oldest
spans are dropped, and every drop is counted in :attr:`SpanSender.stats` and logged. A span
the store refuses as invalid (one naming an unknown rollout, say) is dropped, logged with its
reason and counted as rejected, never retried forever; the good spans sent with it are stored
(:func:`~agl.store._span_batches.add_spans_keeping_good`). Any other error while sending (a
span the store's client cannot serialize, say) is counted as rejected too: the sender thread
never dies of one bad span.

A span waits at most ``delay`` seconds (100 ms by default) before it is sent, with nothing
calling :meth:`SpanSender.flush`: the first span put in an empty buffer wakes the sender, which
sends what has arrived by then; a full batch is sent at once.

What is submitted may be a span or a function that builds one: building (converting an SDK
span, serializing a call's JSON) then happens on the sender thread, off the agent's path.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from agl._errors import AglError, StoreUnavailableError
from agl._spans import Span
from agl.store._base import Store
from agl.store._span_batches import add_spans_keeping_good

__all__ = ["SenderStats", "SpanSender"]

logger = logging.getLogger(__name__)

SpanSource = Span | Callable[[], Span]
"""A span, or a function returning one (called on the sender thread)."""


@dataclass
class SenderStats:
    """What the sender did so far, in spans.

    Attributes:
        queued: Spans handed to the sender.
        exported: Spans the store acknowledged.
        dropped: Spans lost because the buffer was full (or the store was away at shutdown).
        rejected: Spans the store refused as invalid.
        retries: Sends retried because the store was unreachable.
        last_error: The last failure, for the record.
    """

    queued: int = 0
    exported: int = 0
    dropped: int = 0
    rejected: int = 0
    retries: int = 0
    last_error: str | None = None


class SpanSender:
    """A background thread that ships spans to a store in batches.

    Args:
        store: Where spans go; it is used from the sender's own event loop.
        max_batch: Spans per ``add_spans`` call at most.
        max_buffer: Spans kept while the store is slow or away; beyond this the oldest go.
        delay: Longest wait, in seconds, between a span's arrival and its sending: the sender
            collects more spans for up to this long before sending a partial batch.
        max_backoff: Longest pause between retries while the store is unreachable.
    """

    def __init__(
        self,
        store: Store,
        *,
        max_batch: int = 512,
        max_buffer: int = 100_000,
        delay: float = 0.1,
        max_backoff: float = 5.0,
    ) -> None:
        self._store = store
        self._max_batch = max_batch
        self._max_buffer = max_buffer
        self._delay = delay
        self._max_backoff = max_backoff
        self._buffer: collections.deque[SpanSource] = collections.deque()
        self._lock = threading.Condition()
        self._first_at = 0.0  # when the oldest buffered span arrived (monotonic seconds)
        self._enqueued = 0  # spans ever put in the buffer, dropped ones included
        self._settled = 0  # spans ever taken out: sent, rejected or dropped
        self._flush_waiters = 0
        # (target, loop, future) of coroutines waiting in flush_async
        self._async_waiters: list[tuple[int, asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._stopping = False
        self._backoff = 0.05
        self.stats = SenderStats()
        self._thread = threading.Thread(target=self._run, name="agl-span-sender", daemon=True)
        self._thread.start()

    def submit(self, span: SpanSource) -> None:
        """Queue one finished span (or a function building it). Never blocks on the store."""
        with self._lock:
            if len(self._buffer) >= self._max_buffer:
                self._buffer.popleft()
                self._settled += 1
                self.stats.dropped += 1
                if self.stats.dropped == 1 or self.stats.dropped % 1000 == 0:
                    logger.warning(
                        "agl span buffer is full (%d spans; store %s): %d span(s) dropped so far",
                        self._max_buffer,
                        self._store.url,
                        self.stats.dropped,
                    )
            wake = not self._buffer or len(self._buffer) + 1 >= self._max_batch
            if not self._buffer:
                self._first_at = time.monotonic()
            self._buffer.append(span)
            self._enqueued += 1
            self.stats.queued += 1
            if wake:  # the sender starts the delay, or sends a full batch
                self._lock.notify_all()

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until every span submitted so far reached the store (or was given up on).

        Returns False if that did not happen within ``timeout`` seconds; the spans stay
        buffered and are still retried.
        """
        deadline = time.monotonic() + timeout
        with self._lock:
            target = self._enqueued
            self._flush_waiters += 1
            self._lock.notify_all()
            try:
                while self._settled < target:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return False
                    self._lock.wait(remaining)
                return True
            finally:
                self._flush_waiters -= 1

    async def flush_async(self, timeout: float = 30.0) -> bool:
        """:meth:`flush` for coroutines: waits without holding a thread."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        with self._lock:
            target = self._enqueued
            if self._settled >= target:
                return True
            waiter = (target, loop, future)
            self._async_waiters.append(waiter)
            self._flush_waiters += 1
            self._lock.notify_all()
        try:
            await asyncio.wait_for(future, timeout)
            return True
        except TimeoutError:
            return False
        finally:
            with self._lock:
                self._flush_waiters -= 1
                if waiter in self._async_waiters:
                    self._async_waiters.remove(waiter)

    def close(self, timeout: float = 30.0) -> None:
        """Flush, then stop the sender thread."""
        self.flush(timeout)
        with self._lock:
            self._stopping = True
            self._lock.notify_all()
        self._thread.join(timeout)

    # --- the sender thread ------------------------------------------------------------------

    def _run(self) -> None:
        # The thread owns its event loop and blocks on the buffer itself (not in an executor
        # thread), so an idle sender never holds up the interpreter's exit.
        loop = asyncio.new_event_loop()
        try:
            while (sources := self._take_batch()) is not None:
                batch = self._build(sources)
                if not batch:
                    continue
                try:
                    loop.run_until_complete(self._send(batch))
                except Exception as exc:  # never let one batch end the thread
                    logger.exception("agl could not send %d span(s); they are dropped", len(batch))
                    self.stats.rejected += len(batch)
                    self.stats.last_error = f"{type(exc).__name__}: {exc}"
                    self._settle(len(batch))
        finally:
            release = getattr(self._store, "release_loop", None)
            if release is not None:
                loop.run_until_complete(release())
            loop.close()

    def _take_batch(self) -> list[SpanSource] | None:
        """Wait for a full batch, a flush, the oldest span's delay, or stop; return what to send."""
        with self._lock:
            while not self._stopping:
                if not self._buffer:
                    self._lock.wait()
                    continue
                if len(self._buffer) >= self._max_batch or self._flush_waiters:
                    break
                remaining = self._first_at + self._delay - time.monotonic()
                if remaining <= 0:
                    break
                self._lock.wait(remaining)
            count = min(len(self._buffer), self._max_batch)
            if count == 0:
                return None
            return [self._buffer.popleft() for _ in range(count)]

    def _settle(self, count: int) -> None:
        with self._lock:
            self._settled += count
            self._lock.notify_all()
            if not self._async_waiters:
                return
            waiting = []
            for waiter in self._async_waiters:
                target, loop, future = waiter
                if target > self._settled:
                    waiting.append(waiter)
                    continue
                with contextlib.suppress(RuntimeError):  # the waiter's loop has closed
                    loop.call_soon_threadsafe(_resolve, future)
            self._async_waiters = waiting

    def _build(self, sources: list[SpanSource]) -> list[Span]:
        batch = []
        for source in sources:
            if isinstance(source, Span):
                batch.append(source)
                continue
            try:
                batch.append(source())
            except Exception:
                logger.exception("agl could not build a span; it is dropped")
                self.stats.rejected += 1
                self._settle(1)
        return batch

    async def _send(self, batch: list[Span]) -> None:
        """Send one batch, retrying while the store is unreachable; then settle it."""
        while True:
            try:
                outcome = await add_spans_keeping_good(self._store, batch)
            except StoreUnavailableError as exc:
                self.stats.retries += 1
                self.stats.last_error = str(exc)
                if self._stopping:
                    logger.error("agl store unreachable at shutdown: %d spans lost", len(batch))
                    self.stats.dropped += len(batch)
                    break
                logger.warning("agl store unreachable, retrying in %.1f s: %s", self._backoff, exc)
                await asyncio.sleep(self._backoff)
                self._backoff = min(self._backoff * 2, self._max_backoff)
                continue
            except AglError as exc:
                self.stats.rejected += len(batch)
                self.stats.last_error = str(exc)
                logger.error("agl store refused %d spans: %s", len(batch), exc)
            else:
                self.stats.exported += outcome.stored
                self._backoff = 0.05
                if outcome.rejected:
                    self.stats.rejected += len(outcome.rejected)
                    self.stats.last_error = outcome.rejected[0].message
                    logger.error(
                        "agl store refused %d of %d spans (the rest are stored): %s",
                        len(outcome.rejected),
                        len(batch),
                        outcome.refusals(),
                    )
            break
        self._settle(len(batch))


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
