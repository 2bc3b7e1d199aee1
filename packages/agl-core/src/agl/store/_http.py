"""``http://host:port``: a client of a store served by ``agl store serve``.

One keep-alive connection pool per event loop, with retries and fail-over
(:mod:`agl.store._http_transport`). Connection failures are retried with exponential backoff;
requests that may have reached the server are
retried only when repeating them is harmless, which the client arranges: it names new rollouts
and resource sets itself, so a repeated enqueue or publish finds the first one, and spans are
idempotent in every store; a dequeue and a batch of metrics rows carry a request id the store
remembers, so a repeat is answered as the first one was. The server's JSON errors come back as the
same exception classes the other backends raise (:mod:`agl.store._http_wire`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, TypeAdapter
from pydantic_core import to_json

from agl._errors import AglError, StoreUnavailableError
from agl._ids import check_id
from agl._metric_rows import MetricsPage, MetricsRow
from agl._resources import Resource, ResourcesPage, ResourcesUpdate
from agl._rollouts import (
    Attempt,
    AttemptStatus,
    Claim,
    Rollout,
    RolloutPage,
    RolloutRequest,
    Worker,
    new_id,
)
from agl._secrets import env_secret
from agl._spans import Span
from agl.store._base import ClosingStore, StoreStatistics
from agl.store._checks import MAX_ENQUEUE, SPAN_PAGE_SIZE, as_list, as_resources
from agl.store._engine_queries import check_page
from agl.store._http_transport import HttpTransport
from agl.store._http_wire import (
    BodyTooLargeError,
    base_url,
    path_segment,
    polls,
    starting_at,
)
from agl.store._span_batches import byte_chunks, renumbered
from agl.store._storable import refuse_unstorable
from agl.store._tx import RolloutFilter

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
        token: Bearer token for a server started with one; defaults to the
            ``AGL_STORE_TOKEN`` environment variable, or the file ``AGL_STORE_TOKEN_FILE`` names.
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
        self._http = HttpTransport(
            [base_url(one.strip(), url) for one in url.split(",")],
            token if token is not None else env_secret("AGL_STORE_TOKEN"),
            timeout,
            retries,
        )
        self._request = self._http.request
        self._max_span_bytes = max_span_bytes

    @property
    def url(self) -> str:
        return self._http.url

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
        self,
        limit: int = 1,
        worker_id: str | None = None,
        wait: float = 0.0,
        *,
        request_id: str | None = None,
    ) -> list[Claim]:
        # A request id makes the dequeue safe to repeat after a lost answer or a 503 (here or
        # on another server): the store answers a repeat with the claims it made the first time.
        request_id = new_id("rq") if request_id is None else request_id
        # The server holds one poll for at most MAX_POLL_SECONDS: a longer wait is several.
        for poll in polls(wait):
            body = {"limit": limit, "worker_id": worker_id, "wait": poll, "request_id": request_id}
            data = await self._request(
                "POST",
                "/v1/rollouts/dequeue",
                json=body,
                wait=poll if isinstance(poll, int | float) else 0.0,
            )
            claims = _claims.validate_python(data["claims"])
            if claims:
                break
        return claims

    async def get_rollout(self, rollout_id: str) -> Rollout:
        rollout = path_segment(rollout_id, "rollout_id")
        return Rollout.model_validate(await self._request("GET", f"/v1/rollouts/{rollout}"))

    async def _query_rollouts(self, where: RolloutFilter, limit: int, offset: int) -> RolloutPage:
        # The filter was checked here (an id too long for a URL would not reach the server);
        # the page is checked by the server, which names a bad one (422).
        if where.statuses is not None and not where.statuses:
            # No status matches nothing, as in every store; the URL cannot say "no status".
            check_page(limit, offset)
            return RolloutPage(rollouts=[], total=0, offset=offset, next_offset=None)
        params: list[tuple[str, str | int]] = [("limit", limit), ("offset", offset)]
        params.extend(("status", status.value) for status in where.statuses or ())
        optional = {
            "mode": where.mode,
            "search": where.search,
            "worker_id": where.worker_id,
            "since": where.since,
            "until": where.until,
        }
        params.extend((key, str(value)) for key, value in optional.items() if value is not None)
        if where.newest_first:
            params.append(("order", "newest"))
        return RolloutPage.model_validate(await self._request("GET", "/v1/rollouts", params=params))

    async def query_attempts(self, rollout_id: str) -> list[Attempt]:
        rollout = path_segment(rollout_id, "rollout_id")
        data = await self._request("GET", f"/v1/rollouts/{rollout}/attempts")
        return _attempts.validate_python(data["attempts"])

    async def update_attempt(
        self,
        rollout_id: str,
        attempt_id: str,
        status: AttemptStatus | None = None,
        heartbeat: bool = True,
        reason: str | None = None,
    ) -> Attempt:
        rollout = path_segment(rollout_id, "rollout_id")
        attempt = path_segment(attempt_id, "attempt_id")
        data = await self._request(
            "POST",
            f"/v1/rollouts/{rollout}/attempts/{attempt}",
            json={
                "status": None if status is None else AttemptStatus(status).value,
                "heartbeat": heartbeat,
                "reason": reason,
            },
        )
        return Attempt.model_validate(data)

    async def cancel_rollout(self, rollout_id: str) -> Rollout:
        rollout = path_segment(rollout_id, "rollout_id")
        data = await self._request("POST", f"/v1/rollouts/{rollout}/cancel")
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
        path = f"/v1/rollouts/{path_segment(rollout_id, 'rollout_id')}/spans"
        spans: list[Span] = []
        cursor: Any = after
        while True:
            params: dict[str, Any] = {"after": cursor}
            if attempt_id is not None:
                params["attempt_id"] = check_id(attempt_id, "attempt_id", segment=True)
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
            else f"/v1/resources/{path_segment(resources_id, 'resources_id')}"
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

    async def add_metrics(
        self, rows: Sequence[MetricsRow], *, request_id: str | None = None
    ) -> None:
        rows = as_list(rows, "rows", MetricsRow)
        if rows:
            # The request id makes a repeat (after a lost answer) add the rows once.
            request = to_json(new_id("rq") if request_id is None else request_id)
            body = b'{"rows":' + _metrics.dump_json(rows) + b',"request_id":' + request + b"}"
            await self._request("POST", "/v1/metrics", content=body)

    async def query_metrics(
        self, run: str | None = None, limit: int = 10_000, offset: int = 0
    ) -> MetricsPage:
        params: dict[str, str | int] = {"limit": limit, "offset": offset}
        if run is not None:
            params["run"] = check_id(run, "run")
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
        await self._http.release_loop()

    async def close(self) -> None:
        await self._http.close()
