"""LightningRL's choices, measured: validation reward after N updates, 3 seeds each, on CPU.

The task is written for this: **two agents in a chain, with an intermediate reward**. Agent
``first`` answers ``What is a<op>b?`` with the quickstart's calculator agent
(:func:`agl_torch.quickstart.ask`: the model may call the calculator, then answers); a step
reward says whether its answer is right. Agent ``second`` then answers ``What is x<op>c?``, x
being whatever ``first`` answered; the final reward is whether that is the true value of
``(a<op>b)<op>c``. A rollout makes two to four LLM calls, and a right second agent still
scores 0 after a wrong first one: which call deserves the outcome is the question credit
assignment answers.

One tiny model serves both agents. It is built in code and warmed up once per seed on a
sloppy teacher's demonstrations of both hops (the calculator in half of them, a near-miss
guess in the others: :func:`agl_torch.quickstart.demonstrations`), its learning rate decaying
linearly to 0 (with a constant one, seed 0's warm model ended on a loss spike, and RL from it
gained 0.00-0.10 in three runs where it gained 0.15-0.50 in six from the decayed one:
:data:`agl_torch.sft.LRSchedule`), then every configuration trains from that same model
with LightningRL on agl-torch, for ``--steps`` updates of ``--tasks-per-step`` questions x
``--samples`` samples, and is validated on ``--val`` questions before the first update and
after the last. The configurations:

- ``final`` (the default): the final reward copied to every call, GRPO over rollouts;
- ``step``: each call gets the step rewards emitted for it plus the final reward;
- ``discounted``: ``G_t = r_t + 0.95 G_(t+1)``, the final reward on the last call;
- ``trajectory``: ``final``, with each agent's calls merged into one sample where the prompt
  extends the previous prompt and response (observation tokens masked);
- ``calls-baseline``: ``final``, with GRPO's mean and deviation over every call's return
  instead of one value per rollout (long rollouts weigh more);
- ``second-only``: ``final``, training the ``second`` agent only (``first`` frozen).

Prints a Markdown table: validation reward before and after (mean ± sample deviation over the
seeds), the gain, and minutes per run. ~24 minutes on 2 cores with the defaults.

Run: ``uv run --no-sync python benchmarks/learning.py``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import agl
from agl.lightning import GRPO
from agl_torch.quickstart import CALCULATOR_TOOL, ask, demonstrations, tasks

_OPERATIONS: dict[str, Callable[[int, int], int]] = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
}

CONFIGS: dict[str, Callable[[], agl.TransitionBuilder]] = {
    "final": lambda: agl.TransitionBuilder(credit="final"),
    "step": lambda: agl.TransitionBuilder(credit="step"),
    "discounted": lambda: agl.TransitionBuilder(credit="discounted"),
    "trajectory": lambda: agl.TransitionBuilder(credit="final", trajectory=True),
    "calls-baseline": lambda: agl.TransitionBuilder(credit="final", advantage=GRPO(over="calls")),
    "second-only": lambda: agl.TransitionBuilder(credit="final", agents="second"),
}
"""Each configuration's transition builder (the rest of a run is the same)."""


def chains(count: int, *, seed: int) -> list[dict[str, Any]]:
    """``count`` two-hop questions: ``first`` (a question), ``partial`` (its answer), ``op``
    and ``c`` (the second hop) and ``answer``."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        a, b, c = rng.randint(2, 9), rng.randint(2, 9), rng.randint(2, 9)
        op1, op2 = rng.choice("+-*"), rng.choice("+-*")
        partial = _OPERATIONS[op1](a, b)
        out.append(
            {
                "first": f"What is {a}{op1}{b}?",
                "partial": partial,
                "op": op2,
                "c": c,
                "answer": _OPERATIONS[op2](partial, c),
            }
        )
    return out


def _second_hops(count: int, *, seed: int) -> list[dict[str, Any]]:
    """Second-hop questions as the quickstart's demonstrations take them."""
    out = []
    for chain in chains(count, seed=seed):
        x, op, c = chain["partial"], chain["op"], chain["c"]
        out.append(
            {
                "question": f"What is {x}{op}{c}?",
                "expression": f"{x}{op}{c}",
                "answer": chain["answer"],
            }
        )
    return out


@agl.rollout
async def two_agents(task: dict[str, Any], llm: agl.LLM) -> float:
    """``first`` answers the first hop (step reward: right or not), ``second`` the second."""
    with agl.agent_span("first"):
        first = (await ask(task["first"], llm)).strip()
    agl.emit_reward(1.0 if first == str(task["partial"]) else 0.0)
    try:
        x = int(first)
    except ValueError:
        return 0.0
    with agl.agent_span("second"):
        second = await ask(f"What is {x}{task['op']}{task['c']}?", llm)
    return 1.0 if second.strip() == str(task["answer"]) else 0.0


def warm_up(out: Path, *, seed: int, epochs: int, demos: int) -> Path:
    """The tiny model warmed up on both hops' sloppy demonstrations (calculator in half)."""
    from agl_torch.warm_up import warm_up_tiny_model

    questions = tasks(demos, seed=seed + 3) + _second_hops(demos, seed=seed + 4)
    conversations = demonstrations(questions, tool_share=0.5, seed=seed)
    return warm_up_tiny_model(
        out,
        conversations,
        epochs=epochs,
        tools=[CALCULATOR_TOOL],
        seed=seed,
        max_position_embeddings=1024,
        progress=False,
        lr_schedule="linear",
    )


def run_one(
    warm: Path,
    out: Path,
    config: str,
    *,
    seed: int,
    steps: int,
    per_step: int,
    samples: int,
    val: int,
) -> dict[str, float]:
    """One configuration from ``warm``: validation reward before and after, and minutes."""
    from agl_torch.rl import LightningRLTorch
    from agl_torch.settings import CheckpointSettings, LearnerSettings

    algorithm = LightningRLTorch(
        warm,
        loop=agl.LoopSettings(n_samples=samples, batch_size=per_step, max_steps=steps),
        learner=LearnerSettings(lr=5e-4, seed=seed),
        transitions=CONFIGS[config](),
        checkpoints=CheckpointSettings(every=0),
    )
    trainer = agl.Trainer(
        algorithm=algorithm,
        run_dir=out,
        concurrency=per_step * samples,
        instrument=["openai"],
        console=False,
        progress=False,
        plot=False,
    )
    started = time.monotonic()
    result = trainer.fit(
        two_agents, chains(steps * per_step, seed=seed + 1), val_dataset=chains(val, seed=seed + 2)
    )
    vals = [row["val/reward/mean"] for row in result.history if "val/reward/mean" in row]
    assert len(vals) == 2, f"{config}: expected validation before and after, got {vals}"
    trained = sum(row.get("transitions/kept") or 0 for row in result.history)
    return {
        "before": vals[0],
        "after": vals[-1],
        "minutes": (time.monotonic() - started) / 60,
        "transitions": trained,
    }


def _spread(values: list[float]) -> str:
    mean = statistics.fmean(values)
    deviation = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{mean:.3f} ± {deviation:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10, help="updates per run")
    parser.add_argument("--tasks-per-step", type=int, default=8)
    parser.add_argument("--samples", type=int, default=8, help="rollouts per question")
    parser.add_argument("--val", type=int, default=80, help="validation questions")
    parser.add_argument("--warmup-epochs", type=int, default=40)
    parser.add_argument("--demos", type=int, default=200, help="demonstrations per hop")
    parser.add_argument("--configs", default=",".join(CONFIGS), help="which, comma-separated")
    parser.add_argument("--out", type=Path, default=Path("runs/learning"))
    args = parser.parse_args()
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    unknown = sorted(set(configs) - set(CONFIGS))
    if unknown:
        parser.error(f"unknown configurations {unknown}; known: {', '.join(CONFIGS)}")
    started = time.monotonic()
    results: dict[str, list[dict[str, float]]] = {c: [] for c in configs}
    for seed in range(args.seeds):
        t0 = time.monotonic()
        warm = warm_up(
            args.out / f"seed-{seed}", seed=seed, epochs=args.warmup_epochs, demos=args.demos
        )
        print(f"seed {seed}: warm-up {time.monotonic() - t0:.0f} s", flush=True)
        for config in configs:
            row = run_one(
                warm,
                args.out / f"seed-{seed}" / config,
                config,
                seed=seed,
                steps=args.steps,
                per_step=args.tasks_per_step,
                samples=args.samples,
                val=args.val,
            )
            results[config].append(row)
            print(
                f"seed {seed} {config}: val {row['before']:.3f} -> {row['after']:.3f} "
                f"({row['minutes']:.1f} min)",
                flush=True,
            )
    print()
    print(
        f"two agents in a chain, {args.steps} updates x {args.tasks_per_step} questions x "
        f"{args.samples} samples, {args.val} validation questions, {args.seeds} seed(s)"
    )
    print()
    print("| configuration | val before | val after | gain | min per run |")
    print("|---|---|---|---|---|")
    for config, rows in results.items():
        gains = [r["after"] - r["before"] for r in rows]
        print(
            f"| {config} | {_spread([r['before'] for r in rows])} "
            f"| {_spread([r['after'] for r in rows])} | {_spread(gains)} "
            f"| {statistics.fmean(r['minutes'] for r in rows):.1f} |"
        )
    print()
    print(f"total {(time.monotonic() - started) / 60:.1f} min")


if __name__ == "__main__":
    main()
