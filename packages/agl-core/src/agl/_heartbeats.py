"""A runner's heartbeats: one beat per running attempt each interval, refusals cancel the agent.

The interval is ``heartbeat_interval`` when given, else a third of the shortest
``unresponsive_seconds`` among the running rollouts, and at most 10 s. It is recomputed when a
claim starts, so a rollout with a short limit claimed by an idle runner gets its first beat
within a third of its limit, not the idle 10 s. A beat the store refuses (it already ended the
attempt: timed out, found unresponsive, cancelled) marks the attempt stale and cancels its agent.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping

from agl._errors import ConflictError, StoreUnavailableError
from agl._rollouts import Claim
from agl._runner_stats import RunnerStats
from agl.store._base import Store

__all__ = ["Heartbeats"]

logger = logging.getLogger("agl._runner")

IDLE_INTERVAL = 10.0
"""Seconds between beats when no running rollout asks for less."""


class Heartbeats:
    """Beats for the attempts in ``running`` (a runner's task -> claim map, read each beat).

    Args:
        store: Where the beats go.
        running: The running attempts, by the task running each.
        interval: Fixed seconds between beats; None to derive it from the rollouts' limits.
        stats: Counts the beats the store could not be reached for.
        on_stale: Called with the task of an attempt the store refused a beat for.
    """

    def __init__(
        self,
        store: Store,
        running: Mapping[asyncio.Task[None], Claim],
        interval: float | None,
        stats: RunnerStats,
        on_stale: Callable[[asyncio.Task[None]], None],
    ) -> None:
        self._store = store
        self._running = running
        self._fixed = interval
        self._stats = stats
        self._on_stale = on_stale
        self._claimed = asyncio.Event()

    def claimed(self) -> None:
        """A claim started: its limit may shorten the interval."""
        self._claimed.set()

    def interval(self) -> float:
        """Seconds until the next beat is due, after the last one ended."""
        if self._fixed is not None:
            return self._fixed
        limits = [
            claim.rollout.config.unresponsive_seconds
            for claim in self._running.values()
            if claim.rollout.config.unresponsive_seconds is not None
        ]
        return min([IDLE_INTERVAL, *(limit / 3 for limit in limits)])

    async def run(self) -> None:
        """Beat until cancelled."""
        loop = asyncio.get_running_loop()
        last = loop.time()
        while True:
            self._claimed.clear()
            wait = last + self.interval() - loop.time()
            if wait > 0:
                try:
                    await asyncio.wait_for(self._claimed.wait(), wait)
                except TimeoutError:
                    pass
                else:
                    continue  # a new claim: recompute when the next beat is due
            await self._beat()
            # The next beat is due an interval after this one ended, not after it started: a
            # beat held up by an unreachable store is not followed by another at once.
            last = loop.time()

    async def _beat(self) -> None:
        running = [(task, claim) for task, claim in self._running.items() if not task.done()]
        results = await asyncio.gather(
            *(
                self._store.update_attempt(c.rollout.rollout_id, c.attempt.attempt_id)
                for _, c in running
            ),
            return_exceptions=True,
        )
        for (task, claim), result in zip(running, results, strict=True):
            if isinstance(result, ConflictError):
                # as a refused report says it: whichever the store refuses first
                logger.info(
                    "attempt %s of %s was ended by the store: %s; cancelling the agent",
                    claim.attempt.attempt_id,
                    claim.rollout.rollout_id,
                    result,
                )
                self._on_stale(task)
            elif isinstance(result, StoreUnavailableError):
                self._stats.store_errors += 1
            elif isinstance(result, Exception):
                logger.warning("heartbeat for %s failed: %s", claim.attempt.attempt_id, result)
