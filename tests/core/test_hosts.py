"""agl deployed across hosts: a store host (PostgreSQL and ``agl store serve``), a trainer host
(the model server, ``agl gateway serve`` and the algorithm's side) and two runner hosts, each a
network namespace this test makes, joined by a private switch. Mid-run one runner host's cable
is pulled; its rollouts are retried on the other host, each finishes once; when the cable is
back, that host's late results are refused and counted.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from agl.testing.hosts import Hosts, unavailable
from agl.testing.postgres import PostgresServer
from agl.testing.processes import (
    Processes,
    calling_agent,
    runner_summary,
    wait_until,
    write_agent,
)

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

WHY_NOT = unavailable()
STORE_TOKEN, GATEWAY_TOKEN = "store-secret", "gateway-secret"
TASKS = 8

AGENT = calling_agent(pause=0.4, reward="task / 100")

# The algorithm's side, on the trainer host: publish the LLM, enqueue, and read each rollout the
# moment the store says it finished. It writes progress.json as it goes and result.json at the end.
DRIVER = """
import asyncio, json, sys, time

import agl
from agl import RolloutConfig, RolloutRequest, RolloutStatus
from agl._results import fetch_results
from agl.lightning import extract_calls

store_url, endpoint, out, tasks = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])


def write(name, value):
    with open(f"{out}/{name}.tmp", "w") as file:
        json.dump(value, file)
    import os
    os.replace(f"{out}/{name}.tmp", f"{out}/{name}")


async def main():
    async with agl.open_store(store_url) as store:
        await store.add_resources({"llm": agl.LLM(endpoint=endpoint, model="policy")})
        config = RolloutConfig(unresponsive_seconds=5, max_attempts=3)
        rollouts = await store.enqueue_rollouts(
            [RolloutRequest(input=task, config=config) for task in range(tasks)]
        )
        pending = {rollout.rollout_id for rollout in rollouts}
        seen = {}
        deadline = time.monotonic() + 240
        while pending and time.monotonic() < deadline:
            done = await store.wait_for_rollouts(sorted(pending), timeout=0.5)
            for result in await fetch_results(store, done):
                calls = extract_calls(result.spans)
                seen[result.rollout.rollout_id] = {
                    "status": result.status.value,
                    "reward": result.reward,
                    "calls": len(calls.calls),
                    "tokens": all(call.has_tokens for call in calls.calls),
                    "attempts": [[a.worker_id, a.status.value] for a in result.attempts],
                }
            pending -= {rollout.rollout_id for rollout in done}
            running = await store.query_rollouts(status=[RolloutStatus.RUNNING])
            holders = []
            for rollout in running.rollouts:
                attempts = await store.query_attempts(rollout.rollout_id)
                holders.append(attempts[-1].worker_id)
            write("progress.json", {"finished": len(seen), "running": holders})
        write("result.json", {"pending": sorted(pending), "rollouts": seen})


asyncio.run(main())
"""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def hosts() -> Iterator[Hosts]:
    if WHY_NOT is not None:
        if os.environ.get("CI"):  # CI runs as root: there the test must run, not skip
            pytest.fail(f"cannot simulate hosts in CI: {WHY_NOT}")
        pytest.skip(f"cannot simulate hosts here: {WHY_NOT}")
    with Hosts(["store", "trainer", "runner-1", "runner-2"]) as made:
        yield made


def _read(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


# Its waits add up to 10 minutes at worst; ~60 s alone, ~120 s beside another test worker.
@pytest.mark.timeout(600)
async def test_a_runner_host_cut_off_mid_run_is_retried_elsewhere_and_refused_after(
    tmp_path: Path, hosts: Hosts
) -> None:
    store_ip, trainer_ip = hosts.address("store"), hosts.address("trainer")
    store_url = f"http://{store_ip}:4747"
    with PostgresServer(netns=hosts.netns("store")) as postgres, Processes(tmp_path) as procs:
        db = postgres.create_database("hosts")
        await procs.store_server(
            "store", db=db, host=store_ip, port=4747,
            env={"AGL_STORE_TOKEN": STORE_TOKEN}, netns=hosts.netns("store"),
        )  # fmt: skip
        model = procs.python(
            "model", "-c", "import time\nfrom agl.testing.openai_server import OpenAIServer\n"
            "OpenAIServer(port=8000).start()\ntime.sleep(3600)",
            netns=hosts.netns("trainer"),
        )  # fmt: skip
        tokens = {"AGL_STORE_TOKEN": STORE_TOKEN, "AGL_GATEWAY_TOKEN": GATEWAY_TOKEN}
        await procs.gateway_server(
            "gateway", upstreams=["http://127.0.0.1:8000/v1"], store=store_url,
            host=trainer_ip, port=4748, env=tokens, netns=hosts.netns("trainer"),
        )  # fmt: skip
        agent = write_agent(tmp_path, "two_calls", AGENT)
        options = ("--instrument", "openai", "--concurrency", "2", "--log-level", "info")
        runners = {
            name: procs.runner(
                name, store_url, agent, *options, env=tokens, netns=hosts.netns(name)
            )
            for name in ("runner-1", "runner-2")
        }
        endpoint = f"http://{trainer_ip}:4748/rollout/{{rollout_id}}/attempt/{{attempt_id}}/v1"
        driver_path = tmp_path / "driver.py"
        driver_path.write_text(DRIVER)
        driver = procs.python(
            "driver", str(driver_path), store_url, endpoint, str(tmp_path), str(TASKS),
            env={"AGL_STORE_TOKEN": STORE_TOKEN}, netns=hosts.netns("trainer"),
        )  # fmt: skip
        try:

            def runner_1_is_mid_rollout() -> bool:
                progress = _read(tmp_path / "progress.json")
                started = progress and progress["finished"] >= 2
                return bool(started and "runner-1" in progress["running"])

            await wait_until(runner_1_is_mid_rollout, "runner-1 mid-rollout", 120, (), procs.logs)
            hosts.cut("runner-1")
            await wait_until(
                lambda: _read(tmp_path / "result.json") is not None,
                "every rollout to finish",
                240,
                (driver, model),
                procs.logs,
            )
            result = _read(tmp_path / "result.json")
            assert result is not None, procs.logs()
            hosts.restore("runner-1")
            # back online, runner-1 learns that the store ended its attempt: from its late
            # report or from a heartbeat, whichever the store refuses first
            refused = "was ended by the store"
            await wait_until(
                lambda: refused in runners["runner-1"].log(), "runner-1's late report", 120,
                (), procs.logs,
            )  # fmt: skip
        finally:
            hosts.restore("runner-1")
        for runner in runners.values():
            runner.process.terminate()
        for runner in runners.values():
            # A stop lets running rollouts finish for up to the grace period (30 s by default),
            # then releases the rest and ends: 30 s and room for a loaded machine.
            assert runner.exit_code(30 + 90) == 0, procs.logs()
        summaries = {name: runner_summary(runner) for name, runner in runners.items()}

    assert result["pending"] == [], result
    rollouts = result["rollouts"]
    assert len(rollouts) == TASKS
    for facts in rollouts.values():
        assert facts["status"] == "succeeded", facts
        assert facts["calls"] == 2, facts
        assert facts["tokens"], facts  # the calls' token ids are there when it is finished
        assert [status for _, status in facts["attempts"]].count("succeeded") == 1, facts
    assert sorted(facts["reward"] for facts in rollouts.values()) == [t / 100 for t in range(TASKS)]
    retried = [f for f in rollouts.values() if f["attempts"][0] == ["runner-1", "unresponsive"]]
    assert retried, rollouts  # the cut-off host's rollouts were given up on there ...
    assert all(f["attempts"][-1][0] == "runner-2" for f in retried)  # ... and finished elsewhere
    assert summaries["runner-1"]["abandoned"] >= 1, summaries  # its late results: refused, counted
    assert sum(s["succeeded"] for s in summaries.values()) == TASKS, summaries
