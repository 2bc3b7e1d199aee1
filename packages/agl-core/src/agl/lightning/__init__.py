"""LightningRL: from a rollout's spans to training transitions (credit assignment).

See :class:`TransitionBuilder` for the whole path, and the modules for each part: :mod:`._calls`
(joining and attributing LLM calls), :mod:`._credit` (returns per call), :mod:`._advantages`
(group baselines), :mod:`._samples` (a rollout's calls as samples, trajectories merged),
:mod:`._history` (whether a call continues the previous one: re-rendered histories),
:mod:`._transitions` (samples, batches, tensors and files), :mod:`._agents` (per-agent figures
of a batch), :mod:`._selection` (the rollouts SFT imitates).
"""

from agl.lightning._advantages import GRPO, RLOO, AdvantageEstimator, Group, Reinforce
from agl.lightning._agents import AgentStats, agent_stats, agent_steps_table, agents_table
from agl.lightning._builder import INFRASTRUCTURE_STATUSES, AgentSelector, TransitionBuilder
from agl.lightning._calls import AttemptCalls, LLMCall, extract_calls
from agl.lightning._credit import CreditAssigner, DiscountedReturn, FinalReward, StepRewards
from agl.lightning._selection import best_transitions
from agl.lightning._transitions import DropReport, Transition, TransitionBatch

__all__ = [
    "GRPO",
    "INFRASTRUCTURE_STATUSES",
    "RLOO",
    "AdvantageEstimator",
    "AgentSelector",
    "AgentStats",
    "AttemptCalls",
    "CreditAssigner",
    "DiscountedReturn",
    "DropReport",
    "FinalReward",
    "Group",
    "LLMCall",
    "Reinforce",
    "StepRewards",
    "Transition",
    "TransitionBatch",
    "TransitionBuilder",
    "agent_stats",
    "agent_steps_table",
    "agents_table",
    "best_transitions",
    "extract_calls",
]
