"""Run the store server: in the foreground (``agl store serve``) or in a background thread.

A server bound beyond loopback without a token is refused: anyone who can reach the port could
otherwise read every trace and enqueue work.
"""

from __future__ import annotations

from typing import Any

from agl._serving import _server_auth as server_auth
from agl._serving._server_thread import ServerThread
from agl._serving._uvicorn import BODY_TIMEOUT, HEADER_TIMEOUT, run
from agl.store._base import Store
from agl.store._open import open_store
from agl.store._server import DEFAULT_MAX_BODY_BYTES, create_app

__all__ = ["DEFAULT_PORT", "StoreServer", "check_bind_address", "serve"]

DEFAULT_PORT = 4747


def check_bind_address(host: str, token: str | None) -> None:
    """Refuse to bind a non-loopback address without a token (see :mod:`agl._serving._server_auth`).

    Raises:
        InvalidInputError: ``host`` is reachable from other machines and ``token`` is empty.
    """
    server_auth.check_bind_address(host, token, server="the store", token_env="AGL_STORE_TOKEN")


def serve(
    db: str | Store,
    *,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    token: str | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    log_level: str = "info",
    dashboard: bool = True,
    header_timeout: float = HEADER_TIMEOUT,
    body_timeout: float = BODY_TIMEOUT,
) -> None:
    """Serve the store at ``db`` (a URL of one of core's stores, or a store, which it closes at
    the end) until interrupted (SIGINT/SIGTERM stop it cleanly); with ``dashboard``, the
    dashboard at ``/``. ``header_timeout`` and ``body_timeout`` bound half-sent requests
    (:mod:`agl._serving._uvicorn`)."""

    check_bind_address(host, token)
    store = open_store(db) if isinstance(db, str) else db
    app = create_app(
        store, token=token, max_body_bytes=max_body_bytes, close_store=True, dashboard=dashboard
    )
    run(
        app,
        host=host,
        port=port,
        log_level=log_level,
        header_timeout=header_timeout,
        body_timeout=body_timeout,
    )


class StoreServer(ServerThread):
    """A store server on a background thread, for tests, benchmarks and single-machine runs.

    ``StoreServer("sqlite:///runs/agl.db")`` opens the store itself and closes it on exit; pass
    a :class:`~agl.store._base.Store` to serve one you own. ``port=0`` picks a free port;
    :attr:`url` says which.

    Example::

        with StoreServer("memory://") as server:
            async with agl.open_store(server.url) as store:
                ...
    """

    thread_name = "agl-store-server"

    def __init__(
        self,
        store: str | Store,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        log_level: str = "warning",
    ) -> None:
        check_bind_address(host, token)
        super().__init__(host=host, port=port, log_level=log_level)
        self._store_spec = store
        self._token = token
        self._max_body_bytes = max_body_bytes

    @property
    def url(self) -> str:
        """The server's base URL (empty until started)."""
        return self.base_url

    def create_app(self) -> Any:
        owns_store = isinstance(self._store_spec, str)
        store = (
            open_store(self._store_spec) if isinstance(self._store_spec, str) else self._store_spec
        )
        return create_app(
            store,
            token=self._token,
            max_body_bytes=self._max_body_bytes,
            close_store=owns_store,
        )
