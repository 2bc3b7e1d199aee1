"""``http://host:port``: a client of a store served by ``agl store serve``.

One keep-alive connection pool per event loop (httpx). Connection failures are retried with
exponential backoff; requests that may have reached the server are retried only when repeating
them is harmless, which the client arranges: it names new rollouts and resource sets itself, so
a repeated enqueue or publish finds the first one, and spans are idempotent in every store. The
server's JSON errors come back as the same exception classes the other backends raise.
"""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import httpx
from pydantic import BaseModel, TypeAdapter

from agl.errors import (
    ERRORS_BY_NAME,
    AglError,
    InvalidInputError,
    StoreError,
    StoreUnavailableError,
)
from agl.resources import Resource, ResourcesUpdate
from agl.rollouts import (
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
from agl.spans import Span
from agl.store._checks import as_list, as_resources
from agl.store.base import ClosingStore, StoreStatistics

__all__ = ["HttpStore"]

M = TypeVar("M", bound=BaseModel)

_rollouts = TypeAdapter(list[Rollout])
_claims = TypeAdapter(list[Claim])
_attempts = TypeAdapter(list[Attempt])
_spans = TypeAdapter(list[Span])
_workers = TypeAdapter(list[Worker])
_ints = TypeAdapter(list[int])
_requests = TypeAdapter(list[RolloutRequest])
_optional_resources: TypeAdapter[ResourcesUpdate | None] = TypeAdapter(ResourcesUpdate | None)

# Transport failures after which the request may or may not have reached the server.
_MAYBE_SENT = (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError, httpx.ReadTimeout)
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


def _not_sent(exc: Exception) -> bool:
    """True when the request surely never reached the server (safe to send again)."""
    import aiohttp

    cause = exc.__cause__
    if isinstance(cause, aiohttp.ClientError):  # the aiohttp transport maps its errors loosely
        return isinstance(cause, aiohttp.ClientConnectorError)
    return isinstance(exc, _NOT_SENT)


class HttpStore(ClosingStore):
    """A :class:`~agl.store.base.Store` backed by a remote ``agl store serve``.

    Args:
        url: ``http://host:port`` (a path prefix is kept, for servers behind a proxy).
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
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise InvalidInputError(
                f"HTTP store URL must look like http://host:port, got {url!r}",
                field="url",
                value=url,
            )
        self._base = urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))
        self._token = token if token is not None else os.environ.get("AGL_STORE_TOKEN")
        self._timeout = timeout
        self._retries = retries
        self._clients: dict[asyncio.AbstractEventLoop, httpx.AsyncClient] = {}
        self._closed = False

    @property
    def url(self) -> str:
        return self._base

    # --- transport --------------------------------------------------------------------------

    def _client(self) -> httpx.AsyncClient:
        if self._closed:
            raise StoreError(f"the store {self.url!r} is closed")
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            from httpx_aiohttp import AiohttpTransport

            headers = {"authorization": f"Bearer {self._token}"} if self._token else {}
            limits = httpx.Limits(max_connections=256, max_keepalive_connections=64)
            client = httpx.AsyncClient(
                base_url=self._base,
                headers=headers,
                timeout=self._timeout,
                limits=limits,
                # httpx's API over aiohttp's connection pool: httpcore's own pool slows to a
                # few hundred requests/s with many concurrent requests (a runner's rollouts).
                transport=AiohttpTransport(limits=limits, trust_env=False),
            )
            self._clients[loop] = client
        return client

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
        headers = {"content-type": "application/json"} if content is not None else None
        timeout = httpx.Timeout(self._timeout + wait, connect=min(self._timeout, 10.0))
        delay = 0.05
        for attempt in range(self._retries + 1):
            try:
                response = await self._client().request(
                    method,
                    path,
                    json=json,
                    content=content,
                    params=params,
                    headers=headers,
                    timeout=timeout,
                )
            except (*_NOT_SENT, *_MAYBE_SENT) as exc:
                retryable = _not_sent(exc) or idempotent
                if not retryable or attempt == self._retries:
                    raise StoreUnavailableError(
                        f"store at {self.url} unreachable ({type(exc).__name__}: {exc}) "
                        f"after {attempt + 1} tries"
                    ) from exc
                await asyncio.sleep(delay * (1 + random.random()))
                delay = min(delay * 2, 2.0)
                continue
            if response.status_code == 503 and attempt < self._retries:
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
                continue
            return _decode(response)
        raise AssertionError("unreachable")  # pragma: no cover

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
        data = await self._request(
            "POST",
            "/v1/rollouts/dequeue",
            json={"limit": limit, "worker_id": worker_id, "wait": wait},
            idempotent=False,  # a lost claim would sit until its attempt is given up on
            wait=wait if isinstance(wait, int | float) else 0.0,
        )
        return _claims.validate_python(data["claims"])

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
        data = await self._request(
            "POST",
            "/v1/rollouts/wait",
            json={
                "rollout_ids": list(as_list(rollout_ids, "rollout_ids", str)),
                "timeout": timeout,
            },
            wait=timeout if isinstance(timeout, int | float) else 0.0,
        )
        return _rollouts.validate_python(data["rollouts"])

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
        client = self._clients.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.aclose()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        clients, self._clients = self._clients, {}
        current = asyncio.get_running_loop()
        for loop, client in clients.items():
            if loop is current:
                await client.aclose()
            elif not loop.is_closed() and loop.is_running():
                asyncio.run_coroutine_threadsafe(client.aclose(), loop)


def _decode(response: httpx.Response) -> Any:
    """Return the JSON body of a success, or raise the error the server described."""
    try:
        data = response.json()
    except ValueError:
        data = None
    if response.is_success:
        return data
    info = data.get("error") if isinstance(data, dict) else None
    if not isinstance(info, dict):
        raise StoreError(
            f"store answered {response.status_code} without an agl error body: "
            f"{response.text[:200]!r}"
        )
    cls: type[AglError] = ERRORS_BY_NAME.get(str(info.get("type")), StoreError)
    raise cls(str(info.get("message")), field=info.get("field"), value=info.get("value"))


def _seg(value: str) -> str:
    """Quote one path segment."""
    from urllib.parse import quote

    if not isinstance(value, str) or not value:
        raise InvalidInputError(f"expected a non-empty id string, got {value!r}", value=value)
    return quote(value, safe="")
