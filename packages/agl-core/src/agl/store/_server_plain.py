"""Routes the store server serves without FastAPI's per-request machinery: its hot paths.

FastAPI solves a route's dependencies, validates its body into a model, then validates and
encodes what the endpoint returns, for every request: for a one-span batch, a claim or an
attempt report, more than the store itself spends on it. A plain route is documented from a
declaration as any other (its OpenAPI entry is the declaration's), but served by a handler that
takes the request and returns the response, as in Starlette: it reads its body in one pass
(:func:`~agl.store._server_params.parse_body`) and answers JSON it encodes itself.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response
from fastapi.routing import APIRoute
from pydantic import BaseModel

__all__ = ["Handler", "add_plain_route", "json_response"]

Handler = Callable[[Request], Coroutine[Any, Any, Response]]
"""A plain route's handler: the request in, the response out."""


def add_plain_route(
    router: APIRouter,
    path: str,
    declaration: Callable[..., Any],
    handler: Handler,
    **options: Any,
) -> None:
    """Add a route at ``path`` documented from ``declaration`` (never called: its parameters and
    return annotation are what the OpenAPI document shows) and served by ``handler``.

    ``options`` are :meth:`APIRouter.add_api_route`'s (``methods``, ``tags``, ...).
    """

    class PlainRoute(APIRoute):
        def get_route_handler(self) -> Handler:
            return handler

    router.add_api_route(path, declaration, route_class_override=PlainRoute, **options)


def json_response(body: BaseModel) -> Response:
    """``body`` as the JSON response FastAPI would have made of it."""
    return Response(body.model_dump_json(), media_type="application/json")
