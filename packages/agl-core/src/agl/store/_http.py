"""``http://host:port``: a client of a store served by ``agl store serve``.

One keep-alive connection pool per event loop (aiohttp, used directly: httpx's request and
response models cost more per request than the store's server spends answering it). Connection
failures are retried with exponential backoff; requests that may have reached the server are
retried only when repeating them is harmless, which the client arranges: it names new rollouts
and resource sets itself, so a repeated enqueue or publish finds the first one, and spans are
idempotent in every store. The server's JSON errors come back as the same exception classes the
other backends raise.
"""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel, TypeAdapter
from pydantic_core import from_json, to_json

from agl._errors import (
    ERRORS_BY_NAME,
    AglError,
    InvalidInputError,
    StoreError,
    StoreUnavailableError,
)
from agl._resources import Resource, ResourcesUpdate
from agl._rollouts import (
    Attempt,
    AttemptStatus,
    Claim,
    Rollout,
    RolloutMode,
    RolloutPage,
    RolloutRequest,
    RolloutStatus,
    Worker,
    new_id,
)
from agl._spans import Span
from agl.store._base import ClosingStore, StoreStatistics
from agl.store._checks import MAX_POLL_SECONDS, MAX_WAIT_SECONDS, as_list, as_resources

if TYPE_CHECKING:
    import aiohttp

__all__ = ["HttpStore", "starting_at"]

M = TypeVar("M", bound=BaseModel)

_rollouts = TypeAdapter(list[Rollout])
_claims = TypeAdapter(list[Claim])
_attempts = TypeAdapter(list[Attempt])
_spans = TypeAdapter(list[Span])
_workers = TypeAdapter(list[Worker])
_ints = TypeAdapter(list[int])
_requests = TypeAdapter(list[RolloutRequest])
_optional_resources: TypeAdapter[ResourcesUpdate | None] = TypeAdapter(ResourcesUpdate | None)

_JSON_CONTENT = {"content-type": "application/json"}


def starting_at(url: str, index: int) -> str:
    """``url`` with its servers rotated so that client ``index`` starts at server ``index``.

    A URL of one server is returned as it is. Giving each of N clients its own start spreads
    them over the servers instead of sending all of them to the first.
    """
    servers = url.split(",")
    first = index % len(servers)
    return ",".join(servers[first:] + servers[:first])


def _base_url(one: str, url: str) -> str:
    parts = urlsplit(one)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise InvalidInputError(
            f"HTTP store URL must look like http://host:port (several: "
            f"http://a:4747,http://b:4747), got {url!r}",
            field="url",
            value=url,
        )
    return urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))


def _never_sent(exc: Exception) -> bool | None:
    """Say whether a request that raised ``exc`` surely never reached the server.

    Returns:
        True when no connection was made (so sending again is always safe), False when the
        connection failed after the request may have gone out, None when ``exc`` is not a
        transport failure at all.
    """
    import aiohttp

    if isinstance(exc, aiohttp.ClientConnectorError | aiohttp.ConnectionTimeoutError):
        return True
    if isinstance(exc, aiohttp.ClientConnectionError | aiohttp.ClientPayloadError | TimeoutError):
        return False
    return None


class HttpStore(ClosingStore):
    """A :class:`~agl.store._base.Store` backed by a remote ``agl store serve``.

    Args:
        url: ``http://host:port`` (a path prefix is kept, for servers behind a proxy), or
            several such URLs separated by commas: store servers over one database. Requests
            go to one until it fails in transport, then to the next; a request that may have
            reached the failed server is repeated elsewhere only when that is harmless (all
            but a dequeue, whose lost claim the store gives up on after the rollout's
            ``unresponsive_seconds``, and retries).
        token: Bearer token for a server started with ``--token``; defaults to the
            ``AGL_STORE_TOKEN`` environment variable.
        timeout: Seconds to wait for an ordinary request (long polls add their own wait).
        retries: How many times to retry a request that failed in transport.
    """

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        timeout: float = 30.0,
        retries: int = 5,
    ) -> None:
        self._bases = [_base_url(one.strip(), url) for one in url.split(",")]
        self._current = 0
        self._https = any(base.startswith("https:") for base in self._bases)
        self._token = token if token is not None else os.environ.get("AGL_STORE_TOKEN")
        self._timeout = timeout
        self._retries = retries
        self._sessions: dict[asyncio.AbstractEventLoop, aiohttp.ClientSession] = {}
        self._closed = False

    @property
    def url(self) -> str:
        return ",".join(self._bases)

    # --- transport --------------------------------------------------------------------------

    def _session(self) -> aiohttp.ClientSession:
        if self._closed:
            raise StoreError(f"the store {self.url!r} is closed")
        loop = asyncio.get_running_loop()
        session = self._sessions.get(loop)
        if session is None:
            import aiohttp

            headers = {"authorization": f"Bearer {self._token}"} if self._token else {}
            connector = aiohttp.TCPConnector(
                limit=256, keepalive_timeout=5.0, ssl=_ssl_context() if self._https else True
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

    async def _request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        content: bytes | None = None,
        params: Any = None,
        idempotent: bool = True,
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
            except Exception as exc:
                never_sent = _never_sent(exc)
                if never_sent is None:
                    raise
                if not (never_sent or idempotent) or attempt == self._retries:
                    raise StoreUnavailableError(
                        f"store at {base} unreachable ({type(exc).__name__}: {exc}) "
                        f"after {attempt + 1} tries"
                        + ("" if never_sent else "; not repeated: it may have been carried out")
                    ) from exc
                if self._fail_over(base):
                    continue  # another server answers for the same data: try it at once
                await asyncio.sleep(delay * (1 + random.random()))
                delay = min(delay * 2, 2.0)
                continue
            if status == 503 and attempt < self._retries:
                self._fail_over(base)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
                continue
            return _decode(status, body)
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

    # --- rollouts ---------------------------------------------------------------------------

    async def enqueue_rollouts(self, requests: Sequence[RolloutRequest]) -> list[Rollout]:
        # Naming each rollout here makes the request safe to repeat after a lost response.
        named = [
            request
            if request.rollout_id is not None
            else request.model_copy(update={"rollout_id": new_id("ro")})
            for request in as_list(requests, "requests", RolloutRequest)
        ]
        body = b'{"requests":' + _requests.dump_json(named, exclude_defaults=True) + b"}"
        data = await self._request("POST", "/v1/rollouts/enqueue", content=body)
        return _rollouts.validate_python(data["rollouts"])

    async def dequeue_rollouts(
        self, limit: int = 1, worker_id: str | None = None, wait: float = 0.0
    ) -> list[Claim]:
        # The server holds one poll for at most MAX_POLL_SECONDS: a longer wait is several.
        for poll in _polls(wait):
            data = await self._request(
                "POST",
                "/v1/rollouts/dequeue",
                json={"limit": limit, "worker_id": worker_id, "wait": poll},
                idempotent=False,  # a lost claim would sit until its attempt is given up on
                wait=poll if isinstance(poll, int | float) else 0.0,
            )
            claims = _claims.validate_python(data["claims"])
            if claims:
                break
        return claims

    async def get_rollout(self, rollout_id: str) -> Rollout:
        return Rollout.model_validate(
            await self._request("GET", f"/v1/rollouts/{_seg(rollout_id)}")
        )

    async def query_rollouts(
        self,
        status: RolloutStatus | Sequence[RolloutStatus] | None = None,
        mode: RolloutMode | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> RolloutPage:
        params: list[tuple[str, str | int]] = [("limit", limit), ("offset", offset)]
        if status is not None:
            statuses = [status] if isinstance(status, str) else list(status)
            params.extend(("status", str(getattr(value, "value", value))) for value in statuses)
        if mode is not None:
            params.append(("mode", mode))
        return RolloutPage.model_validate(await self._request("GET", "/v1/rollouts", params=params))

    async def query_attempts(self, rollout_id: str) -> list[Attempt]:
        data = await self._request("GET", f"/v1/rollouts/{_seg(rollout_id)}/attempts")
        return _attempts.validate_python(data["attempts"])

    async def update_attempt(
        self,
        rollout_id: str,
        attempt_id: str,
        status: AttemptStatus | None = None,
        heartbeat: bool = True,
        reason: str | None = None,
    ) -> Attempt:
        data = await self._request(
            "POST",
            f"/v1/rollouts/{_seg(rollout_id)}/attempts/{_seg(attempt_id)}",
            json={
                "status": None if status is None else AttemptStatus(status).value,
                "heartbeat": heartbeat,
                "reason": reason,
            },
        )
        return Attempt.model_validate(data)

    async def cancel_rollout(self, rollout_id: str) -> Rollout:
        data = await self._request("POST", f"/v1/rollouts/{_seg(rollout_id)}/cancel")
        return Rollout.model_validate(data)

    async def wait_for_rollouts(self, rollout_ids: Sequence[str], timeout: float) -> list[Rollout]:
        ids = list(as_list(rollout_ids, "rollout_ids", str))
        for poll in _polls(timeout):
            data = await self._request(
                "POST",
                "/v1/rollouts/wait",
                json={"rollout_ids": ids, "timeout": poll},
                wait=poll if isinstance(poll, int | float) else 0.0,
            )
            finished = _rollouts.validate_python(data["rollouts"])
            if len({rollout.rollout_id for rollout in finished}) == len(set(ids)):
                break
        return finished

    # --- spans ------------------------------------------------------------------------------

    async def add_spans(self, spans: Sequence[Span]) -> list[int]:
        spans = as_list(spans, "spans", Span)
        if not spans:
            return []
        body = b'{"spans":' + _spans.dump_json(spans, exclude_defaults=True) + b"}"
        data = await self._request("POST", "/v1/spans", content=body)
        return _ints.validate_python(data["sequence_ids"])

    async def query_spans(self, rollout_id: str, attempt_id: str | None = None) -> list[Span]:
        params = {} if attempt_id is None else {"attempt_id": attempt_id}
        data = await self._request("GET", f"/v1/rollouts/{_seg(rollout_id)}/spans", params=params)
        return _spans.validate_python(data["spans"])

    # --- resources and workers --------------------------------------------------------------

    async def add_resources(
        self, resources: Mapping[str, Resource], resources_id: str | None = None
    ) -> ResourcesUpdate:
        payload = {
            name: member.model_dump(mode="json") for name, member in as_resources(resources).items()
        }
        data = await self._request(
            "POST",
            "/v1/resources",
            json={"resources": payload, "resources_id": resources_id or new_id("rs")},
        )
        return ResourcesUpdate.model_validate(data)

    async def get_resources(self, resources_id: str | None = None) -> ResourcesUpdate | None:
        path = (
            "/v1/resources/latest"
            if resources_id is None
            else f"/v1/resources/{_seg(resources_id)}"
        )
        return _optional_resources.validate_python(await self._request("GET", path))

    async def query_workers(self) -> list[Worker]:
        data = await self._request("GET", "/v1/workers")
        return _workers.validate_python(data["workers"])

    async def statistics(self) -> StoreStatistics:
        return StoreStatistics.model_validate(await self._request("GET", "/v1/statistics"))

    async def health(self) -> bool:
        """Return True when the server answers ``/health``."""
        try:
            await self._request("GET", "/health")
        except StoreUnavailableError:
            return False
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


def _decode(status: int, body: bytes) -> Any:
    """Return the JSON body of a success, or raise the error the server described."""
    try:
        data = from_json(body) if body else None
    except ValueError:
        data = None
    if 200 <= status < 300:
        return data
    info = data.get("error") if isinstance(data, dict) else None
    if not isinstance(info, dict):
        raise StoreError(
            f"store answered {status} without an agl error body: "
            f"{body.decode(errors='replace')[:200]!r}"
        )
    cls: type[AglError] = ERRORS_BY_NAME.get(str(info.get("type")), StoreError)
    raise cls(str(info.get("message")), field=info.get("field"), value=info.get("value"))


def _ssl_context() -> Any:
    """Verify servers against certifi's roots, as httpx (the client before aiohttp) did."""
    import ssl

    import certifi

    return ssl.create_default_context(cafile=certifi.where())


def _seg(value: str) -> str:
    """Quote one path segment."""
    from urllib.parse import quote

    if not isinstance(value, str) or not value:
        raise InvalidInputError(f"expected a non-empty id string, got {value!r}", value=value)
    return quote(value, safe="")


def _polls(wait: Any) -> list[Any]:
    """A wait as the server's long polls: pieces of at most ``MAX_POLL_SECONDS``. A value the
    store refuses (negative, over an hour, not a number) goes as it is, for the server's 400."""
    if (
        isinstance(wait, bool)
        or not isinstance(wait, int | float)
        or not MAX_POLL_SECONDS < wait <= MAX_WAIT_SECONDS
    ):
        return [wait]
    whole, rest = divmod(float(wait), MAX_POLL_SECONDS)
    return [MAX_POLL_SECONDS] * int(whole) + ([rest] if rest > 0 else [])
