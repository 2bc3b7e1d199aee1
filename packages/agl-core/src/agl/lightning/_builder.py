"""TransitionBuilder: finished rollouts in, transitions of the selected agents out.

::

    builder = agl.TransitionBuilder(agents=["writer"], credit="final", advantage="grpo")
    batch = builder.build(results, step=step)       # results of ctx.run_rollouts(tasks, n=8)
    tensors = batch.to_tensors(pad_token_id=tokenizer.pad_token_id)
    ctx.log(step, batch.report.as_metrics())          # what was dropped, and why

For each rollout: read its calls (:func:`~agl.lightning._calls.extract_calls`: gateway and
instrumented spans joined, each call attributed to its agent, step rewards matched), credit
every call with a return (:mod:`~agl.lightning._credit`), compute rollout-level group advantages
(:mod:`~agl.lightning._advantages`), keep the calls of the selected agents and turn them into
:class:`~agl.lightning._transitions.Transition` samples (:mod:`~agl.lightning._samples`), one
per call or, in trajectory mode, one per run of calls that extend each other. Whatever cannot be
trained is dropped with a counted reason in :attr:`TransitionBatch.report`, never raised.

A call that continues its agent's conversation by its messages while its prompt ids do not
extend the previous call's prompt + response (a re-rendered history: reasoning dropped, a
compacted history, an edited tool result) is counted as ``prefix_mismatch`` (metric
``transitions/prefix_mismatch``), trained on its own and never merged, and one warning per
batch names how many and one of them; a new conversation by the same agent is no mismatch
(``trajectory_breaks`` in trajectory mode). :mod:`~agl.lightning._history` has the rule.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from agl._errors import InvalidInputError
from agl._results import RolloutResult
from agl._rollouts import AttemptStatus, RolloutStatus
from agl.lightning._advantages import AdvantageEstimator, Group, advantage_estimator
from agl.lightning._calls import AttemptCalls, LLMCall, extract_calls
from agl.lightning._credit import CreditAssigner, credit_assigner
from agl.lightning._samples import rollout_samples, warn_prefix_mismatch
from agl.lightning._transitions import DropReport, Transition, TransitionBatch

__all__ = ["INFRASTRUCTURE_STATUSES", "AgentSelector", "TransitionBuilder"]

INFRASTRUCTURE_STATUSES = frozenset(
    {
        AttemptStatus.UNRESPONSIVE,
        AttemptStatus.TIMEOUT,
        AttemptStatus.CANCELLED,
        AttemptStatus.RELEASED,
        AttemptStatus.PREPARING,
        AttemptStatus.RUNNING,
    }
)
"""Attempt outcomes that say nothing about the policy: a runner lost, a time limit hit, a
rollout cancelled or handed back. Rollouts ending so are dropped, never trained as reward 0."""


class AgentSelector:
    """Which agents a rule covers: exact names, shell-style patterns (``"writer*"``) and
    regular expressions (``"re:writer|rewriter"``, matched against the whole name).

    ``"*"`` (or None) covers every agent, including calls no agent span encloses (agent None);
    any other rule covers named agents only.

    Raises:
        InvalidInputError: a rule is empty, or a ``re:`` rule is not a valid expression.
    """

    def __init__(self, agents: str | Sequence[str] | None) -> None:
        if agents is None:
            agents = ["*"]
        elif isinstance(agents, str):
            agents = [agents]
        else:
            agents = list(agents)
        if not agents or not all(isinstance(agent, str) and agent for agent in agents):
            raise InvalidInputError(
                f"agents must be names or patterns, got {agents!r}", field="agents"
            )
        self.rules = agents
        self.everything = "*" in agents
        self._regexes = [_regex(agent) for agent in agents if agent.startswith(_REGEX)]
        self._exact = {a for a in agents if not is_pattern(a) and not a.startswith(_REGEX)}
        self._patterns = [a for a in agents if is_pattern(a) and not a.startswith(_REGEX)]
        self._cache: dict[str | None, bool] = {}

    def __call__(self, agent: str | None) -> bool:
        found = self._cache.get(agent)
        if found is None:
            if self.everything:
                found = True
            elif agent is None:
                found = False
            else:
                found = (
                    agent in self._exact
                    or any(fnmatch.fnmatchcase(agent, pattern) for pattern in self._patterns)
                    or any(regex.fullmatch(agent) for regex in self._regexes)
                )
            self._cache[agent] = found
        return found

    @property
    def names(self) -> frozenset[str]:
        """The exact names among the rules (a name takes precedence over a pattern where
        several selectors are tried in turn, as :class:`agl.PerAgent` does)."""
        return frozenset(self._exact)

    def __repr__(self) -> str:
        return f"AgentSelector({self.rules!r})"


_REGEX = "re:"


def _regex(rule: str) -> re.Pattern[str]:
    try:
        return re.compile(rule.removeprefix(_REGEX))
    except re.error as exc:
        raise InvalidInputError(
            f"agent rule {rule!r} is not a valid regular expression: {exc}",
            field="agents",
            value=rule,
        ) from None


def is_pattern(text: str) -> bool:
    """Whether an agent rule is a shell-style pattern rather than an exact name."""
    return any(char in text for char in "*?[")


@dataclass
class _Rollout:
    result: RolloutResult
    value: float
    calls: list[LLMCall]
    returns: list[float]

    @property
    def rollout_id(self) -> str:
        return self.result.rollout.rollout_id

    def call_keys(self) -> list[tuple[str, int]]:
        return [(call.rollout_id, call.index) for call in self.calls]


class TransitionBuilder:
    """Credit assignment and advantages: how finished rollouts become transitions.

    Args:
        agents: The agents to train: names or patterns (``"*"``, the default: every call).
        credit: A credit-assignment strategy or its name (``"final"``, ``"step"``,
            ``"discounted"``, or a plugin's).
        advantage: An advantage estimator or its name (``"grpo"``, ``"rloo"``,
            ``"reinforce"``).
        trajectory: Merge consecutive calls of an agent whose prompt extends the previous
            prompt + response into one sample, observation tokens masked out. Re-rendered
            histories are detected (``prefix_mismatch``) either way, and never merged.
        max_prompt_length / max_response_length: Drop (count) samples longer than this.
        drop_zero_variance: Drop groups the estimator can learn nothing from (all rewards
            equal); False keeps them with advantage 0.
        failed_reward: Train on rollouts whose agent failed (``failed``, not an infrastructure
            outcome) with this final reward; None (default) drops them.
        infrastructure_statuses: Attempt outcomes never trained on.
    """

    def __init__(
        self,
        *,
        agents: str | Sequence[str] | None = "*",
        credit: str | CreditAssigner = "final",
        advantage: str | AdvantageEstimator = "grpo",
        trajectory: bool = False,
        max_prompt_length: int | None = None,
        max_response_length: int | None = None,
        drop_zero_variance: bool = True,
        failed_reward: float | None = None,
        infrastructure_statuses: frozenset[AttemptStatus] = INFRASTRUCTURE_STATUSES,
    ) -> None:
        self.selector = AgentSelector(agents)
        self.credit = credit_assigner(credit)
        self.advantage = advantage_estimator(advantage)
        self.trajectory = trajectory
        for name, value in (
            ("max_prompt_length", max_prompt_length),
            ("max_response_length", max_response_length),
        ):
            if value is not None and value < 1:
                raise InvalidInputError(f"{name} must be at least 1, got {value}", field=name)
        self.max_prompt_length = max_prompt_length
        self.max_response_length = max_response_length
        self.drop_zero_variance = drop_zero_variance
        self.failed_reward = failed_reward
        self.infrastructure_statuses = infrastructure_statuses

    def __repr__(self) -> str:
        return (
            f"TransitionBuilder(agents={self.selector.rules!r}, credit={self.credit!r}, "
            f"advantage={self.advantage!r}, trajectory={self.trajectory})"
        )

    def with_agents(self, agents: str | Sequence[str] | None) -> TransitionBuilder:
        """The same settings for other agents."""
        copy = object.__new__(TransitionBuilder)
        copy.__dict__.update(self.__dict__)
        copy.selector = AgentSelector(agents)
        return copy

    def build(
        self,
        results: Sequence[RolloutResult],
        *,
        step: int = 0,
        calls: Mapping[str, AttemptCalls] | None = None,
        select: Callable[[str | None], bool] | None = None,
        policy_version: int | None = None,
        max_staleness: int | None = None,
    ) -> TransitionBatch:
        """Turn finished rollouts into the selected agents' transitions.

        Args:
            results: Finished rollouts (``ctx.run_rollouts``), the ``n`` samples of a task
                sharing ``metadata["task_index"]`` (or ``metadata["group_id"]``).
            step: Written into every transition.
            calls: Calls already extracted, by rollout id (several algorithms sharing one
                batch extract once).
            select: Which agents' calls to keep, instead of the ``agents`` rule (the
                per-agent trainer passes each algorithm exactly the agents it owns).
            policy_version / max_staleness: With both, drop data produced by weights more
                than ``max_staleness`` versions older than ``policy_version`` (the weights
                about to be trained). A group is kept whole or dropped whole: if any kept
                call of any of its rollouts is too old (reason ``stale``) or does not name its
                weight version (``no_weight_version``), every rollout of the group is dropped,
                so a group baseline is never computed over part of a group.
        """
        if (policy_version is None) != (max_staleness is None):
            raise InvalidInputError(
                "policy_version and max_staleness go together (got "
                f"policy_version={policy_version}, max_staleness={max_staleness})",
                field="max_staleness",
            )
        report = DropReport()
        groups: dict[str, list[_Rollout]] = {}
        for result in results:
            key = _group_key(result, step)
            attempt = calls.get(result.rollout.rollout_id) if calls is not None else None
            if attempt is None:
                attempt = extract_calls(result.spans)
            for name, count in attempt.counts.items():
                if count:
                    report.notes[name] += count
            selected = select if select is not None else self.selector
            mine = sum(1 for call in attempt.calls if selected(call.agent))
            report.calls_seen += mine
            report.notes["other_agents_calls"] += len(attempt.calls) - mine
            final, reason = self._final_reward(result, attempt)
            if final is None:
                mine_calls = [
                    (call.rollout_id, call.index) for call in attempt.calls if selected(call.agent)
                ]
                report.drop_rollout(result.rollout.rollout_id, mine_calls, reason)
                continue
            returns = self.credit.assign(attempt.calls, final)
            if len(returns) != len(attempt.calls):
                raise InvalidInputError(
                    f"credit strategy {self.credit!r} returned {len(returns)} returns for "
                    f"{len(attempt.calls)} calls",
                    field="credit",
                )
            value = returns[0] if returns else final
            keep = [i for i, call in enumerate(attempt.calls) if selected(call.agent)]
            groups.setdefault(key, []).append(
                _Rollout(
                    result,
                    value,
                    [attempt.calls[i] for i in keep],
                    [returns[i] for i in keep],
                )
            )

        if policy_version is not None and max_staleness is not None:
            for key in list(groups):
                stale = _staleness(groups[key], policy_version, max_staleness)
                if stale is not None:
                    for member in groups.pop(key):
                        report.drop_rollout(member.rollout_id, member.call_keys(), stale)
        keys = list(groups)
        estimated = self.advantage.estimate(
            [
                Group(key, [r.value for r in groups[key]], [r.returns for r in groups[key]])
                for key in keys
            ]
        )
        transitions: list[Transition] = []
        for key, estimate in zip(keys, estimated, strict=True):
            members = groups[key]
            advantages = estimate
            if advantages is None:
                if self.drop_zero_variance:
                    reason = "single_rollout_group" if len(members) < 2 else "zero_variance_group"
                    for member in members:
                        report.drop_rollout(member.rollout_id, member.call_keys(), reason)
                    continue
                advantages = [[0.0] * len(member.calls) for member in members]
            for member, rollout_advantages in zip(members, advantages, strict=True):
                transitions += rollout_samples(
                    member.calls,
                    member.returns,
                    rollout_advantages,
                    group_id=key,
                    step=step,
                    report=report,
                    trajectory=self.trajectory,
                    max_prompt_length=self.max_prompt_length,
                    max_response_length=self.max_response_length,
                )
        report.transitions = len(transitions)
        warn_prefix_mismatch(report)
        return TransitionBatch(transitions, report)

    # --- helpers ----------------------------------------------------------------------------

    def _final_reward(
        self, result: RolloutResult, attempt: AttemptCalls
    ) -> tuple[float | None, str]:
        if result.rollout.status != RolloutStatus.SUCCEEDED:
            last = result.attempts[-1].status if result.attempts else None
            if (
                last is None
                or last in self.infrastructure_statuses
                or result.rollout.status == RolloutStatus.CANCELLED
            ):
                return None, "infrastructure_failure"
            if self.failed_reward is None:
                return None, "rollout_failed"
            return self.failed_reward, ""
        if attempt.final_reward is None:
            return None, "no_reward"
        return attempt.final_reward, ""


def _staleness(members: list[_Rollout], policy_version: int, max_staleness: int) -> str | None:
    """Why a group cannot be trained on by weights ``policy_version``, or None if it can."""
    versions = [call.weight_version for member in members for call in member.calls]
    if any(version is None for version in versions):
        return "no_weight_version"
    if any(policy_version - version > max_staleness for version in versions if version is not None):
        return "stale"
    return None


def _group_key(result: RolloutResult, step: int) -> str:
    metadata = result.rollout.metadata
    group = metadata.get("group_id")
    if isinstance(group, str | int) and not isinstance(group, bool):
        return str(group)
    index = metadata.get("task_index")
    if isinstance(index, int) and not isinstance(index, bool):
        return f"step{step}-task{index}"
    return result.rollout.rollout_id
