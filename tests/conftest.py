"""Test-suite wide hooks and fixtures.

- ``gpu``-marked tests skip cleanly on machines without CUDA.
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


LONG_SECONDS = 600
"""Tests allowed this long or longer (a ``timeout`` marker: the learning runs, the installs)
are the long ones :func:`_long_ones_first` starts first."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _skip_gpu_tests_without_cuda(items)
    workers = getattr(config, "workerinput", {}).get("workercount")
    if workers:
        items[:] = _long_ones_first(items, int(workers))


def _allowed(item: pytest.Item) -> float:
    marker = item.get_closest_marker("timeout")
    return float(marker.args[0]) if marker is not None and marker.args else 0.0


def _long_ones_first(items: list[pytest.Item], workers: int) -> list[pytest.Item]:
    """The order for ``workers`` pytest-xdist workers: each starts with its share of the long
    tests, so that none is left running alone at the end while the other workers are done.

    xdist's ``worksteal`` hands the first worker the first 1/n of the collection, the next the
    next, and so on, and later moves tests from the end of a busy worker's queue to an idle
    one. The long tests, in groups by module (their module fixtures are built once), are
    dealt to the queues by their allowed time; each queue starts with the group that has
    its longest test, that test first. The other tests follow in their own order. Every
    worker collects the same items, so computes the same order.
    """
    long = [item for item in items if _allowed(item) >= LONG_SECONDS]
    if not long or workers < 2:
        return items
    groups: dict[str, list[pytest.Item]] = {}
    for item in long:
        groups.setdefault(item.nodeid.split("::")[0], []).append(item)
    dealt: list[list[list[pytest.Item]]] = [[] for _ in range(workers)]
    loads = [0.0] * workers
    for group in sorted(groups.values(), key=lambda g: -sum(map(_allowed, g))):
        lightest = loads.index(min(loads))
        dealt[lightest].append(sorted(group, key=lambda item: -_allowed(item)))
        loads[lightest] += sum(map(_allowed, group))
    # in each queue the group with the longest test first, its longest test first
    queues = [
        [item for group in sorted(mine, key=lambda g: -_allowed(g[0])) for item in group]
        for mine in dealt
    ]
    chosen = {id(item) for item in long}
    rest = [item for item in items if id(item) not in chosen]
    ordered: list[pytest.Item] = []
    left = len(items)
    for index, queue in enumerate(queues):
        size = left // (workers - index)  # what worksteal sends this worker first
        fill = max(0, size - len(queue))
        ordered += queue + rest[:fill]
        del rest[:fill]
        left -= size
    return ordered + rest


def _skip_gpu_tests_without_cuda(items: list[pytest.Item]) -> None:
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
