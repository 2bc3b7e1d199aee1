"""The algorithm interfaces, the context a trainer gives an algorithm, and :class:`Baseline`.

An algorithm drives the loop (see ARCHITECTURE.md): it enqueues rollouts, publishes resources,
reads finished rollouts back, updates what it trains, and logs metrics. It does all of that
through an :class:`AlgorithmContext`, which the :class:`~agl.Trainer` builds with the store,
the runners and (on request) the gateway already running::

    class MyAlgorithm(agl.Algorithm):
        async def run(self, ctx: agl.AlgorithmContext) -> None:
            update = await ctx.publish({"llm": await ctx.serve_llm([policy_url], "policy")})
            for step, batch in enumerate(ctx.batches(ctx.train_tasks, 32)):
                results = await ctx.run_rollouts(batch, resources_id=update.resources_id)
                ...                                    # learn from results[i].spans
                ctx.log(step, {"reward/mean": mean(r.reward or 0.0 for r in results)})

Most algorithms learn one batch at a time and need not write the loop: a
:class:`StepAlgorithm` implements ``setup`` (the resources it owns) and ``step`` (learn from
one :class:`StepBatch`: its agents' calls and LightningRL transitions), and agl runs the
batches, validation, publishing and metrics. Step algorithms can share one run, one per agent
(:class:`agl.PerAgent`).
"""

from __future__ import annotations

import abc
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

from pydantic import JsonValue

from agl.errors import InvalidInputError
from agl.resources import LLM, Resource, ResourcesUpdate
from agl.results import RolloutResult, fetch_results
from agl.rollouts import RolloutConfig, RolloutMode, RolloutRequest
from agl.step_loop import LoopSettings, Member, StepBatch, StepLoop, reward_metrics
from agl.store.base import Store

if TYPE_CHECKING:
    from agl.lightning import LightningRL

__all__ = [
    "Algorithm",
    "AlgorithmContext",
    "Baseline",
    "LoopHooks",
    "StepAlgorithm",
    "StepBatch",
    "reward_metrics",
]

T = TypeVar("T")


class Algorithm(abc.ABC):
    """What trains: subclass it and implement :meth:`run`.

    Attributes:
        name: Shown in logs and ``agl plugins``.
    """

    name: ClassVar[str] = "algorithm"

    @abc.abstractmethod
    async def run(self, ctx: AlgorithmContext) -> None:
        """Train (or evaluate) using the context's tasks, store, runners and metrics."""


class LoopHooks(Protocol):
    """What the training loop tells plugins (``agl_step_start`` / ``agl_step_end``); the
    trainer's :class:`agl.plugins.PluginManager` is one."""

    def step_start(self, algorithm: str, step: int) -> None:
        """A step begins."""

    def step_end(self, algorithm: str, step: int, metrics: Mapping[str, float]) -> None:
        """A step ended, having logged ``metrics``."""


class _NoHooks:
    def step_start(self, algorithm: str, step: int) -> None:
        pass

    def step_end(self, algorithm: str, step: int, metrics: Mapping[str, float]) -> None:
        pass


class AlgorithmContext:
    """Everything an algorithm works with during one run (built by the trainer).

    Attributes:
        store: The run's store.
        run_dir: Where the run writes its files (metrics, checkpoints, plots).
        train_tasks / val_tasks: The datasets, as lists of task inputs.
        resources: Resources the user gave the trainer (published before :meth:`run` starts).
        resources_id: The id of the latest published resource set.
        rollout_config: The config enqueued rollouts get unless told otherwise.
    """

    def __init__(
        self,
        *,
        store: Store,
        run_dir: Path,
        train_tasks: list[JsonValue],
        val_tasks: list[JsonValue],
        resources: Mapping[str, Resource],
        rollout_config: RolloutConfig,
        metrics: Any,
        progress: Any,
        start_gateway: Any,
        flush_gateway: Any = None,
        console: Any = None,
        hooks: LoopHooks | None = None,
    ) -> None:
        self.store = store
        self.run_dir = run_dir
        self.train_tasks = train_tasks
        self.val_tasks = val_tasks
        self.resources = dict(resources)
        self.resources_id: str | None = None
        self.rollout_config = rollout_config
        self._metrics = metrics
        self._progress = progress
        self._start_gateway = start_gateway
        self._flush_gateway = flush_gateway
        self.hooks: LoopHooks = hooks if hooks is not None else _NoHooks()
        """Whom the loop tells when a step starts and ends (the trainer's plugins)."""
        self.console = console
        """Where the trainer prints (a :class:`rich.console.Console`), or None when it is quiet;
        algorithms print their own summaries there."""
        self.history: list[dict[str, float]] = []
        """Every metrics row logged so far (``step`` included)."""
        self.totals = {
            "rollouts": 0,
            "succeeded": 0,
            "failed": 0,
            "cancelled": 0,
            "retried": 0,
            "timed_out": 0,
        }

    def with_run_dir(self, run_dir: Path) -> AlgorithmContext:
        """This context with its files going to ``run_dir`` (created) instead.

        What each of two algorithms of one kind in a per-agent run gets, so their checkpoints
        and models stay apart. Everything else (store, resources, metrics, progress, the
        gateway) is this context's own: what the view changes, this context sees.
        """
        run_dir.mkdir(parents=True, exist_ok=True)
        return _RunDirView(self, run_dir)

    async def publish(self, resources: Mapping[str, Resource]) -> ResourcesUpdate:
        """Publish a new version of the resources; later rollouts use it by default."""
        update = await self.store.add_resources(resources)
        self.resources = dict(update.resources)
        self.resources_id = update.resources_id
        return update

    async def serve_llm(
        self,
        upstreams: Sequence[str],
        model: str,
        sampling_parameters: Mapping[str, JsonValue] | None = None,
        *,
        enforce_resources: bool = True,
    ) -> LLM:
        """Start the gateway in front of ``upstreams`` (once per run); return the LLM resource.

        Agents given this resource call the gateway, which records every call with the engine's
        token ids; publish it with :meth:`publish`.
        """
        template = await self._start_gateway(list(upstreams), enforce_resources)
        return LLM(
            endpoint=template, model=model, sampling_parameters=dict(sampling_parameters or {})
        )

    async def run_rollouts(
        self,
        tasks: Sequence[JsonValue],
        *,
        mode: RolloutMode = "train",
        n: int = 1,
        resources_id: str | None = None,
        config: RolloutConfig | None = None,
        metadata: Mapping[str, JsonValue] | None = None,
        description: str | None = None,
        timeout: float | None = None,
    ) -> list[RolloutResult]:
        """Enqueue ``n`` rollouts per task, wait for all to finish, return their results.

        Results come in task order (the ``n`` samples of a task together); each rollout's
        ``metadata`` holds ``task_index`` and ``sample``, for grouping. Shows progress.

        ``timeout`` bounds the whole wait (seconds): rollouts not finished by then (still
        queued for want of a runner, or running past it) are cancelled and come back with
        status ``cancelled``, so a step never hangs. Each attempt's own limits are the
        rollout config's (``timeout_seconds``, ``unresponsive_seconds``).
        """
        if n < 1:
            raise InvalidInputError(f"n must be at least 1, got {n}", field="n", value=n)
        if timeout is not None and timeout <= 0:
            raise InvalidInputError(
                f"timeout must be positive, got {timeout}", field="timeout", value=timeout
            )
        requests = [
            RolloutRequest(
                input=task,
                mode=mode,
                config=config or self.rollout_config,
                resources_id=resources_id or self.resources_id,
                metadata={**(metadata or {}), "task_index": index, "sample": sample},
            )
            for index, task in enumerate(tasks)
            for sample in range(n)
        ]
        rollouts = await self.store.enqueue_rollouts(requests)
        ids = [rollout.rollout_id for rollout in rollouts]
        finished: dict[str, RolloutResult] = {}
        label = description or f"{mode} rollouts"
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._progress(label, len(ids)) as bar:
            pending = list(ids)
            while pending:
                if deadline is not None and time.monotonic() >= deadline:
                    # Cancelling finishes each rollout at once; a runner still on one is
                    # told at its next heartbeat, and what it sends later is ignored.
                    for rollout_id in pending:
                        await self.store.cancel_rollout(rollout_id)
                    self.totals["timed_out"] += len(pending)
                    deadline = None
                wait = 0.5 if deadline is None else max(0.0, min(0.5, deadline - time.monotonic()))
                done = await self.store.wait_for_rollouts(pending, timeout=wait)
                if not done:
                    continue
                if self._flush_gateway is not None:
                    # The gateway records calls on its own schedule: make sure the finished
                    # rollouts' calls are in the store before reading them.
                    await self._flush_gateway()
                for result in await fetch_results(self.store, done):
                    finished[result.rollout.rollout_id] = result
                    bar.advance(result)
                done_ids = {rollout.rollout_id for rollout in done}
                pending = [rollout_id for rollout_id in pending if rollout_id not in done_ids]
        results = [finished[rollout_id] for rollout_id in ids]
        self.totals["rollouts"] += len(results)
        self.totals["succeeded"] += sum(result.succeeded for result in results)
        self.totals["cancelled"] += sum(result.status == "cancelled" for result in results)
        self.totals["failed"] += sum(result.status == "failed" for result in results)
        self.totals["retried"] += sum(result.retried for result in results)
        return results

    def rewind(self, step: int) -> None:
        """Forget the metrics logged after ``step``: a run resuming from a checkpoint of that
        step logs the later steps again, once (files and :attr:`history` alike)."""
        kept = self._metrics.rewind(step)
        self.history = [
            {k: float(v) for k, v in row.items() if isinstance(v, int | float)} for row in kept
        ]

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        """Record one step's metrics (console, ``metrics.jsonl``, TensorBoard when installed)."""
        self._metrics.log(step, metrics)
        self.history.append({"step": float(step), **metrics})

    @staticmethod
    def batches(items: Sequence[T], size: int | None) -> Iterator[list[T]]:
        """Split ``items`` into consecutive batches of ``size`` (one batch if None)."""
        if size is None:
            yield list(items)
            return
        if size < 1:
            raise InvalidInputError(f"batch size must be at least 1, got {size}", field="size")
        for start in range(0, len(items), size):
            yield list(items[start : start + size])


class _RunDirView(AlgorithmContext):
    """An :class:`AlgorithmContext` whose attributes, but ``run_dir``, are another's."""

    def __init__(self, base: AlgorithmContext, run_dir: Path) -> None:
        # No super().__init__(): every attribute but run_dir is read from and written to base.
        object.__setattr__(self, "_base", base)
        object.__setattr__(self, "run_dir", run_dir)

    def __getattr__(self, name: str) -> Any:
        return getattr(object.__getattribute__(self, "_base"), name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "run_dir":
            object.__setattr__(self, name, value)
        else:
            setattr(object.__getattribute__(self, "_base"), name, value)


class StepAlgorithm(Algorithm):
    """An algorithm that learns one batch at a time, in a loop agl runs for it.

    Implement :meth:`setup` (the resources it owns: an LLM it trains, a prompt it optimises)
    and :meth:`step` (learn from one batch; return new versions of its resources). agl runs
    the loop: batches of tasks, ``n_samples`` rollouts each, transitions built with
    ``lightning``, publishing, validation, metrics. Because the loop is agl's, step algorithms
    can share one run, each with its own agents (``Trainer(algorithm={"writer": rl,
    "checker": apo})``, see :class:`agl.PerAgent`).

    Attributes:
        lightning: How this algorithm's transitions are built (None: it reads
            ``batch.calls`` and ``batch.results`` only, like a prompt optimiser).
        n_epochs / batch_size / n_samples: The loop: passes over the training tasks, tasks per
            step (all if None), rollouts per task (the group of a group baseline).
        max_steps: Stop after this many steps (counted from the start of training, resumed
            steps included), even mid-epoch; None runs every epoch.
        step_timeout: Seconds a step (or validation) waits for its rollouts; those not
            finished by then are cancelled and count as failed for training (None: wait for
            every rollout; each attempt is still bounded by the rollout config's limits).
        follows_loop: True for an algorithm that works with any loop (a prompt optimizer
            reading whatever batch it gets): sharing a run (:class:`agl.PerAgent`), it takes
            the loop settings of the algorithms that do not follow, and its own are ignored.
    """

    lightning: LightningRL | None = None
    follows_loop: ClassVar[bool] = False
    learns: ClassVar[bool] = True
    """False for an algorithm that trains nothing (:class:`Baseline`): a step without LLM calls
    is then no cause for a warning."""
    n_epochs: int = 1
    batch_size: int | None = None
    n_samples: int = 1
    max_steps: int | None = None
    step_timeout: float | None = None

    def total_steps(self, n_tasks: int) -> tuple[int, int]:
        """(steps the loop runs, steps per epoch) over ``n_tasks`` training tasks, as agl's
        loop cuts them: ``batch_size`` tasks a step (all in one step if None), ``n_epochs``
        passes, at most ``max_steps`` (for a learning-rate schedule, or to know the last
        step)."""
        return LoopSettings.of(self).total_steps(n_tasks)

    def resume_step(self) -> int:
        """The last step an earlier run of this algorithm completed and saved (0: none).

        Called after :meth:`setup`, which is where an algorithm restores a checkpoint. The
        loop then continues with the next step: the batches it skips are the ones that
        earlier run trained on (batches are cut from the tasks in order), and the metrics
        logged after that step are dropped, so the run's files show each step once.
        """
        return 0

    async def setup(self, ctx: AlgorithmContext) -> Mapping[str, Resource]:
        """Return the resources this algorithm owns (published before the first step)."""
        return {}

    @abc.abstractmethod
    async def step(self, ctx: AlgorithmContext, batch: StepBatch) -> Mapping[str, Resource]:
        """Learn from one batch; return new versions of resources it owns ({} for none)."""

    async def close(self, ctx: AlgorithmContext) -> None:
        """Release what :meth:`setup` started (servers, files); save final outputs.

        Called once when the run ends, also when it ends with an error, if setup ran.
        """

    async def run(self, ctx: AlgorithmContext) -> None:
        member = Member(self, lambda agent: True, self.name)
        await StepLoop([member], LoopSettings.of(self), label=self.name).run(ctx)


class Baseline(StepAlgorithm):
    """Runs the agent over the data without training anything, and reports.

    Each batch of training tasks is one step (its metrics: :func:`reward_metrics`); the
    validation tasks, if any, run before the first and after the last epoch (``val/...``
    metrics). Useful to measure a starting point, and as the simplest algorithm to read.

    Args:
        n_epochs: Passes over the training tasks.
        batch_size: Tasks per step (all of them if None).
        n_samples: Rollouts per task.
    """

    name = "baseline"
    learns = False

    def __init__(
        self, *, n_epochs: int = 1, batch_size: int | None = None, n_samples: int = 1
    ) -> None:
        self.n_epochs = n_epochs
        self.batch_size = batch_size
        self.n_samples = n_samples

    async def step(self, ctx: AlgorithmContext, batch: StepBatch) -> Mapping[str, Resource]:
        return {}
