"""How the store server answers what goes wrong: agl's JSON errors, never a traceback.

Every error is a JSON body ``{"error": {"type", "message", "field", "value"}}``: the store's own
errors with their status codes (:class:`~agl.AglError` subclasses; the retryable ones, a store
that cannot serve now or whose disk is full, as 503 with ``Retry-After``), FastAPI's validation
errors as one :class:`~agl.InvalidInputError` naming the first offending field, a body over the
limit as 413 (:class:`BodyLimitMiddleware`), and the server's own failures as a bare 500
(:class:`UnexpectedErrorMiddleware`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from agl._errors import AglError, InvalidInputError
from agl._ids import shown as shown_id
from agl._serving._http_allow import allow_header
from agl.store._full import RETRY_AFTER_SECONDS

__all__ = [
    "BodyLimitMiddleware",
    "MalformedBody",
    "UnexpectedErrorMiddleware",
    "install_error_handlers",
    "unauthorized",
    "validation_error",
]

logger = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


# --- errors -----------------------------------------------------------------------------------


def _error_response(error: AglError, status_code: int | None = None) -> JSONResponse:
    status = status_code or error.status_code
    # 503 says "try again": OTLP exporters and agl's client wait Retry-After, then retry.
    headers = {"retry-after": str(RETRY_AFTER_SECONDS)} if status == 503 else None
    return JSONResponse({"error": error.to_dict()}, status_code=status, headers=headers)


def _field_path(loc: tuple[Any, ...] | list[Any]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += ("." if path else "") + str(part)
    return path


def validation_error(errors: list[Any], prefix: tuple[str, ...]) -> AglError:
    """Turn pydantic errors into one InvalidInputError naming the first offending field."""
    first = errors[0]
    loc = tuple(part for part in first.get("loc", ()) if part not in prefix)
    if loc[-1:] == ("[key]",):  # a bad key: named by the mapping, not by itself
        loc = loc[:-2]
    if first.get("type") == "json_invalid":
        detail = first.get("ctx", {}).get("error", first.get("msg"))
        return MalformedBody(f"request body is not valid JSON: {detail}")
    field = _field_path(loc) or None
    value = first.get("input")
    shown = value if isinstance(value, str | int | float | bool) or value is None else None
    message = f"{field}: {first.get('msg')}" if field else str(first.get("msg"))
    if shown is not None:
        message += f" (got {shown_id(shown)})"  # cut: an over-long value is not echoed whole
    if len(errors) > 1:
        message += f"; and {len(errors) - 1} more error(s)"
    return InvalidInputError(message, field=field, value=shown)


class MalformedBody(InvalidInputError):
    status_code = 400


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(AglError)
    async def agl_error(_: Request, exc: AglError) -> JSONResponse:
        if isinstance(exc, MalformedBody):
            return JSONResponse(
                {"error": {**exc.to_dict(), "type": "InvalidInputError"}}, status_code=400
            )
        return _error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def request_validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        error = validation_error(list(exc.errors()), prefix=("body", "query", "path"))
        return await agl_error(_, error)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = "NotFoundError" if exc.status_code == 404 else "InvalidInputError"
        # exc.headers carries what the status needs; a 405's Allow names every route's methods
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            headers["Allow"] = allow_header(request)
        return JSONResponse(
            {"error": {"type": kind, "message": str(exc.detail)}},
            status_code=exc.status_code,
            headers=headers,
        )


# --- middleware (plain ASGI, so they also guard bodies streamed without a length) --------------


async def _send_json(send: Send, status: int, body: dict[str, Any]) -> None:
    import json

    payload = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})


def unauthorized(message: str, path: str = "") -> dict[str, Any]:
    return {"error": {"type": "UnauthorizedError", "message": message}}


class BodyLimitMiddleware:
    """A 413 for a request body over ``max_body_bytes``, announced or streamed, before the app
    reads past it. ``error`` builds the response body from the message (default: agl's)."""

    def __init__(
        self,
        app: ASGIApp,
        max_body_bytes: int,
        error: Callable[[str], dict[str, Any]] | None = None,
    ) -> None:
        self.app = app
        self.limit = max_body_bytes
        message = f"request body is larger than the server's limit of {self.limit} bytes"
        self.too_large = (
            error(message)
            if error is not None
            else {"error": {"type": "InvalidInputError", "message": message, "field": "body"}}
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        too_large = self.too_large
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.limit:
            await _send_json(send, 413, too_large)
            return
        received = 0
        exceeded = False
        response_started = False

        async def limited_receive() -> Message:
            nonlocal received, exceeded
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    exceeded = True
                    raise _BodyTooLarge
            return message

        async def guarded_send(message: Message) -> None:
            # Whatever the app answers to a body it could not finish reading (FastAPI turns
            # the error into a 400), the client is told the real reason: 413.
            nonlocal response_started
            if exceeded:
                if not response_started:
                    response_started = True
                    await _send_json(send, 413, too_large)
                return
            response_started = response_started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited_receive, guarded_send)
        except _BodyTooLarge:
            if not response_started:
                response_started = True
                await _send_json(send, 413, too_large)


class UnexpectedErrorMiddleware:
    """Answer the server's own failures with a JSON 500, keeping the connection usable.

    Handled here rather than by an ``Exception`` handler, which Starlette runs in its outermost
    layer and then re-raises, so uvicorn drops the keep-alive connection.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        response_started = False

        async def tracking_send(message: Message) -> None:
            nonlocal response_started
            response_started = response_started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except _BodyTooLarge:
            raise
        except ClientDisconnect:
            logger.debug("client went away during %s %s", scope.get("method"), scope["path"])
        except Exception as exc:
            logger.exception("store server failed on %s %s", scope.get("method"), scope["path"])
            if response_started:
                raise
            body = {"type": "StoreError", "message": f"internal error ({type(exc).__name__})"}
            await _send_json(send, 500, {"error": body})


class _BodyTooLarge(Exception):
    pass
