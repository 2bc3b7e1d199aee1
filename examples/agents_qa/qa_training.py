"""Training the answerer on a CPU: a generated world, a sloppy teacher, then RL.

The 20 shipped questions are too few to learn from and to validate on, so ``--train`` asks its
questions about a generated world (:mod:`qa_world`: hundreds of invented companies, founders
and towns, each with a document the search finds); a quarter of each kind of question is held
out for validation, and the rest halved (:func:`qa_world.parts`): questions for the warm-up,
and others for RL, which the warm model has never seen.

The **researcher** is a fixed model here, as an off-the-shelf model you would not train: the
scripted stand-in (:mod:`stand_in`), published as the run's ``researcher_llm`` resource, which
searches both hops and hands off. The **answerer** is agl-torch's tiny model. With random
weights it writes no answer, so it starts from a **warm-up** (:func:`demonstrations`): the
stand-in acts as a sloppy teacher, whose answerer gives the right answer for half the
questions and the entity between the hops (one search short) for the others, and the agents
run against it exactly as they will in training. Every request the Agents SDK sends the
answerer (its instructions, the researcher's searches and their results, the handoff), as the
chat request the engine is asked (the server, like agl's gateway, serves the SDK's Responses
API calls as chat calls), and the teacher's reply is kept
(:class:`agl.testing.demonstrations.Demonstrations`); the tiny model,
with a tokenizer trained on those conversations (each name of the world one token), is
fine-tuned on their whole text (the documents the searches found too, which teaches it to read
them). **RL** on the answerer (the researcher is ``None``: its calls are counted, never
trained) then has one habit to unlearn, answering with the entity between the hops: each step
fine-tunes on the samples that found the answer (``method="successes"``, the default), or
runs LightningRL's GRPO (``method="grpo"``).
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from itertools import cycle, islice
from pathlib import Path
from typing import TYPE_CHECKING, Any

import qa_world
import stand_in
from qa_agent import ANSWERER_PROMPT, qa_agent

import agl

if TYPE_CHECKING:
    from agl_torch.warm_up import Method

__all__ = [
    "INSTRUMENT",
    "RUNNERS",
    "demonstrations",
    "reinforce",
    "researcher",
    "train",
    "warm_up",
]

INSTRUMENT = ["openai-agents"]
"""What the runners trace: the Agents SDK (``agl-openai-agents``: each agent turn's span names
its agent, each function tool call is a tool span, each model call carries the id of the
Responses API response it got, which is what agl's gateway records with the call's token
ids)."""

RUNNERS = 2
"""Runner processes of the teacher's run and of RL. A rollout is ~0.1 s of the Agents SDK's and
the openai client's Python, and the rollouts, not the tiny model, are most of a step: one
process runs them on one core, two on two (a step of 64 rollouts: 7.6 s -> 4.5 s on 2 cores)."""


@contextmanager
def researcher(
    tasks: Sequence[Mapping[str, Any]], plan: stand_in.Plan | None = None
) -> Iterator[agl.LLM]:
    """The stand-in model, served while the block runs, as an LLM resource: it researches
    ``tasks`` (two searches, then the handoff) and answers as ``plan`` says (every question
    ``"right"`` by default; only the researcher's turns matter when it is the run's
    ``researcher_llm``)."""
    from agl.testing.openai_server import OpenAIServer

    plan = plan or dict.fromkeys((str(t["id"]) for t in tasks), "right")
    with OpenAIServer(stand_in.script(tasks, plan)) as server:
        yield agl.LLM(endpoint=server.url, model="stand-in")


def demonstrations(
    tasks: Sequence[Mapping[str, Any]],
    *,
    run_dir: Path,
    right_share: float = 0.5,
    seed: int = 0,
    n_runners: int = RUNNERS,
) -> list[dict[str, Any]]:
    """The sloppy teacher's answerer conversations on ``tasks``: each request the Agents SDK
    sends the answerer, as the chat request the engine is asked, with the teacher's reply. The
    teacher answers right on ``right_share`` of the questions and with the entity between the
    hops on the others."""
    from agl.testing.demonstrations import record_demonstrations

    rng = random.Random(seed)
    plan: dict[str, stand_in.Outcome] = {
        str(t["id"]): "right" if rng.random() < right_share else "wrong" for t in tasks
    }
    script = stand_in.script(tasks, plan)
    every = record_demonstrations(
        qa_agent, tasks, script, run_dir=run_dir, instrument=INSTRUMENT, n_runners=n_runners
    )
    return [c for c in every if _system(c) == ANSWERER_PROMPT]


def _system(conversation: Mapping[str, Any]) -> str:
    messages = conversation.get("messages") or [{}]
    return str(messages[0].get("content") or "")


def warm_up(
    run_dir: Path,
    *,
    epochs: int = 20,
    batch_size: int = 16,
    right_share: float = 0.5,
    seed: int = 0,
    progress: bool = True,
    vocab_size: int = 1500,
    n_runners: int = RUNNERS,
) -> Path:
    """The tiny model, built and fine-tuned on the sloppy teacher's answerer conversations on
    the world's warm-up questions (:func:`qa_world.parts`); returns its folder
    (``run_dir/warm-model``).

    It trains on the conversations' whole text (``train_on="text"``), the researcher's
    searches and their results too, not only the teacher's replies: a model built from
    scratch has read nothing, and predicting the documents teaches it to read them (to copy the
    name after the words the question asks about), which the replies alone teach it slowly."""
    from agl_torch.warm_up import warm_up_tiny_model

    conversations = demonstrations(
        qa_world.parts(seed=seed).warm_up,
        run_dir=run_dir / "teacher",
        right_share=right_share,
        seed=seed,
        n_runners=n_runners,
    )
    return warm_up_tiny_model(
        run_dir,
        conversations,
        epochs=epochs,
        batch_size=batch_size,
        seed=seed,
        vocab_size=vocab_size,
        whole_lines=True,
        words=qa_world.names(),
        progress=progress,
        train_on="text",
    )


def reinforce(
    warm: Path,
    run_dir: Path,
    *,
    method: Method = "successes",
    steps: int = 20,
    tasks_per_step: int = 8,
    n_samples: int = 8,
    val_tasks: int | None = 200,
    lr: float = 3e-4,
    max_tokens: int = 16,
    seed: int = 0,
    n_runners: int = RUNNERS,
    console: Any = True,
    algorithm: type[Any] | None = None,
    transitions: agl.TransitionBuilder | None = None,
) -> agl.FitResult:
    """Train the answerer from the model in ``warm`` on the world's RL questions (ones the
    warm model never saw, the templates in turn), the researcher the fixed stand-in; validate
    on the held-out questions (the first ``val_tasks``, each template's share; None: all)
    before the first step and after the last. The rollouts run in ``n_runners`` runner
    processes (1: in this one).

    ``method`` is :func:`agl_torch.warm_up.rl_after_warm_up`'s: ``"successes"`` (the default)
    fine-tunes, each step, on every sample that found the answer; ``"grpo"`` runs LightningRL
    (:class:`~agl_torch.rl.LightningRLTorch`), whose class ``algorithm`` replaces with a
    subclass (to look at each step's batch, say) and whose :class:`agl.TransitionBuilder`
    (GRPO, final reward to every call) ``transitions`` replaces. The run directory gets the
    run's ``metrics.jsonl``, ``reward.png`` and ``store.db``.
    """
    from agl_torch.warm_up import rl_after_warm_up

    answerer = rl_after_warm_up(
        warm, steps=steps, tasks_per_step=tasks_per_step, n_samples=n_samples, lr=lr,
        max_tokens=max_tokens, seed=seed, method=method, transitions=transitions,
        algorithm=algorithm,
    )  # fmt: skip
    questions = qa_world.parts(seed=seed)
    # the templates in turn, so each step asks a like mix (their rewards differ ~4x)
    turns = qa_world.in_turns(questions.rl, random.Random(seed + 2))
    picked = islice(cycle(turns), steps * tasks_per_step)
    train_tasks = [{**task, "id": f"{task['id']}-{i}"} for i, task in enumerate(picked)]
    val = questions.val[:val_tasks]
    with researcher([*train_tasks, *val]) as fixed:
        trainer = agl.Trainer(
            algorithm={"answerer": answerer, "researcher": None},
            resources={"researcher_llm": fixed},
            run_dir=run_dir,
            n_runners=n_runners,
            concurrency=-(-tasks_per_step * n_samples // n_runners),
            instrument=INSTRUMENT,
            console=console,
            progress=console is not False,
        )
        return trainer.fit(qa_agent, train_tasks, val_dataset=val)


def train(
    run_dir: Path,
    *,
    steps: int = 20,
    seed: int = 0,
    method: Method = "successes",
    console: Any = True,
) -> agl.FitResult:
    """:func:`warm_up`, then :func:`reinforce`: the example's ``--train``."""
    warm = warm_up(run_dir, seed=seed, progress=console is not False)
    return reinforce(warm, run_dir, method=method, steps=steps, seed=seed, console=console)
