"""``agl runner``: join a run from any machine that can reach its store."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from agl._errors import AglError
from agl._secrets import secret_option
from agl.cli._common import console, fail


def runner_command(
    agent: Annotated[
        str,
        typer.Option(help="The agent to run, as package.module:function (or a LitAgent class)."),
    ],
    store: Annotated[
        str,
        typer.Option(envvar="AGL_STORE", help="The store: http://host:port of `agl store serve`."),
    ],
    concurrency: Annotated[int, typer.Option(help="Rollouts run at once.", min=1)] = 16,
    worker_id: Annotated[
        str | None,
        typer.Option(
            help="This runner's name in the store: 1 to 256 characters, no control characters "
            "(default: host-pid)."
        ),
    ] = None,
    max_rollouts: Annotated[
        int | None, typer.Option(help="Exit after claiming this many rollouts.", min=1)
    ] = None,
    drain_timeout: Annotated[
        float,
        typer.Option(
            "--drain-timeout",
            "--grace-seconds",
            help="On SIGINT/SIGTERM, seconds to let running rollouts finish before releasing "
            "them to the queue.",
            min=0,
        ),
    ] = 30.0,
    path: Annotated[
        list[str] | None,
        typer.Option("--path", help="Add a directory to the import path (repeatable)."),
    ] = None,
    instrument: Annotated[
        list[str] | None,
        typer.Option(
            help="Trace a library's calls: openai, or an instrumentor a plugin provides "
            "(see `agl plugins`; repeatable). Adds to those `import agl.auto` turns on.",
        ),
    ] = None,
    auto_instrument: Annotated[
        bool,
        typer.Option(
            help="When the agent's module imports agl.auto, trace every installed library "
            "besides --instrument's; --no-auto-instrument: only --instrument's.",
        ),
    ] = True,
    store_token_file: Annotated[
        Path | None,
        typer.Option(
            envvar="AGL_STORE_TOKEN_FILE",
            help="Read the store server's token from this file (one line), once at start "
            "(instead of AGL_STORE_TOKEN).",
        ),
    ] = None,
    gateway_token_file: Annotated[
        Path | None,
        typer.Option(
            envvar="AGL_GATEWAY_TOKEN_FILE",
            help="Read the gateway's token from this file (one line), once at start "
            "(instead of AGL_GATEWAY_TOKEN); agents get it as their LLM's api_key.",
        ),
    ] = None,
    log_level: Annotated[str, typer.Option(help="Python log level.")] = "warning",
) -> None:
    """Claim rollouts from a store and run the agent on them, until stopped.

    SIGINT/SIGTERM stops claiming, lets running rollouts finish (up to --drain-timeout, 30 s
    by default), and releases every claim it will not finish back to the queue, those it had
    not started included, without using up a try; a second signal releases at once. SIGKILL
    leaves them to the store: after the rollout's unresponsive_seconds, a claim never started
    is released and a running one ends unresponsive (retried up to max_attempts).

    The first line it prints names the instrumentors in use. Tokens come from files
    (--store-token-file, --gateway-token-file) or the environment (AGL_STORE_TOKEN,
    AGL_GATEWAY_TOKEN), never the command line, where `ps` shows them.

    Spans the store cannot take for now (it is away, its disk is full) are kept and sent again,
    up to AGL_SPAN_BUFFER_MB of them (64 MiB by default); a warning says what a full buffer
    dropped.
    """
    from agl._run._agent import load_agent
    from agl._run._runner import Runner
    from agl.store._checks import redact

    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    for directory in [*(path or []), os.getcwd()]:
        if directory not in sys.path:
            sys.path.insert(0, directory)
    try:
        store_token = secret_option(
            os.environ.get("AGL_STORE_TOKEN") or None,
            store_token_file,
            option="AGL_STORE_TOKEN",
            file_option="--store-token-file",
        )
        if store_token is not None:  # the store client, and any the agent opens, read it there
            os.environ.pop("AGL_STORE_TOKEN_FILE", None)
            os.environ["AGL_STORE_TOKEN"] = store_token
        gateway_token = secret_option(
            os.environ.get("AGL_GATEWAY_TOKEN") or None,
            gateway_token_file,
            option="AGL_GATEWAY_TOKEN",
            file_option="--gateway-token-file",
        )
        lit = load_agent(agent)
        runner = Runner(
            lit,
            store,
            concurrency=concurrency,
            worker_id=worker_id,
            max_rollouts=max_rollouts,
            drain_timeout=drain_timeout,
            instrument=instrument,
            auto_instrument=auto_instrument,
            gateway_token=gateway_token,
        )
        console.print(
            f"[bold]agl runner[/] {runner.worker_id}: agent [cyan]{lit.name}[/], "
            f"store {redact(store)}, concurrency {concurrency}, "
            f"{_tracing(runner.instrument, instrument or [])}",
            soft_wrap=True,
        )
        stats = runner.run_sync()
    except AglError as exc:
        fail(exc, 1)
    console.print(
        f"[bold]agl runner[/] done: {stats.claimed} claimed, {stats.succeeded} succeeded, "
        f"{stats.failed} failed, {stats.timed_out} timed out, {stats.released} released, "
        f"{stats.abandoned} ended by the store"
    )


def _tracing(active: list[str], asked: list[str]) -> str:
    """What the start line says about instrumentors: which are in use, and where from."""
    if not active:
        return "tracing nothing (--instrument NAME traces a library; `agl plugins` lists them)"
    automatic = [name for name in active if name not in asked]
    origin = f"; {', '.join(automatic)} from import agl.auto" if automatic and asked else ""
    if automatic and not asked:
        origin = " (import agl.auto: every installed one)"
    return f"tracing {', '.join(active)}{origin}"
