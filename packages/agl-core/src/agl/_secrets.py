"""Secrets (tokens, API keys) from a file or the environment, never from the command line.

A value on the command line is visible to every user of the machine (``ps``,
``/proc/PID/cmdline``); a file readable by the service's user, or an environment variable
(``/proc/PID/environ`` is readable only by that user and root), is not. So every secret agl
takes has these forms; give one (two is an error: which should win is a guess):

- ``--x-file PATH`` on the command line (or the ``X_FILE`` environment variable): the file
  holds the secret on one line; it is read once, at start, and its trailing newline dropped;
- ``X``, the environment variable itself;
- ``--x VALUE`` on the command line, for experiments on loopback only.

The file's permissions are the operator's business: agl does not refuse a file others can read,
because container secret mounts are (Kubernetes mounts secrets 0644 by default, Docker 0444).
On a shared host, make it 0600.
"""

from __future__ import annotations

import os
from pathlib import Path

from agl._errors import InvalidInputError

__all__ = ["env_secret", "read_secret_file", "secret_option"]


def read_secret_file(path: str | os.PathLike[str], *, option: str) -> str:
    """Read the secret held in the file ``path`` (given as ``option``), one trailing newline off.

    Raises:
        InvalidInputError: the file is missing, unreadable, not text, empty or of several
            lines; the message names ``option`` and the file, never its content.
    """
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        problem = "does not exist"
    except IsADirectoryError:
        problem = "is a folder, not a file"
    except PermissionError:
        problem = f"is not readable by this user (uid {os.getuid()})"
    except UnicodeDecodeError:
        problem = "is not UTF-8 text"
    except OSError as exc:
        problem = f"cannot be read ({exc.strerror or type(exc).__name__})"
    else:
        secret = text.removesuffix("\n").removesuffix("\r")
        if not secret.strip():
            problem = "is empty"
        elif "\n" in secret or "\r" in secret:
            problem = "holds more than one line"
        else:
            return secret
    raise InvalidInputError(
        f"{option}: the file {str(file)!r} {problem}; it must hold the secret on its first line",
        field=option,
        value=str(file),
    )


def secret_option(
    value: str | None, file: str | os.PathLike[str] | None, *, option: str, file_option: str
) -> str | None:
    """The secret given as ``option`` (a value, or its environment variable) or ``file_option``.

    Raises:
        InvalidInputError: both were given (which one should win is a guess), or the file is
            wrong (see :func:`read_secret_file`).
    """
    if file is not None and value is not None:
        raise InvalidInputError(
            f"give {option} or {file_option}, not both (each may come from its environment "
            "variable: unset the one you do not mean)",
            field=file_option,
        )
    if file is not None:
        return read_secret_file(file, option=file_option)
    return value


def env_secret(name: str) -> str | None:
    """The environment variable ``name``, or else the content of the file ``{name}_FILE`` names.

    Raises:
        InvalidInputError: both are set, or the file is wrong (see :func:`read_secret_file`).
    """
    return secret_option(
        os.environ.get(name) or None,
        os.environ.get(f"{name}_FILE") or None,
        option=name,
        file_option=f"{name}_FILE",
    )
