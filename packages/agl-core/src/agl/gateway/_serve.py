"""Run the gateway: in the foreground (``agl gateway serve``) or on a background thread."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agl._serving import _server_auth as server_auth
from agl._serving._server_thread import ServerThread
from agl._serving._uvicorn import BODY_TIMEOUT, HEADER_TIMEOUT, run
from agl.gateway import _paths as paths
from agl.gateway._app import Gateway
from agl.store._base import Store
from agl.store._open import open_store

__all__ = ["GatewayServer", "check_bind_address", "serve"]


def check_bind_address(host: str, token: str | None) -> None:
    """Refuse to bind a non-loopback address without a token (see :mod:`agl._serving._server_auth`).

    Raises:
        InvalidInputError: ``host`` is reachable from other machines and ``token`` is empty.
    """
    server_auth.check_bind_address(host, token, server="the gateway", token_env="AGL_GATEWAY_TOKEN")


class GatewayServer(ServerThread):
    """The gateway on a background thread; ``port=0`` picks a free port.

    Example::

        with GatewayServer([vllm_url], "http://store:4747") as gateway:
            llm = agl.LLM(endpoint=gateway.rollout_url(rollout_id, attempt_id), model="policy")
    """

    thread_name = "agl-gateway"

    def __init__(
        self,
        upstreams: Sequence[str],
        store: str | Store,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        log_level: str = "warning",
        token: str | None = None,
        **options: Any,
    ) -> None:
        check_bind_address(host, token)
        super().__init__(host=host, port=port, log_level=log_level)
        self.token = token
        self._upstreams = list(upstreams)
        self._store = store
        self._options = options
        self.gateway: Gateway | None = None

    @property
    def url(self) -> str:
        """The gateway's base URL (empty until started)."""
        return self.base_url

    @property
    def endpoint_template(self) -> str:
        """The endpoint to publish in an :class:`~agl.LLM` resource served through this gateway.

        It holds ``{rollout_id}`` and ``{attempt_id}`` placeholders, which the runner fills in
        for each attempt (:meth:`agl.LLM.for_attempt`).
        """
        return self.base_url + paths.OPENAI

    def rollout_url(self, rollout_id: str, attempt_id: str) -> str:
        """The OpenAI base URL an agent uses for one attempt of a rollout."""
        return self.base_url + paths.OPENAI.format(rollout_id=rollout_id, attempt_id=attempt_id)

    def create_app(self) -> Any:
        store = open_store(self._store) if isinstance(self._store, str) else self._store
        self.gateway = Gateway(
            self._upstreams,
            store,
            close_store=isinstance(self._store, str),
            token=self.token,
            **self._options,
        )
        return self.gateway.app


def serve(
    upstreams: Sequence[str],
    store: str | Store,
    *,
    host: str = "127.0.0.1",
    port: int = 4748,
    log_level: str = "info",
    token: str | None = None,
    header_timeout: float = HEADER_TIMEOUT,
    body_timeout: float = BODY_TIMEOUT,
    **options: Any,
) -> None:
    """Serve the gateway until interrupted (refused beyond loopback without a ``token``);
    ``header_timeout`` and ``body_timeout`` bound half-sent requests
    (:mod:`agl._serving._uvicorn`)."""

    check_bind_address(host, token)
    opened = open_store(store) if isinstance(store, str) else store
    gateway = Gateway(upstreams, opened, close_store=True, token=token, **options)
    run(
        gateway.app,
        host=host,
        port=port,
        log_level=log_level,
        header_timeout=header_timeout,
        body_timeout=body_timeout,
    )
