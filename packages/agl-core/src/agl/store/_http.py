"""``http://host:port``: a client of a store served by ``agl store serve``.

One keep-alive connection pool per event loop (aiohttp, used directly: httpx's request and
response models cost more per request than the store's server spends answering it). Connection
failures are retried with exponential backoff; requests that may have reached the server are
retried only when repeating them is harmless, which the client arranges: it names new rollouts
and resource sets itself, so a repeated enqueue or publish finds the first one, and spans are
idempotent in every store (a dequeue and a batch of metrics rows are not repeated: the first
would claim twice, the second store its rows twice). The server's JSON errors come back as the
same exception classes the other backends raise (:mod:`agl.store._http_wire`).
"""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, TypeAdapter
from pydantic_core import to_json

from agl._errors import AglError, StoreError, StoreUnavailableError
from agl._metric_rows import MetricsPage, MetricsRow
from agl._resources import Resource, ResourcesPage, ResourcesUpdate
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
from agl.store._checks import MAX_ENQUEUE, SPAN_PAGE_SIZE, as_list, as_resources
from agl.store._http_wire import (
    BodyTooLargeError,
    base_url,
    decode,
    never_sent,
    path_segment,
    polls,
    ssl_context,
    starting_at,
)
from agl.store._span_batches import byte_chunks, renumbered
from agl.store._storable import refuse_unstorable

if TYPE_CHECKING:
    import aiohttp

__all__ = ["HttpStore", "starting_at"]

M = TypeVar("M", bound=BaseModel)

_rollouts = TypeAdapter(list[Rollout])
_claims = TypeAdapter(list[Claim])
_attempts = TypeAdapter(list[Attempt])
_spans = TypeAdapter(list[Span])
_span = TypeAdapter(Span)
_workers = TypeAdapter(list[Worker])
_ints = TypeAdapter(list[int])
_strs = TypeAdapter(list[str])
_metrics = TypeAdapter(list[MetricsRow])
_requests = TypeAdapter(list[RolloutRequest])
_optional_resources: TypeAdapter[ResourcesUpdate | None] = TypeAdapter(ResourcesUpdate | None)

_JSON_CONTENT = {"content-type": "application/json"}

MAX_SPAN_BYTES = 8 * 1024 * 1024
"""The largest request of spans :class:`HttpStore` sends by default."""


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
        max_span_bytes: The largest request of spans: a bigger batch goes in several (8 MiB
            by default; the server takes 64 MiB unless started with less).
    """

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        timeout: float = 30.0,
        retries: int = 5,
        max_span_bytes: int = MAX_SPAN_BYTES,
    ) -> None:
        self._bases = [base_url(one.strip(), url) for one in url.split(",")]
        self._current = 0
        self._https = any(base.startswith("https:") for base in self._bases)
        self._token = token if token is not None else os.environ.get("AGL_STORE_TOKEN")
        self._timeout = timeout
        self._retries = retries
        self._max_span_bytes = max_span_bytes
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
                unsent = never_sent(exc)
                if unsent is None:
                    raise
                if not (unsent or idempotent) or attempt == self._retries:
                    raise StoreUnavailableError(
                        f"store at {base} unreachable ({type(exc).__name__}: {exc}) "
                        f"after {attempt + 1} tries"
                        + ("" if unsent else "; not repeated: it may have been carried out")
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

    # --- rollouts ---------------------------------------------------------------------------

    async def enqueue_rollouts(self, requests: Sequence[RolloutRequest]) -> list[Rollout]:
        requests = as_list(requests, "requests", RolloutRequest)
        # JSON would carry a NaN as null: refused here, as the stores in a process refuse it
        refuse_unstorable([r.model_dump(exclude_defaults=True) for r in requests], "requests")
        # Naming each rollout here makes the request safe to repeat after a lost response.
        named = [
            request
            if request.rollout_id is not None
            else request.model_copy(update={"rollout_id": new_id("ro")})
            for request in requests
        ]
        rollouts: list[Rollout] = []
        for first in range(0, len(named), MAX_ENQUEUE):  # the server takes so many a request
            chunk = named[first : first + MAX_ENQUEUE]
            body = b'{"requests":' + _requests.dump_json(chunk, exclude_defaults=True) + b"}"
            data = await self._request("POST", "/v1/rollouts/enqueue", content=body)
            rollouts += _rollouts.validate_python(data["rollouts"])
        return rollouts

    async def dequeue_rollouts(
        self, limit: int = 1, worker_id: str | None = None, wait: float = 0.0
    ) -> list[Claim]:
        # The server holds one poll for at most MAX_POLL_SECONDS: a longer wait is several.
        for poll in polls(wait):
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
            await self._request("GET", f"/v1/rollouts/{path_segment(rollout_id)}")
        )

    async def query_rollouts(
        self,
        status: RolloutStatus | Sequence[RolloutStatus] | None = None,
        mode: RolloutMode | None = None,
        limit: int = 100,
        offset: int = 0,
        *,
        search: str | None = None,
        worker_id: str | None = None,
        since: float | None = None,
        until: float | None = None,
        newest_first: bool = False,
    ) -> RolloutPage:
        # Values go as they are: the server checks them and names a bad one (422).
        params: list[tuple[str, str | int]] = [("limit", limit), ("offset", offset)]
        if status is not None:
            statuses = [status] if isinstance(status, str) else list(status)
            params.extend(("status", str(getattr(value, "value", value))) for value in statuses)
        optional = {
            "mode": mode,
            "search": search,
            "worker_id": worker_id,
            "since": since,
            "until": until,
        }
        params.extend((key, str(value)) for key, value in optional.items() if value is not None)
        if newest_first:
            params.append(("order", "newest"))
        return RolloutPage.model_validate(await self._request("GET", "/v1/rollouts", params=params))

    async def query_attempts(self, rollout_id: str) -> list[Attempt]:
        data = await self._request("GET", f"/v1/rollouts/{path_segment(rollout_id)}/attempts")
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
            f"/v1/rollouts/{path_segment(rollout_id)}/attempts/{path_segment(attempt_id)}",
            json={
                "status": None if status is None else AttemptStatus(status).value,
                "heartbeat": heartbeat,
                "reason": reason,
            },
        )
        return Attempt.model_validate(data)

    async def cancel_rollout(self, rollout_id: str) -> Rollout:
        data = await self._request("POST", f"/v1/rollouts/{path_segment(rollout_id)}/cancel")
        return Rollout.model_validate(data)

    async def wait_for_rollouts(self, rollout_ids: Sequence[str], timeout: float) -> list[Rollout]:
        ids = list(as_list(rollout_ids, "rollout_ids", str))
        for poll in polls(timeout):
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
        """Send the batch in requests of at most ``max_span_bytes`` (a request the server finds
        too large is halved). An error in one request leaves the earlier ones stored; sending
        the batch again is harmless, as a span already stored keeps its sequence id."""
        spans = as_list(spans, "spans", Span)
        if not spans:
            return []
        whole = _spans.dump_json(spans, exclude_defaults=True)
        if len(whole) <= self._max_span_bytes:
            try:
                return await self._post_spans(b'{"spans":' + whole + b"}", len(spans), 0)
            except BodyTooLargeError:
                if len(spans) == 1:
                    raise
                # the server takes less than this client's cut: send it in parts
        encoded = [_span.dump_json(span, exclude_defaults=True) for span in spans]
        ids: list[int] = []
        for start, end in byte_chunks(encoded, self._max_span_bytes):
            ids += await self._send_spans(encoded, start, end)
        return ids

    async def _send_spans(self, encoded: list[bytes], start: int, end: int) -> list[int]:
        body = b'{"spans":[' + b",".join(encoded[start:end]) + b"]}"
        try:
            return await self._post_spans(body, end - start, start)
        except BodyTooLargeError:
            if end - start == 1:
                raise
            middle = (start + end) // 2
            first = await self._send_spans(encoded, start, middle)
            return first + await self._send_spans(encoded, middle, end)

    async def _post_spans(self, body: bytes, count: int, offset: int) -> list[int]:
        """POST one request of ``count`` spans, the first being ``spans[offset]`` of the
        caller's batch (the index an error names)."""
        try:
            data = await self._request("POST", "/v1/spans", content=body)
        except BodyTooLargeError as exc:
            if count > 1:
                raise
            raise BodyTooLargeError(
                f"spans[{offset}] is {len(body) - 12} bytes as JSON, more than the store server "
                f"takes in one request ({exc.message})",
                field=f"spans[{offset}]",
            ) from exc
        except AglError as exc:
            if offset:
                raise renumbered(exc, offset) from exc
            raise
        return _ints.validate_python(data["sequence_ids"])

    async def query_spans(
        self,
        rollout_id: str,
        attempt_id: str | None = None,
        *,
        after: int = 0,
        limit: int | None = None,
    ) -> list[Span]:
        """Read the server's pages (at most 1,000 spans each) until ``limit`` or the end."""
        path = f"/v1/rollouts/{path_segment(rollout_id)}/spans"
        spans: list[Span] = []
        cursor: Any = after
        while True:
            params: dict[str, Any] = {"after": cursor}
            if attempt_id is not None:
                params["attempt_id"] = attempt_id
            if limit is not None:
                params["limit"] = min(limit - len(spans), SPAN_PAGE_SIZE) if limit >= 1 else limit
            data = await self._request("GET", path, params=params)
            spans += _spans.validate_python(data["spans"])
            cursor = data.get("next_after")
            if cursor is None or (limit is not None and len(spans) >= limit):
                return spans

    # --- resources and workers --------------------------------------------------------------

    async def add_resources(
        self, resources: Mapping[str, Resource], resources_id: str | None = None
    ) -> ResourcesUpdate:
        members = as_resources(resources)
        refuse_unstorable({n: m.model_dump() for n, m in members.items()}, "resources")
        payload = {name: member.model_dump(mode="json") for name, member in members.items()}
        data = await self._request(
            "POST",
            "/v1/resources",
            # An id made here keeps a retried publish from making two versions.
            json={
                "resources": payload,
                "resources_id": new_id("rs") if resources_id is None else resources_id,
            },
        )
        return ResourcesUpdate.model_validate(data)

    async def get_resources(self, resources_id: str | None = None) -> ResourcesUpdate | None:
        path = (
            "/v1/resources/latest"
            if resources_id is None
            else f"/v1/resources/{path_segment(resources_id)}"
        )
        return _optional_resources.validate_python(await self._request("GET", path))

    async def query_resources(self, limit: int = 100, offset: int = 0) -> ResourcesPage:
        params = {"limit": limit, "offset": offset}
        return ResourcesPage.model_validate(
            await self._request("GET", "/v1/resources", params=params)
        )

    async def query_workers(self) -> list[Worker]:
        data = await self._request("GET", "/v1/workers")
        return _workers.validate_python(data["workers"])

    # --- metrics ----------------------------------------------------------------------------

    async def add_metrics(self, rows: Sequence[MetricsRow]) -> None:
        rows = as_list(rows, "rows", MetricsRow)
        if rows:
            body = b'{"rows":' + _metrics.dump_json(rows) + b"}"
            # Not repeated once it may have reached the server: that would add the rows twice.
            await self._request("POST", "/v1/metrics", content=body, idempotent=False)

    async def query_metrics(
        self, run: str | None = None, limit: int = 10_000, offset: int = 0
    ) -> MetricsPage:
        params: dict[str, str | int] = {"limit": limit, "offset": offset}
        if run is not None:
            params["run"] = run
        return MetricsPage.model_validate(await self._request("GET", "/v1/metrics", params=params))

    async def metric_runs(self) -> list[str]:
        data = await self._request("GET", "/v1/metrics/runs")
        return _strs.validate_python(data["runs"])

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
