"""The gateways of a run, started on first use: :class:`~agl._train._context.Gateways`, for
the trainer."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from agl.store._base import Store

if TYPE_CHECKING:
    from agl.gateway._serve import GatewayServer

__all__ = ["GatewayPool"]


class GatewayPool:
    """Starts a gateway on first use for each set of upstreams and stops them all at the end.

    One model served means one gateway; a per-agent run training two models (each algorithm
    serving its own) gets one gateway in front of each. The gateway's app is imported on first
    use, so a run that serves no LLM never needs the ``server`` extra.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self.servers: dict[tuple[str, ...], GatewayServer] = {}

    async def start(self, upstreams: list[str], enforce_resources: bool) -> str:
        """The endpoint template of the gateway in front of ``upstreams`` (started if new)."""
        from agl._serving._server_thread import require_server_extra

        require_server_extra("serving an LLM through agl's gateway (ctx.serve_llm)")
        from agl.gateway._serve import GatewayServer

        key = tuple(upstreams)
        server = self.servers.get(key)
        if server is None:
            server = GatewayServer(upstreams, self.store, enforce_resources=enforce_resources)
            await asyncio.to_thread(server.start)
            self.servers[key] = server
        return str(server.endpoint_template)

    async def flush(self) -> None:
        """Wait until the calls the gateways recorded so far are in the store."""
        for server in self.servers.values():
            if server.gateway is not None:
                await server.gateway.sender.flush_async()

    def stop(self) -> None:
        """Stop every gateway started."""
        for server in self.servers.values():
            server.stop()
