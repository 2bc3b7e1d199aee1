"""The training loop of step algorithms: epochs, batches, resume, validation, publishing.

One :class:`StepLoop` runs one or more :class:`~agl.StepAlgorithm` members over a run's
tasks. Each step runs one batch of rollouts; their calls are read once, and each member gets
the calls (and LightningRL transitions) of the agents it owns, may publish new versions of the
resources its ``setup`` returned, and logs its figures. :meth:`agl.StepAlgorithm.run` is a loop
of one member owning every agent; :class:`agl.PerAgent` is a loop of one member per algorithm.
"""

from __future__ import annotations

import logging
import statistics
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

from agl._errors import InvalidInputError
from agl._settings import LoopSettings
from agl._train._rollout_stream import RolloutStream
from agl.lightning._agents import NO_AGENT

if TYPE_CHECKING:
    from agl._resources import Resource
    from agl._results import RolloutResult
    from agl._train._context import AlgorithmContext
    from agl.lightning import LLMCall, TransitionBatch, TransitionBuilder

__all__ = ["LoopAlgorithm", "Member", "StepBatch", "StepLoop", "reward_metrics"]

logger = logging.getLogger(__name__)


@dataclass
class StepBatch:
    """What one training step hands a :class:`~agl.StepAlgorithm`.

    Attributes:
        step / epoch: Where the run is (steps count from 1).
        results: Every rollout of the step (shared by all algorithms of a per-agent run).
        calls: The LLM calls of this algorithm's agents, joined and attributed, with their step
            rewards (text-level: ``call.messages()``, ``call.response``), in rollout order.
        transitions: This algorithm's agents' transitions, when it sets ``transitions`` (a
            :class:`~agl.TransitionBuilder`).
        metrics: Put figures here (``batch.metrics["loss"] = ...``); they are logged with the
            step, prefixed with the algorithm's name when several algorithms share the run.
    """

    step: int
    epoch: int
    results: list[RolloutResult]
    calls: list[LLMCall]
    transitions: TransitionBatch | None = None
    metrics: dict[str, float] = field(default_factory=dict)


class LoopAlgorithm(Protocol):
    """What the loop asks of a member's algorithm (:class:`agl.StepAlgorithm` has all of it)."""

    @property
    def name(self) -> str: ...
    @property
    def learns(self) -> bool: ...
    @property
    def transitions(self) -> TransitionBuilder | None: ...
    @property
    def loop(self) -> LoopSettings: ...
    @property
    def follows_loop(self) -> bool: ...

    async def setup(self, ctx: AlgorithmContext) -> Mapping[str, Resource]: ...
    async def step(self, ctx: AlgorithmContext, batch: StepBatch) -> Mapping[str, Resource]: ...
    async def close(self, ctx: AlgorithmContext) -> None: ...
    def resume_step(self) -> int: ...
    def policy_version(self) -> int | None: ...


@dataclass
class Member:
    """One algorithm of a loop, and which agents' calls are its."""

    algorithm: LoopAlgorithm
    owns_agent: Callable[[str | None], bool]
    label: str
    """Prefixes its metrics when the loop has several members; names its run_dir if not its
    algorithm's name."""
    owns: set[str] = field(default_factory=set)
    """The resources its setup returned (the only ones its steps may update)."""
    ctx: AlgorithmContext | None = None


CallsCheck = Callable[[int, "Counter[str | None]"], None]
"""Told each step's number and its calls per agent, when it has any (to warn)."""


class StepLoop:
    """Run step algorithms over a run's tasks, sharing each step's rollouts.

    Args:
        members: The algorithms, each with the agents it owns.
        settings: How the run is cut into steps.
        label: The loop's name in hooks (``agl_step_start``) and logs.
        check_calls: Called with each step's calls per agent (for warnings).
    """

    def __init__(
        self,
        members: Sequence[Member],
        settings: LoopSettings,
        *,
        label: str,
        check_calls: CallsCheck | None = None,
    ) -> None:
        self.members = list(members)
        self.settings = settings
        self.label = label
        self._check_calls = check_calls
        self._started: list[Member] = []
        self._warned: set[str] = set()

    async def run(self, ctx: AlgorithmContext) -> None:
        """Set every member up, run the steps and validations, close every member set up.

        Every member's context carries the loop's settings (``ctx.loop``) from its setup on.
        """
        ctx = replace(ctx, loop=self.settings)
        try:
            await self._setup(ctx)
            await self._loop(ctx)
        finally:
            for member in reversed(self._started):
                try:
                    await member.algorithm.close(member.ctx or ctx)
                except Exception:
                    logger.exception("closing algorithm %r failed", member.label)

    async def _loop(self, ctx: AlgorithmContext) -> None:
        settings = self.settings
        resumed = self._resumed_step()
        if resumed:
            ctx.rewind(resumed)
            logger.info("resuming after step %d", resumed)
        plan = [
            (epoch, tasks)
            for epoch in range(settings.n_epochs)
            for tasks in ctx.batches(ctx.train_tasks, settings.batch_size)
        ][: settings.max_steps]
        if ctx.val_tasks and not resumed:
            await self._validate(ctx, 0)
        # Batch b (from 1) is launched once the update of step b - 1 - max_staleness is done:
        # with 0, each step's rollouts start after the update before it (synchronous).
        stream = RolloutStream(ctx)
        launched = resumed
        for step in range(resumed + 1, len(plan) + 1):
            while launched < min(len(plan), step + settings.max_staleness):
                launched += 1
                await stream.launch(
                    plan[launched - 1][1],
                    n=settings.n_samples,
                    group_prefix=f"step{launched}" if settings.max_staleness else None,
                )
            epoch, tasks = plan[step - 1]
            await self._step(ctx, stream, len(tasks), step, epoch)
        if ctx.val_tasks and settings.n_epochs > 0 and len(plan) > resumed:
            await self._validate(ctx, len(plan))

    def _resumed_step(self) -> int:
        steps = {m.label: m.algorithm.resume_step() for m in self.members}
        if len(set(steps.values())) > 1:
            raise InvalidInputError(
                f"the algorithms resume from different steps ({steps}): give them checkpoints "
                "of the same step, or none",
                field="resume",
            )
        return next(iter(steps.values()))

    async def _setup(self, ctx: AlgorithmContext) -> None:
        owned: dict[str, str] = {}
        published: dict[str, Resource] = {}
        self._started = []
        for member in self.members:
            labelled = member.label != member.algorithm.name
            member.ctx = ctx.with_run_dir(ctx.run_dir / member.label) if labelled else ctx
            self._started.append(member)
            resources = dict(await member.algorithm.setup(member.ctx))
            for name in resources:
                if name in owned:
                    raise InvalidInputError(
                        f"resource {name!r} is claimed by both {owned[name]!r} and "
                        f"{member.label!r}: each resource has one owner",
                        field="resources",
                    )
                owned[name] = member.label
            member.owns = set(resources)
            published.update(resources)
        if published:
            await ctx.publish({**ctx.resources, **published})

    async def _step(
        self, ctx: AlgorithmContext, stream: RolloutStream, groups: int, step: int, epoch: int
    ) -> None:
        from agl.lightning import extract_calls

        started = time.monotonic()
        ctx.hooks.step_start(self.label, step)
        results = await stream.take(
            groups, label=f"epoch {epoch + 1} step {step}", timeout=self.settings.step_timeout
        )
        rollout_s = time.monotonic() - started
        extracted = {r.rollout.rollout_id: extract_calls(r.spans) for r in results}
        metrics = reward_metrics(results)
        agents = Counter(call.agent for calls in extracted.values() for call in calls.calls)
        self._check(step, sum(result.succeeded for result in results), agents)
        by_agent = Counter(call.agent or NO_AGENT for c in extracted.values() for call in c.calls)
        # Every agent's calls, trained or not: what a multi-agent run did, step by step.
        metrics.update({f"agents/{agent}/calls": float(n) for agent, n in sorted(by_agent.items())})
        updates: dict[str, Resource] = {}
        prefix_names = len(self.members) > 1
        for member in self.members:
            algorithm, mine = member.algorithm, member.owns_agent
            calls = [
                call
                for result in results
                for call in extracted[result.rollout.rollout_id].calls
                if mine(call.agent)
            ]
            transitions = None
            prefix = f"{member.label}/" if prefix_names else ""
            if algorithm.transitions is not None:
                rule = algorithm.transitions.selector

                def trained(agent: str | None, owned: Any = mine, rule: Any = rule) -> bool:
                    # its agents in this run, narrowed by its own TransitionBuilder(agents=...)
                    return bool(owned(agent) and rule(agent))

                bound = self._staleness_bound(member)
                transitions = algorithm.transitions.build(
                    results, step=step, calls=extracted, select=trained, **bound
                )
                if bound:
                    metrics.update(_staleness_metrics(transitions, bound, prefix))
            batch = StepBatch(step, epoch, results, calls, transitions)
            new = dict(await algorithm.step(member.ctx or ctx, batch) or {})
            stray = sorted(set(new) - member.owns)
            if stray:
                raise InvalidInputError(
                    f"algorithm {member.label!r} returned resources {stray} it does not own "
                    f"(it owns {sorted(member.owns)}; an algorithm owns what its setup() "
                    "returned)",
                    field="resources",
                )
            updates.update(new)
            metrics[f"{prefix}calls"] = float(len(calls))
            if transitions is not None:
                metrics.update(transitions.report.as_metrics(f"{prefix}transitions/"))
                made = Counter(t.agent or NO_AGENT for t in transitions)
                metrics.update(
                    {f"agents/{agent}/transitions": float(n) for agent, n in made.items()}
                )
            metrics.update({f"{prefix}{k}": float(v) for k, v in batch.metrics.items()})
        if updates:
            await ctx.publish({**ctx.resources, **updates})
        metrics["time/rollout_s"] = rollout_s
        metrics["time/step_s"] = time.monotonic() - started
        ctx.log(step, metrics)
        ctx.hooks.step_end(self.label, step, metrics)

    def _staleness_bound(self, member: Member) -> dict[str, int]:
        """The ``policy_version`` and ``max_staleness`` a member's transitions are held to
        ({} in the synchronous loop, or for an algorithm whose weights are not versioned)."""
        k = self.settings.max_staleness
        version = member.algorithm.policy_version() if k else None
        if version is None:
            if k and f"unversioned-{member.label}" not in self._warned:
                self._warned.add(f"unversioned-{member.label}")
                logger.warning(
                    "max_staleness=%d: algorithm %r names no policy version, so its data is "
                    "not checked for staleness (said once a run)",
                    k,
                    member.label,
                )
            return {}
        return {"policy_version": version, "max_staleness": k}

    def _check(self, step: int, succeeded: int, agents: Counter[str | None]) -> None:
        """Warn (once a run) when a step's successful rollouts recorded no LLM call at all,
        and pass the calls per agent to ``check_calls``; neither when nothing learns."""
        if not succeeded or not any(m.algorithm.learns for m in self.members):
            return
        if not agents:
            if "no-calls" not in self._warned:
                self._warned.add("no-calls")
                logger.warning(
                    "step %d: %d rollouts succeeded and recorded no LLM call: nothing to learn "
                    "from. agl sees an agent's calls through the gateway (an LLM resource "
                    "served by ctx.serve_llm) or an instrumentation: pass instrument=['openai'] "
                    "(or the agent framework's adapter, `agl plugins` lists them) to the "
                    "Trainer, or `import agl.auto` in the agent's module. (said once a run)",
                    step,
                    succeeded,
                )
        elif self._check_calls is not None:
            self._check_calls(step, agents)

    async def _validate(self, ctx: AlgorithmContext, step: int) -> None:
        results = await ctx.run_rollouts(
            ctx.val_tasks, mode="val", description="validation", timeout=self.settings.step_timeout
        )
        ctx.log(step, reward_metrics(results, prefix="val/"))


def _staleness_metrics(
    transitions: TransitionBatch, bound: dict[str, int], prefix: str
) -> dict[str, float]:
    """How many versions the trained samples lag behind the weights trained (max, mean)."""
    lags = [
        bound["policy_version"] - t.weight_version
        for t in transitions
        if t.weight_version is not None
    ]
    return {
        f"{prefix}staleness/max": float(max(lags, default=0)),
        f"{prefix}staleness/mean": statistics.fmean(lags) if lags else 0.0,
    }


def reward_metrics(results: Sequence[RolloutResult], prefix: str = "") -> dict[str, float]:
    """The usual per-step figures: reward mean/min/max, success, failures, retries, LLM calls.

    A rollout without a reward (it failed, or its agent reported none) counts as 0 in
    ``reward/mean``; ``reward/missing`` says how many there were. ``rollouts/success_rate``
    is a fraction (0 to 1); ``rollouts/failed`` and ``rollouts/retried`` are counts.
    """
    rewards = [result.reward if result.reward is not None else 0.0 for result in results]
    count = len(results) or 1
    metrics = {
        "reward/mean": statistics.fmean(rewards) if rewards else 0.0,
        "reward/min": min(rewards, default=0.0),
        "reward/max": max(rewards, default=0.0),
        "reward/missing": float(sum(result.reward is None for result in results)),
        "rollouts/success_rate": sum(result.succeeded for result in results) / count,
        "rollouts/failed": float(sum(not result.succeeded for result in results)),
        "rollouts/retried": float(sum(result.retried for result in results)),
        "llm_calls/mean": statistics.fmean(result.llm_calls for result in results)
        if results
        else 0.0,
    }
    return {f"{prefix}{key}": value for key, value in metrics.items()}
