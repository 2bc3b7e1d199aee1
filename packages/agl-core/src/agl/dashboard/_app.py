"""Serving the dashboard: beside a store server's routes, or on its own in front of any store.

The pages are static files shipped in the package (``static/``: HTML, JavaScript and CSS
written by hand, no build step, nothing fetched from the internet). In the browser they read
the store's HTTP API, ``/v1/...``, and the views of :mod:`agl.dashboard._views`. They never
write: the standalone server passes only ``GET`` requests through.

A store served with a token keeps its data behind it: the pages themselves (which hold no
data) are public, the page asks for the token once, keeps it in the tab's session storage and
sends it as ``Authorization: Bearer``, never in a URL.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, JSONResponse, Response

from agl._errors import AglError, NotFoundError
from agl._ids import id_problem, shown
from agl._serving._http_allow import refuse_methods
from agl._serving._server_auth import bearer_token
from agl.dashboard._views import create_views
from agl.store._base import Store

__all__ = ["PUBLIC_PATHS", "create_dashboard_app", "mount_dashboard", "static_folder"]

PUBLIC_PATHS = ("/", "/dashboard/")
"""Paths a token does not guard: the page and its assets (``/dashboard/...``), no data."""

_FILES = {"app.js": "text/javascript", "app.css": "text/css", "favicon.svg": "image/svg+xml"}


def static_folder() -> Path:
    """The folder of the dashboard's page and assets, inside the installed package."""
    return Path(str(resources.files("agl.dashboard") / "static"))


def _add_pages(app: FastAPI) -> None:
    folder = static_folder()

    @app.get("/", include_in_schema=False)
    async def index() -> Response:
        return FileResponse(folder / "index.html", media_type="text/html")

    @app.get("/dashboard/{name}", include_in_schema=False)
    async def asset(name: str) -> Response:
        media_type = _FILES.get(name)
        if media_type is None:
            raise NotFoundError(f"the dashboard has no file {name!r}", field="name", value=name)
        return FileResponse(folder / name, media_type=media_type)


def mount_dashboard(app: FastAPI, store: Store) -> None:
    """Add the dashboard to a store server's ``app`` serving ``store``: the page at ``/``, its
    assets under ``/dashboard/``, the views under ``/v1/views``."""

    async def store_for(_: Request) -> Store:
        return store

    app.include_router(create_views(store_for))
    _add_pages(app)


def create_dashboard_app(store_url: str) -> FastAPI:
    """The dashboard on its own, for a store served at ``store_url`` (``agl dashboard``).

    The page, its assets and the views are served here; the store's own ``GET /v1/...`` routes
    are passed through (with the browser's ``Authorization`` header), so the page reads the same
    API as on the store server. Anything but ``GET`` is refused: the dashboard is read-only.
    """
    import aiohttp
    from yarl import URL

    from agl.store._http import HttpStore

    base = store_url.rstrip("/")
    clients: dict[str | None, HttpStore] = {}
    session: dict[str, aiohttp.ClientSession] = {}

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        session["http"] = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60))
        try:
            yield
        finally:
            await session["http"].close()
            for client in clients.values():
                await client.close()

    app = FastAPI(title="agl dashboard", lifespan=lifespan, docs_url=None, redoc_url=None)
    _install_errors(app)

    async def store_for(request: Request) -> Store:
        header = request.headers.get("authorization")
        token = bearer_token(header.encode()) if header else None
        key = token.decode() if token else None
        if key not in clients:
            if len(clients) > 16:  # one client per token seen; a handful at most
                for client in clients.values():
                    await client.close()
                clients.clear()
            clients[key] = HttpStore(base, token=key)
        return clients[key]

    app.include_router(create_views(store_for))
    _add_pages(app)

    @app.get("/v1/{path:path}", include_in_schema=False)
    async def passthrough(request: Request, path: str) -> Response:
        segments, problem = forwarded_segments(request.scope.get("raw_path") or b"")
        if problem is not None:
            return JSONResponse(
                {"error": {"type": "InvalidInputError", "message": problem, "field": "path"}},
                status_code=400,
            )
        headers = {}
        if "authorization" in request.headers:
            headers["Authorization"] = request.headers["authorization"]
        # encoded=True: the path goes as built here, with nothing resolved or decoded again
        url = URL(f"{base}/v1/{'/'.join(quote(s, safe='') for s in segments)}", encoded=True)
        async with session["http"].get(
            url, params=list(request.query_params.multi_items()), headers=headers
        ) as upstream:
            body = await upstream.read()
            kept = {
                k: v
                for k, v in upstream.headers.items()
                if k.lower() in ("content-type", "www-authenticate")
            }
            return Response(body, status_code=upstream.status, headers=kept)

    return app


def forwarded_segments(raw_path: bytes) -> tuple[list[str], str | None]:
    """The segments after ``/v1/`` of a request's path as the client sent it (percent-encoded),
    each decoded once; or the reason it is not passed on.

    Only the store's own ``/v1/...`` API is reachable: every segment, decoded, must be a name
    the store's routes or one of its ids (:mod:`agl._ids`): no ``/`` or ``%`` (encoded
    separators, double encoding), not empty, ``.`` or ``..`` (``%2e%2e`` included); and no
    ``\\`` either, which browsers read as ``/`` (a rollout id holding one is shown by the
    store server's own dashboard, not through this pass-through).
    """
    path = raw_path.decode("latin-1")
    if not path.startswith("/v1/"):
        return [], "the dashboard passes on /v1/... paths only"
    segments = []
    for raw in path.removeprefix("/v1/").split("/"):
        try:
            segment = unquote(raw, errors="strict")
        except UnicodeDecodeError:
            problem: str | None = "is not UTF-8 once decoded"
        else:
            problem = id_problem(segment, segment=True) or (
                "holds '\\', which browsers read as '/'" if "\\" in segment else None
            )
        if problem is not None:
            return [], (
                f"path segment {shown(raw)} {problem}; the dashboard passes on the store's "
                "own /v1/... paths only"
            )
        segments.append(segment)
    return segments, None


def _install_errors(app: FastAPI) -> None:
    def read_only(request: Request) -> Response:
        message = "the dashboard is read-only: only GET reaches the store"
        return JSONResponse(
            {"error": {"type": "InvalidInputError", "message": message}}, status_code=405
        )

    refuse_methods(app, read_only)

    @app.exception_handler(AglError)
    async def agl_error(_: Request, exc: AglError) -> JSONResponse:
        # the store's refusal, passed on as the store said it (401 stays 401)
        body: dict[str, Any] = {"error": exc.to_dict()}
        return JSONResponse(body, status_code=exc.status_code)
