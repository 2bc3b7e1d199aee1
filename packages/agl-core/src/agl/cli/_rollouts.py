"""``agl rollouts``: list a store's rollouts, or show one with its attempts and spans."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypeVar
from urllib.parse import urlsplit

import typer

from agl._errors import AglError, InvalidInputError, NotFoundError
from agl._rollouts import RolloutMode, RolloutStatus
from agl.cli._common import JsonOption, StoreOption, fail, print_json
from agl.store._checks import redact

if TYPE_CHECKING:
    from agl._rollouts import Attempt, Rollout, RolloutPage
    from agl._spans import Span
    from agl.store._base import Store

T = TypeVar("T")

rollouts_app = typer.Typer(help="Inspect the rollouts in a store.", no_args_is_help=True)


def _read_store(url: str, read: Callable[[Store], Awaitable[T]]) -> T:
    """Run ``read`` against the store at ``url``; a store error is one red line and exit 1."""
    from agl.plugins import open_store

    async def run() -> T:
        async with open_store(url) as store:
            return await read(store)

    try:
        _check_store_url(url)
        return asyncio.run(run())
    except AglError as exc:
        fail(exc, 1)


def _check_store_url(url: str) -> None:
    """Refuse a URL with a bad port, or naming no SQLite file (opening would create one).

    Several store servers may be named, comma-separated (``http://a:4747,http://b:4747``), as
    every client of them takes them: each is checked."""
    for one in url.split(",") if url.lower().startswith("http") else [url]:
        try:
            urlsplit(one.strip()).port  # noqa: B018 - parsing the port is the check
        except ValueError as exc:
            raise InvalidInputError(
                f"store URL {redact(one.strip())!r}: {exc}", field="store", value=redact(url)
            ) from None
    parts = urlsplit(url)
    path = parts.path[1:]
    if parts.scheme.lower() == "sqlite" and path and not Path(path).is_file():
        raise NotFoundError(
            f"no store file at {path} (from {url!r}); pass --store or set AGL_STORE",
            field="store",
            value=url,
        )


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

    from agl import _rollout_facts as rollout_facts
    from agl.cli import _rollout_views as rollout_views

    async def read(opened: Store) -> tuple[RolloutPage, dict[str, list[Span]]]:
        page = await opened.query_rollouts(status=status, mode=mode, limit=limit, offset=offset)
        claimed = [r for r in page.rollouts if r.latest_attempt_id is not None]
        spans = await asyncio.gather(
            *(opened.query_spans(r.rollout_id, r.latest_attempt_id) for r in claimed)
        )
        return page, {r.rollout_id: s for r, s in zip(claimed, spans, strict=True)}

    page, latest_spans = _read_store(store, read)
    if as_json:
        print_json(rollout_facts.rollout_page_json(page, latest_spans))
    else:
        Console().print(rollout_views.rollout_page_table(page, latest_spans))


@rollouts_app.command("show")
def rollouts_show(
    rollout_id: Annotated[str, typer.Argument(help="The rollout's id.")],
    store: StoreOption = "sqlite:///agl.db",
    as_json: JsonOption = False,
) -> None:
    """Show one rollout: its fields, each attempt's span tree, its rewards and LLM calls."""
    from rich.console import Console

    from agl import _rollout_facts as rollout_facts
    from agl.cli import _rollout_views as rollout_views

    async def read(opened: Store) -> tuple[Rollout, list[Attempt], list[Span]]:
        rollout = await opened.get_rollout(rollout_id)
        attempts = await opened.query_attempts(rollout_id)
        return rollout, attempts, await opened.query_spans(rollout_id)

    rollout, attempts, spans = _read_store(store, read)
    if as_json:
        print_json(rollout_facts.rollout_detail_json(rollout, attempts, spans))
    else:
        Console().print(rollout_views.rollout_detail_view(rollout, attempts, spans))
