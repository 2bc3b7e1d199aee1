"""The runner: claims rollouts from a store and runs the agent on them, many at once.

::

    runner = agl.Runner(agent, "http://trainer-host:4747", concurrency=64)
    await runner.run()          # until stopped (SIGINT/SIGTERM, stop(), or max_rollouts)

One runner is one asyncio loop running up to ``concurrency`` rollouts at a time; start as many
runner processes on as many machines as you like (``agl runner --store URL --agent mod:fn``):
they share nothing but the store, which hands each rollout to one of them.

For each claimed attempt the runner (:mod:`agl._run._attempts`):

1. reports it ``running`` and fetches the resources the rollout names (LLM endpoints get the
   rollout and attempt filled in, see :meth:`agl.LLM.for_attempt`);
2. runs the agent inside a trace bound to the attempt (:meth:`agl.Tracer.rollout`), sync
   agents on a worker thread;
3. records what the agent returned as a reward span, or its exception as an exception span;
4. flushes the attempt's spans to the store, and only then reports the outcome, so whoever sees
   the rollout finished also sees all of its spans.

Failures never take the runner down; each becomes a final attempt status with a reason:
``failed`` (the agent raised, could not be called as written, or returned something that is
not a reward), ``timeout`` (the rollout's ``timeout_seconds`` passed: the agent is cancelled).
Retries are the store's business (``RolloutConfig.max_attempts`` / ``retry_on``). Heartbeats
go out for every running attempt, from a thread of their own: an agent that blocks the event
loop is slow, not dead (:mod:`agl._run._heartbeats`).
When a beat is refused because the store already
ended the attempt (timed out, found unresponsive, cancelled), the agent is cancelled and its
result is not reported. An agent that holds the loop longer than
:data:`~agl._run._loop_watch.BLOCKED_LOOP_SECONDS` (1 s) gets one warning naming it, its rollouts,
the line it blocked at and for how long (:mod:`agl._run._loop_watch`).

Stopping (SIGINT/SIGTERM, or :meth:`Runner.stop`): the runner stops claiming, lets running
attempts finish for up to ``drain_timeout`` seconds, then cancels the rest and reports them
``released``, which puts their rollouts back in the queue for another runner without using up
a try. Claims it holds but has not started (a claim answered while it was stopping) are
released without running the agent. A second signal skips the drain.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Sequence
from typing import Any

from agl._errors import InvalidInputError, StoreUnavailableError
from agl._ids import check_id
from agl._rollouts import Claim, new_id
from agl._run._agent import LitAgent, as_agent
from agl._run._attempts import Attempts
from agl._run._heartbeats import Heartbeats
from agl._run._loop_watch import LoopWatch
from agl._run._runner_resources import RunnerResources
from agl._run._runner_stats import RunnerStats
from agl._secrets import env_secret
from agl.plugins import PluginManager
from agl.store._base import Store

__all__ = ["Runner", "RunnerStats", "auto_instrumentation", "enable_auto_instrumentation"]

logger = logging.getLogger(__name__)


_AUTO_INSTRUMENT = False


def enable_auto_instrumentation() -> None:
    """Make runners created from now on in this process trace every installed library.

    What ``import agl.auto`` does. A runner's ``instrument=[...]`` adds to these; one made
    with ``auto_instrument=False`` traces only its ``instrument``.
    """
    global _AUTO_INSTRUMENT  # noqa: PLW0603 - a process-wide switch, set once
    _AUTO_INSTRUMENT = True


def auto_instrumentation() -> bool:
    """Whether ``import agl.auto`` (:func:`enable_auto_instrumentation`) has run."""
    return _AUTO_INSTRUMENT


class Runner(Attempts):
    """Run an agent on the rollouts of a store.

    Args:
        agent: An ``@agl.rollout`` function, a :class:`~agl.LitAgent`, a plain function, or a
            ``"package.module:function"`` string.
        store: A store, or its URL (then the runner opens and closes it).
        concurrency: Rollouts run at once by this runner.
        worker_id: The runner's name in the store, an id (:mod:`agl._ids`: 1 to 256
            characters, no control characters; default: host, pid and a random suffix).
        heartbeat_interval: Seconds between heartbeats; by default a third of the shortest
            ``unresponsive_seconds`` among running rollouts, and at most 10 s.
        poll_wait: Seconds one long-poll for new rollouts waits; also the longest a stop waits
            for a claim in progress.
        drain_timeout: On stop, seconds to let running attempts finish before releasing them.
        max_rollouts: Stop after claiming this many (for tests and one-off jobs).
        tracer: A :class:`~agl.Tracer` to use (default: one of the runner's own).
        handle_signals: Stop on SIGINT/SIGTERM (only when running in the main thread).
        instrument: Libraries to trace while running, by instrumentor name: ``"openai"``
            records every call the ``openai`` client makes as an LLM span of the rollout it was
            made in; plugins add more (``agl plugins`` lists them).
        auto_instrument: Once ``import agl.auto`` has run in this process (an agent module
            that imports it is traced by any runner that loads it), also trace every installed
            instrumentor (``instrument`` adds to them). False: only ``instrument``.
            :attr:`instrument` holds the ones in use.
        gateway_token: The token of gateways started with one: agents get it as
            :attr:`agl.LLM.api_key` of every LLM served by a gateway, and the runner sends it
            when it flushes them. Default: the ``AGL_GATEWAY_TOKEN`` environment variable, or
            the file ``AGL_GATEWAY_TOKEN_FILE`` names.
        gateway_flush_timeout: Longest wait, in seconds, for a gateway to confirm that an
            attempt's calls are in the store before the attempt is reported.
        plugins: The plugins whose names the runner resolves (instrumentors, a store URL's
            scheme, resource types) and whose rollout hooks it fires (default: a
            :class:`~agl.plugins.PluginManager` of the installed ones).

    Plugins implementing ``agl_rollout_start`` / ``agl_rollout_end`` (see :mod:`agl.hookspecs`)
    are called before and after each attempt.
    """

    def __init__(
        self,
        agent: Any,
        store: Store | str,
        *,
        concurrency: int = 16,
        worker_id: str | None = None,
        heartbeat_interval: float | None = None,
        poll_wait: float = 1.0,
        drain_timeout: float = 30.0,
        max_rollouts: int | None = None,
        tracer: Any = None,
        handle_signals: bool = True,
        instrument: Sequence[str] | None = None,
        auto_instrument: bool = True,
        gateway_token: str | None = None,
        gateway_flush_timeout: float = 30.0,
        plugins: PluginManager | None = None,
    ) -> None:
        if concurrency < 1:
            raise InvalidInputError(f"concurrency must be at least 1, got {concurrency}")
        self.agent: LitAgent = as_agent(agent)
        self._store_arg = store
        self.store: Store | None = None if isinstance(store, str) else store
        self.concurrency = concurrency
        self.worker_id = (
            f"{socket.gethostname()}-{os.getpid()}-{os.urandom(2).hex()}"
            if worker_id is None
            else check_id(worker_id, "worker_id")  # refused here, not at the first claim
        )
        self.heartbeat_interval = heartbeat_interval
        self.poll_wait = poll_wait
        self.drain_timeout = drain_timeout
        self.max_rollouts = max_rollouts
        self.handle_signals = handle_signals
        self.plugins = plugins if plugins is not None else PluginManager()
        known = self.plugins.provided("agl_instrumentors")
        unknown = sorted(set(instrument or ()) - set(known))
        if unknown:
            raise InvalidInputError(
                f"cannot instrument {unknown}; known: {sorted(known)} "
                "(plugins add more: `agl plugins` lists them)",
                field="instrument",
            )
        automatic = sorted(known) if auto_instrument and auto_instrumentation() else []
        self.instrument = list(dict.fromkeys([*(instrument or ()), *automatic]))
        """The instrumentors in use: ``instrument``, then those ``import agl.auto`` adds."""
        self._observed = self.plugins.implements("agl_rollout_start", "agl_rollout_end")
        self.stats = RunnerStats()
        self._tracer = tracer
        self._owns_tracer = tracer is None
        self._running: dict[asyncio.Task[None], Claim] = {}
        self._released: set[asyncio.Task[None]] = set()
        # Attempts a release cancels: started, and not yet reporting how they ended.
        self._cancellable: set[asyncio.Task[None]] = set()
        self._stale: set[asyncio.Task[None]] = set()
        self._stopping: asyncio.Event | None = None
        self._drain = True
        self._loop: asyncio.AbstractEventLoop | None = None
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        from agl.gateway._flusher import GatewayFlusher

        token = gateway_token if gateway_token is not None else env_secret("AGL_GATEWAY_TOKEN")
        self._gateways = GatewayFlusher(token, gateway_flush_timeout)
        self._resources = RunnerResources(self._get_resources, self.plugins, self._gateways.token)

    # --- control ----------------------------------------------------------------------------

    def stop(self, drain: bool = True) -> None:
        """Stop claiming; finish (``drain``) or release the running attempts. Thread-safe."""
        loop, event = self._loop, self._stopping
        if loop is None or event is None:
            return

        def request() -> None:
            if event.is_set():
                self._drain = False  # asked twice: stop draining
            else:
                self._drain = drain
            event.set()

        with contextlib.suppress(RuntimeError):  # the loop has already closed
            loop.call_soon_threadsafe(request)

    async def run(self) -> RunnerStats:
        """Run until stopped; return what was done."""
        from agl.tracing import Tracer

        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        owns_store = self.store is None
        if self.store is None:
            assert isinstance(self._store_arg, str)
            self.store = self.plugins.open_store(self._store_arg)
        if self._tracer is None:
            self._tracer = Tracer(self.store)
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=self.concurrency, thread_name_prefix="agl-agent"
        )
        instrumentations = [
            self.plugins.create_instrumentor(name, self._tracer) for name in self.instrument
        ]
        for instrumentation in instrumentations:
            instrumentation.instrument()
        logger.info("runner %s traces: %s", self.worker_id, ", ".join(self.instrument) or "nothing")
        signals = self._install_signals()
        self._heartbeats = Heartbeats(
            self.store, self.heartbeat_interval, self.stats, self._abandon_attempt
        )
        self._heartbeats.start()
        # dict.get is one step under the GIL: the watch thread may call it while tasks come and go
        watch = LoopWatch(self.agent.name, self._running.get)
        watch.start()
        try:
            await self._claim_loop()
            await self._wind_down()
        finally:
            watch.close()
            await asyncio.to_thread(self._heartbeats.close)
            for sig in signals:
                self._loop.remove_signal_handler(sig)
            # Threads of sync agents that were timed out may still run: do not wait for them.
            self._executor.shutdown(wait=False, cancel_futures=True)
            for instrumentation in instrumentations:
                instrumentation.uninstrument()
            await self._gateways.aclose()
            if self._owns_tracer:
                await asyncio.to_thread(self._tracer.close)
            if owns_store:
                await self.store.close()
        return self.stats

    def run_sync(self) -> RunnerStats:
        """:meth:`run` in a new event loop (for scripts and the CLI)."""
        return asyncio.run(self.run())

    # --- the claim loop ---------------------------------------------------------------------

    async def _claim_loop(self) -> None:
        assert self.store is not None
        assert self._stopping is not None
        backoff = 0.1
        request_id: str | None = None  # kept until answered: a repeat gets the same claims
        while not self._stopping.is_set():
            if self.max_rollouts is not None and self.stats.claimed >= self.max_rollouts:
                break
            free = self.concurrency - len(self._running)
            if self.max_rollouts is not None:
                free = min(free, self.max_rollouts - self.stats.claimed)
            if free <= 0:
                await self._wait_for_slot()
                continue
            try:
                # Not cancelled on stop: a claim the store made but the runner never saw would
                # hang in 'preparing'. A stop waits for it (at most poll_wait), then releases.
                # Claimed on the heartbeat thread, which beats for each claim from its arrival.
                request_id = request_id or new_id("rq")
                claims = await self._heartbeats.dequeue(
                    limit=free, worker_id=self.worker_id, wait=self.poll_wait, request_id=request_id
                )
            except StoreUnavailableError as exc:
                self.stats.store_errors += 1
                logger.warning("store unreachable, retrying in %.1f s: %s", backoff, exc)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            backoff, request_id = 0.1, None
            for claim in claims:
                self.stats.claimed += 1
                task = asyncio.create_task(
                    self._run_attempt(claim), name=f"agl-rollout-{claim.rollout.rollout_id}"
                )
                self._running[task] = claim
                task.add_done_callback(self._finished)
                if self._stopping.is_set():
                    self._release(task)

    async def _wait_for_slot(self) -> None:
        assert self._stopping is not None
        stop = asyncio.ensure_future(self._stopping.wait())
        try:
            await asyncio.wait([*self._running, stop], return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()

    def _finished(self, task: asyncio.Task[None]) -> None:
        claim = self._running.pop(task, None)
        if claim is not None:
            self._heartbeats.discard(claim.attempt.attempt_id)
        self._cancellable.discard(task)
        if not task.cancelled() and task.exception() is not None:  # a bug in the runner itself
            logger.error("agl runner task failed", exc_info=task.exception())

    async def _wind_down(self) -> None:
        if not self._running:
            return
        if self._drain and self.drain_timeout > 0:
            assert self._stopping is not None
            logger.info(
                "stopping: waiting up to %.0f s for %d running rollout(s)",
                self.drain_timeout,
                len(self._running),
            )
            deadline = time.monotonic() + self.drain_timeout
            while self._running and self._drain:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                await asyncio.wait(list(self._running), timeout=min(remaining, 0.2))
        for task in list(self._running):
            self._release(task)
        if self._running:
            await asyncio.wait(list(self._running))

    def _abandon_attempt(self, attempt_id: str) -> None:
        """The store ended this attempt (it refused a beat): cancel its agent, report nothing.

        An attempt already reporting its outcome is left alone: the beat may have been refused
        because that very report arrived first, and a cancel could stop the report on its way
        (the attempt left 'running'). If the store had ended it, the report says so (stale)."""
        for task, claim in list(self._running.items()):
            if claim.attempt.attempt_id == attempt_id and task in self._cancellable:
                self._stale.add(task)
                task.cancel()

    def _release(self, task: asyncio.Task[None]) -> None:
        if task not in self._released:
            self._released.add(task)
            # A task cancelled before its first step never runs a line of its coroutine, so it
            # could not report the release: one not started yet reports it when it starts. One
            # already reporting its outcome is left to finish the report, which a cancel could
            # stop before it reached the store (leaving the attempt 'running').
            if task in self._cancellable:
                task.cancel()

    # --- signals ---------------------------------------------------------------------------

    def _install_signals(self) -> list[int]:
        if not self.handle_signals or threading.current_thread() is not threading.main_thread():
            return []
        assert self._loop is not None
        installed: list[int] = []
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                self._loop.add_signal_handler(sig, self._on_signal, sig)
            except (NotImplementedError, RuntimeError):  # pragma: no cover - non-Unix loops
                continue
            installed.append(sig)
        return installed

    def _on_signal(self, sig: int) -> None:
        assert self._stopping is not None
        if self._stopping.is_set():
            logger.warning("second %s: releasing running rollouts now", signal.Signals(sig).name)
        else:
            logger.log(
                logging.WARNING if self._running else logging.INFO,
                "%s: no new rollouts; finishing %d running (up to %.0f s; again to release)",
                signal.Signals(sig).name,
                len(self._running),
                self.drain_timeout,
            )
        self.stop(drain=True)
