"""Asynchronous training, measured: the quickstart with a long-tailed agent at max_staleness 0,
1 and 2, for the same number of updates.

The model and task are the quickstart's (``agl_torch.quickstart``: the tiny model built in code,
warmed up once and shared by every run, then LightningRL with 8 questions x 8 samples a step).
The agent is the quickstart's calculator agent made slow in the way real agents are: after the
model's first reply, each rollout pauses for a delay drawn from a lognormal distribution with a
median of 0.2 s and sigma 1.5 (p90 1.4 s, p99 6.9 s, capped at 10 s), as a slow tool call or
environment step would. The delay depends only on the question, the sample index and the seed,
so every run meets the same delays.

Rows, each over the RL part of a run (validation excluded):

- wall time for ``--steps`` updates, and the speed-up over the synchronous run(s);
- the learner's wait: the share of that time the loop spent waiting for rollouts rather than
  updating (``time/rollout_s`` over ``time/step_s``);
- rollouts/s trained (groups taken by the steps, samples of stale groups included);
- stale groups dropped (``transitions/dropped_rollouts/stale``, as rollouts);
- the validation reward before and after, and the training reward of the last 5 steps.

The synchronous run is repeated ``--sync-runs`` times (sampling is not seeded: the server
batches requests as they come), and its spread (min..max of the final validation reward) is
the yardstick the asynchronous runs' final reward is held to. Writes ``async_loop.png`` (the
reward curve of every run) into ``--out``. Takes ~17 minutes on 2 cores with the defaults.

Run: ``uv run --no-sync python benchmarks/async_loop.py``.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import time
from pathlib import Path
from typing import Any

import agl
from agl_torch.quickstart import solve, train, warm_up_model

MEDIAN_S = 0.2
SIGMA = 1.5
CAP_S = 10.0
SEED = 0
_CAP_ENV = "AGL_BENCH_DELAY_CAP"
"""Where ``--cap`` reaches the agent (which may run in runner processes)."""


def delay(question: str, sample: int, seed: int = SEED, cap: float = CAP_S) -> float:
    """The rollout's pause: lognormal (median ``MEDIAN_S``, sigma ``SIGMA``), capped."""
    rng = random.Random(f"{seed}/{question}/{sample}")
    return min(cap, rng.lognormvariate(math.log(MEDIAN_S), SIGMA))


@agl.rollout
async def slow_calculator(task: dict[str, Any], llm: agl.LLM, rollout: agl.Rollout) -> float:
    """The quickstart's agent, pausing after the model's first reply (see the docstring)."""
    sample = rollout.metadata.get("sample", 0)
    pause = delay(task["question"], int(sample), cap=float(os.environ.get(_CAP_ENV, CAP_S)))  # type: ignore[arg-type]
    return await solve(task, llm, pause=pause)


def figures(run_dir: Path, summary: dict[str, float], per_step: int) -> dict[str, float]:
    rows = [row for row in agl.read_metrics(run_dir) if "time/step_s" in row]
    wall = sum(row["time/step_s"] for row in rows)
    waited = sum(row["time/rollout_s"] for row in rows)
    taken = len(rows) * per_step  # every step takes whole groups: questions x samples
    stale = sum(row.get("transitions/dropped_rollouts/stale") or 0 for row in rows)
    return {
        "wall": wall,
        "wait": waited / wall if wall else 0.0,
        "rollouts_per_s": taken / wall if wall else 0.0,
        "stale": stale,
        "val_before": summary["val_before"],
        "val_after": summary["val_after"],
        "last5": summary["train_last5"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20, help="updates per run")
    parser.add_argument("--sync-runs", type=int, default=3, help="synchronous runs (spread)")
    parser.add_argument("--staleness", default="1,2", help="asynchronous runs' max_staleness")
    parser.add_argument("--out", type=Path, default=Path("runs/async-loop"))
    parser.add_argument("--warmup-epochs", type=int, default=60, help="SFT warm-up epochs")
    parser.add_argument("--tasks-per-step", type=int, default=8)
    parser.add_argument("--samples", type=int, default=8, help="rollouts per question")
    parser.add_argument("--val", type=int, default=64, help="validation questions")
    parser.add_argument("--cap", type=float, default=CAP_S, help="longest delay, seconds")
    args = parser.parse_args()
    os.environ[_CAP_ENV] = str(args.cap)
    delays = [delay(f"q{i}", s, cap=args.cap) for i in range(2000) for s in range(8)]
    median, p90 = statistics.median(delays), statistics.quantiles(delays, n=10)[-1]
    p99 = statistics.quantiles(delays, n=100)[-1]
    print(
        f"{os.cpu_count()} CPUs; delay after the first reply: median {median:.2f} s, "
        f"p90 {p90:.2f} s, p99 {p99:.2f} s, max {max(delays):.1f} s"
    )
    started = time.monotonic()
    warm = warm_up_model(args.out / "warm", seed=SEED, epochs=args.warmup_epochs, progress=False)
    print(f"warm-up (shared by every run): {time.monotonic() - started:.0f} s")
    runs = [(0, i) for i in range(args.sync_runs)]
    runs += [(int(k), 0) for k in args.staleness.split(",") if k.strip()]
    results: dict[tuple[int, int], dict[str, float]] = {}
    for staleness, repeat in runs:
        run_dir = args.out / f"staleness-{staleness}-run-{repeat}"
        summary = train(
            warm,
            run_dir,
            steps=args.steps,
            seed=SEED,
            max_staleness=staleness,
            tasks_per_step=args.tasks_per_step,
            samples=args.samples,
            val_tasks=args.val,
            agent=slow_calculator,
            progress=False,
            console=False,
        )
        per_step = args.tasks_per_step * args.samples
        results[(staleness, repeat)] = figures(run_dir, summary, per_step)
        row = results[(staleness, repeat)]
        print(
            f"max_staleness={staleness} run {repeat}: {row['wall']:.0f} s, "
            f"val {row['val_before']:.2f} -> {row['val_after']:.2f}"
        )
    report(results, args.steps, args.samples)
    plot(results, args.out)


def report(results: dict[tuple[int, int], dict[str, float]], steps: int, samples: int) -> None:
    sync = [row for (k, _), row in results.items() if k == 0]
    sync_wall = statistics.fmean(row["wall"] for row in sync)
    finals = [row["val_after"] for row in sync]
    low, high = min(finals), max(finals)
    print()
    print(
        f"| run ({steps} updates) | wall s | speed-up | learner waits | rollouts/s "
        "| stale groups dropped | val before -> after | train reward, last 5 |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for (k, repeat), row in results.items():
        name = f"max_staleness={k}" + (f" (run {repeat + 1})" if k == 0 else "")
        print(
            f"| {name} | {row['wall']:.0f} | {sync_wall / row['wall']:.2f}x "
            f"| {row['wait']:.0%} | {row['rollouts_per_s']:.1f} | {row['stale'] / samples:.0f} "
            f"| {row['val_before']:.2f} -> {row['val_after']:.2f} | {row['last5']:.2f} |"
        )
    print()
    print(f"synchronous final validation reward: {low:.2f}..{high:.2f} over {len(sync)} runs")
    for (k, _), row in results.items():
        if k:
            inside = low - 1e-9 <= row["val_after"] <= high + 1e-9
            verdict = "within" if inside else ("above" if row["val_after"] > high else "BELOW")
            print(
                f"max_staleness={k}: {sync_wall / row['wall']:.2f}x less wall time (target "
                f">= 1.8x at 1 or 2), final validation reward {row['val_after']:.2f}: {verdict} "
                "the synchronous spread"
            )


def plot(results: dict[tuple[int, int], dict[str, float]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(8, 4.5))
    for k, repeat in results:
        rows = [
            row
            for row in agl.read_metrics(out / f"staleness-{k}-run-{repeat}")
            if row.get("reward/mean") is not None and "time/step_s" in row
        ]
        label = f"max_staleness={k}" + (f", run {repeat + 1}" if k == 0 else "")
        style = "-" if k else ":"
        axis.plot([r["step"] for r in rows], [r["reward/mean"] for r in rows], style, label=label)
    axis.set_xlabel("update")
    axis.set_ylabel("training reward (mean of a step's rollouts)")
    axis.set_title("quickstart, long-tailed agent: reward per update")
    axis.legend()
    figure.tight_layout()
    path = out / "async_loop.png"
    figure.savefig(path, dpi=100)
    print(f"reward curves: {path}")


if __name__ == "__main__":
    main()
