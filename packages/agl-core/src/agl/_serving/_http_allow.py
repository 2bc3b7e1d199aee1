"""The ``Allow`` header of a 405, for every agl server (the store, the gateway, the dashboard).

Starlette answers a method a path does not take with the methods of the *first* route that
matched the path, so a path served by two routes (``GET /v1/metrics`` and ``POST
/v1/metrics``) says ``Allow: POST`` alone. :func:`allow_header` asks every route of the app
instead, once per method, which is what RFC 9110 asks of a 405: the methods the target
resource supports.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Match

__all__ = ["METHODS", "allow_header", "allowed_methods", "refuse_methods"]

METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
"""The methods asked about, in the order the header lists them."""


def allowed_methods(routes: list[Any], scope: dict[str, Any]) -> list[str]:
    """The methods of :data:`METHODS` some route in ``routes`` takes for the scope's path."""
    return [
        method
        for method in METHODS
        if any(route.matches({**scope, "method": method})[0] == Match.FULL for route in routes)
    ]


def allow_header(request: Request) -> str:
    """The ``Allow`` value for a 405 answer to ``request``: every method its path takes."""
    return ", ".join(allowed_methods(request.app.router.routes, dict(request.scope)))


def refuse_methods(app: Starlette, refusal: Callable[[Request], Response]) -> None:
    """Answer every 405 of ``app`` with ``refusal(request)`` (a body in the server's own error
    format) and an ``Allow`` header naming every method the path takes; other HTTP errors keep
    FastAPI's answer."""
    from fastapi.exception_handlers import http_exception_handler

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        if exc.status_code != 405:
            return await http_exception_handler(request, exc)
        response = refusal(request)
        response.headers["Allow"] = allow_header(request)
        return response

    app.add_exception_handler(HTTPException, http_error)
