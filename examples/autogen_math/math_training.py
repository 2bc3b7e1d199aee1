"""Training the solver on a CPU: more problems, a sloppy teacher's demonstrations, then RL.

The 20 shipped problems are too few to learn from and to validate on, so
:func:`variants` makes new ones from them: the same sentence with other numbers (the
expression follows; a variant is kept only when its answer is a whole, non-negative number).
Training and validation problems are drawn with different seeds.

A tiny model with random weights never calls a tool, so it starts from a **warm-up**
(:func:`demonstrations`): the stand-in model acts as a sloppy teacher, who calls the
calculator with the right expression for half the problems and guesses a near-miss answer
without it for the others, and the agent runs against it exactly as it will against the tiny
model. Every chat request AutoGen sends (its system message, the calculator's schema, the tool
result coming back) and the teacher's reply is kept
(:class:`agl.testing.demonstrations.Demonstrations`), and the tiny model is fine-tuned on
those conversations: afterwards it calls the calculator about half of the time, not always
with the problem's numbers. **Training** then has a reward to raise, the share of problems
answered right: by default with LightningRL's GRPO over the samples of each problem
(``method="grpo"``), or by fine-tuning, each step, on the samples that were right
(``"successes"``).
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from math_agent import evaluate, math_agent, problems

import agl

if TYPE_CHECKING:
    from agl_torch.warm_up import Method

__all__ = ["INSTRUMENT", "demonstrations", "reinforce", "train", "variants", "warm_up"]

INSTRUMENT = ["autogen", "openai"]
"""What the runners trace: AutoGen (``agl-autogen``: each agent turn's span names its agent,
each tool call is a tool span), and the openai client underneath
``OpenAIChatCompletionClient`` (the same call, recorded twice, counts once)."""

_NUMBER = re.compile(r"(?<![\d.])\d+(?!\d|\.\d)")


def variants(
    templates: Sequence[Mapping[str, Any]],
    count: int,
    *,
    seed: int,
    low: int = 2,
    high: int = 12,
) -> list[dict[str, Any]]:
    """``count`` problems made from ``templates`` in turn, each with new numbers.

    Every number of the question that the expression uses is replaced by one drawn from
    ``low..high`` (small by default: a tiny model copies one or two digits reliably, where four
    are beyond it); a draw whose answer is not a whole number >= 0 is drawn again (a template
    that cannot be varied so is used as it is).
    """
    rng = random.Random(seed)
    return [
        _variant(templates[i % len(templates)], rng, f"v{seed}-{i}", low, high)
        for i in range(count)
    ]


def _variant(
    problem: Mapping[str, Any], rng: random.Random, tag: str, low: int, high: int
) -> dict[str, Any]:
    question, expression = str(problem["question"]), str(problem["expression"])
    used = set(_NUMBER.findall(expression))
    values = [m[0] for m in _NUMBER.finditer(question) if m[0] in used]
    if len(set(values)) == len(values):  # each number once, so the expression maps back
        for _ in range(1000):
            new = {value: str(rng.randint(low, high)) for value in values}
            text = _renumber(expression, new)
            try:
                answer = evaluate(text)
            except ValueError:
                continue
            if answer >= 0 and answer.is_integer():
                return {
                    "id": f"{problem['id']}-{tag}",
                    "question": _renumber(question, new),
                    "expression": text,
                    "answer": int(answer),
                }
    return {**problem, "id": f"{problem['id']}-{tag}"}


def _renumber(text: str, new: Mapping[str, str]) -> str:
    return _NUMBER.sub(lambda m: new.get(m[0], m[0]), text)


def demonstrations(
    tasks: Sequence[Mapping[str, Any]],
    *,
    run_dir: Path,
    tool_share: float = 0.5,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """The sloppy teacher's conversations on ``tasks``: each AutoGen chat request, as sent,
    with the teacher's reply. The teacher calls the calculator, with the right expression, on
    ``tool_share`` of the problems, and guesses a wrong answer without it on the others."""
    import stand_in

    from agl.testing.demonstrations import record_demonstrations

    rng = random.Random(seed)
    plan: dict[str, stand_in.Outcome] = {
        str(t["id"]): "right" if rng.random() < tool_share else "guess" for t in tasks
    }
    script = stand_in.script(tasks, plan)
    return record_demonstrations(math_agent, tasks, script, run_dir=run_dir, instrument=INSTRUMENT)


def warm_up(
    run_dir: Path,
    *,
    demo_tasks: int = 600,
    epochs: int = 30,
    seed: int = 0,
    progress: bool = True,
) -> Path:
    """The tiny model, built and fine-tuned on the sloppy teacher's demonstrations on
    ``demo_tasks`` problems; returns its folder (``run_dir/warm-model``)."""
    from agl_torch.warm_up import warm_up_tiny_model

    tasks = variants(problems(), demo_tasks, seed=seed + 1)
    conversations = demonstrations(tasks, run_dir=run_dir / "teacher", seed=seed)
    return warm_up_tiny_model(run_dir, conversations, epochs=epochs, seed=seed, progress=progress)


def reinforce(
    warm: Path,
    run_dir: Path,
    *,
    method: Method = "grpo",
    steps: int = 12,
    tasks_per_step: int = 8,
    n_samples: int = 8,
    val_tasks: int = 40,
    lr: float = 1e-3,
    seed: int = 0,
    console: Any = True,
    algorithm: type[Any] | None = None,
    transitions: agl.TransitionBuilder | None = None,
) -> agl.FitResult:
    """Train the solver from the model in ``warm``, validating on new problems before the
    first step and after the last.

    ``method`` ``"grpo"`` (the default) runs :class:`~agl_torch.rl.LightningRLTorch`, whose
    ``algorithm`` (a subclass, to look at each step's batch, say) and ``transitions`` (GRPO,
    final reward to every call, by default) these replace; ``"successes"`` fine-tunes, each
    step, on every sample whose answer was right
    (:func:`agl_torch.warm_up.rl_after_warm_up`). The run directory gets the run's
    ``metrics.jsonl``, ``reward.png`` and ``store.db``.
    """
    from agl_torch.warm_up import rl_after_warm_up

    solver = rl_after_warm_up(
        warm, steps=steps, tasks_per_step=tasks_per_step, n_samples=n_samples, lr=lr,
        max_tokens=48, seed=seed, method=method, transitions=transitions, algorithm=algorithm,
    )  # fmt: skip
    trainer = agl.Trainer(
        algorithm={"solver": solver},
        run_dir=run_dir,
        concurrency=tasks_per_step * n_samples,
        instrument=INSTRUMENT,
        console=console,
        progress=console is not False,
    )
    shipped = problems()
    train_tasks = variants(shipped, steps * tasks_per_step, seed=seed + 2)
    val = variants(shipped, val_tasks, seed=seed + 3)
    return trainer.fit(math_agent, train_tasks, val_dataset=val)


def train(
    run_dir: Path,
    *,
    method: Method = "grpo",
    steps: int = 12,
    seed: int = 0,
    console: Any = True,
) -> agl.FitResult:
    """:func:`warm_up`, then :func:`reinforce`: the example's ``--train``."""
    warm = warm_up(run_dir, seed=seed, progress=console is not False)
    return reinforce(warm, run_dir, method=method, steps=steps, seed=seed, console=console)
