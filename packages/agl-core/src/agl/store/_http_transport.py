"""The HTTP store client's transport: one connection pool per event loop, retries, fail-over.

aiohttp is used directly: httpx's request and response models cost more per request than the
store's server spends answering it. A request that failed in transport is retried with
exponential backoff: every request of the store's API is safe to repeat (:mod:`agl.store._http`
says how). With several servers over one database, requests go to one until it fails, then to
the next.

A 503 (the server cannot serve now: its database is unreachable, its disk is full) is retried
too: on the next server after the backoff, or, with one server, after the wait its
``Retry-After`` header asks for (at most :data:`MAX_RETRY_AFTER` seconds); once the retries are
spent, the server's error is raised, a retryable
:class:`~agl.StoreUnavailableError` (:class:`~agl.StoreFullError` for a full disk).
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from datetime import UTC
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any

from pydantic_core import to_json

from agl._errors import StoreError, StoreUnavailableError
from agl.store._http_wire import decode, failed_in_transport, ssl_context

if TYPE_CHECKING:
    import aiohttp

__all__ = ["MAX_RETRY_AFTER", "HttpTransport", "retry_after"]

_JSON_CONTENT = {"content-type": "application/json"}

MAX_RETRY_AFTER = 30.0
"""Longest wait, in seconds, the client grants a server's ``Retry-After``."""


class HttpTransport:
    """Requests to one store server, or to the first that answers of several.

    Args:
        bases: The servers' base URLs, in the order they are tried.
        token: Bearer token sent with every request (None: none).
        timeout: Seconds to wait for an ordinary request (long polls add their own wait).
        retries: How many times to retry a request that failed in transport.
    """

    def __init__(self, bases: list[str], token: str | None, timeout: float, retries: int) -> None:
        self._bases = bases
        self._current = 0
        self._https = any(base.startswith("https:") for base in bases)
        self._token = token
        self._timeout = timeout
        self._retries = retries
        self._sessions: dict[asyncio.AbstractEventLoop, aiohttp.ClientSession] = {}
        self._closed = False

    @property
    def url(self) -> str:
        return ",".join(self._bases)

    def _session(self) -> aiohttp.ClientSession:
        if self._closed:
            raise StoreError(f"the store {self.url!r} is closed")
        loop = asyncio.get_running_loop()
        session = self._sessions.get(loop)
        if session is None:
            import aiohttp

            headers = {"authorization": f"Bearer {self._token}"} if self._token else {}
            connector = aiohttp.TCPConnector(
                limit=256, keepalive_timeout=5.0, ssl=ssl_context() if self._https else True
            )
            session = aiohttp.ClientSession(
                connector=connector,
                headers=headers,
                cookie_jar=aiohttp.DummyCookieJar(),
                trust_env=False,
            )
            self._sessions[loop] = session
        return session

    def _timeouts(self, wait: float) -> aiohttp.ClientTimeout:
        import aiohttp

        # ``connect`` bounds waiting for a pooled connection and opening one; ``sock_read``
        # bounds the wait for the answer, which a long poll extends by its own wait.
        return aiohttp.ClientTimeout(
            total=None,
            connect=self._timeout + wait,
            sock_connect=min(self._timeout, 10.0),
            sock_read=self._timeout + wait,
        )

    async def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        content: bytes | None = None,
        params: Any = None,
        wait: float = 0.0,
    ) -> Any:
        """Send a request, retrying transport failures; return the decoded JSON body."""
        if json is not None:
            content = to_json(json)
        timeout = self._timeouts(wait)
        delay = 0.05
        for attempt in range(self._retries + 1):
            base = self._bases[self._current]
            try:
                async with self._session().request(
                    method,
                    base + path,
                    data=content,
                    params=params,
                    headers=_JSON_CONTENT if content is not None else None,
                    timeout=timeout,
                    allow_redirects=False,
                ) as response:
                    status, body = response.status, await response.read()
                    wait_asked = retry_after(response.headers.get("retry-after"))
            except Exception as exc:
                if not failed_in_transport(exc):
                    raise
                if attempt == self._retries:
                    raise StoreUnavailableError(
                        f"store at {base} unreachable ({type(exc).__name__}: {exc}) "
                        f"after {attempt + 1} tries"
                    ) from exc
                if self._fail_over(base):
                    continue  # another server answers for the same data: try it at once
                await asyncio.sleep(delay * (1 + random.random()))
                delay = min(delay * 2, 2.0)
                continue
            if status == 503 and attempt < self._retries:
                # Retry-After is the answering server's: another one is asked after the backoff
                moved = self._fail_over(base)
                await asyncio.sleep(delay if moved or wait_asked is None else wait_asked)
                delay = min(delay * 2, 2.0)
                continue
            return decode(status, body)
        raise AssertionError("unreachable")  # pragma: no cover

    def _fail_over(self, failed: str) -> bool:
        """Move on to the next server after ``failed``; False when there is no other one.

        Requests go to one server until it fails, then the next in the list takes over (for
        every request of this client): servers over one database serve the same data.
        """
        if len(self._bases) == 1:
            return False
        if self._bases[self._current] == failed:
            self._current = (self._current + 1) % len(self._bases)
        return True

    # --- lifecycle --------------------------------------------------------------------------

    async def release_loop(self) -> None:
        """Close the connections this store holds for the running event loop.

        For code that used the store from an event loop it is about to end (a helper thread's
        ``asyncio.run``): the store stays open for every other loop.
        """
        session = self._sessions.pop(asyncio.get_running_loop(), None)
        if session is not None:
            await session.close()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        sessions, self._sessions = self._sessions, {}
        current = asyncio.get_running_loop()
        for loop, session in sessions.items():
            if loop is current:
                await session.close()
            elif not loop.is_closed() and loop.is_running():
                asyncio.run_coroutine_threadsafe(session.close(), loop)


def retry_after(value: str | None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (seconds or an HTTP date), at most
    :data:`MAX_RETRY_AFTER`; None without a readable one."""
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = when.timestamp() - time.time()
    if not math.isfinite(seconds):
        return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER)
