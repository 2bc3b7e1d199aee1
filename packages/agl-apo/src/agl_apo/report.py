"""What a search leaves in ``run_dir/apo/``, and what it prints.

Written after every step (so a stopped run leaves them too):

- ``best_prompt.txt``: the best prompt found (with several prompts, one section per name);
- ``best.json``: the best candidate, its score, the best score after each round, why the search
  stopped and what it spent;
- ``candidates.csv`` / ``candidates.jsonl``: every candidate: round, origin, parents, mean
  score, score on each validation item, whether it is in the beam, on the Pareto front, the best,
  and its prompts;
- ``skipped.jsonl``: every candidate given up on, with the stage and the reason;
- ``scores.png``: the best score per round over every candidate's score (needs matplotlib;
  without it a log line says so).

At the end of the run :meth:`Report.show` prints the table of candidates and the best prompt.
"""

from __future__ import annotations

import csv
import json
import logging
import os
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.panel import Panel
from rich.table import Table

from agl_apo.state import APOState, Candidate

__all__ = ["Report"]

logger = logging.getLogger(__name__)

_ROWS_SHOWN = 30
_PROMPT_SHOWN = 60


class Report:
    """Writes a search's files into ``directory`` and prints its summary on ``console``."""

    def __init__(self, directory: Path, *, console: Console | None, plot: bool) -> None:
        self.directory = directory
        self.console = console
        self.plot_enabled = plot
        self._warned_plot = False

    @property
    def best_prompt_path(self) -> Path:
        return self.directory / "best_prompt.txt"

    def write(self, state: APOState) -> None:
        """Write every file but the plot."""
        self.directory.mkdir(parents=True, exist_ok=True)
        best = state.best_candidate()
        if best is not None:
            _write_text(self.best_prompt_path, _prompt_text(best))
        summary = {
            "best": best.id if best is not None else None,
            "score": best.score if best is not None else None,
            "templates": best.templates if best is not None else None,
            "best_scores": state.best_scores,
            "rounds": state.rounds,
            "step": state.step,
            "stopped": state.stopped,
            "candidates": len(state.candidates),
            "skipped": len(state.skips),
            "duplicates": state.duplicates,
            "rollouts": state.rollouts,
            "optimizer_calls": state.optimizer_calls,
            "optimizer_tokens": state.optimizer_tokens,
        }
        _write_text(self.directory / "best.json", json.dumps(summary, indent=2) + "\n")
        rows = [_row(state, candidate) for candidate in state.candidates]
        _write_text(
            self.directory / "candidates.jsonl", "".join(json.dumps(row) + "\n" for row in rows)
        )
        self._write_csv(state, rows)
        skips = "".join(json.dumps(skip.model_dump()) + "\n" for skip in state.skips)
        _write_text(self.directory / "skipped.jsonl", skips)

    def plot(self, state: APOState) -> Path | None:
        """Draw ``scores.png``; None (and one log line) without matplotlib or scores."""
        if not self.plot_enabled or not state.candidates:
            return None
        try:
            from matplotlib.figure import Figure
        except ImportError:
            if not self._warned_plot:
                logger.info("matplotlib is not installed: no score plot (agl-apo[plot] adds it)")
                self._warned_plot = True
            return None
        figure = Figure(figsize=(6.4, 4.0))
        axes = figure.subplots()
        for origin, marker in (("seed", "s"), ("rewrite", "o"), ("merge", "D")):
            points = [(c.round, c.score) for c in state.candidates if c.origin == origin]
            if points:
                xs, ys = zip(*points, strict=True)
                axes.scatter(xs, ys, marker=marker, alpha=0.6, label=origin)
        axes.plot(range(len(state.best_scores)), state.best_scores, color="black", label="best")
        axes.set_xlabel("round")
        axes.set_ylabel("validation score")
        axes.set_title("APO: candidate scores per round")
        axes.legend(loc="lower right")
        path = self.directory / "scores.png"
        self.directory.mkdir(parents=True, exist_ok=True)
        figure.savefig(path, dpi=100)
        return path

    def show(self, state: APOState) -> None:
        """Log the best prompt; print the candidates table and the best prompt on the console."""
        best = state.best_candidate()
        if best is not None:
            logger.info(
                "apo: best prompt %s (score %.4f), saved to %s:\n%s",
                best.id, best.score, self.best_prompt_path, _prompt_text(best),
            )  # fmt: skip
        if self.console is None:
            return
        self.console.print(self.table(state))
        if best is not None:
            title = f"best prompt: {best.id}, score {best.score:.4f}"
            self.console.print(Panel(_prompt_text(best).rstrip(), title=title, expand=False))
        if state.stopped:
            self.console.print(f"apo stopped: {state.stopped}")

    def table(self, state: APOState) -> Table:
        """The candidates as a rich table (the newest rows when there are many)."""
        table = Table(title="APO candidates", title_justify="left")
        for column in ("round", "candidate", "origin", "parents", "score", "kept"):
            table.add_column(column, justify="right" if column in ("round", "score") else "left")
        table.add_column("prompt", no_wrap=True, overflow="ellipsis", ratio=1)
        shown = state.candidates[-_ROWS_SHOWN:]
        for candidate in shown:
            marks = _marks(state, candidate)
            prompt = " | ".join(candidate.templates.values()).replace("\n", " ")
            if len(prompt) > _PROMPT_SHOWN:
                prompt = prompt[: _PROMPT_SHOWN - 3] + "..."
            table.add_row(
                str(candidate.round),
                candidate.id,
                candidate.origin,
                ",".join(candidate.parents) or "-",
                f"{candidate.score:.4f}",
                " ".join(marks) or "-",
                prompt,
            )
        hidden = len(state.candidates) - len(shown)
        if hidden:
            table.caption = f"{hidden} earlier candidates in {self.directory / 'candidates.csv'}"
        return table

    def _write_csv(self, state: APOState, rows: list[dict[str, Any]]) -> None:
        items = len(state.items)
        header = [
            "round", "candidate", "origin", "parents", "score", "in_beam", "on_front", "best",
            *(f"item_{i}" for i in range(items)),
            *(f"template:{name}" for name in state.resources),
        ]  # fmt: skip
        path = self.directory / "candidates.csv"
        temporary = path.with_suffix(".csv.tmp")
        with temporary.open("w", encoding="utf-8", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(header)
            for row in rows:
                writer.writerow(
                    [
                        row["round"], row["candidate"], row["origin"], " ".join(row["parents"]),
                        row["score"], int(row["in_beam"]), int(row["on_front"]), int(row["best"]),
                        *row["scores"],
                        *(row["templates"].get(name, "") for name in state.resources),
                    ]
                )  # fmt: skip
        os.replace(temporary, path)


def _row(state: APOState, candidate: Candidate) -> dict[str, Any]:
    return {
        "round": candidate.round,
        "candidate": candidate.id,
        "origin": candidate.origin,
        "parents": candidate.parents,
        "score": candidate.score,
        "scores": candidate.scores,
        "in_beam": candidate.id in state.beam,
        "on_front": candidate.id in state.front,
        "best": candidate.id == state.best,
        "templates": candidate.templates,
    }


def _marks(state: APOState, candidate: Candidate) -> list[str]:
    marks = []
    if candidate.id == state.best:
        marks.append("best")
    if candidate.id in state.beam:
        marks.append("beam")
    if candidate.id in state.front:
        marks.append("front")
    return marks


def _prompt_text(candidate: Candidate) -> str:
    if len(candidate.templates) == 1:
        return next(iter(candidate.templates.values())) + "\n"
    return "\n\n".join(f"### {name}\n{text}" for name, text in candidate.templates.items()) + "\n"


def _write_text(path: Path, text: str) -> None:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)
