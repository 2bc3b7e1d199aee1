"""LangGraph text-to-SQL: three agents on a real SQLite database; RL for the writer and rewriter.

::

    # one pass over the validation questions, with a scripted stand-in model (no model needed)
    uv run --no-sync python examples/langgraph_sql/run.py
    # the same with a real model behind any OpenAI-compatible server (vLLM, a hosted API)
    uv run --no-sync python examples/langgraph_sql/run.py --split all \\
        --endpoint http://localhost:8000/v1 --model Qwen/Qwen2.5-Coder-7B-Instruct
    # train the writer and the rewriter with LightningRL (agl-torch), the checker frozen, on a
    # tiny model built in code and warmed up on a sloppy teacher's demonstrations (~6 min)
    uv run --no-sync python examples/langgraph_sql/run.py --train

The agent (``sql_agent.py``) is a LangGraph ``StateGraph`` whose nodes ``writer``, ``checker``
and ``rewriter`` each call ``ChatOpenAI``; the reward runs its final query and the gold query on
the database (``company_db.py``) and compares the rows. The runners trace it with agl's
LangChain instrumentation (``agl-langchain``), which names every node's span after the node, so
each LLM call belongs to an agent. The command line is :class:`agl.Script`'s: the default run
prints a table per agent (its LLM calls, the mean reward of the rollouts it took part in);
``--train`` (``sql_training.py``) asks generated questions (``sql_questions.py``), warms the
tiny model up on a sloppy teacher's demonstrations, then maps the agents to algorithms,
``{"writer": rl, "rewriter": rl, "checker": None}``: one model, served through agl's gateway,
writes and rewrites and is trained on both agents' calls; the checker calls a fixed model of
its own (the ``checker_llm`` resource) and its calls are counted, never trained. It prints each
step's calls and transitions per agent, and the validation reward before and after (the curve:
``reward.png`` in the run directory).
"""

from __future__ import annotations

import company_db
import stand_in
from sql_agent import sql_agent
from sql_training import INSTRUMENT

import agl


def train(run: agl.ScriptRun) -> agl.FitResult:
    """``--train``: warm the tiny model up, then RL for the writer and the rewriter."""
    import sql_training

    return sql_training.train(run.run_dir, steps=run.steps, seed=run.seed, console=run.console)


SCRIPT = agl.Script(
    "langgraph-sql",
    agent=sql_agent,
    tasks=company_db.questions,
    instrument=INSTRUMENT,
    train=train,
    stand_in=lambda tasks: stand_in.script(tasks, stand_in.default_plan(tasks)),
    steps=12,
)

if __name__ == "__main__":
    SCRIPT.main(description=(__doc__ or "").splitlines()[0])
