"""``agl runner``: join a run from any machine that can reach its store."""

from __future__ import annotations

import logging
import os
import sys
from typing import Annotated

import typer

from agl._errors import AglError
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
            "(see `agl plugins`; repeatable)."
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
    """
    from agl._agent import load_agent
    from agl._runner import Runner

    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    for directory in [*(path or []), os.getcwd()]:
        if directory not in sys.path:
            sys.path.insert(0, directory)
    try:
        lit = load_agent(agent)
        runner = Runner(
            lit,
            store,
            concurrency=concurrency,
            worker_id=worker_id,
            max_rollouts=max_rollouts,
            drain_timeout=drain_timeout,
            instrument=instrument or None,
        )
        console.print(
            f"[bold]agl runner[/] {runner.worker_id}: agent [cyan]{lit.name}[/], "
            f"store {store}, concurrency {concurrency}"
        )
        stats = runner.run_sync()
    except AglError as exc:
        fail(exc, 1)
    console.print(
        f"[bold]agl runner[/] done: {stats.claimed} claimed, {stats.succeeded} succeeded, "
        f"{stats.failed} failed, {stats.timed_out} timed out, {stats.released} released, "
        f"{stats.abandoned} ended by the store"
    )
