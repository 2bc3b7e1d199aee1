"""Agents that are programs: run a command line per rollout, through agl's gateway.

::

    def wrote_hello(result: agl.CommandResult) -> float:
        return 1.0 if result.read("hello.txt") == "hi\\n" else 0.0

    agent = agl.CommandAgent(
        ["claude", "-p", "{task}", "--dangerously-skip-permissions"],
        reward=wrote_hello,
        timeout=300,
    )
    agl.Trainer(algorithm, ...).fit(agent, ["Create hello.txt containing hi"])

For each rollout, :class:`CommandAgent`:

1. makes a fresh working directory (and a throwaway home beside it), and writes ``files`` into
   it, and a dict task's ``"files"`` (``{"relative/path": "content"}``);
2. fills the task into the command: ``{task}`` is the task (a string as it is, anything else
   as JSON), ``{task[key]}`` one entry of a dict task, ``{workdir}`` the directory,
   ``{model}`` and ``{endpoint}`` the rollout's LLM;
3. points the program at the attempt's gateway URL through what it reads (a *harness*, picked
   from the program's name or given): Claude Code gets ``ANTHROPIC_BASE_URL``/``_API_KEY``/
   ``_MODEL``, the Codex CLI a config with a model provider at the gateway; both get their
   telemetry, update checks and plugin downloads turned off (:mod:`agl._run._command_harness`).
   Any other program gets ``OPENAI_BASE_URL``, ``OPENAI_API_KEY`` and ``OPENAI_MODEL``;
4. runs it in its own process group with ``timeout`` (killing the whole group when it passes,
   or when the rollout itself is timed out or cancelled), keeping the last ``output_limit``
   bytes of stdout and stderr, inside an :class:`agl.agent_span` named ``name``: the
   program's calls are that agent's (a table per agent, ``algorithm={name: ...}``);
5. records the :class:`CommandResult` on the rollout (``agl.emit_object``), and returns what
   ``reward(result)`` says (by default 1.0 for exit status 0 within the time, else 0.0), which
   the runner records as the rollout's reward;
6. removes the directory (``keep_workdir=True`` keeps it).

The program's model calls go through the gateway, which records them token-exact; that is
what training learns from. A program that is not installed fails the attempt with an error
naming it and, for a harness, the command that installs the version agl was checked with.
"""

from __future__ import annotations

import inspect
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agl._errors import InvalidInputError
from agl._resources import LLM
from agl._rollouts import Attempt
from agl._run._agent import LitAgent
from agl._run._command_harness import Harness, harness_named
from agl._run._command_inputs import (
    checked_command,
    checked_env,
    checked_files,
    fill,
    positive,
    write_files,
)
from agl._run._command_process import run_process

__all__ = ["CommandAgent", "CommandResult"]

Reward = Callable[["CommandResult"], Any]
"""``reward(result)``: a float, a dict of named floats, or None; may be async."""


@dataclass(frozen=True)
class CommandResult:
    """What one run of the command left: what a reward function scores.

    Attributes:
        task: The rollout's input.
        command: The command line as run (placeholders filled in).
        exit_code: The program's exit status; negative when a signal ended it (``-15``,
            ``-9`` after a timeout).
        timed_out: Whether ``timeout`` passed and the process group was killed.
        stdout: The last ``output_limit`` bytes the program wrote to stdout, decoded.
        stderr: Likewise for stderr.
        stdout_bytes: How many bytes it wrote to stdout in all (more than ``stdout`` holds
            when it was cut).
        stderr_bytes: Likewise for stderr.
        duration: Seconds from start to exit.
        workdir: The working directory, which holds the files the program wrote (removed
            after the reward function returns, unless ``keep_workdir``).
    """

    task: Any
    command: list[str]
    exit_code: int | None
    timed_out: bool
    stdout: str
    stderr: str
    stdout_bytes: int
    stderr_bytes: int
    duration: float
    workdir: Path

    @property
    def ok(self) -> bool:
        """Whether the program exited with status 0 within its time."""
        return self.exit_code == 0 and not self.timed_out

    def read(self, path: str) -> str | None:
        """The text of a file in :attr:`workdir` (``path`` relative to it); None if absent."""
        try:
            return (self.workdir / path).read_text(encoding="utf-8", errors="replace")
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None


def exit_status_reward(result: CommandResult) -> float:
    """The default reward: 1.0 when the program exited with status 0 in time, else 0.0."""
    return 1.0 if result.ok else 0.0


class CommandAgent(LitAgent):
    """Run a command line per rollout, as an agent; see :mod:`agl._run._command_agent`.

    Args:
        command: The program and its arguments, a list (``["claude", "-p", "{task}"]``), with
            placeholders ``{task}``, ``{task[key]}``, ``{workdir}``, ``{model}``,
            ``{endpoint}``.
        harness: ``"claude-code"``, ``"codex"``, ``None`` (a plain program: ``OPENAI_*``
            variables), or ``"auto"``: the harness whose program ``command[0]`` names.
        reward: ``reward(result: CommandResult)`` returns the rollout's reward (a float, a
            dict of named floats, or None when it emits rewards itself); may be async.
        timeout: Seconds the program may run before its process group is killed; the reward
            function still scores the result (``timed_out=True``). None: only the rollout's
            own ``timeout_seconds`` limits it (which fails the attempt).
        env: Variables to set for the program (a None value removes one), applied last.
        files: Files to write into each working directory: ``{"relative/path": content}``.
        output_limit: Bytes of stdout, and of stderr, to keep (the last ones).
        kill_grace: Seconds between SIGTERM and SIGKILL when ``timeout`` passes.
        keep_workdir: Keep each rollout's directory (its path is on the recorded result).
        workdir_root: Where to make the directories (the system's temporary directory).
        name: The agent's name in traces, which its LLM calls are attributed to
            (``command[0]``'s program name by default).
    """

    def __init__(
        self,
        command: Sequence[str],
        *,
        harness: str | None = "auto",
        reward: Reward | None = None,
        timeout: float | None = None,
        env: Mapping[str, str | None] | None = None,
        files: Mapping[str, str | bytes] | None = None,
        output_limit: int = 32 * 1024,
        kill_grace: float = 2.0,
        keep_workdir: bool = False,
        workdir_root: str | os.PathLike[str] | None = None,
        name: str | None = None,
    ) -> None:
        self.command = checked_command(command)
        try:
            self.harness: Harness | None = harness_named(harness, self.command[0])
        except ValueError as error:
            raise InvalidInputError(
                f"harness {harness!r} is not known: {error}", field="harness", value=harness
            ) from None
        if reward is not None and not callable(reward):
            raise InvalidInputError(
                f"reward must be a function of the result, got {type(reward).__name__}",
                field="reward",
            )
        self.reward: Reward = reward or exit_status_reward
        self.timeout = positive(timeout, "timeout", allow_none=True)
        self.env = dict(checked_env(env))
        self.files = dict(checked_files(files, "files"))
        if isinstance(output_limit, bool) or not isinstance(output_limit, int) or output_limit < 0:
            raise InvalidInputError(
                f"output_limit must be a number of bytes >= 0, got {output_limit!r}",
                field="output_limit",
                value=output_limit,
            )
        self.output_limit = output_limit
        self.kill_grace = positive(kill_grace, "kill_grace", allow_none=False)
        self.keep_workdir = keep_workdir
        self.workdir_root = None if workdir_root is None else str(workdir_root)
        self.name = name or Path(self.command[0]).name

    def __repr__(self) -> str:
        harness = self.harness.name if self.harness else None
        return f"CommandAgent({self.command!r}, harness={harness!r})"

    async def rollout(
        self, task: Any, llm: LLM | None = None, attempt: Attempt | None = None
    ) -> Any:
        """Run the command on ``task`` with ``llm`` and return its reward."""
        from agl._run._emitters import agent_span, emit_object

        label = attempt.attempt_id if attempt is not None else "command"
        root = Path(tempfile.mkdtemp(prefix=f"agl-{label}-", dir=self.workdir_root))
        try:
            with agent_span(self.name):  # the program's calls are this agent's
                result = await self._run(task, llm, root)
            emit_object(result, require_rollout=False)
            value = self.reward(result)
            return await value if inspect.isawaitable(value) else value
        finally:
            if not self.keep_workdir:
                shutil.rmtree(root, ignore_errors=True)

    async def _run(self, task: Any, llm: LLM | None, root: Path) -> CommandResult:
        workdir, home = root / "work", root / "home"
        workdir.mkdir()
        home.mkdir()
        write_files(workdir, self.files)
        if isinstance(task, Mapping) and task.get("files") is not None:
            write_files(workdir, checked_files(task["files"], "task['files']"))
        env = self._environment(llm, home)
        argv = fill(self.command, task, workdir, llm)
        if shutil.which(argv[0], path=env.get("PATH", os.defpath)) is None:
            raise InvalidInputError(self._not_found(argv[0]), field="command[0]", value=argv[0])
        finished = await run_process(
            argv,
            cwd=workdir,
            env=env,
            timeout=self.timeout,
            output_limit=self.output_limit,
            kill_grace=self.kill_grace,
        )
        return CommandResult(
            task=task,
            command=argv,
            exit_code=finished.exit_code,
            timed_out=finished.timed_out,
            stdout=finished.stdout.decode("utf-8", errors="replace"),
            stderr=finished.stderr.decode("utf-8", errors="replace"),
            stdout_bytes=finished.stdout_bytes,
            stderr_bytes=finished.stderr_bytes,
            duration=finished.duration,
            workdir=workdir,
        )

    def _environment(self, llm: LLM | None, home: Path) -> dict[str, str]:
        env = dict(os.environ)
        if self.harness is not None:
            if llm is None:
                raise InvalidInputError(
                    f"{self.harness.name} needs an LLM resource to call, and this rollout has "
                    "none; publish one (agl.LLM(endpoint=gateway.endpoint_template, ...))",
                    field="llm",
                )
            env = self.harness.environment(env, llm.endpoint, llm.model, _key(llm), home)
        elif llm is not None:
            env.update(
                OPENAI_BASE_URL=llm.endpoint, OPENAI_API_KEY=_key(llm), OPENAI_MODEL=llm.model
            )
        for key, value in self.env.items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value
        return env

    def _not_found(self, program: str) -> str:
        message = f"command {program!r} (command[0] of {self.name!r}) is not on PATH"
        if self.harness is not None:
            return f"{message}; install {self.harness.name} with: {self.harness.install}"
        return f"{message}; install it, or give its full path"


# --- helpers --------------------------------------------------------------------------------


def _key(llm: LLM) -> str:
    # The gateway checks a key only when it was started with a token; the programs insist
    # on having one regardless.
    return llm.api_key or "unused"
