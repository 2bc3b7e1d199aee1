"""``agl gateway serve``: the OpenAI-compatible gateway as a process of its own."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from agl._errors import AglError, InvalidInputError
from agl._secrets import secret_option
from agl._serving._uvicorn import BODY_TIMEOUT, HEADER_TIMEOUT
from agl.cli._common import BodyTimeoutOption, HeaderTimeoutOption, console, fail

gateway_app = typer.Typer(help="Run the LLM gateway.", no_args_is_help=True)


@gateway_app.command("serve")
def gateway_serve(
    upstream: Annotated[
        list[str],
        typer.Option(help="An OpenAI-compatible base URL (…/v1); repeat for several."),
    ],
    store: Annotated[
        str,
        typer.Option(
            help="Store URL the call spans go to: http://host:port (several servers: "
            "http://a:4747,http://b:4747), sqlite:///path.db or postgresql://user@host:5432/db."
        ),
    ],
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
    upstream_api_key_file: Annotated[
        Path | None,
        typer.Option(
            envvar="AGL_UPSTREAM_API_KEY_FILE",
            help="Read the upstreams' token from this file (one line), once at start.",
        ),
    ] = None,
    token: Annotated[
        str | None,
        typer.Option(
            envvar="AGL_GATEWAY_TOKEN",
            help="Require 'Authorization: Bearer TOKEN' on every request (agents send it as "
            "their API key; runners give it to them from AGL_GATEWAY_TOKEN). Needed to bind "
            "anything but loopback. Visible in `ps` to every user: prefer --token-file or the "
            "environment variable.",
        ),
    ] = None,
    token_file: Annotated[
        Path | None,
        typer.Option(
            envvar="AGL_GATEWAY_TOKEN_FILE",
            help="Read the token from this file (one line), once at start.",
        ),
    ] = None,
    store_token: Annotated[
        str | None,
        typer.Option(envvar="AGL_STORE_TOKEN", help="The store server's token, if it has one."),
    ] = None,
    store_token_file: Annotated[
        Path | None,
        typer.Option(
            envvar="AGL_STORE_TOKEN_FILE",
            help="Read the store server's token from this file (one line), once at start.",
        ),
    ] = None,
    send_delay: Annotated[
        float,
        typer.Option(
            min=0.0, help="Longest wait, in seconds, before a recorded call is sent to the store."
        ),
    ] = 0.1,
    span_buffer_mb: Annotated[
        float | None,
        typer.Option(
            min=0.001,
            envvar="AGL_SPAN_BUFFER_MB",
            help="Most recorded calls kept, in MiB of encoded spans, while the store cannot take "
            "them (unreachable, disk full); past it the oldest are dropped, with a warning. "
            "Default 64.",
        ),
    ] = None,
    max_body_mb: Annotated[
        float, typer.Option(min=0.001, help="Largest request body, in MiB (413 beyond).")
    ] = 64.0,
    header_timeout: HeaderTimeoutOption = HEADER_TIMEOUT,
    body_timeout: BodyTimeoutOption = BODY_TIMEOUT,
    log_level: Annotated[str, typer.Option(help="uvicorn log level.")] = "info",
) -> None:
    """Serve the OpenAI-compatible gateway that records every LLM call with its token ids.

    Keep its secrets off the command line, where `ps` shows them: give each as a file
    (--token-file, --store-token-file, --upstream-api-key-file) or an environment variable.
    """
    try:
        from agl._serving._server_thread import require_server_extra

        require_server_extra("agl gateway serve")
        token = secret_option(token, token_file, option="--token", file_option="--token-file")
        store_token = secret_option(
            store_token,
            store_token_file,
            option="--store-token",
            file_option="--store-token-file",
        )
        upstream_api_key = secret_option(
            upstream_api_key,
            upstream_api_key_file,
            option="--upstream-api-key",
            file_option="--upstream-api-key-file",
        )
        from agl.gateway._serve import check_bind_address, serve
        from agl.plugins import open_store
        from agl.store._checks import redact

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
            f"spans to {redact(store)}" + (" (token required)" if token else "")
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
            max_body_bytes=int(max_body_mb * 1024 * 1024),
            delay=send_delay,
            max_buffer_bytes=None if span_buffer_mb is None else int(span_buffer_mb * 1024 * 1024),
            header_timeout=header_timeout,
            body_timeout=body_timeout,
        )
    except AglError as exc:
        fail(exc, 2)
