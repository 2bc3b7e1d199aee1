"""Per-agent figures of a batch of rollouts: LLM calls, rollouts and rewards of each agent.

What a multi-agent run looks like from LightningRL's side (calls joined and attributed by
:func:`~agl.lightning.extract_calls`); ``Trainer.dev`` prints it, examples print it too. During
training, every step logs each agent's calls and transitions (``agents/<name>/calls``,
``agents/<name>/transitions``); :func:`agent_steps_table` shows them.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agl.lightning._calls import extract_calls

if TYPE_CHECKING:
    from rich.table import Table

    from agl._results import RolloutResult

__all__ = ["NO_AGENT", "AgentStats", "agent_stats", "agent_steps_table", "agents_table"]

NO_AGENT = "-"
"""The name calls that no agent span encloses are listed under."""


@dataclass
class AgentStats:
    """One agent's share of a batch of rollouts."""

    calls: int = 0
    rollouts: int = 0
    """Rollouts in which the agent made at least one call."""
    rewards: list[float] = field(default_factory=list)
    """The final rewards of those rollouts (0 for a rollout without one)."""

    @property
    def mean_reward(self) -> float:
        """The mean of :attr:`rewards` (0 if there are none)."""
        return statistics.fmean(self.rewards) if self.rewards else 0.0


def agent_stats(results: Sequence[RolloutResult]) -> dict[str, AgentStats]:
    """LLM calls per agent, read from the rollouts' spans (:data:`NO_AGENT` for no agent)."""
    stats: dict[str, AgentStats] = {}
    for result in results:
        calls = Counter(call.agent or NO_AGENT for call in extract_calls(result.spans).calls)
        for agent, count in calls.items():
            entry = stats.setdefault(agent, AgentStats())
            entry.calls += count
            entry.rollouts += 1
            entry.rewards.append(result.reward or 0.0)
    return stats


def agents_table(stats: Mapping[str, AgentStats]) -> Table:
    """:func:`agent_stats` as a rich table, one row per agent."""
    from rich.table import Table

    table = Table(title="LLM calls per agent", title_justify="left")
    for column in ("agent", "LLM calls", "rollouts", "mean reward"):
        # an agent's name is folded onto more lines, never cut short with an ellipsis
        left = column == "agent"
        table.add_column(column, justify="left" if left else "right", overflow="fold")
    for agent, entry in sorted(stats.items()):
        table.add_row(agent, str(entry.calls), str(entry.rollouts), f"{entry.mean_reward:.3f}")
    return table


def agent_steps_table(rows: Iterable[Mapping[str, Any]]) -> Table:
    """Each training step's LLM calls and transitions per agent, as a rich table.

    Args:
        rows: Metrics records, as :func:`agl.read_metrics` returns them from a run
            directory: the rows of training steps carry ``agents/<name>/calls`` and
            ``agents/<name>/transitions``; other rows (validation) are skipped.
    """
    from rich.table import Table

    table = Table(title="LLM calls and transitions per agent", title_justify="left")
    for column in ("step", "agent", "LLM calls", "transitions"):
        # an agent's name is folded onto more lines, never cut short with an ellipsis
        left = column == "agent"
        table.add_column(column, justify="left" if left else "right", overflow="fold")
    for row in rows:
        agents = sorted(
            key.split("/")[1] for key in row if key.startswith("agents/") and key.endswith("/calls")
        )
        for agent in agents:
            calls = row[f"agents/{agent}/calls"] or 0
            made = row.get(f"agents/{agent}/transitions") or 0
            table.add_row(str(row["step"]), agent, f"{calls:.0f}", f"{made:.0f}")
    return table
