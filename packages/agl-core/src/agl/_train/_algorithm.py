"""The algorithm interfaces and :class:`Baseline`.

The context they get is :mod:`agl._train._context`.

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
import dataclasses
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from agl._resources import Resource
from agl._settings import LoopSettings, settings
from agl._train._context import (
    AlgorithmContext,
    Gateways,
    LoopHooks,
    MetricsSink,
    Progress,
    ProgressBar,
    RunState,
)
from agl._train._step_loop import Member, StepBatch, StepLoop, reward_metrics

if TYPE_CHECKING:
    from agl.lightning import TransitionBuilder

__all__ = [
    "Algorithm",
    "AlgorithmContext",
    "Baseline",
    "Gateways",
    "LoopHooks",
    "LoopSettings",
    "MetricsSink",
    "Progress",
    "ProgressBar",
    "RunState",
    "StepAlgorithm",
    "StepBatch",
    "model_or_env",
    "reward_metrics",
]


_LOOP_FIELDS = frozenset(f.name for f in dataclasses.fields(LoopSettings))
_RENAMED_LIGHTNING = (
    "the attribute is named transitions, and LightningRL is agl.TransitionBuilder "
    "(transitions = agl.TransitionBuilder(...))"
)


class Algorithm(abc.ABC):
    """What trains: subclass it and implement :meth:`run`.

    Attributes:
        name: Shown in logs and ``agl plugins``.
    """

    name: ClassVar[str] = "algorithm"

    @abc.abstractmethod
    async def run(self, ctx: AlgorithmContext) -> None:
        """Train (or evaluate) using the context's tasks, store, runners and metrics."""


class StepAlgorithm(Algorithm):
    """An algorithm that learns one batch at a time, in a loop agl runs for it.

    Implement :meth:`setup` (the resources it owns: an LLM it trains, a prompt it optimises)
    and :meth:`step` (learn from one batch; return new versions of its resources). agl runs
    the loop: batches of tasks, ``n_samples`` rollouts each, transitions built with
    ``transitions``, publishing, validation, metrics. Because the loop is agl's, step algorithms
    can share one run, each with its own agents (``Trainer(algorithm={"writer": rl,
    "checker": apo})``, see :class:`agl.PerAgent`).

    Attributes:
        transitions: How this algorithm's transitions are built (None: it reads
            ``batch.calls`` and ``batch.results`` only, like a prompt optimiser).
        loop: How the loop cuts the run into steps (:class:`~agl.LoopSettings`: epochs, tasks
            per step, rollouts per task, a step limit and a step timeout); one frozen object,
            which an algorithm's constructor takes as ``loop=agl.LoopSettings(...)``.
        follows_loop: True for an algorithm that works with any loop (a prompt optimizer
            reading whatever batch it gets): sharing a run (:class:`agl.PerAgent`), it takes
            the loop settings of the algorithms that do not follow, and its own are ignored.
    """

    transitions: TransitionBuilder | None = None
    follows_loop: ClassVar[bool] = False
    learns: ClassVar[bool] = True
    """False for an algorithm that trains nothing (:class:`Baseline`): a step without LLM calls
    is then no cause for a warning."""
    loop: LoopSettings = LoopSettings()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "lightning" in vars(cls):
            raise TypeError(f"{cls.__name__} sets lightning: {_RENAMED_LIGHTNING}")
        loose = sorted(_LOOP_FIELDS & set(vars(cls)))
        if loose:
            raise TypeError(
                f"{cls.__name__} sets {', '.join(loose)} as class attributes; the loop's "
                f"settings are one object: loop = agl.LoopSettings({loose[0]}=...)"
            )

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "lightning":
            raise AttributeError(f"{type(self).__name__}.lightning: {_RENAMED_LIGHTNING}")
        if name in _LOOP_FIELDS:
            raise AttributeError(
                f"{type(self).__name__}.{name} is not an attribute: the loop's settings are "
                f"one frozen object, self.loop = agl.LoopSettings({name}=...) (or "
                f"dataclasses.replace(self.loop, {name}=...))"
            )
        super().__setattr__(name, value)

    def total_steps(self, n_tasks: int) -> tuple[int, int]:
        """(steps the loop runs, steps per epoch) over ``n_tasks`` training tasks, as agl's
        loop cuts them: ``batch_size`` tasks a step (all in one step if None), ``n_epochs``
        passes, at most ``max_steps`` (for a learning-rate schedule, or to know the last
        step)."""
        return self.loop.total_steps(n_tasks)

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

    def policy_version(self) -> int | None:
        """The version of the weights the next :meth:`step` trains, counted as the engine
        serving them counts the versions it names on its responses (and the gateway records on
        every call); None for an algorithm without versioned weights (the default).

        With ``LoopSettings(max_staleness=k)``, data produced by weights more than ``k``
        versions older than this is dropped before :meth:`step` sees it.
        """
        return None

    @abc.abstractmethod
    async def step(self, ctx: AlgorithmContext, batch: StepBatch) -> Mapping[str, Resource]:
        """Learn from one batch; return new versions of resources it owns ({} for none)."""

    async def close(self, ctx: AlgorithmContext) -> None:
        """Release what :meth:`setup` started (servers, files); save final outputs.

        Called once when the run ends, also when it ends with an error, if setup ran.
        """

    async def run(self, ctx: AlgorithmContext) -> None:
        member = Member(self, lambda agent: True, self.name)
        await StepLoop([member], self.loop, label=self.name).run(ctx)


class Baseline(StepAlgorithm):
    """Runs the agent over the data without training anything, and reports.

    Each batch of training tasks is one step (its metrics: :func:`reward_metrics`); the
    validation tasks, if any, run before the first and after the last epoch (``val/...``
    metrics). Useful to measure a starting point, and as the simplest algorithm to read.

    Args:
        loop: Epochs, tasks per step and rollouts per task (:class:`~agl.LoopSettings`).
    """

    name = "baseline"
    learns = False

    def __init__(self, *, loop: LoopSettings | None = None) -> None:
        self.loop = settings("loop", loop, LoopSettings())

    async def step(self, ctx: AlgorithmContext, batch: StepBatch) -> Mapping[str, Resource]:
        return {}


def model_or_env(model: str | os.PathLike[str] | None, env: str) -> str | None:
    """``model`` as a string, else what the environment variable ``env`` names (None if neither).

    For algorithms that train a model and are built by name (``Trainer(algorithm="...")``,
    with default settings): the model then comes from the environment.
    """
    if model is not None:
        return os.fspath(model)
    return os.environ.get(env) or None
