"""What every ``agl`` command shares: the error console, common options, error exits."""

from __future__ import annotations

import json
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from agl._errors import AglError

__all__ = [
    "BodyTimeoutOption",
    "HeaderTimeoutOption",
    "JsonOption",
    "StoreOption",
    "console",
    "fail",
    "print_json",
]

console = Console(stderr=True, soft_wrap=True)
"""Messages and errors go to stderr; a message is never broken mid-path."""

StoreOption = Annotated[
    str,
    typer.Option(
        "--store",
        envvar="AGL_STORE",
        help="Store URL: sqlite:///path.db, http://host:port or memory://. A store server's "
        "token comes from AGL_STORE_TOKEN, or the file AGL_STORE_TOKEN_FILE names.",
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
HeaderTimeoutOption = Annotated[
    float,
    typer.Option(
        min=0.001,
        help="Seconds a request's headers may take to arrive, from its first byte (408 after).",
    ),
]
BodyTimeoutOption = Annotated[
    float,
    typer.Option(
        min=0.001, help="Seconds that may pass between two reads of a request's body (408 after)."
    ),
]


def fail(exc: AglError, code: int) -> NoReturn:
    """Print ``exc``'s message as one red line and exit with ``code``."""
    console.print(f"[red]error:[/] {escape(exc.message)}", highlight=False)
    raise typer.Exit(code) from None


def print_json(data: Any) -> None:
    """Print ``data`` as indented JSON on stdout (non-ASCII kept as is)."""
    typer.echo(json.dumps(data, indent=2, ensure_ascii=False))
