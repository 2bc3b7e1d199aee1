"""Training the writer and the rewriter on a CPU: generated questions, a sloppy teacher, RL.

The 30 shipped questions are too few to learn from and to validate on, so ``--train`` asks the
generated ones (:mod:`sql_questions`: every template about every value of its kind); a quarter
of each template's questions are held out for validation.

The **checker** is a fixed model here, as the research behind LightningRL kept it: the
scripted stand-in (:mod:`stand_in`), published as the run's ``checker_llm`` resource. It runs
the query, compares its rows with the gold query's and objects when they differ: a reviewer
that is never wrong, and never trained. The **writer** and the **rewriter** are agl-torch's
tiny model, one model for both, trained together. With random weights it writes no SQL, so
it starts from a **warm-up** (:func:`demonstrations`): the stand-in acts as a sloppy teacher
whose writer writes the gold query for ``right_share`` of the questions (30%) and its habit
for the others, the question's near miss (its kind's first sibling on the same value: a
department's employees when asked for its budget, ...), and whose rewriter, after the
checker's objection, writes the gold query ``fix_share`` of the time (20%) and repeats the
near miss otherwise. The graph runs against it exactly as it will in training; every chat
request LangChain sends the writer and the rewriter, and the teacher's reply, is kept
(:class:`agl.testing.demonstrations.Demonstrations`), and the tiny model (with a tokenizer
trained on those conversations, each value of the database one token) is fine-tuned on them.
The teacher also answers **drills** (:func:`sql_questions.drills`: the templates asked about
names of other kinds), without which the tiny model learns which queries go with which name
and, on a held-out question, writes one it saw with that name. **RL** (LightningRL on
agl-torch, GRPO over the samples of each question, ``{"writer": rl, "rewriter": rl, "*":
None}``) then has two habits to unlearn: the writer's near miss, and the rewriter's repeating
it.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sql_questions
import stand_in
from sql_agent import CHECKER_PROMPT, sql_agent

import agl

__all__ = ["INSTRUMENT", "RUNNERS", "checker", "demonstrations", "reinforce", "train", "warm_up"]

INSTRUMENT = ["langchain", "openai"]
"""What the runners trace: LangChain and LangGraph (``agl-langchain``: each node's span names its
agent, each LLM span carries the response id that joins it to the gateway's token ids), and the
openai client underneath ``ChatOpenAI`` (the same call, recorded twice, counts once)."""

RUNNERS = 2
"""Runner processes of the teacher's run and of RL: LangGraph's and the clients' Python, not
the tiny model, is most of a step, and one process runs it on one core, two on two."""


@contextmanager
def checker(tasks: Sequence[Mapping[str, Any]]) -> Iterator[agl.LLM]:
    """The stand-in model, served while the block runs, as an LLM resource that checks the
    queries written for ``tasks``: ``OK`` when a query returns the gold query's rows, else an
    objection."""
    from agl.testing.openai_server import OpenAIServer

    plan: dict[str, stand_in.Outcome] = dict.fromkeys((str(t["id"]) for t in tasks), "right")
    with OpenAIServer(stand_in.script(tasks, plan)) as server:
        yield agl.LLM(endpoint=server.url, model="stand-in")


def demonstrations(
    tasks: Sequence[Mapping[str, Any]],
    *,
    run_dir: Path,
    right_share: float = 0.3,
    fix_share: float = 0.2,
    seed: int = 0,
    n_runners: int = RUNNERS,
) -> list[dict[str, Any]]:
    """The sloppy teacher's writer and rewriter conversations on ``tasks``: each chat request
    LangChain sends them, as sent, with the teacher's reply. The writer is right on
    ``right_share`` of the questions and writes the question's near miss on the others; the
    rewriter then fixes ``fix_share`` of those and repeats the near miss on the rest."""
    from agl.testing.demonstrations import record_demonstrations

    rng = random.Random(seed)
    plan: dict[str, stand_in.Outcome] = {}
    for task in tasks:
        right = rng.random() < right_share
        plan[str(task["id"])] = (
            "right" if right else "caught" if rng.random() < fix_share else "stuck"
        )
    script = stand_in.script(tasks, plan)
    every = record_demonstrations(
        sql_agent, tasks, script, run_dir=run_dir, instrument=INSTRUMENT, n_runners=n_runners
    )
    return [c for c in every if _system(c) != CHECKER_PROMPT]


def _system(conversation: Mapping[str, Any]) -> str:
    messages = conversation.get("messages") or [{}]
    return str(messages[0].get("content") or "")


def warm_up(
    run_dir: Path,
    *,
    epochs: int = 30,
    right_share: float = 0.3,
    fix_share: float = 0.2,
    seed: int = 0,
    progress: bool = True,
    vocab_size: int = 2000,
    drills: int = 6,
) -> Path:
    """The tiny model, built and fine-tuned on the sloppy teacher's conversations on the
    training questions and ``drills`` drills per template (:func:`sql_questions.drills`);
    returns its folder (``run_dir/warm-model``)."""
    from agl_torch.warm_up import warm_up_tiny_model

    train_part, _ = sql_questions.split(seed=seed)
    conversations = demonstrations(
        [*train_part, *sql_questions.drills(per_template=drills, seed=seed)],
        run_dir=run_dir / "teacher",
        right_share=right_share,
        fix_share=fix_share,
        seed=seed,
    )
    return warm_up_tiny_model(
        run_dir,
        conversations,
        epochs=epochs,
        seed=seed,
        vocab_size=vocab_size,
        whole_lines=True,
        words=sql_questions.values(),
        progress=progress,
    )


def reinforce(
    warm: Path,
    run_dir: Path,
    *,
    steps: int = 12,
    tasks_per_step: int = 8,
    n_samples: int = 8,
    val_tasks: int | None = None,
    val_repeats: int = 2,
    lr: float = 2e-3,
    max_tokens: int = 32,
    seed: int = 0,
    trained: Sequence[str] = ("writer", "rewriter"),
    n_runners: int = RUNNERS,
    console: Any = True,
    algorithm: type[Any] | None = None,
    transitions: agl.TransitionBuilder | None = None,
) -> agl.FitResult:
    """Train the writer and the rewriter (the agents in ``trained``) from the model in
    ``warm`` with LightningRL, the checker the fixed stand-in; validate on the held-out
    questions (the first ``val_tasks``, all by default), each asked ``val_repeats`` times (the
    agents sample at temperature 1: one answer each would be a noisy measure), before the
    first step and after the last.

    ``algorithm`` replaces :class:`~agl_torch.rl.LightningRLTorch` with a subclass of it (to
    look at each step's batch, say); ``transitions`` replaces the default
    :class:`agl.TransitionBuilder` (GRPO, final reward to every call). The run directory gets
    the run's ``metrics.jsonl``, ``reward.png`` and ``store.db``.
    """
    from agl_torch.warm_up import rl_after_warm_up

    policy = rl_after_warm_up(
        warm, steps=steps, tasks_per_step=tasks_per_step, n_samples=n_samples, lr=lr,
        max_tokens=max_tokens, seed=seed, transitions=transitions, algorithm=algorithm,
    )  # fmt: skip
    train_part, val_part = sql_questions.split(seed=seed)
    rng = random.Random(seed + 2)
    picked = (rng.choice(train_part) for _ in range(steps * tasks_per_step))
    train_tasks = [{**task, "id": f"{task['id']}@{i}"} for i, task in enumerate(picked)]
    asked = val_part[:val_tasks]
    val = [{**task, "id": f"{task['id']}#{k}"} for k in range(val_repeats) for task in asked]
    with checker([*train_tasks, *val]) as fixed:
        trainer = agl.Trainer(
            algorithm={**dict.fromkeys(trained, policy), "*": None},
            resources={"checker_llm": fixed},
            run_dir=run_dir,
            n_runners=n_runners,
            concurrency=-(-tasks_per_step * n_samples // n_runners),
            instrument=INSTRUMENT,
            console=console,
            progress=console is not False,
        )
        return trainer.fit(sql_agent, train_tasks, val_dataset=val)


def train(run_dir: Path, *, steps: int = 12, seed: int = 0, console: Any = True) -> agl.FitResult:
    """:func:`warm_up`, then :func:`reinforce`: the example's ``--train``."""
    warm = warm_up(run_dir, seed=seed, progress=console is not False)
    return reinforce(warm, run_dir, steps=steps, seed=seed, console=console)
