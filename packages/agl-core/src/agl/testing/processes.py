"""Run agl as it is deployed: ``agl store serve``, ``agl gateway serve`` and ``agl runner`` as
separate processes, for tests of deployments (and of plugins that join one).

::

    async def test_deployed(tmp_path):
        with Processes(tmp_path) as procs:
            store = await procs.store_server("store", port=free_port(), db=tmp_path / "agl.db")
            gateway = await procs.gateway_server("gateway", port=..., upstream=..., store=...)
            procs.runner("runner-1", store_url, write_agent(tmp_path, "my_agent", SOURCE))

Every child writes stdout and stderr to ``<name>.log`` in the directory; a failed wait shows
every child's log. Children still running when the block ends are killed and reaped. Waits poll
with deadlines and fail early when a watched child exits.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import re
import subprocess
import sys
import textwrap
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Self

import pytest

__all__ = [
    "Child",
    "Processes",
    "calling_agent",
    "child_env",
    "runner_summary",
    "wait_until",
    "write_agent",
]

# Variables that would make a child use the tester's own servers or tokens.
_PRIVATE_ENV = (
    "AGL_STORE",
    "AGL_STORE_TOKEN",
    "AGL_STORE_TOKEN_FILE",
    "AGL_GATEWAY_TOKEN",
    "AGL_GATEWAY_TOKEN_FILE",
    "AGL_UPSTREAM_API_KEY",
    "AGL_UPSTREAM_API_KEY_FILE",
)


def child_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for an ``agl`` child: this one, less agl's own settings, unbuffered,
    with a wide terminal (so rich never wraps a line a test reads), plus ``extra``."""
    env = {key: value for key, value in os.environ.items() if key not in _PRIVATE_ENV}
    env["PYTHONUNBUFFERED"] = "1"
    env["COLUMNS"] = "1000"
    env.update(extra or {})
    return env


@dataclass
class Child:
    """A process a test started, writing stdout and stderr to ``log_path``."""

    name: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.process.poll() is None

    def exit_code(self, timeout: float) -> int:
        """Wait for the process to exit on its own; fail (and kill it) if it does not."""
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=30)
            pytest.fail(f"{self.name} did not exit within {timeout} s:\n{self.log()}")


class Processes:
    """Starts ``python -m agl …`` children in one directory; kills what still runs at the end."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.started: list[Child] = []

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.kill_all()

    def start(
        self,
        name: str,
        *args: str,
        env: Mapping[str, str] | None = None,
        netns: str | None = None,
    ) -> Child:
        """Start ``python -m agl ARGS`` (in :attr:`directory`) as the child ``name``, inside the
        network namespace ``netns`` when given (a host of :class:`agl.testing.hosts.Hosts`)."""
        return self.python(name, "-m", "agl", *args, env=env, netns=netns)

    def python(
        self,
        name: str,
        *args: str,
        env: Mapping[str, str] | None = None,
        netns: str | None = None,
    ) -> Child:
        """Start ``python ARGS`` (a script, ``-c CODE``, ``-m MODULE``) as the child ``name``."""
        log_path = self.directory / f"{name}.log"
        inside = ["ip", "netns", "exec", netns] if netns else []
        with log_path.open("ab") as log:
            process = subprocess.Popen(
                [*inside, sys.executable, *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.directory,
                env=child_env(env),
            )
        child = Child(name, process, log_path)
        self.started.append(child)
        return child

    def logs(self) -> str:
        return "\n".join(f"--- {child.name} ---\n{child.log()}" for child in self.started)

    def kill_all(self) -> None:
        for child in self.started:
            if child.process.poll() is None:
                child.process.kill()
            child.process.wait(timeout=30)

    async def until(
        self,
        check: Callable[[], bool | Awaitable[bool]],
        what: str,
        timeout: float,
        *watched: Child,
    ) -> None:
        """:func:`wait_until`, showing these children's logs when it fails."""
        await wait_until(check, what, timeout, watched, self.logs)

    async def serving(
        self, child: Child, url: str, timeout: float = 60.0, netns: str | None = None
    ) -> Child:
        """Wait until ``url`` (a ``/health`` route) answers, whatever the status; return child.

        With ``netns``, the URL is asked from inside that namespace (where it is reachable).
        """
        import httpx

        async def answers() -> bool:
            if netns is not None:
                return await _answers_in(netns, url)
            async with httpx.AsyncClient() as client:
                try:
                    await client.get(url, timeout=1)
                except httpx.TransportError:
                    return False
                return True

        await self.until(answers, f"{child.name} to answer at {url}", timeout, child)
        return child

    async def store_server(
        self,
        name: str,
        *,
        db: str,
        port: int,
        host: str = "127.0.0.1",
        options: tuple[str, ...] = (),
        env: Mapping[str, str] | None = None,
        netns: str | None = None,
    ) -> Child:
        """Start ``agl store serve --store DB`` and wait until it answers."""
        child = self.start(
            name, "store", "serve", "--store", db, "--host", host, "--port", str(port),
            "--log-level", "warning", *options, env=env, netns=netns,
        )  # fmt: skip
        return await self.serving(child, f"http://{_url_host(host)}:{port}/health", netns=netns)

    async def gateway_server(
        self,
        name: str,
        *,
        upstreams: list[str],
        store: str,
        port: int,
        host: str = "127.0.0.1",
        options: tuple[str, ...] = (),
        env: Mapping[str, str] | None = None,
        netns: str | None = None,
    ) -> Child:
        """Start ``agl gateway serve`` in front of ``upstreams`` and wait until it answers."""
        args = [arg for upstream in upstreams for arg in ("--upstream", upstream)]
        child = self.start(
            name, "gateway", "serve", *args, "--store", store, "--host", host,
            "--port", str(port), "--log-level", "warning", *options, env=env, netns=netns,
        )  # fmt: skip
        return await self.serving(child, f"http://{_url_host(host)}:{port}/health", netns=netns)

    def runner(
        self,
        name: str,
        store: str,
        agent: str,
        *options: str,
        env: Mapping[str, str] | None = None,
        netns: str | None = None,
    ) -> Child:
        """Start ``agl runner`` (worker id ``name``) with an agent from :attr:`directory`."""
        return self.start(
            name, "runner", "--store", store, "--agent", agent, "--path", str(self.directory),
            "--worker-id", name, *options, env=env, netns=netns,
        )  # fmt: skip


async def wait_until(
    check: Callable[[], bool | Awaitable[bool]],
    what: str,
    timeout: float,
    watched: tuple[Child, ...] = (),
    logs: Callable[[], str] = str,
) -> None:
    """Poll ``check`` until it holds; fail early if a watched child exits, or at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return
        for child in watched:
            if not child.alive():
                pytest.fail(
                    f"{child.name} exited with {child.process.returncode} while waiting for "
                    f"{what}:\n{logs()}"
                )
        if time.monotonic() > deadline:
            pytest.fail(f"waited {timeout} s for {what}:\n{logs()}")
        await asyncio.sleep(0.02)


def calling_agent(calls: int = 2, pause: float = 0.0, reward: str = "task / 10") -> str:
    """The source of an agent module for :func:`write_agent`: ``agent`` makes ``calls`` chat
    calls through the LLM it is given (the gateway, with the token the runner hands it),
    sleeping ``pause`` seconds after each, and returns the expression ``reward``."""
    return f"""
    import asyncio

    import agl
    import openai


    @agl.rollout
    async def agent(task, llm: agl.LLM):
        async with openai.AsyncOpenAI(
            base_url=llm.endpoint, api_key=llm.api_key or "none", max_retries=0
        ) as client:
            for turn in range({calls}):
                await client.chat.completions.create(
                    model=llm.model,
                    messages=[{{"role": "user", "content": f"task {{task}} turn {{turn}}"}}],
                    max_tokens=8,
                )
                await asyncio.sleep({pause})
        return {reward}
"""


def write_agent(directory: Path, module: str, source: str) -> str:
    """Write an agent module into ``directory``; return its ``module:agent`` spec."""
    (directory / f"{module}.py").write_text(textwrap.dedent(source))
    return f"{module}:agent"


_SUMMARY = re.compile(
    r"done:\s+(\d+)\s+claimed,\s+(\d+)\s+succeeded,\s+(\d+)\s+failed,\s+(\d+)\s+timed\s+out,"
    r"\s+(\d+)\s+released,\s+(\d+)\s+ended\s+by\s+the\s+store"
)
OUTCOMES = ("claimed", "succeeded", "failed", "timed_out", "released", "abandoned")


def runner_summary(child: Child) -> dict[str, int]:
    """The counts an ``agl runner`` prints when it stops (its
    :class:`~agl._run._runner.RunnerStats`)."""
    log = child.log()
    found = _SUMMARY.findall(log)
    assert len(found) == 1, f"{child.name} printed no single summary:\n{log}"
    assert "Traceback" not in log, log
    return dict(zip(OUTCOMES, map(int, found[0]), strict=True))


_ASK = (
    "import sys, urllib.error, urllib.request\n"
    "try:\n"
    "    urllib.request.urlopen(sys.argv[1], timeout=1)\n"
    "except urllib.error.HTTPError:\n"
    "    pass\n"
)


async def _answers_in(netns: str, url: str) -> bool:
    """Whether ``url`` answers (any status) when asked from inside namespace ``netns``."""
    process = await asyncio.create_subprocess_exec(
        "ip", "netns", "exec", netns, sys.executable, "-c", _ASK, url,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    return await process.wait() == 0


def _url_host(host: str) -> str:
    if host in ("0.0.0.0", "::"):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host
