"""One optimizer per agent: several step algorithms sharing the rollouts of one run.

::

    trainer = agl.Trainer(algorithm={"writer": GRPO(...), "checker": APO(...), "*": None})

Each agent name or pattern maps to a :class:`~agl.StepAlgorithm`, or to None to leave the
agent frozen. Every step runs one batch of rollouts; its calls are read once, each call goes to
the algorithm of its agent, and each algorithm sees only its agents' calls and transitions and
may update only the resources its :meth:`~agl.StepAlgorithm.setup` returned. A call's agent is
matched against exact names first, then patterns in the order given (``"*"`` matches every
agent, and calls no agent span encloses).

Each step logs every agent's LLM calls, trained or frozen, as ``agents/<name>/calls`` (``-``
for calls outside any agent span) and the transitions built from them as
``agents/<name>/transitions`` (:func:`agl.lightning.agent_steps_table` shows both), beside
each algorithm's own ``calls``, ``transitions/...`` and metrics (prefixed with the algorithm's
name when there are several).

Two algorithms of one kind (two models, each trained by its own ``lightningrl-torch`` for its
own agent) are told apart by their agents: ``lightningrl-torch-writer`` and
``lightningrl-torch-checker`` prefix their metrics, and each writes its files (checkpoints, final
model) under ``<run_dir>/<that label>/`` (:meth:`~agl.AlgorithmContext.with_run_dir`). Each
serves its model behind its own gateway; give each its own resource name.
"""

from __future__ import annotations

import fnmatch
import logging
import re
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agl.algorithm import (
    Algorithm,
    AlgorithmContext,
    Baseline,
    StepAlgorithm,
    StepBatch,
    reward_metrics,
)
from agl.errors import InvalidInputError
from agl.lightning.agents import NO_AGENT
from agl.lightning.builder import is_pattern
from agl.resources import Resource

__all__ = ["PerAgent"]

logger = logging.getLogger("agl.trainer")


@dataclass
class _Member:
    algorithm: StepAlgorithm
    keys: list[str]
    owns: set[str] = field(default_factory=set)
    label: str = ""  # the algorithm's name, with its agents when another shares the name
    ctx: AlgorithmContext | None = None  # its view of the run (its own run_dir if labelled)


class PerAgent(Algorithm):
    """Run several step algorithms in one run, each on its own agents.

    Args:
        algorithms: Agent name or pattern -> :class:`~agl.StepAlgorithm`, the name of an
            installed one (built with its default settings, once per name), or None (frozen).
            One algorithm may serve several keys.
        n_epochs / batch_size / n_samples / max_steps: The shared loop. By default taken from
            the algorithms, which must then agree; algorithms that follow the loop
            (:attr:`~agl.StepAlgorithm.follows_loop`, such as a prompt optimizer) take the
            others' settings and are not asked.
        step_timeout: How long a step waits for its rollouts (default: the shortest of the
            algorithms' :attr:`~agl.StepAlgorithm.step_timeout`).
    """

    name = "per-agent"

    def __init__(
        self,
        algorithms: Mapping[str, StepAlgorithm | str | None],
        *,
        n_epochs: int | None = None,
        batch_size: int | None = None,
        n_samples: int | None = None,
        max_steps: int | None = None,
        step_timeout: float | None = None,
    ) -> None:
        if not isinstance(algorithms, Mapping) or not algorithms:
            raise InvalidInputError(
                "a per-agent run needs a mapping of agent names or patterns to algorithms",
                field="algorithm",
            )
        self.rules: list[tuple[str, StepAlgorithm | None]] = []
        members: dict[int, _Member] = {}
        by_name: dict[str, Any] = {}
        for key, entry in algorithms.items():
            given: object = key
            if not isinstance(given, str) or not given:
                raise InvalidInputError(
                    f"agent keys must be names or patterns, got {key!r}", field="algorithm"
                )
            if isinstance(entry, str):
                if entry not in by_name:
                    from agl.plugins import create_algorithm

                    where = f"algorithm[{key!r}]"
                    try:
                        by_name[entry] = create_algorithm(entry, field=where)
                    except InvalidInputError as exc:
                        raise InvalidInputError(f"agent {key!r}: {exc}", field=where) from exc
                value: object = by_name[entry]
            else:
                value = entry
            if value is not None and not isinstance(value, StepAlgorithm):
                kind = type(value).__name__
                raise InvalidInputError(
                    f"the algorithm for agent {key!r} is a {kind}, which runs its own loop "
                    "(run() only); to share a run's rollouts with other algorithms an algorithm "
                    "must be an agl.StepAlgorithm (setup() and step())",
                    field=f"algorithm[{key!r}]",
                )
            algorithm = value if isinstance(value, StepAlgorithm) else None
            self.rules.append((key, algorithm))
            if algorithm is not None:
                members.setdefault(id(algorithm), _Member(algorithm, [])).keys.append(key)
        self.members = list(members.values())
        if not self.members:
            raise InvalidInputError("every agent is frozen (None): nothing to train")
        names = Counter(m.algorithm.name for m in self.members)
        for member in self.members:
            member.label = member.algorithm.name
            if names[member.algorithm.name] > 1:  # two models of one kind: keep them apart
                agents = re.sub(r"[^A-Za-z0-9_.-]+", "_", "+".join(member.keys))
                member.label = f"{member.algorithm.name}-{agents}"
        self.n_epochs = self._agree("n_epochs", n_epochs)
        self.batch_size = self._agree("batch_size", batch_size)
        self.n_samples = self._agree("n_samples", n_samples)
        self.max_steps = self._agree("max_steps", max_steps)
        timeouts = [m.algorithm.step_timeout for m in self.members]
        self.step_timeout = (
            step_timeout
            if step_timeout is not None
            else min((t for t in timeouts if t is not None), default=None)
        )
        self.label = "+".join(m.label for m in self.members)
        self._exact = {key: alg for key, alg in self.rules if not is_pattern(key)}
        self._patterns = [(key, alg) for key, alg in self.rules if is_pattern(key)]
        self._owner_cache: dict[str | None, tuple[str | None, StepAlgorithm | None]] = {}
        self._started: list[_Member] = []
        self._warned: set[str] = set()  # warnings given once per run

    def _agree(self, setting: str, given: Any) -> Any:
        if given is not None:
            return given
        leading = [m for m in self.members if not m.algorithm.follows_loop] or self.members
        values = {repr(getattr(m.algorithm, setting)) for m in leading}
        if len(values) > 1:
            found = {m.label: getattr(m.algorithm, setting) for m in leading}
            raise InvalidInputError(
                f"the algorithms disagree on {setting} ({found}); give it to the per-agent run: "
                f"agl.PerAgent({{...}}, {setting}=...)",
                field=setting,
            )
        return getattr(leading[0].algorithm, setting)

    def owner(self, agent: str | None) -> StepAlgorithm | None:
        """The algorithm that trains ``agent``'s calls (None: frozen or unmatched)."""
        return self._rule(agent)[1]

    def _rule(self, agent: str | None) -> tuple[str | None, StepAlgorithm | None]:
        """The key ``agent`` matches (None: none) and its algorithm."""
        if agent in self._owner_cache:
            return self._owner_cache[agent]
        found: tuple[str | None, StepAlgorithm | None] = (None, None)
        if agent is not None and agent in self._exact:
            found = (agent, self._exact[agent])
        else:
            for pattern, algorithm in self._patterns:
                if pattern == "*" or (agent is not None and fnmatch.fnmatchcase(agent, pattern)):
                    found = (pattern, algorithm)
                    break
        self._owner_cache[agent] = found
        return found

    def _check_calls(self, step: int, succeeded: int, by_agent: Counter[str | None]) -> None:
        """Warn (once a run each) when a step's successful rollouts recorded no LLM call at all,
        or when a key matched none of its calls: either way something trains on nothing."""
        if not succeeded or all(isinstance(m.algorithm, Baseline) for m in self.members):
            return
        if not by_agent:
            self._warn_once(
                "no-calls",
                f"step {step}: {succeeded} rollouts succeeded and recorded no LLM call: nothing "
                "to learn from. agl sees an agent's calls through the gateway (an LLM resource "
                "served by ctx.serve_llm) or an instrumentation: pass instrument=['openai'] (or "
                "the agent framework's adapter, `agl plugins` lists them) to the Trainer, or "
                "`import agl.auto` in the agent's module.",
            )
            return
        matched = {self._rule(agent)[0] for agent in by_agent}
        seen = ", ".join(sorted(agent or NO_AGENT for agent in by_agent))
        for key, algorithm in self.rules:
            if key not in matched:
                what = "is frozen" if algorithm is None else "trained nothing"
                self._warn_once(
                    f"key:{key}",
                    f"step {step}: agent key {key!r} matched none of the step's LLM calls (their "
                    f"agents: {seen}); its algorithm {what}. Check the agent names "
                    "(`agl rollouts show` prints them).",
                )

    def _warn_once(self, what: str, message: str) -> None:
        if what not in self._warned:
            self._warned.add(what)
            logger.warning("%s (said once a run)", message)

    async def run(self, ctx: AlgorithmContext) -> None:
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
        resumed = self._resumed_step()
        if resumed:
            ctx.rewind(resumed)
            logger.info("resuming after step %d", resumed)
        step = 0
        if ctx.val_tasks and not resumed:
            await self._validate(ctx, step)
        for epoch in range(self.n_epochs):
            for tasks in ctx.batches(ctx.train_tasks, self.batch_size):
                if self.max_steps is not None and step >= self.max_steps:
                    break
                step += 1
                if step > resumed:
                    await self._step(ctx, tasks, step, epoch)
        if ctx.val_tasks and self.n_epochs > 0 and step > resumed:
            await self._validate(ctx, step)

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

    async def _step(self, ctx: AlgorithmContext, tasks: list[Any], step: int, epoch: int) -> None:
        from agl.lightning import extract_calls
        from agl.plugins import notify

        started = time.monotonic()
        notify("agl_step_start", algorithm=self.label, step=step)
        results = await ctx.run_rollouts(
            tasks,
            n=self.n_samples,
            description=f"epoch {epoch + 1} step {step}",
            timeout=self.step_timeout,
        )
        rollout_s = time.monotonic() - started
        extracted = {r.rollout.rollout_id: extract_calls(r.spans) for r in results}
        metrics = reward_metrics(results)
        # Every agent's calls, trained or not: what a multi-agent run did, step by step.
        by_agent = Counter(
            call.agent or NO_AGENT for calls in extracted.values() for call in calls.calls
        )
        self._check_calls(
            step,
            sum(result.succeeded for result in results),
            Counter(call.agent for calls in extracted.values() for call in calls.calls),
        )
        metrics.update({f"agents/{agent}/calls": float(n) for agent, n in sorted(by_agent.items())})
        updates: dict[str, Resource] = {}
        prefix_names = len(self.members) > 1
        for member in self.members:
            algorithm = member.algorithm

            def mine(agent: str | None, algorithm: StepAlgorithm = algorithm) -> bool:
                return self.owner(agent) is algorithm

            calls = [
                call
                for result in results
                for call in extracted[result.rollout.rollout_id].calls
                if mine(call.agent)
            ]
            transitions = None
            if algorithm.lightning is not None:
                rule = algorithm.lightning.selector

                def trained(agent: str | None, owned: Any = mine, rule: Any = rule) -> bool:
                    # its agents in this run, narrowed by its own LightningRL(agents=...)
                    return bool(owned(agent) and rule(agent))

                transitions = algorithm.lightning.build(
                    results, step=step, calls=extracted, select=trained
                )
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
            prefix = f"{member.label}/" if prefix_names else ""
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
        notify("agl_step_end", algorithm=self.label, step=step, metrics=metrics)

    async def _validate(self, ctx: AlgorithmContext, step: int) -> None:
        results = await ctx.run_rollouts(
            ctx.val_tasks, mode="val", description="validation", timeout=self.step_timeout
        )
        ctx.log(step, reward_metrics(results, prefix="val/"))
