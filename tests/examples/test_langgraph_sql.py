"""The LangGraph text-to-SQL example: its database and reward, a dev run, and writer-only RL.

The dev run goes through the trainer against agl's scripted OpenAI-compatible server standing
in for a model (``examples/langgraph_sql/stand_in.py``); its rewards are checked by executing
SQL on the real database. The RL run (slow) trains the writer and the rewriter of a tiny model
built in code for two steps, the checker on a fixed model of its own. Its command line and
table per agent are tested in ``test_scripts.py``.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import agl
from agl.lightning import agent_stats, extract_calls
from agl.testing.openai_server import OpenAIServer

from .conftest import check_rl_batches, dev_run, load

example = load("langgraph_sql")
company_db, sql_agent, stand_in = example.company_db, example.sql_agent, example.stand_in
sql_questions, sql_training = example.sql_questions, example.sql_training


# --- the data and the reward -------------------------------------------------------------------


def test_the_questions_and_their_gold_sql_run_on_the_database() -> None:
    questions = company_db.questions()
    assert len(questions) == 30
    assert len({q["id"] for q in questions}) == 30
    assert Counter(q["split"] for q in questions) == {"train": 22, "val": 8}
    assert company_db.questions("val") == [q for q in questions if q["split"] == "val"]
    for question in questions:
        assert company_db.execute(question["sql"]), question  # every answer has rows
        assert company_db.reward(question["sql"], question["sql"]) == 1.0


@pytest.mark.parametrize(
    ("predicted", "reward"),
    [
        # the gold is unordered: any order of the same rows is right, extra ";" is fine
        ("SELECT name FROM departments WHERE city = 'London' ORDER BY name DESC;", 1.0),
        ("SELECT d.name FROM departments AS d WHERE d.budget IN (800000, 450000)", 1.0),
        ("SELECT name FROM departments WHERE city = 'Berlin'", 0.0),
        ("SELECT name, city FROM departments WHERE city = 'London'", 0.0),  # a column more
        ("SELECT name FROM departmentz", 0.0),  # an error
        ("", 0.0),
        ("DELETE FROM departments", 0.0),  # read-only: refused, and nothing is deleted
        ("SELECT 'Sales'; SELECT 'Marketing'", 0.0),  # one statement only
    ],
)
def test_reward_compares_result_sets(predicted: str, reward: float) -> None:
    gold = "SELECT name FROM departments WHERE city = 'London'"
    assert company_db.reward(predicted, gold) == reward
    assert len(company_db.execute("SELECT * FROM departments")) == 5


def test_an_ordered_gold_needs_the_same_order_and_floats_compare_rounded() -> None:
    gold = "SELECT name FROM products WHERE category = 'Accessories' ORDER BY price"
    assert company_db.is_ordered(gold)
    assert company_db.reward(gold.replace("price", "price DESC"), gold) == 0.0
    assert company_db.reward(gold.replace("price", "-price DESC"), gold) == 1.0
    assert not company_db.is_ordered("SELECT * FROM (SELECT id FROM orders ORDER BY id) AS o")
    average = "SELECT AVG(quantity) FROM orders"
    assert company_db.reward("SELECT SUM(quantity) * 1.0 / COUNT(*) FROM orders", average) == 1.0


def test_a_query_that_runs_too_long_is_stopped() -> None:
    endless = (
        "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r) SELECT COUNT(*) FROM r"
    )
    with pytest.raises(company_db.QueryError, match=r"longer than 0\.2 s"):
        company_db.execute(endless, timeout=0.2)
    with pytest.raises(company_db.QueryError, match="more than 1000 rows"):
        company_db.execute("SELECT * FROM orders, orders AS o2, orders AS o3")


@pytest.mark.parametrize(
    ("text", "sql"),
    [
        ("```sql\nSELECT 1;\n```", "SELECT 1"),
        ("Sure:\n```SQL\nSELECT a\nFROM t\n```\nDone.", "SELECT a\nFROM t"),
        ("```\nSELECT 2\n```", "SELECT 2"),
        ("```sqlite\nSELECT 3\n```", "SELECT 3"),
        ("```sql\nSELECT name FROM employees WHERE", "SELECT name FROM employees WHERE"),  # cut
        ("Here is the query:\nSELECT x FROM y; It counts.", "SELECT x FROM y"),
        ("I select rows with care.\nSELECT x FROM y\n\nThat is all.", "SELECT x FROM y"),
        ("with t AS (select 1) select * from t", "with t AS (select 1) select * from t"),
        ("No idea, sorry.", ""),
    ],
)
def test_extract_sql(text: str, sql: str) -> None:
    assert sql_agent.extract_sql(text) == sql


# --- a dev run against the stand-in model -------------------------------------------------------


def test_dev_run_rewards_and_calls_per_agent(langchain_adapter: None, tmp_path: Path) -> None:
    questions = company_db.questions()
    outcomes = ("right", "caught", "missed")
    plan = {q["id"]: outcomes[i % 3] for i, q in enumerate(questions)}
    result, server = dev_run(example, questions, plan, tmp_path, zero_for="missed")
    requests = server.request_count
    expected_agents = {
        "right": ["writer", "checker"],
        "missed": ["writer", "checker"],
        "caught": ["writer", "checker", "rewriter", "checker"],
    }
    for question, outcome in zip(questions, result.results, strict=True):
        plan_says = plan[question["id"]]
        final_sql = stand_in.WRONG_SQL if plan_says == "missed" else question["sql"]
        assert outcome.reward == company_db.reward(final_sql, question["sql"]), question
        agents = [call.agent for call in extract_calls(outcome.spans).calls]
        assert agents == expected_agents[plan_says], (question["id"], agents)

    stats = agent_stats(result.results)
    assert {agent: s.calls for agent, s in stats.items()} == {
        "writer": 30,
        "checker": 40,
        "rewriter": 10,
    }
    assert sum(s.calls for s in stats.values()) == requests
    assert stats["rewriter"].rollouts == 10
    assert stats["rewriter"].mean_reward == 1.0  # caught and fixed
    assert stats["writer"].mean_reward == pytest.approx(20 / 30)


# --- generated questions, the fixed checker, the teacher --------------------------------------


def test_generated_questions_have_rows_and_a_near_miss_from_a_sibling() -> None:
    questions = sql_questions.generated()
    assert len(questions) == len({q["id"] for q in questions}) > 200
    templates = {t.id: t for t in sql_questions.TEMPLATES}
    for question in questions:
        template = templates[question["template"]]
        gold = company_db.execute(question["sql"])
        assert gold
        assert gold != [(None,)]
        value = question["id"].split("/", 1)[1]
        assert question["question"] == template.question.format(v=value)
        siblings = [
            t.sql.format(v=value)
            for t in sql_questions.TEMPLATES
            if t.kind == template.kind and t is not template
        ]
        # the kind's first sibling that answers otherwise: the teacher's one habit per kind
        misses = [s for s in siblings if company_db.reward(s, question["sql"]) == 0.0]
        assert question["wrong"] == misses[0]


def test_drills_ask_each_template_about_names_of_other_kinds() -> None:
    drills = sql_questions.drills(per_template=3, seed=4)
    assert len(drills) == 3 * len(sql_questions.TEMPLATES)
    real = sql_questions.generated()
    assert not {q["id"] for q in real} & {d["id"] for d in drills}
    assert not {q["question"] for q in real} & {d["question"] for d in drills}
    for template in sql_questions.TEMPLATES:
        mine = [d for d in drills if d["template"] == template.id]
        assert len(mine) == 3
        first_sibling = next(
            t for t in sql_questions.TEMPLATES if t.kind == template.kind and t is not template
        )
        for drill in mine:
            value = drill["id"].split("/", 1)[1]
            assert value not in sql_questions.values(template.kind)
            assert value in sql_questions.values()
            assert drill["question"] == template.question.format(v=value)
            assert drill["sql"] == template.sql.format(v=value)
            assert drill["wrong"] == first_sibling.sql.format(v=value)
    assert sql_questions.drills(per_template=3, seed=4) == drills
    assert sql_questions.drills(per_template=3, seed=5) != drills


def test_split_holds_out_a_quarter_of_each_template() -> None:
    train, val = sql_questions.split(seed=0)
    assert len(train) + len(val) == len(sql_questions.generated())
    assert not {q["id"] for q in train} & {q["id"] for q in val}
    for template in sql_questions.TEMPLATES:
        mine = [q for q in val if q["template"] == template.id]
        every = [q for q in sql_questions.generated() if q["template"] == template.id]
        assert len(mine) == max(1, round(len(every) / 4))
    assert sql_questions.split(seed=0) == (train, val)
    assert sql_questions.split(seed=1)[1] != val


def test_the_checker_runs_on_its_own_model(langchain_adapter: None, tmp_path: Path) -> None:
    questions = sql_questions.generated()[:4]
    plan = {q["id"]: "caught" for q in questions}  # the writer's query is the near miss
    with (
        OpenAIServer(stand_in.script(questions, plan)) as main,
        sql_training.checker(questions) as fixed,
    ):
        trainer = agl.Trainer(
            run_dir=tmp_path,
            resources={"llm": agl.LLM(endpoint=main.url, model="stand-in"), "checker_llm": fixed},
            instrument=sql_training.INSTRUMENT,
            console=False,
            progress=False,
            plot=False,
        )
        result = trainer.dev(sql_agent.sql_agent, questions)
        served = main.request_count
    assert [r.reward for r in result.results] == [1.0] * 4  # caught, then rewritten right
    for outcome in result.results:
        agents = [call.agent for call in extract_calls(outcome.spans).calls]
        assert agents == ["writer", "checker", "rewriter", "checker"]
    assert served == 8  # the writer's and the rewriter's calls; the checker's went elsewhere


def test_the_teachers_demonstrations(langchain_adapter: None, tmp_path: Path) -> None:
    questions = sql_questions.generated()[::10]
    conversations = sql_training.demonstrations(questions, run_dir=tmp_path, fix_share=0.5, seed=0)
    by_question: dict[str, list[tuple[str, str]]] = {}
    for conversation in conversations:
        system, user, reply = (m["content"] for m in conversation["messages"])
        assert system in (sql_agent.WRITER_PROMPT, sql_agent.REWRITER_PROMPT)
        question = user.split("Question: ", 1)[1].split("\n", 1)[0]
        by_question.setdefault(question, []).append((system, sql_agent.extract_sql(reply)))
    assert len(by_question) == len(questions)
    kinds: Counter[str] = Counter()
    writer, rewriter = sql_agent.WRITER_PROMPT, sql_agent.REWRITER_PROMPT
    for question in questions:
        turns = sorted(by_question[question["question"]])  # conversations come sorted
        right, wrong = question["sql"], question["wrong"]
        if turns == [(writer, right)]:
            kinds["right"] += 1
        elif turns == sorted([(writer, wrong), (rewriter, right)]):
            kinds["fixed"] += 1
        else:
            assert turns == sorted([(writer, wrong), (rewriter, wrong), (rewriter, wrong)])
            kinds["stuck"] += 1
    assert set(kinds) == {"right", "fixed", "stuck"}, kinds


# --- RL on the writer and the rewriter ----------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(600)  # as its siblings': a loaded machine took over 120 s
def test_training_the_writer_and_the_rewriter(
    langchain_adapter: None, tmp_path: Path, recorded_rl: Any
) -> None:
    from agl_torch.tiny import build_tiny_model

    corpus = [sql_agent.WRITER_PROMPT, sql_agent.REWRITER_PROMPT, company_db.schema()]
    model = build_tiny_model(tmp_path / "tiny-model", corpus=corpus)
    result = sql_training.reinforce(
        model, tmp_path, steps=2, tasks_per_step=2, n_samples=2, val_tasks=2, max_tokens=16,
        console=False, algorithm=recorded_rl.algorithm,
        transitions=agl.TransitionBuilder(drop_zero_variance=False),
    )  # fmt: skip
    [policy] = recorded_rl.instances  # one algorithm for both agents
    # the fixed checker's calls go to its own server, not through the gateway
    prompts = {"writer": [sql_agent.WRITER_PROMPT], "rewriter": [sql_agent.REWRITER_PROMPT]}
    absent = [sql_agent.CHECKER_PROMPT]
    rows = check_rl_batches(policy, tmp_path, model, prompts, absent=absent, off_gateway=12)
    for row, batch in zip(rows, policy.batches, strict=True):
        # a random model's queries fail, the fixed checker objects: 2 rewrites per rollout
        assert row["agents/writer/calls"] == 4  # 2 questions x 2 samples
        assert row["agents/rewriter/calls"] == 8
        assert row["agents/checker/calls"] == 12
        assert "agents/checker/transitions" not in row
        assert batch.report.calls_seen == batch.report.notes["other_agents_calls"] == 12
    vals = [row for row in result.history if "val/reward/mean" in row]
    assert [row["step"] for row in vals] == [0, 2]
    # each of the 2 held-out questions asked twice (val_repeats), at both validations
    page = asyncio.run(_val_rollouts(f"sqlite:///{tmp_path}/store.db"))
    assert page.total == 8
    assert (
        Counter(r.input["question"] for r in page.rollouts)
        == {  # type: ignore[index]
            q["question"]: 4 for q in sql_questions.split(seed=0)[1][:2]
        }
    )


async def _val_rollouts(url: str) -> Any:
    async with agl.open_store(url) as store:
        return await store.query_rollouts(mode="val")
