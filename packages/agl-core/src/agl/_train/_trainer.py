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
go to the console, ``metrics.jsonl`` / ``metrics.csv`` in the run directory, TensorBoard when
installed, and the store (one :class:`~agl.MetricsRow` per step, the run named after its run
directory, sent in the background: :mod:`agl._train._store_metrics`); a summary and a
reward-curve PNG
(when matplotlib is installed) end the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import JsonValue
from rich.console import Console

from agl._errors import AglError, InvalidInputError
from agl._resources import Resource
from agl._results import FitResult
from agl._rollouts import DEFAULT_UNRESPONSIVE_SECONDS, AttemptStatus, RolloutConfig, RolloutMode
from agl._run._agent import LitAgent, as_agent
from agl._train._algorithm import Algorithm, AlgorithmContext, Baseline, RunState, StepAlgorithm
from agl._train._datasets import DatasetSource, load_tasks
from agl._train._dev import DevRun
from agl._train._run_console import ProgressBars, dev_table, print_summary
from agl._train._runner_pool import RunnerPool
from agl.gateway._pool import GatewayPool
from agl.lightning._credit import PluginCredit
from agl.plugins import PluginManager
from agl.store._base import Store

__all__ = ["DEFAULT_ROLLOUT_CONFIG", "Trainer"]

logger = logging.getLogger(__name__)

DEFAULT_ROLLOUT_CONFIG = RolloutConfig(
    unresponsive_seconds=DEFAULT_UNRESPONSIVE_SECONDS,
    max_attempts=3,
    retry_on=frozenset({AttemptStatus.UNRESPONSIVE}),
)
"""Rollouts of a training run: a runner silent for the store's usual 5 minutes (a crash, a lost
machine) has its rollout retried, up to 3 tries; an agent that fails or times out is not retried
(it would most likely fail again, and the failure is itself a result). One default for the store
and the trainer, the one the README gives: a slow agent is never taken for a dead runner sooner
in training than anywhere else."""


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
            ``agl plugins`` lists the rest), besides every installed one after
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
        self,
        agent: Any,
        dataset: DatasetSource,
        *,
        mode: RolloutMode = "train",
        n: int = 1,
        gateway: bool = False,
    ) -> FitResult:
        """Run ``agent`` once over ``dataset`` without training; print every rollout's outcome.

        The table shows each rollout's reward, error and LLM calls; the result holds them too.
        ``gateway=True`` serves the trainer's LLM resources through agl's gateway, as a training
        run serves the model it trains: every call is then recorded with the engine's token
        ids, also the calls of an agent that no instrumentor sees (a program such as Claude
        Code, :class:`agl.CommandAgent`).
        """
        dev = self.dev_async(agent, dataset, mode=mode, n=n, gateway=gateway)
        result: FitResult = _run_sync(dev)
        return result

    async def dev_async(
        self,
        agent: Any,
        dataset: DatasetSource,
        *,
        mode: RolloutMode = "train",
        n: int = 1,
        gateway: bool = False,
    ) -> FitResult:
        """:meth:`dev`, for code already running an event loop."""
        lit = as_agent(agent)
        tasks = load_tasks(dataset)
        if not tasks:
            raise InvalidInputError("the dataset is empty", field="dataset")
        algorithm = DevRun(mode, n, gateway)
        result = await self._session(lit, algorithm, tasks, [])
        result.results = algorithm.results
        if self.console is not None:
            self.console.print(dev_table(algorithm.results))
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
        from agl._train._metrics import MetricsLogger
        from agl._train._store_metrics import StoreMetrics
        from agl.store._checks import redact

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
            logged = stack.enter_context(
                MetricsLogger(run_dir, console=self.console or False, verbose=self.verbose)
            )
            metrics = StoreMetrics(logged, store, run=run_dir.resolve().name)
            stack.push_async_callback(metrics.aclose)
            runners = RunnerPool(
                agent, store, self.n_runners, self.concurrency, self.instrument, self.plugins
            )
            stack.push_async_callback(runners.stop)
            await runners.start()
            gateway = GatewayPool(store)
            stack.callback(gateway.stop)
            ctx = AlgorithmContext(
                store=store,
                run_dir=run_dir,
                train_tasks=train,
                val_tasks=val,
                rollout_config=self.rollout_config,
                metrics=metrics,
                progress=ProgressBars(self.console, enabled=self.progress),
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
                f"{self.n_runners * self.concurrency} rollouts at once, store {redact(store_url)}, "
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
                from agl._train._metrics_read import plot_metrics

                keys = ["reward/mean"]
                if any("val/reward/mean" in row for row in result.history):
                    keys.append("val/reward/mean")
                plot_metrics(result.run_dir, result.run_dir / "reward.png", keys=keys)
            except AglError as exc:
                logger.info("no reward plot: %s", exc)
        if self.console is not None:
            print_summary(self.console, result)

    def _say(self, message: str) -> None:
        if self.console is not None:
            self.console.print(message, soft_wrap=True)


# --- helpers ------------------------------------------------------------------------------------


def resolve_algorithm(
    algorithm: Algorithm | str | Mapping[str, StepAlgorithm | str | None] | None,
    plugins: PluginManager,
) -> Algorithm:
    """The algorithm ``algorithm`` stands for, every name in it looked up in ``plugins``.

    A name builds that installed algorithm with its default settings (once per name in a
    mapping); a mapping becomes a :class:`~agl.PerAgent`; a credit strategy named in an
    algorithm's ``transitions`` becomes the plugin's strategy.
    """
    from agl._train._per_agent import PerAgent

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
        builder: Any = getattr(part, "transitions", None)
        credit = getattr(builder, "credit", None)
        if isinstance(credit, PluginCredit):
            builder.credit = plugins.create_credit_assigner(credit.name)
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
