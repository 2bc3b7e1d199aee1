"""LightningRL: from a rollout's spans to training transitions (credit assignment).

See :class:`TransitionBuilder` for the whole path, and the modules for each part: :mod:`.calls`
(joining and attributing LLM calls), :mod:`.credit` (returns per call), :mod:`.advantages`
(group baselines), :mod:`.transitions` (samples, batches, tensors and files), :mod:`.agents`
(per-agent figures of a batch), :mod:`.selection` (the rollouts SFT imitates).
"""

from agl.lightning.advantages import GRPO, RLOO, AdvantageEstimator, Group, Reinforce
from agl.lightning.agents import AgentStats, agent_stats, agent_steps_table, agents_table
from agl.lightning.builder import INFRASTRUCTURE_STATUSES, AgentSelector, TransitionBuilder
from agl.lightning.calls import AttemptCalls, LLMCall, extract_calls
from agl.lightning.credit import CreditAssigner, DiscountedReturn, FinalReward, StepRewards
from agl.lightning.selection import best_transitions
from agl.lightning.transitions import DropReport, Transition, TransitionBatch

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
