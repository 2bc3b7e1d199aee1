"""The dashboard's rollout list on a big store: how long its first page takes.

Builds a SQLite store of ``--rollouts`` rollouts (default 100,000; a third claimed by 8 workers
and finished, a sixth of those failed), serves it with ``agl store serve`` in its own process,
and times what the list page asks for (each the median of ``--repeat`` requests, after one
warm-up):

- the first page: ``GET /v1/rollouts?order=newest&limit=50`` with ``GET /v1/statistics`` (the
  status counts), as the page loads them;
- the same filtered by status (failed), by worker, by id search, and by time window;
- the last page (``offset`` = total - 50);
- in Chromium (when installed), the page from navigation until its 50 rows are drawn.

Target: the first page in under 300 ms. Prints figures only. Run:
``uv run --no-sync python benchmarks/dashboard.py [--rollouts 100000]``.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

import agl
from agl import AttemptStatus, RolloutRequest

PAGE = 50


async def build(path: Path, rollouts: int) -> float:
    """Fill a SQLite store; return the seconds it took."""
    started = time.perf_counter()
    async with agl.open_store(f"sqlite:///{path}") as store:
        for start in range(0, rollouts, 1000):
            count = min(1000, rollouts - start)
            requests = [
                RolloutRequest(input={"task": start + i}, mode="train" if i % 5 else "val")
                for i in range(count)
            ]
            await store.enqueue_rollouts(requests)
        finished = 0
        while finished < rollouts // 3:
            worker = f"runner-{finished // 1000 % 8}"
            claims = await store.dequeue_rollouts(min(1000, rollouts // 3 - finished), worker)
            for index, claim in enumerate(claims):
                status = AttemptStatus.FAILED if index % 6 == 0 else AttemptStatus.SUCCEEDED
                await store.update_attempt(
                    claim.rollout.rollout_id, claim.attempt.attempt_id, status, reason=None
                )
            finished += len(claims)
    return time.perf_counter() - started


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def timed(http: httpx.Client, repeat: int, *requests: tuple[str, dict[str, Any]]) -> float:
    """Median milliseconds to get every request (one after another), after one warm-up."""
    times = []
    for round_ in range(repeat + 1):
        started = time.perf_counter()
        for path, params in requests:
            http.get(path, params=params).raise_for_status()
        if round_:
            times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def browser_ms(url: str, repeat: int) -> float | None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        return None
    from playwright.sync_api import sync_playwright

    times = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page()
        for round_ in range(repeat + 1):
            started = time.perf_counter()
            page.goto(url + "/#/")
            page.wait_for_function(
                f"document.querySelectorAll('[data-testid=rollout-row]').length === {PAGE}"
            )
            if round_:
                times.append((time.perf_counter() - started) * 1000)
            page.goto("about:blank")
        browser.close()
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "big.db"
        seconds = asyncio.run(build(db, args.rollouts))
        print(f"built a SQLite store of {args.rollouts:,} rollouts in {seconds:.1f} s")
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        server = subprocess.Popen(
            [sys.executable, "-m", "agl", "store", "serve", "--store", f"sqlite:///{db}",
             "--port", str(port), "--log-level", "warning"],
        )  # fmt: skip
        try:
            with httpx.Client(base_url=url, timeout=60) as http:
                deadline = time.monotonic() + 60
                while True:
                    try:
                        http.get("/health")
                        break
                    except httpx.TransportError:
                        if time.monotonic() > deadline:
                            raise
                        time.sleep(0.2)
                total = http.get("/v1/statistics").json()["rollouts"]
                newest = {"order": "newest", "limit": PAGE}
                rows = {
                    "first page + status counts": [
                        ("/v1/rollouts", newest),
                        ("/v1/statistics", {}),
                    ],
                    "first page only": [("/v1/rollouts", newest)],
                    "status = failed": [("/v1/rollouts", {**newest, "status": "failed"})],
                    "worker = runner-3": [("/v1/rollouts", {**newest, "worker_id": "runner-3"})],
                    "id search": [("/v1/rollouts", {**newest, "search": "ab"})],
                    "last hour": [("/v1/rollouts", {**newest, "since": time.time() - 3600})],
                    "last page": [("/v1/rollouts", {**newest, "offset": total - PAGE})],
                }
                print(f"{total:,} rollouts; median of {args.repeat} (ms):")
                for name, requests in rows.items():
                    print(f"  {name:<30} {timed(http, args.repeat, *requests):8.1f}")
            shown = browser_ms(url, min(args.repeat, 5))
            if shown is None:
                print("  in Chromium: not installed")
            else:
                print(f"  {'in Chromium: 50 rows drawn':<30} {shown:8.1f}")
        finally:
            server.terminate()
            server.wait(30)


if __name__ == "__main__":
    main()
