"""Run an ASGI app with uvicorn on a background thread (store, gateway, policy and test servers).

Public for plugins that serve something over HTTP next to a run (agl-torch's policy server).
"""

from __future__ import annotations

import abc
import asyncio
import threading
import time
from types import TracebackType
from typing import Any, Self

from agl._errors import AglError

__all__ = ["ServerThread", "require_server_extra"]

_SERVER_MODULES = ("fastapi", "uvicorn")


def require_server_extra(purpose: str) -> None:
    """Fail with the install command when agl's HTTP servers cannot run here.

    The store server, the gateway and their CLI commands need FastAPI and uvicorn, which
    ``agl-core`` installs only with its ``server`` extra.

    Args:
        purpose: What needs a server, for the message ("n_runners=8 serves the store ...").

    Raises:
        AglError: FastAPI or uvicorn is not installed.
    """
    import importlib.util

    missing = [name for name in _SERVER_MODULES if importlib.util.find_spec(name) is None]
    if missing:
        raise AglError(
            f"{purpose}, which needs agl's HTTP server ({', '.join(missing)} not installed): "
            "pip install 'agl-core[server]'"
        )


class ServerThread(abc.ABC):
    """An ASGI app served by uvicorn on a daemon thread; ``port=0`` picks a free port.

    Subclasses build the app in :meth:`create_app` (called by :meth:`start`), so a server can be
    configured first and started later.
    """

    thread_name = "agl-server"

    def __init__(
        self, *, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning"
    ) -> None:
        self.host = host
        self.port = port
        self.log_level = log_level
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self.base_url = ""
        """``http://host:port`` once started."""

    @abc.abstractmethod
    def create_app(self) -> Any:
        """Return the ASGI app to serve."""

    def start(self, timeout: float = 30.0) -> str:
        """Start serving; return :attr:`base_url` once the server accepts connections."""
        import uvicorn

        from agl._serving._uvicorn import uvicorn_config

        config = uvicorn_config(
            self.create_app(), host=self.host, port=self.port, log_level=self.log_level
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=lambda: asyncio.run(self._server.serve()), name=self.thread_name, daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise AglError(f"the server on {self.host}:{self.port} did not start")
            time.sleep(0.01)
        port = self._server.servers[0].sockets[0].getsockname()[1]
        host = f"[{self.host}]" if ":" in self.host else self.host
        self.base_url = f"http://{host}:{port}"
        return self.base_url

    def stop(self) -> None:
        """Stop serving and wait for the server thread to end."""
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=30)
            self._server = None
            self._thread = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
