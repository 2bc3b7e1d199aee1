"""A runner's heartbeats: one beat per running attempt each interval, from a thread of their own.

The beats do not wait for the runner's event loop: an agent that blocks it (``time.sleep``, a
synchronous client built or called inside an ``async def``, CPU-bound work) would otherwise stop
them, and the store would end its attempts as unresponsive while the process is alive and
working. So the beats go out from a daemon thread with an event loop of its own, which uses the
store the way the span sender does (every built-in store serves several event loops: the
memory and SQLite stores under their own locks, the HTTP client with a connection pool per
loop). The runner's claims are made on that thread too (:meth:`Heartbeats.dequeue`): a claim
the store answers while an agent holds the runner's loop is beaten for from the moment it
arrives, not from when the loop comes back, by which time the store may have given it up. An
attempt is beaten for until the runner's task for it ends (:meth:`Heartbeats.discard`).

The interval is ``heartbeat_interval`` when given, else a third of the shortest
``unresponsive_seconds`` among the running rollouts, and at most 10 s. It is recomputed when a
claim starts, so a rollout with a short limit claimed by an idle runner gets its first beat
within a third of its limit, not the idle 10 s. A beat the store refuses (it already ended the
attempt: timed out, found unresponsive, cancelled) marks the attempt stale and cancels its
agent, on the runner's loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable

from agl._errors import ConflictError, StoreUnavailableError
from agl._rollouts import Claim
from agl._run._runner_stats import RunnerStats
from agl.store._base import Store

__all__ = ["Heartbeats"]

logger = logging.getLogger("agl._run._runner")

IDLE_INTERVAL = 10.0
"""Seconds between beats when no running rollout asks for less."""

_STOP_SECONDS = 5.0
"""Longest wait for the heartbeat thread to end once told to stop (an in-flight beat is
cancelled, so it ends at once unless the store's client holds the thread)."""


class Heartbeats:
    """Beats for a runner's running attempts, sent from a thread of their own.

    Args:
        store: Where the beats go (used from the heartbeat thread's own event loop).
        interval: Fixed seconds between beats; None to derive it from the rollouts' limits.
        stats: Counts the beats the store could not be reached for (on the runner's loop).
        on_stale: Called on the runner's loop with the id of an attempt the store refused a
            beat for.
    """

    def __init__(
        self,
        store: Store,
        interval: float | None,
        stats: RunnerStats,
        on_stale: Callable[[str], None],
    ) -> None:
        self._store = store
        self._fixed = interval
        self._stats = stats
        self._on_stale = on_stale
        self._lock = threading.Lock()
        self._running: dict[str, Claim] = {}  # by attempt id
        self._owner: asyncio.AbstractEventLoop | None = None  # the runner's loop
        self._loop: asyncio.AbstractEventLoop | None = None  # the heartbeat thread's
        self._wake = asyncio.Event()  # touched on the heartbeat loop only
        self._stopping = False  # likewise
        self._beating: asyncio.Future[None] | None = None  # likewise
        self._thread: threading.Thread | None = None

    # --- the runner's side (any thread) -----------------------------------------------------

    def start(self) -> None:
        """Start beating; call it on the runner's event loop."""
        self._owner = asyncio.get_running_loop()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="agl-heartbeats", daemon=True)
        self._thread.start()

    async def dequeue(
        self, limit: int, worker_id: str, wait: float, request_id: str | None = None
    ) -> list[Claim]:
        """Claim up to ``limit`` rollouts (:meth:`~agl.store.Store.dequeue_rollouts`) on the
        heartbeat thread, and beat for each claim from the moment it arrives."""
        assert self._loop is not None, "start() first"

        async def claim() -> list[Claim]:
            claims = await self._store.dequeue_rollouts(
                limit=limit, worker_id=worker_id, wait=wait, request_id=request_id
            )
            for one in claims:
                self.add(one)
            return claims

        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(claim(), self._loop))

    def add(self, claim: Claim) -> None:
        """Beat for ``claim`` until :meth:`discard`; its limit may shorten the interval."""
        with self._lock:
            self._running[claim.attempt.attempt_id] = claim
        self._poke(self._wake.set)

    def discard(self, attempt_id: str) -> None:
        """Stop beating for an attempt."""
        with self._lock:
            self._running.pop(attempt_id, None)

    def attempts(self) -> dict[str, Claim]:
        """The attempts beaten for now, by attempt id."""
        with self._lock:
            return dict(self._running)

    def interval(self) -> float:
        """Seconds until the next beat is due, after the last one ended."""
        if self._fixed is not None:
            return self._fixed
        limits = [
            claim.rollout.config.unresponsive_seconds
            for claim in self.attempts().values()
            if claim.rollout.config.unresponsive_seconds is not None
        ]
        return min([IDLE_INTERVAL, *(limit / 3 for limit in limits)])

    def close(self) -> None:
        """Stop beating and end the thread (an in-flight beat is cancelled). Blocks briefly."""
        self._poke(self._stop)
        if self._thread is not None:
            self._thread.join(_STOP_SECONDS)
            if self._thread.is_alive():
                logger.warning("the heartbeat thread did not end within %.0f s", _STOP_SECONDS)

    def _poke(self, callback: Callable[[], object]) -> None:
        if self._loop is None:
            return  # not started: the thread reads the attempts when it starts
        with contextlib.suppress(RuntimeError):  # the heartbeat loop has closed
            self._loop.call_soon_threadsafe(callback)

    # --- the heartbeat thread ---------------------------------------------------------------

    def _run(self) -> None:
        loop = self._loop
        assert loop is not None
        try:
            loop.run_until_complete(self._beat_until_stopped())
        finally:
            release = getattr(self._store, "release_loop", None)  # a ClosingStore's
            if release is not None:
                with contextlib.suppress(Exception):  # the store may be closed already
                    loop.run_until_complete(release())
            loop.close()

    def _stop(self) -> None:
        self._stopping = True
        self._wake.set()
        if self._beating is not None:
            self._beating.cancel()

    async def _beat_until_stopped(self) -> None:
        loop = asyncio.get_running_loop()
        last = loop.time()
        while not self._stopping:
            self._wake.clear()
            wait = last + self.interval() - loop.time()
            if wait > 0:
                # woken early: a new claim (recompute when the next beat is due), or a stop
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), wait)
                continue
            self._beating = asyncio.ensure_future(self._beat())
            try:
                await self._beating
            except asyncio.CancelledError:
                return  # stopped mid-beat
            finally:
                self._beating = None
            # The next beat is due an interval after this one ended, not after it started: a
            # beat held up by an unreachable store is not followed by another at once.
            last = loop.time()

    async def _beat(self) -> None:
        running = list(self.attempts().values())
        results = await asyncio.gather(
            *(
                self._store.update_attempt(c.rollout.rollout_id, c.attempt.attempt_id)
                for c in running
            ),
            return_exceptions=True,
        )
        for claim, result in zip(running, results, strict=True):
            if isinstance(result, ConflictError):
                # as a refused report says it: whichever the store refuses first
                logger.info(
                    "attempt %s of %s was ended by the store: %s; cancelling the agent",
                    claim.attempt.attempt_id,
                    claim.rollout.rollout_id,
                    result,
                )
                self.discard(claim.attempt.attempt_id)
                self._to_runner(self._on_stale, claim.attempt.attempt_id)
            elif isinstance(result, StoreUnavailableError):
                self._to_runner(self._count_store_error)
            elif isinstance(result, Exception):
                logger.warning("heartbeat for %s failed: %s", claim.attempt.attempt_id, result)

    def _to_runner(self, callback: Callable[..., None], *args: object) -> None:
        assert self._owner is not None
        with contextlib.suppress(RuntimeError):  # the runner's loop has closed
            self._owner.call_soon_threadsafe(callback, *args)

    def _count_store_error(self) -> None:  # on the runner's loop, which owns the stats
        self._stats.store_errors += 1
