"""The LLM gateway: an OpenAI-compatible proxy that records every call with the engine's tokens.

An agent is given ``http://gateway/rollout/{rollout_id}/attempt/{attempt_id}/v1`` as its base
URL. It may speak chat completions, completions, the OpenAI Responses API (``/responses``) or
the Anthropic Messages API (``/messages``; an Anthropic client is given the base URL without
``/v1``, which it adds itself). The last two are translated into one chat call each
(:mod:`agl.openai_wire._translate`): the engine renders the prompt once, with its own template,
and the span records the token ids it used, the wire the call came in on and the request as the
agent sent it. Each call is forwarded to one of the upstream servers (vLLM, the
agl-torch policy server, a hosted API; the same one for every call of a rollout), asking for the
prompt and response token ids (vLLM's ``return_token_ids``) and logprobs. The agent gets the
response it asked for (the extra fields removed unless it asked for them too); the store gets
one span per call (:mod:`agl.gateway._record`). Streams are passed through as they are produced
and assembled for the record. Upstream errors, timeouts and client disconnects are recorded as
failed calls and answered with errors in the wire's own format; none of them takes the gateway
down.

With a ``token``, every route asks for ``Authorization: Bearer <token>`` (or ``x-api-key:
<token>``, as Anthropic's clients send their key): the agents send it as their API key (the
runner gives it to them as :attr:`agl.LLM.api_key`, from its ``AGL_GATEWAY_TOKEN``), and it is
never passed upstream.

``POST /rollout/{rollout_id}/attempt/{attempt_id}/flush`` returns once every call answered so
far is in the store (:mod:`agl.gateway._paths`); the runner calls it before it reports an attempt
finished, so a gateway in another process or on another host loses no call to the algorithm.

With ``enforce_resources=True``, the model name and sampling parameters of the LLM resource the
rollout runs with override the agent's, so a training run knows which policy produced each call.

This module holds the gateway's settings and routes; serving one call is
:mod:`agl.gateway._calls`.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

import aiohttp
from fastapi import FastAPI, Request
from fastapi.responses import Response

from agl._errors import InvalidInputError
from agl._ids import PathId, check_id
from agl._serving._http_allow import refuse_methods
from agl._serving._server_auth import BearerTokenMiddleware
from agl.gateway import _openapi as openapi
from agl.gateway import _paths as paths
from agl.gateway._attempts import Attempts
from agl.gateway._calls import Calls, openai_error
from agl.openai_wire import WIRES, error_body
from agl.openai_wire import WireJSONResponse as JSONResponse
from agl.store._base import Store
from agl.store._server_errors import BodyLimitMiddleware
from agl.tracing._exporter import SpanSender

__all__ = ["Gateway"]

_PREFIX = paths.OPENAI


def _unauthorized(message: str, path: str = "") -> dict[str, Any]:
    """A 401 in the format of the wire the path is on."""
    for name, wire in WIRES.items():
        if f"/v1/{name}" in path:
            return wire.error(401, message)
    return error_body(401, message)


class Gateway(Calls):
    """The gateway's state and its FastAPI app (:attr:`app`).

    Args:
        upstreams: Base URLs of OpenAI-compatible servers, each ending in ``/v1``.
        store: Where the call spans go.
        enforce_resources: Override model and sampling parameters with the rollout's LLM
            resource.
        upstream_api_key: Sent upstream as the bearer token; if unset (and there is no
            ``token``), the agent's own ``Authorization`` header is passed on.
        token: Required of every request as ``Authorization: Bearer <token>``.
        flush_timeout: Longest wait of the flush route, in seconds.
        timeout: Seconds to wait for an upstream response (for a stream: between chunks).
        max_body_bytes: A request body larger than this is refused with a 413, announced or
            streamed, before it is read (64 MiB by default, as the store server's).
    """

    def __init__(
        self,
        upstreams: Sequence[str],
        store: Store,
        *,
        enforce_resources: bool = False,
        upstream_api_key: str | None = None,
        token: str | None = None,
        flush_timeout: float = 30.0,
        timeout: float = 600.0,
        max_body_bytes: int = 64 * 1024 * 1024,
        close_store: bool = False,
        **sender_options: Any,
    ) -> None:
        if not upstreams:
            raise InvalidInputError("the gateway needs at least one upstream", field="upstreams")
        self.upstreams = [url.rstrip("/") for url in upstreams]
        self.store = store
        self.enforce_resources = enforce_resources
        self._close_store = close_store
        self.sender = SpanSender(store, **sender_options)
        self._api_key = upstream_api_key
        self._token = token or None
        self._flush_timeout = flush_timeout
        self._max_body_bytes = max_body_bytes
        self._timeout = aiohttp.ClientTimeout(total=None, sock_connect=10.0, sock_read=timeout)
        # aiohttp, not httpx, upstream: httpcore's pool slows to ~100 requests/s at 64
        # concurrent connections on 2 cores, where aiohttp's keeps ~2,000.
        self._session: aiohttp.ClientSession | None = None
        self.attempts = Attempts(store, enforce_resources=enforce_resources)
        self.app = self._create_app()

    async def aclose(self) -> None:
        """Send the remaining spans and close upstream connections (and the store, if owned)."""
        import asyncio

        await asyncio.to_thread(self.sender.close)
        if self._session is not None:
            await self._session.close()
        if self._close_store:
            await self.store.close()

    # --- the app ----------------------------------------------------------------------------

    def _create_app(self) -> FastAPI:
        @contextlib.asynccontextmanager
        async def lifespan(_: FastAPI) -> AsyncIterator[None]:
            yield
            await self.aclose()

        app = FastAPI(title="agl gateway", version="1", lifespan=lifespan)

        if self._token:
            app.add_middleware(
                BearerTokenMiddleware,
                token=self._token,
                refusal=_unauthorized,
                key_header="x-api-key",  # Anthropic's clients send their key so
            )
        # outermost: a body over the limit is refused before anything reads it
        app.add_middleware(
            BodyLimitMiddleware,
            max_body_bytes=self._max_body_bytes,
            error=lambda message: error_body(413, message),
        )

        refuse_methods(
            app, lambda request: openai_error(405, f"{request.method} is not allowed here")
        )

        @app.get("/health")
        async def health() -> dict[str, Any]:
            return {"status": "ok", "upstreams": self.upstreams}

        @app.get(_PREFIX + "/models", responses=openapi.ERRORS)
        async def models(rollout_id: PathId, attempt_id: PathId, request: Request) -> Response:
            # an unknown attempt is not found here, as on every other route of it
            unknown = await self._attempt_error(openai_error, rollout_id, attempt_id)
            if unknown is not None:
                return unknown
            upstream = self.upstream_for(rollout_id)
            try:
                async with self._upstream().get(
                    upstream + "/models", headers=self._headers(request)
                ) as reply:
                    content, status = await reply.read(), reply.status
            except (aiohttp.ClientError, TimeoutError) as exc:
                return openai_error(502, f"upstream {upstream} unreachable: {exc}")
            return Response(content, status, media_type="application/json")

        @app.post(paths.FLUSH, responses=openapi.FLUSH_RESPONSES)
        async def flush(rollout_id: PathId, attempt_id: PathId) -> Response:
            try:  # the ids as every route takes them, though the store is not asked here
                check_id(rollout_id, "rollout_id", segment=True)
                check_id(attempt_id, "attempt_id", segment=True)
            except InvalidInputError as exc:
                return openai_error(400, exc.message)
            # Every call answered so far was submitted before its answer went out: once the
            # sender has settled what it holds now, the attempt's calls are in the store.
            if await self.sender.flush_async(self._flush_timeout):
                return JSONResponse({"flushed": True})
            message = f"the store did not take the recorded calls within {self._flush_timeout} s"
            return openai_error(504, message)

        @app.post(
            _PREFIX + "/chat/completions",
            openapi_extra=openapi.CHAT_REQUEST,
            responses=openapi.OPENAI_RESPONSES,
        )
        async def chat(rollout_id: PathId, attempt_id: PathId, request: Request) -> Response:
            return await self._call("chat", rollout_id, attempt_id, request)

        @app.post(
            _PREFIX + "/completions",
            openapi_extra=openapi.COMPLETIONS_REQUEST,
            responses=openapi.OPENAI_RESPONSES,
        )
        async def completions(rollout_id: PathId, attempt_id: PathId, request: Request) -> Response:
            return await self._call("completions", rollout_id, attempt_id, request)

        @app.post(
            _PREFIX + "/responses",
            openapi_extra=openapi.RESPONSES_REQUEST,
            responses=openapi.OPENAI_RESPONSES,
        )
        async def responses(rollout_id: PathId, attempt_id: PathId, request: Request) -> Response:
            return await self._wire_call(WIRES["responses"], rollout_id, attempt_id, request)

        @app.post(
            _PREFIX + "/messages",
            openapi_extra=openapi.MESSAGES_REQUEST,
            responses=openapi.MESSAGES_RESPONSES,
        )
        async def messages(rollout_id: PathId, attempt_id: PathId, request: Request) -> Response:
            # Claude Code adds ?beta=true; the beta features it names come as fields, each
            # checked by the wire.
            return await self._wire_call(WIRES["messages"], rollout_id, attempt_id, request)

        @app.post(
            _PREFIX + "/messages/count_tokens",
            openapi_extra=openapi.COUNT_TOKENS_REQUEST,
            responses=openapi.COUNT_TOKENS_RESPONSES,
        )
        async def count_tokens(
            rollout_id: PathId, attempt_id: PathId, request: Request
        ) -> Response:
            return await self._count_tokens(rollout_id, attempt_id, request)

        return app
