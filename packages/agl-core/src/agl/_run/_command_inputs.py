"""A :class:`~agl.CommandAgent`'s arguments, checked, and its command line, filled in.

Every check names the argument (``command[2]``, ``files``, ``env.PATH``) and what was expected,
at construction where it can be known then; a dict task that lacks a key the command line
asks for is named when its rollout runs.
"""

from __future__ import annotations

import json
import string
from collections.abc import Mapping, Sequence
from contextlib import suppress
from pathlib import Path, PurePosixPath
from typing import Any

from agl._errors import InvalidInputError
from agl._resources import LLM

__all__ = [
    "PLACEHOLDERS",
    "checked_command",
    "checked_env",
    "checked_files",
    "fill",
    "positive",
    "write_files",
]

PLACEHOLDERS = ("task", "workdir", "model", "endpoint")
"""The names a command may use in ``{...}``."""


class _TaskFormatter(string.Formatter):
    """``str.format`` where a task that is not a string is written as JSON."""

    def format_field(self, value: Any, format_spec: str) -> str:
        if not format_spec and not isinstance(value, str | int | float):
            with suppress(TypeError, ValueError):
                return json.dumps(value, ensure_ascii=False)
        return str(super().format_field(value, format_spec))


def fill(command: list[str], task: Any, workdir: Path, llm: LLM | None) -> list[str]:
    values = {
        "task": task,
        "workdir": str(workdir),
        "model": llm.model if llm else "",
        "endpoint": llm.endpoint if llm else "",
    }
    formatter = _TaskFormatter()
    filled = []
    for index, argument in enumerate(command):
        try:
            filled.append(formatter.vformat(argument, (), values))
        except (KeyError, IndexError, TypeError) as error:
            keys = sorted(task) if isinstance(task, Mapping) else type(task).__name__
            raise InvalidInputError(
                f"command[{index}] {argument!r} asks the task for {error}, which it does not "
                f"have (the task: {keys})",
                field=f"command[{index}]",
                value=argument,
            ) from None
    return filled


def checked_command(command: Any) -> list[str]:
    if isinstance(command, str) or not isinstance(command, Sequence):
        raise InvalidInputError(
            "command must be a list of the program and its arguments, e.g. "
            "['claude', '-p', '{task}'] (shlex.split turns a command line into one)",
            field="command",
            value=command,
        )
    if not command:
        raise InvalidInputError("command is empty: name a program to run", field="command")
    for index, argument in enumerate(command):
        if not isinstance(argument, str):
            raise InvalidInputError(
                f"command[{index}] must be a string, got {type(argument).__name__}",
                field=f"command[{index}]",
                value=argument,
            )
        try:
            fields = [
                name for _, name, _, _ in string.Formatter().parse(argument) if name is not None
            ]
        except ValueError as error:
            raise InvalidInputError(
                f"command[{index}] {argument!r} is not a valid template ({error}); write a "
                "literal brace as {{ or }}",
                field=f"command[{index}]",
                value=argument,
            ) from None
        for name in fields:
            root = name.split(".")[0].split("[")[0]
            if root not in PLACEHOLDERS:
                raise InvalidInputError(
                    f"command[{index}] {argument!r} uses the placeholder {{{name}}}; known are "
                    f"{', '.join('{' + p + '}' for p in PLACEHOLDERS)} and {{task[key]}} "
                    "(write a literal brace as {{ or }})",
                    field=f"command[{index}]",
                    value=argument,
                )
    if not command[0].strip():
        raise InvalidInputError("command[0] is blank: name a program", field="command[0]")
    return list(command)


def checked_env(env: Mapping[str, str | None] | None) -> Mapping[str, str | None]:
    if env is None:
        return {}
    if not isinstance(env, Mapping):
        raise InvalidInputError(
            f"env must be a mapping of variable names to strings, got {type(env).__name__}",
            field="env",
        )
    for key, value in env.items():
        if not isinstance(key, str) or not key or "=" in key:
            raise InvalidInputError(f"env has a bad variable name {key!r}", field="env", value=key)
        if value is not None and not isinstance(value, str):
            raise InvalidInputError(
                f"env[{key!r}] must be a string (or None to remove it), got {type(value).__name__}",
                field=f"env.{key}",
                value=value,
            )
    return env


def checked_files(files: Any, field: str) -> Mapping[str, str | bytes]:
    if files is None:
        return {}
    if not isinstance(files, Mapping):
        raise InvalidInputError(
            f"{field} must map relative paths to contents, got {type(files).__name__}",
            field=field,
        )
    for path, content in files.items():
        parts = PurePosixPath(path).parts if isinstance(path, str) else ()
        if not parts or parts[0] == "/" or ".." in parts:
            raise InvalidInputError(
                f"{field} names {path!r}; expected a path relative to the working directory, "
                "without '..'",
                field=field,
                value=path,
            )
        if not isinstance(content, str | bytes):
            raise InvalidInputError(
                f"{field}[{path!r}] must be text or bytes, got {type(content).__name__}",
                field=f"{field}.{path}",
            )
    return files


def write_files(workdir: Path, files: Mapping[str, str | bytes]) -> None:
    for path, content in files.items():
        target = workdir / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content, encoding="utf-8")


def positive(value: Any, field: str, *, allow_none: bool) -> Any:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise InvalidInputError(
            f"{field} must be a number of seconds > 0{' or None' if allow_none else ''}, "
            f"got {value!r}",
            field=field,
            value=value,
        )
    return float(value)
