"""One call through the gateway: forwarded upstream asking for token ids, answered, recorded.

:class:`Calls` is the part of :class:`~agl.gateway.Gateway` that serves a call: the attempt
checked against the store, the rollout's LLM resource enforced if asked, the body forwarded to
the rollout's upstream (a stream relayed as it comes), the answer given as the agent asked for
it, and the call handed to the span sender (:mod:`agl.gateway._record`). Calls on another wire
(Responses, Messages) are translated into one chat call each; the Messages API's token count is
asked of the engine's tokenizer. The gateway's own module holds its settings and routes.
"""

from __future__ import annotations

import json
import time
import zlib
from collections.abc import Callable
from typing import Any

import aiohttp
from fastapi import Request
from fastapi.responses import Response, StreamingResponse

from agl._errors import AglError, InvalidInputError, NotFoundError
from agl.gateway import _forward as forward
from agl.gateway._attempts import Attempts
from agl.gateway._record import CallRecord
from agl.openai_wire import (
    WIRES,
    MessagesWire,
    Wire,
    WireError,
    error_body,
    read_json,
    serve_wire,
    upstream_error,
)
from agl.openai_wire import WireJSONResponse as JSONResponse
from agl.tracing._exporter import SpanSender

__all__ = ["Calls", "openai_error"]


def openai_error(status: int, message: str) -> JSONResponse:
    """An error in the OpenAI wire format, which every OpenAI client understands."""
    return JSONResponse(error_body(status, message), status_code=status)


class Calls:
    """Serve the calls of agents (the part of :class:`~agl.gateway.Gateway` that does)."""

    upstreams: list[str]
    enforce_resources: bool
    sender: SpanSender
    attempts: Attempts
    _api_key: str | None
    _token: str | None
    _timeout: aiohttp.ClientTimeout
    _session: aiohttp.ClientSession | None

    def _upstream(self) -> aiohttp.ClientSession:
        if self._session is None:  # created in the serving event loop, on first use
            connector = aiohttp.TCPConnector(limit=1024, limit_per_host=0)
            self._session = aiohttp.ClientSession(connector=connector, timeout=self._timeout)
        return self._session

    def upstream_for(self, rollout_id: str) -> str:
        """The upstream serving a rollout: the same one for all its calls."""
        return self.upstreams[zlib.crc32(rollout_id.encode()) % len(self.upstreams)]

    def _headers(self, request: Request) -> dict[str, str]:
        if self._api_key:
            return {"authorization": f"Bearer {self._api_key}"}
        if self._token:  # the agent's Authorization carries the gateway's own token
            return {}
        given = request.headers.get("authorization")
        if not given and request.headers.get("x-api-key"):  # an Anthropic client's key
            given = f"Bearer {request.headers['x-api-key']}"
        return {"authorization": given} if given else {}

    async def _wire_call(
        self, wire: Wire, rollout_id: str, attempt_id: str, request: Request
    ) -> Response:
        """A call on a wire other than chat: translated into one chat call (recorded as such,
        with the wire and the request as it came) and its answer back."""
        try:
            body = read_json(await request.body())
        except WireError as exc:
            return wire.error_response(exc.status, exc.message, exc.field)
        unknown = await self._attempt_error(wire.error_response, rollout_id, attempt_id)
        if unknown is not None:
            return unknown

        async def chat(translated: dict[str, Any]) -> Response:
            return await self._call(
                "chat", rollout_id, attempt_id, request, body=translated, wire=(wire, body)
            )

        return await serve_wire(wire, body, request.headers, chat)

    async def _attempt_error(
        self, error: Callable[[int, str], Response], rollout_id: str, attempt_id: str
    ) -> Response | None:
        """``error(status, message)`` (in the wire's format) when the attempt is unknown
        (whatever the body, as on chat) or the store cannot say; None when it is known."""
        try:
            await self.attempts.check(rollout_id, attempt_id)
        except InvalidInputError as exc:
            return error(400, exc.message)
        except NotFoundError as exc:
            return error(404, exc.message)
        except AglError as exc:
            return error(503, f"the gateway cannot reach its store: {exc.message}")
        return None

    async def _count_tokens(self, rollout_id: str, attempt_id: str, request: Request) -> Response:
        """The Messages API's token count, by the engine's own tokenizer (not a call: nothing
        is generated or recorded)."""
        wire = WIRES["messages"]
        assert isinstance(wire, MessagesWire)
        try:
            body = read_json(await request.body())
        except WireError as exc:
            return wire.error_response(exc.status, exc.message, exc.field)
        unknown = await self._attempt_error(wire.error_response, rollout_id, attempt_id)
        if unknown is not None:
            return unknown
        try:
            ask = wire.tokenize_request(body, request.headers)
        except WireError as exc:
            return wire.error_response(exc.status, exc.message, exc.field)
        upstream = self.upstream_for(rollout_id)
        url = upstream.removesuffix("/v1") + "/tokenize"  # vLLM serves it beside /v1
        try:
            async with self._upstream().post(
                url, json=ask, headers=self._headers(request)
            ) as reply:
                content, status = await reply.read(), reply.status
        except (aiohttp.ClientError, TimeoutError) as exc:
            return wire.error_response(502, f"upstream {upstream} unreachable: {exc}")
        if status >= 400:
            message = upstream_error(content)
            if status == 404:
                message = f"the engine at {upstream} cannot count tokens (no /tokenize): {message}"
            return wire.error_response(status, message)
        try:
            count = json.loads(content)["count"]
        except (ValueError, KeyError, TypeError):
            return wire.error_response(502, f"upstream {upstream} sent no token count")
        return JSONResponse({"input_tokens": count})

    async def _call(
        self,
        kind: str,
        rollout_id: str,
        attempt_id: str,
        request: Request,
        *,
        body: dict[str, Any] | None = None,
        wire: tuple[Wire, dict[str, Any]] | None = None,
    ) -> Response:
        if body is None:
            try:
                body = read_json(await request.body())
            except WireError as exc:
                return openai_error(exc.status, exc.message)
        try:
            resources_id = await self.attempts.check(rollout_id, attempt_id)
        except InvalidInputError as exc:
            return openai_error(400, exc.message)
        except NotFoundError as exc:
            return openai_error(404, exc.message)
        except AglError as exc:
            return openai_error(503, f"the gateway cannot reach its store: {exc.message}")
        llm = None
        if self.enforce_resources:
            llm = await self.attempts.llm_for(body, resources_id, request.headers.get("host", ""))
            if llm is not None:
                body = {**body, **llm.sampling_parameters, "model": llm.model}
        upstream = self.upstream_for(rollout_id)
        record = CallRecord(rollout_id, attempt_id, kind, upstream, body, resources_id=resources_id)
        if wire is not None:
            record.wire, record.wire_request = wire
        # An upstream that names its weight version overrides this (see take_headers).
        record.weight_version = None if llm is None else llm.weight_version
        forwarded = forward.ask_for_tokens(body, kind)
        # A translated call's answer goes to the translation, which takes what it needs.
        asked = forwarded if wire is not None else body
        url = f"{upstream}/{'chat/completions' if kind == 'chat' else 'completions'}"
        headers = self._headers(request)
        if body.get("stream"):
            return await self._stream(record, url, forwarded, headers, asked)
        started = time.perf_counter()
        try:
            async with self._upstream().post(url, json=forwarded, headers=headers) as reply:
                content, status = await reply.read(), reply.status
                record.take_headers(reply.headers)
        except TimeoutError:
            return self._failed(record, 504, f"upstream {upstream} timed out")
        except aiohttp.ClientError as exc:
            return self._failed(record, 502, f"upstream {upstream} unreachable: {exc}")
        record.upstream_ms = (time.perf_counter() - started) * 1000
        if status >= 400:
            text = content[:500].decode(errors="replace")
            record.error = f"upstream answered {status}: {text}"
            self._submit(record)
            return Response(content, status, media_type="application/json")
        try:
            data = json.loads(content)
        except (ValueError, RecursionError):
            return self._failed(record, 502, f"upstream {upstream} sent no JSON")
        record.take_response(data)
        self._submit(record)
        return JSONResponse(forward.as_asked(data, asked, kind))

    def _submit(self, record: CallRecord) -> None:
        """Hand the finished call to the sender, which builds its span off the request path."""
        record.end_ns = time.time_ns()
        self.sender.submit(record.to_span)

    def _failed(self, record: CallRecord, status: int, message: str) -> JSONResponse:
        record.error = message
        self._submit(record)
        return openai_error(status, message)

    async def _stream(
        self,
        record: CallRecord,
        url: str,
        forwarded: dict[str, Any],
        headers: dict[str, str],
        asked: dict[str, Any],
    ) -> Response:
        started = time.perf_counter()
        try:
            reply = await self._upstream().post(url, json=forwarded, headers=headers)
        except TimeoutError:
            return self._failed(record, 504, f"upstream {record.upstream} timed out")
        except aiohttp.ClientError as exc:
            message = f"upstream {record.upstream} unreachable: {exc}"
            return self._failed(record, 502, message)
        if reply.status >= 400:
            content = await reply.read()
            reply.release()
            text = content[:500].decode(errors="replace")
            record.error = f"upstream answered {reply.status}: {text}"
            self._submit(record)
            return Response(content, reply.status, media_type="application/json")
        record.take_headers(reply.headers)

        relay = forward.relay(reply, record, asked, started, self._submit)
        return StreamingResponse(relay, media_type="text/event-stream")
