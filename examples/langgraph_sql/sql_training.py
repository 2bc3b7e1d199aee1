"""Training the writer and the rewriter on a CPU: more questions, a sloppy teacher, then RL.

The 30 shipped questions are too few to learn from and to validate on, so :func:`questions`
makes new ones from :data:`TEMPLATES`: a sentence with a slot (a department, a city, a country,
a product category, a product, an employee or a customer, the values read from the database)
and its gold SQL. Each (template, value) pair is one question; a quarter of the pairs, drawn
per template, are held out for validation (:func:`split`), so the validation questions are
ones the model never saw, written from templates and values it did.

A tiny model with random weights writes no SQL, so it starts from a **warm-up**
(:func:`demonstrations`): the stand-in model acts as a sloppy teacher for all three agents,
and the graph runs against it exactly as it will against the tiny model. The teacher's
writer answers half the questions with the gold query and the others with one lazy query
(:data:`stand_in.WRONG_SQL`, the same for every question); its checker judges a query by its
rows but lets some lazy ones pass; its rewriter fixes some and repeats the lazy query for
the others. Every chat request LangGraph sends and the teacher's reply is kept
(:class:`agl.testing.demonstrations.Demonstrations`), and the tiny model is fine-tuned on
those conversations. **RL** (one LightningRL on agl-torch for the writer and the rewriter,
GRPO over the samples of each question; the checker's calls are counted, not trained) then
has one behaviour to unlearn: the lazy query.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import company_db
import stand_in
from sql_agent import sql_agent

import agl

__all__ = [
    "INSTRUMENT",
    "TEMPLATES",
    "demonstrations",
    "questions",
    "reinforce",
    "split",
    "train",
    "warm_up",
]

INSTRUMENT = ["langchain", "openai"]
"""What the runners trace: LangChain and LangGraph (``agl-langchain``: each node's span names its
agent, each LLM span carries the response id that joins it to the gateway's token ids), and the
openai client underneath ``ChatOpenAI`` (the same call, recorded twice, counts once)."""

_JOIN_DEPT = "FROM employees AS e JOIN departments AS d ON e.department_id = d.id"
_JOIN_PRODUCT = "FROM orders AS o JOIN products AS p ON o.product_id = p.id"
_JOIN_CUSTOMER = "FROM orders AS o JOIN customers AS c ON o.customer_id = c.id"

SLOTS = {
    "department": "SELECT name FROM departments ORDER BY id",
    "city": "SELECT DISTINCT city FROM departments ORDER BY city",
    "country": "SELECT DISTINCT country FROM customers ORDER BY country",
    "category": "SELECT DISTINCT category FROM products ORDER BY category",
    "product": "SELECT name FROM products ORDER BY id",
    "employee": "SELECT name FROM employees ORDER BY id",
    "customer": "SELECT name FROM customers ORDER BY id",
}
"""Each kind of slot and the query that lists its values."""

TEMPLATES: list[tuple[str, str, str]] = [
    ("department", "Who works in the {} department?", f"SELECT e.name {_JOIN_DEPT} WHERE d.name = '{{}}'"),
    ("department", "How many employees work in the {} department?", f"SELECT COUNT(*) {_JOIN_DEPT} WHERE d.name = '{{}}'"),
    ("department", "What is the average salary in the {} department?", f"SELECT AVG(e.salary) {_JOIN_DEPT} WHERE d.name = '{{}}'"),
    ("department", "What is the highest salary in the {} department?", f"SELECT MAX(e.salary) {_JOIN_DEPT} WHERE d.name = '{{}}'"),
    ("department", "In which city is the {} department?", "SELECT city FROM departments WHERE name = '{}'"),
    ("department", "What is the budget of the {} department?", "SELECT budget FROM departments WHERE name = '{}'"),
    ("city", "Which departments are in {}?", "SELECT name FROM departments WHERE city = '{}'"),
    ("city", "What is the total budget of the departments in {}?", "SELECT SUM(budget) FROM departments WHERE city = '{}'"),
    ("country", "Which customers are from {}?", "SELECT name FROM customers WHERE country = '{}'"),
    ("country", "How many customers are from {}?", "SELECT COUNT(*) FROM customers WHERE country = '{}'"),
    ("country", "How many orders came from customers in {}?", f"SELECT COUNT(*) {_JOIN_CUSTOMER} WHERE c.country = '{{}}'"),
    ("category", "List the products in the {} category.", "SELECT name FROM products WHERE category = '{}'"),
    ("category", "How many products are in the {} category?", "SELECT COUNT(*) FROM products WHERE category = '{}'"),
    ("category", "What is the most expensive product in the {} category?", "SELECT name FROM products WHERE category = '{}' ORDER BY price DESC LIMIT 1"),
    ("category", "How many units of {} products were ordered?", f"SELECT SUM(o.quantity) {_JOIN_PRODUCT} WHERE p.category = '{{}}'"),
    ("product", "What is the price of the {}?", "SELECT price FROM products WHERE name = '{}'"),
    ("product", "How many units of {} were ordered?", f"SELECT SUM(o.quantity) {_JOIN_PRODUCT} WHERE p.name = '{{}}'"),
    ("product", "Which customers ordered a {}?", "SELECT DISTINCT c.name FROM customers AS c JOIN orders AS o ON o.customer_id = c.id JOIN products AS p ON o.product_id = p.id WHERE p.name = '{}'"),
    ("employee", "What is the salary of {}?", "SELECT salary FROM employees WHERE name = '{}'"),
    ("employee", "What is the job title of {}?", "SELECT title FROM employees WHERE name = '{}'"),
    ("employee", "Who is the manager of {}?", "SELECT m.name FROM employees AS e JOIN employees AS m ON e.manager_id = m.id WHERE e.name = '{}'"),
    ("employee", "Which department does {} work in?", f"SELECT d.name {_JOIN_DEPT} WHERE e.name = '{{}}'"),
    ("customer", "Which country is {} from?", "SELECT country FROM customers WHERE name = '{}'"),
    ("customer", "How many orders did {} place?", f"SELECT COUNT(*) {_JOIN_CUSTOMER} WHERE c.name = '{{}}'"),
]  # fmt: skip
"""(slot kind, question, gold SQL): ``{}`` is the slot's value in both."""


def questions() -> list[dict[str, str]]:
    """Every (template, value) question whose gold query returns rows, and rows other than
    the lazy query's (:data:`stand_in.WRONG_SQL`): dicts with ``id``, ``template`` (its
    index), ``question`` and gold ``sql``."""
    values = {kind: [str(row[0]) for row in company_db.execute(sql)] for kind, sql in SLOTS.items()}
    lazy = company_db.execute(stand_in.WRONG_SQL)
    found: list[dict[str, str]] = []
    for index, (kind, question, sql) in enumerate(TEMPLATES):
        for value in values[kind]:
            gold = sql.format(value)
            rows = company_db.execute(gold)
            if rows and not company_db.same_result(lazy, rows, ordered=False):
                text = question.format(value)
                found.append({"template": str(index), "question": text, "sql": gold})
    return [{"id": f"g{i}", **q} for i, q in enumerate(found)]


def split(*, val_share: float = 0.25, seed: int = 0) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """The questions of :func:`questions` as (train, validation): ``val_share`` of each
    template's questions (at least one), drawn with ``seed``, are held out."""
    rng = random.Random(seed)
    train_part: list[dict[str, str]] = []
    val_part: list[dict[str, str]] = []
    everything = questions()
    for index in range(len(TEMPLATES)):
        mine = [q for q in everything if q["template"] == str(index)]
        rng.shuffle(mine)
        held = max(1, round(len(mine) * val_share))
        val_part += mine[:held]
        train_part += mine[held:]
    return train_part, val_part


def _plan(tasks: Sequence[Mapping[str, str]], rng: random.Random, shares: Mapping[str, float]) -> dict[str, stand_in.Outcome]:
    outcomes: list[stand_in.Outcome] = ["right", "caught", "missed", "stuck"]
    weights = [shares[o] for o in outcomes]
    return {t["id"]: rng.choices(outcomes, weights)[0] for t in tasks}


TEACHER = {"right": 0.5, "caught": 0.2, "missed": 0.15, "stuck": 0.15}
"""How often the sloppy teacher's run of a question goes each way (see :mod:`stand_in`):
the writer is right half of the time; the other half its lazy query is caught and fixed,
passed by the checker, or caught and repeated by the rewriter until the graph gives up."""


def demonstrations(
    tasks: Sequence[Mapping[str, str]],
    *,
    run_dir: Path,
    passes: int = 1,
    shares: Mapping[str, float] = TEACHER,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """The sloppy teacher's conversations on ``tasks``, ``passes`` times over (each pass
    draws each question's outcome anew from ``shares``): each chat request LangGraph sends,
    as sent, with the teacher's reply."""
    from agl.testing.demonstrations import Demonstrations
    from agl.testing.openai_server import OpenAIServer

    rng = random.Random(seed)
    kept: list[dict[str, Any]] = []
    for number in range(passes):
        plan = _plan(tasks, rng, shares)
        teacher = Demonstrations(stand_in.script(tasks, plan, styles=stand_in.STYLES[:1]))
        with OpenAIServer(teacher) as server:
            trainer = agl.Trainer(
                run_dir=run_dir / f"pass-{number}",
                resources={"llm": agl.LLM(endpoint=server.url, model="teacher")},
                concurrency=64,
                instrument=INSTRUMENT,
                console=False,
                progress=False,
                plot=False,
            )
            trainer.dev(sql_agent, list(tasks))
        kept += teacher.conversations
    # in a fixed order: the runner answers concurrently, and the warm-up's shuffle is seeded
    return sorted(kept, key=lambda c: json.dumps(c, sort_keys=True))


def warm_up(
    run_dir: Path,
    *,
    passes: int = 4,
    epochs: int = 20,
    vocab_size: int = 800,
    seed: int = 0,
    progress: bool = True,
) -> Path:
    """The tiny model, built and fine-tuned on the sloppy teacher's demonstrations on the
    training questions (``passes`` times over); returns its folder (``run_dir/warm-model``)."""
    from agl_torch.warm_up import warm_up_tiny_model

    train_part, _ = split(seed=seed)
    conversations = demonstrations(
        train_part, run_dir=run_dir / "teacher", passes=passes, seed=seed
    )
    return warm_up_tiny_model(
        run_dir, conversations, epochs=epochs, vocab_size=vocab_size, seed=seed, progress=progress
    )


def reinforce(
    warm: Path,
    run_dir: Path,
    *,
    steps: int = 12,
    tasks_per_step: int = 8,
    n_samples: int = 8,
    val_tasks: int | None = None,
    lr: float = 1e-3,
    max_tokens: int = 64,
    seed: int = 0,
    console: Any = True,
    algorithm: type[Any] | None = None,
    transitions: agl.TransitionBuilder | None = None,
) -> agl.FitResult:
    """Train the writer and the rewriter from the model in ``warm`` with one LightningRL,
    the checker frozen; validate on the held-out questions (the first ``val_tasks``, all by
    default) before the first step and after the last.

    The three agents call the same model (as the research's SQL agent does): the checker's
    calls are counted, but never become transitions. ``algorithm`` replaces
    :class:`~agl_torch.rl.LightningRLTorch` with a subclass of it (to look at each step's
    batch, say); ``transitions`` replaces the default :class:`agl.TransitionBuilder` (GRPO,
    final reward to every call). The run directory gets the run's ``metrics.jsonl``,
    ``reward.png`` and ``store.db``.
    """
    from agl_torch.rl import LightningRLTorch
    from agl_torch.settings import CheckpointSettings, LearnerSettings

    rl = (algorithm or LightningRLTorch)(
        warm,
        loop=agl.LoopSettings(n_samples=n_samples, batch_size=tasks_per_step, max_steps=steps),
        learner=LearnerSettings(lr=lr, seed=seed),
        sampling=agl.SamplingSettings(max_tokens=max_tokens),
        transitions=transitions or agl.TransitionBuilder(),
        checkpoints=CheckpointSettings(every=0),
    )
    trainer = agl.Trainer(
        algorithm={"writer": rl, "rewriter": rl, "checker": None},
        run_dir=run_dir,
        concurrency=tasks_per_step * n_samples,
        instrument=INSTRUMENT,
        console=console,
        progress=console is not False,
    )
    train_part, val_part = split(seed=seed)
    rng = random.Random(seed + 2)
    picked = (rng.choice(train_part) for _ in range(steps * tasks_per_step))
    train_tasks = [{**task, "id": f"{task['id']}-{i}"} for i, task in enumerate(picked)]
    return trainer.fit(sql_agent, train_tasks, val_dataset=val_part[:val_tasks])


def train(run_dir: Path, *, steps: int = 12, seed: int = 0, console: Any = True) -> agl.FitResult:
    """:func:`warm_up`, then :func:`reinforce`: the example's ``--train``."""
    warm = warm_up(run_dir, seed=seed, progress=console is not False)
    return reinforce(warm, run_dir, steps=steps, seed=seed, console=console)
