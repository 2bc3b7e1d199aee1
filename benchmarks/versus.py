"""agl against agentlightning 0.3.0, side by side on one machine, alternating the sides.

Sides, each server its own process: the reference (agentlightning's ``LightningStoreServer``
over its in-memory store, as its ``agl store`` command serves it), ``agl store serve`` over a
durable SQLite file, ``agl store serve`` over ``memory://`` (like for like), and the bare HTTP
layer (agl's server stack over a store that does nothing: ``_null_store.py``), the limit. The
load comes from client processes: the reference's ``LightningStoreClient`` in the reference's
own environment (made by this script), agl's ``open_store`` in agl's.

Rows, at 1 and at 16 concurrent clients (``--clients``), each side's runs alternated round by
round, medians shown with the ratio agl / reference: one span per request, dequeue (one
rollout per request), marking an attempt succeeded, spans in batches. Then rollouts/s end to
end: runner processes, each side its own runner and tracer, an agent making 4 chat calls with
the openai client against one shared scripted OpenAI-compatible server, at 4 runners x 1
rollout at a time and at the reference's published store-benchmark shape (256 rollouts in
flight, 4 turns each; see ``--wide-*``).

Every loop is bounded by a count and a time limit; the stores are checked (every span sent
stored, every rollout claimed once, every update applied, every rollout succeeded with its
LLM calls traced). Prints figures only; it never asserts on wall time.
Run: ``uv run --no-sync python benchmarks/versus.py [--quick]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import agl
from _versus_procs import REFERENCE_ENV, LoadClient, load_clients, processes, reference_python
from agl.testing.ports import free_port
from runner import LLM_SERVER, check, run_batch, wait_healthy
from store import http_server

HERE = Path(__file__).resolve().parent
WARM_UP_S = 600  # runner processes of the reference take a minute to start on 2 busy cores
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "agl-bench"
# (row, what one unit is, the unit's name)
ROWS = [
    ("add_span", "add_span, 1 span/request", "spans/s"),
    ("dequeue", "dequeue (limit 1)", "dequeues/s"),
    ("update", "update attempt → succeeded", "updates/s"),
    ("batched", "spans in batches", "spans/s"),
]


@dataclass
class Side:
    name: str
    url: str
    clients: list[LoadClient]
    checked: bool = True


def run_job(side: Side, row: str, tasks: int, count: int, seconds: float, **job: Any) -> float:
    """One timed run of ``row``: ``tasks`` concurrent clients spread over the side's processes,
    ``count`` units each; returns units/s from the first start to the last finish."""
    procs = side.clients[: min(tasks, len(side.clients))]
    for i, client in enumerate(procs):
        share = tasks // len(procs) + (i < tasks % len(procs))
        client.send(
            {"row": row, "url": side.url, "tasks": share, "count": count, "seconds": seconds}
            | {"check": side.checked, **job}
        )
    for client in procs:
        client.recv(timeout=600)
    for client in procs:
        client.send("go")
    results = [client.recv(timeout=seconds + 600) for client in procs]
    cut = any(r["cut"] for r in results)
    if row == "dequeue" and side.checked:
        claimed = [rollout_id for r in results for rollout_id in r["claimed"]]
        enqueued = {rollout_id for r in results for rollout_id in r["enqueued"]}
        if len(set(claimed)) != len(claimed) or not set(claimed) <= enqueued:
            raise RuntimeError(f"{side.name}: a rollout was claimed twice, or one never enqueued")
        if not cut and set(claimed) != enqueued:
            raise RuntimeError(f"{side.name}: {len(enqueued) - len(claimed)} rollouts unclaimed")
    if cut:
        print(f"  {side.name}, {row} x {tasks}: cut at the {seconds:.0f} s limit", file=sys.stderr)
    elapsed = max(r["end"] for r in results) - min(r["start"] for r in results)
    return float(sum(r["done"] for r in results)) / elapsed


def alternate(sides: list[Any], rounds: int, measure: Any) -> dict[str, float]:
    """Run ``measure(side)`` for every side, ``rounds`` times, the order turned each round;
    return each side's median."""
    rates: dict[str, list[float]] = {side.name: [] for side in sides}
    for r in range(rounds):
        for side in sides[r % len(sides) :] + sides[: r % len(sides)]:
            rates[side.name].append(measure(side))
    return {name: statistics.median(values) for name, values in rates.items()}


def store_rows(sides: list[Side], args: argparse.Namespace) -> list[tuple[str, dict[str, float]]]:
    """The single-request rows and the batched one, at each client count."""
    table = []
    for row, label, unit in ROWS:
        for tasks in args.clients:
            print(f"{label}, {tasks} client(s)…", file=sys.stderr)
            if row == "batched":  # a few batches per client
                count = args.batch * max(1, 4 // tasks)
            else:  # --count in all, at least 2 per client
                count = max(2, args.count // tasks)

            def measure(
                side: Side, row: str = row, tasks: int = tasks, count: int = count
            ) -> float:
                batch = args.batch if row == "batched" else 1
                return run_job(side, row, tasks, count, args.seconds, batch=batch)

            table.append(
                (f"{label}, {tasks} client(s) ({unit})", alternate(sides, args.rounds, measure))
            )
    return table


@dataclass
class AglRunners:
    """agl's side of an end-to-end row: a store server, its runners, rollouts run so far."""

    name: str
    url: str
    done: int = 0

    def batch(self, count: int, seconds: float) -> float:
        """Enqueue ``count`` rollouts at once; return rollouts/s until the last finished
        (raises if that takes over ``seconds``)."""

        async def run() -> float:
            async with agl.open_store(self.url) as store:
                return await asyncio.wait_for(run_batch(store, count, self.done), seconds)

        seconds = asyncio.run(run())
        self.done += count
        return count / seconds

    def check(self) -> None:
        async def run() -> None:
            async with agl.open_store(self.url) as store:
                await check(store, self.done, 4)

        asyncio.run(run())


def end_to_end(
    ref: Side, ref_python: str, llm: str, args: argparse.Namespace, logs: Path, tmp: str
) -> list[tuple[str, dict[str, float]]]:
    """Rollouts/s at 4 x 1 and at the wide shape, alternating the reference and agl."""
    env = {**os.environ, **REFERENCE_ENV, "AGL_BENCH_LLM": f"{llm}/v1"}
    ref_runner = [ref_python, str(HERE / "_versus_ref.py"), "runner", ref.url]
    job = {"extra": {"llm": f"{llm}/v1", "calls": 4}}
    seconds = args.seconds * 10
    shapes = [(f"{args.runners} runners x 1 rollout at a time", args.runners, 1, args.rollouts)]
    if args.wide_rollouts:
        per = max(1, args.wide_concurrency // args.wide_runners)
        label = f"{args.wide_runners} runners x {per} at a time (reference: {args.runners} x 1)"
        shapes.append((label, args.wide_runners, per, args.wide_rollouts))
    table = []
    with processes([ref_runner] * args.runners, logs, env):
        for label, runners, per, count in shapes:
            print(f"end to end: {label}…", file=sys.stderr)
            db = f"sqlite:///{tmp}/e2e-{runners}-{per}.db"
            command = [sys.executable, "-m", "agl", "runner", "--path", str(HERE)]
            command += ["--agent", "_bench_agents:four_calls", "--instrument", "openai"]
            command += ["--concurrency", str(per)]
            with http_server(db) as url:
                ours = AglRunners("agl sqlite", url)
                with processes([[*command, "--store", url]] * runners, logs, env):
                    ours.batch(2 * runners * per, WARM_UP_S)  # warm-up, not counted
                    run_job(ref, "rollouts", 1, 2 * args.runners, WARM_UP_S, **job)

                    ref_count = min(count, args.rollouts)  # its runners: one rollout at a time

                    def measure(side: Any, count: int = count, ref_count: int = ref_count) -> float:
                        if isinstance(side, AglRunners):
                            return side.batch(count, seconds)
                        return run_job(side, "rollouts", 1, ref_count, seconds, **job)

                    table.append(
                        (f"rollouts/s, {label}", alternate([ref, ours], args.e2e_rounds, measure))
                    )
                ours.check()
    return table


def print_table(table: list[tuple[str, dict[str, float]]], args: argparse.Namespace) -> None:
    from rich.console import Console
    from rich.table import Table

    names = list(dict.fromkeys(name for _, medians in table for name in medians))
    title = f"agl vs agentlightning 0.3.0 (medians of {args.rounds} alternated rounds; "
    title += f"end to end: {args.e2e_rounds}); ratio: agl / reference"
    out = Table(title=title)
    out.add_column("row")
    for name in names:
        out.add_column(name, justify="right")
    for label, medians in table:
        ref = medians.get("reference")
        cells = []
        for name in names:
            rate = medians.get(name)
            ratio = f" ({rate / ref:.2f}x)" if rate and ref and name != "reference" else ""
            shown = "" if rate is None else f"{rate:,.1f}" if rate < 100 else f"{rate:,.0f}"
            cells.append(f"{shown}{ratio}")
        out.add_row(label, *cells)
    Console(width=200).print(out)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--venv",
        type=Path,
        default=CACHE / "agentlightning-0.3.0",
        help="where the reference's environment is made",
    )
    parser.add_argument(
        "--reuse-venv",
        action="store_true",
        help="reuse the environment at --venv when it has agentlightning",
    )
    parser.add_argument("--clients", default="1,16", help="concurrent clients per row")
    parser.add_argument("--procs", type=int, default=4, help="load-client processes per side")
    parser.add_argument("--count", type=int, default=400, help="requests per run, in all")
    parser.add_argument("--batch", type=int, default=512, help="spans per batched request")
    parser.add_argument("--seconds", type=float, default=10, help="time limit of one run")
    parser.add_argument("--rounds", type=int, default=3, help="alternated rounds per row")
    parser.add_argument("--runners", type=int, default=4, help="runner processes, 4 x 1 row")
    parser.add_argument("--rollouts", type=int, default=40, help="rollouts per 4 x 1 run")
    parser.add_argument("--wide-runners", type=int, default=4, help="agl's runner processes")
    parser.add_argument("--wide-concurrency", type=int, default=256, help="rollouts in flight")
    parser.add_argument("--wide-rollouts", type=int, default=512, help="per run; 0: no row")
    parser.add_argument("--e2e-rounds", type=int, default=2, help="alternated end-to-end rounds")
    parser.add_argument("--sides", default="reference,agl sqlite,agl memory,bare layer")
    parser.add_argument("--quick", action="store_true", help="a small smoke run")
    args = parser.parse_args()
    args.clients = [int(c) for c in args.clients.split(",")]
    if args.quick:
        args.count, args.rounds, args.e2e_rounds, args.seconds = 64, 1, 1, 5
        args.batch, args.rollouts, args.wide_rollouts, args.wide_concurrency = 128, 8, 64, 32
    if min(args.clients) < 1 or args.procs < 1 or args.runners < 1:
        parser.error("--clients, --procs and --runners must be at least 1")
    return args


def main() -> None:
    args = parse_args()
    # SIGTERM becomes an exception, so that every process started here is stopped.
    signal.signal(signal.SIGTERM, lambda signum, _: sys.exit(128 + signum))
    started = time.monotonic()
    ref_python = reference_python(args.venv, args.reuse_venv)
    env = {**os.environ, **REFERENCE_ENV}
    with contextlib.ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="agl-versus-"))
        logs = Path(tmp) / "logs"
        logs.mkdir()
        ref_port, null_port, llm_port = free_port(), free_port(), free_port()
        ref_url, llm = f"http://127.0.0.1:{ref_port}", f"http://127.0.0.1:{llm_port}"
        ref_serve = [ref_python, "-m", "agentlightning.cli.store", "--host", "127.0.0.1"]
        ref_serve += ["--port", str(ref_port), "--log-level", "WARNING"]
        null_serve = [sys.executable, str(HERE / "_null_store.py"), str(null_port)]
        llm_serve = [sys.executable, "-c", LLM_SERVER, str(llm_port)]
        stack.enter_context(processes([ref_serve, null_serve, llm_serve], logs, env))
        sqlite_url = stack.enter_context(http_server(f"sqlite:///{tmp}/versus.db"))
        memory_url = stack.enter_context(http_server("memory://"))
        print("starting the reference's server and the load clients…", file=sys.stderr)
        ref_clients = stack.enter_context(
            load_clients(ref_python, HERE / "_versus_ref.py", args.procs, logs, env)
        )
        agl_clients = stack.enter_context(
            load_clients(sys.executable, HERE / "_versus_agl.py", args.procs, logs, env)
        )
        for url in (
            f"{ref_url}/v1/agl/health",
            f"http://127.0.0.1:{null_port}/health",
            f"{llm}/health",
        ):
            wait_healthy(url, timeout=600)
        every = [
            Side("reference", ref_url, ref_clients),
            Side("agl sqlite", sqlite_url, agl_clients),
            Side("agl memory", memory_url, agl_clients),
            Side("bare layer", f"http://127.0.0.1:{null_port}", agl_clients, checked=False),
        ]
        sides = [side for side in every if side.name in args.sides.split(",")]
        table = store_rows(sides, args)
        if args.rollouts:
            table += end_to_end(every[0], ref_python, llm, args, logs, tmp)
    print_table(table, args)
    print(
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end; "
        f"{time.monotonic() - started:.0f} s in all"
    )


if __name__ == "__main__":
    main()
