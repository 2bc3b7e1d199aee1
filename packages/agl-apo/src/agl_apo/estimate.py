"""A dry run: what an APO configuration will cost, before anything runs.

::

    apo = APO(search=SearchSettings(beam_width=4), budgets=Budgets(max_rounds=5))
    estimate = apo.estimate(train_tasks=200, val_tasks=50)

:func:`estimate_cost` walks the search as the settings allow it to grow (every beam member
expanded, every rewrite valid, a merge every round) and counts the rollouts (the training
loop's, the loop's validation before and after, and the rollouts that score candidates) and the
optimizer calls and tokens that implies, capped by the budgets. These are upper bounds for the
counts; tokens are a rough figure (about 4 characters per token, replies of typical length).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from agl import LoopSettings
    from agl_apo.meta_prompts import MetaPrompts
    from agl_apo.settings import Budgets, SearchSettings


class APOSettings(Protocol):
    """What an estimate reads of an APO configuration (:class:`agl_apo.APO` has it all)."""

    @property
    def search(self) -> SearchSettings: ...
    @property
    def budgets(self) -> Budgets: ...
    @property
    def loop(self) -> LoopSettings: ...
    @property
    def meta_prompts(self) -> MetaPrompts: ...


__all__ = ["CostEstimate", "estimate_cost"]

_CHARS_PER_TOKEN = 4
_CRITIQUE_TOKENS = 300
_CRITIQUE_CHARS = 1200


@dataclass(frozen=True)
class CostEstimate:
    """What a configuration implies (see the module docstring)."""

    loop_steps: int
    rounds: int
    train_rollouts: int
    loop_val_rollouts: int
    scoring_rollouts: int
    candidates: int
    critique_calls: int
    rewrite_calls: int
    merge_calls: int
    optimizer_tokens: int
    notes: tuple[str, ...] = field(default=())

    @property
    def optimizer_calls(self) -> int:
        return self.critique_calls + self.rewrite_calls + self.merge_calls

    @property
    def rollouts(self) -> int:
        """Rollouts in all: training batches, the loop's validation, candidate scoring."""
        return self.train_rollouts + self.loop_val_rollouts + self.scoring_rollouts

    def table(self) -> Table:
        """The estimate as a rich table."""
        table = Table(title="APO cost estimate (upper bounds)", title_justify="left")
        table.add_column("what")
        table.add_column("count", justify="right")
        for label, value in (
            ("training steps (loop)", self.loop_steps),
            ("optimization rounds", self.rounds),
            ("training rollouts (loop)", self.train_rollouts),
            ("validation rollouts (loop, before and after)", self.loop_val_rollouts),
            ("candidate scoring rollouts", self.scoring_rollouts),
            ("rollouts in all", self.rollouts),
            ("candidates scored (seed included)", self.candidates),
            ("optimizer calls (critique / rewrite / merge)", self.optimizer_calls),
            ("optimizer tokens (rough)", self.optimizer_tokens),
        ):
            table.add_row(label, f"{value:,}")
        table.add_row(
            "",
            f"({self.critique_calls} / {self.rewrite_calls} / {self.merge_calls})",
            end_section=True,
        )
        if self.notes:
            table.caption = "; ".join(self.notes)
        return table

    def __str__(self) -> str:
        return (
            f"{self.rounds} rounds over {self.loop_steps} steps; rollouts: {self.rollouts} "
            f"({self.train_rollouts} training, {self.loop_val_rollouts} validation, "
            f"{self.scoring_rollouts} scoring {self.candidates} candidates); optimizer: "
            f"{self.optimizer_calls} calls ({self.critique_calls} critique, {self.rewrite_calls} "
            f"rewrite, {self.merge_calls} merge), about {self.optimizer_tokens:,} tokens"
        )

    def show(self, console: Console | None = None) -> None:
        """Print the table (on stdout unless a console is given)."""
        (console or Console()).print(self.table())


def estimate_cost(
    apo: APOSettings,
    train_tasks: int | Sequence[Any],
    val_tasks: int | Sequence[Any] = 0,
    *,
    prompt_chars: int | Sequence[int] = 1000,
) -> CostEstimate:
    """Estimate what ``apo`` costs on datasets of these sizes (see the module docstring).

    Args:
        apo: The configured algorithm (its loop settings are the loop's: alone, it runs its
            own; beside other algorithms the loop is theirs).
        train_tasks / val_tasks: The datasets, or their sizes.
        prompt_chars: The length of the optimized prompt (or of each, with several).
    """
    n_train = train_tasks if isinstance(train_tasks, int) else len(train_tasks)
    n_val = val_tasks if isinstance(val_tasks, int) else len(val_tasks)
    chars = [prompt_chars] if isinstance(prompt_chars, int) else list(prompt_chars)
    search, budgets = apo.search, apo.budgets
    steps = _loop_steps(apo, n_train)
    rounds = min(budgets.max_rounds, len(steps))
    score_cost = min(search.val_size, n_val if n_val else n_train) * search.val_samples
    critique_tokens, rewrite_tokens, merge_tokens = _call_tokens(apo, max(chars, default=0))
    notes = []
    candidates, scoring = 1, score_cost
    critiques = rewrites = merges = tokens = done = 0
    width = search.beam_width + (search.front if search.pareto else 0)
    while done < rounds:
        parents = min(width, candidates)
        merging = search.merges_per_round if search.pareto and candidates >= 2 else 0
        cost = (
            parents * critique_tokens
            + parents * search.branch_factor * rewrite_tokens
            + merging * merge_tokens
        )
        if (
            budgets.max_optimizer_tokens is not None
            and tokens + cost > budgets.max_optimizer_tokens
        ):
            notes.append("the optimizer token budget ends the search early")
            break
        new = parents * search.branch_factor + merging
        if budgets.max_rollouts is not None and scoring + new * score_cost > budgets.max_rollouts:
            new = max((budgets.max_rollouts - scoring) // max(score_cost, 1), 0)
            notes.append("the rollout budget ends the search early")
        critiques += parents
        rewrites += parents * search.branch_factor
        merges += merging
        tokens += cost
        candidates += new
        scoring += new * score_cost
        done += 1
        if budgets.max_rollouts is not None and scoring + score_cost > budgets.max_rollouts:
            break
    if budgets.patience is not None and done > budgets.patience:
        notes.append(f"early stopping (patience {budgets.patience}) may end it sooner")
    if budgets.max_rollouts is not None and score_cost > budgets.max_rollouts:
        notes.append("the rollout budget cannot even score the seed")
        scoring, candidates = 0, 0
    return CostEstimate(
        loop_steps=len(steps),
        rounds=done,
        train_rollouts=sum(steps) * apo.loop.n_samples,
        loop_val_rollouts=2 * n_val,
        scoring_rollouts=scoring,
        candidates=candidates,
        critique_calls=critiques,
        rewrite_calls=rewrites,
        merge_calls=merges,
        optimizer_tokens=math.ceil(tokens),
        notes=tuple(dict.fromkeys(notes)),
    )


def _loop_steps(apo: APOSettings, n_train: int) -> list[int]:
    """The number of tasks of each step the loop runs."""
    batch = apo.loop.batch_size or max(n_train, 1)
    sizes = [min(batch, n_train - start) for start in range(0, n_train, batch)]
    steps: list[int] = []
    for _ in range(apo.loop.n_epochs):
        for size in sizes:
            if apo.loop.max_steps is not None and len(steps) >= apo.loop.max_steps:
                return steps
            steps.append(size)
    return steps


def _call_tokens(apo: APOSettings, prompt: int) -> tuple[int, int, int]:
    """Rough tokens of one critique, rewrite and merge call for a prompt of ``prompt`` chars."""
    meta = apo.meta_prompts
    system = len(meta.system)
    reply = int(prompt * 1.2) // _CHARS_PER_TOKEN + 50
    examples = apo.search.n_examples * apo.search.max_example_chars
    critique = (system + len(meta.critique) + prompt + examples) // _CHARS_PER_TOKEN
    rewrite = (system + len(meta.rewrite) + prompt + _CRITIQUE_CHARS) // _CHARS_PER_TOKEN
    merge = (system + len(meta.merge) + 2 * prompt + _CRITIQUE_CHARS // 2) // _CHARS_PER_TOKEN
    return critique + _CRITIQUE_TOKENS, rewrite + reply, merge + reply
