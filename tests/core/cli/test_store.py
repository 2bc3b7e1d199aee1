"""``agl store serve`` as a separate process: ``--store`` names the store, as in every other
command, and ``--db`` (its former name) still works."""

from __future__ import annotations

from pathlib import Path

import pytest

import agl
from agl import RolloutRequest
from agl.testing.ports import free_port
from agl.testing.processes import Processes

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.parametrize("option", ["--store", "--db"])
async def test_store_serve_takes_the_store_by_either_name(tmp_path: Path, option: str) -> None:
    db = f"sqlite:///{tmp_path / 'served.db'}"
    port = free_port()
    with Processes(tmp_path) as processes:
        child = processes.start(
            "store", "store", "serve", option, db, "--port", str(port), "--log-level", "warning"
        )
        await processes.serving(child, f"http://127.0.0.1:{port}/health")
        async with agl.open_store(f"http://127.0.0.1:{port}") as store:
            await store.enqueue_rollouts([RolloutRequest(input="kept", rollout_id="ro-kept")])
    async with agl.open_store(db) as direct:  # the file it was told to serve
        assert (await direct.get_rollout("ro-kept")).input == "kept"
