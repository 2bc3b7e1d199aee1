"""``agl dashboard``: the dashboard on its own, in front of any store server."""

from __future__ import annotations

from typing import Annotated

import typer

from agl._errors import AglError
from agl.cli._common import console, fail


def dashboard_command(
    store: Annotated[
        str, typer.Option(help="The store server to show: its URL, e.g. http://host:4747.")
    ] = "http://127.0.0.1:4747",
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 4748,
    log_level: Annotated[str, typer.Option(help="uvicorn log level.")] = "warning",
) -> None:
    """Serve the dashboard for a store server (read-only; the store's token, if it has one,
    is asked for in the browser and passed on)."""
    try:
        from agl._serving._server_thread import require_server_extra

        require_server_extra("agl dashboard")
        if not store.startswith(("http://", "https://")):
            from agl._errors import InvalidInputError

            raise InvalidInputError(
                f"--store must be a store server's http(s) URL, got {store!r} (serve a database "
                "with 'agl store serve', which shows the dashboard itself)",
                field="store",
                value=store,
            )

        from agl.dashboard import create_dashboard_app

        console.print(
            f"[bold]agl dashboard[/] for [cyan]{store}[/] on http://{host}:{port}", soft_wrap=True
        )
        from agl._serving._uvicorn import run

        run(create_dashboard_app(store), host=host, port=port, log_level=log_level)
    except AglError as exc:
        fail(exc, 2)
