"""The ``agl`` command line."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar
from urllib.parse import urlsplit

import typer
from rich.console import Console

from agl._cli_metrics import metrics_app
from agl._cli_runner import runner_command
from agl.errors import AglError, InvalidInputError, NotFoundError
from agl.rollouts import RolloutMode, RolloutStatus

if TYPE_CHECKING:
    from agl.rollouts import Attempt, Rollout, RolloutPage
    from agl.spans import Span
    from agl.store.base import Store

T = TypeVar("T")

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
rollouts_app = typer.Typer(help="Inspect the rollouts in a store.", no_args_is_help=True)
app.add_typer(rollouts_app, name="rollouts")
app.add_typer(metrics_app, name="metrics", help="Show or plot a run's metrics.")
app.command("runner")(runner_command)

console = Console(stderr=True, soft_wrap=True)  # a message is never broken mid-path


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
    try:
        from agl.server_thread import require_server_extra

        require_server_extra("agl store serve")
        from agl.store.serve import check_bind_address, serve

        check_bind_address(host, token)
        console.print(
            f"[bold]agl store[/] serving [cyan]{db}[/] on http://{host}:{port}"
            + (" (token required)" if token else "")
        )
        from agl.plugins import open_store

        serve(
            open_store(db),
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
    from agl.plugins import open_store

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
    token: Annotated[
        str | None,
        typer.Option(
            envvar="AGL_GATEWAY_TOKEN",
            help="Require 'Authorization: Bearer TOKEN' on every request (agents send it as "
            "their API key; runners give it to them from AGL_GATEWAY_TOKEN). Needed to bind "
            "anything but loopback.",
        ),
    ] = None,
    store_token: Annotated[
        str | None,
        typer.Option(envvar="AGL_STORE_TOKEN", help="The store server's token, if it has one."),
    ] = None,
    send_delay: Annotated[
        float,
        typer.Option(
            min=0.0, help="Longest wait, in seconds, before a recorded call is sent to the store."
        ),
    ] = 0.1,
    log_level: Annotated[str, typer.Option(help="uvicorn log level.")] = "info",
) -> None:
    """Serve the OpenAI-compatible gateway that records every LLM call with its token ids."""
    try:
        from agl.server_thread import require_server_extra

        require_server_extra("agl gateway serve")
        from agl.gateway.serve import check_bind_address, serve
        from agl.plugins import open_store

        check_bind_address(host, token)
        if store.startswith("memory:"):
            raise InvalidInputError(
                f"the gateway's store must be one the runs share (http://host:port of `agl "
                f"store serve`), got {store!r}: a memory store lives and dies in this process",
                field="store",
                value=store,
            )
        http = store.startswith(("http://", "https://"))
        opened = open_store(store, token=store_token) if http else open_store(store)
        console.print(
            f"[bold]agl gateway[/] on http://{host}:{port} -> {', '.join(upstream)}; "
            f"spans to {store}" + (" (token required)" if token else "")
        )
        serve(
            upstream,
            opened,
            host=host,
            port=port,
            log_level=log_level,
            token=token,
            enforce_resources=enforce_resources,
            upstream_api_key=upstream_api_key,
            delay=send_delay,
        )
    except AglError as exc:
        console.print(f"[red]error:[/] {exc.message}")
        raise typer.Exit(2) from None


# --- agl rollouts -----------------------------------------------------------------------------

StoreOption = Annotated[
    str,
    typer.Option(
        "--store",
        envvar="AGL_STORE",
        help="Store URL: sqlite:///path.db, http://host:port or memory://.",
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


def _read_store(url: str, read: Callable[[Store], Awaitable[T]]) -> T:
    """Run ``read`` against the store at ``url``; a store error is one red line and exit 1."""
    from rich.markup import escape

    from agl.plugins import open_store

    async def run() -> T:
        async with open_store(url) as store:
            return await read(store)

    try:
        _check_store_url(url)
        return asyncio.run(run())
    except AglError as exc:
        console.print(f"[red]error:[/] {escape(exc.message)}")
        raise typer.Exit(1) from None


def _check_store_url(url: str) -> None:
    """Refuse a URL with a bad port, or naming no SQLite file (opening would create one)."""
    parts = urlsplit(url)
    try:
        parts.port  # noqa: B018 - parsing the port is the check
    except ValueError as exc:
        raise InvalidInputError(f"store URL {url!r}: {exc}", field="store", value=url) from None
    path = parts.path[1:]
    if parts.scheme.lower() == "sqlite" and path and not Path(path).is_file():
        raise NotFoundError(
            f"no store file at {path} (from {url!r}); pass --store or set AGL_STORE",
            field="store",
            value=url,
        )


def _print_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2, ensure_ascii=False))


@rollouts_app.command("list")
def rollouts_list(
    store: StoreOption = "sqlite:///agl.db",
    status: Annotated[
        list[RolloutStatus] | None, typer.Option(help="Only rollouts in this status; repeatable.")
    ] = None,
    mode: Annotated[RolloutMode | None, typer.Option(help="Only rollouts of this mode.")] = None,
    limit: Annotated[int, typer.Option(min=1, help="Rollouts to show.")] = 50,
    offset: Annotated[int, typer.Option(min=0, help="Rollouts to skip first.")] = 0,
    as_json: JsonOption = False,
) -> None:
    """List rollouts with their status, attempts, timing and latest reward."""
    from rich.console import Console

    from agl import inspect

    async def read(opened: Store) -> tuple[RolloutPage, dict[str, list[Span]]]:
        page = await opened.query_rollouts(status=status, mode=mode, limit=limit, offset=offset)
        claimed = [r for r in page.rollouts if r.latest_attempt_id is not None]
        spans = await asyncio.gather(
            *(opened.query_spans(r.rollout_id, r.latest_attempt_id) for r in claimed)
        )
        return page, {r.rollout_id: s for r, s in zip(claimed, spans, strict=True)}

    page, latest_spans = _read_store(store, read)
    if as_json:
        _print_json(inspect.rollout_page_json(page, latest_spans))
    else:
        Console().print(inspect.rollout_page_table(page, latest_spans))


@rollouts_app.command("show")
def rollouts_show(
    rollout_id: Annotated[str, typer.Argument(help="The rollout's id.")],
    store: StoreOption = "sqlite:///agl.db",
    as_json: JsonOption = False,
) -> None:
    """Show one rollout: its fields, each attempt's span tree, its rewards and LLM calls."""
    from rich.console import Console

    from agl import inspect

    async def read(opened: Store) -> tuple[Rollout, list[Attempt], list[Span]]:
        rollout = await opened.get_rollout(rollout_id)
        attempts = await opened.query_attempts(rollout_id)
        return rollout, attempts, await opened.query_spans(rollout_id)

    rollout, attempts, spans = _read_store(store, read)
    if as_json:
        _print_json(inspect.rollout_detail_json(rollout, attempts, spans))
    else:
        Console().print(inspect.rollout_detail_view(rollout, attempts, spans))


# --- agl plugins ------------------------------------------------------------------------------


@app.command("plugins")
def plugins(as_json: JsonOption = False) -> None:
    """List the plugins: what each provides, or why it is not in use.

    Plugins are entry points in group agl.plugins; the built-in plugin 'agl' comes first.
    Exits with 1 when a plugin is invalid (agl refuses to run until it is fixed or disabled).
    """
    import dataclasses

    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from agl.plugins import DISABLE_ENV, ENTRY_POINT_GROUP, PluginManager

    found = PluginManager().installed()
    invalid = [plugin.name for plugin in found if plugin.status == "invalid"]
    if as_json:
        data = {"group": ENTRY_POINT_GROUP, "plugins": [dataclasses.asdict(p) for p in found]}
        _print_json(data)
    else:
        table = Table(caption=f"{len(found)} plugin(s); entry point group {ENTRY_POINT_GROUP!r}")
        for column in ("name", "module", "distribution", "provides", "status"):
            table.add_column(column, overflow="fold")
        for plugin in found:
            provides = Text()
            for label, names in (
                ("algorithms", plugin.algorithms),
                ("instrumentors", plugin.instrumentors),
                ("stores", plugin.stores),
                ("credit assigners", plugin.credit_assigners),
                ("resource types", plugin.resource_types),
                ("hooks", plugin.hooks),
            ):
                if names:
                    provides.append(f"{label}: {', '.join(names)}\n")
            status = Text(
                plugin.status if plugin.error is None else f"{plugin.status}: {plugin.error}",
                style={"ok": "green", "disabled": "yellow"}.get(plugin.status, "red"),
            )
            for note in plugin.ignored:
                status.append(f"\nignored: {note}", style="yellow")
            provides.rstrip()
            distribution = " ".join(filter(None, (plugin.distribution, plugin.version)))
            table.add_row(
                Text(plugin.name),
                Text(plugin.module),
                Text(distribution or "-"),
                provides if provides.plain else Text("-"),
                status,
            )
        Console().print(table)
    if invalid:
        console.print(
            f"[red]error:[/] agl refuses to run with invalid plugins; fix them or set "
            f"{DISABLE_ENV}={','.join(invalid)}"
        )
        raise typer.Exit(1)


def main() -> None:
    """Entry point of the ``agl`` script."""
    app()


__all__ = ["app", "main"]
