"""``ClosingStore.query_rollouts``: the arguments are checked once, for every backend, and a
backend answers ``_query_rollouts`` with the checked filter.

The conformance suite checks the fields every backend refuses; here, what the shared method
hands a backend, that a store over HTTP refuses a bad status before sending anything (while the
server still refuses one sent to it directly), and what a backend that answers no query says.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

import agl
from agl import InvalidInputError, RolloutPage, RolloutStatus
from agl.store import ClosingStore
from agl.store._serve import StoreServer
from agl.store._tx import RolloutFilter

pytestmark = pytest.mark.anyio


class _Recording(ClosingStore):
    """A backend that answers each query with an empty page and keeps what it was asked."""

    def __init__(self) -> None:
        self.asked: list[tuple[RolloutFilter, int, int]] = []

    async def close(self) -> None:
        pass

    async def _query_rollouts(self, where: RolloutFilter, limit: int, offset: int) -> RolloutPage:
        self.asked.append((where, limit, offset))
        return RolloutPage(rollouts=[], total=0, offset=offset, next_offset=None)


class _NoQueries(ClosingStore):
    async def close(self) -> None:
        pass


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def server() -> Iterator[StoreServer]:
    with StoreServer("memory://") as running:
        yield running


async def test_the_backend_gets_the_checked_filter_and_the_page_as_given() -> None:
    store = _Recording()
    await store.query_rollouts(
        "queuing", "train", 7, 3, search="ro-", since=5, until=9, newest_first=True
    )
    await store.query_rollouts([RolloutStatus.FAILED, "succeeded"], worker_id="w")
    first, second = store.asked
    assert first == (
        RolloutFilter(
            statuses=(RolloutStatus.QUEUING,),
            mode="train",
            search="ro-",
            since=5.0,
            until=9.0,
            newest_first=True,
        ),
        7,
        3,
    )
    assert isinstance(first[0].since, float)
    assert second == (
        RolloutFilter(statuses=(RolloutStatus.FAILED, RolloutStatus.SUCCEEDED), worker_id="w"),
        100,
        0,
    )


async def test_a_bad_filter_never_reaches_the_backend() -> None:
    store = _Recording()
    with pytest.raises(InvalidInputError) as caught:
        await store.query_rollouts([RolloutStatus.QUEUING, "nope"])
    assert caught.value.field == "status[1]"
    with pytest.raises(InvalidInputError) as caught:
        await store.query_rollouts(until=float("nan"))
    assert caught.value.field == "until"
    assert store.asked == []


@pytest.mark.parametrize("backend", ["memory", "http"])
async def test_a_bad_status_is_refused_naming_its_place_on_every_backend(
    backend: str, request: pytest.FixtureRequest
) -> None:
    url = "memory://" if backend == "memory" else request.getfixturevalue("server").url
    async with agl.open_store(url) as store:
        with pytest.raises(InvalidInputError) as caught:
            await store.query_rollouts(["queuing", "nope"])
    assert caught.value.field == "status[1]"
    assert caught.value.value == "nope"


async def test_the_server_still_refuses_a_bad_status_sent_to_it(server: StoreServer) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        answer = await client.get("/v1/rollouts", params={"status": "nope"})
    assert answer.status_code == 422
    assert "status" in answer.json()["error"]["field"]


async def test_a_backend_that_answers_no_query_says_which_it_is() -> None:
    store = _NoQueries()
    with pytest.raises(NotImplementedError, match="_NoQueries"):
        await store.query_rollouts()
    with pytest.raises(InvalidInputError):  # the arguments are still checked first
        await store.query_rollouts(search="")
