"""The standard command line of a training script: :class:`Script`.

Every script that trains an agent writes the same parts again: flags, a dev run by default, a
model behind an endpoint or a scripted stand-in, ``--train`` with a map of agents to
algorithms, the tables per agent. :class:`Script` is those parts, so a script keeps only what
is its own::

    import agl
    from support import questions, support_desk
    from agl_torch import LightningRLTorch

    SCRIPT = agl.Script(
        "support-desk",
        agent=support_desk,
        tasks=questions,  # split ("train", "val" or "all") -> the tasks
        instrument=["openai"],
        algorithm=lambda run: {"support": LightningRLTorch("models/base"), "*": None},
    )

    if __name__ == "__main__":
        SCRIPT.main()

``python run.py`` runs the agent once over the validation tasks (:meth:`Trainer.dev`) against
the model at ``--endpoint`` (or the script's stand-in) and prints a table per agent: its LLM
calls and the mean reward of the rollouts it took part in. ``python run.py --train`` trains
(:meth:`Trainer.fit`) and prints each step's calls and transitions per agent. The flags:
``--run-dir``, ``--split``, ``--endpoint``, ``--model``, ``--steps``, ``--seed``,
``--n-runners``, ``--quiet``, and any the script adds.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agl._errors import InvalidInputError
from agl._resources import LLM, Resource
from agl._results import FitResult
from agl._train._trainer import Trainer

__all__ = ["Script", "ScriptRun"]

SPLITS = ("train", "val", "all")


@dataclass(frozen=True)
class ScriptRun:
    """What one invocation of a :class:`Script` asked for, as its callbacks see it.

    Attributes:
        run_dir: Where the run writes (``--run-dir``; ``runs/<script name>`` by default).
        split: Which tasks (``--split``; ``train`` with ``--train``, else ``val``).
        tasks: The tasks of that split.
        steps: Training steps (``--steps``).
        seed: Seeds the script's data and model (``--seed``).
        llm: The model the agents call: ``--endpoint``'s, or the script's stand-in (None
            when there is neither).
        n_runners: Runner processes (``--n-runners``).
        console: Where progress and summaries go: True, or False with ``--quiet``.
        options: The flags the script added (:attr:`Script.add_arguments`), by name.
    """

    run_dir: Path
    split: str
    tasks: list[Any]
    steps: int
    seed: int = 0
    llm: LLM | None = None
    n_runners: int = 1
    console: bool = True
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class Script:
    """A training script's command line, dev run and training run, from its own parts.

    Args:
        name: Names the default run directory (``runs/<name>``).
        agent: The rollout (an :func:`agl.rollout` function or an :class:`agl.Agent`).
        tasks: Returns the tasks of a split: ``"train"``, ``"val"`` or ``"all"``.
        instrument: What the runners trace (:class:`Trainer`'s ``instrument``; None: its
            default).
        algorithm: Builds what ``--train`` trains with (anything :class:`Trainer` takes as
            ``algorithm``: one algorithm, or a map of agent names or patterns to algorithms).
        train: Instead of ``algorithm``: the script's own training (a warm-up first, say),
            returning the run's :class:`FitResult`.
        stand_in: Builds a scripted stand-in for a model from the tasks (a handler for
            :class:`agl.testing.openai_server.OpenAIServer`), served when no ``--endpoint``
            is given: the script then runs with nothing else installed.
        max_model_len: The stand-in's context, in tokens (a coding program's prompts, with
            its tools and instructions, need more than the default).
        gateway: Serve the model through agl's gateway in the dev run too
            (:meth:`Trainer.dev`'s ``gateway``), as training serves the model it trains: the
            calls are then recorded with the engine's token ids, and seen at all where no
            instrumentor sees them (an agent that is a program: :class:`agl.CommandAgent`).
        resources: The resources a training run publishes beside the algorithm's (the model
            of an agent that stays frozen, say: ``lambda run: {"checker_llm": run.llm}``; a
            None there, for want of a model, is refused naming it); a dev run publishes
            ``{"llm": run.llm}``.
        steps: ``--steps``' default.
        trained: Said after training (``"only the writer was trained"``).
        concurrency: Rollouts each runner runs at once.
        add_arguments: Adds the script's own flags to the parser (read back from
            :attr:`ScriptRun.options`).
    """

    name: str
    agent: Any
    tasks: Callable[[str], Sequence[Any]]
    instrument: Sequence[str] | None = None
    algorithm: Callable[[ScriptRun], Any] | None = None
    train: Callable[[ScriptRun], FitResult] | None = None
    stand_in: Callable[[Sequence[Any]], Any] | None = None
    max_model_len: int = 8192
    gateway: bool = False
    resources: Callable[[ScriptRun], Mapping[str, Resource | None]] | None = None
    steps: int = 3
    trained: str = ""
    concurrency: int = 8
    add_arguments: Callable[[argparse.ArgumentParser], None] | None = None

    def __post_init__(self) -> None:
        if self.algorithm is not None and self.train is not None:
            raise InvalidInputError(
                f"script {self.name!r}: give algorithm (what the standard training trains "
                "with) or train (the script's own training), not both",
                field="train",
            )

    # --- the command line ---------------------------------------------------------------------

    def parser(self, description: str | None = None) -> argparse.ArgumentParser:
        """The script's argument parser: the standard flags and the script's own."""
        parser = argparse.ArgumentParser(description=description)
        parser.add_argument("--run-dir", type=Path, default=Path("runs") / self.name)
        parser.add_argument("--split", choices=SPLITS, default=None)
        parser.add_argument("--endpoint", help="an OpenAI-compatible base URL (default: stand-in)")
        parser.add_argument("--model", default="stand-in", help="the model name to ask for")
        parser.add_argument("--train", action="store_true", help="train (default: one dev pass)")
        parser.add_argument("--steps", type=int, default=self.steps, help="training steps")
        parser.add_argument("--seed", type=int, default=0, help="seeds the data and the model")
        parser.add_argument("--n-runners", type=int, default=1, help="runner processes")
        parser.add_argument("--quiet", action="store_true", help="no progress or summaries")
        if self.add_arguments is not None:
            self.add_arguments(parser)
        return parser

    def main(self, argv: Sequence[str] | None = None, description: str | None = None) -> FitResult:
        """Parse the command line, run, print the tables per agent; return the run's result."""
        from rich.console import Console

        args = self.parser(description).parse_args(argv)
        standard = {"run_dir", "split", "endpoint", "model", "train", "steps", "seed"}
        standard |= {"n_runners", "quiet"}
        split = args.split or ("train" if args.train else "val")
        tasks = list(self.tasks(split))
        out = Console()
        with self.model(args.endpoint, args.model, tasks) as llm:
            run = ScriptRun(
                run_dir=args.run_dir,
                split=split,
                tasks=tasks,
                steps=args.steps,
                seed=args.seed,
                llm=llm,
                n_runners=args.n_runners,
                console=not args.quiet,
                options={k: v for k, v in vars(args).items() if k not in standard},
            )
            if args.train:
                result = self.fit(run)
                self.print_training(result, run, out)
            else:
                if llm is None:
                    raise InvalidInputError(
                        f"script {self.name!r} has no stand-in model: give --endpoint",
                        field="endpoint",
                    )
                result = self.dev(run.tasks, llm, run_dir=run.run_dir, console=run.console)
                self.print_dev(result, out)
        return result

    @contextlib.contextmanager
    def model(self, endpoint: str | None, model: str, tasks: Sequence[Any]) -> Iterator[LLM | None]:
        """The model the agents call: ``endpoint``'s, else the stand-in served for ``tasks``."""
        if endpoint is not None:
            yield LLM(endpoint=endpoint, model=model)
        elif self.stand_in is None:
            yield None
        else:
            from agl.testing.openai_server import OpenAIServer

            handler = self.stand_in(list(tasks))
            with OpenAIServer(handler, max_model_len=self.max_model_len) as server:
                yield LLM(endpoint=server.url, model=model)

    # --- the runs -----------------------------------------------------------------------------

    def dev(
        self,
        tasks: Sequence[Any],
        llm: LLM,
        *,
        run_dir: Path,
        console: Any = True,
        n_runners: int = 1,
    ) -> FitResult:
        """Run the agent once over ``tasks`` with ``llm`` (published as ``"llm"``, through
        agl's gateway with :attr:`gateway`); nothing is trained."""
        trainer = Trainer(
            run_dir=run_dir,
            resources={"llm": llm},
            concurrency=self.concurrency,
            n_runners=n_runners,
            instrument=self.instrument,
            console=console,
            progress=console is not False,
            plot=False,
        )
        return trainer.dev(self.agent, list(tasks), gateway=self.gateway)

    def fit(self, run: ScriptRun) -> FitResult:
        """Train: the script's own ``train``, or a :class:`Trainer` with its ``algorithm``."""
        if self.train is not None:
            return self.train(run)
        if self.algorithm is None:
            raise InvalidInputError(
                f"script {self.name!r} trains nothing: it gives no algorithm", field="algorithm"
            )
        given = dict(self.resources(run)) if self.resources is not None else {}
        missing = sorted(name for name, value in given.items() if value is None)
        if missing:
            raise InvalidInputError(
                f"script {self.name!r}: resources {missing} have no model: give --endpoint "
                "(the script has no stand-in)",
                field="endpoint",
            )
        resources = {name: value for name, value in given.items() if value is not None}
        trainer = Trainer(
            algorithm=self.algorithm(run),
            resources=resources or None,
            run_dir=run.run_dir,
            concurrency=self.concurrency,
            n_runners=run.n_runners,
            instrument=self.instrument,
            console=run.console,
            progress=run.console,
            plot=False,
        )
        return trainer.fit(self.agent, run.tasks)

    # --- what it prints -----------------------------------------------------------------------

    def print_dev(self, result: FitResult, out: Any) -> None:
        """The table per agent and the mean reward of a dev run."""
        from agl.lightning import agent_stats, agents_table

        out.print(agents_table(agent_stats(result.results)))
        rewards = [r.reward or 0.0 for r in result.results]
        mean = statistics.fmean(rewards) if rewards else 0.0
        out.print(
            f"mean reward {mean:.3f} over {len(rewards)} tasks; "
            f"traces: agl rollouts list --store {result.store_url}"
        )

    def print_training(self, result: FitResult, run: ScriptRun, out: Any) -> None:
        """Each step's calls and transitions per agent, and the validation reward if any."""
        from agl._train._metrics_read import read_metrics
        from agl.lightning import agent_steps_table

        out.print(agent_steps_table(read_metrics(run.run_dir)))
        vals = [row["val/reward/mean"] for row in result.history if "val/reward/mean" in row]
        said = [f"validation reward {vals[0]:.3f} -> {vals[-1]:.3f}"] if vals else []
        said += [f"{result.duration_s / 60:.1f} min", self.trained, f"run dir: {run.run_dir}"]
        out.print("; ".join(part for part in said if part))
