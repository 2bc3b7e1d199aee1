"""``agl store``: serve a store over HTTP, or count what one holds."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer

from agl._errors import AglError
from agl._secrets import secret_option
from agl._serving._uvicorn import BODY_TIMEOUT, HEADER_TIMEOUT
from agl.cli._common import (
    BodyTimeoutOption,
    HeaderTimeoutOption,
    StoreOption,
    console,
    fail,
)

store_app = typer.Typer(help="Run or inspect a store.", no_args_is_help=True)


@store_app.command("serve")
def store_serve(
    db: Annotated[
        str,
        typer.Option(
            "--store",
            "--db",
            help="Store to serve: sqlite:///path.db (durable), postgresql://user@host:5432/db "
            "(the password from PGPASSWORD or a password file) or memory://. --db is the "
            "same option under its former name.",
        ),
    ] = "sqlite:///agl.db",
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 4747,
    token: Annotated[
        str | None,
        typer.Option(
            envvar="AGL_STORE_TOKEN",
            help="Require 'Authorization: Bearer TOKEN' on every request. Needed to bind "
            "anything but loopback. Visible in `ps` to every user: prefer --token-file or "
            "the environment variable.",
        ),
    ] = None,
    token_file: Annotated[
        Path | None,
        typer.Option(
            envvar="AGL_STORE_TOKEN_FILE",
            help="Read the token from this file (one line), once at start.",
        ),
    ] = None,
    max_body_mb: Annotated[float, typer.Option(help="Largest request body, in MiB.")] = 64.0,
    header_timeout: HeaderTimeoutOption = HEADER_TIMEOUT,
    body_timeout: BodyTimeoutOption = BODY_TIMEOUT,
    log_level: Annotated[str, typer.Option(help="uvicorn log level.")] = "info",
    dashboard: Annotated[
        bool, typer.Option(help="Serve the dashboard at / (read-only; behind the token).")
    ] = True,
) -> None:
    """Serve a store over HTTP for runners and trainers on other processes or machines, with
    the dashboard at http://HOST:PORT/.

    Keep secrets off the command line, where `ps` shows them: the token in --token-file or
    AGL_STORE_TOKEN, a PostgreSQL password in PGPASSWORD or a password file (PGPASSFILE,
    ~/.pgpass), with no password in the --db URL.
    """
    try:
        from agl._serving._server_thread import require_server_extra

        require_server_extra("agl store serve")
        token = secret_option(token, token_file, option="--token", file_option="--token-file")
        from agl.store._checks import redact
        from agl.store._serve import check_bind_address, serve

        check_bind_address(host, token)
        from agl.plugins import open_store

        store = open_store(db)
        console.print(
            f"[bold]agl store[/] serving [cyan]{redact(db)}[/] on http://{host}:{port}"
            + (" (token required)" if token else ""),
            soft_wrap=True,
        )
        if dashboard:
            console.print(f"dashboard: http://{host}:{port}/", soft_wrap=True)
        serve(
            store,
            host=host,
            port=port,
            token=token,
            max_body_bytes=int(max_body_mb * 1024 * 1024),
            log_level=log_level,
            dashboard=dashboard,
            header_timeout=header_timeout,
            body_timeout=body_timeout,
        )
    except AglError as exc:
        fail(exc, 2)


@store_app.command("stats")
def store_stats(
    store: StoreOption = "sqlite:///agl.db",
) -> None:
    """Print counts of what a store holds, as JSON."""
    from agl.plugins import open_store

    async def read() -> str:
        async with open_store(store) as opened:
            return (await opened.statistics()).model_dump_json(indent=2)

    try:
        typer.echo(asyncio.run(read()))
    except AglError as exc:
        fail(exc, 2)
