"""Send finished spans to a store in batches, from a background thread.

The agent's code never waits for the store: a finished span is put in a bounded buffer and a
sender thread ships batches with :meth:`~agl.store.Store.add_spans`. While the store cannot take
spans (it is unreachable, or its disk is full: a :class:`~agl.StoreUnavailableError`, which
includes :class:`~agl.StoreFullError`), the sender keeps them, and those that arrive meanwhile,
and retries with backoff; once the store takes spans again, everything kept is stored, oldest
first. What is kept is bounded by its encoded size (``max_buffer_bytes``, 64 MiB by default,
``AGL_SPAN_BUFFER_MB`` in the environment: :mod:`agl.tracing._kept`); past it the oldest spans
are dropped, with one warning per outage naming how many, and one more when the outage ends
saying how many were lost in all. The spans kept, and those not yet taken by the sender thread,
are each bounded by count too (``max_buffer``). Every drop is counted in :attr:`SpanSender.stats`. A
span the store refuses as invalid (one naming an unknown rollout, say) is dropped, logged with
its reason and counted as rejected, never retried forever; the good spans sent with it are stored
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
from agl.tracing._kept import BUFFER_ENV, KeptSpans, buffer_bound, size_text

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
        dropped: Spans lost because a buffer was full (or the store was away at shutdown).
        rejected: Spans the store refused as invalid.
        retries: Sends retried because the store could not take spans (unreachable, full).
        kept: Spans held right now for a retry, because the store could not take them yet.
        last_error: The last failure, for the record.
    """

    queued: int = 0
    exported: int = 0
    dropped: int = 0
    rejected: int = 0
    retries: int = 0
    kept: int = 0
    last_error: str | None = None


class SpanSender:
    """A background thread that ships spans to a store in batches.

    Args:
        store: Where spans go; it is used from the sender's own event loop.
        max_batch: Spans per ``add_spans`` call at most.
        max_buffer: Spans waiting for the sender thread at most, and spans kept for a retry
            at most; beyond this the oldest go.
        max_buffer_bytes: Bytes of encoded spans kept while the store cannot take them
            (unreachable, disk full); beyond this the oldest go. None: ``AGL_SPAN_BUFFER_MB``
            (MiB) from the environment, else 64 MiB.
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
        max_buffer_bytes: int | None = None,
        delay: float = 0.1,
        max_backoff: float = 5.0,
    ) -> None:
        self._store = store
        self._kept = KeptSpans(buffer_bound(max_buffer_bytes), max_buffer)
        self._outage_dropped = (0, 0)  # spans and bytes dropped from _kept in this outage
        self._max_batch = max_batch
        self._max_buffer = max_buffer
        self._delay = delay
        self._max_backoff = max_backoff
        self._buffer: collections.deque[SpanSource] = collections.deque()
        self._lock = threading.Condition()
        self._first_at = 0.0  # when the oldest buffered span arrived (monotonic seconds)
        self._enqueued = 0  # spans ever put in the buffer, dropped ones included
        self._settled = 0  # spans ever taken out: sent, rejected or dropped
        self._taken = 0  # spans the sender thread has taken and not yet settled
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
                except Exception as exc:  # never let a failure end the thread
                    with self._lock:
                        lost = self._taken
                    logger.exception("agl could not send %d span(s); they are dropped", lost)
                    self._kept.clear()
                    self.stats.kept, self._outage_dropped = 0, (0, 0)
                    self.stats.rejected += lost
                    self.stats.last_error = f"{type(exc).__name__}: {exc}"
                    self._settle(lost)
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
            self._taken += count
            return [self._buffer.popleft() for _ in range(count)]

    def _settle(self, count: int) -> None:
        with self._lock:
            self._settled += count
            self._taken -= count
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

    def _take_all(self) -> list[SpanSource]:
        with self._lock:
            taken = list(self._buffer)
            self._buffer.clear()
            self._taken += len(taken)
            return taken

    async def _send(self, batch: list[Span]) -> None:
        """Send one batch; while the store cannot take spans, keep them (and what arrives
        meanwhile) and retry, until everything kept is stored; settle each span once."""
        kept = self._kept
        while True:
            try:
                outcome = await add_spans_keeping_good(self._store, batch)
            except StoreUnavailableError as exc:  # unreachable, or its disk is full
                if not kept:  # the outage begins: from now on, the batch is the oldest kept
                    self._keep(batch, exc)
                    logger.warning(
                        "agl store %s cannot take spans now; keeping them (up to %s) and "
                        "retrying: %s",
                        self._store.url,
                        size_text(kept.max_bytes),
                        exc,
                    )
                self.stats.retries += 1
                self.stats.last_error = str(exc)
                if self._stopping:
                    lost = kept.clear()
                    self.stats.kept = 0
                    logger.error(
                        "agl store %s cannot take spans at shutdown: %d span(s) lost: %s",
                        self._store.url,
                        lost,
                        exc,
                    )
                    self.stats.dropped += lost
                    self._settle(lost)
                    return
                logger.debug("agl store cannot take spans, retrying in %.1f s", self._backoff)
                await asyncio.sleep(self._backoff)
                self._backoff = min(self._backoff * 2, self._max_backoff)
                self._keep(self._build(self._take_all()), exc)
                batch = kept.oldest(self._max_batch)
                if not batch:  # all dropped over the bound, nothing arrived since
                    self._end_outage()
                    return
                continue
            except AglError as exc:
                self.stats.rejected += len(batch)
                self.stats.last_error = str(exc)
                logger.error("agl store refused %d spans: %s", len(batch), exc)
            except Exception as exc:  # never let one batch end the thread
                logger.exception("agl could not send %d span(s); they are dropped", len(batch))
                self.stats.rejected += len(batch)
                self.stats.last_error = f"{type(exc).__name__}: {exc}"
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
            if not kept:
                self._settle(len(batch))
                return
            kept.remove_oldest(len(batch))  # the batch was the oldest kept
            self.stats.kept = len(kept)
            self._settle(len(batch))
            if not kept:
                self._end_outage()
                return
            batch = kept.oldest(self._max_batch)

    def _keep(self, spans: list[Span], exc: AglError) -> None:
        """Keep ``spans`` for a retry; drop the oldest kept beyond the bound, warning once."""
        dropped, dropped_bytes = self._kept.add(spans)
        self.stats.kept = len(self._kept)
        if not dropped:
            return
        first = self._outage_dropped == (0, 0)
        self._outage_dropped = (
            self._outage_dropped[0] + dropped,
            self._outage_dropped[1] + dropped_bytes,
        )
        self.stats.dropped += dropped
        self._settle(dropped)
        if first:
            logger.warning(
                "agl span buffer is full (%s or %d spans the store %s could not take: %s): "
                "the oldest are dropped, %d span(s) (%s) so far; raise max_buffer_bytes or "
                "%s, or bring the store back",
                size_text(self._kept.max_bytes),
                self._kept.max_count,
                self._store.url,
                exc,
                self._outage_dropped[0],
                size_text(self._outage_dropped[1]),
                BUFFER_ENV,
            )

    def _end_outage(self) -> None:
        dropped, dropped_bytes = self._outage_dropped
        self._outage_dropped = (0, 0)
        self.stats.kept = len(self._kept)
        if dropped:
            logger.warning(
                "agl store %s takes spans again; %d span(s) (%s) were dropped while it could "
                "not, the rest are stored",
                self._store.url,
                dropped,
                size_text(dropped_bytes),
            )
        else:
            logger.info("agl store %s takes spans again; all kept spans stored", self._store.url)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
