"""The runners of a :class:`~agl.Trainer` run: one in the trainer's process, or processes.

With one runner, it runs as a task on the trainer's event loop and shares the trainer's store
and plugin manager. With more, each is a spawned process that joins through a store server
(started here on loopback, with a fresh token, when the store is not one already); a process
that dies is noticed by :meth:`RunnerPool.check`, and every process gets SIGTERM (then SIGKILL)
when the run ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import secrets
from typing import Any

from agl._errors import AglError
from agl._run._agent import LitAgent
from agl.plugins import PluginManager
from agl.store._base import Store
from agl.store._http import starting_at

__all__ = ["RunnerPool"]


class RunnerPool:
    """The run's runners: one in this process, or processes talking to a store server."""

    def __init__(
        self,
        agent: LitAgent,
        store: Store,
        count: int,
        concurrency: int,
        instrument: list[str] | None,
        plugins: PluginManager,
    ) -> None:
        self.agent = agent
        self.instrument = instrument
        self.plugins = plugins
        self.store = store
        self.count = count
        self.concurrency = concurrency
        self._task: asyncio.Task[Any] | None = None
        self._runner: Any = None
        self._server: Any = None
        self._processes: list[multiprocessing.process.BaseProcess] = []

    async def start(self) -> None:
        """Start the runner task, or the store server and the runner processes."""
        from agl._run._runner import Runner

        if self.count == 1:
            self._runner = Runner(
                self.agent,
                self.store,
                concurrency=self.concurrency,
                handle_signals=False,
                instrument=self.instrument,
                plugins=self.plugins,
                # An in-process store answers a poll for nothing at no cost; short polls let
                # the run end as soon as the algorithm does (a stop waits out the poll).
                poll_wait=0.2,
            )
            self._task = asyncio.create_task(self._runner.run(), name="agl-runner")
            return
        url, token = self.store.url, None
        if not url.startswith(("http://", "https://")):
            from agl._serving._server_thread import require_server_extra

            require_server_extra(
                f"n_runners={self.count} serves the store to the runner processes over HTTP"
            )
            from agl.store._serve import StoreServer

            token = secrets.token_urlsafe(16)
            self._server = StoreServer(self.store, token=token)
            await asyncio.to_thread(self._server.start)
            url = self._server.url
        context = multiprocessing.get_context("spawn")
        for index in range(self.count):
            process = context.Process(
                target=_runner_process,
                args=(
                    self.agent,
                    starting_at(url, index),  # several store servers: spread the runners
                    token,
                    self.concurrency,
                    f"runner-{index}-{os.getpid()}",
                    self.instrument,
                ),
                name=f"agl-runner-{index}",
                daemon=True,
            )
            process.start()
            self._processes.append(process)

    def check(self) -> None:
        """Fail the run if the in-process runner crashed (a bug, not an agent failure)."""
        if self._task is not None and self._task.done() and not self._task.cancelled():
            exc = self._task.exception()
            if exc is not None:
                raise AglError(f"the runner stopped: {exc!r}") from exc
        dead = [p for p in self._processes if not p.is_alive()]
        if dead and len(dead) == len(self._processes):
            codes = sorted({p.exitcode for p in dead}, key=str)
            raise AglError(f"every runner process exited (exit codes {codes}); see their logs")

    async def stop(self) -> None:
        """Stop the runners (SIGTERM, then SIGKILL after 15 s) and the store server."""
        if self._runner is not None and self._task is not None:
            self._runner.stop(drain=False)
            with contextlib.suppress(Exception):
                await self._task
        for process in self._processes:
            if process.is_alive() and process.pid is not None:
                process.terminate()  # SIGTERM: the runner releases what it holds and exits
        for process in self._processes:
            await asyncio.to_thread(process.join, 15)
            if process.is_alive():
                process.kill()
                await asyncio.to_thread(process.join, 5)
        if self._server is not None:
            await asyncio.to_thread(self._server.stop)


def _runner_process(
    agent: LitAgent,
    url: str,
    token: str | None,
    concurrency: int,
    worker_id: str,
    instrument: list[str] | None,
) -> None:
    """A runner process's main: run until SIGTERM."""
    from agl._run._runner import Runner

    logging.basicConfig(level=logging.WARNING, format=f"%(levelname)s {worker_id}: %(message)s")
    if token is not None:  # the pool's own server: its token, not one the environment names
        os.environ.pop("AGL_STORE_TOKEN_FILE", None)
        os.environ["AGL_STORE_TOKEN"] = token
    runner = Runner(
        agent,
        url,
        concurrency=concurrency,
        worker_id=worker_id,
        drain_timeout=5.0,
        instrument=instrument,
    )
    runner.run_sync()
