"""The ``agl`` command line."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer
from rich.console import Console

from agl.errors import AglError

app = typer.Typer(
    name="agl",
    help="Train any AI agent with RL, prompt optimization and fine-tuning.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
store_app = typer.Typer(help="Run or inspect a store.", no_args_is_help=True)
app.add_typer(store_app, name="store")
gateway_app = typer.Typer(help="Run the LLM gateway.", no_args_is_help=True)
app.add_typer(gateway_app, name="gateway")

console = Console(stderr=True)


@app.command()
def version() -> None:
    """Print agl's version."""
    from agl import __version__

    typer.echo(__version__)


@store_app.command("serve")
def store_serve(
    db: Annotated[
        str,
        typer.Option(help="Store to serve: sqlite:///path.db (durable) or memory://."),
    ] = "sqlite:///agl.db",
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 4747,
    token: Annotated[
        str | None,
        typer.Option(
            envvar="AGL_STORE_TOKEN",
            help="Require 'Authorization: Bearer TOKEN' on every request. Needed to bind "
            "anything but loopback.",
        ),
    ] = None,
    max_body_mb: Annotated[float, typer.Option(help="Largest request body, in MiB.")] = 64.0,
    log_level: Annotated[str, typer.Option(help="uvicorn log level.")] = "info",
) -> None:
    """Serve a store over HTTP for runners and trainers on other processes or machines."""
    from agl.store.serve import check_bind_address, serve

    try:
        check_bind_address(host, token)
        console.print(
            f"[bold]agl store[/] serving [cyan]{db}[/] on http://{host}:{port}"
            + (" (token required)" if token else "")
        )
        serve(
            db,
            host=host,
            port=port,
            token=token,
            max_body_bytes=int(max_body_mb * 1024 * 1024),
            log_level=log_level,
        )
    except AglError as exc:
        console.print(f"[red]error:[/] {exc.message}")
        raise typer.Exit(2) from None


@store_app.command("stats")
def store_stats(
    store: Annotated[str, typer.Option(help="Store URL.")] = "sqlite:///agl.db",
) -> None:
    """Print counts of what a store holds, as JSON."""
    from agl.store import open_store

    async def read() -> str:
        async with open_store(store) as opened:
            return (await opened.statistics()).model_dump_json(indent=2)

    try:
        typer.echo(asyncio.run(read()))
    except AglError as exc:
        console.print(f"[red]error:[/] {exc.message}")
        raise typer.Exit(2) from None


@gateway_app.command("serve")
def gateway_serve(
    upstream: Annotated[
        list[str],
        typer.Option(help="An OpenAI-compatible base URL (…/v1); repeat for several."),
    ],
    store: Annotated[str, typer.Option(help="Store URL the call spans go to.")],
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 4748,
    enforce_resources: Annotated[
        bool,
        typer.Option(help="Use the model and sampling parameters of the rollout's LLM resource."),
    ] = False,
    upstream_api_key: Annotated[
        str | None,
        typer.Option(envvar="AGL_UPSTREAM_API_KEY", help="Bearer token for the upstreams."),
    ] = None,
    log_level: Annotated[str, typer.Option(help="uvicorn log level.")] = "info",
) -> None:
    """Serve the OpenAI-compatible gateway that records every LLM call with its token ids."""
    from agl.gateway.serve import serve

    try:
        console.print(
            f"[bold]agl gateway[/] on http://{host}:{port} -> {', '.join(upstream)}; "
            f"spans to {store}"
        )
        serve(
            upstream,
            store,
            host=host,
            port=port,
            log_level=log_level,
            enforce_resources=enforce_resources,
            upstream_api_key=upstream_api_key,
        )
    except AglError as exc:
        console.print(f"[red]error:[/] {exc.message}")
        raise typer.Exit(2) from None


def main() -> None:
    """Entry point of the ``agl`` script."""
    app()


__all__ = ["app", "main"]
