"""One claimed attempt, as a :class:`~agl.Runner` runs it: reported ``running``, its resources
fetched, the agent called in the attempt's trace (sync agents on a worker thread) under the
rollout's timeout, its result or exception recorded, the gateways flushed, and the outcome
reported once everything is in the store.

:class:`Attempts` is the part of the runner that does this; the runner's own module holds the
claim loop and stopping. They share the runner's state: which attempts a stop released
(``_released``), which may still be cancelled (``_cancellable``: started and not yet reporting
how they ended), and which the store ended first (``_stale``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from agl._errors import ConflictError, StoreUnavailableError
from agl._resources import ResourcesUpdate
from agl._rollouts import AttemptStatus, Claim
from agl._run._agent import AttemptInputs, LitAgent, normalize_result
from agl._run._runner_resources import RunnerResources
from agl._run._runner_stats import RunnerStats, failure_reason
from agl.store._base import Store

if TYPE_CHECKING:
    from agl.gateway._flusher import GatewayFlusher
    from agl.plugins import PluginManager
    from agl.tracing import Tracer

__all__ = ["Attempts"]

logger = logging.getLogger("agl._run._runner")
T = TypeVar("T")


class _Stale(Exception):
    """The store already ended this attempt: stop working on it and report nothing."""


class Attempts:
    """Run claimed attempts, one task each (the part of :class:`~agl.Runner` that does)."""

    agent: LitAgent
    store: Store | None
    stats: RunnerStats
    plugins: PluginManager
    _tracer: Tracer | None
    _observed: bool
    _resources: RunnerResources
    _gateways: GatewayFlusher
    _loop: asyncio.AbstractEventLoop | None
    _executor: concurrent.futures.ThreadPoolExecutor | None
    _released: set[asyncio.Task[None]]
    _cancellable: set[asyncio.Task[None]]
    _stale: set[asyncio.Task[None]]

    async def _run_attempt(self, claim: Claim) -> None:
        task = asyncio.current_task()
        assert task is not None
        if task in self._released:  # the runner stopped before this claim's turn came
            await self._conclude(
                claim.rollout.rollout_id,
                claim.attempt.attempt_id,
                status=AttemptStatus.RELEASED,
                reason="the runner stopped before the attempt started",
            )
            return
        self._cancellable.add(task)
        if not self._observed:
            await self._attempt(claim)
            return
        hook = self.plugins.hook
        hook.agl_rollout_start(rollout=claim.rollout, attempt=claim.attempt)
        status: AttemptStatus | None = None
        try:
            status = await self._attempt(claim)
        finally:
            hook.agl_rollout_end(rollout=claim.rollout, attempt=claim.attempt, status=status)

    async def _attempt(self, claim: Claim) -> AttemptStatus | None:
        """Run one attempt; return the status reported, None if the store had ended it."""
        assert self.store is not None
        assert self._tracer is not None
        rollout, attempt = claim.rollout, claim.attempt
        ids = (rollout.rollout_id, attempt.attempt_id)
        task = asyncio.current_task()
        assert task is not None
        status, reason = AttemptStatus.SUCCEEDED, None
        flushes: list[str] = []  # the gateways the agent was given
        try:
            await self._report(*ids, status=AttemptStatus.RUNNING)
            timeout = rollout.config.timeout_seconds
            async with self._tracer.rollout(*ids, name=f"agl.rollout {self.agent.name}"):
                try:
                    async with asyncio.timeout(timeout):
                        resources, flushes = await self._resources.for_attempt(
                            rollout.resources_id, *ids
                        )
                        inputs = AttemptInputs(rollout.input, rollout, attempt, resources)
                        result = await self._call_agent(inputs)
                    rewards = normalize_result(result, self.agent.primary_reward)
                    if rewards is not None:
                        from agl._run._emitters import emit_reward

                        emit_reward(rewards[0], primary=rewards[1])
                except TimeoutError:
                    if task.cancelling():
                        raise  # released or stale, not the agent's timeout
                    status = AttemptStatus.TIMEOUT
                    reason = f"ran longer than timeout_seconds={timeout:g} and was cancelled"
                    from agl._run._emitters import emit_exception

                    emit_exception(TimeoutError(reason))
                except (_Stale, asyncio.CancelledError):
                    raise
                except Exception as exc:
                    from agl._run._emitters import emit_exception

                    emit_exception(exc)
                    status = AttemptStatus.FAILED
                    reason = failure_reason(exc)
            # The agent's own spans are in the store now; the gateways' records of its calls
            # must be too before anyone is told the attempt ended.
            self.stats.gateway_flush_failures += await self._gateways.flush(flushes)
        except asyncio.CancelledError:
            if task in self._stale:
                self.stats.abandoned += 1
                return None
            if task not in self._released:
                raise
            status, reason = AttemptStatus.RELEASED, "the runner stopped before the attempt ended"
            task.uncancel()
        except _Stale:
            self.stats.abandoned += 1
            return None
        self._cancellable.discard(task)  # from here on, a release lets the report go out
        return await self._conclude(*ids, status=status, reason=reason)

    async def _conclude(
        self, rollout_id: str, attempt_id: str, *, status: AttemptStatus, reason: str | None
    ) -> AttemptStatus | None:
        """Report an attempt's outcome and count it; None if the store had already ended it."""
        try:
            await self._report(rollout_id, attempt_id, status=status, reason=reason)
        except _Stale:
            self.stats.abandoned += 1
            return None
        self.stats.count(status, reason)
        return status

    async def _call_agent(self, inputs: AttemptInputs) -> Any:
        call = self.agent.bind(inputs)
        function = getattr(call, "func", call)
        if inspect.iscoroutinefunction(function):
            return await call()
        assert self._loop is not None
        context = contextvars.copy_context()  # carries the trace binding into the thread
        result = await self._loop.run_in_executor(self._executor, context.run, call)
        if inspect.isawaitable(result):  # a sync function that returned a coroutine
            return await result
        return result

    async def _get_resources(self, resources_id: str | None) -> ResourcesUpdate | None:
        assert self.store is not None
        return await self._patiently(self.store.get_resources, resources_id)

    async def _patiently(self, call: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Call the store, waiting out outages (the attempt's timeout still bounds the wait)."""
        delay = 0.2
        while True:
            try:
                return await call(*args)
            except StoreUnavailableError as exc:
                self.stats.store_errors += 1
                logger.warning("store unreachable, retrying in %.1f s: %s", delay, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    async def _report(
        self, rollout_id: str, attempt_id: str, *, status: AttemptStatus, reason: str | None = None
    ) -> None:
        """Report a status (a final one waits out store outages); raise _Stale if it moved on."""
        assert self.store is not None
        try:
            if status.is_final:
                await self._patiently(
                    self.store.update_attempt, rollout_id, attempt_id, status, True, reason
                )
                return
            try:
                await self.store.update_attempt(
                    rollout_id, attempt_id, status=status, reason=reason
                )
            except StoreUnavailableError as exc:
                # A 'running' report can be skipped; the heartbeat or the result follows.
                self.stats.store_errors += 1
                logger.warning("could not report %s for %s: %s", status.value, attempt_id, exc)
        except ConflictError as exc:
            logger.info("attempt %s of %s was ended by the store: %s", attempt_id, rollout_id, exc)
            raise _Stale from exc
