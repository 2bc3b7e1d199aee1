"""The trainer: one object that runs an algorithm, its runners and its servers for you.

::

    trainer = agl.Trainer(algorithm=agl.Baseline(), n_runners=4, concurrency=32)
    result = trainer.fit(my_agent, "train.jsonl", val_dataset="val.jsonl")

What :meth:`Trainer.fit` starts, and stops again, whatever happens:

- the **store** (``store=``; by default a SQLite file in the run directory, so every trace of
  the run stays inspectable with ``agl rollouts list --store sqlite:///runs/.../store.db``);
- a **store server** on loopback, when runners are processes (``n_runners > 1``) and the store
  is not already a server;
- the **runners**: in this process (``n_runners=1``, the default) or as that many processes,
  each running ``concurrency`` rollouts at once;
- the **gateway**, when the algorithm serves an LLM it trains (:meth:`AlgorithmContext.serve_llm`).

Progress shows as a bar per batch of rollouts (done, failed, retried, reward so far); metrics
go to the console, ``metrics.jsonl`` / ``metrics.csv`` in the run directory and TensorBoard when
installed; a summary and a reward-curve PNG (when matplotlib is installed) end the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import secrets
import statistics
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import JsonValue
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from agl.agent import LitAgent, as_agent
from agl.algorithm import Algorithm, AlgorithmContext, Baseline, RunState, StepAlgorithm
from agl.datasets import DatasetSource, load_tasks
from agl.errors import AglError, InvalidInputError
from agl.lightning.credit import PluginCredit
from agl.plugins import PluginManager
from agl.resources import Resource
from agl.results import RolloutResult
from agl.rollouts import AttemptStatus, RolloutConfig, RolloutMode
from agl.store.base import Store

__all__ = ["DEFAULT_ROLLOUT_CONFIG", "FitResult", "Trainer"]

logger = logging.getLogger(__name__)

DEFAULT_ROLLOUT_CONFIG = RolloutConfig(
    unresponsive_seconds=60.0,
    max_attempts=3,
    retry_on=frozenset({AttemptStatus.UNRESPONSIVE}),
)
"""Rollouts of a training run: a runner silent for a minute (a crash, a lost machine) has its
rollout retried, up to 3 tries; an agent that fails or times out is not retried (it would most
likely fail again, and the failure is itself a result)."""


@dataclass
class FitResult:
    """What a run did."""

    run_dir: Path
    store_url: str
    history: list[dict[str, float]]
    """Every metrics row logged, ``step`` included."""
    totals: dict[str, int]
    """Rollouts run in all, and how many succeeded, failed, were cancelled or retried."""
    duration_s: float
    results: list[RolloutResult] = field(default_factory=list, repr=False)
    """For :meth:`Trainer.dev`: every rollout's result, in dataset order."""

    def last(self, key: str) -> float | None:
        """The last logged value of a metric, or None."""
        for row in reversed(self.history):
            if key in row:
                return row[key]
        return None


class Trainer:
    """Run an algorithm over a dataset with an agent.

    Args:
        algorithm: What trains (default :class:`~agl.Baseline`: run and report only): an
            algorithm; the name of an installed one (``"baseline"``, or a plugin's, built with
            default settings; see ``agl plugins``); or a mapping of agent names or patterns to
            step algorithms, one optimizer per agent (:class:`~agl.PerAgent`).
        store: A store URL or object (default ``sqlite:///<run_dir>/store.db``).
        n_runners: 1 runs rollouts in this process; more starts that many runner processes.
            Each runs ``concurrency`` rollouts at once, so up to ``n_runners * concurrency``
            rollouts run together (``n_runners=8`` with the default concurrency: 128); the
            trainer prints that number when it starts.
        concurrency: Rollouts each runner runs at once.
        run_dir: Where metrics, plots and the default store go (default
            ``runs/<time>-<algorithm>``).
        resources: Resources published before the algorithm starts (an LLM to call, a prompt).
        rollout_config: Time limits and retries of the rollouts (default
            :data:`DEFAULT_ROLLOUT_CONFIG`).
        progress: Show progress bars.
        console: Print metrics lines and the summary (a :class:`rich.console.Console`, or
            True for stderr).
        verbose: Print every figure of a step on its console line (by default a compact line:
            step, reward, validation reward, kept/total transitions, loss, step time; every
            figure is in ``metrics.jsonl`` / ``metrics.csv`` / TensorBoard either way).
        plot: Draw the reward curve to ``run_dir/reward.png`` at the end (needs matplotlib).
        instrument: Libraries the runners trace (``"openai"``: every call of the openai client;
            ``agl plugins`` lists the rest). None: none, or every installed one after
            ``import agl.auto``.
        plugins: The plugins that names (of algorithms, credit strategies, instrumentors,
            store schemes) are looked up in and whose hooks the run fires: a
            :class:`~agl.plugins.PluginManager`, or plugin modules to use besides the installed
            ones (default: the installed ones). Runner processes load the installed ones.
    """

    def __init__(
        self,
        algorithm: Algorithm | str | Mapping[str, StepAlgorithm | str | None] | None = None,
        *,
        store: str | Store | None = None,
        n_runners: int = 1,
        concurrency: int = 16,
        run_dir: str | os.PathLike[str] | None = None,
        resources: Mapping[str, Resource] | None = None,
        rollout_config: RolloutConfig | None = None,
        progress: bool = True,
        console: bool | Console = True,
        verbose: bool = False,
        plot: bool = True,
        instrument: Sequence[str] | None = None,
        plugins: PluginManager | Sequence[object] | None = None,
    ) -> None:
        if n_runners < 1:
            raise InvalidInputError(f"n_runners must be at least 1, got {n_runners}")
        if concurrency < 1:
            raise InvalidInputError(f"concurrency must be at least 1, got {concurrency}")
        if not isinstance(plugins, PluginManager):
            plugins = PluginManager(plugins or ())
        self.plugins = plugins
        self.algorithm = resolve_algorithm(algorithm, self.plugins)
        self.store = store
        self.n_runners = n_runners
        self.concurrency = concurrency
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.resources = dict(resources or {})
        self.rollout_config = rollout_config or DEFAULT_ROLLOUT_CONFIG
        self.progress = progress
        if isinstance(console, Console):
            self.console: Console | None = console
        else:
            self.console = Console(stderr=True) if console else None
        self.verbose = verbose
        self.plot = plot
        self.instrument = None if instrument is None else list(instrument)

    # --- entry points -----------------------------------------------------------------------

    def fit(
        self,
        agent: Any,
        train_dataset: DatasetSource,
        val_dataset: DatasetSource | None = None,
    ) -> FitResult:
        """Train ``agent`` on ``train_dataset`` (validating on ``val_dataset``); see the module."""
        result: FitResult = _run_sync(self.fit_async(agent, train_dataset, val_dataset))
        return result

    async def fit_async(
        self,
        agent: Any,
        train_dataset: DatasetSource,
        val_dataset: DatasetSource | None = None,
    ) -> FitResult:
        """:meth:`fit`, for code already running an event loop (notebooks, async apps)."""
        lit = as_agent(agent)
        train = load_tasks(train_dataset)
        val = load_tasks(val_dataset) if val_dataset is not None else []
        if not train and not val:
            raise InvalidInputError("the training dataset is empty", field="train_dataset")
        return await self._session(lit, self.algorithm, train, val)

    def dev(
        self, agent: Any, dataset: DatasetSource, *, mode: RolloutMode = "train", n: int = 1
    ) -> FitResult:
        """Run ``agent`` once over ``dataset`` without training; print every rollout's outcome.

        The table shows each rollout's reward, error and LLM calls; the result holds them too.
        """
        result: FitResult = _run_sync(self.dev_async(agent, dataset, mode=mode, n=n))
        return result

    async def dev_async(
        self, agent: Any, dataset: DatasetSource, *, mode: RolloutMode = "train", n: int = 1
    ) -> FitResult:
        """:meth:`dev`, for code already running an event loop."""
        lit = as_agent(agent)
        tasks = load_tasks(dataset)
        if not tasks:
            raise InvalidInputError("the dataset is empty", field="dataset")
        algorithm = _Dev(mode, n)
        result = await self._session(lit, algorithm, tasks, [])
        result.results = algorithm.results
        if self.console is not None:
            self.console.print(_dev_table(algorithm.results))
            from agl.lightning import agent_stats, agents_table

            stats = agent_stats(algorithm.results)
            if any(agent != "-" for agent in stats):  # a multi-agent system: calls per agent
                self.console.print(agents_table(stats))
        return result

    # --- one run ----------------------------------------------------------------------------

    async def _session(
        self,
        agent: LitAgent,
        algorithm: Algorithm,
        train: list[JsonValue],
        val: list[JsonValue],
    ) -> FitResult:
        from agl.metrics import MetricsLogger

        started = time.monotonic()
        run_dir = self.run_dir or _default_run_dir(getattr(algorithm, "name", "run"))
        run_dir.mkdir(parents=True, exist_ok=True)
        if isinstance(self.store, str) or self.store is None:
            store_url = self.store or _sqlite_url(run_dir / "store.db")
            store: Store = self.plugins.open_store(store_url)
            owns_store = True
        else:
            store, store_url, owns_store = self.store, self.store.url, False
        async with contextlib.AsyncExitStack() as stack:
            if owns_store:
                stack.push_async_callback(store.close)
            metrics = stack.enter_context(
                MetricsLogger(run_dir, console=self.console or False, verbose=self.verbose)
            )
            runners = _Runners(
                agent, store, self.n_runners, self.concurrency, self.instrument, self.plugins
            )
            stack.push_async_callback(runners.stop)
            await runners.start()
            gateway = _GatewayStarter(store)
            stack.callback(gateway.stop)
            ctx = AlgorithmContext(
                store=store,
                run_dir=run_dir,
                train_tasks=train,
                val_tasks=val,
                rollout_config=self.rollout_config,
                metrics=metrics,
                progress=self._progress_bar,
                gateways=gateway,
                console=self.console,
                hooks=self.plugins,
                state=RunState(resources=dict(self.resources)),
            )
            if self.resources:
                await ctx.publish(self.resources)
            self._say(
                f"[bold]agl[/] {algorithm.name}: {len(train)} train / {len(val)} val tasks, "
                f"{self.n_runners} runner(s) x {self.concurrency} = "
                f"{self.n_runners * self.concurrency} rollouts at once, store {store_url}, "
                f"run dir {run_dir}"
            )
            run = asyncio.create_task(algorithm.run(ctx))
            done: set[asyncio.Task[None]] = set()
            while not done:  # watch the runner processes while the algorithm runs
                done, _ = await asyncio.wait({run}, timeout=1.0)
                runners.check()
            await run
        result = FitResult(
            run_dir=run_dir,
            store_url=store_url,
            history=ctx.history,
            totals=dict(ctx.totals),
            duration_s=time.monotonic() - started,
        )
        self._finish(result)
        return result

    def _finish(self, result: FitResult) -> None:
        if self.plot and any("reward/mean" in row for row in result.history):
            try:
                from agl.metrics import plot_metrics

                keys = ["reward/mean"]
                if any("val/reward/mean" in row for row in result.history):
                    keys.append("val/reward/mean")
                plot_metrics(result.run_dir, result.run_dir / "reward.png", keys=keys)
            except AglError as exc:
                logger.info("no reward plot: %s", exc)
        if self.console is None:
            return
        totals = result.totals
        table = Table(title="agl run summary", show_header=False, title_justify="left")
        table.add_row("time", f"{result.duration_s:.1f} s")
        table.add_row(
            "rollouts",
            f"{totals['rollouts']} ({totals['succeeded']} succeeded, {totals['failed']} failed, "
            f"{totals['cancelled']} cancelled, {totals['retried']} retried"
            + (f", {totals['timed_out']} past the step timeout" if totals.get("timed_out") else "")
            + ")",
        )
        for key in ("reward/mean", "val/reward/mean"):
            value = result.last(key)
            if value is not None:
                table.add_row(f"last {key}", f"{value:.4f}")
        self.console.print(table)
        # Paths and commands on lines of their own that rich never breaks, so they copy whole.
        self.console.print(f"run dir: {result.run_dir}", soft_wrap=True, highlight=False)
        self.console.print(
            f"inspect: agl rollouts list --store {result.store_url}",
            soft_wrap=True,
            highlight=False,
        )

    def _say(self, message: str) -> None:
        if self.console is not None:
            self.console.print(message, soft_wrap=True)

    @contextlib.contextmanager
    def _progress_bar(self, label: str, total: int) -> Iterator[_Bar]:
        if not self.progress or self.console is None:
            yield _Bar(None, None)
            return
        columns = (
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[stats]}"),
            TimeElapsedColumn(),
        )
        with Progress(*columns, console=self.console, transient=False) as progress:
            task = progress.add_task(label, total=total, stats="")
            yield _Bar(progress, task)


class _Bar:
    """One progress bar: rollouts done / failed / retried and the reward so far."""

    def __init__(self, progress: Progress | None, task: Any) -> None:
        self._progress = progress
        self._task = task
        self.failed = 0
        self.retried = 0
        self.rewards: list[float] = []

    def advance(self, result: RolloutResult) -> None:
        self.failed += not result.succeeded
        self.retried += result.retried
        if result.reward is not None:
            self.rewards.append(result.reward)
        if self._progress is None:
            return
        reward = f"reward {statistics.fmean(self.rewards):.3f}" if self.rewards else "reward -"
        stats = f"failed {self.failed} • retried {self.retried} • {reward}"
        self._progress.update(self._task, advance=1, stats=stats)


class _Dev(Algorithm):
    """Runs the tasks once (``Trainer.dev``) and keeps the results."""

    name = "dev"

    def __init__(self, mode: RolloutMode, n: int) -> None:
        self.mode: RolloutMode = mode
        self.n = n
        self.results: list[RolloutResult] = []

    async def run(self, ctx: AlgorithmContext) -> None:
        from agl.algorithm import reward_metrics

        self.results = await ctx.run_rollouts(
            ctx.train_tasks, mode=self.mode, n=self.n, description="dev"
        )
        ctx.log(0, reward_metrics(self.results))


def _dev_table(results: Sequence[RolloutResult]) -> Table:
    table = Table(title="agl dev: one rollout per row", title_justify="left")
    table.add_column("rollout", no_wrap=True)
    for column in ("input", "status", "reward", "LLM calls", "error"):
        table.add_column(column, overflow="fold")
    for result in results:
        text = repr(result.rollout.input)
        table.add_row(
            result.rollout.rollout_id,
            text if len(text) <= 40 else text[:37] + "...",
            result.status.value,
            "-" if result.reward is None else f"{result.reward:g}",
            str(result.llm_calls),
            result.error or "",
        )
    return table


# --- runners ----------------------------------------------------------------------------------


class _Runners:
    """The run's runners: one in this process, or processes talking to a store server."""

    def __init__(
        self,
        agent: LitAgent,
        store: Store,
        count: int,
        concurrency: int,
        instrument: list[str] | None,
        plugins: PluginManager,
    ) -> None:
        self.agent = agent
        self.instrument = instrument
        self.plugins = plugins
        self.store = store
        self.count = count
        self.concurrency = concurrency
        self._task: asyncio.Task[Any] | None = None
        self._runner: Any = None
        self._server: Any = None
        self._processes: list[multiprocessing.process.BaseProcess] = []

    async def start(self) -> None:
        from agl.runner import Runner

        if self.count == 1:
            self._runner = Runner(
                self.agent,
                self.store,
                concurrency=self.concurrency,
                handle_signals=False,
                instrument=self.instrument,
                plugins=self.plugins,
                # An in-process store answers a poll for nothing at no cost; short polls let
                # the run end as soon as the algorithm does (a stop waits out the poll).
                poll_wait=0.2,
            )
            self._task = asyncio.create_task(self._runner.run(), name="agl-runner")
            return
        url, token = self.store.url, None
        if not url.startswith(("http://", "https://")):
            from agl.server_thread import require_server_extra

            require_server_extra(
                f"n_runners={self.count} serves the store to the runner processes over HTTP"
            )
            from agl.store.serve import StoreServer

            token = secrets.token_urlsafe(16)
            self._server = StoreServer(self.store, token=token)
            await asyncio.to_thread(self._server.start)
            url = self._server.url
        context = multiprocessing.get_context("spawn")
        for index in range(self.count):
            process = context.Process(
                target=_runner_process,
                args=(
                    self.agent,
                    url,
                    token,
                    self.concurrency,
                    f"runner-{index}-{os.getpid()}",
                    self.instrument,
                ),
                name=f"agl-runner-{index}",
                daemon=True,
            )
            process.start()
            self._processes.append(process)

    def check(self) -> None:
        """Fail the run if the in-process runner crashed (a bug, not an agent failure)."""
        if self._task is not None and self._task.done() and not self._task.cancelled():
            exc = self._task.exception()
            if exc is not None:
                raise AglError(f"the runner stopped: {exc!r}") from exc
        dead = [p for p in self._processes if not p.is_alive()]
        if dead and len(dead) == len(self._processes):
            codes = sorted({p.exitcode for p in dead}, key=str)
            raise AglError(f"every runner process exited (exit codes {codes}); see their logs")

    async def stop(self) -> None:
        if self._runner is not None and self._task is not None:
            self._runner.stop(drain=False)
            with contextlib.suppress(Exception):
                await self._task
        for process in self._processes:
            if process.is_alive() and process.pid is not None:
                process.terminate()  # SIGTERM: the runner releases what it holds and exits
        for process in self._processes:
            await asyncio.to_thread(process.join, 15)
            if process.is_alive():
                process.kill()
                await asyncio.to_thread(process.join, 5)
        if self._server is not None:
            await asyncio.to_thread(self._server.stop)


def _runner_process(
    agent: LitAgent,
    url: str,
    token: str | None,
    concurrency: int,
    worker_id: str,
    instrument: list[str] | None,
) -> None:
    """A runner process's main: run until SIGTERM."""
    from agl.runner import Runner

    logging.basicConfig(level=logging.WARNING, format=f"%(levelname)s {worker_id}: %(message)s")
    if token is not None:
        os.environ["AGL_STORE_TOKEN"] = token
    runner = Runner(
        agent,
        url,
        concurrency=concurrency,
        worker_id=worker_id,
        drain_timeout=5.0,
        instrument=instrument,
    )
    runner.run_sync()


class _GatewayStarter:
    """Starts a gateway on first use for each set of upstreams and stops them all at the end.

    One model served means one gateway; a per-agent run training two models (each algorithm
    serving its own) gets one gateway in front of each.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self.servers: dict[tuple[str, ...], Any] = {}

    async def start(self, upstreams: list[str], enforce_resources: bool) -> str:
        from agl.server_thread import require_server_extra

        require_server_extra("serving an LLM through agl's gateway (ctx.serve_llm)")
        from agl.gateway.serve import GatewayServer

        key = tuple(upstreams)
        server = self.servers.get(key)
        if server is None:
            server = GatewayServer(upstreams, self.store, enforce_resources=enforce_resources)
            await asyncio.to_thread(server.start)
            self.servers[key] = server
        return str(server.endpoint_template)

    async def flush(self) -> None:
        """Wait until the calls the gateways recorded so far are in the store."""
        for server in self.servers.values():
            if server.gateway is not None:
                await server.gateway.sender.flush_async()

    def stop(self) -> None:
        for server in self.servers.values():
            server.stop()


# --- helpers ------------------------------------------------------------------------------------


def resolve_algorithm(
    algorithm: Algorithm | str | Mapping[str, StepAlgorithm | str | None] | None,
    plugins: PluginManager,
) -> Algorithm:
    """The algorithm ``algorithm`` stands for, every name in it looked up in ``plugins``.

    A name builds that installed algorithm with its default settings (once per name in a
    mapping); a mapping becomes a :class:`~agl.PerAgent`; a credit strategy named in an
    algorithm's ``lightning`` becomes the plugin's strategy.
    """
    from agl.per_agent import PerAgent

    if algorithm is None:
        resolved: Algorithm = Baseline()
    elif isinstance(algorithm, Algorithm):
        resolved = algorithm
    elif isinstance(algorithm, str):
        resolved = plugins.create_algorithm(algorithm)
    elif isinstance(algorithm, Mapping):
        built: dict[str, Algorithm] = {}
        members: dict[str, Any] = {}  # PerAgent checks that each is a step algorithm
        for key, entry in algorithm.items():
            if isinstance(entry, str) and isinstance(key, str):
                where = f"algorithm[{key!r}]"
                if entry not in built:
                    try:
                        built[entry] = plugins.create_algorithm(entry, field=where)
                    except InvalidInputError as exc:
                        raise InvalidInputError(f"agent {key!r}: {exc}", field=where) from exc
                members[key] = built[entry]
            else:
                members[key] = entry
        resolved = PerAgent(members)
    else:
        raise InvalidInputError(
            "algorithm must be an agl.Algorithm, the name of an installed one, or a mapping of "
            f"agent names to step algorithms; got {type(algorithm).__name__}",
            field="algorithm",
        )
    parts = [m.algorithm for m in resolved.members] if isinstance(resolved, PerAgent) else []
    for part in [resolved, *parts]:
        lightning: Any = getattr(part, "lightning", None)
        credit = getattr(lightning, "credit", None)
        if isinstance(credit, PluginCredit):
            lightning.credit = plugins.create_credit_assigner(credit.name)
    return resolved


def _default_run_dir(name: str) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    path = Path("runs") / f"{stamp}-{name}"
    suffix = 1
    while path.exists():
        suffix += 1
        path = Path("runs") / f"{stamp}-{name}-{suffix}"
    return path


def _sqlite_url(path: Path) -> str:
    return "sqlite:///" + path.as_posix()


def _run_sync(coroutine: Any) -> Any:
    # asyncio.run is not called inside the `except`: an error from the run would then be
    # chained to "RuntimeError: no running event loop" at the top of every traceback.
    try:
        asyncio.get_running_loop()
        running = True
    except RuntimeError:
        running = False
    if not running:
        return asyncio.run(coroutine)
    coroutine.close()
    raise AglError(
        "Trainer.fit/dev was called inside a running event loop; await fit_async/dev_async"
    )
