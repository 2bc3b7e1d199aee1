"""Store throughput benchmark: R rollouts x S spans through memory://, sqlite:/// and http://.

Backends: ``memory``, ``sqlite`` (in process), ``http`` (``agl store serve`` over a durable
SQLite file: what a one-host run uses), ``http-memory`` (the same server over ``memory://``,
like agentlightning's HTTP store, whose figures are quoted beside it), ``postgresql`` (one
``agl store serve`` over a real PostgreSQL, started by the benchmark) and ``postgresql-3``
(three servers over that one database; the concurrent clients are spread over them, each
client process talking to its own server first).

Per backend it times, separately: enqueue (batches of 100), dequeue one at a time plus marking
each attempt running, spans added in batches (one call per rollout, and 512-span calls: the
most OpenTelemetry's BatchSpanProcessor exports at once), spans added one per call
(sequentially, and from K concurrent clients), finishing every attempt, and reading every
rollout's spans back. The read-back is checked: each rollout holds
exactly the spans written, in order, with sequence ids 1..n, and ``statistics()`` agrees.
It also times ``import agl`` in fresh interpreters and lists heavy modules it pulled in.

Prints figures only; it never asserts on wall time.
Run: ``uv run --no-sync python benchmarks/store.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import gc
import itertools
import json
import multiprocessing as mp
import os
import queue
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import agl
from agl import AttemptStatus, RolloutRequest, RolloutStatus, Span, Store
from agl.store._http import starting_at
from agl.testing.ports import free_port

# LARGE_BATCH is what OpenTelemetry's BatchSpanProcessor sends at most per export by default
# (max_export_batch_size=512): the batch a traced agent's exporter really produces.
ENQUEUE_BATCH, LARGE_BATCH, IMPORT_TARGET_S = 100, 512, 0.3
HEAVY = "torch transformers fastapi uvicorn starlette httpx opentelemetry langchain openai"
IMPORT_PROBE = (
    "import sys, time; t = time.perf_counter(); import agl; e = time.perf_counter() - t; "
    "print(e, ','.join(sorted({m.split('.')[0] for m in sys.modules} & set(sys.argv[1:]))))"
)
# (backend, operation key) -> (target rate or None, agentlightning 0.3.0 reference figure).
GOALS: dict[tuple[str, str], tuple[float | None, str]] = {
    ("memory", "batched"): (100_000, ""),
    ("sqlite", "batched"): (30_000, ""),
    ("http", "batched"): (20_000, ""),
    ("memory", "dequeue"): (None, "~8,000 (in process)"),
    ("http", "dequeue"): (None, "~470"),
    ("memory", "single"): (None, "~4,500 (in process)"),
    ("http", "single"): (2_000, "~620"),
    ("http", "concurrent"): (2_000, ""),
    ("http", "capacity"): (2_000, ""),
    ("http-memory", "batched"): (20_000, ""),
    ("http-memory", "dequeue"): (None, "~470"),
    ("http-memory", "single"): (2_000, "~620"),
    ("http-memory", "concurrent"): (2_000, ""),
    ("http-memory", "capacity"): (2_000, ""),
    # over HTTP on 2 cores, one server: 512-span batches from one client, dequeues from 4
    ("postgresql", "batched"): (10_000, ""),
    ("postgresql", "dequeue_concurrent"): (500, ""),
}
# What ``agl store serve`` runs on for each HTTP backend, and how many servers.
HTTP_BACKENDS = {
    "http": "sqlite:///{tmp}/http-{run}.db",
    "http-memory": "memory://",
    "postgresql": "{postgres}",
    "postgresql-3": "{postgres}",
}
SERVERS = {"postgresql-3": 3}


class VerificationError(RuntimeError):
    """The store did not hold what the benchmark wrote."""


@dataclass
class Figure:
    """One measured operation: ``count`` units in ``seconds``; ``key`` looks up GOALS."""

    backend: str
    key: str
    operation: str
    count: int
    seconds: float
    unit: str

    @property
    def rate(self) -> float:
        return self.count / self.seconds if self.seconds > 0 else float("inf")

    def goal(self) -> tuple[float | None, str, str]:
        target, reference = GOALS.get((self.backend, self.key), (None, ""))
        verdict = "" if target is None else "met" if self.rate >= target else "MISSED"
        return target, reference, verdict


@dataclass
class Workload:
    """What to write, and ``expected``: each rollout's span ids in the order written."""

    rollouts: int
    spans: int
    clients: int
    single_limit: int
    attempts: dict[str, str] = field(default_factory=dict)  # rollout id -> attempt id
    expected: dict[str, list[str]] = field(default_factory=dict)

    def make_spans(self, phase: str) -> list[list[Span]]:
        """S fresh spans for every claimed rollout, one list per rollout."""
        attributes: dict[str, Any] = {"gen_ai.request.model": "m", "gen_ai.usage.input_tokens": 9}
        make = functools.partial(Span.create, name=f"bench-{phase}", attributes=attributes)
        ids = self.attempts.items()
        return [[make(rollout_id=r, attempt_id=a) for _ in range(self.spans)] for r, a in ids]

    def written(self, batches: list[list[Span]]) -> int:
        """Record spans as written (in order); return how many."""
        for span in (span for batch in batches for span in batch):
            self.expected.setdefault(span.rollout_id, []).append(span.span_id)
        return sum(map(len, batches))


def clock() -> float:
    """Start a timed phase, collecting the garbage its setup left so that it is not billed."""
    gc.collect()
    return time.perf_counter()


async def add_calls(store: Store, batches: list[list[Span]]) -> float:
    """One ``add_spans`` call per batch, in order; return the seconds taken."""
    start = clock()
    for batch in batches:
        await store.add_spans(batch)
    return time.perf_counter() - start


async def bench_enqueue(store: Store, backend: str, work: Workload) -> tuple[list[str], Figure]:
    requests = [RolloutRequest(input={"task": i}) for i in range(work.rollouts)]
    start = clock()
    ids: list[str] = []
    for i in range(0, len(requests), ENQUEUE_BATCH):
        ids += [r.rollout_id for r in await store.enqueue_rollouts(requests[i : i + ENQUEUE_BATCH])]
    seconds = time.perf_counter() - start
    return ids, Figure(backend, "enqueue", "enqueue (100/call)", len(ids), seconds, "rollouts/s")


async def bench_dequeue(store: Store, backend: str, work: Workload) -> list[Figure]:
    dequeue_s = running_s = 0.0
    gc.collect()
    for _ in range(work.rollouts):
        start = time.perf_counter()
        claims = await store.dequeue_rollouts(limit=1, worker_id="bench-runner")
        middle = time.perf_counter()
        if len(claims) != 1:
            raise VerificationError(f"{backend}: dequeue returned {len(claims)} claims, not 1")
        attempt = claims[0].attempt
        await store.update_attempt(attempt.rollout_id, attempt.attempt_id, AttemptStatus.RUNNING)
        running_s += time.perf_counter() - middle
        dequeue_s += middle - start
        work.attempts[attempt.rollout_id] = attempt.attempt_id
    n, op = work.rollouts, "update_attempt → running"
    dequeued = Figure(backend, "dequeue", "dequeue (limit=1)", n, dequeue_s, "dequeues/s")
    return [dequeued, Figure(backend, "running", op, n, running_s, "updates/s")]


async def bench_batched(store: Store, backend: str, work: Workload) -> list[Figure]:
    per_rollout = work.make_spans("batch")
    seconds = await add_calls(store, per_rollout)
    op = "add_spans small batches (1 call/rollout)"
    figures = [Figure(backend, "per_rollout", op, work.written(per_rollout), seconds, "spans/s")]
    flat = [span for batch in work.make_spans("large") for span in batch]
    large = [flat[i : i + LARGE_BATCH] for i in range(0, len(flat), LARGE_BATCH)]
    seconds, op = await add_calls(store, large), f"add_spans batched ({LARGE_BATCH}/call)"
    figures.append(Figure(backend, "batched", op, work.written(large), seconds, "spans/s"))
    return figures


async def bench_single(store: Store, backend: str, work: Workload) -> Figure:
    flat = [span for batch in work.make_spans("single") for span in batch]
    singles = [[span] for span in flat[: work.single_limit]]
    seconds, op = await add_calls(store, singles), "add_spans 1 span/call, sequential"
    return Figure(backend, "single", op, work.written(singles), seconds, "requests/s")


def _client_process(url: str, spans: list[dict[str, Any]], barrier: Any, out: Any) -> None:
    """One runner process: its own store client, single-span calls for its own rollouts."""

    async def main() -> tuple[float, float]:
        singles = [[Span.model_validate(span)] for span in spans]
        async with agl.open_store(url) as store:
            await store.get_rollout(singles[0][0].rollout_id)  # connect before the clock starts
            gc.collect()
            barrier.wait(timeout=120)
            start = time.monotonic()
            for single in singles:
                await store.add_spans(single)
            return start, time.monotonic()

    try:
        out.put(asyncio.run(main()))
    except BaseException as exc:
        out.put(f"{type(exc).__name__}: {exc}")
        raise


def _dequeue_process(url: str, barrier: Any, out: Any) -> None:
    """One runner process: its own store client, claiming one rollout at a time until none is
    left. Reports (start, end, claimed rollout ids)."""

    async def main() -> tuple[float, float, list[str]]:
        claimed: list[str] = []
        async with agl.open_store(url) as store:
            await store.statistics()  # connect before the clock starts
            gc.collect()
            barrier.wait(timeout=120)
            start = time.monotonic()
            worker = f"bench-{os.getpid()}"
            while claims := await store.dequeue_rollouts(limit=1, worker_id=worker):
                claimed += [claim.rollout.rollout_id for claim in claims]
            return start, time.monotonic(), claimed

    try:
        out.put(asyncio.run(main()))
    except BaseException as exc:
        out.put(f"{type(exc).__name__}: {exc}")
        raise


async def spawn(target: Any, args: list[tuple[Any, ...]]) -> list[Any]:
    """Run ``target(*a, barrier, out)`` in one process per ``a``; return what each reported."""
    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(len(args)), ctx.Queue()
    procs = [ctx.Process(target=target, args=(*a, barrier, out)) for a in args]
    results: list[Any] = []
    try:
        for proc in procs:
            proc.start()
        deadline = time.monotonic() + 600
        while len(results) < len(procs) and time.monotonic() < deadline:
            try:  # polled, not a blocking get: an interrupt must reach the cleanup below
                results.append(out.get_nowait())
            except queue.Empty:
                await asyncio.sleep(0.05)
    finally:
        for proc in procs:
            proc.join(timeout=10 if len(results) == len(procs) else 0)
            if proc.is_alive():
                proc.kill()
    if len(results) < len(procs):
        raise RuntimeError("client processes did not report within 600 s")
    if errors := [r for r in results if isinstance(r, str)]:
        raise RuntimeError(f"a client process failed: {errors[0]}")
    return results


async def run_processes(url: str, owned: list[list[Span]]) -> float:
    """Run one client process per span list; return first start to last finish, in seconds."""
    dumped = [[span.model_dump(mode="json") for span in spans] for spans in owned]
    args = [(starting_at(url, i), d) for i, d in enumerate(dumped)]
    results = await spawn(_client_process, args)
    return float(max(end for _, end in results) - min(start for start, _ in results))


async def bench_concurrent_dequeue(store: Store, backend: str, work: Workload) -> Figure:
    """K client processes claiming R fresh rollouts one at a time, as a fleet of runners does."""
    requests = [RolloutRequest(input={"task": i}) for i in range(work.rollouts)]
    ids = [r.rollout_id for r in await store.enqueue_rollouts(requests)]
    results = await spawn(
        _dequeue_process, [(starting_at(store.url, i),) for i in range(work.clients)]
    )
    claimed = [rollout_id for _, _, got in results for rollout_id in got]
    if sorted(claimed) != sorted(ids):
        raise VerificationError(
            f"{backend}: {len(claimed)} claims ({len(set(claimed))} distinct) "
            f"for {len(ids)} rollouts"
        )
    seconds = max(end for _, end, _ in results) - min(start for start, _, _ in results)
    op = f"dequeue (limit=1), {work.clients} client processes"
    return Figure(backend, "dequeue_concurrent", op, len(ids), seconds, "dequeues/s")


async def run_tasks(store: Store, owned: list[list[Span]]) -> float:
    async def client(spans: list[Span]) -> None:
        for span in spans:
            await store.add_spans([span])

    start = clock()
    await asyncio.gather(*(client(spans) for spans in owned))
    return time.perf_counter() - start


async def bench_concurrent(store: Store, backend: str, work: Workload) -> Figure:
    """K clients, each sending single-span calls for its own rollouts (round robin)."""
    k = work.clients
    per_rollout = work.make_spans("conc")[: max(1, work.single_limit * k // work.spans)]
    chains = (itertools.chain.from_iterable(per_rollout[i::k]) for i in range(k))
    owned = [spans for spans in map(list, chains) if spans]
    if backend in HTTP_BACKENDS:
        seconds = await run_processes(store.url, owned)
        op = f"add_spans 1 span/call, {len(owned)} client processes"
    else:
        seconds = await run_tasks(store, owned)
        op = f"add_spans 1 span/call, {len(owned)} asyncio tasks (in-process store: 1 process)"
    return Figure(backend, "concurrent", op, work.written(owned), seconds, "requests/s")


async def bench_finish(store: Store, backend: str, work: Workload) -> Figure:
    start = clock()
    for rollout_id, attempt_id in work.attempts.items():
        await store.update_attempt(rollout_id, attempt_id, AttemptStatus.SUCCEEDED)
    seconds, op = time.perf_counter() - start, "update_attempt → succeeded"
    return Figure(backend, "finish", op, len(work.attempts), seconds, "updates/s")


async def bench_query(store: Store, backend: str, work: Workload, ids: list[str]) -> Figure:
    start = clock()
    read = {rollout_id: await store.query_spans(rollout_id) for rollout_id in ids}
    seconds = time.perf_counter() - start
    for rollout_id, spans in read.items():
        want = work.expected.get(rollout_id, [])
        if [s.span_id for s in spans] != want:
            raise VerificationError(
                f"{backend}: rollout {rollout_id} returned {len(spans)} spans; "
                f"{len(want)} were written (or they came back in another order)"
            )
        if [s.sequence_id for s in spans] != list(range(1, len(want) + 1)):
            raise VerificationError(f"{backend}: rollout {rollout_id}: sequence ids not 1..n")
    total, op = sum(map(len, read.values())), "query_spans (1 call/rollout)"
    return Figure(backend, "query", op, total, seconds, "spans read/s")


async def check_statistics(store: Store, backend: str, work: Workload) -> None:
    stats = await store.statistics()
    succeeded = stats.rollouts_by_status.get(RolloutStatus.SUCCEEDED, 0)
    got = (stats.rollouts, stats.attempts, stats.spans, succeeded)
    want = (work.rollouts, work.rollouts, sum(map(len, work.expected.values())), work.rollouts)
    if got != want:
        raise VerificationError(
            f"{backend}: statistics (rollouts, attempts, spans, succeeded) = {got}, want {want}"
        )


async def bench_backend(backend: str, url: str, work: Workload) -> list[Figure]:
    async with agl.open_store(url) as store:
        ids, enqueue = await bench_enqueue(store, backend, work)
        figures = [enqueue, *await bench_dequeue(store, backend, work)]
        figures += await bench_batched(store, backend, work)
        figures.append(await bench_single(store, backend, work))
        figures.append(await bench_concurrent(store, backend, work))
        figures.append(await bench_finish(store, backend, work))
        figures.append(await bench_query(store, backend, work, ids))
        await check_statistics(store, backend, work)
        if backend in HTTP_BACKENDS:  # after the statistics check: it adds rollouts
            figures.append(await bench_concurrent_dequeue(store, backend, work))
    return figures


@contextlib.contextmanager
def http_server(db_url: str, count: int = 1) -> Iterator[str]:
    """Run ``count`` ``agl store serve`` processes over ``db_url``; yield their URLs joined by
    commas; stop them on the way out, error or not."""
    procs, urls = [], []
    try:
        for _ in range(count):
            port = free_port()
            command = [sys.executable, "-m", "agl", "store", "serve", "--store", db_url]
            command += ["--port", str(port), "--log-level", "warning"]
            procs.append(subprocess.Popen(command, stdout=subprocess.DEVNULL))
            urls.append(f"http://127.0.0.1:{port}")
        for proc, url in zip(procs, urls, strict=True):
            deadline = time.monotonic() + 60
            while proc.poll() is None and time.monotonic() < deadline:
                health = f"{url}/health"
                with contextlib.suppress(OSError), urllib.request.urlopen(health, timeout=1):
                    break
                time.sleep(0.05)
            else:
                raise RuntimeError(f"agl store serve did not come up (exit code {proc.poll()})")
            print(f"http: agl store serve (pid {proc.pid}) on {url}", file=sys.stderr)
        yield ",".join(urls)
    finally:
        for proc in procs:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@contextlib.contextmanager
def postgres_database(backends: list[str]) -> Iterator[Any]:
    """A real PostgreSQL server when a postgresql backend is asked for (None otherwise)."""
    if not any(backend.startswith("postgresql") for backend in backends):
        yield None
        return
    from agl.testing.postgres import PostgresServer

    with PostgresServer() as server:
        print(f"postgresql: {server.url_of('…', password='***')}", file=sys.stderr)
        yield server


WRK_SCRIPT = """
local counter = 0
local thread_id = 0
function setup(thread) thread:set("tid", thread_id); thread_id = thread_id + 1 end
request = function()
  counter = counter + 1
  local span_id = string.format("%08x%08x", tid + 1, counter)
  local body = '{"spans":[{"rollout_id":"ROLLOUT","attempt_id":"ATTEMPT",'
    .. '"trace_id":"0123456789abcdef0123456789abcdef","span_id":"' .. span_id
    .. '","name":"llm.call","start_time_unix_nano":1,"end_time_unix_nano":2,'
    .. '"attributes":{"step":1}}]}'
  return wrk.format("POST", "/v1/spans", {["Content-Type"]="application/json"}, body)
end
"""


async def bench_server_capacity(
    backend: str, url: str, tmp: str, connections: int, seconds: int
) -> Figure:
    """Load the server with single-span requests from wrk, a C load generator.

    Python clients on the same few cores measure the clients as much as the server; wrk costs
    little CPU, so this row is what one server process sustains for many remote runners. Every
    request carries a new span; the stored count must equal the requests wrk saw answered.
    """
    async with agl.open_store(url) as store:
        await store.enqueue_rollouts([RolloutRequest(input="wrk")])
        [claim] = await store.dequeue_rollouts()
        ids = claim.rollout.rollout_id, claim.attempt.attempt_id
        script = Path(tmp) / "span.lua"
        lua = WRK_SCRIPT.replace("ROLLOUT", ids[0]).replace("ATTEMPT", ids[1])
        await asyncio.to_thread(script.write_text, lua)
        command = ["wrk", "-t2", f"-c{connections}", f"-d{seconds}s", "-s", str(script), url]
        out = await asyncio.to_thread(
            subprocess.run, command, capture_output=True, text=True, check=True
        )
        if "Non-2xx" in out.stdout or "Socket errors" in out.stdout:
            raise VerificationError(f"wrk saw failed requests:\n{out.stdout}")
        answered = int(out.stdout.split(" requests in ")[0].split()[-1])
        stored = len(await store.query_spans(ids[0]))
        # wrk counts the requests answered inside its window; a few more may land at the end.
        if not answered <= stored <= answered + connections:
            raise VerificationError(f"wrk: {answered} requests answered, {stored} spans stored")
    op = f"server capacity: 1 span/call from wrk, {connections} connections"
    return Figure(backend, "capacity", op, stored, float(seconds), "requests/s")


def measure_import(runs: int) -> dict[str, Any]:
    """Time ``import agl`` in fresh interpreters; collect the heavy modules it imported."""
    times: list[float] = []
    heavy: set[str] = set()
    for _ in range(runs):
        command = [sys.executable, "-c", IMPORT_PROBE, *HEAVY.split()]
        out = subprocess.run(command, capture_output=True, text=True, check=True).stdout.split()
        times.append(float(out[0]))
        heavy.update(out[1].split(",") if len(out) > 1 else [])
    median = statistics.median(times)
    verdict = "met" if median < IMPORT_TARGET_S else "MISSED"
    stats = {"runs": runs, "median_s": median, "min_s": min(times), "verdict": verdict}
    return {**stats, "heavy_modules": sorted(heavy)}


def print_table(figures: list[Figure], imp: dict[str, Any], repeat: int) -> None:
    from rich.console import Console
    from rich.table import Table

    runs = f"the median of {repeat} runs" if repeat > 1 else "1 run"
    table = Table(title=f"agl store benchmark (each row: {runs})")
    for column in ("backend", "operation", "count", "seconds", "rate", "unit", "target"):
        table.add_column(column, justify="right" if column in ("count", "rate") else "left")
    table.add_column("agentlightning 0.3.0")
    table.add_column("verdict")
    for f in figures:
        target, reference, verdict = f.goal()
        row = [f.backend, f.operation, f"{f.count:,}", f"{f.seconds:.3f}", f"{f.rate:,.0f}"]
        table.add_row(*row, f.unit, f"≥{target:,.0f}" if target else "", reference, verdict)
    op = f"import agl (median of {imp['runs']} fresh processes; min {imp['min_s']:.3f} s)"
    row = ["-", op, "", f"{imp['median_s']:.3f}", "", "s", f"<{IMPORT_TARGET_S} s", ""]
    table.add_row(*row, imp["verdict"])
    Console(width=200).print(table)
    print(f"heavy modules pulled in by `import agl`: {', '.join(imp['heavy_modules']) or 'none'}")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=500)
    parser.add_argument("--spans", type=int, default=10, help="spans per rollout")
    parser.add_argument(
        "--backends", default="memory,sqlite,http,http-memory,postgresql,postgresql-3"
    )
    parser.add_argument("--clients", type=int, default=4, help="concurrent single-span clients")
    parser.add_argument("--single-limit", type=int, default=2_000, help="spans per 1-span run")
    parser.add_argument("--repeat", type=int, default=3, help="runs per backend; median shown")
    parser.add_argument("--quick", action="store_true", help="a small smoke run")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    args = parser.parse_args()
    known = ["memory", "sqlite", *HTTP_BACKENDS]
    if unknown := sorted(set(args.backends.split(",")) - set(known)):
        parser.error(f"unknown backend(s) {', '.join(unknown)}; expected some of {','.join(known)}")
    if args.quick:
        args.rollouts, args.spans, args.single_limit, args.repeat = 40, 5, 100, 1
    return args


def run_backend(
    backend: str, args: argparse.Namespace, tmp: str, postgres: Any = None
) -> list[Figure]:
    """Run the workload ``--repeat`` times on fresh stores; keep each operation's median run."""
    runs: list[list[Figure]] = []
    for run in range(args.repeat):
        print(f"{backend}: run {run + 1} of {args.repeat}…", file=sys.stderr)
        work = Workload(args.rollouts, args.spans, args.clients, args.single_limit)
        urls = {"memory": "memory://", "sqlite": f"sqlite:///{tmp}/bench-{run}.db"}
        served = HTTP_BACKENDS.get(backend)
        if served and "{postgres}" in served:
            served = served.format(postgres=postgres.create_database(f"bench_{backend[-1]}_{run}"))
        count = SERVERS.get(backend, 1)
        server = http_server(served.format(tmp=tmp, run=run), count) if served else None
        with server or contextlib.nullcontext(urls[backend]) as url:
            figures = asyncio.run(bench_backend(backend, url, work))
            if served and count == 1 and shutil.which("wrk"):
                seconds = 2 if args.quick else 5
                capacity = bench_server_capacity(backend, url, tmp, 16, seconds)
                figures.append(asyncio.run(capacity))
            runs.append(figures)
    return [sorted(same, key=lambda f: f.rate)[len(same) // 2] for same in zip(*runs, strict=True)]


def main() -> None:
    args = parse_args()
    # Turn SIGTERM into an exception so that the cleanup (server, client processes) runs.
    signal.signal(signal.SIGTERM, lambda signum, _: sys.exit(128 + signum))
    started, figures = time.perf_counter(), []
    backends = args.backends.split(",")
    with tempfile.TemporaryDirectory(prefix="agl-bench-") as tmp, postgres_database(backends) as pg:
        for backend in backends:
            figures += run_backend(backend, args, tmp, pg)
    imp = measure_import(3 if args.quick else 7)
    print_table(figures, imp, args.repeat)
    elapsed = time.perf_counter() - started
    print(f"{args.rollouts} rollouts x {args.spans} spans, {os.cpu_count()} CPUs: {elapsed:.1f} s")
    if args.json:
        with open(args.json, "w") as file:
            rows = [{**asdict(f), "rate": f.rate, "goal": f.goal()} for f in figures]
            json.dump({"figures": rows, "import_agl": imp}, file, indent=1)


if __name__ == "__main__":
    main()
