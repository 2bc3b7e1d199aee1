"""The quickstart: watch an agent learn to use its calculator, on a CPU, in about 3 minutes.

::

    python -m agl_torch.quickstart --run-dir runs/quickstart

The agent is plain ``openai`` client code: it asks the model an arithmetic question with a
``calculator`` tool; if the model calls the tool, the agent runs it and sends the result back
for a final answer. Reward: 1 for the right number, else 0. Nothing is downloaded:

1. **A tiny model is built in code**: a BPE tokenizer trained on the task's text, a ChatML
   template with tool calls, a 2-layer Llama with random weights.
2. **A short SFT warm-up** teaches it the format from a sloppy teacher, who uses the calculator
   in only ``--tool-share`` of the demonstrations and otherwise guesses a wrong number.
   The warmed-up model imitates that: it calls the tool about that often.
3. **RL does the rest**: :class:`~agl_torch.rl.LightningRLTorch` runs the agent through the whole
   loop — runner, agl's gateway, the policy server, spans in SQLite, LightningRL transitions
   (GRPO over 8 samples per question), a PPO-clip update, new weights served — and the reward
   shows the agent learning to call the calculator every time.

The run directory gets ``metrics.jsonl`` / ``metrics.csv``, ``reward.png`` (the reward
curve), ``store.db`` (every trace: ``agl rollouts list --store sqlite:///.../store.db``),
checkpoints and the final ``model/``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import agl

__all__ = [
    "CALCULATOR_TOOL",
    "ask",
    "calculate",
    "calculator_agent",
    "demonstrations",
    "main",
    "run",
    "solve",
    "tasks",
    "train",
    "warm_up_model",
]

CALCULATOR_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression: number, operator (+ - *), number.",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string"}},
            "required": ["expression"],
        },
    },
}
_OPERATIONS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}
_EXPRESSION = re.compile(r"\s*(-?\d+)\s*([-+*])\s*(-?\d+)\s*")


def tasks(count: int, *, seed: int, low: int = 2, high: int = 9) -> list[dict[str, Any]]:
    """``count`` questions ``What is a<op>b?`` with their expression and answer."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        a, b, op = rng.randint(low, high), rng.randint(low, high), rng.choice("+-*")
        out.append(
            {
                "question": f"What is {a}{op}{b}?",
                "expression": f"{a}{op}{b}",
                "answer": _OPERATIONS[op](a, b),
            }
        )
    return out


def calculate(expression: str) -> str:
    """The calculator tool: ``"7*8"`` -> ``"56"``; anything else -> an error message."""
    match = _EXPRESSION.fullmatch(expression)
    if match is None:
        return "error: expected <number> <+|-|*> <number>"
    return str(_OPERATIONS[match[2]](int(match[1]), int(match[3])))


def demonstrations(
    questions: Sequence[dict[str, Any]], *, tool_share: float, seed: int
) -> list[list[dict[str, Any]]]:
    """The sloppy teacher's chats: the calculator in ``tool_share`` of them, else a guess."""
    rng = random.Random(seed)
    conversations = []
    for task in questions:
        messages: list[dict[str, Any]] = [{"role": "user", "content": task["question"]}]
        if rng.random() < tool_share:
            arguments = json.dumps({"expression": task["expression"]})
            call = {"id": "call_0", "type": "function"}
            call["function"] = {"name": "calculator", "arguments": arguments}  # type: ignore[assignment]
            messages += [
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {
                    "role": "tool",
                    "tool_call_id": "call_0",
                    "content": calculate(task["expression"]),
                },
                {"role": "assistant", "content": str(task["answer"])},
            ]
        else:
            guess = task["answer"] + rng.choice([-10, -2, -1, 1, 2, 10])
            messages.append({"role": "assistant", "content": str(guess)})
        conversations.append(messages)
    return conversations


@agl.rollout
async def calculator_agent(task: dict[str, Any], llm: agl.LLM) -> float:
    """Answer ``task["question"]``, calling the calculator when the model asks for it."""
    return await solve(task, llm)


async def solve(task: dict[str, Any], llm: agl.LLM, *, pause: float = 0.0) -> float:
    """The agent's work: the reward for answering ``task``. ``pause`` seconds pass after the
    model's first reply, as a slow tool or environment step would make them pass."""
    answer = await ask(task["question"], llm, pause=pause)
    return 1.0 if answer.strip() == str(task["answer"]) else 0.0


async def ask(question: str, llm: agl.LLM, *, pause: float = 0.0) -> str:
    """Ask the model ``question`` with the calculator tool, running the calls it makes (at
    most two), and return its final answer's text ("" when it gave none)."""
    client = llm.openai_client(max_retries=0)
    messages: list[Any] = [{"role": "user", "content": question}]
    answer = ""
    async with client:
        for _ in range(3):  # at most two tool calls, then an answer
            reply = await client.chat.completions.create(
                model=llm.model,
                messages=messages,
                tools=[CALCULATOR_TOOL],  # type: ignore[list-item]
                max_tokens=32,
                temperature=float(llm.sampling_parameters.get("temperature", 1.0)),  # type: ignore[arg-type]
            )
            message = reply.choices[0].message
            if pause:
                await asyncio.sleep(pause)
                pause = 0.0
            if not message.tool_calls:
                answer = message.content or ""
                break
            messages.append(message.model_dump(exclude_none=True))
            for call in message.tool_calls:
                try:
                    expression = str(json.loads(call.function.arguments)["expression"])  # type: ignore[union-attr]
                    result = calculate(expression)
                except (ValueError, KeyError, TypeError):
                    result = 'error: arguments must be {"expression": "..."}'
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return answer


def main(argv: Sequence[str] | None = None) -> dict[str, float]:
    """Run the quickstart; return the reward before and after RL (validation means)."""
    parser = argparse.ArgumentParser(prog="python -m agl_torch.quickstart", description=__doc__)
    parser.add_argument("--run-dir", type=Path, default=Path("runs/quickstart"))
    parser.add_argument("--steps", type=int, default=30, help="RL steps (default 30)")
    parser.add_argument("--tool-share", type=float, default=0.5)
    parser.add_argument("--warmup-epochs", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument(
        "--device", default=None, help="cpu, cuda, cuda:1, ... (default: CUDA when present)"
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.add_argument(
        "--verbose", action="store_true", help="print every metric of a step, not a summary"
    )
    args = parser.parse_args(argv)
    return run(
        args.run_dir,
        steps=args.steps,
        tool_share=args.tool_share,
        warmup_epochs=args.warmup_epochs,
        seed=args.seed,
        lr=args.lr,
        device=args.device,
        progress=not args.quiet,
        verbose=args.verbose,
    )


def run(
    run_dir: Path,
    *,
    steps: int = 30,
    tool_share: float = 0.5,
    warmup_epochs: int = 60,
    seed: int = 0,
    lr: float = 5e-4,
    warmup_lr: float = 3e-3,
    tasks_per_step: int = 8,
    samples: int = 8,
    device: str | None = None,
    progress: bool = True,
    verbose: bool = False,
) -> dict[str, float]:
    """The quickstart as a function (the learning test calls it with fewer steps).

    ``device`` is where the warm-up, the serving and the updates run (default: CUDA when
    present, else the CPU)."""
    from rich.console import Console

    console = Console(stderr=True)
    started = time.monotonic()
    warm = warm_up_model(
        run_dir,
        tool_share=tool_share,
        epochs=warmup_epochs,
        seed=seed,
        lr=warmup_lr,
        device=device,
        progress=progress,
        console=console,
    )
    console.print(
        f"[bold]3/3[/] RL: {steps} steps x {tasks_per_step} questions x {samples} samples"
    )
    summary = train(
        warm,
        run_dir,
        steps=steps,
        seed=seed,
        lr=lr,
        tasks_per_step=tasks_per_step,
        samples=samples,
        device=device,
        progress=progress,
        verbose=verbose,
        console=console,
    )
    summary["minutes"] = (time.monotonic() - started) / 60
    console.print(
        f"[bold green]done[/] in {summary['minutes']:.1f} min: validation reward "
        f"{summary['val_before']:.2f} -> {summary['val_after']:.2f} "
        f"(training reward, first 5 steps {summary['train_first5']:.2f} -> last 5 steps "
        f"{summary['train_last5']:.2f}); curve: {run_dir / 'reward.png'}"
    )
    return summary


def warm_up_model(
    run_dir: Path,
    *,
    tool_share: float = 0.5,
    epochs: int = 60,
    seed: int = 0,
    lr: float = 3e-3,
    device: str | None = None,
    progress: bool = True,
    console: Any = None,
) -> Path:
    """Steps 1 and 2: build the tiny model in code and warm it up on the sloppy teacher's
    demonstrations (on ``device``, default CUDA when present); return the warmed-up model's
    folder (``run_dir/warm-model``)."""
    from rich.console import Console

    from agl_torch.warm_up import warm_up_tiny_model

    console = console or Console(stderr=True)
    demos = demonstrations(tasks(200, seed=seed + 3), tool_share=tool_share, seed=seed)
    console.print(
        "[bold]1/3[/] building a tiny model in code (tokenizer, template, weights); "
        f"[bold]2/3[/] SFT warm-up on {len(demos)} demonstrations "
        f"(the calculator in {tool_share:.0%} of them), {epochs} epochs"
    )
    return warm_up_tiny_model(
        run_dir,
        demos,
        epochs=epochs,
        tools=[CALCULATOR_TOOL],
        lr=lr,
        seed=seed,
        max_position_embeddings=1024,
        device=device,
        progress=progress,
        console=console,
    )


def train(
    warm: Path,
    run_dir: Path,
    *,
    steps: int = 30,
    seed: int = 0,
    lr: float = 5e-4,
    tasks_per_step: int = 8,
    samples: int = 8,
    max_staleness: int = 0,
    val_tasks: int = 64,
    agent: Any = calculator_agent,
    concurrency: int | None = None,
    device: str | None = None,
    progress: bool = True,
    verbose: bool = False,
    console: Any = True,
) -> dict[str, float]:
    """Step 3: RL from the warmed-up model in ``warm``; return the validation reward before
    and after, and the training reward's first and last 5-step means.

    ``max_staleness`` overlaps rollouts and updates (:class:`agl.LoopSettings`); ``val_tasks``
    questions validate before and after; ``agent`` replaces the calculator agent (a slower
    one, say); ``concurrency`` is the runner's (default: every rollout in flight at once);
    ``device`` is where the policy is served and updated (default: CUDA when present).
    """
    from agl_torch.rl import LightningRLTorch
    from agl_torch.settings import CheckpointSettings, LearnerSettings, ServingSettings

    train_tasks = tasks(steps * tasks_per_step, seed=seed + 1)
    val = tasks(val_tasks, seed=seed + 2)
    loop = agl.LoopSettings(
        n_samples=samples, batch_size=tasks_per_step, max_steps=steps, max_staleness=max_staleness
    )
    algorithm = LightningRLTorch(
        warm,
        loop=loop,
        learner=LearnerSettings(lr=lr, seed=seed),
        serving=ServingSettings(device=device),
        checkpoints=CheckpointSettings(every=10),
    )
    trainer = agl.Trainer(
        algorithm=algorithm,
        run_dir=run_dir,
        concurrency=concurrency or tasks_per_step * samples * (max_staleness + 1),
        progress=progress,
        console=console,
        verbose=verbose,
        instrument=["openai"],
    )
    result = trainer.fit(agent, train_tasks, val_dataset=val)
    curve = [row for row in result.history if "reward/mean" in row]
    vals = [row["val/reward/mean"] for row in result.history if "val/reward/mean" in row]
    return {
        "val_before": vals[0] if vals else float("nan"),
        "val_after": vals[-1] if vals else float("nan"),
        "train_first5": statistics.fmean(r["reward/mean"] for r in curve[:5]) if curve else 0.0,
        "train_last5": statistics.fmean(r["reward/mean"] for r in curve[-5:]) if curve else 0.0,
        "seconds": result.duration_s,
    }


if __name__ == "__main__":
    main()
