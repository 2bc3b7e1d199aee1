"""Test-suite wide hooks and fixtures.

- ``gpu``-marked tests skip cleanly on machines without CUDA.
- ``slow``-marked tests run first, those with the longest ``timeout`` mark first of all, so
  that with pytest-xdist the longest ones start at once and the short ones fill in around
  them, instead of a long one starting last and the run waiting on it alone.
- anyio runs async tests on asyncio.
- The rig the framework-adapter tests share: a scripted OpenAI-compatible ``upstream`` (one per
  module), a memory ``store``, a ``tracer`` into it, and agl's ``gateway`` in front of the
  upstream (answering with ``echo``; a module overrides ``gateway`` for another script).
  Modules that define fixtures of the same names use their own.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    import agl
    from agl.gateway._serve import GatewayServer
    from agl.store._memory import MemoryStore
    from agl.testing.openai_server import OpenAIServer


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=_longest_first)  # a stable sort: otherwise in the order collected
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items:
        return
    try:
        import torch

        has_cuda = bool(torch.cuda.is_available())
    except ImportError:
        has_cuda = False
    if has_cuda:
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (none found)")
    for item in gpu_items:
        item.add_marker(skip)


def _longest_first(item: pytest.Item) -> tuple[bool, float]:
    timeout = item.get_closest_marker("timeout")
    allowed = float(timeout.args[0]) if timeout is not None and timeout.args else 0.0
    return item.get_closest_marker("slow") is None, -allowed


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def upstream() -> Iterator[OpenAIServer]:
    from agl.testing.openai_server import OpenAIServer

    with OpenAIServer() as server:
        yield server


@pytest.fixture
async def store() -> AsyncIterator[MemoryStore]:
    from agl.store._memory import MemoryStore

    async with MemoryStore() as store:
        yield store


@pytest.fixture
def tracer(store: MemoryStore) -> Iterator[agl.Tracer]:
    import agl

    with agl.Tracer(store) as tracer:
        yield tracer


@pytest.fixture
def gateway(upstream: OpenAIServer, store: MemoryStore) -> Iterator[GatewayServer]:
    from agl.gateway._serve import GatewayServer
    from agl.testing.openai_server import echo

    upstream.script = echo
    with GatewayServer([upstream.url], store) as server:
        yield server
