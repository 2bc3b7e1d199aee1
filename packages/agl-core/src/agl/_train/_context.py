"""The context a trainer gives an algorithm: the run's store, tasks, metrics and gateways.

An :class:`AlgorithmContext` is frozen; what a run accumulates (the latest resources, the
metrics history, the rollout totals) lives in its :class:`RunState`, which every view of the
context shares. What the trainer plugs in is typed by small protocols (:class:`MetricsSink`,
:class:`Progress`, :class:`Gateways`, :class:`LoopHooks`), so a test or another driver can
build a context of its own.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol, TypeVar

from pydantic import JsonValue

from agl._errors import AglError, InvalidInputError
from agl._resources import LLM, Resource, ResourcesUpdate
from agl._results import RolloutResult
from agl._rollouts import RolloutConfig, RolloutMode
from agl._settings import LoopSettings
from agl._train._rollout_stream import Gateways, Progress, ProgressBar, RolloutStream
from agl.store._base import Store

__all__ = [
    "AlgorithmContext",
    "Gateways",
    "LoopHooks",
    "MetricsSink",
    "Progress",
    "ProgressBar",
    "RunState",
]

T = TypeVar("T")


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


class MetricsSink(Protocol):
    """Where a run's metrics go (the trainer's: a :class:`agl._train._metrics.MetricsLogger`, whose
    steps :class:`agl._train._store_metrics.StoreMetrics` also sends to the run's store)."""

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        """Record one step's figures."""

    def rewind(self, step: int) -> list[dict[str, Any]]:
        """Drop the rows logged after ``step``; return the rows kept."""


class _QuietBar:
    def advance(self, result: RolloutResult) -> None:
        pass


@contextmanager
def _no_progress(label: str, total: int) -> Iterator[ProgressBar]:
    yield _QuietBar()


def _new_totals() -> dict[str, int]:
    return dict.fromkeys(
        ("rollouts", "succeeded", "failed", "cancelled", "retried", "timed_out"), 0
    )


@dataclass
class RunState:
    """What a run accumulates, shared by every view of its context.

    Attributes:
        resources: The latest published resources (at first, those given to the trainer).
        resources_id: The id of the latest published resource set.
        history: Every metrics row logged so far (``step`` included).
        totals: Rollouts run in all, and how many succeeded, failed, were cancelled, retried
            or passed their step's timeout.
    """

    resources: dict[str, Resource] = field(default_factory=dict)
    resources_id: str | None = None
    history: list[dict[str, float]] = field(default_factory=list)
    totals: dict[str, int] = field(default_factory=_new_totals)


@dataclass(frozen=True, kw_only=True)
class AlgorithmContext:
    """Everything an algorithm works with during one run (built by the trainer).

    Frozen: a view with other files (:meth:`with_run_dir`) is a copy sharing the run's
    :class:`RunState`.

    Attributes:
        store: The run's store.
        run_dir: Where the run writes its files (metrics, checkpoints, plots).
        train_tasks / val_tasks: The datasets, as lists of task inputs.
        rollout_config: The config enqueued rollouts get unless told otherwise.
        metrics: Where :meth:`log` writes.
        progress: Opens the progress bars of :meth:`run_rollouts`.
        gateways: What :meth:`serve_llm` starts (None: this run serves no LLM).
        console: Where the trainer prints (a :class:`rich.console.Console`), or None when it
            is quiet; algorithms print their own summaries there.
        hooks: Whom the loop tells when a step starts and ends (the trainer's plugins).
        state: What the run accumulates (resources, history, totals).
        loop: The loop settings the run goes by, set by the step loop before it sets the
            algorithms up. An algorithm reads these, not its constructor's ``loop``: in a
            per-agent run (:class:`agl.PerAgent`) the shared settings win over each
            algorithm's own (its ``max_staleness`` say).
    """

    store: Store
    run_dir: Path
    train_tasks: list[JsonValue] = field(default_factory=list)
    val_tasks: list[JsonValue] = field(default_factory=list)
    rollout_config: RolloutConfig = field(default_factory=RolloutConfig)
    metrics: MetricsSink
    progress: Progress = _no_progress
    gateways: Gateways | None = None
    console: Any = None
    hooks: LoopHooks = field(default_factory=_NoHooks)
    state: RunState = field(default_factory=RunState)
    loop: LoopSettings = field(default_factory=LoopSettings)

    @property
    def resources(self) -> dict[str, Resource]:
        """The latest published resources (before the first publish: the trainer's)."""
        return self.state.resources

    @property
    def resources_id(self) -> str | None:
        """The id of the latest published resource set."""
        return self.state.resources_id

    @property
    def history(self) -> list[dict[str, float]]:
        """Every metrics row logged so far (``step`` included)."""
        return self.state.history

    @property
    def totals(self) -> dict[str, int]:
        """Rollouts run in all, by outcome."""
        return self.state.totals

    def with_run_dir(self, run_dir: Path) -> AlgorithmContext:
        """This context with its files going to ``run_dir`` (created) instead.

        What each of two algorithms of one kind in a per-agent run gets, so their checkpoints
        and models stay apart. Everything else (store, resources, metrics, progress, the
        gateway) is this context's own, the run's state included.
        """
        run_dir.mkdir(parents=True, exist_ok=True)
        return replace(self, run_dir=run_dir)

    async def publish(self, resources: Mapping[str, Resource]) -> ResourcesUpdate:
        """Publish a new version of the resources; later rollouts use it by default."""
        update = await self.store.add_resources(resources)
        self.state.resources = dict(update.resources)
        self.state.resources_id = update.resources_id
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
        if self.gateways is None:
            raise AglError("this run serves no LLM: its trainer gave the context no gateways")
        template = await self.gateways.start(list(upstreams), enforce_resources)
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
        stream = RolloutStream(self)
        await stream.launch(
            tasks,
            mode=mode,
            n=n,
            resources_id=resources_id,
            config=config,
            metadata=metadata,
        )
        return await stream.take(label=description or f"{mode} rollouts", timeout=timeout)

    def rewind(self, step: int) -> None:
        """Forget the metrics logged after ``step``: a run resuming from a checkpoint of that
        step logs the later steps again, once (files and :attr:`history` alike)."""
        kept = self.metrics.rewind(step)
        self.state.history[:] = [
            {k: float(v) for k, v in row.items() if isinstance(v, int | float)} for row in kept
        ]

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        """Record one step's metrics (under the trainer: the console, ``metrics.jsonl``,
        TensorBoard when installed, and the run's store)."""
        self.metrics.log(step, metrics)
        self.state.history.append({"step": float(step), **metrics})

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
