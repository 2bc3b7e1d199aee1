"""What a run leaves behind (best prompt, tables, plot, console summary) and the dry run."""

from __future__ import annotations

import csv
import io
import json
import logging
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

import agl
from agl_apo import APO, Budgets, SearchSettings, estimate_cost


def test_the_run_leaves_the_best_prompt_the_tables_and_the_plot(rig: Any) -> None:
    console = Console(file=io.StringIO(), width=160)
    train = rig.tasks("alpha", "alpha", "beta", "alpha")
    val = rig.tasks("alpha", "beta", "alpha", "beta")
    apo = rig.apo(plot=True, console=console, budgets={"max_rounds": 2})
    run = rig.fit(apo, rig.tmp_path / "run", train, val)

    state = run.states()[-1]
    best = state.best_candidate()
    assert best is not None
    out = run.run_dir / "apo"
    assert (out / "best_prompt.txt").read_text() == best.templates["prompt"] + "\n"
    summary = json.loads((out / "best.json").read_text())
    assert summary["best"] == best.id
    assert summary["score"] == best.score
    assert summary["best_scores"] == state.best_scores
    assert summary["stopped"] == "max_rounds: 2 rounds done"

    with (out / "candidates.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [row["candidate"] for row in rows] == [c.id for c in state.candidates]
    assert [float(row["score"]) for row in rows] == [c.score for c in state.candidates]
    assert [row["item_3"] for row in rows][:3] == ["0.0", "0.0", "1.0"]
    assert rows[0]["template:prompt"] == rig.SEED
    assert [row["best"] for row in rows].count("1") == 1
    lines = (out / "candidates.jsonl").read_text().splitlines()
    assert [json.loads(line)["candidate"] for line in lines] == [c.id for c in state.candidates]
    assert (out / "skipped.jsonl").read_text() == ""
    assert (out / "scores.png").read_bytes().startswith(b"\x89PNG")

    printed = console.file.getvalue()  # type: ignore[attr-defined]
    assert "APO candidates" in printed
    assert f"best prompt: {best.id}, score 1.0000" in printed
    assert "Remember: beta." in printed
    assert "apo stopped: max_rounds: 2 rounds done" in printed


def test_without_plot_there_is_no_png(rig: Any) -> None:
    run = rig.fit(rig.apo(budgets={"max_rounds": 1}), rig.tmp_path / "run", rig.tasks("alpha"))
    assert (run.run_dir / "apo" / "best_prompt.txt").exists()
    assert not (run.run_dir / "apo" / "scores.png").exists()


def test_the_dry_run_estimate_bounds_what_a_run_spends(
    rig: Any, caplog: pytest.LogCaptureFixture
) -> None:
    console = Console(file=io.StringIO(), width=160)
    apo = rig.apo(budgets={"max_rounds": 2})
    estimate = apo.estimate(train_tasks=4, val_tasks=4, prompt_chars=len(rig.SEED), console=console)
    # 2 steps of 4 tasks; round 1 expands the seed (1 critique, 2 rewrites); round 2 up to 3
    # candidates (3 critiques, 6 rewrites) and one merge; each candidate scored on 4 tasks
    assert (estimate.loop_steps, estimate.rounds) == (2, 2)
    assert (estimate.train_rollouts, estimate.loop_val_rollouts) == (8, 8)
    assert (estimate.critique_calls, estimate.rewrite_calls, estimate.merge_calls) == (4, 8, 1)
    assert estimate.candidates == 10
    assert estimate.scoring_rollouts == 40
    assert estimate.rollouts == 56
    assert estimate.optimizer_tokens > 0
    assert "APO cost estimate" in console.file.getvalue()  # type: ignore[attr-defined]
    assert "13 calls" in str(estimate)

    with caplog.at_level(logging.INFO, logger="agl_apo"):
        run = rig.fit(
            apo, rig.tmp_path / "run", rig.tasks("alpha", "alpha", "beta", "alpha"),
            rig.tasks("alpha", "beta", "alpha", "beta"),
        )  # fmt: skip
    state = run.states()[-1]
    assert state.optimizer_calls <= estimate.optimizer_calls
    assert state.rollouts <= estimate.scoring_rollouts
    assert len(run.rollouts) <= estimate.rollouts
    assert any("at most: 2 rounds over 2 steps" in r.getMessage() for r in caplog.records)


def test_the_estimate_follows_the_budgets() -> None:
    apo = APO(
        console=False,
        budgets=Budgets(max_rounds=10, max_rollouts=20),
        search=SearchSettings(val_size=4),
        loop=agl.LoopSettings(batch_size=2),
    )
    estimate = estimate_cost(apo, train_tasks=list(range(20)), val_tasks=list(range(8)))
    assert estimate.scoring_rollouts <= 20
    assert "the rollout budget ends the search early" in estimate.notes
    tight = APO(console=False, budgets=Budgets(max_optimizer_tokens=100))
    assert estimate_cost(tight, 8, 4).optimizer_calls == 0
    assert "the optimizer token budget ends the search early" in estimate_cost(tight, 8, 4).notes
    assert (
        estimate_cost(
            APO(budgets=Budgets(max_rollouts=3), search=SearchSettings(val_size=4)), 8, 4
        ).scoring_rollouts
        == 0
    )


def test_by_default_apo_prints_where_the_trainer_prints(rig: Any, tmp_path: Path) -> None:
    console = Console(file=io.StringIO(), width=160)
    loud = rig.apo(console=None, budgets={"max_rounds": 1})
    rig.fit(loud, tmp_path / "loud", rig.tasks("strict"), console=console)
    assert "best prompt" in console.file.getvalue()  # type: ignore[attr-defined]
    quiet = rig.apo(console=None, budgets={"max_rounds": 1})
    rig.fit(quiet, tmp_path / "quiet", rig.tasks("strict"))  # the trainer is quiet: so is APO
    assert quiet.console is None
